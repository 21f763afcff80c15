"""Recording what a rank held before and after a collective.

A picture of a collective is only as honest as its data. Inside each rank,
copy the tensors the rank holds just before the call and just after it, and
send those copies back to the notebook; the drawing is then made from what the
ranks really held, not from what the documentation says they should hold::

    def all_reduce_demo():
        rank = dist.get_rank()
        t = torch.tensor([10 * rank + 1, 10 * rank + 2])
        rec = record("all_reduce")
        rec.before(t=t)
        dist.all_reduce(t)
        return rec.after(t=t)            # a CollectiveRecord

    records = ddp_lab.launch(all_reduce_demo, 4)   # one record per rank

``before`` and ``after`` take the tensors by name. A value may be a tensor, a
list of tensors (the ``gather_list`` of ``gather``, the output list of
``all_gather``) or ``None`` for "this rank holds nothing here" (the
``scatter_list`` of a rank that is not the root). Everything is copied to the
CPU and detached, so a record is plain data: it pickles back to the notebook
and stays unchanged when the rank goes on modifying its tensors.

Used in Chapter 5, whose pictures of every collective are drawn from these records.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import torch

__all__ = ["CollectiveRecord", "Recorder", "record"]


@dataclass(frozen=True)
class CollectiveRecord:
    """What one rank held before and after one operation.

    ``before`` and ``after`` map a name (``"t"``, ``"gather_list"``) to a
    tensor, a tuple of tensors, or ``None`` (nothing held). ``note`` is an
    optional few words for a picture, e.g. ``"src=0"``.
    """

    name: str
    rank: int
    world_size: int
    before: dict = field(default_factory=dict)
    after: dict = field(default_factory=dict)
    note: str = ""

    def __str__(self) -> str:
        return (f"rank {self.rank}: {self.name}  before {_show(self.before)}  "
                f"->  after {_show(self.after)}")


class Recorder:
    """Collects one rank's tensors around one operation; see the module doc."""

    def __init__(self, name: str, rank: int, world_size: int, note: str = ""):
        if not isinstance(name, str) or not name:
            raise ValueError(f"name must be a non-empty string such as 'all_reduce', got {name!r}")
        self.name = name
        self.rank = rank
        self.world_size = world_size
        self.note = note
        self._before = None

    def before(self, **tensors) -> Recorder:
        """Copy the tensors this rank holds before the operation."""
        self._before = _copy_all(tensors)
        return self

    def after(self, **tensors) -> CollectiveRecord:
        """Copy the tensors it holds after the operation; return the record."""
        if self._before is None:
            raise RuntimeError(
                f"record({self.name!r}).after() was called before .before(): record "
                f"the tensors before the operation first")
        return CollectiveRecord(self.name, self.rank, self.world_size,
                                self._before, _copy_all(tensors), self.note)


def record(name: str, note: str = "") -> Recorder:
    """Start recording an operation called ``name`` on this rank.

    The rank and world size come from the default process group (or, before
    one exists, from the RANK and WORLD_SIZE variables that torchrun and
    ``ddp_lab.launch`` set).
    """
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        rank, world_size = dist.get_rank(), dist.get_world_size()
    else:
        rank = int(os.environ.get("RANK", 0))
        world_size = int(os.environ.get("WORLD_SIZE", 1))
    return Recorder(name, rank, world_size, note)


def _copy_all(tensors: dict) -> dict:
    return {name: _copy(name, value) for name, value in tensors.items()}


def _copy(name, value):
    if value is None:
        return None
    if isinstance(value, torch.Tensor):
        return value.detach().to("cpu", copy=True)
    if isinstance(value, (list, tuple)) and all(isinstance(v, torch.Tensor) for v in value):
        return tuple(v.detach().to("cpu", copy=True) for v in value)
    raise TypeError(
        f"{name}={type(value).__name__}: record a tensor, a list of tensors, or None "
        f"(for nothing held)")


def _show(values: dict) -> str:
    def one(value):
        if value is None:
            return "-"
        if isinstance(value, tuple):
            return "[" + ", ".join(one(v) for v in value) + "]"
        return str(value.tolist())

    return ", ".join(f"{name}={one(value)}" for name, value in values.items()) or "(nothing)"
