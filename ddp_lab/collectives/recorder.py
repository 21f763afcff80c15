"""What collectives a rank issued, and what each one hands over, written down as the code runs.

Inside a rank, :func:`record_collectives` is a context manager; every
collective that the code under it issues is written down as a
:class:`Collective`: its name, the phase it ran in (whatever the caller set
``log.phase`` to: "forward", "backward"), its elements and bytes, their
dtype and shapes, and the size of the group it ran over::

    with record_collectives() as log:
        log.phase = "forward"
        z = block(x)
        log.phase = "backward"
        z.sum().backward()
    log.count("all_reduce", "backward"), log.nbytes("all_reduce", "backward")

It is a ``TorchDispatchMode`` (``torch/utils/_python_dispatch.py``): every
operator that reaches the dispatcher passes through it, and a collective is
one of them, whoever calls it: ``dist.all_reduce`` (the operator
``c10d.allreduce_``), DTensor's redistributions (the *functional*
collectives, ``_c10d_functional.all_reduce``), and the ones autograd runs in
the backward pass (it runs the backward under the same mode when
``backward()`` is called inside the block). torch's own
``torch.distributed.tensor.debug.CommDebugMode`` counts the same operators;
this one also adds up their sizes. Every operator of the ``c10d`` namespace
is written down, point-to-point ones too (``send``, ``recv``, under those
names); of the functional ones, the collectives (not ``wait_tensor``).

The size is that of the *full* tensor, as the alpha-beta model counts it
(``ddp_lab.cost.bytes_sent_per_rank``): the tensor of an all-reduce or a
broadcast, the *output* of an all-gather, the *input* of a reduce-scatter,
the first tensor argument of anything else. What a ring sends on the wire
follows from it and the group's size (``ddp_lab.cost.ring_bytes``).

This is the package's one dispatch-mode recorder: the checkers of Labs 4
and 6 (``ddp_lab.checks.ddp``, ``ddp_lab.checks.zero1``) use it to see
which collectives the reader's code runs, and Chapters 15b to 15g to count
the bytes of each kind of parallelism (per mesh dimension by ``group_name``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor
from torch.utils._python_dispatch import TorchDispatchMode

__all__ = ["Collective", "CollectiveLog", "record_collectives", "collective_name"]

# Operator names (c10d's in-place ones and the functional ones) -> the collective's usual name.
_NAMES = {
    "allreduce_": "all_reduce", "allreduce_coalesced_": "all_reduce", "all_reduce": "all_reduce",
    "all_reduce_": "all_reduce", "all_reduce_coalesced": "all_reduce", "all_reduce_coalesced_": "all_reduce",
    "allgather_": "all_gather", "_allgather_base_": "all_gather", "allgather_coalesced_": "all_gather",
    "allgather_into_tensor_coalesced_": "all_gather", "all_gather_into_tensor": "all_gather",
    "all_gather_into_tensor_coalesced": "all_gather", "all_gather_into_tensor_out": "all_gather",
    "reduce_scatter_": "reduce_scatter", "_reduce_scatter_base_": "reduce_scatter",
    "reduce_scatter_tensor": "reduce_scatter", "reduce_scatter_tensor_coalesced": "reduce_scatter",
    "reduce_scatter_tensor_coalesced_": "reduce_scatter", "reduce_scatter_tensor_out": "reduce_scatter",
    "broadcast_": "broadcast", "broadcast": "broadcast", "alltoall_": "all_to_all", "alltoall_base_": "all_to_all",
    "all_to_all_single": "all_to_all", "reduce_": "reduce", "gather_": "gather", "scatter_": "scatter",
    "barrier": "barrier",
}
# The argument that holds the full tensor, where it is not the first: a c10d reduce-scatter's input.
_FULL_TENSOR_ARGUMENT = {"reduce_scatter_": 1, "_reduce_scatter_base_": 1, "reduce_scatter_tensor_coalesced_": 1}
# Functional all-gathers are handed each rank's shard: the output is group_size times as large.
_GATHERS_SHARDS = {"all_gather_into_tensor", "all_gather_into_tensor_coalesced", "all_gather_into_tensor_out"}


@dataclass(frozen=True)
class Collective:
    """One collective a rank issued: its ``name`` ("all_reduce"), the ``phase`` it ran in, what it handed over.

    ``numel`` and ``nbytes`` are those of the full tensor (the module's
    docstring says which that is), summed over the tensors of a list;
    ``dtype`` is their dtype's name ("float32"; "" for none, "mixed" for
    several) and ``shapes`` the shapes of the tensors handed over (a
    functional all-gather is handed each rank's shard, and its ``numel``
    counts the output). ``group_size`` is the number of
    ranks of the group it ran over; None where the operator does not tell (a
    functional all-reduce names its group only by a string, and only the
    default group's name is known here). ``group_name`` is the name torch
    gave that group (``ProcessGroup.group_name``; a ``DeviceMesh`` dimension's
    group is ``mesh.get_group(dim)``): it tells apart two groups of one size,
    the two dimensions of a 2x2 mesh (Chapter 15e).
    """

    name: str
    phase: str
    numel: int
    nbytes: int
    dtype: str = ""
    shapes: tuple = ()
    group_size: int | None = None
    group_name: str | None = None


@dataclass
class CollectiveLog:
    """The collectives recorded so far, in order; set ``phase`` to label the next ones."""

    phase: str = ""
    calls: list = field(default_factory=list)

    def _select(self, name, phase, group_name=None):
        return [c for c in self.calls if (name is None or c.name == name) and (phase is None or c.phase == phase)
                and (group_name is None or c.group_name == group_name)]

    def count(self, name: str | None = None, phase: str | None = None, group_name: str | None = None) -> int:
        """How many collectives (of ``name``, in ``phase``, over the group named ``group_name``; None: any)."""
        return len(self._select(name, phase, group_name))

    def nbytes(self, name: str | None = None, phase: str | None = None, group_name: str | None = None) -> int:
        """Bytes handed to those collectives, summed."""
        return sum(c.nbytes for c in self._select(name, phase, group_name))


def collective_name(operator: str) -> str | None:
    """The collective an operator runs, by its usual name, or None where it is no c10d operation.

    ``"c10d.allreduce_.default"`` -> ``"all_reduce"``,
    ``"_c10d_functional.all_gather_into_tensor.default"`` -> ``"all_gather"``,
    ``"c10d.send.default"`` -> ``"send"``; ``"aten.mm.default"`` and
    ``"_c10d_functional.wait_tensor.default"`` -> None.
    """
    namespace, _, rest = operator.partition(".")
    op = rest.split(".")[0]
    if namespace == "c10d":
        return _NAMES.get(op, op.strip("_"))
    if namespace == "_c10d_functional":
        return _NAMES.get(op)
    return None


def _tensors(value) -> list:
    """The tensors in an argument: a tensor, a list of them, or a list of lists."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for item in value for t in _tensors(item)]
    return []


def _group(args) -> tuple[int | None, str | None]:
    """The size and name of the group a c10d operator runs over (its first ``ScriptObject`` argument)."""
    for value in args:
        if isinstance(value, torch.ScriptObject):
            try:
                group = dist.ProcessGroup.unbox(value)
            except RuntimeError:  # not a process group: never so in torch 2.13's c10d operators
                return None, None
            return group.size(), group.group_name
    return None, None


def _functional_group_size(op, args) -> int | None:
    """A functional collective's group size: its ``group_size`` argument, or the default group's by its name."""
    if op in _GATHERS_SHARDS:
        return args[1]
    if op.startswith("reduce_scatter_tensor"):
        return args[2]
    name = _functional_group_name(args)
    if name is not None and dist.is_initialized() and name == dist.group.WORLD.group_name:
        return dist.get_world_size()
    return None


def _functional_group_name(args) -> str | None:
    """A functional collective's group, by name: its last argument (torch 2.13's ``_c10d_functional`` schemas)."""
    name = args[-1] if args else None
    return name if isinstance(name, str) else None


def _record(operator: str, args, phase: str) -> Collective | None:
    name = collective_name(operator)
    if name is None:
        return None
    namespace, _, rest = operator.partition(".")
    op = rest.split(".")[0]
    argument = _FULL_TENSOR_ARGUMENT.get(op, 0) if namespace == "c10d" else 0
    tensors = _tensors(args[argument]) if len(args) > argument else []
    if namespace == "c10d":
        group_size, group_name = _group(args)
    else:
        group_size, group_name = _functional_group_size(op, args), _functional_group_name(args)
    times = group_size if namespace == "_c10d_functional" and op in _GATHERS_SHARDS else 1
    dtypes = sorted({str(t.dtype).removeprefix("torch.") for t in tensors})
    return Collective(name, phase, times * sum(t.numel() for t in tensors),
                      times * sum(t.numel() * t.element_size() for t in tensors),
                      dtypes[0] if len(dtypes) == 1 else ("mixed" if dtypes else ""),
                      tuple(tuple(t.shape) for t in tensors), group_size, group_name)


class _Recorder(TorchDispatchMode):
    def __init__(self, log: CollectiveLog):
        super().__init__()
        self.log = log

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        # A mode runs before a tensor subclass: an operator on DTensors reaches
        # it first, and the collectives DTensor issues while it runs that
        # operator (the all-reduce of a norm inside clip_grad_norm_, a
        # redistribution inside an op) would pass unseen. NotImplemented lets
        # DTensor run it and desugar it into operators on plain tensors, which
        # come back here: torch's CommDebugMode does the same
        # (torch/distributed/tensor/debug/_comm_mode.py).
        if any(issubclass(t, DTensor) for t in types):
            return NotImplemented
        collective = _record(str(func), args, self.log.phase)
        if collective is not None:
            self.log.calls.append(collective)
        return func(*args, **(kwargs or {}))


@contextlib.contextmanager
def record_collectives(log: CollectiveLog | None = None) -> Iterator[CollectiveLog]:
    """Record every collective issued inside the block (inside a rank) into the yielded log.

    Pass a ``log`` to go on writing into one from an earlier block (the
    checkers record a wrapper's construction and each step's backward, and
    nothing between them); by default a new one.
    """
    if log is None:
        log = CollectiveLog()
    elif not isinstance(log, CollectiveLog):
        raise TypeError(f"log must be a CollectiveLog (or None for a new one), got {type(log).__name__}")
    with _Recorder(log):
        yield log
