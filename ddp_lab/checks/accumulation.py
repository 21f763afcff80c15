"""Chapter 8b's checker: one optimizer step of gradient accumulation on a DDP model.

The reader writes a function ``step(model, optimizer, micro_batches)`` that
takes one optimizer step with gradient accumulation:

* ``model`` is a ``DistributedDataParallel`` model (a small MLP whose
  gradients fill one bucket), ``optimizer`` plain SGD on its parameters;
* ``micro_batches`` is this rank's share of one global batch, as a list of
  ``k`` pairs ``(x, y)`` of equal size;
* the gradients are zero (``None``) when ``step`` is called; it must leave
  the model stepped once, with the loss ``F.cross_entropy(model(x), y)``
  of each micro-batch scaled so that the step equals one step on the
  rank's whole batch (the big batch), and with one all-reduce per bucket,
  not one per micro-batch.

``check_accumulation(step)`` runs it on real gloo ranks (2 by default) for a
few optimizer steps. On every rank, a second DDP model of the same weights
takes the reference step: one forward and backward on the rank's whole
batch. Both models carry a communication hook that counts DDP's
all-reduces (``ddp_lab.data_parallel.comm_hooks.counting_allreduce_hook``);
the reader's model also records, for every forward and every backward pass,
whether it ran inside ``no_sync()`` (``DistributedDataParallel``'s
``require_backward_grad_sync``, which ``no_sync`` clears), and the checker
counts the calls of ``optimizer.step`` and ``zero_grad``. After each step the
replicas are compared with rank 0's and the weights with the reference.

The slips it names:

* ``forward_outside``: the forward pass of a micro-batch other than the last
  ran outside ``no_sync()``: DDP decides in the forward whether the next
  backward all-reduces (``DistributedDataParallel._post_forward`` prepares
  the reducer only outside ``no_sync``), so that micro-batch was
  all-reduced too: right weights, ``k - 1`` wasted all-reduces;
* ``last_inside``: the last micro-batch, forward and backward, inside
  ``no_sync()``: nothing is ever all-reduced and the replicas differ;
* ``forward_inside_backward_outside``: the forward passes inside
  ``no_sync()``, the backward passes outside: nothing is all-reduced either
  (leaving the context before ``backward()`` comes too late);
* ``bypassed``: the forward passes called ``model.module`` and never DDP;
* ``factor``: the right all-reduces, replicas that agree, but a step that is
  a constant factor away from the big batch's: the loss not divided by the
  number of micro-batches (``k`` times too large), divided by it twice, or
  divided by the world size too (DDP already averages over the ranks);
* ``step_count``: ``optimizer.step()`` called other than once;
* ``zeroed``: the gradients zeroed between micro-batches;
* ``weights``, ``replicas``, ``too_few``, ``no_all_reduce``: what remains
  when none of the above explains a difference;
* ``error``, ``hang``, ``too_slow``, ``crash``: the reader's code raised;
  the ranks hung, waiting for each other; a rank was still running the
  reader's code at the timeout (slow, or in a loop that never ends: no
  deadlock, ``harness.still_computing``); or a rank died.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ddp_lab.checks.harness import launch_checked, launch_mistake, same_values
from ddp_lab.checks.result import CheckResult, Mistake, signature_mistake
from ddp_lab.checks.wording import error_in_your_code, steps_text
from ddp_lab.validate import check_positive_int, is_int

__all__ = ["check_accumulation", "WIDTHS", "MICRO_BATCH"]

WIDTHS = (2, 32, 32, 3)  # 1,251 parameters, 5,004 bytes of float32: one DDP bucket
MICRO_BATCH = 8  # samples in each micro-batch
LR = 0.5
ATOL, RTOL = 1e-6, 1e-4  # reader's accumulated step vs the big batch's (another order of float sums)
CHECKS_PER_STEP = 4  # optimizer.step called once; the all-reduces; the replicas; the weights


@dataclass
class _Step:
    """What one rank saw in one optimizer step (plain data, sent back to the notebook)."""

    all_reduces: int = 0
    expected_all_reduces: int = 0
    forwards: list = field(default_factory=list)  # per forward pass: ran with sync on (outside no_sync)?
    backwards: list = field(default_factory=list)  # per backward pass: the same, when backward ran
    step_calls: int = 0
    zeroed_after: list = field(default_factory=list)  # backward passes done when zero_grad was called
    replicas_agree: bool = True
    weights_ok: bool = True
    update: torch.Tensor | None = None  # weights before minus after: the reader's step
    reference_update: torch.Tensor | None = None  # the same for the big batch


@dataclass
class _Observations:
    rank: int
    world_size: int
    micro_batches: int
    steps: list = field(default_factory=list)
    error: str | None = None
    error_step: int | None = None


# ------------------------------------------------------------------ the rank side


def _flat(model):
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).clone()


def _run_on_rank(step_fn, micro_batches, steps):
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel as DDP

    from ddp_lab.data import global_batches, spirals
    from ddp_lab.data_parallel.by_hand import shard
    from ddp_lab.data_parallel.comm_hooks import CommLog, counting_allreduce_hook
    from ddp_lab.models import mlp

    rank, world_size = dist.get_rank(), dist.get_world_size()
    seen = _Observations(rank, world_size, micro_batches)
    reference, theirs = DDP(mlp(WIDTHS, seed=0)), DDP(mlp(WIDTHS, seed=0))
    reference_log, log = CommLog(), CommLog()
    reference.register_comm_hook(reference_log, counting_allreduce_hook)
    theirs.register_comm_hook(log, counting_allreduce_hook)
    reference_optimizer = torch.optim.SGD(reference.parameters(), lr=LR)
    optimizer = torch.optim.SGD(theirs.parameters(), lr=LR)

    current = _Step()
    # Forward: DDP reads require_backward_grad_sync (no_sync clears it) in its forward.
    theirs.register_forward_pre_hook(lambda module, args: current.forwards.append(module.require_backward_grad_sync))
    # Backward: the last layer's bias gets its gradient first, once per backward pass.
    last_bias = list(theirs.module.parameters())[-1]
    last_bias.register_post_accumulate_grad_hook(
        lambda p: current.backwards.append(theirs.require_backward_grad_sync))
    _count_calls(optimizer, "step", lambda: setattr(current, "step_calls", current.step_calls + 1))
    for owner in (optimizer, theirs, theirs.module):
        _count_calls(owner, "zero_grad", lambda: current.zeroed_after.append(len(current.backwards)))

    batches = global_batches(spirals(600, seed=3), world_size * micro_batches * MICRO_BATCH, steps, seed=4)
    for number, (x, y) in enumerate(batches):
        x, y = shard(x), shard(y)
        before = _flat(reference.module)
        with torch.no_grad():  # every step starts from the reference's weights
            for p, q in zip(theirs.module.parameters(), reference.module.parameters()):
                p.copy_(q)
        reference_log.clear()
        reference_optimizer.zero_grad()
        F.cross_entropy(reference(x), y).backward()
        reference_optimizer.step()

        current = _Step(expected_all_reduces=reference_log.count)
        log.clear()
        optimizer.zero_grad(set_to_none=True)
        current.zeroed_after.clear()
        error = None
        try:
            step_fn(theirs, optimizer, list(zip(x.chunk(micro_batches), y.chunk(micro_batches))))
        except Exception as raised:  # the reader's code: report it, never crash the check
            error = error_in_your_code(raised)
        failed = torch.tensor([float(error is not None)])
        dist.all_reduce(failed)
        if failed.item():
            seen.error = error or "another rank's step raised"
            seen.error_step = number
            return seen
        current.all_reduces = log.count
        after = _flat(theirs.module)
        everyone = [torch.empty_like(after) for _ in range(world_size)]
        dist.all_gather(everyone, after)
        current.replicas_agree = all(torch.equal(everyone[0], other) for other in everyone[1:])
        current.weights_ok = same_values(after, _flat(reference.module), rtol=RTOL, atol=ATOL)
        current.update = before - after
        current.reference_update = before - _flat(reference.module)
        seen.steps.append(current)
    return seen


def _count_calls(owner, name, note):
    """Replace ``owner.name`` (a bound method) by one that calls ``note()`` first."""
    method = getattr(owner, name)

    def counted(*args, **kwargs):
        note()
        return method(*args, **kwargs)

    setattr(owner, name, counted)


# ------------------------------------------------------------- the notebook side


def check_accumulation(step, *, world_size: int = 2, micro_batches: int = 4, steps: int = 2,
                       timeout: float = 60) -> CheckResult:
    """Check ``step(model, optimizer, micro_batches)``, gradient accumulation on a DDP model, on real ranks.

    ``micro_batches`` (the number ``k`` of micro-batches per optimizer step,
    at least 2) and ``steps`` (optimizer steps checked) set the run; each
    micro-batch holds ``MICRO_BATCH`` samples of the spirals.
    """
    if not callable(step):
        raise TypeError(f"step must be a function step(model, optimizer, micro_batches), got "
                        f"{type(step).__name__}: {step!r}")
    if not is_int(world_size) or not 2 <= world_size <= 4:
        raise ValueError(f"world_size must be 2, 3 or 4 (replicas compared with each other), got {world_size!r}")
    check_positive_int("micro_batches", micro_batches, 16)
    if micro_batches < 2:
        raise ValueError(f"micro_batches must be at least 2 (one micro-batch is no accumulation), got {micro_batches}")
    check_positive_int("steps", steps, 10)

    name = getattr(step, "__name__", type(step).__name__)
    subject = (f"{name}: {micro_batches} micro-batches per optimizer step vs one big-batch step, "
               f"{world_size} ranks, {steps} steps")
    total = CHECKS_PER_STEP * steps
    wrong_signature = signature_mistake(step, 3, "def step(model, optimizer, micro_batches)")
    if wrong_signature is not None:
        return CheckResult(subject, 0, total, "check", (wrong_signature,))

    ranks, error = launch_checked(_run_on_rank, world_size, args=(step, micro_batches, steps),
                                  threads=1, timeout=timeout)
    if error is not None:
        return CheckResult(subject, 0, total, "check", (launch_mistake(error, timeout, (
            "A rank waiting in an all-reduce waits for the others to call the same one: does every rank run "
            "the same forward and backward passes, inside no_sync() on every rank or on none?")),))
    errors = [seen for seen in ranks if seen.error]
    if errors:
        first = errors[0]
        return CheckResult(subject, 0, total, "check", (Mistake(
            steps_text([first.error_step]), "error", f"your code raised: {first.error}"),))
    return _verdict(subject, total, ranks)


def _verdict(subject, total, ranks):
    """One list of mistakes for all ranks and steps: each message once, with the steps it applies to."""
    by_message, failed = {}, set()
    for number in range(len(ranks[0].steps)):
        for kind, message, checks in _step_mistakes([seen.steps[number] for seen in ranks], ranks[0]):
            by_message.setdefault((kind, message), []).append(number)
            failed.update((number, check) for check in checks)
    mistakes = tuple(Mistake(steps_text(numbers), kind, message) for (kind, message), numbers in by_message.items())
    return CheckResult(subject, total - len(failed), total, "check", mistakes)


def _step_mistakes(on_ranks, seen):
    """``(kind, message, checks failed)`` for one optimizer step, as all ranks saw it."""
    k, world_size = seen.micro_batches, seen.world_size
    step = on_ranks[0]  # every rank runs the same code; rank 0's record speaks for them
    found = []
    calls = max(s.step_calls for s in on_ranks)
    agree = all(s.replicas_agree for s in on_ranks)
    if calls != 1:
        differ = "" if agree else (" (a step taken before the all-reduce used each rank's own gradients: the "
                                   "replicas now differ)")
        found.append(("step_count",
                      f"optimizer.step() was called {calls} times in one step: call it once, after the last "
                      f"micro-batch's backward pass (the gradients of all {k} micro-batches add up in p.grad "
                      f"until then){differ}", {"step", "weights"} | (set() if agree else {"replicas"})))
    middle = sorted({n for s in on_ranks for n in s.zeroed_after if 0 < n < k})
    if middle:
        after = f"micro-batch{'es' if len(middle) > 1 else ''} {_numbers(middle)}"
        found.append(("zeroed",
                      f"the gradients were zeroed after {after}: that throws away what the earlier "
                      f"micro-batches accumulated. Zero them once per optimizer step, before the first "
                      f"micro-batch (or after optimizer.step())", {"weights"}))

    communication = _communication_mistake(step, k, world_size)
    if communication is not None:
        found.append(communication)
    if calls == 1 and (communication is None or communication[0] == "forward_outside"):
        if not agree:
            found.append(("replicas", "the replicas differ after the step, although DDP all-reduced the "
                          "gradients: does your code change the parameters or their gradients on some ranks only?",
                          {"replicas"}))
        elif not middle and not all(s.weights_ok for s in on_ranks):
            found.append(_weights_mistake(step, k, world_size))
    return found


def _communication_mistake(step, k, world_size):
    expected, count = step.expected_all_reduces, step.all_reduces
    agree = "" if step.replicas_agree else " (and after the step the replicas differ: each rank stepped with " \
                                           "its own gradients)"
    plural = "s" if expected != 1 else ""
    if count > expected:
        outside = [i + 1 for i, sync in enumerate(step.forwards[:-1]) if sync]
        which = f"micro-batch{'es' if len(outside) > 1 else ''} {_numbers(outside)}" if outside else "some micro-batches"
        return ("forward_outside",
                f"{count} all-reduces per optimizer step, expected {expected} (one per bucket): the forward pass "
                f"of {which} ran outside no_sync(). DDP decides in the forward whether the next backward "
                f"all-reduces (DistributedDataParallel._post_forward prepares the reducer only outside no_sync), "
                f"so each of them was all-reduced as well. The weights are still right, but {count - expected} "
                f"all-reduce{'s' if count - expected > 1 else ''} per step are wasted: run the forward and backward "
                f"of every micro-batch but the last inside `with model.no_sync():`", {"all-reduces"})
    if count == expected:
        return None
    checks = {"all-reduces", "replicas", "weights"}
    if count > 0:
        return ("too_few", f"{count} all-reduce{'s' if count > 1 else ''} per optimizer step, expected {expected} "
                f"(one per bucket): some gradients were not averaged{agree}", checks)
    if not step.forwards:
        return ("bypassed", f"no all-reduce ran, and no forward pass went through the DDP model: calling "
                f"model.module(x) skips DDP, which then never averages the gradients{agree}. Call model(x)", checks)
    last_forward_synced = step.forwards[-1]
    last_backward_synced = step.backwards[-1] if step.backwards else last_forward_synced
    if not last_forward_synced and last_backward_synced:
        return ("forward_inside_backward_outside",
                f"no all-reduce ran: the forward passes ran inside no_sync() and the backward passes outside "
                f"it{agree}. Leaving the context before backward() is too late: DDP decides in the forward "
                f"whether the next backward all-reduces. Run the last micro-batch's forward and backward both "
                f"outside no_sync()", checks)
    if not last_forward_synced:
        return ("last_inside",
                f"no all-reduce ran: the last micro-batch too ran inside no_sync(){agree}. Gradients are "
                f"averaged only by a backward whose forward ran outside no_sync(): leave the last micro-batch "
                f"out of it", checks)
    return ("no_all_reduce", f"no all-reduce ran in the step, expected {expected} all-reduce{plural}{agree}: "
            f"every rank must run the last micro-batch's forward and backward through the DDP model, outside "
            f"no_sync()", checks)


FACTORS = {  # the step's size relative to the big batch's -> what usually causes it
    "k": "the loss of each micro-batch was not divided by the number of micro-batches ({k}): the {k} "
         "gradients add up to {k} times the big batch's. Divide each micro-batch's loss by len(micro_batches)",
    "1/k": "the loss was divided by the number of micro-batches twice: the step is 1/{k} of the big batch's. "
           "Divide each micro-batch's loss by len(micro_batches) once",
    "1/W": "the loss was divided by the world size as well: the step is 1/{W} of the big batch's. DDP already "
           "averages the gradients over the ranks; divide only by the number of micro-batches",
    "k/W": "the loss was divided by the world size instead of the number of micro-batches: the step is "
           "{k}/{W} of the big batch's. DDP already averages over the ranks; divide by len(micro_batches)",
    "1/(kW)": "the loss was divided by the number of micro-batches and by the world size: the step is "
              "1/{kW} of the big batch's. DDP already averages over the ranks; divide only by len(micro_batches)",
    "W": "the step is {W} times the big batch's (the world size): were the gradients summed over the ranks "
         "rather than averaged?",
}


def _weights_mistake(step, k, world_size):
    update, reference = step.update.double(), step.reference_update.double()
    ratio = float(update @ reference / (reference @ reference)) if reference.any() else 0.0
    values = {"k": k, "1/k": 1 / k, "1/W": 1 / world_size, "k/W": k / world_size,
              "1/(kW)": 1 / (k * world_size), "W": world_size}
    for name, value in values.items():
        if abs(ratio - value) < 0.02 * value and same_values(update, value * reference, rtol=1e-3, atol=1e-7):
            text = FACTORS[name].format(k=k, W=world_size, kW=k * world_size)
            return ("factor", f"the weights differ from one step on the big batch: {text}", {"weights"})
    if same_values(update, ratio * reference, rtol=1e-3, atol=1e-7) and ratio:
        return ("factor", f"the weights differ from one step on the big batch: your step is {ratio:.3g} times "
                f"the big batch's. Divide each micro-batch's loss by len(micro_batches), and by nothing else",
                {"weights"})
    return ("weights", "the weights differ from one step on the big batch, and not by a constant factor: "
            "does every micro-batch take part, each with F.cross_entropy(model(x), y) / len(micro_batches)?",
            {"weights"})


def _numbers(numbers):
    """[1, 2, 3] -> "1-3", [1, 3] -> "1, 3"."""
    if len(numbers) > 2 and numbers == list(range(numbers[0], numbers[-1] + 1)):
        return f"{numbers[0]}-{numbers[-1]}"
    return ", ".join(map(str, numbers))
