"""Chapter 15g's checker: is the reader's ring attention right, and a ring?

The reader writes ``my_ring_attention(q, k, v)``, called on every rank with
its ``(n, d)`` block of the queries, keys and values, returning its ``n``
rows of ``softmax(q K^T / sqrt(d)) V`` over the whole sequence, with K/V
blocks passed round the ring by point-to-point messages only.
``check_ring_attention`` runs it on real ranks (world sizes 2 and 3) with
scores large enough that ``exp`` of an unshifted score overflows float32,
and compares:

1. the result with full attention computed in one process; a wrong result
   is matched against the usual slips, each a ``Mistake`` with its kind:
   ``running_max`` (no maximum subtracted, so ``exp`` overflows; or a
   running maximum without rescaling the sums already made under the old
   one), ``no_lse`` (each block's softmax normalised on its own and the
   blocks averaged, without the log-sum-exp weights), else ``wrong_result``;
2. every message each rank sent: only to its right neighbour, ``W - 1``
   K/V blocks in all (``not_a_ring`` otherwise).

Collectives are switched off in the ranks, as in Lab 3.
"""

from __future__ import annotations

import torch

from ddp_lab.checks.harness import (
    YourCodeExited,
    exit_mistake,
    launch_checked,
    point_to_point_only,
    same_values,
    show_values,
    timed_out,
)
from ddp_lab.checks.result import CheckResult, Mistake, signature_mistake
from ddp_lab.launcher import serialize
from ddp_lab.launcher.errors import RankDied, RankFailed, RanksTimedOut
from ddp_lab.model_parallel.ring_attention import full_attention

__all__ = ["check_ring_attention", "make_blocks", "slip_no_rescale", "slip_no_lse"]

BLOCK, WIDTH, SCALE = 3, 4, 12.0  # tokens per rank, width, and a scale that makes scores reach ~100


def make_blocks(world_size: int, seed: int = 0):
    """The whole sequence's ``(q, k, v)``, ``BLOCK`` tokens per rank; scores reach beyond 88."""
    generator = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(world_size * BLOCK, WIDTH, generator=generator) for _ in range(3))
    return q * SCALE, k * SCALE, v


def _blocks_in_ring_order(k, v, rank, world_size):
    """The K/V blocks rank ``rank`` sees, in the ring's order: its own, then r-1, r-2, ..."""
    for step in range(world_size):
        source = (rank - step) % world_size
        rows = slice(source * BLOCK, (source + 1) * BLOCK)
        yield k[rows], v[rows]


def slip_no_rescale(q, k, v, rank, world_size):
    """A running maximum without the rescaling: the sums made under the old maximum kept as they were."""
    m = total = o = None
    d = q.shape[-1]
    for k_b, v_b in _blocks_in_ring_order(k, v, rank, world_size):
        s = q @ k_b.T / d ** 0.5
        m = s.max(-1, keepdim=True).values if m is None else torch.maximum(m, s.max(-1, keepdim=True).values)
        p = torch.exp(s - m)
        total = p.sum(-1, keepdim=True) if total is None else total + p.sum(-1, keepdim=True)
        o = p @ v_b if o is None else o + p @ v_b
    return o / total


def slip_no_lse(q, k, v, rank, world_size):
    """Each block's softmax normalised on its own, the block outputs averaged."""
    outs = [full_attention(q, k_b, v_b) for k_b, v_b in _blocks_in_ring_order(k, v, rank, world_size)]
    return sum(outs) / len(outs)


def check_ring_attention(fn, *, world_sizes=(2, 3), seed=0, timeout=15):
    """Run ``fn`` on real ranks and explain what, if anything, is wrong."""
    mistake = signature_mistake(fn, 3, "my_ring_attention(q, k, v)")
    if mistake:
        return CheckResult("ring attention", 0, 1, "run", (mistake,))
    mistakes = []
    for world_size in world_sizes:
        found = _check_one(fn, world_size, seed, timeout)
        if found:
            mistakes.append(found)
            break  # one explained mistake is enough
    runs = len(world_sizes) if not mistakes else world_sizes.index(world_size) + 1
    return CheckResult("ring attention against full attention", runs - len(mistakes), runs, "run",
                       tuple(mistakes))


