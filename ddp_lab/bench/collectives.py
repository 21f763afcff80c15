"""Time each collective against message size, and turn times into bandwidths.

``python -m ddp_lab.bench collectives [--world-size 4] [--repeats 5]``, or from
a notebook::

    rows = measure_collectives(world_size=4)      # one Timing per (collective, size)

Conventions (those of nccl-tests, see ``ddp_lab.cost``):

* ``nbytes`` is the size of the *whole* tensor the collective is about: the
  tensor all-reduced or broadcast, the *output* of all_gather and gather
  (every rank contributes ``nbytes / W``), the *input* of reduce_scatter and
  scatter;
* ``seconds`` is the median over the repeats of the slowest rank's time: a
  collective is done when its last rank is done;
* ``algbw = nbytes / seconds``; ``busbw = algbw * bus_factor(collective, W)``;
* every repeat is kept (``Timing.samples``): ``table`` prints the fastest,
  median and slowest, as every timing in the book is shown.

The baseline, measured in the same run: ``send_recv``, one tensor of
``nbytes`` sent from rank 0 to rank 1, the speed of a single link. A ring
collective whose busbw equals the link's is as fast as the links allow.
``table`` compares the *fastest* repeat of each with the fastest send_recv:
medians taken minutes apart on a shared machine compare the machine's load
as much as the collectives (one slow median send_recv once made a broadcast
look 2.2 times faster than the link it runs on).

On gloo, as PyTorch calls it (2.13 here), ``dist.reduce_scatter`` is one
all-reduce per rank (``ProcessGroupGloo::reduce_scatter``, pytorch/pytorch
pull request 149869: "a pretty naive implementation as it does 1 allreduce
per rank"; Chapter 5 counts them with the group's sequence number): W
all-reduces of ``nbytes / W``, each paying the latency of a whole ring, so
it takes longer than one all-reduce of ``nbytes``.

Used in Chapters 4 and 5 and Lab 2.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

import torch
import torch.distributed as dist

from ddp_lab.bench.timing import slowest_rank_seconds
from ddp_lab.cost import algbw, bus_factor
from ddp_lab.units import format_bytes, format_rate, format_seconds

COLLECTIVES = ("send_recv", "broadcast", "reduce", "all_reduce", "scatter", "gather",
               "all_gather", "reduce_scatter")
SIZES = tuple(2 ** k for k in range(10, 23, 2))  # 1 KiB to 4 MiB


@dataclass(frozen=True)
class Timing:
    """One measurement: a collective on ``world_size`` ranks, ``nbytes`` in total.

    ``seconds`` is the median of the repeats (what a program typically
    sees); ``best`` the fastest (what the machine can do when nothing else
    runs: on a shared machine, the slower repeats also measure other
    programs). ``samples`` keeps every repeat; ``label`` names an
    implementation when several of the same collective are compared.
    """

    collective: str
    world_size: int
    nbytes: int
    seconds: float
    samples: tuple = ()
    label: str = ""

    @property
    def best(self) -> float:
        return min(self.samples) if self.samples else self.seconds

    @property
    def algbw(self) -> float:
        return algbw(self.nbytes, self.seconds)

    @property
    def busbw(self) -> float:
        return self.algbw * bus_factor(self.collective, self.world_size)

    @property
    def best_busbw(self) -> float:
        """The bus bandwidth of the fastest repeat."""
        return algbw(self.nbytes, self.best) * bus_factor(self.collective, self.world_size)


# --- inside each rank -----------------------------------------------------------------


def _operation(collective: str, nbytes: int):
    """A zero-argument function that runs ``collective`` once on ``nbytes`` of float32."""
    rank, w = dist.get_rank(), dist.get_world_size()
    n = max(w, nbytes // 4)
    n -= n % w  # split evenly into W chunks
    whole = torch.ones(n)
    part = torch.ones(n // w)
    parts = [torch.empty(n // w) for _ in range(w)]
    if collective == "send_recv":
        return lambda: (dist.send(whole, 1) if rank == 0 else dist.recv(whole, 0)) if rank < 2 else None
    if collective == "broadcast":
        return lambda: dist.broadcast(whole, src=0)
    if collective == "reduce":
        return lambda: dist.reduce(whole, dst=0)
    if collective == "all_reduce":
        return lambda: dist.all_reduce(whole)
    if collective == "scatter":
        return lambda: dist.scatter(part, list(whole.chunk(w)) if rank == 0 else None, src=0)
    if collective == "gather":
        return lambda: dist.gather(part, parts if rank == 0 else None, dst=0)
    if collective == "all_gather":
        return lambda: dist.all_gather(parts, part)
    if collective == "reduce_scatter":
        return lambda: dist.reduce_scatter(part, list(whole.chunk(w)))
    raise ValueError(f"unknown collective {collective!r}; expected one of {', '.join(COLLECTIVES)}")


def time_on_ranks(collectives, sizes, repeats, warmup=1):
    """Rank side: ``[(collective, nbytes, (seconds of each repeat)), ...]``, the same on every rank."""
    out = []
    _warm_up()
    for collective in collectives:
        for nbytes in sizes:
            run = _operation(collective, nbytes)
            n = max(dist.get_world_size(), nbytes // 4)
            n -= n % dist.get_world_size()
            out.append((collective, n * 4, slowest_rank_seconds(run, repeats, warmup)))
    return out


def _warm_up(rounds=5):
    """The first messages between two ranks pay for setting up their connection:
    send a few before measuring anything."""
    rank = dist.get_rank()
    small = torch.ones(1)
    for _ in range(rounds):
        dist.all_reduce(small)
        if rank < 2:
            dist.send(small, 1) if rank == 0 else dist.recv(small, 0)
    dist.barrier()


# --- from the notebook ----------------------------------------------------------------


def measure_collectives(world_size: int = 4, sizes=SIZES, collectives=COLLECTIVES,
                        repeats: int = 5, timeout: float = 300) -> list[Timing]:
    """Time each collective at each size on ``world_size`` fresh gloo ranks."""
    import ddp_lab

    collectives = tuple(collectives)
    for name in collectives:
        if name not in COLLECTIVES:
            raise ValueError(f"unknown collective {name!r}; expected one of {', '.join(COLLECTIVES)}")
    if world_size < 2:
        raise ValueError(f"world_size must be at least 2 to measure communication, got {world_size!r}")
    sizes = tuple(int(s) for s in sizes)
    if not sizes or min(sizes) < 1:
        raise ValueError(f"sizes must be positive byte counts, got {sizes!r}")
    results = ddp_lab.launch(time_on_ranks, world_size, args=(collectives, sizes, repeats),
                             backend="gloo", timeout=timeout)
    return [Timing(c, world_size, n, statistics.median(t), t) for c, n, t in results[0]]


def table(rows: list[Timing]) -> str:
    """The measurements as text, in two tables that fit a page of 80 columns:
    first the time of the fastest, median and slowest repeat; then algbw and
    busbw of the median, and the fastest repeat's busbw as a fraction of the
    link's (the fastest ``send_recv`` at the same size), when the baseline was
    measured."""
    link = {r.nbytes: r.best_busbw for r in rows if r.collective == "send_recv"}
    times = [f"{'collective':<15}{'size':>9}{'fastest':>11}{'median':>11}{'slowest':>11}"]
    rates = [f"{'collective':<15}{'size':>9}{'algbw':>14}{'busbw':>14}{'busbw/link':>12}"]
    for r in rows:
        ratio = f"{r.best_busbw / link[r.nbytes]:.2f}" if link.get(r.nbytes) else "-"
        slowest = max(r.samples) if r.samples else r.seconds
        times.append(f"{r.collective:<15}{format_bytes(r.nbytes):>9}{format_seconds(r.best):>11}"
                     f"{format_seconds(r.seconds):>11}{format_seconds(slowest):>11}")
        rates.append(f"{r.collective:<15}{format_bytes(r.nbytes):>9}"
                     f"{format_rate(r.algbw):>14}{format_rate(r.busbw):>14}{ratio:>12}")
    return "\n".join(times + [""] + rates)


def report(world_size: int = 4, repeats: int = 5, sizes=SIZES, collectives=COLLECTIVES) -> list[Timing]:
    """Measure and print the table; return the rows."""
    rows = measure_collectives(world_size, sizes, collectives, repeats)
    print(f"collectives on {world_size} gloo ranks, {repeats} repeats each: the fastest, median and\n"
          f"slowest; algbw and busbw of the median; busbw/link: the fastest repeat's busbw\n"
          f"over the fastest send_recv's")
    print(table(rows))
    return rows


def main(argv=None) -> list[Timing]:
    """``python -m ddp_lab.bench collectives [--world-size 4] [--repeats 5] [--max-bytes N]``."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m ddp_lab.bench collectives",
                                     description="time collectives against message size")
    parser.add_argument("--world-size", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--max-bytes", type=int, default=SIZES[-1],
                        help="largest message, in bytes (sizes grow by 4x from 1 KiB)")
    args = parser.parse_args(argv)
    sizes = [s for s in (2 ** k for k in range(10, 40, 2)) if s <= args.max_bytes] or [args.max_bytes]
    return report(args.world_size, args.repeats, sizes)


