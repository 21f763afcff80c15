"""Lab 6, exercise 2: ZeRO-1 built by hand, checked on real ranks against DDP.

The reader writes an optimizer class ``MyZeRO1(params, lr)``
that shards Adam's state over the ranks, ZeRO stage 1. Its ``step()`` is
called on every rank right after ``loss.backward()``, when each rank's
``p.grad`` holds the gradient of its *own* batch. It must:

1. flatten the gradients into one vector, padded with zeros to
   ``W * shard_size`` elements, where ``shard_size = ceil(numel / W)``;
2. reduce-scatter it with the average, so that rank r receives elements
   ``r * shard_size`` to ``(r + 1) * shard_size`` of the mean gradient;
3. update its shard of the flat parameters with ``self.optimizer``, a
   ``torch.optim.Adam`` built over that shard only: the optimizer state
   this rank keeps is the state of its shard;
4. all-gather the updated shards and copy the full vector back into the
   parameters, so that every rank ends the step with the same weights.

:func:`check_zero1` runs it on real gloo ranks: each rank builds the same
small MLP (293 parameters, a number no world size from 2 to 4 divides, so
the padding matters), trains it for a few steps on its own batches with the
reader's class, and, next to it, trains a copy the DDP way (all-reduce,
divide by W, ``torch.optim.Adam`` over all the parameters). After every step
it compares the weights with the DDP copy's and between the ranks, reads
``self.optimizer``'s state (its size and Adam's first moment, against the
matching slice of the DDP optimizer's), and records the collectives
``step()`` issued. Mistakes are named: the gradients summed rather than
averaged (Adam all but hides it in the weights, its state shows it), not
reduced at all, the shards never all-gathered (each rank right only on its
own shard), the full state kept on every rank, a shard misaligned, a crash
from missing padding, ranks that disagree, and an all-reduce of the whole
gradient where a reduce-scatter is enough.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from functools import partial

import torch

from ddp_lab.checks.harness import (
    first_line,
    launch_checked,
    launch_mistake,
    same_values,
)
from ddp_lab.checks.result import CheckResult, Mistake, signature_mistake
from ddp_lab.checks.wording import error_in_your_code, steps_text
from ddp_lab.collectives.recorder import CollectiveLog, record_collectives
from ddp_lab.launcher.errors import RankDied
from ddp_lab.validate import check_positive_int, is_int

__all__ = ["check_zero1", "WIDTHS", "LR"]

WIDTHS = (12, 16, 5)  # fc1: 12 -> 16, fc2: 16 -> 5: 208 + 85 = 293 parameters, a prime
LR = 0.01
BETA1 = 0.9  # torch.optim.Adam's default, needed to predict its first moment
BATCH = 8
ATOL, RTOL = 1e-6, 1e-4
_close = partial(same_values, rtol=RTOL, atol=ATOL)


@dataclass
class _Step:
    """What one rank saw in one step (plain data, sent back to the notebook)."""

    before: torch.Tensor  # flat weights before the step
    weights: torch.Tensor  # flat weights after the reader's step
    reference: torch.Tensor  # flat weights after the DDP-style step
    state: str  # a key of STATE_MESSAGES, or "ok"
    state_numel: int
    other_shard: int | None
    collectives: list  # the Collective records of what step() issued


@dataclass
class _RankReport:
    rank: int
    world_size: int
    numel: int
    shard_size: int
    error: str | None = None
    error_stage: str | None = None
    steps: list = field(default_factory=list)


def _flat(tensors):
    return torch.cat([t.detach().reshape(-1) for t in tensors]).clone()


def _run_on_rank(make_optimizer, steps, lr):
    """Train with the reader's optimizer and the DDP way side by side; report each step."""
    import torch.distributed as dist
    import torch.nn.functional as F

    from ddp_lab.models import mlp

    rank, world_size = dist.get_rank(), dist.get_world_size()
    model = mlp(WIDTHS, seed=0)  # the same start on every rank
    theirs, ddp_copy = copy.deepcopy(model), copy.deepcopy(model)
    numel = sum(p.numel() for p in model.parameters())
    report = _RankReport(rank, world_size, numel, -(-numel // world_size))
    reference_optimizer = torch.optim.Adam(ddp_copy.parameters(), lr=lr)
    log = CollectiveLog()
    generator = torch.Generator().manual_seed(1000 + rank)  # each rank its own batches
    stage = "building your optimizer: MyZeRO1(params, lr)"
    try:
        optimizer = make_optimizer(list(theirs.parameters()), lr)
        for step in range(steps):
            x = torch.randn(BATCH, WIDTHS[0], generator=generator)
            y = torch.randint(0, WIDTHS[-1], (BATCH,), generator=generator)
            previous_moment = _first_moment(reference_optimizer)
            _ddp_step(ddp_copy, reference_optimizer, x, y)
            stage = f"step {step + 1}: backward"
            theirs.zero_grad(set_to_none=True)
            F.cross_entropy(theirs(x), y).backward()
            local_gradient = _flat(p.grad for p in theirs.parameters())
            before = _flat(theirs.parameters())
            stage = f"step {step + 1}: your step()"
            log.calls = []
            with record_collectives(log):
                optimizer.step()
            stage = f"step {step + 1}: comparing"
            kind, state_numel, other = _classify_state(optimizer, report, reference_optimizer,
                                                       previous_moment, local_gradient)
            report.steps.append(_Step(before, _flat(theirs.parameters()), _flat(ddp_copy.parameters()),
                                      kind, state_numel, other, list(log.calls)))
    except Exception as error:  # the reader's code: report it, never crash the check
        report.error, report.error_stage = error_in_your_code(error), stage
    return report


def _ddp_step(model, optimizer, x, y):
    """The DDP way: every rank all-reduces the full gradient, divides by W, and runs Adam on everything."""
    import torch.distributed as dist
    import torch.nn.functional as F

    optimizer.zero_grad(set_to_none=True)
    F.cross_entropy(model(x), y).backward()
    grads = [p.grad for p in model.parameters()]
    flat = _flat(grads)
    dist.all_reduce(flat)
    flat /= dist.get_world_size()
    torch.nn.utils.vector_to_parameters(flat, grads)  # the mean, back into each p.grad
    optimizer.step()


def _first_moment(optimizer):
    """Adam's exp_avg over all its parameters, as one flat vector (zeros before the first step)."""
    moments = []
    for group in optimizer.param_groups:
        for p in group["params"]:
            state = optimizer.state.get(p, {})
            moment = state.get("exp_avg")
            moments.append(moment.reshape(-1) if moment is not None else torch.zeros(p.numel()))
    return torch.cat(moments) if moments else torch.zeros(0)


def _classify_state(optimizer, report, reference_optimizer, previous_moment, local_gradient):
    """What the reader's ``self.optimizer`` holds after a step, against this rank's expected shard."""
    inner = getattr(optimizer, "optimizer", None)
    if not isinstance(inner, torch.optim.Optimizer):
        return "no_optimizer", 0, None
    tensors = [v for state in inner.state.values() for v in state.values() if torch.is_tensor(v) and v.dim() > 0]
    numel = sum(t.numel() for t in tensors)
    if not tensors:
        return "no_state", 0, None
    if not any("exp_avg" in state for state in inner.state.values()):
        return "not_adam", numel, None
    theirs = _first_moment(inner)
    size, world_size = report.shard_size, report.world_size
    padded = size * world_size
    expected = _pad(_first_moment(reference_optimizer), padded)
    if theirs.numel() >= report.numel:  # one moment covers every parameter: DDP's state
        return "full", numel, None
    if theirs.numel() not in (size, max(report.numel - report.rank * size, 0)):
        return "size", numel, None
    candidates = {
        "ok": expected,
        "sum": world_size * expected,
        "local": BETA1 * _pad(previous_moment, padded) + (1 - BETA1) * _pad(local_gradient, padded),
    }
    mine = slice(report.rank * size, report.rank * size + theirs.numel())
    for kind, candidate in candidates.items():
        if _close(theirs, candidate[mine]):
            return kind, numel, None
    for other in range(world_size):
        start = other * size
        if other != report.rank and _close(theirs, expected[start:start + theirs.numel()]):
            return "other_shard", numel, other
    return "wrong", numel, None


def _pad(flat, length):
    return torch.cat([flat, flat.new_zeros(length - flat.numel())]) if flat.numel() < length else flat


# -------------------------------------------------------------------- the notebook side


def check_zero1(make_optimizer, *, world_size: int = 2, steps: int = 3, lr: float = LR,
                timeout: float = 60) -> CheckResult:
    """Check a ZeRO-1 optimizer ``make_optimizer(params, lr)`` against DDP + Adam on real ranks.

    After each of ``steps`` steps on ``world_size`` gloo ranks: the weights
    (equal to DDP's, and the same on every rank) and the optimizer state (only
    this rank's shard, averaged gradients); once, the collectives used.
    """
    if not callable(make_optimizer):
        raise TypeError(f"pass your class itself, e.g. check_zero1(MyZeRO1); got "
                        f"{type(make_optimizer).__name__}: {make_optimizer!r}")
    if not is_int(world_size) or not 2 <= world_size <= 4:
        raise ValueError(f"world_size must be 2, 3 or 4, got {world_size!r}")
    check_positive_int('steps', steps)
    name = getattr(make_optimizer, "__name__", type(make_optimizer).__name__)
    subject = f"{name} vs DDP + Adam: {world_size} ranks, {steps} steps"
    total = 2 * steps + 1  # weights and state per step, communication
    wrong_signature = signature_mistake(make_optimizer, 2, "class MyZeRO1: def __init__(self, params, lr)")
    if wrong_signature:
        return CheckResult(subject, 0, total, "check", (wrong_signature,))
    reports, error = launch_checked(_run_on_rank, world_size, args=(make_optimizer, steps, lr),
                                    threads=1, timeout=timeout)
    if isinstance(error, RankDied) and error.signal_name == "SIGABRT":
        return CheckResult(subject, 0, total, "check", (Mistake("a rank", "crash", first_line(error) + (
            ": gloo aborts a rank whose collective does not match the other ranks' (another "
            "operation, or another size). Do all ranks call the same collectives, with tensors "
            "of the same size, in the same order?")),))
    if error is not None:
        return CheckResult(subject, 0, total, "check", (launch_mistake(error, timeout, (
            "A collective waits until every rank calls it: does every rank call the same reduce-scatter and "
            "all-gather, with tensors of the same size, in the same order? (a step() that returns early on "
            "one rank, or a collective inside `if rank == ...`, hangs the others)")),))
    return _verdict(subject, total, reports)


def _verdict(subject, total, reports):
    errors = [r for r in reports if r.error]
    if errors:
        return CheckResult(subject, 0, total, "check", (_error_mistake(errors, reports),))
    weights, weight_failures = _weight_mistakes(reports)
    state, state_failures = _state_mistakes(reports, _first_bad_weights(reports))
    communication = _communication_mistakes(reports)
    mistakes = weights + state + communication
    failed = weight_failures + state_failures + bool(communication)
    return CheckResult(subject, total - failed, total, "check", tuple(mistakes))


def _error_mistake(errors, reports):
    first = errors[0]
    which = "every rank" if len(errors) == len(reports) else f"rank {first.rank}"
    message = f"your code raised while {first.error_stage}: {first.error}"
    if first.numel % first.world_size and any(w in first.error.lower() for w in ("size", "shape", "split", "numel")):
        padded = first.shard_size * first.world_size
        message += (f". The flat vector has {first.numel} elements, not a multiple of W = {first.world_size}: "
                    f"pad it with zeros to W × ceil({first.numel} / {first.world_size}) = {padded} elements "
                    f"before the collectives, and leave the padding out when copying back")
    return Mistake(which, "error", message)


# ------------------------------------------------------------------------ the weights


def _first_bad_weights(reports):
    """The index of the first step whose weights are wrong, or None."""
    return next((s for s in range(len(reports[0].steps)) if _weights_wrong(reports, s)), None)


def _weight_mistakes(reports):
    """The first step whose weights are wrong, explained; and how many steps are wrong."""
    steps = len(reports[0].steps)
    bad = [s for s in range(steps) if _weights_wrong(reports, s)]
    if not bad:
        return [], 0
    first = bad[0]
    where = steps_text(bad)
    return [Mistake(where, "weights", _explain_weights(reports, first))], len(bad)


def _weights_wrong(reports, s):
    agree = all(torch.equal(r.steps[s].weights, reports[0].steps[s].weights) for r in reports)
    return not agree or not all(_close(r.steps[s].weights, r.steps[s].reference) for r in reports)


def _explain_weights(reports, s):
    step = f"after step {s + 1}"
    if all(torch.equal(r.steps[s].weights, r.steps[s].before) for r in reports):
        return (f"{step} the parameters had not changed on any rank: step() must end by copying the "
                f"all-gathered flat parameters back into every p (under torch.no_grad())")
    stale = [r for r in reports if _only_own_shard(r, s)]
    if len(stale) == len(reports):
        first = reports[0]
        return (f"{step} each rank's parameters were right on its own shard only (rank 0: elements 0 to "
                f"{first.shard_size - 1}); the other shards still held the weights from before the step. "
                f"Each rank updates its own shard: all-gather the updated shards (all_gather_single) "
                f"into the full flat vector and copy it into the parameters on every rank")
    if not all(torch.equal(r.steps[s].weights, reports[0].steps[s].weights) for r in reports):
        largest = max(float((r.steps[s].weights - reports[0].steps[s].weights).abs().max()) for r in reports)
        return (f"{step} the ranks disagree: the largest difference from rank 0's weights is {largest:.3g}. "
                f"After the all-gather every rank must copy the *same* full vector into its parameters; "
                f"the weights of different ranks must not drift apart")
    largest = max(float((r.steps[s].weights - r.steps[s].reference).abs().max()) for r in reports)
    return (f"{step} the weights, the same on every rank, differ from DDP + Adam's by up to {largest:.3g}"
            f"{_state_hint(reports, s)}")


def _only_own_shard(report, s):
    """Right on this rank's shard, and the rest unchanged since before the step."""
    seen = report.steps[s]
    start = report.rank * report.shard_size
    mine = slice(start, min(start + report.shard_size, report.numel))
    rest = torch.ones(report.numel, dtype=torch.bool)
    rest[mine] = False
    return (_close(seen.weights[mine], seen.reference[mine]) and bool(rest.any())
            and torch.equal(seen.weights[rest], seen.before[rest]))


def _state_hint(reports, s):
    kinds = {r.steps[s].state for r in reports}
    if "local" in kinds:
        return ": the optimizer state shows it used each rank's own gradient (see below)"
    if "other_shard" in kinds:
        return ": each rank updated a shard that is not its own (see below)"
    return ""


# ------------------------------------------------------------------ the optimizer state


STATE_MESSAGES = {
    "no_optimizer": "no self.optimizer: keep this rank's torch.optim.Adam (built over its shard only) "
                    "in self.optimizer, so that its state can be measured",
    "no_state": "self.optimizer has no state after step(): was self.optimizer.step() called, with the "
                "shard's gradient set (shard.grad = ...)?",
    "not_adam": "self.optimizer keeps no exp_avg: build it as torch.optim.Adam([shard], lr=lr)",
    "full": "the optimizer keeps Adam's state for all {numel} parameters, as DDP does ({state} numbers "
            "per rank): build self.optimizer over this rank's shard only, a flat tensor of "
            "shard_size = ceil({numel} / {W}) = {size} elements, so that it keeps 2 × {size} numbers",
    "size": "the optimizer keeps {state} numbers of state; this rank's shard has {size} elements, so "
            "Adam's two moments should take 2 × {size} = {twice}: the shard is not the flat vector's "
            "slice [rank × shard_size, (rank + 1) × shard_size)",
    "sum": "Adam's first moment is W = {W} times DDP's: the gradient shards were summed, not averaged "
           "(use op=dist.ReduceOp.AVG, or divide by W). Adam all but hides this in the weights (it "
           "divides its first moment by the square root of its second, so a constant factor cancels), "
           "but weight decay, gradient clipping or SGD would not",
    "local": "the optimizer was given this rank's own gradient, not the mean over the ranks: "
             "reduce-scatter the flat gradient (with the average) and give its result to the optimizer",
    "other_shard": "the optimizer state belongs to another rank's shard (rank {rank} holds shard "
                   "{other}'s): rank r must own elements r × shard_size to (r + 1) × shard_size, the "
                   "piece the reduce-scatter gives it",
    "wrong": "Adam's first moment differs from the matching slice of DDP + Adam's (and is neither W "
             "times it, nor this rank's own gradient, nor another rank's shard)",
}


def _state_mistakes(reports, first_bad_weights):
    """One mistake per kind of wrong state (steps and ranks where seen); how many steps failed.

    A state that is merely "wrong" after the weights went wrong is a consequence (the
    gradients were computed at other weights), not a mistake of its own: it is counted
    as a failed check but not explained again.
    """
    steps = len(reports[0].steps)
    found = {}  # kind -> (steps, ranks, example report, example step)
    bad_steps = set()
    for s in range(steps):
        for report in reports:
            kind = report.steps[s].state
            if kind != "ok":
                bad_steps.add(s)
                if kind == "wrong" and first_bad_weights is not None and s > first_bad_weights:
                    continue
                steps_seen, ranks, _, _ = found.setdefault(kind, (set(), set(), report, s))
                steps_seen.add(s)
                ranks.add(report.rank)
    mistakes = []
    for kind, (steps_seen, ranks, report, s) in found.items():
        seen = report.steps[s]
        message = STATE_MESSAGES[kind].format(
            numel=report.numel, W=report.world_size, size=report.shard_size, state=seen.state_numel,
            twice=2 * report.shard_size, rank=report.rank, other=seen.other_shard)
        where = f"{steps_text(sorted(steps_seen))}, {_ranks_text(sorted(ranks), len(reports))}"
        mistakes.append(Mistake(where, kind, message))
    return mistakes, len(bad_steps)


# --------------------------------------------------------------------- the communication


def _communication_mistakes(reports):
    report = reports[0]
    calls = [call.name for step in report.steps for call in step.collectives]
    if not calls:
        return [Mistake("communication", "no_collective",
                        "step() ran no collective: ZeRO-1 reduce-scatters the flat gradient "
                        "(reduce_scatter_single) and all-gathers the updated shards (all_gather_single)")]
    reduced = "reduce_scatter" in calls
    full_all_reduce = any(call.name == "all_reduce" and call.numel >= report.numel
                          for step in report.steps for call in step.collectives)
    if full_all_reduce and not reduced:
        return [Mistake("communication", "all_reduce",
                        "the whole gradient was all-reduced, then sliced: the result is right, but each "
                        "rank receives the full mean gradient to use 1/W of it. A reduce-scatter delivers "
                        "only the shard, half an all-reduce's traffic; with the all-gather of the "
                        "parameters it adds up to exactly what DDP moves")]
    return []


# ---------------------------------------------------------------------------- wording


def _ranks_text(ranks, world_size):
    if len(ranks) == world_size:
        return "every rank"
    return f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {', '.join(map(str, ranks))}"
