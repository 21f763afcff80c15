"""Pipeline parallelism on real ranks, with ``torch.distributed.pipelining`` and a stopwatch on every stage.

Chapter 15 drew the GPipe and 1F1B schedules from a model
(:mod:`ddp_lab.model_parallel.pipeline`); here they run. Inside each rank:

1. every rank builds the same model (same seed) and keeps its own *stage*,
   a run of consecutive layers cut by hand (:func:`split_stages`);
2. the stage goes into :class:`TimedStage`, torch's ``PipelineStage``
   (``torch/distributed/pipelining/stage.py``) with a clock;
3. a schedule, ``ScheduleGPipe`` or ``Schedule1F1B``
   (``torch/distributed/pipelining/schedules.py``), runs a training step:
   it cuts the batch into M micro-batches, calls the stage's
   ``forward_one_chunk(i, ...)`` and ``backward_one_chunk(i, ...)`` for
   each micro-batch i in its own order, and sends activations to the next
   rank and gradients to the previous one (``send``/``recv``, Chapter 4).
   The last stage computes the loss of each micro-batch; the gradients of
   the M micro-batches add up in ``.grad`` and are divided by M at the end
   (``scale_grads=True``): with a loss that averages over its micro-batch,
   they are the gradients of one process's step on the whole batch.

:class:`TimedStage` records a :class:`~ddp_lab.model_parallel.pipeline.Slot`
around each of these two calls with ``time.perf_counter``: the schedule's
waits for its neighbours happen between them, so the gaps between a
stage's slots are its idle time. ``perf_counter`` reads a clock every
process of one machine shares (``CLOCK_MONOTONIC`` on Linux), so the ranks'
slots can be laid on one time axis;
:mod:`ddp_lab.model_parallel.pipeline_timeline` does that and measures them.

:func:`run_pipeline` is what a rank calls. Used in Chapter 15c.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

from ddp_lab.model_parallel.pipeline import SCHEDULES, Slot
from ddp_lab.validate import check_choice, check_positive_int

__all__ = ["TimedStage", "StageRun", "split_stages", "run_pipeline", "timed_stage"]

SCHEDULE_CLASSES = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B}  # the keys are pipeline.SCHEDULES


def split_stages(model: nn.Sequential, stages: int) -> list[nn.Sequential]:
    """Cut ``model`` into ``stages`` runs of consecutive layers, the same number of ``Linear`` layers in each.

    A stage starts at a ``Linear`` layer; layers keep their names
    (``fc3.weight`` is ``fc3.weight`` in its stage), and their parameters
    (nothing is copied). With L ``Linear`` layers, each stage gets L // stages
    of them and the last stage the rest too.

    >>> from ddp_lab.models import mlp
    >>> [list(dict(stage.named_children())) for stage in split_stages(mlp((4, 8, 8, 8, 2)), 2)]
    [['fc1', 'relu1', 'fc2', 'relu2'], ['fc3', 'relu3', 'fc4']]
    """
    if not isinstance(model, nn.Sequential):
        raise TypeError(f"model must be an nn.Sequential of named layers, got {type(model).__name__}")
    children = list(model.named_children())
    linears = [i for i, (_, layer) in enumerate(children) if isinstance(layer, nn.Linear)]
    check_positive_int("stages", stages, len(linears), f"the model has {len(linears)} Linear layers")
    per_stage = len(linears) // stages
    cuts = [0, *(linears[s * per_stage] for s in range(1, stages)), len(children)]
    return [nn.Sequential(OrderedDict(children[a:b])) for a, b in zip(cuts, cuts[1:])]


class TimedStage(PipelineStage):
    """A ``PipelineStage`` that records a Slot for every forward and backward of a micro-batch.

    ``slots`` collects them, in the order they ran; empty it between steps.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.slots: list[Slot] = []

    def forward_one_chunk(self, fwd_chunk_id, *args, **kwargs):
        start = time.perf_counter()
        output = super().forward_one_chunk(fwd_chunk_id, *args, **kwargs)
        self.slots.append(Slot(self.stage_index, "F", fwd_chunk_id, start, time.perf_counter(), self.group_rank))
        return output

    def backward_one_chunk(self, bwd_chunk_id, *args, full_backward: bool = True, **kwargs):
        # a zero-bubble schedule asks for the input's gradient only ("I"), the weights' later ("W")
        start = time.perf_counter()
        super().backward_one_chunk(bwd_chunk_id, *args, full_backward=full_backward, **kwargs)
        phase = "B" if full_backward else "I"
        self.slots.append(Slot(self.stage_index, phase, bwd_chunk_id, start, time.perf_counter(), self.group_rank))

    def backward_weight_one_chunk(self, bwd_chunk_id, *args, **kwargs):
        start = time.perf_counter()
        super().backward_weight_one_chunk(bwd_chunk_id, *args, **kwargs)
        self.slots.append(Slot(self.stage_index, "W", bwd_chunk_id, start, time.perf_counter(), self.group_rank))


