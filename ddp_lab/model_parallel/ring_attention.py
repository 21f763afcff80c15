"""Ring attention: one sequence's attention over W ranks, keys and values passed round a ring (Chapter 15g).

Rank r holds block r of the queries, keys and values (``n = S / W`` tokens
each). Attention of its queries needs every key and value, so the K/V
blocks travel: at step s the rank computes with the block it holds, sends
that block to its right neighbour ``r + 1`` and receives the next from its
left, ``r - 1`` (all mod W). After W steps it has seen every block, and
after W - 1 transfers every block has visited every rank (Liu, Zaharia and
Abbeel, 2023, "Ring Attention with Blockwise Transformers for Near-Infinite
Context", arXiv 2310.01889).

The softmax runs over all S keys, but the rank sees them one block at a
time, so it is combined *online* (Milakov and Gimelshein, 2018, arXiv
1805.02867; FlashAttention, Dao et al., 2022, arXiv 2205.14135): for each
query the rank keeps a running maximum ``m`` of the scores, a running sum
``l`` of ``exp(score - m)`` and a running output ``o``, the sum of
``exp(score - m) v``. A new block with scores ``s``:

    m_new = max(m, max(s))
    l = l exp(m - m_new) + sum(exp(s - m_new))
    o = o exp(m - m_new) + exp(s - m_new) V
    m = m_new

and at the end the output is ``o / l``. The factor ``exp(m - m_new)``
rescales what was summed under the old maximum; forgetting it weighs the
earlier blocks wrongly. Subtracting the maximum keeps ``exp`` below 1: a
score of 89 alone would overflow float32.

:func:`ring_attention` runs inside a rank; :func:`full_attention` is the
one-process reference; :func:`online_softmax_update` is one step of the
combination, shared with the checker of the exercise
(``ddp_lab.checks.ring_attention``).
"""

from __future__ import annotations

import torch
import torch.distributed as dist

__all__ = ["full_attention", "online_softmax_update", "ring_attention"]


def full_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """``softmax(q k^T / sqrt(d)) v`` for ``(tokens, d)`` tensors, in one process."""
    scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
    return torch.softmax(scores, dim=-1) @ v


def online_softmax_update(state, q, k_block, v_block):
    """Fold one K/V block into ``state = (m, l, o)``; return the new state.

    ``state`` is None before the first block.
    """
    scores = q @ k_block.transpose(-2, -1) / q.shape[-1] ** 0.5
    block_max = scores.max(dim=-1, keepdim=True).values
    if state is None:
        m_new = block_max
        p = torch.exp(scores - m_new)
        return m_new, p.sum(dim=-1, keepdim=True), p @ v_block
    m, total, o = state
    m_new = torch.maximum(m, block_max)
    scale = torch.exp(m - m_new)  # rescale what the old maximum summed
    p = torch.exp(scores - m_new)
    l_new = total * scale + p.sum(dim=-1, keepdim=True)
    return m_new, l_new, o * scale + p @ v_block


def ring_attention(q, k, v, group=None):
    """This rank's rows of attention over the whole sequence.

    ``q``, ``k``, ``v`` are the rank's ``(n, d)`` blocks.

    K and V travel together, one tensor of ``2 n d`` values per step, to
    the right neighbour, posted before the block is used so that the
    transfer can run while the rank computes.
    """
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    right, left = (rank + 1) % world, (rank - 1) % world
    if group is not None:
        right = dist.get_global_rank(group, right)
        left = dist.get_global_rank(group, left)
    block = torch.stack([k, v]).contiguous()
    state = None
    for step in range(world):
        if step < world - 1:  # start passing the block on before using it
            incoming = torch.empty_like(block)
            requests = dist.batch_isend_irecv([
                dist.P2POp(dist.isend, block, right, group),
                dist.P2POp(dist.irecv, incoming, left, group)])
        state = online_softmax_update(state, q, block[0], block[1])
        if step < world - 1:
            for request in requests:
                request.wait()
            block = incoming
    m, total, o = state
    return o / total


def compare_with_full_attention(sequence: int = 16, width: int = 8, *, seed: int = 0, atol: float = 1e-6):
    """Inside a rank: ring attention of this rank's block against full attention in one process.

    Returns ``(same, sends)``: whether the rank's rows agree within ``atol``
    (``allclose``), and the point-to-point messages it issued as
    ``(name, nbytes)``, recorded by ``record_collectives``.
    """
    from ddp_lab.collectives.recorder import record_collectives

    rank, world = dist.get_rank(), dist.get_world_size()
    if sequence % world:
        raise ValueError(f"the sequence of {sequence} tokens must split evenly over the {world} ranks")
    generator = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(sequence, width, generator=generator) for _ in range(3))
    n = sequence // world
    mine = slice(rank * n, (rank + 1) * n)
    with record_collectives() as log:
        out = ring_attention(q[mine], k[mine], v[mine])
    same = torch.allclose(out, full_attention(q, k, v)[mine], atol=atol)
    return same, [(c.name, c.nbytes) for c in log.calls]
