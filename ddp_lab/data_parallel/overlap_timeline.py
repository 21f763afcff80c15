"""Measure, inside a rank, how DDP overlaps communication with the backward pass.

During ``loss.backward()`` two things happen in a DDP model:

* autograd computes the gradients layer by layer, from the last layer to
  the first;
* DDP's reducer, told by an autograd hook each time a parameter's gradient
  is ready, launches the all-reduce of a *bucket* as soon as all of that
  bucket's gradients are ready, without waiting for the rest of the
  backward pass.

:class:`TimelineRecorder` writes down when each happens, on this rank's own
clock, measured from the moment ``backward()`` is called:

* a layer's backward starts when the gradient of its output arrives (a
  tensor hook on the output, registered by a forward hook) and ends when
  the last of its parameters' gradients has been accumulated
  (``register_post_accumulate_grad_hook``);
* a bucket's all-reduce starts when DDP hands the bucket to the
  communication hook, and ends when the future of that all-reduce
  completes (a ``then`` callback on it). The recorder's communication hook
  is torch's default ``allreduce_hook``, timed: what is measured is what DDP
  does anyway.

The result is a :class:`BackwardTimeline`: plain dataclasses of floats and
strings that can be returned to the notebook, tested and drawn
(:mod:`ddp_lab.draw.timeline`).

    model = DDP(mlp(widths), bucket_cap_mb=1)
    timeline = record_backward(model, x, y)      # on every rank

DDP builds its final buckets during the first backward pass, in the order
gradients become ready there, so :func:`record_backward` runs a few warm-up
steps before the one it records.

Used in Chapter 8 (buckets, and communication overlapping the backward pass).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

__all__ = ["Interval", "BackwardTimeline", "TimelineRecorder", "record_backward"]


@dataclass(frozen=True)
class Interval:
    """Something that ran from ``start`` to ``end`` (seconds after ``backward()`` was called)."""

    label: str
    start: float
    end: float

    @property
    def duration(self) -> float:
        return self.end - self.start


@dataclass(frozen=True)
class BackwardTimeline:
    """One backward pass of a DDP model on one rank.

    ``layers``: the backward of each layer, in the order it ran (last layer
    first). ``buckets``: the all-reduce of each bucket, by bucket index;
    ``bucket_contents[i]`` names the parameters in bucket i and
    ``bucket_bytes[i]`` its size. ``backward_end``: when ``backward()``
    returned, which DDP delays until every bucket is reduced.
    ``first_bucket_mb``: the smaller cap of the first bucket when the model
    was wrapped without ``bucket_cap_mb`` (DDP's default), else None: an
    explicit ``bucket_cap_mb`` applies to every bucket, the first included.
    """

    rank: int
    world_size: int
    bucket_cap_mb: float
    layers: tuple[Interval, ...]
    buckets: tuple[Interval, ...]
    bucket_contents: tuple[tuple[str, ...], ...]
    bucket_bytes: tuple[int, ...]
    backward_end: float
    first_bucket_mb: float | None = None

    def cap_text(self, spaced: bool = False) -> str:
        """"bucket_cap_mb=25", or for DDP's default "default bucket_cap_mb (25, first bucket 1)"."""
        if self.first_bucket_mb is None:
            return f"bucket_cap_mb{' = ' if spaced else '='}{self.bucket_cap_mb:g}"
        return f"default bucket_cap_mb ({self.bucket_cap_mb:g}, first bucket {self.first_bucket_mb:g})"

    @property
    def compute_end(self) -> float:
        """When the last layer's gradients were ready."""
        return max(layer.end for layer in self.layers)

    @property
    def communication_after_compute(self) -> float:
        """Seconds of all-reduce left after the gradients were all computed: the
        part of the communication that the backward pass did *not* hide."""
        return max(0.0, max(bucket.end for bucket in self.buckets) - self.compute_end)

    def bucket_layers(self, index: int) -> tuple[str, ...]:
        """The layers whose parameters are in bucket ``index``, in bucket order."""
        layers = []
        for name in self.bucket_contents[index]:
            layer = name.rsplit(".", 1)[0]
            if layer not in layers:
                layers.append(layer)
        return tuple(layers)

    def describe(self) -> str:
        """A deterministic summary (no times): the buckets and their layers."""
        buckets = len(self.buckets)
        lines = [f"{self.cap_text()}: {len(self.layers)} layers, "
                 f"{buckets} bucket{'s' if buckets != 1 else ''}"]
        for i in range(buckets):
            lines.append(f"  bucket {i}: {', '.join(self.bucket_layers(i))} "
                         f"({self.bucket_bytes[i] / 2**20:.2f} MiB)")
        return "\n".join(lines)


class TimelineRecorder:
    """Hooks on a DDP model that time each layer's backward and each bucket's all-reduce.

    Create it right after wrapping the model in DDP, before the first
    forward pass: a communication hook can only be registered then, and only
    once. Between :meth:`begin` (call it just before ``loss.backward()``)
    and :meth:`end` (just after), every hook writes down the time.
    """

    def __init__(self, ddp_model: nn.parallel.DistributedDataParallel):
        if not isinstance(ddp_model, nn.parallel.DistributedDataParallel):
            raise TypeError(
                f"TimelineRecorder needs a DistributedDataParallel model, got {type(ddp_model).__name__}: "
                "wrap it first, model = DistributedDataParallel(model)")
        self.ddp_model = ddp_model
        self._names = {id(p): name for name, p in ddp_model.module.named_parameters()}
        self._layers = {}  # module name -> its parameters
        self._handles = []
        self._t0 = None
        self._reset()
        ddp_model.register_comm_hook(self, _timed_allreduce_hook)
        for name, module in ddp_model.module.named_modules():
            own = [p for p in module.parameters(recurse=False) if p.requires_grad]
            if not own:
                continue
            self._layers[name] = own
            self._handles.append(module.register_forward_hook(self._on_forward(name)))
            for p in own:
                self._handles.append(p.register_post_accumulate_grad_hook(self._on_gradient(name)))

    # -- the clock

    def begin(self) -> None:
        """Start a new recording; call it right before ``loss.backward()``."""
        self._reset()
        self._t0 = time.perf_counter()

    def end(self) -> None:
        """Stop recording; call it right after ``loss.backward()``."""
        self._backward_end = self._now()
        self._t0 = None

    def _now(self):
        return time.perf_counter() - self._t0

    def _reset(self):
        self._layer_start, self._layer_end = {}, {}
        self._bucket_start, self._bucket_end = {}, {}
        self._bucket_contents, self._bucket_bytes = {}, {}
        self._backward_end = None

    # -- the hooks

    def _on_forward(self, name):
        def hook(module, inputs, output):
            if isinstance(output, torch.Tensor) and output.requires_grad:
                output.register_hook(lambda grad: self._mark_layer_start(name))
        return hook

    def _mark_layer_start(self, name):
        if self._t0 is not None:
            self._layer_start.setdefault(name, self._now())

    def _on_gradient(self, name):
        def hook(param):
            if self._t0 is not None:
                self._layer_end[name] = self._now()  # the last parameter of the layer wins
        return hook

    def _bucket_launched(self, bucket):
        index = bucket.index()
        if self._t0 is None:
            return None
        self._bucket_start[index] = self._now()
        self._bucket_contents[index] = tuple(self._names.get(id(p), "?") for p in bucket.parameters())
        self._bucket_bytes[index] = bucket.buffer().numel() * bucket.buffer().element_size()
        return index

    def _bucket_done(self, index):
        if index is not None and self._t0 is not None:
            self._bucket_end[index] = self._now()

    # -- the result

    def timeline(self) -> BackwardTimeline:
        """The last recorded backward pass."""
        if self._backward_end is None:
            raise RuntimeError("nothing recorded yet: call begin(), loss.backward(), end()")
        missing = [name for name in self._layers if name not in self._layer_end]
        if missing:
            raise RuntimeError(f"no gradient was recorded for {', '.join(missing)}: "
                               "were they used in the forward pass?")
        order = sorted(self._layers, key=lambda name: self._layer_end[name])
        layers = tuple(Interval(name, self._layer_start.get(name, 0.0), self._layer_end[name])
                       for name in order)
        indices = sorted(self._bucket_start)
        buckets = tuple(Interval(f"bucket {i}", self._bucket_start[i], self._bucket_end[i])
                        for i in indices)
        return BackwardTimeline(
            rank=dist.get_rank(),
            world_size=dist.get_world_size(),
            bucket_cap_mb=self.ddp_model.bucket_bytes_cap / 2**20,
            layers=layers,
            buckets=buckets,
            bucket_contents=tuple(self._bucket_contents[i] for i in indices),
            bucket_bytes=tuple(self._bucket_bytes[i] for i in indices),
            backward_end=self._backward_end,
            first_bucket_mb=_first_bucket_mb(self.ddp_model),
        )

    def remove(self) -> None:
        """Remove the module and tensor hooks (the communication hook stays with the model)."""
        for handle in self._handles:
            handle.remove()
        self._handles.clear()


def _first_bucket_mb(ddp_model):
    """The first bucket's own cap in MiB when DDP uses one (bucket_cap_mb left to its default), else None."""
    if not getattr(ddp_model, "bucket_bytes_cap_default", False):
        return None
    return dist._DEFAULT_FIRST_BUCKET_BYTES / 2**20


def _timed_allreduce_hook(recorder, bucket):
    """Torch's default all-reduce hook, with its launch and completion timed.

    (No type annotations: DDP checks them, and this module's postponed
    annotations would be strings it does not accept.)
    """
    index = recorder._bucket_launched(bucket)
    future = allreduce_hook(None, bucket)

    def completed(done):
        recorder._bucket_done(index)
        return done.value()

    return future.then(completed)


def record_backward(ddp_model, inputs, targets, loss_fn=F.cross_entropy, *,
                    warmup: int = 2) -> BackwardTimeline:
    """Run ``warmup`` training backward passes, then time one more; return its timeline.

    The warm-up lets DDP rebuild its buckets in the order gradients become
    ready (it does so after the first backward pass) and lets caches and
    thread pools settle. Gradients are zeroed before each pass; no
    optimizer step is taken. Call it on every rank (DDP's all-reduces are
    collectives).
    """
    recorder = TimelineRecorder(ddp_model)
    try:
        for _ in range(warmup + 1):
            ddp_model.zero_grad(set_to_none=True)
            loss = loss_fn(ddp_model(inputs), targets)
            recorder.begin()
            loss.backward()
            recorder.end()
    finally:
        recorder.remove()
    return recorder.timeline()
