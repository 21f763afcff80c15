"""Lab 8's checker: a 2-D layout, FSDP x tensor parallelism, built by the reader on 4 real ranks.

The reader writes ``my_two_d_step(model, x, y)``, called on each of 4 ranks
with the same model (:func:`make_model`: two Megatron MLP blocks) and the
whole batch. It must build the mesh ``(2, 2)`` named ``("dp", "tp")``,
split each block over ``mesh["tp"]`` (``ColwiseParallel`` for ``up``,
``RowwiseParallel`` for ``down``), then shard over ``mesh["dp"]`` with
``fully_shard``, run one forward and backward of ``mse_loss`` on its
replica's half of the batch, and return the loss of the whole batch (the
mean of the two replicas' losses), the same on every rank.

``check_two_d_layout`` runs it and compares, on every rank:

1. the parameters: DTensors on a 2-D mesh ordered ``("dp", "tp")``, each
   ``up`` split by rows of its weight and each ``down`` by columns on the tp
   dimension, and at most :data:`BUDGET` bytes of parameters per rank;
2. every gradient, put together with ``full_tensor``, with one process's on
   the whole batch (``allclose``, ``atol=1e-6``);
3. the returned loss with one process's (same tolerance).

The slips it names, each a ``Mistake`` ``kind``: ``fully_shard_first``,
``mesh_swapped``, ``wrong_plan``, ``not_two_d``, ``over_budget``,
``loss_group`` (the loss averaged over the wrong ranks), ``wrong_gradients``,
and a crash, exit or hang.
"""

from __future__ import annotations

import torch

from ddp_lab.checks.harness import YourCodeExited, exit_mistake, launch_checked, timed_out
from ddp_lab.checks.result import CheckResult, Mistake, signature_mistake
from ddp_lab.launcher import serialize
from ddp_lab.launcher.errors import RankDied, RankFailed, RanksTimedOut

__all__ = ["HIDDEN", "FFN", "BLOCKS", "TOKENS", "SEED", "BUDGET", "make_model", "batch", "check_two_d_layout"]

HIDDEN, FFN, BLOCKS, TOKENS, SEED = 8, 32, 2, 16, 0
# bytes of parameters per rank: a quarter of the weights, with each down's bias whole on a tp pair,
# is 1,120 bytes; tensor parallelism or FSDP alone on 2 ranks holds twice that
BUDGET = 1200
TOLERANCE = 1e-6
WORLD_SIZE = 4
_SUBJECT = "2-D layout (FSDP x tensor parallelism) against one process"


def make_model() -> torch.nn.Sequential:
    """The lab's model: 2 blocks of ``Linear(8, 32)``, GeLU, ``Linear(32, 8)``, seeded with ``SEED``."""
    from ddp_lab.model_parallel.two_d import mlp_blocks

    return mlp_blocks(HIDDEN, FFN, BLOCKS, seed=SEED)


def batch() -> tuple[torch.Tensor, torch.Tensor]:
    """The whole batch: ``TOKENS`` inputs and targets of width ``HIDDEN``, the same in every process."""
    generator = torch.Generator().manual_seed(SEED + 1)
    return torch.randn(TOKENS, HIDDEN, generator=generator), torch.randn(TOKENS, HIDDEN, generator=generator)


def check_two_d_layout(fn, *, timeout: float = 30) -> CheckResult:
    """Run ``fn(model, x, y)`` on 4 real ranks and explain what, if anything, is wrong."""
    mistake = signature_mistake(fn, 3, "my_two_d_step(model, x, y)")
    if mistake:
        return CheckResult(_SUBJECT, 0, 1, "run", (mistake,))
    where = "4 ranks, mesh (2, 2)"
    reports, error = launch_checked(_run_on_rank, WORLD_SIZE, args=(serialize.dumps(fn),), timeout=timeout)
    found = _error_mistake(where, error, timeout) if error is not None else _compare(where, reports)
    return CheckResult(_SUBJECT, 0 if found else 1, 1, "run", (found,) if found else ())


def _error_mistake(where, error, timeout):
    if isinstance(error, YourCodeExited):
        return exit_mistake(where, error)
    if isinstance(error, RanksTimedOut):
        return timed_out(where, error, timeout, (
            "Every rank must issue the same collectives in the same order: a collective over a group "
            "one rank of it never joins waits for ever"))
    if isinstance(error, RankDied):
        return Mistake(where, "died", str(error))
    last = error.remote_traceback.strip().splitlines()[-1] if isinstance(error, RankFailed) else str(error)
    if "Cannot distribute a DTensor" in last:
        return Mistake(where, "fully_shard_first", (
            f"rank {error.rank} raised {last.rstrip('.')}. fully_shard ran first and made every parameter a DTensor on "
            "the dp mesh; ColwiseParallel then cannot distribute it over tp. Call parallelize_module "
            "first: fully_shard accepts tp DTensors and folds the tp mesh into its own"))
    if "Sharding propagation failed" in last or "must have same reduction dim" in last:
        return Mistake(where, "wrong_plan", (
            f"rank {error.rank} raised {last.rstrip('.')}. The plan's shards do not meet: up (Linear(8, 32)) is "
            "ColwiseParallel, its output columns split, and down (Linear(32, 8)) RowwiseParallel, "
            "taking those columns as its rows"))
    return Mistake(where, "exception", f"rank {getattr(error, 'rank', '?')} raised {last}")


