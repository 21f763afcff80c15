"""Run a collective's algorithm on real ranks and bring back what every rank did.

    run = run_traced_collective("ring", world_size=4, length=8)
    run.correct       # every rank ends with what torch's own collective gives
    run.traces[2]     # rank 2's steps: what it sent, received and held

``ALGORITHMS`` is the table of what can be traced: a name ("ring",
"naive", "pairwise") -> the collective it computes, the algorithm run with a
``Trace``, torch's own collective as the reference, and the inputs. The
inputs are small whole numbers, so that the values in an animation can be
checked by eye: seeded digits for the all-reduces (their sums), and
``10 r + i`` on rank r for the all-to-all (the tens digit names the rank a
value came from). A new traced collective is its algorithm (taking a
``trace``) and one entry here; ``ddp_lab.draw.allreduce`` animates any run.

Used in Chapter 6 (the ring and naive all-reduces) and Chapter 5 (the
pairwise all-to-all). It runs in the notebook and starts ranks with
``ddp_lab.launch``: a notebook-side module of ``collectives/``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.distributed as dist

from ddp_lab.collectives.all_to_all import pairwise_all_to_all
from ddp_lab.collectives.naive import naive_all_reduce
from ddp_lab.collectives.ring import ring_all_reduce
from ddp_lab.launcher.api import launch
from ddp_lab.validate import check_choice, check_int_at_least

__all__ = ["ALGORITHMS", "Traced", "TracedRun", "run_traced_collective",
           "run_traced_all_reduce"]


def digits(rank, length, seed):
    """Seeded whole numbers from 0 to 9: sums an animation's reader can check."""
    generator = torch.Generator().manual_seed(seed + rank)
    return torch.randint(0, 10, (length,), generator=generator).float()


def tens_by_rank(rank, length, seed):
    """``10 rank + i``: the tens digit of a value names the rank it came from."""
    return torch.arange(length, dtype=torch.float32) + 10 * rank


def torch_all_reduce(inputs):
    result = inputs.clone()
    dist.all_reduce(result)
    return result


def torch_all_to_all(inputs):
    result = torch.empty_like(inputs)
    dist.all_to_all_single(result, inputs)
    return result


@dataclass(frozen=True)
class Traced:
    """One traceable algorithm: the ``collective`` it computes, and three functions run in a rank.

    ``algorithm(inputs, trace)`` returns its result without changing
    ``inputs``; ``reference(inputs)`` is torch's own collective;
    ``inputs(rank, length, seed)`` makes a rank's tensor.
    """

    collective: str
    algorithm: Callable
    reference: Callable
    inputs: Callable = digits


ALGORITHMS = {
    "ring": Traced("all_reduce", lambda x, trace: ring_all_reduce(x.clone(), trace=trace), torch_all_reduce),
    "naive": Traced("all_reduce", lambda x, trace: naive_all_reduce(x.clone(), trace=trace), torch_all_reduce),
    "pairwise": Traced("all_to_all", lambda x, trace: pairwise_all_to_all(torch.empty_like(x), x, trace=trace),
                       torch_all_to_all, tens_by_rank),
}


@dataclass
class TracedRun:
    """Inputs, traces, results and torch's results of one traced collective, by rank."""

    algorithm: str
    collective: str
    inputs: list
    results: list
    expected: list
    traces: list

    @property
    def world_size(self):
        return len(self.traces)

    @property
    def correct(self):
        """Does every rank hold what torch's own collective gave it?"""
        return all(torch.allclose(r, e) for r, e in zip(self.results, self.expected))


def run_traced_collective(algorithm, world_size=4, length=8, *, seed=0, timeout=60):
    """Run ``algorithm`` (a name in ``ALGORITHMS``) traced on ``world_size`` fresh gloo ranks."""
    check_choice("algorithm", algorithm, tuple(ALGORITHMS))
    check_int_at_least("length", length, 0)
    per_rank = launch(_traced_rank, world_size, args=(algorithm, length, seed),
                      backend="gloo", timeout=timeout)
    inputs, results, expected, traces = (list(column) for column in zip(*per_rank))
    return TracedRun(algorithm, ALGORITHMS[algorithm].collective, inputs, results, expected, traces)


def run_traced_all_reduce(algorithm="ring", world_size=4, length=8, *, seed=0, timeout=60):
    """``run_traced_collective`` for an all-reduce ("ring" or "naive"), as Chapter 6 calls it."""
    all_reduces = tuple(name for name, entry in ALGORITHMS.items() if entry.collective == "all_reduce")
    check_choice("algorithm", algorithm, all_reduces)
    return run_traced_collective(algorithm, world_size, length, seed=seed, timeout=timeout)


def _traced_rank(algorithm, length, seed):
    """Inside a rank: make the inputs, run torch's collective and the traced algorithm, report."""
    from ddp_lab.collectives.step_trace import Trace

    entry = ALGORITHMS[algorithm]
    inputs = entry.inputs(dist.get_rank(), length, seed)
    expected = entry.reference(inputs)
    trace = Trace(max_values=max(16, length))
    result = entry.algorithm(inputs, trace)
    return inputs, result, expected, trace
