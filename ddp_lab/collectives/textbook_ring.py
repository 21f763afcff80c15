"""Ring all-reduce as the textbook draws it: the algorithm and nothing else.

Each of the W ranks cuts its tensor into W chunks and stands in a ring,
sending to its right neighbour and receiving from its left one. Step s of the
reduce-scatter sends chunk (r - s) mod W and adds the chunk that arrives,
(r - s - 1) mod W, to its own copy; after W - 1 steps rank r holds the whole
sum of chunk (r + 1) mod W. The all-gather's W - 1 steps pass those finished
chunks on around the ring, each received chunk replacing the local one.

Every step sends one chunk and receives one, so the send is started with
``isend`` before the blocking ``recv``: if every rank called a blocking
``send`` first, each would wait for its neighbour to receive and none would.

This is the version Chapter 6 and Lab 3 show first, beside
``ddp_lab.collectives.ring.ring_all_reduce``, the same algorithm with what it
takes to keep up with gloo's own all-reduce (pieces that pipeline each chunk,
receives posted early, scratch buffers kept between calls).
"""

from __future__ import annotations

import torch.distributed as dist

from ddp_lab.collectives.ring import check_all_reduce_arguments


def textbook_ring_all_reduce(tensor, op="sum"):
    """All-reduce ``tensor`` in place over the default group; return it.

    ``op`` is "sum" or "avg". Call it on every rank, like ``dist.all_reduce``.
    """
    check_all_reduce_arguments(tensor, op)
    world_size, rank = dist.get_world_size(), dist.get_rank()
    right, left = (rank + 1) % world_size, (rank - 1) % world_size
    flat = tensor.contiguous().view(-1)  # the tensor itself if contiguous
    chunks = list(flat.tensor_split(world_size))
    incoming = flat.new_empty(chunks[0].numel())  # chunk 0 is the largest

    for step in range(world_size - 1):  # reduce-scatter
        send = (rank - step) % world_size
        receive = (rank - step - 1) % world_size
        buffer = incoming[: chunks[receive].numel()]
        sending = dist.isend(chunks[send], right)
        dist.recv(buffer, left)
        sending.wait()
        chunks[receive] += buffer

    for step in range(world_size - 1):  # all-gather
        send = (rank - step + 1) % world_size
        receive = (rank - step) % world_size
        sending = dist.isend(chunks[send], right)
        dist.recv(chunks[receive], left)
        sending.wait()

    if op == "avg":
        flat /= world_size
    if flat.data_ptr() != tensor.data_ptr():  # we worked on a copy
        tensor.copy_(flat.view_as(tensor))
    return tensor
