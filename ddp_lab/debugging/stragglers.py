"""Which rank is slow? Time spent computing vs waiting, per rank.

A collective ends on every rank when the *last* rank has joined it. If one
rank computes longer than the others (a slower machine, a busy disk, an
extra print or checkpoint on that rank only), every other rank waits for
it in the next collective: the whole job runs at the straggler's pace, and
every rank looks equally slow from outside, since they all finish each step
together.

The way to find it is to split each rank's step time in two: the time spent
in its own work (forward, backward, loading data) and the time spent
*waiting* inside collectives. The straggler is the rank that computes the
longest and waits the least; the others wait for about the difference.

:class:`WaitComputeTimer` measures the two on each rank (two context
managers around the code of a step), :meth:`WaitComputeTimer.gather` brings
every rank's totals to every rank with one all-gather, and
:func:`find_straggler` names the straggler, if there is one.

Used in Chapter 13b ("Stragglers") and by the checker of Lab 5b.
"""

from __future__ import annotations

import statistics
import time
from contextlib import contextmanager
from dataclasses import dataclass

import torch
import torch.distributed as dist

__all__ = ["WaitComputeTimer", "RankTimes", "StragglerVerdict", "find_straggler"]


@dataclass(frozen=True)
class RankTimes:
    """One rank's totals: seconds computing and seconds waiting, over ``steps`` steps."""

    rank: int
    compute_s: float
    wait_s: float
    steps: int

    def __str__(self) -> str:
        per_step = max(self.steps, 1)
        return (f"rank {self.rank}: computing {1e3 * self.compute_s / per_step:.1f} ms, "
                f"waiting {1e3 * self.wait_s / per_step:.1f} ms per step")


class WaitComputeTimer:
    """Adds up, on one rank, the time spent computing and the time spent waiting.

        timer = WaitComputeTimer()
        for batch in loader:
            with timer.computing():
                loss = model(batch).sum(); loss.backward()
            with timer.waiting():
                for p in model.parameters():
                    dist.all_reduce(p.grad)
            timer.step()
        times = timer.gather()          # every rank's totals, on every rank

    A collective's time is all waiting for the ranks that arrive early and
    almost none for the last one; the transfer itself is the same on all.
    (With DDP the all-reduce runs inside ``backward``; time a barrier after
    it instead, or compare the ranks' ``backward`` times.)
    """

    def __init__(self):
        self.compute_s = 0.0
        self.wait_s = 0.0
        self.steps = 0

    @contextmanager
    def computing(self):
        start = time.perf_counter()
        try:
            yield
        finally:
            self.compute_s += time.perf_counter() - start

    @contextmanager
    def waiting(self):
        start = time.perf_counter()
        try:
            yield
        finally:
            self.wait_s += time.perf_counter() - start

    def step(self):
        """Count one step (for the per-step figures)."""
        self.steps += 1

    def gather(self, group=None) -> list[RankTimes]:
        """Every rank's totals, in rank order, on every rank (a collective)."""
        mine = torch.tensor([self.compute_s, self.wait_s, float(self.steps)], dtype=torch.float64)
        everyone = [torch.zeros_like(mine) for _ in range(dist.get_world_size(group))]
        dist.all_gather(everyone, mine, group=group)
        return [RankTimes(rank, float(t[0]), float(t[1]), int(t[2])) for rank, t in enumerate(everyone)]


@dataclass(frozen=True)
class StragglerVerdict:
    """What :func:`find_straggler` concluded: ``straggler`` is a rank or None."""

    straggler: int | None
    slowest: int
    least_waiting: int
    excess_per_step_s: float

    def __bool__(self) -> bool:
        return self.straggler is not None

    def __str__(self) -> str:
        if self.straggler is None:
            return "no straggler: no rank computes much longer than the others"
        if self.least_waiting == self.straggler:
            return (f"rank {self.straggler} is the straggler: it computed longest and waited least; "
                    f"the other ranks spent about that difference waiting for it in the collectives")
        # The compute times alone do not explain the waiting: say so rather than claim it.
        return (f"rank {self.straggler} is the straggler: it computed longest, "
                f"{1e3 * self.excess_per_step_s:.1f} ms per step more than the others; but rank "
                f"{self.least_waiting} waited least, so that rank also loses time outside the timed "
                f"code (time the whole step)")

    __repr__ = __str__


def find_straggler(times: list[RankTimes], *, tolerance: float = 0.25,
                   min_excess_per_step_s: float = 0.01) -> StragglerVerdict:
    """Name the rank that makes the others wait, if any.

    The slowest rank (longest computing) is a straggler when its compute
    time exceeds the median of the other ranks' by more than ``tolerance``
    (a fraction of that median) *and* by more than
    ``min_excess_per_step_s`` per step: a few milliseconds of scheduling
    noise on a shared machine are not a straggler.
    """
    if len(times) < 2:
        raise ValueError(f"find_straggler needs the times of at least 2 ranks, got {len(times)}")
    if tolerance < 0 or min_excess_per_step_s < 0:
        raise ValueError(f"tolerance and min_excess_per_step_s must be >= 0, got {tolerance!r}, "
                         f"{min_excess_per_step_s!r}")
    slowest = max(times, key=lambda t: t.compute_s)
    least_waiting = min(times, key=lambda t: t.wait_s)
    others = statistics.median(t.compute_s for t in times if t.rank != slowest.rank)
    steps = max(slowest.steps, 1)
    excess = (slowest.compute_s - others) / steps
    is_straggler = (slowest.compute_s > others * (1 + tolerance) and excess > min_excess_per_step_s)
    return StragglerVerdict(slowest.rank if is_straggler else None, slowest.rank, least_waiting.rank, excess)
