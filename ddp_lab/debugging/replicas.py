"""Are the replicas still the same model? Checksums compared across ranks.

Data parallelism rests on one invariant: after every step, every rank holds
the same parameters, bit for bit. Nothing in PyTorch checks it while a job
runs, so replicas can drift apart without an error: weights initialised
with a rank-dependent seed and never broadcast, a BatchNorm buffer that
each rank updates from its own batches, an update applied on one rank only.
The loss still goes down; the saved model is rank 0's, whatever the others
did.

:func:`compare_replicas` checks the invariant with one small collective:
each rank reduces every tensor of its ``state_dict`` (parameters *and*
buffers) to one integer, an exact checksum of its bytes, and the ranks
all-gather these integers. Equal checksums mean equal bytes (up to a
collision, which the weighting below makes unlikely for the small edits
that drift produces); different ones name the tensor and the ranks. Every
rank must call it at the same point, as any collective.

Used in Chapter 13b ("Silent divergence") and by the checker of Lab 5b.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.distributed as dist

__all__ = ["tensor_checksum", "compare_replicas", "ReplicaReport"]

_WEIGHT_PERIOD = 251  # a prime: a byte's weight depends on its position, so swapped bytes change the sum


def tensor_checksum(tensor: torch.Tensor) -> int:
    """An exact checksum of the tensor's bytes: the sum of byte x (position mod 251 + 1).

    Integer arithmetic only, so it is the same on every machine and for
    every float path; two tensors with equal bytes have equal checksums.
    """
    data = tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8).to(torch.int64)
    weights = torch.arange(data.numel(), dtype=torch.int64) % _WEIGHT_PERIOD + 1
    return int((data * weights).sum())


@dataclass(frozen=True)
class ReplicaReport:
    """The verdict of :func:`compare_replicas`, the same on every rank.

    ``differing`` maps each tensor whose bytes differ from rank 0's to the
    ranks where they differ; ``max_difference`` is, for floating tensors,
    the largest gap between any two ranks (max over ranks minus min over
    ranks, element by element).
    """

    world_size: int
    names: tuple[str, ...]
    buffers: frozenset[str]
    differing: dict[str, tuple[int, ...]] = field(default_factory=dict)
    max_difference: dict[str, float] = field(default_factory=dict)

    @property
    def agree(self) -> bool:
        return not self.differing

    @property
    def ranks_that_differ(self) -> tuple[int, ...]:
        """Every rank with at least one tensor unlike rank 0's."""
        return tuple(sorted({rank for ranks in self.differing.values() for rank in ranks}))

    def __bool__(self) -> bool:
        return self.agree

    def __str__(self) -> str:
        count = len(self.names)
        if self.agree:
            return f"replicas agree: all {count} tensors identical on {self.world_size} ranks"
        lines = [f"replicas differ: {len(self.differing)} of {count} tensors differ from rank 0's"]
        for name, ranks in self.differing.items():
            kind = "buffer" if name in self.buffers else "parameter"
            lines.append(f"  {name} ({kind}): on rank{'s' if len(ranks) > 1 else ''} "
                         f"{', '.join(map(str, ranks))}")
        return "\n".join(lines)

    __repr__ = __str__


def compare_replicas(module: torch.nn.Module, group=None) -> ReplicaReport:
    """Compare every parameter and buffer of ``module`` across the ranks of ``group``.

    A DDP-wrapped model can be passed as it is (its ``module`` is used, so
    the names are the model's own). Collective: every rank of the group must
    call it, with a model of the same structure. Raises ValueError, on every
    rank, when the ranks' models do not have the same number of tensors.
    """
    if not isinstance(module, torch.nn.Module):
        raise TypeError(f"compare_replicas takes a torch.nn.Module, got {type(module).__name__}")
    if isinstance(module, torch.nn.parallel.DistributedDataParallel):
        module = module.module
    state = module.state_dict(keep_vars=False)
    names = tuple(state)
    buffers = frozenset(name for name, _ in module.named_buffers())
    world_size = dist.get_world_size(group)

    counts = [torch.zeros(1, dtype=torch.int64) for _ in range(world_size)]
    dist.all_gather(counts, torch.tensor([len(names)], dtype=torch.int64), group=group)
    if len({int(c) for c in counts}) > 1:
        raise ValueError(f"the ranks' models have different numbers of tensors: "
                         f"{[int(c) for c in counts]} (by rank); compare the same model on every rank")

    local = torch.tensor([tensor_checksum(t) for t in state.values()], dtype=torch.int64)
    gathered = [torch.zeros_like(local) for _ in range(world_size)]
    dist.all_gather(gathered, local, group=group)
    differing = {}
    for i, name in enumerate(names):
        ranks = tuple(r for r in range(1, world_size) if gathered[r][i] != gathered[0][i])
        if ranks:
            differing[name] = ranks

    max_difference = {}
    for name in differing:  # the same names on every rank: the same collectives
        tensor = state[name]
        if tensor.is_floating_point():
            high, low = tensor.detach().clone(), tensor.detach().clone()
            dist.all_reduce(high, op=dist.ReduceOp.MAX, group=group)
            dist.all_reduce(low, op=dist.ReduceOp.MIN, group=group)
            max_difference[name] = float((high - low).max()) if high.numel() else 0.0
    return ReplicaReport(world_size, names, buffers, differing, max_difference)