# --- the reader's own all-reduce -----------------------------------------------------


def _time_functions(functions, numel, repeats):
    results = {}
    for name, fn in functions.items():
        tensor = torch.ones(numel)
        results[name] = slowest_rank_seconds(lambda: fn(tensor), repeats)
    return results


def time_all_reduces(functions: dict, world_size: int = 4, nbytes: int = 2 ** 22,
                     repeats: int = 5, timeout: float = 300) -> list[Timing]:
    """Time all-reduce implementations ``{name: fn(tensor)}`` on the same ranks.

    Each ``fn`` is called on every rank with a float32 tensor of ``nbytes``;
    include ``dist.all_reduce`` itself as the baseline. One Timing per
    function, in the order given; read its name from ``Timing.label``.
    """
    import ddp_lab

    numel = max(1, nbytes // 4)
    results = ddp_lab.launch(_time_functions, world_size, args=(dict(functions), numel, repeats),
                             backend="gloo", timeout=timeout)[0]
    return [Timing("all_reduce", world_size, numel * 4, statistics.median(t), t, label=name)
            for name, t in results.items()]


# --- parameter server vs all-reduce ---------------------------------------------------


def _time_averages(numel, repeats):
    from ddp_lab.collectives.parameter_server import all_reduce_average, parameter_server_average

    def timed(average):
        tensor = torch.ones(numel)
        return statistics.median(slowest_rank_seconds(lambda: average(tensor), repeats))

    return {"parameter_server": timed(parameter_server_average), "all_reduce": timed(all_reduce_average)}


def time_parameter_server_vs_all_reduce(world_size: int = 4, sizes=(2 ** 12, 2 ** 16, 2 ** 20, 2 ** 22),
                                        repeats: int = 5, timeout: float = 300) -> list[dict]:
    """Median seconds of a parameter-server average and of an all-reduce average.

    One row per size (bytes of float32): ``{"nbytes", "parameter_server", "all_reduce"}``.
    """
    import ddp_lab

    sizes = tuple(int(s) for s in sizes)
    rows = []
    for nbytes in sizes:
        result = ddp_lab.launch(_time_averages, world_size, args=(max(1, nbytes // 4), repeats),
                                backend="gloo", timeout=timeout)[0]
        rows.append({"nbytes": max(1, nbytes // 4) * 4, **result})
    return rows


if __name__ == "__main__":
    main()
