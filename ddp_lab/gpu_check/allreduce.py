"""All-reduce on GPUs: nccl's time and bus bandwidth against message size, and the book's ring on nccl.

Measured as NVIDIA's nccl-tests measure it (their PERFORMANCE.md): for each
size, after warm-up, every rank times a loop of ``iterations`` calls; a
repeat lasts as long as its slowest rank; ``repeats`` such loops give the
spread (min, median, max) of the time per call. On GPUs each loop is timed
with CUDA events (``ddp_lab.bench.timing.elapsed_seconds``): a
collective returns to Python before the GPU has done it. From the median::

    algbw = bytes / seconds          busbw = algbw x 2(W-1)/W

busbw is the speed each GPU's links ran at (Chapter 5); it is comparable
with the links' rated speed and across world sizes. With one rank there is
no one to exchange with: nccl's all-reduce is then a copy on the GPU at
most, and busbw is 0 (the factor is 0), which the results say.

The same code runs on gloo and the CPU, which is how it is tested on a
machine without a GPU. Chapters 5 and 6 show the stored measurement.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

import ddp_lab
from ddp_lab.bench.collectives import Timing
from ddp_lab.bench.timing import collective_device, slowest_rank_seconds
from ddp_lab.cost import algbw, bus_factor
from ddp_lab.gpu_check.runner import Finding, expect
from ddp_lab.units import spread

__all__ = ["measure_all_reduce", "all_reduce_measurement", "all_reduce_bandwidth", "ring_all_reduce_nccl"]


def on_rank_time_all_reduce(sizes, repeats, iterations, warmup=2):
    """Inside each rank: ``(device, [(bytes, [seconds per call of each repeat]), ...])``."""
    device = collective_device()
    rows = []
    for nbytes in sizes:
        # Zeros: a sum of zeros stays finite however many calls the loop makes.
        tensor = torch.zeros(max(1, nbytes // 4), dtype=torch.float32, device=device)

        def loop():
            for _ in range(iterations):
                dist.all_reduce(tensor)

        seconds = slowest_rank_seconds(loop, repeats, warmup=warmup)
        rows.append((tensor.numel() * 4, [s / iterations for s in seconds]))
    return str(device), rows


def one_rank_note(world_size: int) -> str:
    """What the bus bandwidth means at this world size, said in the results."""
    if world_size == 1:
        return ("one rank: an all-reduce has no other rank to exchange with (nccl makes it a copy on the "
                "GPU at most); busbw = algbw x 2(W-1)/W = 0, and the times are the fixed cost of a call")
    return f"busbw = algbw x 2(W-1)/W = algbw x {bus_factor('all_reduce', world_size):.3g} (nccl-tests)"


def all_reduce_measurement(rows, *, world_size, backend, device, repeats, iterations) -> dict:
    """The ``measurement`` of the results file, from each size's per-call times."""
    factor = bus_factor("all_reduce", world_size)
    table = []
    for nbytes, per_call in rows:
        timing = Timing("all_reduce", world_size, nbytes, spread(per_call)["median"], tuple(per_call))
        table.append({"bytes": nbytes, "seconds": spread(per_call), "algbw": timing.algbw,
                      "busbw": timing.busbw, "busbw_best": algbw(nbytes, timing.best) * factor})
    return {"collective": "all_reduce", "backend": backend, "world_size": world_size, "device": device,
            "dtype": "float32", "repeats": repeats, "iterations": iterations,
            "timer": "cuda events" if device.startswith("cuda") else "perf_counter",
            "bus_factor": factor, "note": one_rank_note(world_size), "rows": table}


def measure_all_reduce(world_size, sizes, *, repeats=10, iterations=20, backend="nccl", timeout=300.0) -> dict:
    """Launch ``world_size`` ranks and measure their all-reduce at each size (bytes of float32)."""
    sizes = [int(s) for s in sizes]
    if not sizes or min(sizes) < 4:
        raise ValueError(f"sizes must be byte counts of at least 4 (one float32), got {sizes!r}")
    device, rows = ddp_lab.launch(on_rank_time_all_reduce, world_size, args=(sizes, repeats, iterations),
                                  backend=backend, timeout=timeout)[0]
    return all_reduce_measurement(rows, world_size=world_size, backend=backend, device=device,
                                  repeats=repeats, iterations=iterations)


def all_reduce_bandwidth(gpus, options):
    """The check: nccl all-reduce on every GPU, one rank each, at every size."""
    measurement = measure_all_reduce(gpus, options.all_reduce_sizes, repeats=options.repeats,
                                     iterations=options.iterations, timeout=options.timeout)
    expect(measurement["timer"] == "cuda events", f"the ranks timed on {measurement['device']}, not on a GPU")
    largest = measurement["rows"][-1]
    if gpus == 1:
        seen = f"one GPU, so a copy at most: {largest['seconds']['median'] * 1e6:.0f} us per call"
    else:
        seen = f"busbw {largest['busbw'] / 1e9:.1f} GB/s (median; best {largest['busbw_best'] / 1e9:.1f} GB/s)"
    return Finding(f"{gpus} rank(s), {len(measurement['rows'])} sizes; at {largest['bytes'] >> 20} MiB: {seen}",
                   measurement=measurement)


def on_rank_compare_ring(sizes):
    """Inside each rank: does the book's ring give dist.all_reduce's sum, on this rank's GPU?"""
    from ddp_lab.collectives.ring import ring_all_reduce

    rank, device = dist.get_rank(), collective_device()
    agree = {}
    for size in sizes:
        generator = torch.Generator().manual_seed(100 * rank + size)
        x = torch.randn(size, generator=generator).to(device)
        expected = x.clone()
        dist.all_reduce(expected)
        ring_all_reduce(x)
        agree[size] = bool(torch.allclose(x, expected, atol=1e-5))
    return {"device": str(device), "agree": agree}


def ring_all_reduce_nccl(gpus, options, sizes=(1, 3, 1001, 2**20 + 7)):
    """Chapter 6 on GPUs: the book's ring (isend/irecv) on nccl, checked and benchmarked."""
    from ddp_lab.bench import allreduce as bench

    # Shorter than other launches: a ring whose messages deadlock on nccl should not hold the run for long.
    timeout = min(options.timeout, 120.0)
    reports = ddp_lab.launch(on_rank_compare_ring, gpus, args=(list(sizes),), backend="nccl", timeout=timeout)
    for rank, report in enumerate(reports):
        expect(report["device"] == f"cuda:{rank}", f"rank {rank} ran the ring on {report['device']}")
        wrong = [size for size, same in report["agree"].items() if not same]
        expect(not wrong, f"rank {rank}: the ring's sum differs from dist.all_reduce's for sizes {wrong}")
    table = bench.measure(world_size=gpus, sizes=[1 << 20, 16 << 20], backend="nccl", timeout=timeout,
                          trial_seconds=0.05, trials=3)
    ratio = table[-1]["ring"]["busbw"] / table[-1]["builtin"]["busbw"]
    return Finding(f"{gpus} ranks: the ring's sums equal dist.all_reduce's on the GPUs (sizes "
                   f"{', '.join(map(str, sizes))}); at 16 MiB the ring runs at {ratio:.2f}x nccl's busbw",
                   {"agree": [r["agree"] for r in reports], "benchmark": bench.format_table(table)})
