"""Running the GPU checks one by one, each to a passed, failed or skipped entry.

A check is a function ``run(gpus, options) -> Finding`` with the number of
GPUs it needs. The runner never lets one check stop the others: a check
this machine has too few GPUs for is *skipped* with the count it needs and
the count there is; one that raises has *failed*, and its entry keeps the
error; the rest run. Each check says what it saw in one line (``outcome``),
which the results file keeps and the book prints (Chapter 14).

Inside a check, ``expect(condition, message)`` states what the book
promises: "rank 1 is on cuda:1", "the sum is 3.0 on every rank".
"""

from __future__ import annotations

import time
import traceback
from dataclasses import asdict, dataclass, field
from typing import Callable

from ddp_lab.bench.allreduce import default_sizes
from ddp_lab.gpu_check.results import record
from ddp_lab.validate import check_int_at_least, check_positive_number, is_int

__all__ = ["Check", "Finding", "CheckFailed", "expect", "Options", "run_check", "run_checks"]


@dataclass(frozen=True)
class Finding:
    """What a check that passed saw: one line, and what backs it up."""

    outcome: str
    details: dict = field(default_factory=dict)
    measurement: dict | None = None


class CheckFailed(Exception):
    """A check saw something other than what the book promises."""

    def __init__(self, message, details=None):
        super().__init__(message)
        self.details = details or {}


def expect(condition, message, details=None):
    """Raise CheckFailed(message) unless ``condition`` holds."""
    if not condition:
        raise CheckFailed(message, details)


@dataclass(frozen=True)
class Check:
    """One GPU path of the book: its name in the results file, what it does,
    the chapters that rely on it, and how many GPUs it needs."""

    name: str
    title: str
    chapters: tuple
    needs_gpus: int
    run: Callable


@dataclass(frozen=True)
class Options:
    """How much the measuring checks measure.

    Each all-reduce size is timed ``repeats`` times, each repeat a loop of
    ``iterations`` calls (one call of a small all-reduce on GPUs takes a
    few microseconds, too short to time alone); each copy is timed
    ``repeats`` times. ``timeout``: seconds a launch may take.
    """

    repeats: int = 10
    iterations: int = 20
    all_reduce_sizes: tuple = tuple(default_sizes(1 << 10, 256 << 20))  # 1 KiB to 256 MiB, x4
    copy_sizes: tuple = (1 << 20, 16 << 20, 64 << 20)
    timeout: float = 300.0

    def __post_init__(self):
        for name in ("repeats", "iterations"):
            value = getattr(self, name)
            check_int_at_least(name, value, 1)
        for name in ("all_reduce_sizes", "copy_sizes"):
            sizes = getattr(self, name)
            if not sizes or any(not is_int(s) or s < 4 for s in sizes):
                raise ValueError(f"{name} must be byte counts of at least 4 (one float32), got {sizes!r}")
        check_positive_number("timeout", self.timeout, "seconds")

    def as_dict(self) -> dict:
        values = asdict(self)
        return {**values, "all_reduce_sizes": list(self.all_reduce_sizes), "copy_sizes": list(self.copy_sizes)}


def why_skipped(check: Check, gpus: int) -> str | None:
    """``"needs 2 CUDA GPUs; this machine has 1"``, or None when there are enough."""
    if gpus >= check.needs_gpus:
        return None
    needs = "a CUDA GPU" if check.needs_gpus == 1 else f"{check.needs_gpus} CUDA GPUs"
    return f"needs {needs}; this machine has {gpus}"


def run_check(check: Check, gpus: int, options: Options) -> dict:
    """Run one check (or skip it) and return its entry in the results file."""
    reason = why_skipped(check, gpus)
    if reason is not None:
        return record(check, "skipped", outcome=reason)
    start = time.perf_counter()
    try:
        finding = check.run(gpus, options)
    except CheckFailed as failure:
        return record(check, "failed", seconds=time.perf_counter() - start, outcome=str(failure),
                      details=failure.details, error=traceback.format_exc())
    except Exception as error:  # a launch that raised, a rank that died: the check failed
        first_line = (str(error).strip().splitlines() or [""])[0]
        return record(check, "failed", seconds=time.perf_counter() - start,
                      outcome=f"{type(error).__name__}: {first_line}", error=traceback.format_exc())
    return record(check, "passed", seconds=time.perf_counter() - start, outcome=finding.outcome,
                  details=finding.details, measurement=finding.measurement)


def run_checks(checks, gpus: int, options: Options, *, progress: Callable | None = print) -> list[dict]:
    """Run every check in order; say each one's result through ``progress`` as it comes."""
    records = []
    for number, check in enumerate(checks, 1):
        if progress and why_skipped(check, gpus) is None:
            progress(f"[{number}/{len(checks)}] {check.name}: {check.title} ...")
        entry = run_check(check, gpus, options)
        if progress:
            took = f" ({entry['seconds']:.1f} s)" if entry["status"] != "skipped" else ""
            progress(f"[{number}/{len(checks)}] {check.name}: {entry['status']}{took}: {entry['outcome']}")
        records.append(entry)
    return records
