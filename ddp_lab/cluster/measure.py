"""What Chapter 12 measures on the namespace cluster, run inside the ranks.

Each function runs on every rank of a :meth:`Cluster.launch
<ddp_lab.cluster.namespaces.Cluster.launch>` of N nodes x G ranks (nodes
hold consecutive ranks) and returns plain numbers (lists of seconds, one per
repeat, each the slowest rank's), the same on every rank:

* :func:`link_times`: a 2-rank all-reduce inside node 0 (ranks 0 and 1,
  over its loopback) and across the link (rank 0 and the first rank of
  node 1), for several sizes, to fit latency and bandwidth to each;
* :func:`flat_vs_hierarchical`: ``dist.all_reduce`` (gloo's ring over all
  ranks) against :func:`ddp_lab.collectives.hierarchical.hierarchical_all_reduce`;
* :func:`ddp_step_times`: seconds per DDP training step of an MLP, with
  DDP's default buckets, with 1 MiB buckets, with ``no_sync`` over 4
  micro-batches, and with no communication at all (the compute alone).

Every measurement is repeated and the repeats are kept: the chapter prints
their spread (min, median, max), never a single run.
"""

from __future__ import annotations

import contextlib
import time

import torch
import torch.distributed as dist

from ..collectives.hierarchical import hierarchical_all_reduce, node_groups

__all__ = ["timed", "link_times", "flat_vs_hierarchical", "ddp_step_times", "DDP_SETTINGS"]


def timed(call, group=None, repeats=5, warmup=1):
    """Seconds of ``call()`` per repeat: each the slowest rank's, after a barrier.

    A collective has finished when its last rank has; ranks leave the
    barrier at slightly different moments, so the slowest rank's time can
    overstate by the barrier's skew (microseconds here).
    """
    for _ in range(warmup):
        call()
    times = []
    for _ in range(repeats):
        dist.barrier(group=group)
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    slowest = torch.tensor(times, dtype=torch.float64)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX, group=group)
    return slowest.tolist()


def link_times(sizes, ranks_per_node, repeats=5):
    """All-reduce times of two ranks inside node 0 and of two ranks on different nodes.

    Returns ``{"intra": {nbytes: [s, ...]}, "inter": {...}}``. With two
    ranks, each sends the whole tensor once, so ``time ~ latency + n /
    bandwidth`` with the bandwidth of the path they share.
    """
    rank = dist.get_rank()
    pairs = {"intra": [0, 1], "inter": [0, ranks_per_node]}
    groups = {where: dist.new_group(ranks) for where, ranks in pairs.items()}  # every rank calls both
    results = {where: {} for where in pairs}
    for where, ranks in pairs.items():
        if rank in ranks:
            for nbytes in sizes:
                tensor = torch.ones(nbytes // 4)
                results[where][nbytes] = timed(lambda: dist.all_reduce(tensor, group=groups[where]),
                                               groups[where], repeats)
    dist.barrier()
    return _from_rank0(results)


def flat_vs_hierarchical(sizes, ranks_per_node, repeats=5):
    """Times of the flat ring and of the hierarchical all-reduce, size by size, interleaved.

    Returns ``{"flat": {nbytes: [s, ...]}, "hierarchical": {...}, "equal": bool}``;
    ``equal`` says whether both gave the same sum (integers in float32, so
    exactly) on every rank.
    """
    groups = node_groups(ranks_per_node)
    results = {"flat": {}, "hierarchical": {}}
    equal = True
    for nbytes in sizes:
        values = torch.arange(nbytes // 4, dtype=torch.float32) % 97 + dist.get_rank()
        flat, hierarchical = values.clone(), values.clone()
        dist.all_reduce(flat)
        hierarchical_all_reduce(hierarchical, groups)
        equal &= torch.equal(flat, hierarchical)
        tensor = values.clone()
        results["flat"][nbytes] = timed(lambda: dist.all_reduce(tensor), repeats=repeats)
        results["hierarchical"][nbytes] = timed(lambda: hierarchical_all_reduce(tensor, groups),
                                                repeats=repeats)
    verdict = torch.tensor([int(equal)])
    dist.all_reduce(verdict, op=dist.ReduceOp.MIN)
    results["equal"] = bool(verdict.item())
    return results


# name -> (DDP keyword arguments, micro-batches per optimizer step under no_sync)
DDP_SETTINGS = {
    "DDP, default buckets": ({}, 1),
    "DDP, 1 MiB buckets": ({"bucket_cap_mb": 1}, 1),
    "DDP, no_sync x 4": ({}, 4),
}


def ddp_step_times(widths=(512, 1024, 1024, 512, 10), batch=32, steps=4, settings=None):
    """Seconds per micro-batch of DDP training, per setting; plus the compute alone.

    Returns ``{"parameters": P, "gradient_bytes": 4P, "compute": [s, ...],
    setting: [s, ...], ...}``: for each repeat, the slowest rank's time of
    ``steps`` optimizer steps divided by the micro-batches they ran. The
    compute alone is the same loop on the bare model (no DDP, no
    communication): what a step would cost on an infinitely fast link.
    """
    from torch.nn.parallel import DistributedDataParallel as DDP

    from ..models import mlp, parameter_count

    settings = DDP_SETTINGS if settings is None else settings
    generator = torch.Generator().manual_seed(dist.get_rank())
    inputs = torch.randn(batch, widths[0], generator=generator)
    labels = torch.randint(0, widths[-1], (batch,), generator=generator)
    loss_fn = torch.nn.CrossEntropyLoss()

    def loop(model, micro_batches):
        optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)

        def run():
            for _ in range(steps):
                for micro in range(micro_batches):
                    last = micro == micro_batches - 1
                    with model.no_sync() if not last else contextlib.nullcontext():
                        loss_fn(model(inputs), labels).backward()
                optimizer.step()
                optimizer.zero_grad()
        return run

    bare = mlp(widths, seed=0)
    results = {"parameters": parameter_count(bare), "gradient_bytes": 4 * parameter_count(bare)}
    per_micro = steps
    results["compute"] = [t / per_micro for t in timed(loop(bare, 1), repeats=3)]
    for name, (options, micro_batches) in settings.items():
        model = DDP(mlp(widths, seed=0), **options)
        per_micro = steps * micro_batches
        results[name] = [t / per_micro for t in timed(loop(model, micro_batches), repeats=3)]
    return results


def _from_rank0(value):
    """Rank 0's value on every rank (the others measured only their part)."""
    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]
