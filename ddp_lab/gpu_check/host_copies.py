"""Copying a batch from host memory to the GPU: pinned against pageable memory.

Chapter 9 explains why ``DataLoader(..., pin_memory=True)`` helps: the GPU's
copy engine reads only page-locked ("pinned") host memory, so an ordinary,
pageable tensor is first copied into a pinned staging buffer by the CPU,
and only then sent. This measures both, with CUDA events around each copy
(the copy is queued on the GPU's stream, so the CPU's clock would miss
part of it: ``ddp_lab.bench.timing.elapsed_seconds``), ``repeats``
times per size, and keeps the spread.

Needs a CUDA GPU: without one there is nothing to pin for.
"""

from __future__ import annotations

import statistics

import torch

from ddp_lab.bench.timing import elapsed_seconds
from ddp_lab.gpu_check.runner import Finding, expect
from ddp_lab.units import spread

__all__ = ["copy_seconds", "time_copies", "host_to_device_copy"]


def copy_seconds(nbytes, pinned, repeats=10, device="cuda:0"):
    """Seconds of each of ``repeats`` host-to-GPU copies of ``nbytes`` of
    float32, each timed on the GPU between two CUDA events
    (``elapsed_seconds``)."""
    device = torch.device(device)
    host = torch.ones(max(1, nbytes // 4))
    if pinned:
        host = host.pin_memory()  # page-locked: the copy engine reads it
    target = torch.empty(host.shape, device=device)
    target.copy_(host)  # warm-up: the driver sets up its staging buffers

    def copy():
        # returns at once only from pinned memory
        target.copy_(host, non_blocking=True)

    return [elapsed_seconds(copy, device) for _ in range(repeats)]


def time_copies(sizes, repeats=10, device="cuda:0") -> dict:
    """The ``measurement`` of the results file: both kinds of memory at each size."""
    rows = []
    for nbytes in sizes:
        nbytes = max(1, int(nbytes) // 4) * 4  # whole float32s
        row = {"bytes": nbytes}
        for kind in ("pageable", "pinned"):
            seconds = copy_seconds(nbytes, kind == "pinned", repeats, device)
            row[kind] = {"seconds": spread(seconds), "bandwidth": nbytes / statistics.median(seconds)}
        rows.append(row)
    return {"direction": "host to device", "device": str(torch.device(device)), "repeats": repeats,
            "timer": "cuda events", "rows": rows}


def host_to_device_copy(gpus, options):
    """The check: pinned and pageable copies to cuda:0, at every copy size."""
    measurement = time_copies(options.copy_sizes, options.repeats)
    largest = measurement["rows"][-1]
    pinned, pageable = largest["pinned"]["bandwidth"], largest["pageable"]["bandwidth"]
    expect(pinned > 0 and pageable > 0, "a copy took no time: the timing is broken")
    return Finding(f"{largest['bytes'] >> 20} MiB to cuda:0: pinned {pinned / 1e9:.1f} GB/s, pageable "
                   f"{pageable / 1e9:.1f} GB/s ({pinned / pageable:.1f}x)", measurement=measurement)
