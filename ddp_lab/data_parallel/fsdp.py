"""FSDP2 measured: what each rank holds, what it sends, and when (Chapter 15b).

``torch.distributed.fsdp.fully_shard`` (FSDP2) is ZeRO-3 in PyTorch: every
parameter becomes a ``DTensor`` sharded on dim 0 over the ranks, and each
module it was applied to all-gathers its parameters just before it runs
(forward, and again in backward) and reduce-scatters their gradients after
its backward. This module measures all of it inside ranks started by
``ddp_lab.launch``, on the CPU with gloo:

* **sharding**: :func:`shard_per_layer` applies ``fully_shard`` to each
  ``nn.Linear`` of a model, then to the model itself (bottom-up, as the
  ``fully_shard`` docstring asks). :func:`parameter_shards` lists what this
  rank holds of each parameter. The rows are split as ``torch.chunk`` splits
  them: ceil(rows / W) per rank while they last, the rest to the next, and every
  rank's storage is padded to ceil(rows / W) rows (``FSDPParam._init_sharded_param``
  in ``torch/distributed/fsdp/_fully_shard/_fsdp_param.py``).
* **bytes held**: :func:`held_bytes` counts the parameters, gradients and
  optimizer state a rank holds, as the local tensors' ``nbytes`` and as the
  storage allocated behind them (padding included); :func:`registered_parameters`
  what the modules hold between forward and backward.
* **one step, profiled**: :func:`measure_step` runs warm-up steps, then one
  step under ``torch.profiler`` (``record_shapes=True``, the trace exported
  in the Chrome format, both documented), and reads from the trace

  - the collectives the step *issued*: the c10d operators the calling
    thread ran (``c10d::_allgather_base_``, ``c10d::_reduce_scatter_base_``,
    ``c10d::allreduce_``), with their tensors' sizes;
  - what gloo *executed* on its worker threads (``gloo:all_gather``,
    ``gloo:all_reduce``): gloo has no reduce-scatter of its own and runs
    ``_reduce_scatter_base`` as an all-reduce of the whole input, keeping
    its chunk (``ProcessGroupGloo::reduce_scatter_tensor_coalesced`` in
    PyTorch's C++ source), which the trace shows;
  - a timeline: each layer's compute, FSDP's all-gathers and reduce-scatters
    as the calling thread waited for them (their ``FSDP::...`` markers, with
    the layer's name), and gloo's own work (drawn by
    :mod:`ddp_lab.draw.fsdp_timeline`).

  The operator and marker names are what torch 2.13 writes into its traces,
  not a promised interface: a later torch may rename them.
* **bytes on the wire**: :func:`traffic` sums a step's collectives by kind,
  with what each rank sends by the ring algorithm's count (Chapter 6),
  ``ddp_lab.cost.ring_bytes.ring_bytes``: ``2(W-1)/W`` of the tensor for an
  all-reduce, ``(W-1)/W`` for an all-gather or a reduce-scatter, as an exact
  fraction.

When FSDP becomes communication-bound is arithmetic, with no rank started:
``ddp_lab.cost.fsdp`` (``fsdp_tokens_to_hide``, beside Chapter 12b's
``ddp_lab.cost.scaling.tokens_to_hide`` for DDP).
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from dataclasses import dataclass, field
from fractions import Fraction

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from ddp_lab.cost.fsdp import fsdp_tokens_to_hide as fsdp_tokens_to_hide  # cited by Chapter 15b's text here
from ddp_lab.cost.ring_bytes import ring_bytes
from ddp_lab.validate import check_int_at_least, check_positive_int

__all__ = ["ParameterShard", "HeldBytes", "RegisteredParameters", "TracedCollective", "Span", "StepRecord",
           "Traffic", "shard_per_layer", "local_tensor", "parameter_shards", "held_bytes", "registered_parameters",
           "measure_step", "read_trace", "traffic"]

PHASES = ("forward", "backward", "optimizer.step")  # record_function markers around one step

# The c10d operators a step issues, as the profiler names them, and which of
# their tensor arguments is the full tensor: the all-reduce's tensors, the
# all-gather's output (argument 0), the reduce-scatter's input (argument 1).
C10D_OPS = {"c10d::allreduce_": ("all_reduce", 0), "c10d::_allgather_base_": ("all_gather", 0),
            "c10d::_reduce_scatter_base_": ("reduce_scatter", 1), "c10d::broadcast_": ("broadcast", 0)}
GLOO_PREFIX = "gloo:"  # gloo's worker threads mark each collective they run: gloo:all_gather, ...
ELEMENT_SIZES = {"float": 4, "double": 8, "c10::Half": 2, "c10::BFloat16": 2, "int": 4, "long int": 8,
                 "short int": 2, "signed char": 1, "unsigned char": 1, "bool": 1}
COMPUTE_OPS = {"aten::linear": "forward", "AddmmBackward0": "backward", "MmBackward0": "backward"}
_FSDP_MARKER = re.compile(r"^FSDP::(\w+) \((.+)\)$")            # FSDP::all_gather (fc2)
_FSDP_PREFETCH = re.compile(r"^FSDP::(forward|backward)_prefetch for (.+)$")


# ------------------------------------------------------------------ sharding and bytes held


@dataclass(frozen=True)
class ParameterShard:
    """What one rank holds of one parameter.

    ``local_bytes`` is the local tensor's ``nbytes``; ``allocated_bytes`` the
    storage behind it, which FSDP pads to the same number of rows on every
    rank.
    """

    name: str
    full_shape: tuple
    local_shape: tuple
    placement: str
    local_bytes: int
    allocated_bytes: int


@dataclass(frozen=True)
class HeldBytes:
    """Bytes of model states one rank holds: local tensors, and the storage allocated behind them.

    ``optimizer`` counts the optimizer's per-parameter tensors (Adam's two
    moments); ``replicated`` its 0-dimensional ones (Adam's ``step``
    counters), which are plain tensors, the same on every rank, and not in
    the ZeRO formulas.
    """

    parameters: int
    gradients: int
    optimizer: int
    replicated: int
    allocated_parameters: int
    allocated_gradients: int
    allocated_optimizer: int

    @property
    def total(self) -> int:
        return self.parameters + self.gradients + self.optimizer

    @property
    def allocated_total(self) -> int:
        return self.allocated_parameters + self.allocated_gradients + self.allocated_optimizer


@dataclass(frozen=True)
class RegisteredParameters:
    """The parameters registered on the modules at one moment: how many are full, how many shards, bytes."""

    full: int
    sharded: int
    nbytes: int


def shard_per_layer(model: nn.Module, *, reshard_after_forward: bool = True, forward_prefetch: bool = False,
                    device_type: str = "cpu") -> list[nn.Module]:
    """``fully_shard`` each ``nn.Linear`` of ``model``, then ``model``; return the layers, in order.

    Each layer becomes one FSDP unit: one all-gather of its parameters before
    it runs, one reduce-scatter of its gradients after its backward.
    ``reshard_after_forward`` is passed to every call. With
    ``forward_prefetch``, each layer is told to prefetch the next one
    (``set_modules_to_forward_prefetch([next])``): its all-gather is then
    issued as soon as this layer's own all-gather is copied out.

    The units share one mesh of all the ranks on ``device_type``: the CPU
    by default, so that the same code runs on a machine with a GPU too
    (``fully_shard``'s own default is the accelerator when there is one,
    ``_init_default_mesh`` in ``_fsdp_init.py``, and the parameters would
    move there). Call it in a rank, after the process group is up.
    """
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    for name, value in (("reshard_after_forward", reshard_after_forward), ("forward_prefetch", forward_prefetch)):
        if not isinstance(value, bool):
            raise TypeError(f"{name} must be True or False, got {value!r}")
    if device_type not in ("cpu", "cuda"):
        raise ValueError(f"device_type must be 'cpu' or 'cuda', got {device_type!r}")
    layers = [module for module in model.modules() if isinstance(module, nn.Linear)]
    if not layers:
        raise ValueError(f"model has no nn.Linear layer to shard: {type(model).__name__}")
    _check_in_a_rank("shard_per_layer")
    mesh = init_device_mesh(device_type, (dist.get_world_size(),))
    for layer in layers:
        fully_shard(layer, mesh=mesh, reshard_after_forward=reshard_after_forward)
    fully_shard(model, mesh=mesh, reshard_after_forward=reshard_after_forward)
    if forward_prefetch:
        for layer, after in zip(layers, layers[1:]):
            layer.set_modules_to_forward_prefetch([after])
    return layers


def local_tensor(tensor: torch.Tensor) -> torch.Tensor:
    """The part of ``tensor`` this rank stores: a DTensor's local shard, else the tensor itself."""
    return tensor.to_local() if hasattr(tensor, "to_local") else tensor


