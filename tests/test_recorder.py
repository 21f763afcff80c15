"""The package's one recorder of collectives (ddp_lab.collectives.recorder), on 2 real gloo ranks,
and the rule that keeps it one: a single TorchDispatchMode in ddp_lab, a single class of each name
for what a rank issued and what it sends, the byte formulas torch-free in ddp_lab.cost."""

import ast
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

import ddp_lab

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "ddp_lab"


def _classes():
    """(module path, class name, names of its bases) for every class defined anywhere in ddp_lab."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.ClassDef):
                bases = [b.attr if isinstance(b, ast.Attribute) else getattr(b, "id", "") for b in node.bases]
                found.append((path.relative_to(ROOT).as_posix(), node.name, bases))
    return found


def test_one_dispatch_mode_recorder_in_the_package():
    recorders = [(path, name) for path, name, bases in _classes() if "TorchDispatchMode" in bases]
    assert recorders == [("ddp_lab/collectives/recorder.py", "_Recorder")], (
        f"TorchDispatchMode subclasses in ddp_lab: {recorders}; record collectives with "
        f"ddp_lab.collectives.recorder.record_collectives instead of writing another")


@pytest.mark.parametrize("name", ["Collective", "Traffic"])
def test_one_class_of_each_name_for_what_a_rank_issued_and_sends(name):
    where = [path for path, defined, _ in _classes() if defined == name]
    assert len(where) <= 1, f"{len(where)} classes named {name}: {where}"


def test_the_byte_formulas_import_without_torch():
    code = ("import sys, json, ddp_lab.cost.ring_bytes, ddp_lab.cost.fsdp\n"
            "print(json.dumps(sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.'))))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == []


def test_operator_names_become_the_collectives_usual_names():
    from ddp_lab.collectives.recorder import collective_name

    assert collective_name("c10d.allreduce_.default") == "all_reduce"
    assert collective_name("c10d._allgather_base_.default") == "all_gather"
    assert collective_name("c10d._reduce_scatter_base_.default") == "reduce_scatter"
    assert collective_name("_c10d_functional.all_gather_into_tensor.default") == "all_gather"
    assert collective_name("c10d.send.default") == "send"
    assert collective_name("c10d.recv_.default") == "recv"
    assert collective_name("_c10d_functional.wait_tensor.default") is None
    assert collective_name("aten.mm.default") is None


def issue_every_kind():
    """In a rank: one collective of each kind, and a message, under one log, in two blocks."""
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor

    from ddp_lab.collectives.recorder import CollectiveLog, record_collectives

    rank = dist.get_rank()
    mesh = init_device_mesh("cpu", (2,))
    sharded = distribute_tensor(torch.ones(8), mesh, [Shard(0)])  # 4 values on each rank
    partial = DTensor.from_local(torch.ones(4), mesh, [Partial()])
    log = CollectiveLog()
    with record_collectives(log):
        log.phase = "plain"
        dist.all_reduce(torch.ones(4))
        dist.all_gather_into_tensor(torch.empty(8), torch.ones(4))
        dist.reduce_scatter_tensor(torch.empty(2), torch.ones(4))
        dist.broadcast(torch.ones(3, dtype=torch.float64), src=0)
    torch.ones(2) + 1  # outside the blocks: not recorded, and neither is this all-reduce
    dist.all_reduce(torch.ones(1))
    with record_collectives(log):
        log.phase = "functional"
        partial.redistribute(mesh, [Replicate()]).to_local()  # DTensor's functional collectives
        sharded.redistribute(mesh, [Replicate()]).to_local()
        log.phase = "message"
        if rank == 0:
            dist.send(torch.ones(5), dst=1)
        else:
            dist.recv(torch.empty(5), src=0)
    return [(c.name, c.phase, c.numel, c.nbytes, c.dtype, c.shapes, c.group_size) for c in log.calls]


def test_the_recorder_writes_down_what_each_collective_hands_over():
    calls = ddp_lab.launch(issue_every_kind, 2, backend="gloo", timeout=120)
    expected = [
        ("all_reduce", "plain", 4, 16, "float32", ((4,),), 2),
        ("all_gather", "plain", 8, 32, "float32", ((8,),), 2),        # the output
        ("reduce_scatter", "plain", 4, 16, "float32", ((4,),), 2),    # the input
        ("broadcast", "plain", 3, 24, "float64", ((3,),), 2),
        ("all_reduce", "functional", 4, 16, "float32", ((4,),), 2),
        ("all_gather", "functional", 8, 32, "float32", ((4,),), 2),   # handed the shard: output counted
    ]
    assert calls[0] == expected + [("send", "message", 5, 20, "float32", ((5,),), 2)]
    assert calls[1] == expected + [("recv", "message", 5, 20, "float32", ((5,),), 2)]


def issue_on_each_mesh_dimension():
    """In a rank of 4: one all-reduce over each dimension of a 2x2 mesh (c10d's and DTensor's)."""
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Partial, Replicate

    from ddp_lab.collectives.recorder import record_collectives

    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    names = {dim: mesh.get_group(dim).group_name for dim in ("dp", "tp")}
    with record_collectives() as log:
        dist.all_reduce(torch.ones(2), group=mesh.get_group("dp"))
        DTensor.from_local(torch.ones(3), mesh["tp"], [Partial()]).redistribute(mesh["tp"], [Replicate()])
    return ([(c.name, c.numel, c.group_size, c.group_name) for c in log.calls],
            {dim: log.nbytes(group_name=name) for dim, name in names.items()}, names)


def clip_sharded_gradients():
    """In a rank of 2: clip_grad_norm_ on FSDP2's DTensor gradients, recorded."""
    import torch
    from torch.distributed.fsdp import fully_shard

    from ddp_lab.collectives.recorder import record_collectives

    torch.manual_seed(0)
    model = torch.nn.Linear(4, 4)
    fully_shard(model)
    model(torch.ones(2, 4)).sum().backward()
    with record_collectives() as log:
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    return [(c.name, c.numel) for c in log.calls]


