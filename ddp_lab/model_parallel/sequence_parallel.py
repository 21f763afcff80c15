"""Megatron sequence parallelism on Chapter 15d's MLP block (Chapter 15g).

Tensor parallelism (``ddp_lab.model_parallel.tensor_parallel``) leaves the
block's output whole on every rank, after one all-reduce: the LayerNorm
and the residual connection that follow then run t times, once per rank,
each rank keeping all ``T x h`` of their activations. Korthikanti et al.
(2022, "Reducing Activation Recomputation in Large Transformer Models",
arXiv 2205.05198, section 4.2.2) cut the all-reduce into its two halves and
shard that region along the sequence:

* **g** (:class:`GatherFromSequenceParallel`), before the column-parallel
  layer: an all-gather of the ``T / t`` tokens of each rank forward, a
  reduce-scatter of the gradient backward;
* **g-bar** (:class:`ReduceScatterToSequenceParallel`), after the
  row-parallel layer: a reduce-scatter of the partial sums forward (each
  rank keeps the sum for its ``T / t`` tokens), an all-gather backward.

Between them, LayerNorm, dropout and the residual act on each token alone,
so each rank computes them for its own tokens. A ring all-reduce is a
reduce-scatter followed by an all-gather (Chapter 6): the same bytes cross
the links, and the norm region keeps 1/t of its activations.

The norm's weight and bias, and the second layer's bias, are whole on
every rank but see only the rank's tokens: their gradients are partial
sums, which Megatron all-reduces over the tensor-parallel ranks after the
backward pass (its ``sequence_parallel`` parameters). :func:`sequence_parallel_block`
is ``x + MLP(LayerNorm(x))`` built so; :func:`tensor_parallel_block` the
same with 15d's ``megatron_mlp``; :func:`reference_block` in one process.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F

from ddp_lab.model_parallel.tensor_parallel import megatron_mlp, mlp_block

__all__ = ["GatherFromSequenceParallel", "ReduceScatterToSequenceParallel", "reference_block",
           "tensor_parallel_block", "sequence_parallel_block"]


def _gather(x, group):
    world = dist.get_world_size(group)
    out = x.new_empty((world * x.shape[0],) + tuple(x.shape[1:]))
    dist.all_gather_single(out, x.contiguous(), group=group)
    return out


def _reduce_scatter(x, group):
    world = dist.get_world_size(group)
    if x.shape[0] % world:
        raise ValueError(f"the {x.shape[0]} tokens must split evenly over the {world} ranks")
    out = x.new_empty((x.shape[0] // world,) + tuple(x.shape[1:]))
    dist.reduce_scatter_single(out, x.contiguous(), group=group)
    return out


class GatherFromSequenceParallel(torch.autograd.Function):
    """g: all-gather the tokens forward, reduce-scatter the gradient backward."""

    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return _gather(x, group)

    @staticmethod
    def backward(ctx, grad):
        return _reduce_scatter(grad, ctx.group), None


class ReduceScatterToSequenceParallel(torch.autograd.Function):
    """g-bar: reduce-scatter the partial sums forward, all-gather the gradient backward."""

    @staticmethod
    def forward(ctx, partial, group):
        ctx.group = group
        return _reduce_scatter(partial, group)

    @staticmethod
    def backward(ctx, grad):
        return _gather(grad, ctx.group), None


def reference_block(x, ln_weight, ln_bias, a, b, a_bias, b_bias):
    """``x + MLP(LayerNorm(x))`` in one process (15d's ``mlp_block`` as the MLP)."""
    normed = F.layer_norm(x, x.shape[-1:], ln_weight, ln_bias)
    return x + mlp_block(normed, a, b, a_bias, b_bias)


def tensor_parallel_block(x, ln_weight, ln_bias, a_r, b_r, a_bias_r, b_bias, group=None):
    """Chapter 15d's tensor parallelism: ``x`` whole on every rank, the norm computed t times."""
    normed = F.layer_norm(x, x.shape[-1:], ln_weight, ln_bias)
    return x + megatron_mlp(normed, a_r, b_r, a_bias_r, b_bias, group)


def sequence_parallel_block(x_mine, ln_weight, ln_bias, a_r, b_r, a_bias_r, b_bias, group=None):
    """The same block with sequence parallelism: ``x_mine`` is this rank's ``T / t`` tokens, and so is the result."""
    normed = F.layer_norm(x_mine, x_mine.shape[-1:], ln_weight, ln_bias)  # on T/t tokens
    whole = GatherFromSequenceParallel.apply(normed, group)                # g: T tokens
    hidden = F.gelu(whole @ a_r + a_bias_r)                                # column-parallel
    mine = ReduceScatterToSequenceParallel.apply(hidden @ b_r, group)      # row-parallel, g-bar
    return x_mine + mine + b_bias                                          # T/t tokens again


def compare_with_tensor_parallel(tokens: int = 8, hidden: int = 16, *, seed: int = 0, atol: float = 1e-5):
    """Inside a rank: the block with tensor and with sequence parallelism, against one process.

    Returns a dict: ``same`` (output and gradients of each version against
    the one-process block, ``allclose`` within ``atol``), ``calls``
    (``(phase, name, nbytes)`` per version) and ``norm_saved`` (elements
    the LayerNorm kept for its backward pass, per version, measured with
    ``ddp_lab.activation_memory.saved_for_backward``).
    """
    from ddp_lab.activation_memory import saved_for_backward
    from ddp_lab.collectives.recorder import record_collectives
    from ddp_lab.model_parallel.tensor_parallel import shard_mlp

    rank, world = dist.get_rank(), dist.get_world_size()
    generator = torch.Generator().manual_seed(seed)
    x, dz = torch.randn(tokens, hidden, generator=generator), torch.randn(tokens, hidden, generator=generator)
    ln_w, ln_b = 1 + torch.randn(hidden, generator=generator) / 10, torch.randn(hidden, generator=generator) / 10
    a = torch.randn(hidden, 4 * hidden, generator=generator) / hidden ** 0.5
    b = torch.randn(4 * hidden, hidden, generator=generator) / (2 * hidden ** 0.5)
    a_bias, b_bias = torch.randn(4 * hidden, generator=generator) / 10, torch.randn(hidden, generator=generator) / 10
    whole = [t.clone().requires_grad_() for t in (x, ln_w, ln_b, a, b, a_bias, b_bias)]
    (reference_block(*whole) * dz).sum().backward()
    a_r, b_r, a_bias_r = shard_mlp(a, b, a_bias, rank, world)
    cols = slice(rank * 4 * hidden // world, (rank + 1) * 4 * hidden // world)
    rows = slice(rank * tokens // world, (rank + 1) * tokens // world)
    result = {"same": {}, "calls": {}, "norm_saved": {}}
    for name, block, x_in, dz_in in (("tensor parallel", tensor_parallel_block, x, dz),
                                     ("sequence parallel", sequence_parallel_block, x[rows], dz[rows])):
        mine = [t.clone().requires_grad_() for t in (x_in, ln_w, ln_b, a_r, b_r, a_bias_r, b_bias)]
        with record_collectives() as log:
            log.phase = "forward"
            z = block(*mine)
            log.phase = "backward"
            (z * dz_in).sum().backward()
        shared = [mine[i].grad.clone() for i in (1, 2, 6)]  # norm weight, norm bias, b's bias
        if name == "sequence parallel":
            for grad in shared:  # partial sums over this rank's tokens: Megatron all-reduces them
                dist.all_reduce(grad)
        expected_x = (whole[0].grad if name == "tensor parallel" else whole[0].grad[rows])
        expected_z = reference_block(*(t.detach() for t in whole))
        expected_z = expected_z if name == "tensor parallel" else expected_z[rows]
        checks = [(z, expected_z), (mine[0].grad, expected_x), (shared[0], whole[1].grad),
                  (shared[1], whole[2].grad), (mine[3].grad, whole[3].grad[:, cols]),
                  (mine[4].grad, whole[4].grad[cols]), (mine[5].grad, whole[5].grad[cols]),
                  (shared[2], whole[6].grad)]
        result["same"][name] = all(torch.allclose(g, e, atol=atol) for g, e in checks)
        result["calls"][name] = [(c.phase, c.name, c.nbytes) for c in log.calls]
        norm_in = x_in.clone().requires_grad_()
        saved = saved_for_backward(lambda: F.layer_norm(norm_in, (hidden,), mine[1], mine[2]), mine[1:3])
        result["norm_saved"][name] = saved.activation_bytes // 4
    return result
