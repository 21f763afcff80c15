"""Data parallelism by hand: what DDP does, written with plain collectives.

Each rank holds a full copy (a *replica*) of the model. For one step:

1. every rank takes its own slice of the global batch (:func:`shard`);
2. every rank runs forward and backward on its slice: its gradients are
   those of *its* slice only;
3. the ranks all-reduce the gradients and divide by W
   (:func:`average_gradients`): now every rank holds the gradient of the
   whole global batch;
4. every rank runs the same optimizer step on the same gradients, so the
   replicas stay identical.

Step 3 is the only communication. Leave it out and each replica follows its
own data: they drift apart (:func:`replica_spread` measures by how much).
Step 0, done once, makes the replicas start equal: :func:`broadcast_parameters`.

Everything here runs inside a rank, with the default process group set up
(``ddp_lab.launch`` does that).

Used in Chapters 7 and 8.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from ddp_lab.validate import check_int_between, check_positive_int

__all__ = [
    "broadcast_parameters",
    "shard",
    "average_gradients",
    "average_gradients_flat",
    "sgd_step",
    "data_parallel_step",
    "replica_spread",
]


def broadcast_parameters(model: nn.Module, src: int = 0) -> None:
    """Copy rank ``src``'s parameters and buffers into every rank's model.

    Replicas built from different random seeds (or loaded from different
    files) would otherwise train from different starting points, and no
    amount of gradient averaging makes them equal again.
    """
    with torch.no_grad():
        for tensor in list(model.parameters()) + list(model.buffers()):
            dist.broadcast(tensor, src)


def shard(batch: torch.Tensor, rank: int | None = None, world_size: int | None = None) -> torch.Tensor:
    """Rank ``rank``'s contiguous slice of a global ``batch`` (split along dim 0).

    A global batch of B samples gives each of W ranks B / W of them:
    rank r gets samples ``r * B/W`` to ``(r + 1) * B/W - 1``. B must be a
    multiple of W here, so that every rank's loss is a mean over the same
    number of samples (that is what makes the average of the W gradients
    equal the gradient of the whole batch).
    """
    rank = dist.get_rank() if rank is None else rank
    world_size = dist.get_world_size() if world_size is None else world_size
    check_positive_int("world_size", world_size)
    check_int_between("rank", rank, 0, world_size - 1, "a rank of the group")
    size = batch.shape[0]
    if size % world_size:
        raise ValueError(
            f"a global batch of {size} samples cannot be split evenly over {world_size} ranks: "
            f"use a batch size that is a multiple of {world_size}")
    per_rank = size // world_size
    return batch[rank * per_rank:(rank + 1) * per_rank]


def average_gradients(model: nn.Module) -> int:
    """All-reduce every gradient and divide it by W; return how many all-reduces ran.

    After this, ``p.grad`` on every rank is the mean of the W ranks'
    gradients, which for equal-sized shards and a mean loss is the gradient
    of the global batch. One all-reduce per parameter is the simplest way to
    write it and the slowest to run: each call pays a fixed latency, and
    nothing is sent until the whole backward pass is over. DDP's buckets
    (Chapter 8) fix both.
    """
    world_size = dist.get_world_size()
    calls = 0
    for p in model.parameters():
        if p.grad is None:
            continue
        dist.all_reduce(p.grad, op=dist.ReduceOp.SUM)
        p.grad.div_(world_size)
        calls += 1
    return calls


def average_gradients_flat(model: nn.Module) -> int:
    """The same average with a single all-reduce: flatten, reduce, copy back.

    Gradients are copied into one flat buffer, all-reduced in one call and
    copied back. The data sent is the same as with :func:`average_gradients`;
    what is saved is the fixed cost of every call but one. This is the idea
    behind DDP's gradient buckets. Returns the number of all-reduces (1).
    """
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat, op=dist.ReduceOp.SUM)
    flat.div_(dist.get_world_size())
    offset = 0
    for g in grads:
        g.copy_(flat[offset:offset + g.numel()].view_as(g))
        offset += g.numel()
    return 1


def sgd_step(model: nn.Module, lr: float) -> None:
    """Plain gradient descent, written out: ``p <- p - lr * p.grad`` for every parameter.

    The optimizer is purely local: it never communicates. Replicas stay
    equal only because every rank feeds it the same (averaged) gradients.
    """
    with torch.no_grad():
        for p in model.parameters():
            if p.grad is not None:
                p.sub_(lr * p.grad)
            p.grad = None


def data_parallel_step(model: nn.Module, x: torch.Tensor, y: torch.Tensor, *, lr: float,
                       loss_fn=F.cross_entropy, sync: bool = True) -> float:
    """One data-parallel training step on this rank's slice of the global batch ``(x, y)``.

    Forward and backward on the slice, average the gradients (unless
    ``sync=False``: then each replica steps on its own data only), then
    :func:`sgd_step`. Returns this rank's loss, on its own slice.
    """
    loss = loss_fn(model(shard(x)), shard(y))
    loss.backward()
    if sync:
        average_gradients(model)
    sgd_step(model, lr)
    return loss.item()


def replica_spread(model: nn.Module) -> float:
    """The largest |difference| between any rank's weights and rank 0's.

    Every rank gets the same answer (a collective: call it on every rank).
    0.0 means the replicas are bitwise identical.
    """
    mine = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    reference = mine.clone()
    dist.broadcast(reference, 0)
    spread = (mine - reference).abs().max().reshape(1)
    dist.all_reduce(spread, op=dist.ReduceOp.MAX)
    return spread.item()
