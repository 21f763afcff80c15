"""All-to-all by pairwise exchange, built only from point-to-point messages.

Each of the W ranks cuts its input into W chunks along dim 0, chunk j for
rank j; each rank's output is W slots, slot i for what rank i sent it. Rank
i's j-th chunk lands in rank j's i-th slot: seen as a W x W matrix of
chunks, one row per rank, the collective is a transpose. The chunks may
have different sizes (``input_split_sizes``, ``output_split_sizes``), as
they do when a mixture-of-experts layer sends each expert the tokens routed
to it.

The pairwise exchange does it in W - 1 steps. The rank's own chunk is a
local copy; at step s (1 to W-1), rank r sends chunk r+s to rank r+s and
receives slot r-s from rank r-s (mod W). Every pair of ranks meets exactly
once, and at every step every rank sends one chunk and receives one, so
each rank sends (W-1)/W of its input in all
(``ddp_lab.cost.ring_bytes.all_to_all_bytes``). gloo's ``alltoallv`` uses
the same order (``gloo/alltoallv.cc``), posting all W - 1 sends and
receives at once; here each step waits for the last, so that a trace can
show one exchange a step.

``pairwise_all_to_all`` has the arguments of ``dist.all_to_all_single``
and the same result; ``tests/test_ring.py`` checks it against torch's.

Used in Chapter 5, where it is animated step by step.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

__all__ = ["pairwise_all_to_all", "split_sizes"]


def pairwise_all_to_all(output, input, output_split_sizes=None, input_split_sizes=None, *, trace=None):
    """``dist.all_to_all_single(output, input, ...)`` from sends and receives; return ``output``.

    Call it on every rank. Split sizes of None cut dim 0 into W equal
    chunks, as torch does. Pass a ``ddp_lab.collectives.step_trace.Trace``
    as ``trace`` to record every step: cell j of a snapshot is the chunk
    for rank j until rank j's chunk has arrived in its place.
    """
    world_size, rank = dist.get_world_size(), dist.get_rank()
    if not isinstance(input, torch.Tensor) or not isinstance(output, torch.Tensor):
        raise TypeError(f"all-to-all needs tensors, got input {type(input).__name__} "
                        f"and output {type(output).__name__}")
    if input.dtype != output.dtype:
        raise TypeError(f"input and output must have one dtype, got {input.dtype} and {output.dtype}")
    outgoing = list(input.contiguous().split(split_sizes("input", input, input_split_sizes, world_size)))
    incoming = list(output.split(split_sizes("output", output, output_split_sizes, world_size)))
    if outgoing[rank].shape != incoming[rank].shape:
        raise ValueError(f"rank {rank} keeps {outgoing[rank].shape[0]} rows of its own input but its "
                         f"output has {incoming[rank].shape[0]} for them: input_split_sizes[{rank}] "
                         f"must equal output_split_sizes[{rank}]")
    incoming[rank].copy_(outgoing[rank])  # the rank's own chunk never leaves it
    arrived = [1] * world_size
    if trace is not None:
        trace.start("pairwise", rank, outgoing)
    for step in range(1, world_size):
        to, source = (rank + step) % world_size, (rank - step) % world_size
        sending = dist.isend(outgoing[to], to)
        dist.recv(incoming[source], source)
        sending.wait()
        if trace is not None:
            trace.count_bytes(outgoing[to])
            arrived[rank] = arrived[source] = world_size
            shown = [incoming[j] if arrived[j] == world_size else outgoing[j] for j in range(world_size)]
            trace.record("exchange", sends=[(to, to)], receives=[(source, source)],
                         chunks=shown, contributions=arrived)
    return output


def split_sizes(name, tensor, sizes, world_size):
    """The W chunk lengths along dim 0: ``sizes`` checked, or equal chunks for None."""
    rows = tensor.shape[0] if tensor.dim() else 1
    if sizes is None or len(sizes) == 0:
        if rows % world_size:
            raise ValueError(f"{name} has {rows} rows, which {world_size} ranks cannot share equally: "
                             f"pass {name}_split_sizes")
        return [rows // world_size] * world_size
    sizes = [int(s) for s in sizes]
    if len(sizes) != world_size or any(s < 0 for s in sizes) or sum(sizes) != rows:
        raise ValueError(f"{name}_split_sizes must be {world_size} whole numbers >= 0 adding up to the "
                         f"{rows} rows of {name}, got {sizes}")
    return sizes
