"""Lab 6, exercise 1: the bytes of model states per rank, under DDP and ZeRO-1/2/3.

The reader computes the bytes of model states that each rank
holds under DDP and the three ZeRO stages, as a dict
``{"DDP": ..., "ZeRO-1": ..., "ZeRO-2": ..., "ZeRO-3": ...}``, and
:func:`check_memory_answer` compares each number with
:func:`ddp_lab.memory.memory_per_rank`. A wrong number is explained term by
term: the checker tries the usual slips (a state sharded that should not be,
or not sharded that should be; 4 bytes where mixed precision stores 2; the
fp32 master weights forgotten; gigabytes instead of bytes) and names the
ones that give exactly the reader's number.

Arithmetic only: no rank is started, no torch imported.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ddp_lab.checks.result import CheckResult, Mistake
from ddp_lab.memory import STAGES, bytes_per_parameter, memory_per_rank
from ddp_lab.units import format_gb
from ddp_lab.validate import is_number

__all__ = ["check_memory_answer"]


@dataclass(frozen=True)
class _Terms:
    """One way of counting: bytes per parameter of each state, and which states are divided by N."""

    parameters: int
    gradients: int
    optimizer: int
    sharded: tuple  # (parameters, gradients, optimizer): True where divided by N

    def total(self, num_parameters, world_size):
        sizes = (self.parameters, self.gradients, self.optimizer)
        return sum(size * num_parameters / (world_size if shard else 1)
                   for size, shard in zip(sizes, self.sharded))


def check_memory_answer(answer: dict, num_parameters: float = 1.5e9, world_size: int = 8, *,
                        precision: str = "mixed", optimizer: str = "adam") -> CheckResult:
    """Check bytes per rank for DDP and ZeRO-1/2/3, ``answer = {"DDP": bytes, "ZeRO-1": bytes, ...}``.

    Each stage is compared with :func:`ddp_lab.memory.memory_per_rank`
    (within 0.1 %); a wrong number is explained by the slip that produces it.
    """
    if not isinstance(answer, dict):
        raise TypeError(f"answer must be a dict such as {{'DDP': 24e9, 'ZeRO-1': ...}}, got "
                        f"{type(answer).__name__}")
    right = bytes_per_parameter(precision, optimizer)  # also checks precision and optimizer
    memory_per_rank(num_parameters, world_size)  # checks the numbers
    subject = (f"bytes per rank for Ψ = {num_parameters:.3g} parameters on N = {world_size} ranks, "
               f"{precision} precision, {optimizer}")
    mistakes = []
    for level, stage in enumerate(STAGES):
        correct = _Terms(right.parameters, right.gradients, right.optimizer,
                         (level >= 3, level >= 2, level >= 1))
        mistake = _memory_mistake(stage, answer.get(stage), correct, num_parameters, world_size, precision)
        if mistake:
            mistakes.append(mistake)
    unknown = [key for key in answer if key not in STAGES]
    if unknown:
        mistakes.append(Mistake("answer", "unknown_key",
                                f"unknown keys {', '.join(map(repr, unknown))}: use "
                                f"{', '.join(map(repr, STAGES))}"))
    wrong_stages = sum(m.where in STAGES for m in mistakes)
    return CheckResult(subject, len(STAGES) - wrong_stages, len(STAGES), "stage", tuple(mistakes))


def _memory_mistake(stage, value, correct, num_parameters, world_size, precision):
    """None if ``value`` is right; else a Mistake saying which term is off."""
    if value is None or value is ...:
        return Mistake(stage, "missing", "no answer yet: give the bytes of model states per rank, a number")
    if not is_number(value):
        return Mistake(stage, "not_a_number", f"give a number of bytes, got {type(value).__name__}: {value!r}")
    expected = correct.total(num_parameters, world_size)
    if math.isclose(value, expected, rel_tol=1e-3):
        return None
    for unit, factor in (("GB (10⁹ bytes)", 1e9), ("GiB (2³⁰ bytes)", 2**30)):
        if math.isclose(value * factor, expected, rel_tol=1e-3):
            return Mistake(stage, "units", f"{value:g} looks like a number of {unit}: give bytes")
    slips = _explain(value, correct, num_parameters, world_size, precision)
    if slips:
        return Mistake(stage, "term", f"{_bytes(value)}: " + "; and ".join(slips))
    return Mistake(stage, "wrong", f"{_bytes(value)} is not what {_formula(correct)} gives, nor one "
                                   f"or two slips away from it: write the three terms out one by one")


def _bytes(value):
    """``3e+10 bytes (30 GB)``, or ``24 bytes`` for small numbers."""
    return f"{value:.4g} bytes ({format_gb(value, digits=4)})" if abs(value) >= 1e8 else f"{value:g} bytes"


def _explain(value, correct, num_parameters, world_size, precision):
    """The slips (at most two) that turn the right count into ``value``, explained."""
    candidates = []
    for terms in _variants(correct):
        if math.isclose(terms.total(num_parameters, world_size), value, rel_tol=1e-3):
            slips = _slips(terms, correct, world_size, precision)
            if len(slips) <= 2:
                candidates.append(slips)
    return min(candidates, key=len) if candidates else []


def _variants(correct):
    """Every count that differs from ``correct`` in bytes per state or in what is sharded."""
    byte_sizes = (2, 4)
    optimizer_sizes = sorted({correct.optimizer, correct.optimizer + 4, max(correct.optimizer - 4, 0)})
    flags = [(a, b, c) for a in (False, True) for b in (False, True) for c in (False, True)]
    for sharded in flags:
        for p in byte_sizes:
            for g in byte_sizes:
                for k in optimizer_sizes:
                    yield _Terms(p, g, k, sharded)


STATE_NAMES = ("parameters", "gradients", "optimizer state")


def _slips(terms, correct, world_size, precision):
    slips = []
    for name, got, right in (("parameters", terms.parameters, correct.parameters),
                             ("gradients", terms.gradients, correct.gradients)):
        if got != right:
            bits = "16-bit (2 bytes)" if right == 2 else "32-bit (4 bytes)"
            slips.append(f"{name} counted at {got} bytes each, but in {precision} precision they are {bits}")
    if terms.optimizer != correct.optimizer:
        slips.append(_optimizer_slip(terms.optimizer, correct.optimizer, precision))
    for name, got, right, first in zip(STATE_NAMES, terms.sharded, correct.sharded, ("ZeRO-3", "ZeRO-2", "ZeRO-1")):
        them = "it" if name == "optimizer state" else "them"
        if got and not right:
            slips.append(f"the {name} divided by N = {world_size}, but only {first} and the stages after it "
                         f"shard {them}: here every rank holds all of {them}")
        elif right and not got:
            slips.append(f"the {name} counted in full, but this stage shards {them}: each rank keeps only "
                         f"1/N (divide that term by N = {world_size})")
    return slips


def _optimizer_slip(got, right, precision):
    if precision == "mixed" and got == right - 4:
        return (f"optimizer state counted at K = {got} bytes per parameter: mixed precision also keeps "
                f"an fp32 master copy of the weights in the optimizer (4 bytes), so K = {right}")
    if precision == "fp32" and got == right + 4:
        return (f"optimizer state counted at K = {got} bytes per parameter: in fp32 the parameters are "
                f"already 32-bit, so there is no master copy and K = {right}")
    return f"optimizer state counted at K = {got} bytes per parameter instead of K = {right}"


def _formula(terms):
    parts = []
    for size, shard, symbol in zip((terms.parameters, terms.gradients, terms.optimizer), terms.sharded, "pgK"):
        parts.append(f"{symbol}·Ψ{'/N' if shard else ''} (with {symbol} = {size})")
    return " + ".join(parts)
