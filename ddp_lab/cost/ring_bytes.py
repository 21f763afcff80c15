"""The bytes each rank sends for one ring collective, counted exactly (Chapter 15b).

``ddp_lab.cost.alpha_beta.bytes_sent_per_rank`` gives the ring's count as a
float, which is what a time needs. A table of bytes measured on real ranks
needs the count itself: Chapter 15b adds up the bytes of every collective
one training step issued, DDP's against FSDP's, and prints them as whole
numbers. :func:`ring_bytes` is the same count as a ``Fraction``, built from
the same ``ring_steps``: exact where W divides the tensor's bytes, and a
fraction (never a rounded float) where it does not.

No torch is imported here: the records it prices are made elsewhere
(``ddp_lab.data_parallel.fsdp.traffic`` adds them up).
"""

from __future__ import annotations

from fractions import Fraction

from ddp_lab.cost.alpha_beta import ring_steps
from ddp_lab.validate import check_positive_int, is_int

__all__ = ["RING_COLLECTIVES", "ring_bytes", "all_to_all_bytes"]

RING_COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "broadcast",
                    "all_to_all")  # the ones ring_bytes prices


def ring_bytes(op: str, nbytes: int, world_size: int) -> Fraction:
    """Bytes each rank sends for one collective on a tensor of ``nbytes``, by the ring's count (exact).

    A ring collective over W ranks cuts the tensor in W chunks and runs
    ``ring_steps(op, W)`` steps, each rank sending one chunk per step
    (Chapter 6): ``2(W-1)`` chunks for an all-reduce, ``W-1`` for an
    all-gather (of its output) or a reduce-scatter (of its input). A
    broadcast along a pipelined chain sends the whole tensor once. These are
    ``ddp_lab.cost.bus_factor``'s factors, kept as fractions so that the
    bytes stay exact integers where W divides them. An all-to-all by
    pairwise exchange (Chapter 5) also runs W-1 steps of one chunk each,
    every one to another rank: ``(W-1)/W`` of its input, whose chunks are
    equal (:func:`all_to_all_bytes` counts uneven ones).

    >>> ring_bytes("all_reduce", 300, 3), ring_bytes("all_gather", 10, 3)
    (Fraction(400, 1), Fraction(20, 3))
    >>> ring_bytes("all_to_all", 32, 4)
    Fraction(24, 1)
    """
    if op not in RING_COLLECTIVES:
        raise ValueError(f"op must be one of {', '.join(map(repr, RING_COLLECTIVES))}; got {op!r}")
    if not is_int(nbytes) or nbytes < 0:
        raise ValueError(f"nbytes must be an int >= 0, got {nbytes!r}")
    check_positive_int("world_size", world_size)
    if op == "broadcast":
        return Fraction(nbytes)
    return Fraction(ring_steps(op, world_size) * nbytes, world_size)


def all_to_all_bytes(input_split_bytes, rank: int) -> int:
    """Bytes ``rank`` sends in one all-to-all: every chunk of its input but its own.

    ``input_split_bytes`` are the sizes in bytes of the rank's W input
    chunks, chunk j for rank j (``input_split_sizes`` times the bytes of a
    row). Chunk ``rank`` stays on the rank, a local copy; each other chunk
    is one message, whether sent by pairwise exchange in W-1 steps or all at
    once (gloo's ``alltoallv``). With W equal chunks of an ``n``-byte input
    that is ``(W-1)/W x n``, ``ring_bytes("all_to_all", n, W)``; with
    uneven ones, whatever the router sent elsewhere (Chapter 5).

    >>> all_to_all_bytes([8, 8, 8, 8], rank=1)
    24
    >>> all_to_all_bytes([4, 0, 12], rank=2)
    4
    """
    sizes = list(input_split_bytes)
    if not sizes or not all(is_int(b) and b >= 0 for b in sizes):
        raise ValueError(f"input_split_bytes must be one whole number >= 0 per rank, got {input_split_bytes!r}")
    if not is_int(rank) or not 0 <= rank < len(sizes):
        raise ValueError(f"rank must be an int from 0 to {len(sizes) - 1} (one chunk per rank), got {rank!r}")
    return sum(sizes) - sizes[rank]