def parameter_shards(model: nn.Module) -> list[ParameterShard]:
    """This rank's piece of every parameter of ``model``, in ``named_parameters()`` order."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    shards = []
    for name, parameter in model.named_parameters():
        local = local_tensor(parameter)
        placements = getattr(parameter, "placements", None)
        shards.append(ParameterShard(
            name=name, full_shape=tuple(parameter.shape), local_shape=tuple(local.shape),
            placement=", ".join(map(repr, placements)) if placements else "whole tensor",
            local_bytes=local.nbytes, allocated_bytes=local.untyped_storage().nbytes()))
    return shards


def _allocated(tensors) -> int:
    """Bytes of the distinct storages behind ``tensors`` (views of one buffer counted once)."""
    storages = {}
    for tensor in tensors:
        storage = local_tensor(tensor).untyped_storage()
        storages[storage.data_ptr()] = storage.nbytes()
    return sum(storages.values())


def held_bytes(model: nn.Module, optimizer: torch.optim.Optimizer) -> HeldBytes:
    """What this rank holds of the parameters, gradients and optimizer state of ``model``, in bytes."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(f"optimizer must be a torch.optim.Optimizer, got {type(optimizer).__name__}")
    parameters = list(model.parameters())
    gradients = [p.grad for p in parameters if p.grad is not None]
    states = [value for state in optimizer.state.values() for value in state.values() if torch.is_tensor(value)]
    sharded = [value for value in states if value.dim() > 0]
    return HeldBytes(
        parameters=sum(local_tensor(p).nbytes for p in parameters),
        gradients=sum(local_tensor(g).nbytes for g in gradients),
        optimizer=sum(local_tensor(s).nbytes for s in sharded),
        replicated=sum(local_tensor(s).nbytes for s in states if s.dim() == 0),
        allocated_parameters=_allocated(parameters), allocated_gradients=_allocated(gradients),
        allocated_optimizer=_allocated(sharded))


