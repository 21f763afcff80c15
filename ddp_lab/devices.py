"""Which device(s) a process uses, from its local rank.

Every process of a job is told its ``LOCAL_RANK`` by the launcher. On a node
with G GPUs and one GPU per process, local rank r drives ``cuda:r``; when each
process spans k GPUs (its model is split over them), local rank r drives
``cuda:r*k`` to ``cuda:r*k + k - 1``. The *global* rank never appears here:
a process only ever sees the GPUs of its own node, numbered from 0 there.

>>> devices_for(1, cuda_available=True)
(device(type='cuda', index=1),)
>>> devices_for(1, gpus_per_process=2, cuda_available=True)
(device(type='cuda', index=2), device(type='cuda', index=3))
>>> devices_for(1, gpus_per_process=2, cuda_available=False)
(device(type='cpu'), device(type='cpu'))

Used in Chapters 2 and 14 and in Lab 1.
"""

from __future__ import annotations

import torch

from ddp_lab.validate import check_whole_number

__all__ = ["devices_for", "device_for"]


def devices_for(
    local_rank: int,
    gpus_per_process: int = 1,
    *,
    cuda_available: bool | None = None,
    gpu_count: int | None = None,
) -> tuple[torch.device, ...]:
    """The devices of the process with this local rank, one per GPU it spans.

    With CUDA: ``cuda:(local_rank * gpus_per_process + k)`` for k = 0, 1, ...
    The GPUs before the first one belong to the processes with lower local
    ranks, ``gpus_per_process`` each.

    Without CUDA every process computes on the CPU, and the tuple holds
    ``cpu`` once per GPU the process would span. A process that splits its
    model over two GPUs (``part1.to(devices[0])``, ``part2.to(devices[1])``)
    then runs unchanged on a laptop, with both parts in the same memory.

    ``cuda_available`` defaults to ``torch.cuda.is_available()``; pass it to
    see the answer for a GPU node from a CPU-only machine (tests do).
    ``gpu_count`` is the number of GPUs this process can see; it defaults to
    ``torch.cuda.device_count()`` when CUDA is detected (not when you pass
    ``cuda_available``). When it is known, asking for a GPU the node does not
    have raises a ValueError now, instead of an "invalid device ordinal"
    error later. Note that ``CUDA_VISIBLE_DEVICES`` renumbers GPUs from 0.
    """
    check_whole_number("local_rank", local_rank, minimum=0)
    check_whole_number("gpus_per_process", gpus_per_process)
    if cuda_available is None:
        cuda_available = torch.cuda.is_available()
        if cuda_available and gpu_count is None:
            gpu_count = torch.cuda.device_count()
    if not cuda_available:
        return (torch.device("cpu"),) * gpus_per_process

    first = local_rank * gpus_per_process
    indices = range(first, first + gpus_per_process)
    if gpu_count is not None and indices[-1] >= gpu_count:
        needed = ", ".join(f"cuda:{i}" for i in indices)
        raise ValueError(
            f"local_rank={local_rank} with gpus_per_process={gpus_per_process} needs "
            f"{needed}, but this process sees only {gpu_count} GPU(s): room for "
            f"{gpu_count // gpus_per_process} process(es) per node. Did you start "
            f"more processes per node (--nproc_per_node) than the GPUs allow?"
        )
    return tuple(torch.device("cuda", i) for i in indices)


def device_for(
    local_rank: int, *, cuda_available: bool | None = None, gpu_count: int | None = None
) -> torch.device:
    """The one device of a process that drives a single GPU (the usual case):
    ``cuda:local_rank``, or ``cpu`` without CUDA.

    This is the device to pass to ``torch.cuda.set_device`` and to move the
    model to before wrapping it in DistributedDataParallel.
    """
    (device,) = devices_for(local_rank, 1, cuda_available=cuda_available, gpu_count=gpu_count)
    return device