def _compare(where, reports):
    for rank, report in enumerate(reports):
        if report["mesh_names"] is None:
            return Mistake(where, "not_two_d", (
                f"rank {rank}'s parameters are not DTensors on a 2-D mesh (their mesh: "
                f"{report['mesh_seen']}): split with parallelize_module over mesh['tp'] and shard "
                "with fully_shard over mesh['dp'], both"))
        if report["mesh_names"] == ("tp", "dp"):
            return Mistake(where, "mesh_swapped", (
                "the parameters lie on a mesh ordered ('tp', 'dp'): fully_shard ran over mesh['tp'] "
                "and parallelize_module over mesh['dp']. The ranks of a tp group must share a "
                "replica's rows; the dp dimension is the one FSDP shards over"))
        if report["plan"]:
            return Mistake(where, "wrong_plan", (
                f"on rank {rank}, {report['plan']}. up (Linear(8, 32)) is ColwiseParallel: its "
                "weight (32 x 8) split by rows, Shard(0); down RowwiseParallel: Shard(1)"))
        if report["bytes"] > BUDGET:
            return Mistake(where, "over_budget", (
                f"rank {rank} holds {report['bytes']:,} bytes of parameters, over the budget of "
                f"{BUDGET:,}: each rank should hold a quarter, a half of its tp shard"))
    wrong = [r for r, report in enumerate(reports) if report["gradients"]]
    if wrong:
        return Mistake(where, "wrong_gradients", (
            f"on rank {wrong[0]} the gradients of {', '.join(reports[wrong[0]]['gradients'])} differ from "
            "one process's on the whole batch. Each replica (a dp coordinate) takes its own half of the "
            "batch, x.chunk(2)[mesh.get_local_rank('dp')], the same half on both ranks of its tp group"))
    for rank, report in enumerate(reports):
        if not report["loss_ok"]:
            return Mistake(where, "loss_group", (
                f"rank {rank} returned the loss {report['loss']!r}, one process's is {report['expected']!r}; "
                "the gradients are right. The whole batch's loss is the mean over the two replicas: "
                "all-reduce over mesh.get_group('dp') and divide by 2 (the ranks of a tp group hold "
                "the same loss)"))
    return None


def _run_on_rank(fn_bytes):
    """Inside a rank: the one-process step, then the reader's, then what the comparison needs."""
    from torch.distributed.tensor import DTensor, Shard

    from ddp_lab.model_parallel.two_d import _quiet

    _quiet()
    x, y = batch()
    whole = make_model()
    expected = torch.nn.functional.mse_loss(whole(x), y)
    expected.backward()
    model = make_model()
    fn = serialize.loads(fn_bytes)
    loss = fn(model, x, y)
    params = dict(model.named_parameters())
    meshes = {p.device_mesh.mesh_dim_names if isinstance(p, DTensor) else None for p in params.values()}
    names = next(iter(meshes)) if len(meshes) == 1 else None
    if names is not None and len(names) != 2:
        names = None
    plan = ""
    if names is not None:
        tp_dim = names.index("tp") if "tp" in names else 1
        for name, p in params.items():
            want = 0 if ".up." in name else 1
            placement = p.placements[tp_dim]
            if name.endswith("weight") and not (isinstance(placement, Shard) and placement.dim == want):
                plan = f"{name} is {placement} on tp"
                break
    local = sum((p.to_local() if isinstance(p, DTensor) else p).numel() * p.element_size()
                for p in params.values())
    wrong = []
    for name, reference in whole.named_parameters():
        grad = params[name].grad
        if grad is None:
            wrong.append(name)
            continue
        full = grad.full_tensor() if isinstance(grad, DTensor) else grad
        if not torch.allclose(full, reference.grad, atol=TOLERANCE):
            wrong.append(name)
    value = float(loss.detach()) if isinstance(loss, torch.Tensor) else loss
    loss_ok = isinstance(value, float) and abs(value - expected.item()) <= TOLERANCE
    return {"mesh_names": names, "mesh_seen": sorted(map(str, meshes)), "plan": plan, "bytes": local,
            "gradients": wrong, "loss": value, "expected": expected.item(), "loss_ok": loss_ok}
