"""Training throughput at 1, 2, 4 ranks, with threads per rank set or left at the default.

``python -m ddp_lab.bench training [--world-sizes 1 2 4] [--seconds 1.5]``

Each configuration trains the same MLP with DDP for about ``--seconds``
(after a few warm-up steps), split into ``--repeats`` timed loops, at a
fixed batch *per rank*, and reports the global throughput of each loop:
samples per second, all ranks together, as the median and the range of the
loops. Two settings of intra-op threads per rank:

* ``set``: the machine's cores shared evenly between the ranks
  (``cores // W``, at least 1), what ``ddp_lab.launch`` does by default and
  what torchrun does by setting ``OMP_NUM_THREADS=1``;
* ``default``: every rank uses all the cores, PyTorch's own default in a
  process nobody configured (``threads=cores`` here reproduces it).

A third row for 1 rank runs it on a single thread: the baseline of every
ratio, measured in the same invocation, on the same machine, under the
same load. Each world size is one launch; the thread settings are measured
one after the other in it.

With more threads than cores, the waits dominate: PyTorch's Linux wheels use
GNU OpenMP, whose waiting threads spin (``GOMP_SPINCOUNT``) on the cores
the late threads need. ``OMP_WAIT_POLICY=PASSIVE python -m ddp_lab.bench
training`` makes them sleep instead, and shows how much of the loss is
spinning.

Used in Chapter 10 (throughput as ranks and threads share the cores).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn.functional as F

import ddp_lab
from ddp_lab.bench.timing import elapsed_seconds
from ddp_lab.host import available_cores
from ddp_lab.units import spread

__all__ = ["Throughput", "measure", "measure_speedup", "format_table", "main"]

WIDTHS = (64, 256, 256, 256, 10)


@dataclass(frozen=True)
class Throughput:
    """One measured configuration."""

    world_size: int
    threads: int          # intra-op threads per rank
    setting: str          # "set" or "default"
    samples_per_second: float  # the median of the repeats
    steps: int                 # per repeat
    batch_per_rank: int
    samples: tuple = ()        # samples/s of every repeat

    @property
    def spread(self) -> dict:
        """``{"min", "median", "max"}`` of the repeats' samples/s."""
        return spread(self.samples or (self.samples_per_second,))


def train_steps(budget: float, max_steps: int, warmup: int, batch_per_rank: int, thread_counts,
                repeats: int = 1) -> dict:
    """Inside a rank: for each thread count, time DDP training steps for about ``budget`` seconds.

    A probe step, timed on every rank, sets how many steps fit in
    ``budget / repeats`` (between 1 and ``max_steps``): an oversubscribed
    configuration can be a hundred times slower than a good one, and a fixed
    step count would make it run for minutes. Returns ``{threads: (steps,
    (seconds of each repeat))}``, seconds being the slowest rank's (a step is
    done when every rank is done). The
    thread count is changed with ``torch.set_num_threads``, as
    ``ddp_lab.launch(threads=...)`` or ``OMP_NUM_THREADS`` set it at start-up.
    """
    from torch.nn.parallel import DistributedDataParallel as DDP

    from ddp_lab.models import mlp

    torch.manual_seed(dist.get_rank())
    model = DDP(mlp(WIDTHS, seed=0))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(batch_per_rank, WIDTHS[0])
    y = torch.randint(0, WIDTHS[-1], (batch_per_rank,))

    def step():
        optimizer.zero_grad(set_to_none=True)
        F.cross_entropy(model(x), y).backward()
        optimizer.step()

    def steps_and_barrier(steps):
        for _ in range(steps):
            step()
        dist.barrier()  # until the last rank is done

    def timed(steps):
        dist.barrier()
        elapsed = torch.tensor([elapsed_seconds(lambda: steps_and_barrier(steps), torch.device("cpu"))])
        dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)  # the same number on every rank
        return elapsed.item()

    results = {}
    for threads in thread_counts:
        torch.set_num_threads(threads)
        for _ in range(warmup):
            step()
        probe = timed(1)
        steps = int(min(max_steps, max(1, budget / repeats / probe)))
        # A configuration so slow that one step fills a repeat's share of the
        # budget counts the probe as its first repeat.
        first = [probe] if steps == 1 else []
        results[threads] = (steps, tuple(first + [timed(steps) for _ in range(repeats - len(first))]))
    return results


