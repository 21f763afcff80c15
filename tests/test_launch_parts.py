"""The pure pieces of the launcher: environment, output rendering, 'where'."""

import inspect
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

from ddp_lab.host import loopback_interface, uses_nccl
from ddp_lab.launcher.config import TIMEOUT_MARGIN, LaunchConfig, make_config
from ddp_lab.launcher.output import RankOutput, render_by_rank
from ddp_lab.launcher.where_stuck import describe_where
from ddp_lab.launcher.worker_env import torchrun_environment, worker_environment
from ddp_lab.launcher.worker_group import WorkerGroup

PACKAGE = Path(__file__).resolve().parents[1] / "ddp_lab"


def test_torchrun_environment_splits_ranks_over_nodes():
    envs = [torchrun_environment(r, 8, nodes=2, master_port=1234) for r in range(8)]
    assert [e["LOCAL_RANK"] for e in envs] == ["0", "1", "2", "3"] * 2
    assert [e["GROUP_RANK"] for e in envs] == ["0"] * 4 + ["1"] * 4
    assert {e["LOCAL_WORLD_SIZE"] for e in envs} == {"4"}
    assert {e["MASTER_PORT"] for e in envs} == {"1234"}


def test_a_ranks_environment_is_composed_in_one_place():
    nccl = LaunchConfig(world_size=4, nodes=2, backend="nccl", threads=1, timeout=60.0,
                        init_process_group=True)
    notebook = {"HOME": "/home/reader", "GLOO_SOCKET_IFNAME": "eth9",
                "TORCHELASTIC_USE_AGENT_STORE": "True"}
    env = worker_environment(nccl, 3, 1234, notebook)
    assert (env["HOME"], env["RANK"], env["LOCAL_RANK"], env["MASTER_PORT"]) == (
        "/home/reader", "3", "1", "1234")
    assert env["CUDA_VISIBLE_DEVICES"] == "2,3"  # node 1 sees its own two GPUs, from 0
    assert env["GLOO_SOCKET_IFNAME"] == loopback_interface()  # a launch stays on loopback (issue 35.2)
    spawned = worker_environment(replace(nccl, backend="gloo", nodes=1, style="spawn"), 1, None, notebook)
    assert "TORCHELASTIC_USE_AGENT_STORE" not in spawned and "MASTER_PORT" not in spawned
    assert "CUDA_VISIBLE_DEVICES" not in spawned and spawned["RANK"] == "1"


def test_output_keeps_a_character_split_across_reads_whole():
    output = RankOutput()
    data = "λ ok\n".encode()
    output.feed(data[:1])
    output.feed(data[1:])
    assert output.take() == "λ ok\n"
    assert output.take() == ""


def test_render_labels_every_line_and_keeps_rank_order():
    assert render_by_rank(["a\nb\n", "", "c"]) == "[rank 0] a\n[rank 0] b\n[rank 2] c\n"


def test_where_names_the_collective_and_the_calling_line():
    import torch.distributed.distributed_c10d as c10d

    frames = [
        ("/tmp/ipykernel_1/2.py", 4, "work", "dist.all_reduce(t)"),
        (c10d.__file__, 100, "wrapper", "return func(*args)"),
        (c10d.__file__, 200, "all_reduce", "work.wait()"),
    ]
    assert describe_where(frames) == (
        "waiting in all_reduce() (torch.distributed), called from work() line 4: dist.all_reduce(t)")
    assert describe_where(frames[:1]) == "running work() line 4: dist.all_reduce(t)"
    assert describe_where([("<ddp cell 3>", 2, "<module>", "x = 1")]) == "running cell line 2: x = 1"
    assert describe_where([]) == "no Python stack (stuck in C code)"


