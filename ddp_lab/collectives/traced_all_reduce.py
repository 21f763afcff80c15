"""Run an all-reduce on real ranks and bring back what every rank did.

    run = ddp_lab.run_traced_all_reduce("ring", world_size=4, length=8)
    run.correct       # every rank ends with torch's all_reduce of the inputs
    run.traces[2]     # rank 2's steps: what it sent, received and held

The inputs are small whole numbers (seeded), so the sums in the animation
can be checked by eye.

Used in Chapter 6. It runs in the notebook and starts ranks with
``ddp_lab.launch``: the one notebook-side module of ``collectives/``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ddp_lab.launcher.api import launch
from ddp_lab.validate import check_int_at_least

ALGORITHMS = ("ring", "naive")


@dataclass
class AllReduceRun:
    """Inputs, traces and results of one traced all-reduce, by rank."""

    algorithm: str
    op: str
    inputs: list
    results: list
    expected: torch.Tensor
    traces: list

    @property
    def world_size(self):
        return len(self.traces)

    @property
    def correct(self):
        """Does every rank hold what ``dist.all_reduce`` computed?"""
        return all(torch.allclose(r, self.expected) for r in self.results)


def run_traced_all_reduce(algorithm="ring", world_size=4, length=8, *, op="sum",
                          seed=0, timeout=60):
    """Run ``algorithm`` ("ring" or "naive") on ``world_size`` fresh ranks."""
    if algorithm not in ALGORITHMS:
        raise ValueError(f"unknown algorithm {algorithm!r}: use one of {ALGORITHMS}")
    check_int_at_least('length', length, 0)
    per_rank = launch(_traced_rank, world_size, args=(algorithm, length, seed, op),
                      backend="gloo", timeout=timeout)
    inputs, results, expected, traces = zip(*per_rank)
    return AllReduceRun(algorithm, op, list(inputs), list(results), expected[0], list(traces))


def _traced_rank(algorithm, length, seed, op):
    """Inside a rank: make seeded inputs, all-reduce them traced, report."""
    import torch.distributed as dist

    from ddp_lab.collectives.naive import naive_all_reduce
    from ddp_lab.collectives.ring import ring_all_reduce
    from ddp_lab.collectives.step_trace import Trace

    generator = torch.Generator().manual_seed(seed + dist.get_rank())
    inputs = torch.randint(0, 10, (length,), generator=generator).float()
    expected = inputs.clone()
    dist.all_reduce(expected)
    if op == "avg":
        expected /= dist.get_world_size()
    tensor, trace = inputs.clone(), Trace(max_values=max(16, length))
    algorithm_fn = ring_all_reduce if algorithm == "ring" else naive_all_reduce
    algorithm_fn(tensor, op, trace=trace)
    return inputs, tensor, expected, trace
