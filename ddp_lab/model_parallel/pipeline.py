"""Pipeline parallelism in outline: the schedule of micro-batches over stages.

A model too large for one GPU can be cut into P consecutive *stages*, one
per GPU. A batch is split into M *micro-batches*; each goes forward through
stage 0, 1, ..., P-1, then backward through P-1, ..., 0. While stage 1 works
on micro-batch 0, stage 0 can already start micro-batch 1, so the stages work
at the same time, except at the start and the end of every batch, where some
wait: the *bubble*.

With a forward taking time f and a backward b on every stage, both schedules
below take (M + P - 1)(f + b), of which each stage is busy M(f + b), so the
idle fraction is

    bubble = (P - 1) / (M + P - 1)

and more micro-batches make it smaller. The schedules differ in memory:

* **GPipe**: every stage runs all M forwards, then all M backwards, so it
  keeps the activations of all M micro-batches at once;
* **1F1B** (one forward, one backward, as in PipeDream-Flush and Megatron):
  after a warm-up of P - 1 - s forwards, stage s alternates forward and
  backward, so it keeps at most P - s micro-batches' activations.

:func:`pipeline_schedule` simulates either from these dependencies alone: a
forward on stage s needs the same micro-batch's forward on s - 1, a backward
on s needs its backward on s + 1 (or its own forward, on the last stage), and
a stage does one thing at a time, in its schedule's order.

:func:`simulate_actions` does the same for any schedule given as each
rank's list of actions, several stages per rank and the backward split in
two (torch's interleaved and zero-bubble schedules, Chapter 15f), and
:func:`idle_fraction` reads the bubble off the result as an exact fraction.

Used in Chapters 15 and 15f.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from ddp_lab.validate import check_positive_int, check_positive_number

__all__ = ["Slot", "SCHEDULES", "MAX_STAGES", "MAX_MICROBATCHES", "pipeline_schedule", "bubble_fraction",
           "UNIT_COSTS", "simulate_actions", "idle_fraction"]

SCHEDULES = ("gpipe", "1f1b")
# The largest pipeline simulated: every slot is computed in Python (128 stages of 1,024 micro-batches,
# 262,144 slots, take about a second). Real pipelines have a few dozen stages at most.
MAX_STAGES = 128
MAX_MICROBATCHES = 1024


@dataclass(frozen=True)
class Slot:
    """One piece of work: ``phase`` of ``microbatch`` on ``stage``, from ``start`` to ``end``.

    ``phase`` is "F" (forward) or "B" (the whole backward); a zero-bubble
    schedule splits the backward into "I" (the gradient of the input, sent
    back at once) and "W" (the gradient of the weights, done later).
    ``rank`` is the rank that ran it, where a rank holds several stages
    (Chapter 15f); None where each rank is one stage.
    """

    stage: int
    phase: str
    microbatch: int
    start: float
    end: float
    rank: int | None = None


def _order(schedule: str, stage: int, stages: int, microbatches: int) -> list[tuple[str, int]]:
    """The order in which one stage does its forwards and backwards."""
    forwards = [("F", m) for m in range(microbatches)]
    backwards = [("B", m) for m in range(microbatches)]
    if schedule == "gpipe":
        return forwards + backwards
    warmup = min(stages - 1 - stage, microbatches)
    order = forwards[:warmup]
    for m in range(warmup, microbatches):  # steady state: one forward, one backward
        order += [forwards[m], backwards[m - warmup]]
    return order + backwards[microbatches - warmup:]


def pipeline_schedule(stages: int, microbatches: int, schedule: str = "gpipe", *,
                      forward: float = 1.0, backward: float = 2.0) -> list[Slot]:
    """Every slot of one training step, simulated from the dependencies.

    >>> slots = pipeline_schedule(2, 2)
    >>> [(s.stage, s.phase, s.microbatch, s.start) for s in slots if s.stage == 1]
    [(1, 'F', 0, 1.0), (1, 'F', 1, 2.0), (1, 'B', 0, 3.0), (1, 'B', 1, 5.0)]

    At most ``MAX_STAGES`` stages and ``MAX_MICROBATCHES`` micro-batches:
    every slot is simulated in Python, and a size past these would run for
    minutes. ``forward`` and ``backward`` are finite durations > 0.
    """
    check_positive_int("stages", stages, MAX_STAGES, "MAX_STAGES: each slot is simulated in Python")
    check_positive_int("microbatches", microbatches, MAX_MICROBATCHES,
                       "MAX_MICROBATCHES: each slot is simulated in Python")
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule must be one of {', '.join(map(repr, SCHEDULES))}; got {schedule!r}")
    check_positive_number("forward", forward, "time units")
    check_positive_number("backward", backward, "time units")
    orders = [_order(schedule, s, stages, microbatches) for s in range(stages)]
    done: dict[tuple[int, str, int], float] = {}  # (stage, phase, microbatch) -> end time
    position, free = [0] * stages, [0.0] * stages
    slots = []
    while len(slots) < 2 * stages * microbatches:
        progressed = False
        for s in range(stages):
            if position[s] == len(orders[s]):
                continue
            phase, m = orders[s][position[s]]
            needs = ((s - 1, "F", m) if s > 0 else None) if phase == "F" else \
                ((s + 1, "B", m) if s < stages - 1 else (s, "F", m))
            if needs is not None and needs not in done:
                continue
            start = max(free[s], done.get(needs, 0.0))
            end = start + (forward if phase == "F" else backward)
            slots.append(Slot(s, phase, m, start, end))
            done[s, phase, m], free[s], position[s] = end, end, position[s] + 1
            progressed = True
        if not progressed:  # cannot happen for the schedules above
            raise RuntimeError("the schedule deadlocks")
    return sorted(slots, key=lambda slot: (slot.stage, slot.start))


def bubble_fraction(stages: int, microbatches: int) -> float:
    """The idle fraction of a step, (P - 1) / (M + P - 1), for both schedules.

    ``stages`` (P) and ``microbatches`` (M) are counts of at least 1 (a
    formula needs no cap).
    """
    check_positive_int("stages", stages)
    check_positive_int("microbatches", microbatches)
    return (stages - 1) / (microbatches + stages - 1)


# The zero-bubble paper's costs (Qi et al., 2024, "Zero Bubble Pipeline Parallelism", section 2):
# a forward, the input's gradient and the weights' gradient each take one unit; the whole backward two.
UNIT_COSTS = {"F": 1, "B": 2, "I": 1, "W": 1}


def _needs(stage: int, phase: str, microbatch: int, last: int):
    """The action that must end before this one starts, on whatever rank; None for none."""
    if phase == "F":
        return (stage - 1, "F", microbatch) if stage > 0 else None
    if phase == "W":
        return stage, "I", microbatch
    if stage == last:
        return stage, "F", microbatch
    return stage + 1, "BI", microbatch  # the next stage's backward, whole or input only


def simulate_actions(orders: dict, costs: dict | None = None) -> list[Slot]:
    """Every action of a step, each rank doing its list in order, each waiting for its input.

    ``orders`` maps a rank to its actions, ``(stage, phase, microbatch)``,
    phase "F", "B", "I" or "W" (torch's ``pipeline_order`` with the idle
    ``None`` left out); ``costs`` the duration of each phase, whole numbers
    by default (:data:`UNIT_COSTS`), so that the times are exact.

    >>> slots = simulate_actions({0: [(0, "F", 0), (0, "B", 0)], 1: [(1, "F", 0), (1, "B", 0)]})
    >>> [(s.rank, s.phase, s.start, s.end) for s in slots]
    [(0, 'F', 0, 1), (0, 'B', 4, 6), (1, 'F', 1, 2), (1, 'B', 2, 4)]
    """
    costs = dict(UNIT_COSTS if costs is None else costs)
    actions = [(rank, tuple(action)) for rank, order in orders.items() for action in order]
    for rank, (stage, phase, microbatch) in actions:
        if phase not in costs:
            raise ValueError(f"phase must be one of {', '.join(map(repr, costs))}, got {phase!r} (rank {rank})")
    last = max(stage for _, (stage, _, _) in actions)
    done: dict[tuple[int, str, int], float] = {}
    position = {rank: 0 for rank in orders}
    free = {rank: 0 for rank in orders}
    slots = []
    while len(slots) < len(actions):
        progressed = False
        for rank, order in orders.items():
            if position[rank] == len(order):
                continue
            stage, phase, microbatch = order[position[rank]]
            needs = _needs(stage, phase, microbatch, last)
            if needs is not None and needs[1] == "BI":
                ends = [done[k] for k in ((needs[0], "B", microbatch), (needs[0], "I", microbatch)) if k in done]
                if not ends:
                    continue
                ready = ends[0]
            elif needs is not None:
                if needs not in done:
                    continue
                ready = done[needs]
            else:
                ready = 0
            start = max(free[rank], ready)
            end = start + costs[phase]
            slots.append(Slot(stage, phase, microbatch, start, end, rank))
            done[stage, phase, microbatch], free[rank] = end, end
            position[rank] += 1
            progressed = True
        if not progressed:
            raise RuntimeError("the schedule deadlocks: every rank waits for an action no rank can do next")
    return sorted(slots, key=lambda slot: (slot.rank, slot.start))


def idle_fraction(slots) -> Fraction:
    """The idle share of the ranks from the first start to the last end, exact for whole-number times.

    >>> idle_fraction(simulate_actions({0: [(0, "F", 0), (0, "B", 0)], 1: [(1, "F", 0), (1, "B", 0)]}))
    Fraction(1, 2)

    That is (P - 1) / (M + P - 1) for P = 2 stages and M = 1 micro-batch.
    """
    slots = list(slots)
    rows = {slot.stage if slot.rank is None else slot.rank for slot in slots}
    span = Fraction(max(s.end for s in slots)) - Fraction(min(s.start for s in slots))
    busy = sum(Fraction(s.end) - Fraction(s.start) for s in slots)
    return 1 - busy / (len(rows) * span)
