"""Tensor parallelism in outline: one MLP block split over the ranks (Megatron-style).

An MLP block computes ``Z = GeLU(X A) B``. With W ranks, split

* ``A`` by **columns**: rank r holds ``A_r`` and computes ``Y_r = GeLU(X A_r)``,
  its own columns of the hidden layer. GeLU acts on each element, so no
  communication is needed here;
* ``B`` by **rows**: rank r holds ``B_r``, the rows that meet its columns of
  ``Y``, and computes ``Z_r = Y_r B_r``, a partial sum of the output;
* one **all-reduce** adds the partial sums: ``Z = Z_0 + ... + Z_{W-1}``.

Each rank stores 1/W of the block's weights and does 1/W of its arithmetic;
the price is an all-reduce of the activations in every forward pass (and
one in the backward), inside every layer. That is why tensor parallelism
stays within a node, on its fastest links.

:func:`tensor_parallel_mlp` runs inside a rank; the notebook compares its
result with the unsplit block computed in one process.

Used in Chapter 15.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F

__all__ = ["mlp_block", "tensor_parallel_mlp"]


def mlp_block(x: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The unsplit block: ``GeLU(x @ a) @ b``."""
    return F.gelu(x @ a) @ b


def tensor_parallel_mlp(x: torch.Tensor, a: torch.Tensor, b: torch.Tensor, group=None):
    """This rank's share of ``GeLU(x @ a) @ b``, then the all-reduce; returns (Z, shapes).

    ``x`` is the same on every rank. ``a`` (d x h) and ``b`` (h x d) are the
    full weights, passed whole for the demonstration: each rank keeps only
    its shard, ``a[:, cols]`` and ``b[cols, :]``, with h split evenly.
    """
    world, rank = dist.get_world_size(group), dist.get_rank(group)
    if a.shape[1] % world:
        raise ValueError(f"the hidden width {a.shape[1]} must be divisible by the {world} ranks")
    cols = slice(rank * a.shape[1] // world, (rank + 1) * a.shape[1] // world)
    a_r, b_r = a[:, cols].contiguous(), b[cols, :].contiguous()
    y_r = F.gelu(x @ a_r)                 # this rank's columns of the hidden layer
    z = y_r @ b_r                         # a partial sum of the output
    dist.all_reduce(z, group=group)       # the only communication
    shapes = {"A_r": tuple(a_r.shape), "Y_r": tuple(y_r.shape), "B_r": tuple(b_r.shape), "Z": tuple(z.shape)}
    return z, shapes
