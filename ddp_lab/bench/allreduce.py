"""All-reduce time, algorithm and bus bandwidth vs message size.

Compares torch's built-in ``dist.all_reduce`` with the book's own
``ddp_lab.collectives.ring.ring_all_reduce`` (with tracing off, and optionally on)
and, optionally, the textbook ring it improves on
(``ddp_lab.collectives.textbook_ring``), run
on the same ranks, interleaved size by size so that both see the same
machine load::

    python -m ddp_lab.bench allreduce --world-size 4 --min 1KiB --max 64MiB

Timing follows nccl-tests: after warm-up, every rank times a loop of calls
between two barriers; the slowest rank's time per call counts (a collective
is done when its last rank is done). Every such loop (a trial) is kept: the
table shows the fastest, the median and the slowest. Loops are sized by
time, not by count, and the implementations take turns.

Used in Chapter 1 (what an all-reduce costs), Chapter 6 (the book's ring
against torch's) and Lab 3.
"""

from __future__ import annotations

import statistics

import torch
import torch.distributed as dist

import ddp_lab
from ddp_lab.bench.timing import collective_device, slowest_rank_seconds
from ddp_lab.collectives.ring import ring_all_reduce
from ddp_lab.collectives.step_trace import Trace
from ddp_lab.collectives.textbook_ring import textbook_ring_all_reduce
from ddp_lab.cost import bus_factor
from ddp_lab.units import format_bytes, format_rate, format_seconds

IMPLEMENTATIONS = ("builtin", "textbook", "ring", "ring+trace")


def builtin(tensor):
    dist.all_reduce(tensor)


def textbook(tensor):
    textbook_ring_all_reduce(tensor)


def ring(tensor):
    ring_all_reduce(tensor)


def ring_traced(tensor):
    ring_all_reduce(tensor, trace=Trace())


CALLS = {"builtin": builtin, "textbook": textbook, "ring": ring, "ring+trace": ring_traced}


# Each timed loop runs for about TRIAL_SECONDS, however long one call takes:
# with 4 ranks on 2 cores a single 1 MiB all-reduce takes anywhere from 1.3 to
# 17 ms (whichever rank the scheduler runs next), so a loop of a fixed four
# calls gave ratios that swung from 0.5x to 1.5x between runs.
TRIAL_SECONDS = 0.1
TRIALS = 7
MAX_ITERATIONS = 200


def seconds_per_call(call, tensor, iterations):
    """The slowest rank's mean time per call over one loop of ``iterations`` calls."""
    def loop():
        for _ in range(iterations):
            call(tensor)

    # On a GPU the loop is timed with CUDA events (see slowest_rank_seconds).
    return slowest_rank_seconds(loop, repeats=1, warmup=0)[0] / iterations


def iterations_for(call, tensor, trial_seconds):
    """Warm up (connections, allocations), then size a loop to last ``trial_seconds``.

    Every rank gets the same number, computed from the slowest rank's time:
    ranks that disagreed on it would wait for each other's missing calls for ever.
    """
    call(tensor)
    one_call = seconds_per_call(call, tensor, 3)
    return max(1, min(MAX_ITERATIONS, round(trial_seconds / one_call)))