def _check_one(fn, world_size, seed, timeout):
    where = f"W = {world_size}, {BLOCK} tokens per rank"
    reports, error = launch_checked(_run_on_rank, world_size, args=(serialize.dumps(fn), seed), timeout=timeout)
    if isinstance(error, YourCodeExited):
        return exit_mistake(where, error)
    if isinstance(error, RanksTimedOut):
        return timed_out(where, error, timeout, "Each rank must send its block to rank r + 1 and receive "
                         "the next from rank r - 1; with blocking calls, one side must receive while the "
                         "other sends (or use isend/irecv, or batch_isend_irecv)")
    if isinstance(error, RankFailed):
        last = error.remote_traceback.strip().splitlines()[-1]
        return Mistake(where, "exception", f"rank {error.rank} raised {last}")
    if isinstance(error, RankDied):
        return Mistake(where, "died", str(error))
    return _compare(where, world_size, seed, reports)


def _compare(where, world_size, seed, reports):
    q, k, v = make_blocks(world_size, seed)
    expected = full_attention(q.double(), k.double(), v.double())
    for rank, (result, _) in enumerate(reports):
        rows = slice(rank * BLOCK, (rank + 1) * BLOCK)
        if not isinstance(result, torch.Tensor) or result.shape != (BLOCK, WIDTH):
            shape = tuple(result.shape) if isinstance(result, torch.Tensor) else type(result).__name__
            return Mistake(where, "wrong_result", f"rank {rank} returned {shape}; expected its {BLOCK} rows "
                                                  f"of the output, a tensor of shape {(BLOCK, WIDTH)}")
        if same_values(result, expected[rows], rtol=1e-4, atol=1e-5):
            continue
        got = show_values(result, digits=4)
        want = show_values(expected[rows], digits=4)
        if not torch.isfinite(result).all():
            return Mistake(where, "running_max", (
                f"rank {rank} returned {got}: exp of a score overflowed. Scores here reach about 100, "
                "and exp(89) is already beyond float32: keep a running maximum m of the scores and "
                "take exp(score - m), so that every exponential is at most 1"))
        args = (q.double()[rows], k.double(), v.double(), rank, world_size)
        if same_values(result, slip_no_rescale(*args), rtol=1e-4, atol=1e-5):
            return Mistake(where, "running_max", (
                f"rank {rank} returned {got}, not {want}: when a block raises the running maximum from "
                "m to m_new, the sum l and the output o made under the old maximum must be multiplied by "
                "exp(m - m_new) before the new block's terms are added; without it the earlier blocks "
                "weigh too much"))
        if same_values(result, slip_no_lse(*args), rtol=1e-4, atol=1e-5):
            return Mistake(where, "no_lse", (
                f"rank {rank} returned {got}, not {want}: that is the mean of each block's own softmax "
                "output. Blocks must be weighted by their share of the whole softmax's denominator "
                "(their log-sum-exp): carry the running maximum m and sum l across blocks, and divide "
                "by l once, at the end"))
        return Mistake(where, "wrong_result", f"rank {rank} returned {got}, but full attention gives {want}")
    return _ring_mistake(where, world_size, [sends for _, sends in reports])


def _ring_mistake(where, world_size, sent):
    block_values = 2 * BLOCK * WIDTH
    for rank, messages in enumerate(sent):
        right = (rank + 1) % world_size
        others = sorted({dst for dst, _ in messages} - {right})
        if others:
            return Mistake(where, "not_a_ring", (
                f"the result is right, but rank {rank} sent to rank(s) {', '.join(map(str, others))}; in a "
                f"ring each rank sends only to its right neighbour, rank {right}, and receives from its left"))
        values = sum(t.numel() for _, t in messages)
        if values != (world_size - 1) * block_values:
            return Mistake(where, "not_a_ring", (
                f"the result is right, but rank {rank} sent {values} values; a ring passes on W - 1 = "
                f"{world_size - 1} K/V blocks of 2 x {BLOCK} x {WIDTH} = {block_values} values"))
    return None


def _run_on_rank(fn_bytes, seed):
    """Inside a rank: the reader's function on this rank's blocks, every send recorded."""
    import torch.distributed as dist

    rank, world_size = dist.get_rank(), dist.get_world_size()
    q, k, v = make_blocks(world_size, seed)
    rows = slice(rank * BLOCK, (rank + 1) * BLOCK)
    with point_to_point_only(_refusal, record_sends=True) as sends:
        fn = serialize.loads(fn_bytes)
        result = fn(q[rows].clone(), k[rows].clone(), v[rows].clone())
    return result, sends


def _refusal(name):
    return (f"dist.{name} is off in this exercise: pass the K/V blocks round the ring with "
            "send/recv, isend/irecv or batch_isend_irecv")
