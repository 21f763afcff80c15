"""The naive all-reduce: everything to rank 0, then everything back.

Rank 0 receives every other rank's whole tensor and adds it up (W-1
receives, one after the other), then sends the sum back to each rank (W-1
sends). It is correct and easy to write, and it is what a parameter server
does. Its cost is the lesson: rank 0 sends and receives (W-1) x N values
while the other ranks mostly wait, so its time grows with W. The ring
(``ddp_lab.collectives.ring``) has every rank send 2(W-1)/W x N instead.

Used in Chapter 6, as the all-reduce that the ring improves on.
"""

from __future__ import annotations

import torch.distributed as dist

from ddp_lab.collectives.ring import check_all_reduce_arguments

ROOT = 0


def naive_all_reduce(tensor, op="sum", *, trace=None):
    """All-reduce ``tensor`` in place through rank 0; return it."""
    check_all_reduce_arguments(tensor, op)
    world_size, rank = dist.get_world_size(), dist.get_rank()
    flat = tensor.view(-1) if tensor.is_contiguous() else tensor.contiguous().view(-1)
    chunks = list(flat.tensor_split(world_size))  # only for the trace's drawing
    if trace is not None:
        trace.start("naive", rank, chunks)
    if rank == ROOT:
        _gather_and_sum(flat, world_size, trace, chunks)
        if op == "avg":
            flat.div_(world_size)
        _send_back(flat, world_size, trace, chunks)
    else:
        _contribute(flat, rank, world_size, trace, chunks)
    if not tensor.is_contiguous():
        tensor.copy_(flat.view_as(tensor))
    return tensor


def _gather_and_sum(flat, world_size, trace, chunks):
    incoming = flat.new_empty(flat.shape)
    contributions = 1
    for source in range(1, world_size):
        dist.recv(incoming, source)
        flat.add_(incoming)
        contributions += 1
        _record(trace, "reduce", [], [(source, None)], chunks, contributions)


def _send_back(flat, world_size, trace, chunks):
    for destination in range(1, world_size):
        dist.send(flat, destination)
        if trace is not None:
            trace.count_bytes(flat)
        _record(trace, "broadcast", [(destination, None)], [], chunks, world_size)


def _contribute(flat, rank, world_size, trace, chunks):
    """A non-root rank: wait for its turn, send, wait for the sum."""
    for step in range(1, world_size):  # the reduce phase, one sender per step
        if step == rank:
            dist.send(flat, ROOT)
            if trace is not None:
                trace.count_bytes(flat)
        sends = [(ROOT, None)] if step == rank else []
        _record(trace, "reduce", sends, [], chunks, 1)
    for step in range(1, world_size):  # the broadcast phase
        if step == rank:
            dist.recv(flat, ROOT)
        done = world_size if step >= rank else 1
        receives = [(ROOT, None)] if step == rank else []
        _record(trace, "broadcast", [], receives, chunks, done)


def _record(trace, phase, sends, receives, chunks, contributions):
    if trace is not None:
        trace.record(phase, sends, receives, chunks, [contributions] * len(chunks))
