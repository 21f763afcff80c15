"""Traces: what each rank sent, received and held, step by step.

A collective algorithm that is given a ``Trace`` records one ``Step`` per
communication step on its rank: an all-reduce (``ring``, ``naive``) or an
all-to-all (``all_to_all``). Traces are plain data (numbers and small
tensors), so they can be pickled back to the notebook, checked in tests and
animated by ``ddp_lab.draw.allreduce`` without starting any process.

Only the first ``max_values`` values of each chunk are kept: enough to draw,
and cheap enough that tracing a 64 MiB all-reduce costs almost nothing.

Used in Chapter 6 (the ring all-reduce animated), Chapter 5 (the all-to-all)
and Chapter 1.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Step:
    """One rank's view of one step.

    ``sends`` and ``receives`` hold ``(other rank, chunk index)`` pairs
    (chunk None: the whole tensor). ``contributions[c]`` says how far chunk
    c has come, W meaning finished: in an all-reduce, how many ranks'
    inputs its sum holds; in an all-to-all, 1 while it is still this rank's
    chunk for rank c, W once rank c's chunk for this rank has taken its place.
    """

    step: int
    phase: str
    sends: list
    receives: list
    chunks: list
    contributions: list


@dataclass
class Trace:
    """One rank's record of one collective, by one algorithm ("ring", "pairwise", ...)."""

    algorithm: str = ""
    max_values: int = 16
    rank: int = 0
    world_size: int = 1
    chunk_sizes: list = field(default_factory=list)
    initial: list = field(default_factory=list)
    steps: list = field(default_factory=list)
    bytes_sent: int = 0

    def start(self, algorithm, rank, chunks):
        self.algorithm, self.rank, self.world_size = algorithm, rank, len(chunks)
        self.chunk_sizes = [c.numel() for c in chunks]
        self.initial = self.preview(chunks)

    def record(self, phase, sends, receives, chunks, contributions):
        self.steps.append(Step(len(self.steps), phase, list(sends), list(receives),
                               self.preview(chunks), list(contributions)))

    def preview(self, chunks):
        return [c[: self.max_values].clone() for c in chunks]

    def count_bytes(self, tensor):
        self.bytes_sent += tensor.numel() * tensor.element_size()