def test_the_launch_benchmark_prints_its_figures():
    run = subprocess.run([sys.executable, "-m", "ddp_lab.bench", "launch", "--world-size", "2",
                          "--repeats", "2"], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    for row in ["ddp_lab.launch, first call", "ddp_lab.launch, repeated",
                "plain fork + gloo init", "gloo teardown left to the exit", "torch.multiprocessing.spawn"]:
        assert row in run.stdout
    assert run.stdout.count("x\n") == 5


def test_auto_on_a_gpu_box_keeps_a_cpu_backend_in_the_group(monkeypatch):
    # Issue 34: with a GPU for every rank, plain "nccl" gives a group whose
    # device map torch builds as {"cuda": "nccl"} only, and every collective on a
    # CPU tensor raises "No backend type associated with device type cpu". The
    # backend 'auto' initialises must map cpu to gloo and cuda to nccl.
    from torch.distributed.distributed_c10d import Backend, BackendConfig

    from ddp_lab.launcher import config

    monkeypatch.setattr(config, "cuda_device_count", lambda: 2)
    monkeypatch.setattr(config, "say_once", lambda message: None)
    chosen = config.choose_backend("auto", 2)
    devices = BackendConfig(Backend(chosen)).get_device_backend_map()
    assert devices == {"cpu": "gloo", "cuda": "nccl"}, devices
    assert BackendConfig(Backend("nccl")).get_device_backend_map() == {"cuda": "nccl"}  # what the old code made
    assert uses_nccl(chosen) and uses_nccl("nccl") and not uses_nccl("gloo")
    monkeypatch.setattr(config, "cuda_device_count", lambda: 1)
    assert config.choose_backend("auto", 2) == "gloo"  # fewer GPUs than ranks: gloo for everything


def test_the_book_scripts_inside_an_installed_wheel_count_as_the_readers_code():
    # pip install ddp-lab puts labs/scripts/ at ddp_lab/book_scripts/: a hang there is
    # reported at the script's line (Chapter 13b on Colab), not at runpy's frame above it
    from ddp_lab.launcher import where_stuck

    script = where_stuck._BOOK_SCRIPTS_DIR + "hang_mismatch.py"
    assert where_stuck._is_user_code(script)
    assert not where_stuck._is_user_code(where_stuck._DDP_LAB_DIR + "launcher/api.py")
    frames = [("/usr/lib/python3.13/runpy.py", 88, "_run_code", "exec(code)"),
              (script, 31, "log_progress", "dist.all_reduce(loss)"),
              (where_stuck._TORCH_DIR + "distributed/c10d_logger.py", 81, "wrapper", ""),
              (where_stuck._TORCH_DIR + "distributed/distributed_c10d.py", 2900, "all_reduce", "")]
    assert "called from log_progress() line 31" in where_stuck.describe_where(frames)


def test_the_timeout_travels_in_the_config_and_its_margin_is_written_once():
    # The group reads the launch's timeout from its config, not from a second copy passed beside it.
    assert list(inspect.signature(WorkerGroup.collect).parameters) == ["self"]
    config = make_config(2, backend="gloo", timeout=5)
    assert config.process_group_timeout == 5 + TIMEOUT_MARGIN
    # Whatever must outlast a launch adds TIMEOUT_MARGIN, never its own 60 s.
    again = [f"{path.relative_to(PACKAGE.parent)}:{number}"
             for path in sorted(PACKAGE.rglob("*.py"))
             for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             if re.search(r"timeout\s*\+\s*60\b", line)]
    assert not again, f"a timeout margin written again: {again}"


def test_cells_of_ipython_7_and_of_ipython_8_are_sent_to_the_ranks(tmp_path):
    """Colab's IPython 7 caches a cell with the time it ran, IPython 8+ with
    none; both are sent (Lab 3's deadlock report names the cell's line from
    them). A file on disk is not: a rank reads it itself."""
    import linecache
    import time

    from ddp_lab.launcher.jobs import interactive_sources

    on_disk = tmp_path / "module.py"
    on_disk.write_text("x = 1\n")
    entries = {"<ipython-input-3-5a1f>": (6, time.time(), ["x = 1\n"], "<ipython-input-3-5a1f>"),
               "/tmp/ipykernel_1/4242.py": (6, None, ["x = 2\n"], "/tmp/ipykernel_1/4242.py"),
               str(on_disk): (6, on_disk.stat().st_mtime, ["x = 1\n"], str(on_disk))}
    linecache.cache.update(entries)
    try:
        sent = interactive_sources()
    finally:
        for name in entries:
            linecache.cache.pop(name, None)
    assert sent["<ipython-input-3-5a1f>"] == ["x = 1\n"]
    assert sent["/tmp/ipykernel_1/4242.py"] == ["x = 2\n"]
    assert str(on_disk) not in sent