def measure(world_size: int, settings: dict, *, budget: float = 1.5, max_steps: int = 200,
            warmup: int = 1, batch_per_rank: int = 128, repeats: int = 3,
            timeout: float = 300) -> list[Throughput]:
    """Launch ``world_size`` ranks once; measure each ``{setting: threads per rank}``
    ``repeats`` times, for about ``budget`` seconds in all."""
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, got {repeats!r}")
    thread_counts = list(dict.fromkeys(settings.values()))
    timings = ddp_lab.launch(train_steps, world_size,
                             args=(budget, max_steps, warmup, batch_per_rank, thread_counts, repeats),
                             backend="gloo", threads=thread_counts[0], timeout=timeout)[0]
    results = []
    for setting, threads in settings.items():
        steps, seconds = timings[threads]
        rates = tuple(steps * batch_per_rank * world_size / s for s in seconds)
        results.append(Throughput(world_size, threads, setting, spread(rates)["median"], steps, batch_per_rank,
                                  rates))
    return results


def measure_speedup(world_sizes=(1, 2, 4), *, budget: float = 1.5, batch_per_rank: int = 128,
                    repeats: int = 3) -> list[Throughput]:
    """Every world size with threads set and at the default, plus 1 rank on one core (the baseline)."""
    cores = available_cores()
    results = []
    for world_size in world_sizes:
        settings = {"set": max(1, cores // world_size), "default": cores}
        if world_size == 1:
            settings = {"one core": 1, **settings}
        if settings["set"] == settings["default"]:
            del settings["default"]  # the same configuration: measured once
        results += measure(world_size, settings, budget=budget, batch_per_rank=batch_per_rank, repeats=repeats)
    return results


def format_table(results: list[Throughput]) -> str:
    """A table of throughputs (median of the repeats, and their range), with
    each median's ratio to the 1-rank run's; every line fits 80 characters
    (Chapter 10 prints it)."""
    baseline = _baseline(results)
    cores = available_cores()
    repeats = max(len(r.samples) for r in results) or 1
    lines = [
        f"DDP training throughput: MLP {'-'.join(map(str, WIDTHS))}, batch {baseline.batch_per_rank} per rank, gloo,",
        f"{cores} cores, torch {torch.__version__}; samples/s: median and range of {repeats} repeats",
        "",
        f"{'ranks':>5}  {'threads':>8}  {'setting':>8}  {'threads':>6}  {'samples/s':>9}  {'range':>15}  "
        f"{'vs 1 rank,':>10}",
        f"{'':>5}  {'per rank':>8}  {'':>8}  {'in all':>6}  {'':>9}  {'':>15}  {'1 thread':>10}",
    ]
    oversubscribed = False
    for r in results:
        mark = "  *" if r.world_size * r.threads > cores else ""
        oversubscribed = oversubscribed or bool(mark)
        low, high = r.spread["min"], r.spread["max"]
        lines.append(f"{r.world_size:>5}  {r.threads:>8}  {r.setting:>8}  {r.world_size * r.threads:>6}  "
                     f"{r.samples_per_second:>9.0f}  {f'{low:.0f} to {high:.0f}':>15}  "
                     f"{r.samples_per_second / baseline.samples_per_second:>9.2f}x{mark}")
    if oversubscribed:
        lines.append("* more threads than cores")
    return "\n".join(lines)


def _baseline(results):
    """The 1-rank run on one thread if there is one, else the first 1-rank run, else the first."""
    single = [r for r in results if r.world_size == 1]
    return next((r for r in single if r.threads == 1), single[0] if single else results[0])


def main(argv=None) -> list[Throughput]:
    parser = argparse.ArgumentParser(prog="python -m ddp_lab.bench training", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--world-sizes", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--seconds", type=float, default=1.5,
                        help="time measured per configuration (default 1.5)")
    parser.add_argument("--batch-per-rank", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3, help="timed loops per configuration (default 3)")
    args = parser.parse_args(argv)
    if (any(w < 1 for w in args.world_sizes) or args.seconds <= 0 or args.batch_per_rank < 1
            or args.repeats < 1):
        parser.error("world sizes, --seconds, --batch-per-rank and --repeats must be positive")
    results = measure_speedup(tuple(args.world_sizes), budget=args.seconds, batch_per_rank=args.batch_per_rank,
                              repeats=args.repeats)
    print(format_table(results))
    return results


if __name__ == "__main__":
    main()
