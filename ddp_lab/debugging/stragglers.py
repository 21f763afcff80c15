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
import textwrap
import time
from contextlib import contextmanager
from dataclasses import dataclass

import torch
import torch.distributed as dist

from ddp_lab.validate import check_non_negative_number

__all__ = ["WaitComputeTimer", "RankTimes", "StragglerVerdict", "find_straggler"]


@dataclass(frozen=True)
class RankTimes:
    """One rank's totals: seconds computing and seconds waiting, over ``steps`` steps.

    ``step_compute_s``: the median over the steps of one step's computing
    time, when the steps were timed one by one (None otherwise). A median
    step is what a straggler is judged by: a rank slow at *every* step holds
    the others back at every step, while one that the machine paused once
    (another process took its core) is merely unlucky.
    """

    rank: int
    compute_s: float
    wait_s: float
    steps: int
    step_compute_s: float | None = None

    @property
    def typical_step_s(self) -> float:
        """Computing per step: the median step if known, else the mean."""
        if self.step_compute_s is not None:
            return self.step_compute_s
        return self.compute_s / max(self.steps, 1)

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
        self._step_computes = []  # one entry per step: seconds computing in it
        self._mark = None  # (clock, wait_s, compute_s) when the current step began

    def start(self):
        """Start the clock of the first step (else it starts at the first ``computing()``)."""
        self._mark = (time.perf_counter(), self.wait_s, self.compute_s)

    @contextmanager
    def computing(self):
        if self._mark is None:
            self.start()
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
        """Count one step, and keep its computing time (for the median step).

        The step's computing time is what ``computing()`` measured in it; a
        caller that times no ``computing()`` block (Lab 5b's checker, which
        times whole scripts) gets the step's clock time minus its waiting.
        """
        self.steps += 1
        now = time.perf_counter()
        if self._mark is not None:
            began, waited, computed = self._mark
            in_blocks = self.compute_s - computed
            self._step_computes.append(in_blocks if in_blocks > 0 else (now - began) - (self.wait_s - waited))
        self._mark = (now, self.wait_s, self.compute_s)

    def gather(self, group=None) -> list[RankTimes]:
        """Every rank's totals, in rank order, on every rank (a collective)."""
        median = statistics.median(self._step_computes) if self._step_computes else float("nan")
        mine = torch.tensor([self.compute_s, self.wait_s, float(self.steps), median], dtype=torch.float64)
        everyone = [torch.zeros_like(mine) for _ in range(dist.get_world_size(group))]
        dist.all_gather(everyone, mine, group=group)
        return [RankTimes(rank, float(t[0]), float(t[1]), int(t[2]), None if t[3].isnan() else float(t[3]))
                for rank, t in enumerate(everyone)]


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
        """The verdict in a sentence, wrapped at 80 characters (the book's page)."""
        return textwrap.fill(self.sentence, 80)

    @property
    def sentence(self) -> str:
        """The verdict in one line, for text that wraps it its own way."""
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

    The slowest rank (longest computing per step: its median step when the
    steps were timed one by one, ``RankTimes.typical_step_s``) is a
    straggler when that exceeds the median of the other ranks' by more than
    ``tolerance`` (a fraction of it) *and* by more than
    ``min_excess_per_step_s``: a few milliseconds of scheduling noise on a
    shared machine are not a straggler, nor is a rank that was paused in a
    few steps only.
    """
    if len(times) < 2:
        raise ValueError(f"find_straggler needs the times of at least 2 ranks, got {len(times)}")
    check_non_negative_number("tolerance", tolerance)
    check_non_negative_number("min_excess_per_step_s", min_excess_per_step_s, "seconds")
    slowest = max(times, key=lambda t: t.typical_step_s)
    least_waiting = min(times, key=lambda t: t.wait_s)
    others = statistics.median(t.typical_step_s for t in times if t.rank != slowest.rank)
    excess = slowest.typical_step_s - others
    is_straggler = (slowest.typical_step_s > others * (1 + tolerance) and excess > min_excess_per_step_s)
    return StragglerVerdict(slowest.rank if is_straggler else None, slowest.rank, least_waiting.rank, excess)
