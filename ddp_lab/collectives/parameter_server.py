"""Averaging a tensor over ranks through a parameter server, with its traffic.

Before all-reduce became the rule, data-parallel training averaged gradients
through a *parameter server*: every worker sends its tensor to one process
(here rank 0), which adds them up, divides by the number of ranks, and sends
the average back to everyone. It is easy to understand and easy to write
with point-to-point messages, which is what :func:`parameter_server_average`
does, counting every byte it sends and receives.

The count shows the design's weakness. With W ranks and a tensor of n bytes,
each worker sends n and receives n, but the server receives (W - 1) n and
sends (W - 1) n: its link carries W - 1 times more than anyone else's, and
the whole step waits for it. A ring all-reduce spreads the same work evenly:
every rank sends 2 (W - 1) / W x n, less than 2n however large W grows (see
``ddp_lab.cost``). The server is also a single point of failure, and its code
differs from the workers', where all-reduce runs the same code everywhere.

Used in Chapter 1 and Chapter 5 (a parameter server against an all-reduce).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist

__all__ = ["RankTraffic", "parameter_server_average", "parameter_server_traffic", "all_reduce_average"]


@dataclass(frozen=True)
class RankTraffic:
    """Bytes one rank sent and received during one operation."""

    rank: int
    sent: int
    received: int


def parameter_server_average(tensor: torch.Tensor, root: int = 0) -> RankTraffic:
    """Replace ``tensor`` on every rank by the average over the ranks, in place.

    The workers send their tensor to ``root`` (the server), which sums them in
    rank order, divides by the world size and sends the result back. Returns
    the bytes this rank sent and received.
    """
    rank, world_size = dist.get_rank(), dist.get_world_size()
    if not 0 <= root < world_size:
        raise ValueError(f"root must be a rank from 0 to {world_size - 1}, got {root!r}")
    nbytes = tensor.numel() * tensor.element_size()
    if rank != root:
        dist.send(tensor, dst=root)     # 1. my tensor to the server
        dist.recv(tensor, src=root)     # 3. the average back
        return RankTraffic(rank, sent=nbytes, received=nbytes)

    total = tensor.clone()
    incoming = torch.empty_like(tensor)
    for worker in range(world_size):    # 2. the server adds everything up
        if worker != root:
            dist.recv(incoming, src=worker)
            total += incoming
    tensor.copy_(total / world_size)
    for worker in range(world_size):    # 3. and sends the average to each worker
        if worker != root:
            dist.send(tensor, dst=worker)
    others = world_size - 1
    return RankTraffic(rank, sent=others * nbytes, received=others * nbytes)


def parameter_server_traffic(nbytes: int, world_size: int, root: int = 0) -> list[RankTraffic]:
    """The traffic of :func:`parameter_server_average`, per rank, without running it."""
    if not 0 <= root < world_size:
        raise ValueError(f"root must be a rank from 0 to {world_size - 1}, got {root!r}")
    others = world_size - 1
    return [RankTraffic(r, others * nbytes, others * nbytes) if r == root else RankTraffic(r, nbytes, nbytes)
            for r in range(world_size)]


def all_reduce_average(tensor: torch.Tensor) -> None:
    """The same average with one collective: ``all_reduce`` (sum), then divide."""
    dist.all_reduce(tensor)
    tensor /= dist.get_world_size()
