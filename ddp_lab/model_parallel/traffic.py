"""What a piece of code sends: every collective it issues, by phase, with the bytes it hands over.

Inside a rank, :func:`record_collectives` is a context manager; every
collective that the code under it issues is written down as a
:class:`Collective`: its name, the phase it ran in (whatever the caller set
``log.phase`` to: "forward", "backward"), its elements and bytes::

    with record_collectives() as log:
        log.phase = "forward"
        z = block(x)
        log.phase = "backward"
        z.sum().backward()
    log.count("all_reduce", "backward"), log.nbytes("all_reduce", "backward")

It is a ``TorchDispatchMode`` (``torch/utils/_python_dispatch.py``): every
operator that reaches the dispatcher passes through it, and a collective is
one of them, whoever calls it: ``dist.all_reduce`` (the op
``c10d.allreduce_``), DTensor's redistributions (the *functional*
collectives, ``_c10d_functional.all_reduce``), and the ones autograd runs in
the backward pass (it runs the backward under the same mode when
``backward()`` is called inside the block). torch's own
``torch.distributed.tensor.debug.CommDebugMode`` counts the same operators;
this one also adds up their sizes.

The size is the tensor handed to the collective: the input of an
all-reduce or a reduce-scatter, each rank's shard for an all-gather. What a
ring sends on the wire is a multiple of it
(:func:`ddp_lab.cost.bytes_sent_per_rank`).

Used in Chapter 15d.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field

import torch
from torch.utils._python_dispatch import TorchDispatchMode

__all__ = ["Collective", "CollectiveLog", "record_collectives"]

# Operator names (c10d's in-place ones and the functional ones) -> the collective's usual name.
_NAMES = {
    "allreduce_": "all_reduce", "allreduce_coalesced_": "all_reduce", "all_reduce": "all_reduce",
    "all_reduce_coalesced": "all_reduce",
    "allgather_": "all_gather", "_allgather_base_": "all_gather", "allgather_into_tensor_coalesced_": "all_gather",
    "all_gather_into_tensor": "all_gather", "all_gather_into_tensor_coalesced": "all_gather",
    "reduce_scatter_": "reduce_scatter", "_reduce_scatter_base_": "reduce_scatter",
    "reduce_scatter_tensor": "reduce_scatter", "reduce_scatter_tensor_coalesced": "reduce_scatter",
    "reduce_scatter_tensor_coalesced_": "reduce_scatter",
    "broadcast_": "broadcast", "broadcast": "broadcast", "alltoall_base_": "all_to_all",
    "all_to_all_single": "all_to_all", "reduce_": "reduce", "gather_": "gather", "scatter_": "scatter",
    "barrier": "barrier",
}


@dataclass(frozen=True)
class Collective:
    """One collective: its ``name`` ("all_reduce"), the ``phase`` it ran in, its elements and bytes."""

    name: str
    phase: str
    numel: int
    nbytes: int


@dataclass
class CollectiveLog:
    """The collectives recorded so far, in order; set ``phase`` to label the next ones."""

    phase: str = ""
    calls: list = field(default_factory=list)

    def _select(self, name, phase):
        return [c for c in self.calls if (name is None or c.name == name) and (phase is None or c.phase == phase)]

    def count(self, name: str | None = None, phase: str | None = None) -> int:
        """How many collectives (of ``name``, in ``phase``; None: any)."""
        return len(self._select(name, phase))

    def nbytes(self, name: str | None = None, phase: str | None = None) -> int:
        """Bytes handed to those collectives, summed."""
        return sum(c.nbytes for c in self._select(name, phase))


class _Recorder(TorchDispatchMode):
    def __init__(self, log: CollectiveLog):
        super().__init__()
        self.log = log

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        namespace, _, rest = str(func).partition(".")
        name = _NAMES.get(rest.split(".")[0]) if namespace in ("c10d", "_c10d_functional") else None
        if name is not None:
            first = args[0] if args else None
            tensors = [t for t in (first if isinstance(first, (list, tuple)) else [first])
                       if isinstance(t, torch.Tensor)]
            self.log.calls.append(Collective(name, self.log.phase, sum(t.numel() for t in tensors),
                                             sum(t.numel() * t.element_size() for t in tensors)))
        return func(*args, **(kwargs or {}))


@contextlib.contextmanager
def record_collectives() -> Iterator[CollectiveLog]:
    """Record every collective issued inside the block (inside a rank) into the yielded log."""
    log = CollectiveLog()
    with _Recorder(log):
        yield log
