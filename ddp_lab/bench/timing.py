"""The one timing primitive of the benchmarks: how long ``run()`` takes, and on the slowest rank.

Every figure the book measures (Chapters 4, 5, 6, 9, 10 and the GPU check)
goes through ``elapsed_seconds``: the CPU's ``perf_counter`` for CPU work,
two CUDA events for GPU work. Inside ranks, ``slowest_rank_seconds`` times
a collective as its slowest rank saw it, the same number on every rank.
"""

from __future__ import annotations

import time

import torch
import torch.distributed as dist

from ddp_lab.host import uses_nccl

__all__ = ["elapsed_seconds", "slowest_rank_seconds", "collective_device"]


def slowest_rank_seconds(run, repeats, warmup=1):
    """Rank side: time ``run()`` ``repeats`` times, after ``warmup`` untimed calls.

    All ranks start each repeat together (a barrier), and a repeat takes as
    long as its slowest rank: a collective is done when the last rank is. The
    same tuple of seconds comes back on every rank.

    Under nccl each repeat is timed on the rank's GPU (``elapsed_seconds``)
    and the slowest rank is found with a GPU tensor: nccl reduces nothing else.
    """
    device = collective_device()
    for _ in range(warmup):
        run()
    times = []
    for _ in range(repeats):
        # under nccl the barrier is named the rank's GPU: without device_ids torch
        # guesses it and warns that it does (torch/distributed/distributed_c10d.py)
        dist.barrier(device_ids=[device.index] if device.type == "cuda" else None)
        elapsed = torch.tensor([elapsed_seconds(run, device)], dtype=torch.float64, device=device)
        dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
        times.append(elapsed.item())
    return tuple(times)


def collective_device():
    """Rank side: where this rank's collectives work: its GPU under nccl, else the CPU.

    nccl reduces only tensors on the GPU the rank was pinned to
    (``torch.cuda.set_device``, which ``ddp_lab.launch`` calls); gloo works on
    CPU tensors (and copies GPU tensors through the CPU).
    """
    if uses_nccl(dist.get_backend()):  # "nccl", or "cpu:gloo,cuda:nccl" from backend="auto"
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def elapsed_seconds(run, device):
    """Seconds ``run()`` takes: by the CPU's clock, or on a GPU between two CUDA events.

    GPU work is queued: a collective, a copy or a kernel returns to Python
    before the GPU has done it, so a clock read on the CPU right after
    ``run()`` would time the queueing. The two events are queued on the
    GPU's current stream around the work, and ``end.synchronize()`` waits
    until the GPU has reached the second one: their distance is the time the
    GPU spent (Chapters 5 and 9).
    """
    if device.type != "cuda":
        start = time.perf_counter()
        run()
        return time.perf_counter() - start
    with torch.cuda.device(device):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        run()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3  # elapsed_time is in milliseconds
