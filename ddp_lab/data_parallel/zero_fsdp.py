"""DDP, ZeRO-1 and FSDP on real ranks: what each rank holds after training.

Runs inside a rank (``ddp_lab.launch(train_and_measure, 2, args=("FSDP",))``):
the same small MLP is trained for a few steps with Adam in fp32 under one of
three strategies, and the rank counts the bytes it holds of each model state:

* ``"DDP"``: ``DistributedDataParallel`` + ``torch.optim.Adam``: every rank
  holds everything.
* ``"ZeRO-1"``: DDP + ``ZeroRedundancyOptimizer``: the optimizer state is
  split over the ranks. PyTorch's version gives each rank *whole*
  parameters (a greedy split by size), so the shares are only as even as
  the parameter sizes allow.
* ``"FSDP"``: ``fully_shard`` (FSDP2) on each layer and on the model: the
  parameters are ``DTensor`` shards (each rank holds rows of every matrix),
  so gradients and optimizer state are sharded too: ZeRO-3. It runs on CPU
  with gloo, which implements the all-gather and reduce-scatter it needs.

The data differ on each rank (seeded by rank), as in data-parallel training;
all three strategies compute the same update, which the returned full
weights let the notebook compare.

Used in Chapter 15.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

from ddp_lab.data_parallel.fsdp import shard_per_layer
from ddp_lab.models import mlp

__all__ = ["STRATEGIES", "SIZES", "RankState", "train_and_measure"]

STRATEGIES = ("DDP", "ZeRO-1", "FSDP")
SIZES = (64, 256, 256, 16)  # the widths of the model every strategy trains: ddp_lab.models.mlp(SIZES)


@dataclass(frozen=True)
class RankState:
    """Bytes of each model state held by one rank, and the local shape of each parameter."""

    strategy: str
    rank: int
    parameters: int
    gradients: int
    optimizer: int
    shapes: dict

    @property
    def total(self) -> int:
        return self.parameters + self.gradients + self.optimizer


def _local(tensor: torch.Tensor) -> torch.Tensor:
    """The part of a tensor this rank stores: the local shard of a DTensor, else the tensor."""
    return tensor.to_local() if hasattr(tensor, "to_local") else tensor


def _nbytes(tensor: torch.Tensor) -> int:
    local = _local(tensor)
    return local.numel() * local.element_size()


def _wrap(strategy: str, model: nn.Module, lr: float):
    from torch.nn.parallel import DistributedDataParallel as DDP

    if strategy == "DDP":
        wrapped = DDP(model)
        return wrapped, torch.optim.Adam(wrapped.parameters(), lr=lr)
    if strategy == "ZeRO-1":
        from torch.distributed.optim import ZeroRedundancyOptimizer

        wrapped = DDP(model)
        return wrapped, ZeroRedundancyOptimizer(wrapped.parameters(), optimizer_class=torch.optim.Adam, lr=lr)
    if strategy == "FSDP":
        # each Linear a unit (one all-gather per layer, just before it runs), then the
        # root, on a mesh of the CPU: fully_shard's default mesh is the GPU where there
        # is one, and on a GPU with fewer GPUs than ranks (Colab) it fails (Chapter 15b)
        shard_per_layer(model)
        return model, torch.optim.Adam(model.parameters(), lr=lr)
    raise ValueError(f"strategy must be one of {', '.join(map(repr, STRATEGIES))}; got {strategy!r}")


def _optimizer_bytes(optimizer) -> int:
    """Bytes of the optimizer's per-parameter tensors on this rank (Adam's step counters left out)."""
    inner = getattr(optimizer, "optim", optimizer)  # ZeroRedundancyOptimizer wraps this rank's Adam
    return sum(_nbytes(value) for state in inner.state.values() for value in state.values()
               if torch.is_tensor(value) and value.dim() > 0)


def train_and_measure(strategy: str, steps: int = 3, seed: int = 0, sizes=SIZES,
                      batch: int = 8, lr: float = 1e-3):
    """Train ``steps`` steps under ``strategy`` (in a rank); return (RankState, full weights).

    The full weights are gathered from the shards under FSDP (``full_tensor``),
    so every strategy returns the whole model for comparison.
    """
    torch.manual_seed(seed)
    model, optimizer = _wrap(strategy, mlp(sizes), lr)
    generator = torch.Generator().manual_seed(seed + 1 + dist.get_rank())
    for _ in range(steps):
        x = torch.randn(batch, sizes[0], generator=generator)
        y = torch.randint(0, sizes[-1], (batch,), generator=generator)
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()
    parameters = list(model.parameters())
    names = [name.removeprefix("module.") for name, _ in model.named_parameters()]
    state = RankState(
        strategy=strategy,
        rank=dist.get_rank(),
        parameters=sum(_nbytes(p) for p in parameters),
        gradients=sum(_nbytes(p.grad) for p in parameters if p.grad is not None),
        optimizer=_optimizer_bytes(optimizer),
        shapes={name: tuple(_local(p).shape) for name, p in zip(names, parameters)},
    )
    full = {name: (p.full_tensor() if hasattr(p, "full_tensor") else p).detach().clone()
            for name, p in zip(names, parameters)}
    return state, full
