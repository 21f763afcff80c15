"""Long sequences split over ranks: ring attention's traffic and when it hides, and
Megatron sequence parallelism's bytes and memory (Chapter 15g).

**Ring attention** (Liu, Zaharia and Abbeel, 2023, arXiv 2310.01889). W
ranks each hold ``n = S / W`` of the sequence's queries, keys and values. In
W steps every rank computes attention of its queries against one block of
keys and values, while passing the block it holds to its right neighbour
and receiving the next from its left: each rank receives W - 1 blocks of
K and V, ``2 n d`` values each (d: the width of all heads together).

A step hides its transfer when computing one block takes at least as long
as sending the next. One block is ``Q K^T`` and ``P V``, ``2 n^2 d`` FLOPs
each, ``4 n^2 d`` at ``F`` FLOP/s; one transfer is, in the alpha-beta model
(``ddp_lab.cost.alpha_beta.transfer_time``), ``alpha + 2 n d b / beta`` for
``b`` bytes per value. The condition ``4 n^2 d / F >= alpha + 2 n d b / beta``
is a quadratic in n; without the latency it is ``n >= F b / (2 beta)``, for
16-bit values ``n >= F / beta``: Liu et al.'s block size ``c >= F / B``. The
block must grow with the GPU's speed and shrink with the link's.

**Sequence parallelism** (Korthikanti et al., 2022, arXiv 2205.05198,
section 4.2.2). Tensor parallelism over t ranks ends a block with an
all-reduce of the ``T x h`` activations; sequence parallelism cuts it in
its two halves, a reduce-scatter (each rank keeps ``T / t`` tokens) after
the row-parallel layer and an all-gather before the next column-parallel
one. A ring all-reduce *is* a reduce-scatter followed by an all-gather
(Chapter 6), so the bytes on the wire are the same; what changes is that
the LayerNorm and dropout between the blocks run on ``T / t`` tokens, and
keep 1/t of their activations.
"""

from __future__ import annotations

import math

from ddp_lab.cost.alpha_beta import transfer_time
from ddp_lab.cost.ring_bytes import ring_bytes
from ddp_lab.validate import check_non_negative_number, check_positive_int, check_positive_number

__all__ = ["ring_attention_bytes", "block_attention_flops", "ring_step_seconds", "overlap_holds",
           "min_overlap_block", "sequence_parallel_bytes", "norm_region_elements"]


def _block(sequence: int, world_size: int) -> int:
    check_positive_int("sequence", sequence)
    check_positive_int("world_size", world_size)
    if sequence % world_size:
        raise ValueError(f"the sequence of {sequence} tokens must split evenly over the {world_size} "
                         f"ranks (a multiple of {world_size})")
    return sequence // world_size


def ring_attention_bytes(sequence: int, world_size: int, width: int, value_bytes: int = 4) -> int:
    """Bytes each rank receives in one ring attention: W - 1 blocks of K and V.

    ``width`` is d, all heads together (heads x head size).

    >>> ring_attention_bytes(16, 4, 8)   # 3 blocks of 2 x 4 x 8 float32 values
    768
    """
    n = _block(sequence, world_size)
    check_positive_int("width", width)
    check_positive_int("value_bytes", value_bytes)
    return (world_size - 1) * 2 * n * width * value_bytes


def block_attention_flops(block: int, width: int) -> int:
    """FLOPs of one block of ring attention: ``Q K^T`` and ``P V``, ``4 n^2 d`` (the softmax left out).

    >>> block_attention_flops(4, 8)
    512
    """
    check_positive_int("block", block)
    check_positive_int("width", width)
    return 4 * block * block * width