@dataclass(frozen=True)
class StageRun:
    """What one rank's stage did in one step.

    ``slots``: its forwards and backwards, in the order they ran, times from
    ``perf_counter``; ``gradients``: ``{name: .grad}`` of its parameters
    (empty if not kept);
    ``losses``: the loss of each micro-batch (last stage only, else empty).
    """

    stage: int
    slots: tuple[Slot, ...]
    gradients: dict
    losses: tuple[float, ...]


def _features(stage: nn.Sequential) -> tuple[int, int]:
    linears = [layer for layer in stage if isinstance(layer, nn.Linear)]
    return linears[0].in_features, linears[-1].out_features


def timed_stage(module: nn.Sequential, index: int, stages: int, microbatch_size: int, group=None) -> TimedStage:
    """Stage ``index`` of ``stages``, ``module`` (a stage of :func:`split_stages`), for micro-batches of
    ``microbatch_size`` samples, on this rank of ``group``."""
    inputs, outputs = _features(module)
    # The shapes each stage receives and sends, given up front (torch's "static" mode); an input
    # that requires grad is one whose gradient goes back to the previous stage.
    return TimedStage(module, index, stages, torch.device("cpu"), group=group,
                      input_args=torch.empty(microbatch_size, inputs, requires_grad=index > 0),
                      output_args=torch.empty(microbatch_size, outputs, requires_grad=True))


def run_pipeline(model: nn.Sequential, x: torch.Tensor, y: torch.Tensor, *, schedule: str,
                 microbatches: int, steps: int = 2, keep_gradients: bool = True, group=None) -> list[StageRun]:
    """Run ``steps`` training steps of ``model`` as a pipeline, one stage per rank; a StageRun per step.

    Call it on every rank of ``group`` (default: all ranks) with the same
    ``model`` (same weights), batch ``x`` and class labels ``y``: rank r runs
    stage r of ``split_stages(model, world size)``. ``schedule`` is
    ``"gpipe"`` or ``"1f1b"``; the batch is cut into ``microbatches`` equal
    micro-batches; the last stage's loss is ``cross_entropy``. Each step starts from zero gradients and takes no
    optimizer step, so every step computes the same gradients (kept in
    each StageRun unless ``keep_gradients`` is False). The first step also
    sets the schedule up (buffers, the first messages): time the others.
    """
    check_choice("schedule", schedule, SCHEDULES)
    check_positive_int("microbatches", microbatches)
    check_positive_int("steps", steps)
    if not isinstance(keep_gradients, bool):
        raise TypeError(f"keep_gradients must be True or False, got {keep_gradients!r}")
    if not isinstance(x, torch.Tensor) or not isinstance(y, torch.Tensor) or x.dim() != 2 or y.shape != x.shape[:1]:
        raise ValueError(f"x must be a tensor of samples x features and y one label per sample, got "
                         f"x {getattr(x, 'shape', x)!r}, y {getattr(y, 'shape', y)!r}")
    if x.shape[0] % microbatches:
        raise ValueError(f"the batch of {x.shape[0]} samples does not split into {microbatches} equal "
                         f"micro-batches")
    if not dist.is_initialized():
        raise RuntimeError("run_pipeline runs inside ranks, one stage each: call it in a function started by "
                           "ddp_lab.launch (or torchrun), after init_process_group")
    stages = dist.get_world_size(group)
    if schedule == "1f1b" and microbatches < stages:
        raise ValueError(f"1F1B needs at least as many micro-batches as stages: {microbatches} < {stages}")
    index = dist.get_rank(group)
    module = split_stages(model, stages)[index]
    size = x.shape[0] // microbatches
    stage = timed_stage(module, index, stages, size, group)
    runner = SCHEDULE_CLASSES[schedule](stage, microbatches, loss_fn=F.cross_entropy)
    first, last = index == 0, index == stages - 1
    runs = []
    for _ in range(steps):
        module.zero_grad(set_to_none=True)
        stage.slots.clear()
        losses: list[torch.Tensor] = []
        runner.step(*((x,) if first else ()), **({"target": y, "losses": losses} if last else {}))
        grads = {name: p.grad.clone() for name, p in module.named_parameters()} if keep_gradients else {}
        runs.append(StageRun(index, tuple(stage.slots), grads, tuple(loss.item() for loss in losses)))
    return runs