def registered_parameters(model: nn.Module) -> RegisteredParameters:
    """The parameters ``model`` holds right now: full tensors or DTensor shards, and their bytes here.

    Between forward and backward this is what ``reshard_after_forward``
    decides: shards if True, the full parameters if False (the docstring of
    ``fully_shard``).
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    parameters = list(model.parameters())
    sharded = sum(hasattr(p, "to_local") for p in parameters)
    return RegisteredParameters(full=len(parameters) - sharded, sharded=sharded,
                                nbytes=sum(local_tensor(p).nbytes for p in parameters))


# ------------------------------------------------------------------ one step, profiled


@dataclass(frozen=True)
class TracedCollective:
    """One collective as a profiler trace shows it: which, on how many bytes, when, for which FSDP unit.

    Read from a trace after the step, with times: what the training thread
    issued, or what gloo's threads ran (``StepRecord.issued``, ``.executed``).
    ``ddp_lab.collectives.recorder.Collective`` is the record of one made at
    dispatch, while the code runs, with no times. ``nbytes`` is the full tensor: the all-reduce's tensor, the all-gather's
    output, the reduce-scatter's input. ``start`` and ``end`` in seconds
    after the step's forward began. ``layer`` names the FSDP unit it served
    (empty without FSDP); ``prefetched`` says it was issued by another
    unit's prefetch.
    """

    op: str
    nbytes: int
    start: float
    end: float
    layer: str = ""
    prefetched: bool = False


@dataclass(frozen=True)
class Span:
    """Something the timeline draws: a layer's compute, or a collective, from ``start`` to ``end`` (seconds).

    ``kind`` is ``"forward"`` or ``"backward"`` (the layer's compute),
    ``"all_gather"`` or ``"reduce_scatter"`` (FSDP's call on the training
    thread, from issue to the end of its wait), or ``"gloo"`` (the transfer
    on gloo's worker thread, ``op`` saying which collective gloo ran).
    """

    kind: str
    layer: str
    start: float
    end: float
    prefetched: bool = False
    op: str = ""


@dataclass(frozen=True)
class StepRecord:
    """One training step on one rank: its collectives, its timeline and what the rank held."""

    rank: int
    world_size: int
    issued: tuple = ()
    executed: tuple = ()
    spans: tuple = ()
    phases: dict = field(default_factory=dict)
    after_forward: RegisteredParameters | None = None
    held: HeldBytes | None = None


def _train_step(model, optimizer, x, y):
    optimizer.zero_grad(set_to_none=True)
    F.cross_entropy(model(x), y).backward()
    optimizer.step()


def measure_step(model: nn.Module, optimizer: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor, *,
                 warmup: int = 2) -> StepRecord:
    """Train ``warmup`` steps, then profile one more; return what it issued, ran and held (in a rank).

    The loss is ``cross_entropy(model(x), y)``. Warm-up steps come first
    because the first steps are special: FSDP initialises itself in the
    first forward, and DDP rebuilds its buckets at the start of the second,
    broadcasting rank 0's bucket assignment (Chapter 8). Between the
    profiled step's forward and backward, :func:`registered_parameters` is
    taken; after its optimizer step, :func:`held_bytes`.
    """
    from torch.profiler import ProfilerActivity, profile, record_function

    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(f"optimizer must be a torch.optim.Optimizer, got {type(optimizer).__name__}")
    check_int_at_least("warmup", warmup, 0)
    _check_in_a_rank("measure_step")
    for _ in range(warmup):
        _train_step(model, optimizer, x, y)
    optimizer.zero_grad(set_to_none=True)
    os.environ.setdefault("KINETO_LOG_LEVEL", "6")  # else each start and stop prints a "USDT: ..." line
    # acc_events: torch 2.11 (Colab) warns without it that a second cycle would clear the first
    # one's events (torch/profiler/profiler.py); there is one cycle here
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, acc_events=True) as profiler:
        with record_function("forward"):
            loss = F.cross_entropy(model(x), y)
        after_forward = registered_parameters(model)
        with record_function("backward"):
            loss.backward()
        with record_function("optimizer.step"):
            optimizer.step()
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "trace.json")
        profiler.export_chrome_trace(path)
        with open(path) as file:
            trace = json.load(file)
    return read_trace(trace, dist.get_rank(), dist.get_world_size(), after_forward=after_forward,
                      held=held_bytes(model, optimizer))


def read_trace(trace: dict, rank: int, world_size: int, **measured) -> StepRecord:
    """A :class:`StepRecord` from a Chrome trace of one step (a dict, as ``export_chrome_trace`` writes it).

    The step must be wrapped in ``record_function`` markers named as
    ``PHASES``; times are seconds after the ``forward`` marker began.
    """
    events = [e for e in trace.get("traceEvents", []) if e.get("ph") == "X" and "ts" in e]
    markers = {e["name"]: e for e in events if e["name"] in PHASES and e.get("cat") == "user_annotation"}
    if "forward" not in markers:
        raise ValueError("the trace holds no 'forward' marker: profile the step as measure_step does")
    origin, thread = float(markers["forward"]["ts"]), markers["forward"]["tid"]
    def in_order(e):  # by start; of two that start together, the longer (the enclosing one) first
        return float(e["ts"]), -float(e.get("dur", 0))

    main = sorted((e for e in events if e["tid"] == thread), key=in_order)
    workers = sorted((e for e in events if e["tid"] != thread and e["name"].startswith(GLOO_PREFIX)), key=in_order)

    def seconds(e):
        return (float(e["ts"]) - origin) / 1e6, (float(e["ts"]) + float(e.get("dur", 0)) - origin) / 1e6

    issued, executed = _collectives(main, workers, world_size, seconds)
    spans = _compute_spans(main, seconds) + _fsdp_spans(main, seconds) + [
        Span("gloo", c.layer, c.start, c.end, c.prefetched, c.op) for c in executed]
    return StepRecord(rank=rank, world_size=world_size, issued=tuple(issued), executed=tuple(executed),
                      spans=tuple(sorted(spans, key=lambda s: s.start)),
                      phases={name: seconds(e) for name, e in markers.items()}, **measured)


def _check_in_a_rank(what):
    if not (dist.is_available() and dist.is_initialized()):
        raise RuntimeError(f"{what} runs inside a rank, with the process group up: start it with ddp_lab.launch")


def _args(event):
    return event.get("args") or {}


def _numel(shape) -> int:
    if shape and isinstance(shape[0], list):  # a TensorList: the sum of its tensors
        return sum(_numel(s) for s in shape)
    total = 1
    for size in shape:
        total *= size
    return total


def _element_size(dtype_name) -> int | None:
    """Bytes per element for a dtype as the trace names it; None where it names a list, not a dtype."""
    if dtype_name in ("TensorList", "", None):
        return None
    if dtype_name not in ELEMENT_SIZES:
        raise ValueError(f"the trace names a dtype this reader does not know: {dtype_name!r} "
                         f"(known: {', '.join(ELEMENT_SIZES)})")
    return ELEMENT_SIZES[dtype_name]


def _enclosing(event, candidates):
    """The markers among ``candidates`` whose span holds ``event``'s start."""
    ts = float(event["ts"])
    return [c for c in candidates if float(c["ts"]) <= ts <= float(c["ts"]) + float(c.get("dur", 0))]


def _unit_of(event, main):
    """The FSDP unit an event served and whether a prefetch issued it, from the markers around it."""
    around = _enclosing(event, [e for e in main if e["name"].startswith("FSDP::")])
    units = [m.group(2) for m in map(_FSDP_MARKER.match, (e["name"] for e in around)) if m]
    prefetched = any(_FSDP_PREFETCH.match(e["name"]) for e in around)
    return (units[-1] if units else ""), prefetched


def _sized(event, op, argument, world_size=1):
    """(numel, element size or None) of an event's full tensor; gloo's all-gather record names its input."""
    dims, types = _args(event).get("Input Dims", []), _args(event).get("Input type", [])
    numel = _numel(dims[argument]) if argument < len(dims) else 0
    return numel * (world_size if op == "all_gather" and event["name"].startswith(GLOO_PREFIX) else 1), \
        _element_size(types[argument] if argument < len(types) else None)


def _collectives(main, workers, world_size, seconds):
    """What the training thread issued (c10d operators) and what gloo's threads ran, matched in order.

    Each c10d operator here queues one gloo collective, and a collective that
    is waited for before the next is issued runs in the order it was queued;
    a call whose record names no dtype (DDP's all-reduce takes a list of
    tensors) takes its element size from gloo's record of it.
    """
    calls = [(e, *C10D_OPS[e["name"]]) for e in main if e["name"] in C10D_OPS]
    ran = [(e, e["name"].removeprefix(GLOO_PREFIX)) for e in workers]
    issued, executed = [], []
    for index, (event, op, argument) in enumerate(calls):
        numel, size = _sized(event, op, argument)
        if size is None and index < len(ran):
            size = _sized(ran[index][0], ran[index][1], 0, world_size)[1]
        if size is None:
            raise ValueError(f"{event['name']} names no dtype, and gloo recorded no collective to take it from")
        issued.append(TracedCollective(op, numel * size, *seconds(event), *_unit_of(event, main)))
    for index, (event, op) in enumerate(ran):
        numel, size = _sized(event, op, 0, world_size)
        call = issued[index] if index < len(issued) else TracedCollective(op, 0, 0.0, 0.0)
        executed.append(TracedCollective(op, numel * (size or 0), *seconds(event), call.layer, call.prefetched))
    return issued, executed


def _latest_unit(event, main, hook):
    """The unit whose FSDP ``hook`` marker (pre_forward, pre_backward) began last before ``event``."""
    ts, unit = float(event["ts"]), ""
    for marker in main:
        if float(marker["ts"]) > ts:
            break
        found = _FSDP_MARKER.match(marker["name"])
        if found and found.group(1) == hook:
            unit = found.group(2)
    return unit


def _compute_spans(main, seconds):
    return [Span(kind, _latest_unit(e, main, f"pre_{kind}"), *seconds(e))
            for e in main if (kind := COMPUTE_OPS.get(e["name"]))]


def _fsdp_spans(main, seconds):
    spans = []
    for event in main:
        found = _FSDP_MARKER.match(event["name"])
        if found and found.group(1) in ("all_gather", "post_backward_reduce"):
            kind = "all_gather" if found.group(1) == "all_gather" else "reduce_scatter"
            _, prefetched = _unit_of(event, main)
            spans.append(Span(kind, found.group(2), *seconds(event), prefetched))
    return spans


# ------------------------------------------------------------------ bytes on the wire


@dataclass(frozen=True)
class Traffic:
    """One kind of collective in a step: how many, the bytes of their tensors, the bytes each rank sends."""

    op: str
    count: int
    tensor_bytes: int
    ring_bytes: Fraction


def traffic(collectives, world_size: int) -> dict[str, Traffic]:
    """Count, tensor bytes and ring bytes per kind of collective, in the order they first appear.

    ``collectives`` are ``TracedCollective`` records (``StepRecord.issued``
    or ``.executed``); the ring bytes are ``ddp_lab.cost.ring_bytes.ring_bytes``'s.
    """
    check_positive_int("world_size", world_size)
    rows = {}
    for c in collectives:
        if not isinstance(c, TracedCollective):
            raise TypeError(f"expected TracedCollective records (StepRecord.issued or .executed), "
                            f"got {type(c).__name__}")
        count, nbytes, sent = rows.get(c.op, (0, 0, Fraction(0)))
        rows[c.op] = (count + 1, nbytes + c.nbytes, sent + ring_bytes(c.op, c.nbytes, world_size))
    return {op: Traffic(op, *row) for op, row in rows.items()}
