"""The small models Part III trains: multilayer perceptrons with named layers.

One builder, :func:`mlp`, serves every chapter: a two-input classifier for
the spirals, a deeper and wider one whose gradients fill several DDP
buckets, a small one for the lab checker. Layers are named ``fc1``, ``fc2``,
..., so a timeline or a bucket listing can say "fc3" rather than "3".

``seed`` builds the weights from a private seed and leaves the caller's
random state untouched: ``mlp(..., seed=0)`` is the same model on every rank
and in every run, while ``mlp(..., seed=rank)`` deliberately gives each rank
a different one (which is what DDP's initial broadcast has to fix).
"""

from __future__ import annotations

from collections import OrderedDict

import torch
from torch import nn

from ddp_lab.validate import is_int

__all__ = ["mlp", "parameter_count", "flat_parameters"]


def mlp(widths=(2, 64, 64, 3), *, seed: int | None = None) -> nn.Sequential:
    """``Linear`` layers of the given ``widths`` with ``ReLU`` between them.

    ``widths=(2, 64, 64, 3)`` is ``fc1: 2 -> 64, relu1, fc2: 64 -> 64, relu2,
    fc3: 64 -> 3``; the last layer has no activation (it returns logits).
    """
    widths = tuple(widths)
    if len(widths) < 2 or not all(
            is_int(w) and w > 0 for w in widths):
        raise ValueError(f"widths must be at least two positive ints (inputs, ..., outputs), got {widths!r}")
    if seed is None:
        return _build(widths)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return _build(widths)


def _build(widths):
    layers = OrderedDict()
    last = len(widths) - 1
    for i, (fan_in, fan_out) in enumerate(zip(widths, widths[1:]), start=1):
        layers[f"fc{i}"] = nn.Linear(fan_in, fan_out)
        if i < last:
            layers[f"relu{i}"] = nn.ReLU()
    return nn.Sequential(layers)


def parameter_count(model: nn.Module) -> int:
    """How many numbers the model learns."""
    return sum(p.numel() for p in model.parameters())


def flat_parameters(model: nn.Module) -> torch.Tensor:
    """All parameters in one detached 1-D tensor (a copy), in registration order."""
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])