def ring_step_seconds(block: int, width: int, flops: float, latency: float, bandwidth: float,
                      value_bytes: int = 2) -> tuple[float, float]:
    """``(compute, transfer)`` seconds of one ring step: a block's attention at ``flops`` FLOP/s,
    and the next K/V block, ``2 n d`` values, over a link of ``latency`` and ``bandwidth``.

    >>> ring_step_seconds(1000, 128, 1e12, 0.0, 1e9)
    (0.000512, 0.000512)
    """
    check_positive_number("flops", flops, "FLOP/s")
    check_positive_int("value_bytes", value_bytes)
    compute = block_attention_flops(block, width) / flops
    return compute, transfer_time(2 * block * width * value_bytes, latency, bandwidth)


def overlap_holds(block: int, width: int, flops: float, latency: float, bandwidth: float,
                  value_bytes: int = 2) -> bool:
    """Whether one block's compute takes at least as long as the next block's transfer.

    >>> overlap_holds(999, 128, 1e12, 0.0, 1e9), overlap_holds(1000, 128, 1e12, 0.0, 1e9)
    (False, True)
    """
    compute, transfer = ring_step_seconds(block, width, flops, latency, bandwidth, value_bytes)
    return compute >= transfer


def min_overlap_block(width: int, flops: float, latency: float, bandwidth: float,
                      value_bytes: int = 2) -> int:
    """The fewest tokens per rank for which ring attention hides its transfers.

    The smallest whole n with ``4 n^2 d / F >= latency + 2 n d b / bandwidth``:
    the positive root of that quadratic, rounded up. With no latency it is
    ``F b / (2 bandwidth)``, whatever d.

    >>> min_overlap_block(128, 1e12, 0.0, 1e9)
    1000
    """
    check_positive_int("width", width)
    check_positive_number("flops", flops, "FLOP/s")
    check_non_negative_number("latency", latency, "seconds")
    check_positive_number("bandwidth", bandwidth, "bytes/s")
    check_positive_int("value_bytes", value_bytes)
    a = 4 * width / flops
    b = 2 * width * value_bytes / bandwidth
    root = (b + math.sqrt(b * b + 4 * a * latency)) / (2 * a)
    n = max(1, math.ceil(root - 1e-9 * root))
    while not overlap_holds(n, width, flops, latency, bandwidth, value_bytes):
        n += 1  # guard against the root's rounding
    return n


def sequence_parallel_bytes(tokens: int, hidden: int, tp_size: int, value_bytes: int = 4) -> dict:
    """Bytes each rank sends per block and pass: the all-reduce against its two halves.

    Tensor parallelism all-reduces ``T x h`` values; sequence parallelism
    reduce-scatters them and all-gathers them back. By the ring's count
    (``ring_bytes``) both send ``2 (t-1)/t`` of the tensor.

    >>> sequence_parallel_bytes(8, 16, 2)
    {'all_reduce': 512, 'reduce_scatter': 256, 'all_gather': 256}
    """
    check_positive_int("tokens", tokens)
    check_positive_int("hidden", hidden)
    check_positive_int("tp_size", tp_size)
    check_positive_int("value_bytes", value_bytes)
    nbytes = tokens * hidden * value_bytes
    out = {op: ring_bytes(op, nbytes, tp_size) for op in ("all_reduce", "reduce_scatter", "all_gather")}
    return {op: int(v) if v.denominator == 1 else v for op, v in out.items()}


def norm_region_elements(tokens: int, hidden: int, tp_size: int, sequence_parallel: bool) -> int:
    """Elements a LayerNorm keeps for its backward pass, on one rank: its input (T x h) and its
    mean and reciprocal standard deviation (T each), for T tokens, or T / t under sequence parallelism.

    >>> norm_region_elements(8, 16, 2, False), norm_region_elements(8, 16, 2, True)
    (144, 72)
    """
    check_positive_int("tokens", tokens)
    check_positive_int("hidden", hidden)
    check_positive_int("tp_size", tp_size)
    if sequence_parallel:
        if tokens % tp_size:
            raise ValueError(f"the {tokens} tokens must split evenly over the {tp_size} ranks")
        tokens //= tp_size
    return tokens * hidden + 2 * tokens
