"""Activation checkpointing: keep each block's input, recompute the rest in the backward pass.

A training step keeps, from the forward pass to the backward pass, every
tensor autograd saves (``ddp_lab.activation_memory.saved_for_backward``
counts them): for an MLP, the input of every ``Linear`` and the output of
every ``ReLU``. ``torch.utils.checkpoint.checkpoint(block, x,
use_reentrant=False)`` runs ``block(x)`` with a saved-tensor hook of its
own (``_checkpoint_hook`` in ``torch/utils/checkpoint.py``) that keeps
*nothing* of what the block saves, only ``x``; when the backward pass first
needs one of the block's saved tensors, the hook runs ``block(x)`` again
and hands over the recomputed tensors. Memory saved, one extra forward of
each checkpointed block paid in compute.

* :class:`BlockMLP` is the model: ``blocks`` blocks of two ``Linear`` +
  ``ReLU`` layers and a ``Linear`` head; set ``checkpoint_blocks`` to run
  every block under ``checkpoint``, with the same parameters either way;
* :func:`count_forward_calls` counts how many times each block's forward
  runs (a forward pre-hook on each block: the recomputation calls the
  block again, so it is counted too);
* :func:`step_flops` counts the floating-point operations of the forward
  and the backward pass with ``torch.utils.flop_counter.FlopCounterMode``
  (matrix products only, which is where an MLP's arithmetic is);
* :func:`gradients` runs one forward and backward and returns the gradients.

Recomputation stops as soon as the last tensor the block saved has been
recomputed (``early_stop=True``, the default): a block that ends with a
``ReLU``, which saves its output, is recomputed whole. Used in Chapter 15c.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint
from torch.utils.flop_counter import FlopCounterMode

from ddp_lab.validate import check_positive_int

__all__ = ["BlockMLP", "StepFlops", "count_forward_calls", "step_flops", "gradients"]


class BlockMLP(nn.Module):
    """``blocks`` blocks of ``Linear -> ReLU -> Linear -> ReLU`` (width ``width``), then a ``Linear`` head.

    With ``checkpoint_blocks`` True, each block runs under
    ``torch.utils.checkpoint.checkpoint(..., use_reentrant=False)``. The flag
    can be flipped on the same model: the parameters do not change.
    ``seed`` builds the weights from a private seed, leaving the caller's
    random state untouched.
    """

    def __init__(self, width: int = 256, blocks: int = 4, classes: int = 10, *,
                 checkpoint_blocks: bool = False, seed: int = 0):
        super().__init__()
        for name, value in (("width", width), ("blocks", blocks), ("classes", classes)):
            check_positive_int(name, value)
        if not isinstance(checkpoint_blocks, bool):
            raise TypeError(f"checkpoint_blocks must be True or False, got {checkpoint_blocks!r}")
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.blocks = nn.ModuleList(
                nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU())
                for _ in range(blocks))
            self.head = nn.Linear(width, classes)
        self.checkpoint_blocks = checkpoint_blocks

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=False) if self.checkpoint_blocks else block(x)
        return self.head(x)


@contextlib.contextmanager
def count_forward_calls(model: BlockMLP) -> Iterator[Counter]:
    """Count each block's forward calls while the ``with`` block runs: ``{"block 0": 2, ...}``.

    A forward pre-hook on every block adds one each time the block is
    called, by the model's forward or by checkpoint's recomputation.
    """
    if not isinstance(model, BlockMLP):
        raise TypeError(f"count_forward_calls needs a BlockMLP, got {type(model).__name__}")
    calls: Counter = Counter()
    handles = [block.register_forward_pre_hook(lambda module, args, name=f"block {i}": calls.update([name]))
               for i, block in enumerate(model.blocks)]
    try:
        yield calls
    finally:
        for handle in handles:
            handle.remove()


@dataclass(frozen=True)
class StepFlops:
    """Floating-point operations of one training step, counted (not timed)."""

    forward: int
    backward: int

    @property
    def total(self) -> int:
        return self.forward + self.backward


def _check_batch(x, y) -> None:
    if not isinstance(x, torch.Tensor) or x.dim() != 2:
        raise ValueError(f"x must be a 2-D tensor (samples x width), got {getattr(x, 'shape', x)!r}")
    if not isinstance(y, torch.Tensor) or y.shape != x.shape[:1]:
        raise ValueError(f"y must be a 1-D tensor of {x.shape[0]} class indices, got {getattr(y, 'shape', y)!r}")


def step_flops(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> StepFlops:
    """Run one forward (cross-entropy loss) and one backward; count each pass's FLOPs.

    ``FlopCounterMode`` (``torch/utils/flop_counter.py``) sees every
    operator that runs inside it, the recomputation in the backward pass
    included. The gradients are left in ``model``'s ``.grad``.
    """
    _check_batch(x, y)
    with FlopCounterMode(display=False) as forward:
        loss = F.cross_entropy(model(x), y)
    with FlopCounterMode(display=False) as backward:
        loss.backward()
    return StepFlops(forward.get_total_flops(), backward.get_total_flops())


def gradients(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> dict[str, torch.Tensor]:
    """One forward and backward from zero gradients; ``{name: gradient}`` of every parameter."""
    _check_batch(x, y)
    model.zero_grad(set_to_none=True)
    F.cross_entropy(model(x), y).backward()
    return {name: p.grad.clone() for name, p in model.named_parameters()}
