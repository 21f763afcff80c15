"""Chapter 15g's ring attention checker on right and wrong answers, on real ranks."""

import torch
import torch.distributed as dist

from ddp_lab.checks.ring_attention import check_ring_attention
from ddp_lab.model_parallel.ring_attention import ring_attention


def ring(q, k, v, *, max_kept=True, rescale=True, lse=True, towards=1):
    """A reader's ring attention, with one of the usual slips switched on."""
    rank, world = dist.get_rank(), dist.get_world_size()
    block, outputs = torch.stack([k, v]), []
    m = total = o = None
    for step in range(world):
        s = q @ block[0].T / q.shape[-1] ** 0.5
        if not lse:
            outputs.append(torch.softmax(s, -1) @ block[1])
        else:
            m_new = s.max(-1, keepdim=True).values if max_kept else torch.zeros(len(q), 1)
            if m is not None and max_kept:
                m_new = torch.maximum(m, m_new)
            scale = torch.exp(m - m_new) if (m is not None and rescale) else 1.0
            p = torch.exp(s - m_new)
            total = p.sum(-1, keepdim=True) if total is None else total * scale + p.sum(-1, keepdim=True)
            o = p @ block[1] if o is None else o * scale + p @ block[1]
            m = m_new
        if step < world - 1:
            incoming = torch.empty_like(block)
            send = dist.isend(block, (rank + towards) % world)
            dist.recv(incoming, (rank - towards) % world)
            send.wait()
            block = incoming
    return sum(outputs) / world if not lse else o / total


def test_a_right_ring_passes():
    result = check_ring_attention(ring)
    assert result and str(result).startswith("✓ all 2 runs correct")
    assert check_ring_attention(lambda q, k, v: ring_attention(q, k, v), world_sizes=(3,))


def test_forgetting_to_rescale_is_named():
    result = check_ring_attention(lambda q, k, v: ring(q, k, v, rescale=False), world_sizes=(3,))
    assert not result and result.mistakes[0].kind == "running_max"
    assert "multiplied by exp(m - m_new)" in result.mistakes[0].message


def test_no_maximum_at_all_overflows():
    result = check_ring_attention(lambda q, k, v: ring(q, k, v, max_kept=False), world_sizes=(2,))
    assert not result and result.mistakes[0].kind == "running_max"
    assert "overflowed" in result.mistakes[0].message


def test_averaging_the_blocks_is_named():
    result = check_ring_attention(lambda q, k, v: ring(q, k, v, lse=False), world_sizes=(2,))
    assert not result and result.mistakes[0].kind == "no_lse"
    assert "log-sum-exp" in result.mistakes[0].message


def test_the_wrong_way_round_is_right_but_not_this_ring():
    result = check_ring_attention(lambda q, k, v: ring(q, k, v, towards=-1), world_sizes=(3,))
    assert not result and result.mistakes[0].kind == "not_a_ring"
    assert "only to its right neighbour" in result.mistakes[0].message


def test_collectives_are_off_and_signature_checked():
    def gathered(q, k, v):
        dist.all_gather_single(torch.empty(2 * len(k), k.shape[1]), k)

    result = check_ring_attention(gathered, world_sizes=(2,))
    assert result.mistakes[0].kind == "exception" and "is off in this exercise" in result.mistakes[0].message
    assert check_ring_attention(lambda q, k: q).mistakes[0].kind == "signature"