def test_the_recorder_sees_the_collectives_dtensor_issues_inside_an_operator():
    """The norm of sharded gradients takes one all-reduce, of the two parameters' partial norms
    stacked: DTensor issues it while it runs an operator under the recorder's mode. Before the
    recorder let DTensor run first, it saw no collective here at all."""
    for calls in ddp_lab.launch(clip_sharded_gradients, 2, backend="gloo", timeout=120):
        assert calls == [("all_reduce", 2)]


def test_the_recorder_names_the_group_of_each_collective():
    """Both dimensions of a 2x2 mesh have groups of 2 ranks: only the group's name tells them apart."""
    for calls, per_dimension, names in ddp_lab.launch(issue_on_each_mesh_dimension, 4, backend="gloo",
                                                      timeout=120):
        assert names["dp"] != names["tp"]
        assert calls == [("all_reduce", 2, 2, names["dp"]), ("all_reduce", 3, None, names["tp"])]
        assert per_dimension == {"dp": 8, "tp": 12}


def test_a_log_must_be_a_collective_log():
    from ddp_lab.collectives.recorder import record_collectives

    with pytest.raises(TypeError, match="log must be a CollectiveLog .* got list"):
        with record_collectives([]):
            pass


def test_the_chapters_import_the_recorder_from_its_one_home():
    """No module re-exports the recorder under another name: the chapters import it from
    ddp_lab.collectives.recorder (15d once imported it through a shim, model_parallel/traffic.py)."""
    assert Counter(name for _, name, _ in _classes())["CollectiveLog"] == 1
    importers = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        if "import Collective, CollectiveLog, record_collectives" in text and path.name != "recorder.py":
            importers.add(path.relative_to(ROOT).as_posix())
    assert importers == set(), f"re-exports of the recorder: {importers}"
    for notebook in sorted((ROOT / "book").rglob("*.ipynb")):
        for line in notebook.read_text().splitlines():
            if "import record_collectives" in line:
                assert "ddp_lab.collectives.recorder import" in line, (notebook.name, line)
