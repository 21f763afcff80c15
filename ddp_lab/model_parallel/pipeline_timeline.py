"""Reading a measured pipeline step: its order, its bubble, the activations each stage holds.

The input is the :class:`~ddp_lab.model_parallel.pipeline.Slot` records of
every rank of one step (:func:`ddp_lab.model_parallel.pipeline_run.run_pipeline`
measures them), or slots simulated by
:func:`~ddp_lab.model_parallel.pipeline.pipeline_schedule`: the functions
cannot tell them apart.

* :func:`order`: what a stage did, in the order it did it (``"F0 F1 B0 ..."``);
* :func:`activations_held`: for each stage, the most micro-batches whose
  activations it held at once, counted from that order: a forward stores a
  micro-batch's activations, its backward frees them. GPipe holds all M;
  1F1B at most P - s on stage s;
* :func:`respects_dependencies`: each forward on stage s + 1 started after
  the same micro-batch's forward ended on stage s, each backward on stage s
  after its backward ended on stage s + 1: true of any real run, and a
  check that the ranks' clocks agree;
* :func:`measured_bubble`: the idle fraction of the stages between the
  first start and the last end, to hold against (P - 1) / (M + P - 1);
* :func:`aligned`: the slots on one time axis starting at 0, in
  milliseconds or in units of the mean forward (as the simulated schedules
  are drawn).

Used in Chapter 15c.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from ddp_lab.model_parallel.pipeline import Slot
from ddp_lab.validate import check_positive_number

__all__ = ["order", "activations_held", "respects_dependencies", "measured_bubble", "mean_duration", "aligned"]


def _checked(slots: Iterable[Slot]) -> list[Slot]:
    slots = list(slots)
    if not slots:
        raise ValueError("no slots: pass the Slot records of at least one stage")
    for slot in slots:
        if not isinstance(slot, Slot):
            raise TypeError(f"slots must be Slot records, got {type(slot).__name__}: {slot!r}")
    return slots


def _stages(slots: list[Slot]) -> list[int]:
    return sorted({slot.stage for slot in slots})


def _of_stage(slots: list[Slot], stage: int) -> list[Slot]:
    return sorted((slot for slot in slots if slot.stage == stage), key=lambda slot: slot.start)


def order(slots: Iterable[Slot], stage: int) -> str:
    """The forwards and backwards of one stage, in the order they ran.

    >>> from ddp_lab.model_parallel.pipeline import pipeline_schedule
    >>> order(pipeline_schedule(2, 3, "1f1b"), 0)
    'F0 F1 B0 F2 B1 B2'
    """
    slots = _checked(slots)
    if stage not in _stages(slots):
        raise ValueError(f"stage {stage!r} has no slots; the stages are {_stages(slots)}")
    return " ".join(f"{slot.phase}{slot.microbatch}" for slot in _of_stage(slots, stage))


def activations_held(slots: Iterable[Slot]) -> list[int]:
    """For each stage, the most micro-batches whose activations it held at once (forward done, backward not).

    >>> from ddp_lab.model_parallel.pipeline import pipeline_schedule
    >>> activations_held(pipeline_schedule(4, 8, "gpipe")), activations_held(pipeline_schedule(4, 8, "1f1b"))
    ([8, 8, 8, 8], [4, 3, 2, 1])
    """
    slots = _checked(slots)
    most = []
    for stage in _stages(slots):
        held = peak = 0
        for slot in _of_stage(slots, stage):
            held += 1 if slot.phase == "F" else -1
            peak = max(peak, held)
        most.append(peak)
    return most


def respects_dependencies(slots: Iterable[Slot]) -> bool:
    """Whether every forward started after its input existed, and every backward after its gradient did."""
    slots = _checked(slots)
    end = {(slot.stage, slot.phase, slot.microbatch): slot.end for slot in slots}
    for slot in slots:
        needs = (slot.stage - 1, "F", slot.microbatch) if slot.phase == "F" else (slot.stage + 1, "B", slot.microbatch)
        if needs in end and slot.start < end[needs]:
            return False
    return True


def measured_bubble(slots: Iterable[Slot], by: str = "stage") -> float:
    """The idle fraction of the stages from the first start to the last end: 1 - busy / (P x span).

    ``by="rank"`` counts the ranks instead, for schedules with several stages
    per rank (Chapter 15f); the slots must then carry their ``rank``.
    """
    slots = _checked(slots)
    if by not in ("stage", "rank"):
        raise ValueError(f"by must be 'stage' or 'rank', got {by!r}")
    span = max(slot.end for slot in slots) - min(slot.start for slot in slots)
    if span <= 0:
        raise ValueError("the slots take no time: the bubble of an empty step is undefined")
    busy = sum(slot.end - slot.start for slot in slots)
    if by == "rank":
        if any(slot.rank is None for slot in slots):
            raise ValueError("by='rank' needs slots that carry their rank (TimedStage records it)")
        rows = len({slot.rank for slot in slots})
    else:
        rows = len(_stages(slots))
    return 1 - busy / (rows * span)


def mean_duration(slots: Iterable[Slot], phase: str = "F") -> float:
    """The mean duration of the slots of ``phase`` ("F" or "B"), in the slots' unit."""
    slots = _checked(slots)
    if phase not in ("F", "B"):
        raise ValueError(f"phase must be 'F' or 'B', got {phase!r}")
    durations = [slot.end - slot.start for slot in slots if slot.phase == phase]
    if not durations:
        raise ValueError(f"no {phase} slots to average")
    return sum(durations) / len(durations)


def aligned(slots: Iterable[Slot], unit: float | None = None) -> list[Slot]:
    """The slots with time 0 at the first start, in units of ``unit`` seconds (1e-3: milliseconds).

    By default the unit is the mean forward, as the simulated schedules are drawn.
    """
    slots = _checked(slots)
    if unit is None:
        unit = mean_duration(slots, "F")
    else:
        check_positive_number("unit", unit, "seconds")  # 1e-3: milliseconds
    zero = min(slot.start for slot in slots)
    return [replace(slot, start=(slot.start - zero) / unit, end=(slot.end - zero) / unit) for slot in slots]
