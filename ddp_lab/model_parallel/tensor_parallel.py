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
result with the unsplit block computed in one process. It does the forward
pass only. For training, the two collectives become autograd functions,
the *conjugate operators* f and g of Megatron-LM (Shoeybi et al., 2019,
section 3; ``_CopyToModelParallelRegion`` and
``_ReduceFromModelParallelRegion`` in Megatron-LM's
``megatron/core/tensor_parallel/mappings.py``):

* **f** (:class:`CopyToTensorParallel`), at the block's input: the identity
  in the forward pass (every rank already holds the whole ``X``), an
  all-reduce in the backward pass. Each rank's ``A_r`` sees all of ``X``,
  so each rank's gradient of ``X`` is only the part that flows through its
  own columns: the sum over the ranks is the gradient of ``X``;
* **g** (:class:`ReduceFromTensorParallel`), at the block's output: the
  all-reduce of the partial sums in the forward pass, the identity in the
  backward pass (the gradient of ``Z`` is the same whole tensor on every
  rank, and each ``Z_r`` contributed to all of ``Z``).

:func:`megatron_mlp` is the block with both, and with Megatron's biases
(``a_bias`` split with the columns of ``A``, ``b_bias`` whole on every rank
and added once, after the all-reduce): one all-reduce of the activations
forward, one backward, and nothing else. :func:`shard_mlp` cuts the full
weights into one rank's shards.

Used in Chapters 15 and 15d.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F

__all__ = ["mlp_block", "tensor_parallel_mlp", "CopyToTensorParallel", "ReduceFromTensorParallel",
           "copy_to_tensor_parallel", "reduce_from_tensor_parallel", "shard_mlp", "megatron_mlp"]


def mlp_block(x: torch.Tensor, a: torch.Tensor, b: torch.Tensor, a_bias: torch.Tensor | None = None,
              b_bias: torch.Tensor | None = None) -> torch.Tensor:
    """The unsplit block: ``GeLU(x @ a) @ b``, or ``GeLU(x @ a + a_bias) @ b + b_bias`` with the biases."""
    hidden = x @ a if a_bias is None else x @ a + a_bias
    z = F.gelu(hidden) @ b
    return z if b_bias is None else z + b_bias


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


# ------------------------------------------------- training: the f and g operators


def _world(group):
    """This rank's rank and the size of ``group``; a clear error outside a rank."""
    if not dist.is_initialized():
        raise RuntimeError("tensor parallelism runs inside a rank: call it from a function run by "
                           "ddp_lab.launch(fn, world_size)")
    return dist.get_rank(group), dist.get_world_size(group)


class CopyToTensorParallel(torch.autograd.Function):
    """Megatron's f: the identity forward, an all-reduce (sum) of the gradient
    backward."""

    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return x.view_as(x)  # the same values: a view, nothing copied

    @staticmethod
    def backward(ctx, grad):
        # all_reduce works in place: leave autograd's tensor alone
        grad = grad.contiguous().clone()
        dist.all_reduce(grad, group=ctx.group)
        return grad, None


class ReduceFromTensorParallel(torch.autograd.Function):
    """Megatron's g: an all-reduce (sum) of the partial sums forward, the
    identity backward."""

    @staticmethod
    def forward(ctx, partial, group):
        total = partial.contiguous().clone()
        dist.all_reduce(total, group=group)
        return total

    @staticmethod
    def backward(ctx, grad):
        return grad, None


def copy_to_tensor_parallel(x: torch.Tensor, group=None) -> torch.Tensor:
    """f: enter the tensor-parallel region (``x`` whole on every rank)."""
    _world(group)
    return CopyToTensorParallel.apply(x, group)


def reduce_from_tensor_parallel(partial: torch.Tensor, group=None) -> torch.Tensor:
    """g: leave the tensor-parallel region, adding up every rank's partial sum."""
    _world(group)
    return ReduceFromTensorParallel.apply(partial, group)


def shard_mlp(a: torch.Tensor, b: torch.Tensor, a_bias: torch.Tensor, rank: int, world_size: int):
    """Rank ``rank``'s shards: ``(a[:, cols], b[cols, :], a_bias[cols])``, contiguous copies.

    ``a`` is d x h, ``b`` is h x d, ``a_bias`` has h elements; ``cols`` is
    the rank's h / W consecutive columns of the hidden layer. ``b``'s bias is
    not split: every rank holds it whole.
    """
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[0] or tuple(a_bias.shape) != (a.shape[1],):
        raise ValueError(f"expected a (d x h), b (h x d) and a_bias (h), got shapes {tuple(a.shape)}, "
                         f"{tuple(b.shape)} and {tuple(a_bias.shape)}")
    if not 0 <= rank < world_size or a.shape[1] % world_size:
        raise ValueError(f"rank {rank} of {world_size}: the hidden width {a.shape[1]} must be divisible "
                         f"by the world size, and 0 <= rank < world size")
    width = a.shape[1] // world_size
    cols = slice(rank * width, (rank + 1) * width)
    return a[:, cols].contiguous(), b[cols, :].contiguous(), a_bias[cols].contiguous()


def megatron_mlp(x: torch.Tensor, a_r: torch.Tensor, b_r: torch.Tensor,
                 a_bias_r: torch.Tensor, b_bias: torch.Tensor,
                 group=None) -> torch.Tensor:
    """This rank's part of ``GeLU(x A + a) B + b``, trainable:
    ``g(GeLU(f(x) A_r + a_r) B_r) + b``.

    The result is the whole output on every rank; backward gives each rank
    the gradients of its own shards, of the whole ``b_bias``, and of ``x``.
    """
    # f: the identity now, an all-reduce in the backward pass
    x = copy_to_tensor_parallel(x, group)
    y_r = F.gelu(x @ a_r + a_bias_r)  # this rank's columns of the hidden layer
    # g: an all-reduce now, the identity in the backward pass
    z = reduce_from_tensor_parallel(y_r @ b_r, group)
    return z + b_bias  # added once, after the sum