def measure_on_rank(sizes, implementations, trial_seconds=TRIAL_SECONDS, trials=TRIALS):
    """Run inside each rank: [(bytes, {implementation: (seconds per call of each trial)})].

    Tensors live where the backend wants them: on the rank's GPU for nccl.

    The implementations take turns, trial by trial, so a slow moment of the
    machine hits all of them alike; every trial is kept.
    """
    device = collective_device()
    rows = []
    for nbytes in sizes:
        tensor = torch.ones(nbytes // 4, dtype=torch.float32, device=device)
        iterations = {name: iterations_for(CALLS[name], tensor, trial_seconds) for name in implementations}
        samples = {name: [] for name in implementations}
        for _ in range(trials):
            for name in implementations:
                samples[name].append(seconds_per_call(CALLS[name], tensor, iterations[name]))
        rows.append((nbytes, {name: tuple(times) for name, times in samples.items()}))
    return rows


def measure(world_size=4, sizes=None, implementations=("builtin", "ring"), backend="auto", timeout=600,
            trial_seconds=TRIAL_SECONDS, trials=TRIALS):
    """Measure on ``world_size`` fresh ranks; return a list of result rows (dicts).

    ``row[implementation]`` holds ``seconds`` (the median trial's time per
    call), ``samples`` (every trial's), and ``algbw`` and ``busbw`` of the
    median. Each size costs about ``trials x len(implementations) x
    trial_seconds``: fewer or shorter trials are quicker and noisier.
    """
    sizes = sizes or default_sizes()
    unknown = set(implementations) - set(IMPLEMENTATIONS)
    if unknown:
        raise ValueError(f"unknown implementations {sorted(unknown)}: use {IMPLEMENTATIONS}")
    if trials < 1 or trial_seconds <= 0:
        raise ValueError(f"trials must be >= 1 and trial_seconds > 0, got trials={trials}, "
                         f"trial_seconds={trial_seconds}")
    rows = ddp_lab.launch(measure_on_rank, world_size,
                          args=(sizes, tuple(implementations), trial_seconds, trials),
                          backend=backend, timeout=timeout)[0]
    factor = bus_factor("all_reduce", world_size)
    table = []
    for nbytes, times in rows:
        row = {"bytes": nbytes}
        for name, samples in times.items():
            seconds = statistics.median(samples)
            row[name] = {"seconds": seconds, "samples": samples, "algbw": nbytes / seconds,
                         "busbw": nbytes / seconds * factor}
        table.append(row)
    return table


def default_sizes(smallest=1 << 10, largest=64 << 20):
    sizes, size = [], smallest
    while size <= largest:
        sizes.append(size)
        size *= 4
    return sizes


def format_table(table, baseline="builtin"):
    """A text table per implementation, each fitting a page of 80 columns: the
    fastest, median and slowest trial's time per call and the median's bus
    bandwidth; for the others than ``baseline``, the ratio of the medians' busbw."""
    names = [k for k in table[0] if k != "bytes"]
    lines = []
    for name in names:
        ratio = name != baseline and baseline in names
        heading = f"{name}/{baseline}"
        width = max(15, len(heading) + 2)  # the ratio's column, two spaces before its heading
        lines += ([""] if lines else []) + [
            f"{name}:",
            f"{'size':>9}{'fastest':>10}{'median':>10}{'slowest':>10}{'busbw':>13}"
            + (f"{heading:>{width}}" if ratio else "")]
        for row in table:
            figures = row[name]
            samples = figures.get("samples") or (figures["seconds"],)
            line = (f"{format_bytes(row['bytes']):>9}{format_seconds(min(samples)):>10}"
                    f"{format_seconds(figures['seconds']):>10}{format_seconds(max(samples)):>10}"
                    f"{format_rate(figures['busbw']):>13}")
            if ratio:
                line += f"{figures['busbw'] / row[baseline]['busbw']:>{width - 1}.2f}x"
            lines.append(line)
    return "\n".join(lines)


def parse_size(text):
    units = {"KIB": 1 << 10, "MIB": 1 << 20, "GIB": 1 << 30, "B": 1}
    upper = text.strip().upper()
    for unit, scale in units.items():
        if upper.endswith(unit):
            return int(float(upper[: -len(unit)]) * scale)
    return int(upper)


def main(world_size=4, smallest="1KiB", largest="64MiB", implementations=("builtin", "ring"),
         backend="auto"):
    sizes = default_sizes(parse_size(smallest), parse_size(largest))
    table = measure(world_size, sizes, implementations, backend=backend)
    print(f"\nall_reduce, world_size {world_size}, float32, torch {torch.__version__} "
          f"(busbw = algbw x 2(W-1)/W = algbw x {bus_factor('all_reduce', world_size):.2f})\n")
    print(format_table(table))
