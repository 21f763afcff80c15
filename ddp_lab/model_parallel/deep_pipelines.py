"""Deeper pipelines: several stages per rank, the backward split in two, and data parallelism beside them (Chapter 15f).

With P ranks each holding v *virtual* stages (the model cut in P·v runs of
layers), a micro-batch crosses every rank v times, and the ranks start and
finish sooner: Narayanan et al. (2021, section 2.2.1) give the interleaved
1F1B schedule a bubble of (P - 1) / v of one micro-batch's work, against
P - 1 for 1F1B. torch's ``ScheduleInterleaved1F1B`` gives rank r the stages
r, r + P, ... (``"loop"``); ``ScheduleInterleavedZeroBubble`` (Qi et al.,
2024, ZB-1P) and ``ScheduleZBVZeroBubble`` (ZB-V: rank r holds stages r and
2P - 1 - r, a ``"v"``) also split each backward into the input's gradient
("I", sent back at once) and the weights' ("W", which waits for an idle
moment), all in ``torch/distributed/pipelining/schedules.py``.

:func:`run_virtual_pipeline` runs one of them in a rank, with
``pipeline_run.TimedStage`` on every stage, and returns the slots, the
gradients, the losses and the schedule's own list of actions for every
rank (``pipeline_order``, computed alike on every rank: exact).
:func:`run_pipeline_data_parallel` runs 1F1B on each row of a
``("dp", "pp")`` mesh, then all-reduces each stage's gradients down its
column.

Used in Chapter 15f.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from ddp_lab.model_parallel.pipeline_run import split_stages, timed_stage
from ddp_lab.validate import check_choice, check_positive_int

__all__ = ["VIRTUAL_SCHEDULES", "stage_indices", "run_virtual_pipeline", "run_pipeline_data_parallel"]

# name -> (torch's class name, how stages are laid on ranks)
VIRTUAL_SCHEDULES = {"interleaved_1f1b": ("ScheduleInterleaved1F1B", "loop"),
                     "interleaved_zero_bubble": ("ScheduleInterleavedZeroBubble", "loop"),
                     "zbv": ("ScheduleZBVZeroBubble", "v")}


def stage_indices(rank: int, ranks: int, per_rank: int, style: str) -> list[int]:
    """The stages rank ``rank`` holds: ``"loop"`` r, r + P, ...; ``"v"`` r and 2P - 1 - r.

    >>> stage_indices(0, 2, 2, "loop"), stage_indices(0, 2, 2, "v")
    ([0, 2], [0, 3])
    """
    check_choice("style", style, ("loop", "v"))
    if style == "v":
        if per_rank != 2:
            raise ValueError(f"a V holds exactly 2 stages per rank, got per_rank={per_rank!r}")
        return [rank, 2 * ranks - 1 - rank]
    return [rank + k * ranks for k in range(per_rank)]


def _action(action) -> tuple[int, str, int]:
    return action.stage_index, action.computation_type.value, action.microbatch_index


def run_virtual_pipeline(model: nn.Sequential, x: torch.Tensor, y: torch.Tensor, *, schedule: str,
                         microbatches: int, per_rank: int = 2, steps: int = 2, group=None) -> list[dict]:
    """``steps`` steps of ``schedule`` (a key of :data:`VIRTUAL_SCHEDULES`), ``per_rank`` stages on each rank.

    Call it on every rank with the same model, batch ``x`` and labels ``y``.
    Each step starts from zero gradients. Returns one dict per step:
    ``slots`` (this rank's, timed), ``gradients`` (``{name: grad}`` of its
    stages), ``losses`` (on the rank holding the last stage) and ``orders``
    (``{rank: [(stage, phase, microbatch), ...]}``, torch's
    ``pipeline_order`` without its idle ``None`` entries).
    """
    from torch.distributed import pipelining

    check_choice("schedule", schedule, tuple(VIRTUAL_SCHEDULES))
    check_positive_int("microbatches", microbatches)
    check_positive_int("per_rank", per_rank)
    check_positive_int("steps", steps)
    if x.shape[0] % microbatches:
        raise ValueError(f"the batch of {x.shape[0]} samples does not split into {microbatches} micro-batches")
    class_name, style = VIRTUAL_SCHEDULES[schedule]
    ranks, rank = dist.get_world_size(group), dist.get_rank(group)
    total = ranks * per_rank
    modules = split_stages(model, total)
    mine = stage_indices(rank, ranks, per_rank, style)
    size = x.shape[0] // microbatches
    stages = [timed_stage(modules[i], i, total, size, group) for i in mine]
    runner = getattr(pipelining, class_name)(stages, microbatches, loss_fn=F.cross_entropy)
    orders = {r: [_action(a) for a in actions if a is not None] for r, actions in runner.pipeline_order.items()}
    runs = []
    for _ in range(steps):
        for i in mine:
            modules[i].zero_grad(set_to_none=True)
        for stage in stages:
            stage.slots.clear()
        losses: list[torch.Tensor] = []
        kwargs = {"target": y, "losses": losses} if total - 1 in mine else {}
        runner.step(*((x,) if 0 in mine else ()), **kwargs)
        runs.append({"slots": [slot for stage in stages for slot in stage.slots],
                     "gradients": {n: p.grad.clone() for i in mine for n, p in modules[i].named_parameters()},
                     "losses": [loss.item() for loss in losses], "orders": orders})
    return runs


def run_pipeline_data_parallel(model: nn.Sequential, x: torch.Tensor, y: torch.Tensor, *, microbatches: int,
                               dp: int = 2, lr: float = 0.1) -> dict:
    """Pipeline x data parallelism on a ``(dp, pp)`` mesh: 1F1B along each row, an all-reduce down each column.

    Row ``d`` (a replica) takes rows ``d/dp`` of the batch and runs it
    through its ``pp`` stages with ``Schedule1F1B``; each rank then
    all-reduces its stage's gradients, flattened into one tensor, over its
    column (the ranks holding the same stage), divides by ``dp``, and takes
    an SGD step. Returns this rank's ``stage``, ``replica``, ``gradients``,
    the ``parameters`` after the step, and ``calls``: the recorder's
    ``(dim, phase, name, nbytes)`` of the step, ``dim`` "dp" or "pp".
    """
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.pipelining import Schedule1F1B

    from ddp_lab.collectives.recorder import record_collectives

    check_positive_int("dp", dp)
    pp = dist.get_world_size() // dp
    mesh = init_device_mesh("cpu", (dp, pp), mesh_dim_names=("dp", "pp"))
    replica, index = mesh.get_local_rank("dp"), mesh.get_local_rank("pp")
    rows = slice(replica * x.shape[0] // dp, (replica + 1) * x.shape[0] // dp)
    module = split_stages(model, pp)[index]
    size = x.shape[0] // dp // microbatches
    stage = timed_stage(module, index, pp, size, mesh.get_group("pp"))
    runner = Schedule1F1B(stage, microbatches, loss_fn=F.cross_entropy)
    names = {mesh.get_group(d).group_name: d for d in ("dp", "pp")}
    with record_collectives() as log:
        log.phase = "pipeline"
        runner.step(*((x[rows],) if index == 0 else ()), **({"target": y[rows]} if index == pp - 1 else {}))
        log.phase = "gradients"
        flat = torch.cat([p.grad.flatten() for p in module.parameters()])
        dist.all_reduce(flat, group=mesh.get_group("dp"))
        flat /= dp
    offset = 0
    with torch.no_grad():
        for p in module.parameters():
            p.grad.copy_(flat[offset:offset + p.numel()].view_as(p))
            offset += p.numel()
            p -= lr * p.grad
    return {"stage": index, "replica": replica,
            "gradients": {n: p.grad.clone() for n, p in module.named_parameters()},
            "parameters": {n: p.detach().clone() for n, p in module.named_parameters()},
            "calls": [(names.get(c.group_name, "world" if c.group_name is None else "?"), c.phase, c.name, c.nbytes)
                      for c in log.calls]}
