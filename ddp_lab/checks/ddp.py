"""Lab 4's checker: DDP built from gradient hooks, compared with torch's own DDP.

The reader writes a wrapper, a class (or a function) ``make_ddp(module)``
that returns a model like ``DistributedDataParallel(module)`` does:

* its ``forward`` runs ``module``;
* when it is built, every rank's ``module`` takes rank 0's parameters;
* during ``loss.backward()`` its gradient hooks all-reduce the gradients,
  so that afterwards every rank's ``p.grad`` is the *mean* over the ranks;
* optionally, a method ``finish_gradient_synchronization()`` that the
  training loop calls right after ``loss.backward()`` (to wait for
  asynchronous all-reduces and copy their results back).

For the bucketed version, ``make_ddp(module, bucket_cap_mb=...)`` groups the
gradients into buckets of about that size and all-reduces each bucket once
all of its gradients are ready. Then::

    check_ddp(NaiveDDP)                          # one all-reduce per parameter
    check_ddp(BucketedDDP, bucket_cap_mb=0.01)   # a few buckets

On real gloo ranks (2 by default), each rank builds the same MLP from a
*different* seed, wraps one copy with the reader's class and one with
``torch.nn.parallel.DistributedDataParallel``, and trains both for a few SGD
steps on rank-specific batches. After wrapping, after each backward pass and
after each step, the reader's parameters and gradients are compared with
torch's. Every collective the reader's code issues is recorded
(``ddp_lab.collectives.recorder``: a ``TorchDispatchMode`` sees each
``c10d`` operation with its tensors), so the
checker also knows how many all-reduces ran, how large they were, and
whether they ran during the backward pass or after it.

Mistakes are named: parameters not broadcast from rank 0; gradients summed
instead of averaged (W times torch's); not synchronised at all (each rank's
own gradient); divided twice; some gradients right and others not (a bucket
all-reduced before all its gradients were ready, or copied back before its
all-reduce finished); a first step right and later ones wrong (state left
over from the previous step); one all-reduce per parameter where buckets
were asked for; buckets larger than the cap; communication only after the
backward pass. Each check is repeated on every rank and every step, and a
mistake seen on several is reported once.

A bucketed wrapper that passes is then run once more, on :class:`TwoBranches`:
a model whose ``forward`` runs its two branches in an order that depends on
the rank, so that backward makes the gradients ready in one order on even
ranks and in another on odd ranks. Wrapped with ``bucket_cap_mb=0.01`` it has
three buckets of which two are complete in a different order on each kind of
rank. torch's DDP launches bucket *i* only after buckets 0 to *i - 1*
(``Reducer::mark_bucket_ready`` in ``reducer.cpp``), so every rank issues the
same all-reduces in the same order; a wrapper that launches buckets in the
order they complete issues them in different orders, gloo pairs each rank's
*n*-th all-reduce with the others' *n*-th, and the ranks add up gradients of
different layers. That case fails with a message that says so, whether the
mismatch shows as wrong gradients, a crashed rank or a hang.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from functools import partial

import torch

from ddp_lab.checks.harness import (
    YourCodeExited,
    first_line,
    launch_checked,
    launch_mistake,
    same_values,
    still_computing,
    stuck_ranks,
)
from ddp_lab.checks.result import CheckResult, Mistake
from ddp_lab.checks.wording import error_in_your_code, steps_text
from ddp_lab.collectives.recorder import CollectiveLog, record_collectives
from ddp_lab.launcher.errors import RankDied, RankFailed, RanksTimedOut
from ddp_lab.validate import check_positive_int, is_int, is_number

__all__ = ["check_ddp", "WIDTHS", "TwoBranches"]

WIDTHS = (16, 64, 64, 64, 4)  # fc1..fc4: 8 parameter tensors, about 38 KB of float32
ORDER_CAP_MB = 0.01  # TwoBranches in buckets: [head], [right], [left], the last two of 17,408 bytes each
LR = 0.1
BATCH = 8
ATOL, RTOL = 1e-6, 1e-4
_close = partial(same_values, rtol=RTOL, atol=ATOL)
GRADIENT_KINDS = {
    "ok": None,
    "sum": "gradients summed but not averaged: they are W = {W} times torch's. Divide by the world "
           "size (dist.get_world_size()) after the all-reduce, or before it",
    "local": "gradients not synchronised at all: each rank kept the gradient of its own batch. "
             "All-reduce every gradient (sum) and divide by W",
    "twice": "gradients divided by W twice: they are 1/W = 1/{W} of torch's. Divide once, before or "
             "after the all-reduce, not both",
    "zero": "gradients are zero",
    "missing": "gradients are None: no gradient reached p.grad (did a hook replace it, or return None?)",
    "wrong": "gradients differ from torch's DDP, and are neither the sum, nor the local gradient, nor "
             "the mean divided twice",
}


@dataclass
class _Observations:
    """What one rank saw, sent back to the notebook (plain data)."""

    rank: int
    world_size: int
    parameter_names: list
    parameter_bytes: list
    error: str | None = None
    error_stage: str | None = None
    start_differs: list = field(default_factory=list)  # names whose start != rank 0's
    start_difference: float = 0.0  # the largest |weight - rank 0's weight| after wrapping
    ready_order: list = field(default_factory=list)  # parameter names, in the order backward made them ready
    steps: list = field(default_factory=list)  # per step: {"gradients": {name: kind}, "weights_ok": bool}
    collectives: list = field(default_factory=list)  # per step: its Collective records


# ------------------------------------------------------------------ the rank side


class TwoBranches(torch.nn.Module):
    """Two branches of the same shape and a head; ``forward`` runs the branches
    in an order that depends on the rank.

    Autograd runs the backward of the operation recorded last first, so on even
    ranks (``left`` computed first) the gradients become ready in the order
    head, right, left, and on odd ranks in the order head, left, right.
    """

    def __init__(self, seed=0):
        super().__init__()
        torch.manual_seed(seed)
        self.left, self.right = torch.nn.Linear(16, 256), torch.nn.Linear(16, 256)
        self.head = torch.nn.Linear(256, 16)

    def forward(self, x):
        import torch.distributed as dist

        if dist.get_rank() % 2 == 0:
            a = self.left(x)
            b = self.right(x)
        else:
            b = self.right(x)
            a = self.left(x)
        return self.head(torch.relu(a) + torch.relu(b))


def _build(model, seed):
    from ddp_lab.models import mlp

    return TwoBranches(seed) if model == "branches" else mlp(WIDTHS, seed=seed)


def _run_on_rank(make_ddp, bucket_cap_mb, steps, model="mlp"):
    """Train the reader's wrapper and torch's DDP side by side; report what differs."""
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel as DDP

    rank, world_size = dist.get_rank(), dist.get_world_size()
    base = _build(model, seed=100 + rank)  # a different start on every rank
    names = [name for name, _ in base.named_parameters()]
    seen = _Observations(rank, world_size, names,
                         [p.numel() * p.element_size() for p in base.parameters()])
    torch_ddp = DDP(copy.deepcopy(base))
    theirs = copy.deepcopy(base)
    plain = copy.deepcopy(base)  # for each rank's own, unsynchronised gradient
    for name, p in plain.named_parameters():  # the order this rank's backward makes gradients ready
        p.register_post_accumulate_grad_hook(lambda p, name=name: seen.ready_order.append(name))
    log = CollectiveLog()

    stage = "building your wrapper"
    try:
        with record_collectives(log):
            log.phase = "construction"
            wrapped = make_ddp(theirs) if bucket_cap_mb is None else make_ddp(theirs, bucket_cap_mb=bucket_cap_mb)
        seen.start_differs = [n for n, a, b in zip(names, theirs.parameters(), torch_ddp.module.parameters())
                              if not torch.equal(a, b)]
        seen.start_difference = _largest_difference(theirs, torch_ddp.module)
        finish = getattr(wrapped, "finish_gradient_synchronization", None)
        generator = torch.Generator().manual_seed(1000 + rank)
        for step in range(steps):
            _copy_parameters(torch_ddp.module, theirs)  # every step starts from torch's weights
            _copy_parameters(torch_ddp.module, plain)
            x = torch.randn(BATCH, WIDTHS[0], generator=generator)
            y = torch.randint(0, WIDTHS[-1], (BATCH,), generator=generator)
            seen.ready_order = []

            torch_ddp.zero_grad(set_to_none=True)
            F.cross_entropy(torch_ddp(x), y).backward()
            plain.zero_grad(set_to_none=True)
            F.cross_entropy(plain(x), y).backward()

            theirs.zero_grad(set_to_none=True)
            log.calls = []
            stage = f"step {step + 1}: forward through your wrapper"
            output = wrapped(x)
            stage = f"step {step + 1}: backward"
            with record_collectives(log):
                log.phase = "backward"
                F.cross_entropy(output, y).backward()
                if callable(finish):
                    stage = f"step {step + 1}: finish_gradient_synchronization()"
                    log.phase = "after backward"
                    finish()
            stage = f"step {step + 1}: comparing"
            kinds = {name: _classify(p.grad, q.grad, r.grad, world_size)
                     for name, p, q, r in zip(names, theirs.parameters(), torch_ddp.module.parameters(),
                                              plain.parameters())}
            _sgd_step(theirs)
            _sgd_step(torch_ddp.module)
            weights_ok = all(_close(p, q) for p, q in zip(theirs.parameters(), torch_ddp.module.parameters()))
            seen.steps.append({"gradients": kinds, "weights_ok": weights_ok})
            seen.collectives.append(list(log.calls))
    except Exception as error:  # the reader's code: report it, never crash the check
        seen.error = error_in_your_code(error)
        seen.error_stage = stage
    return seen


def _largest_difference(model, reference):
    """The largest ``|p - q|`` over all weights of two models (those of one shape); 0.0 if none differ.

    One subtraction per weight and a maximum: the same on every machine, whatever
    the order in which the elements are visited.
    """
    with torch.no_grad():
        return max((float((p - q).abs().max()) for p, q in zip(model.parameters(), reference.parameters())
                    if p.shape == q.shape and p.numel()), default=0.0)


def _copy_parameters(source, target):
    with torch.no_grad():
        for s, t in zip(source.parameters(), target.parameters()):
            t.copy_(s)


def _sgd_step(model):
    with torch.no_grad():
        for p in model.parameters():
            if p.grad is not None:
                p.sub_(LR * p.grad)


def _classify(theirs, torch_grad, local, world_size):
    """How the reader's gradient relates to torch's (the mean) and to this rank's own."""
    if theirs is None:
        return "missing"
    if theirs.shape != torch_grad.shape:
        return "wrong"
    if _close(theirs, torch_grad):
        return "ok"
    if _close(theirs, world_size * torch_grad):
        return "sum"
    if _close(theirs, local):
        return "local"
    if _close(theirs, torch_grad / world_size):
        return "twice"
    if not theirs.any():
        return "zero"
    return "wrong"


# ------------------------------------------------------------- the notebook side


def check_ddp(make_ddp, *, bucket_cap_mb: float | None = None, world_size: int = 2, steps: int = 3,
              timeout: float = 60) -> CheckResult:
    """Check a DDP built from gradient hooks against torch's DDP on ``world_size`` real ranks.

    Without ``bucket_cap_mb`` the naive version is expected (one all-reduce
    per parameter); with it, ``make_ddp(module, bucket_cap_mb=...)`` is
    called and buckets are expected.
    """
    if not callable(make_ddp):
        raise TypeError(f"make_ddp must be a class or function taking the module, got "
                        f"{type(make_ddp).__name__}: {make_ddp!r}")
    if not is_int(world_size) or not 2 <= world_size <= 4:
        raise ValueError(f"world_size must be 2, 3 or 4 (ranks compared with each other), got {world_size!r}")
    check_positive_int('steps', steps)
    if bucket_cap_mb is not None and (not is_number(bucket_cap_mb)
                                      or not bucket_cap_mb > 0):
        raise ValueError(f"bucket_cap_mb must be a number of megabytes > 0, or None, got {bucket_cap_mb!r}")

    name = getattr(make_ddp, "__name__", type(make_ddp).__name__)
    version = "naive" if bucket_cap_mb is None else f"bucketed, bucket_cap_mb={bucket_cap_mb:g}"
    subject = f"{name} ({version}) vs torch DDP: {world_size} ranks, {steps} SGD steps"
    total = 2 + 2 * steps  # start, gradients and weights per step, communication
    if bucket_cap_mb is not None:
        total += 1  # the same all-reduces in the same order on every rank (TwoBranches)
    ranks, error = launch_checked(_run_on_rank, world_size, args=(make_ddp, bucket_cap_mb, steps),
                                  threads=1, timeout=timeout)
    if error is not None:
        return CheckResult(subject, 0, total, "check", (launch_mistake(error, timeout, (
            "A rank waiting in an all-reduce waits for the others to call the same all-reduce: do all ranks "
            "issue the same collectives, in the same order, the same number of times?")),))
    result = _verdict(subject, total, ranks, bucket_cap_mb, steps)
    if bucket_cap_mb is None or not result:
        return result  # the order case is run only for a bucketed wrapper that passed the rest
    mistake = _order_case(make_ddp, world_size, steps, timeout)
    if mistake is None:
        return result
    return CheckResult(subject, result.correct - 1, total, "check", (mistake,))


def _order_case(make_ddp, world_size, steps, timeout):
    """Run the wrapper on TwoBranches, whose gradients become ready in a rank-dependent order."""
    what = None
    ranks, error = launch_checked(_run_on_rank, world_size, args=(make_ddp, ORDER_CAP_MB, steps, "branches"),
                                  threads=1, timeout=timeout)
    if isinstance(error, RanksTimedOut):
        slow = still_computing("the order case", error, timeout)
        what = (f"the ranks hung until the {timeout:g} s timeout ({stuck_ranks(error)})" if slow is None
                else slow.message)
    elif isinstance(error, YourCodeExited):
        what = str(error)
    elif isinstance(error, RankDied):
        what = f"a rank died ({first_line(error)})"
        if error.signal_name == "SIGABRT":
            what = what[:-1] + ("; gloo aborts a process that receives more bytes than the all-reduce it "
                                "matched them with expects)")
    elif isinstance(error, RankFailed):
        what = f"a rank failed ({error.exc_type}: {error.exc_message.splitlines()[0]})"
    if ranks is not None:
        errors = [seen for seen in ranks if seen.error]
        wrong = sorted({name for seen in ranks for step in seen.steps
                        for name, kind in step["gradients"].items() if kind != "ok"},
                       key=ranks[0].parameter_names.index)
        if errors:
            what = f"your code raised on rank {errors[0].rank} while {errors[0].error_stage}: {errors[0].error}"
        elif wrong:
            what = f"the gradients of {_names(wrong)} came out wrong"
        else:
            return None
    even, odd = TWO_BRANCH_ORDERS
    if ranks is not None:  # what the ranks' backward passes really did
        even, odd = (_layer_order(ranks[r].ready_order) for r in (0, 1))
    return Mistake(
        "rank-dependent order", "order",
        f"on a model whose gradients become ready in a different order on different ranks, {what}. The "
        f"model (ddp_lab.checks.ddp.TwoBranches) runs two branches in an order that depends on the rank, "
        f"so backward makes its gradients ready in the order {even} on even ranks and {odd} on odd ranks; "
        f"with bucket_cap_mb={ORDER_CAP_MB:g}, DDP's rule makes the buckets [head], [right], [left]. A "
        f"wrapper that launches each bucket as soon as it is complete issues the all-reduces of the "
        f"branches' buckets in one order on even ranks and in the other on odd ranks; gloo matches every "
        f"rank's n-th all-reduce with the others' n-th, so the ranks add up buckets of different layers "
        f"(or, where their sizes differ, fail). DDP launches bucket i only once buckets 0 to i-1 have been launched, so that every rank "
        f"issues the same all-reduces in the same order: when a bucket is complete, launch it only if "
        f"every earlier bucket has been launched, then launch the following buckets that are already "
        f"complete, in order")


TWO_BRANCH_ORDERS = ("head, right, left", "head, left, right")


def _layer_order(parameter_names):
    """"head.bias, head.weight, right.bias, ..." -> "head, right, ..."."""
    layers = []
    for name in parameter_names:
        layer = name.rsplit(".", 1)[0]
        if layer not in layers:
            layers.append(layer)
    return ", ".join(layers)


def _verdict(subject, total, ranks, bucket_cap_mb, steps):
    errors = [seen for seen in ranks if seen.error]
    if errors:
        first = errors[0]
        which = "every rank" if len(errors) == len(ranks) else f"rank {first.rank}"
        return CheckResult(subject, 0, total, "check", (Mistake(
            which, "error", f"your code raised while {first.error_stage}: {first.error}"),))

    mistakes, failed = [], set()
    names = ranks[0].parameter_names
    differs = [n for n in names if any(n in seen.start_differs for seen in ranks)]
    if differs:
        failed.add("start")
        which = f"all {len(names)} parameter tensors" if len(differs) == len(names) else _names(differs)
        largest = max(seen.start_difference for seen in ranks)
        mistakes.append(Mistake("start", "no_broadcast",
                                f"parameters not broadcast from rank 0 at start: after wrapping, "
                                f"{which} still differ from rank 0's on "
                                f"{_ranks_with(ranks, lambda s: s.start_differs)}, by up to {largest:.2g} "
                                f"(the largest difference of one weight between the replicas). Broadcast every "
                                f"parameter (dist.broadcast(p.data, src=0)) when the wrapper is built"))
    mistakes += _gradient_mistakes(ranks, steps, failed)
    bad_weights = [s for s in range(steps) if not all(seen.steps[s]["weights_ok"] for seen in ranks)]
    for s in bad_weights:
        failed.add(f"weights {s}")
    if bad_weights and not any(m.kind != "no_broadcast" for m in mistakes):
        mistakes.append(Mistake(steps_text(bad_weights), "weights",
                                "the weights after the SGD step differ from torch's, although the gradients "
                                "matched: does your wrapper change the parameters or their gradients after "
                                "the backward pass?"))
    communication = _communication_mistakes(ranks, bucket_cap_mb)
    if communication:
        failed.add("communication")
        mistakes += communication
    correct = total - len(failed)
    return CheckResult(subject, correct, total, "check", tuple(mistakes))


def _gradient_mistakes(ranks, steps, failed):
    world_size = ranks[0].world_size
    names = ranks[0].parameter_names
    by_step = []
    for s in range(steps):
        kinds = {}
        for seen in ranks:
            for name in names:
                kinds.setdefault(name, set()).add(seen.steps[s]["gradients"][name])
        by_step.append({name: _worst(k) for name, k in kinds.items()})
        if any(kind != "ok" for kind in by_step[-1].values()):
            failed.add(f"gradients {s}")

    messages = {}  # message -> steps where it applies
    for s, kinds in enumerate(by_step):
        wrong = {name: kind for name, kind in kinds.items() if kind != "ok"}
        if not wrong:
            continue
        if len(wrong) < len(names):
            right = [name for name in names if name not in wrong]
            text = (f"some gradients right, others not ({_kind_summary(wrong, world_size)}; right: "
                    f"{_names(right)}). Typical of a bucket all-reduced before all its gradients were "
                    f"ready (the missing ones were not in the buffer yet), or of results copied back "
                    f"before the all-reduce finished (wait on its handle first)")
        else:
            kind = _worst(set(wrong.values()))
            text = GRADIENT_KINDS[kind].format(W=world_size)
            if len(set(wrong.values())) > 1:
                text += f" ({_kind_summary(wrong, world_size)})"
        messages.setdefault(text, []).append(s)

    mistakes = []
    first_ok = not any(kind != "ok" for kind in by_step[0].values())
    for text, where in messages.items():
        if first_ok and steps > 1:
            text = (f"step 1 was right but later steps were not ({text[0].lower()}{text[1:]}). Is state left "
                    f"over from the previous step? A bucket buffer not cleared, a count of ready "
                    f"gradients not reset, a list of handles not emptied")
        mistakes.append(Mistake(steps_text(where), "gradients", text))
    return mistakes


def _communication_mistakes(ranks, bucket_cap_mb):
    """Counts and sizes of the all-reduces, and when they ran."""
    seen = ranks[0]
    parameters = len(seen.parameter_names)
    calls = [[c for c in step if c.name == "all_reduce"] for step in seen.collectives]
    counts = sorted({len(step) for step in calls})
    count = counts[-1]
    mistakes = []
    if count == 0:
        return [Mistake("communication", "no_all_reduce",
                        "no all-reduce ran during or right after backward(): register a hook on every "
                        "parameter (p.register_post_accumulate_grad_hook) that all-reduces its gradient")]
    during = [sum(c.phase == "backward" for c in step) for step in calls]
    if max(during) == 0:
        mistakes.append(Mistake("communication", "after_backward",
                                "every all-reduce ran after the backward pass (in "
                                "finish_gradient_synchronization): launch them from the gradient hooks, "
                                "during backward(), so that communication overlaps with the rest of the "
                                "backward pass"))
    if bucket_cap_mb is None:
        if count != parameters:
            mistakes.append(Mistake("communication", "count",
                                    f"{count} all-reduces per step for {parameters} parameter tensors: the "
                                    f"naive version all-reduces each parameter's gradient once, in its own "
                                    f"hook ({'twice? a hook registered twice' if count > parameters else 'some never'})"))
        return mistakes
    cap = bucket_cap_mb * 2**20
    largest = max(seen.parameter_bytes)
    if count >= parameters:
        mistakes.append(Mistake("communication", "not_bucketed",
                                f"{count} all-reduces per step for {parameters} parameter tensors: that is one "
                                f"per parameter, the naive version. Group the gradients into buckets of about "
                                f"bucket_cap_mb = {bucket_cap_mb:g} MB ({cap:.0f} bytes) and all-reduce each "
                                f"bucket once; torch's rule would give {_torch_buckets(seen.parameter_bytes, cap)}"))
    oversized = [c.nbytes for step in calls for c in step if c.nbytes > cap + largest]
    if oversized:
        mistakes.append(Mistake("communication", "oversized",
                                f"an all-reduce of {max(oversized)} bytes, more than bucket_cap_mb = "
                                f"{bucket_cap_mb:g} MB ({cap:.0f} bytes) plus one parameter: close a bucket "
                                f"once it reaches the cap"))
    return mistakes


def _torch_buckets(parameter_bytes, cap):
    """How many buckets DDP's rule makes: parameters in reverse order, a bucket closes once it reaches the cap."""
    buckets, size = 0, 0
    for nbytes in reversed(parameter_bytes):
        size += nbytes
        if size >= cap:
            buckets, size = buckets + 1, 0
    return buckets + (size > 0)


def _worst(kinds):
    """One kind for a parameter seen on several ranks: any problem beats "ok"."""
    order = ["missing", "wrong", "zero", "local", "twice", "sum", "ok"]
    return min(kinds, key=order.index)


def _kind_summary(wrong, world_size):
    labels = {"sum": f"{world_size} times too large", "local": "not synchronised", "twice": "divided twice",
              "zero": "zero", "missing": "None", "wrong": "wrong values"}
    groups = {}
    for name, kind in wrong.items():
        groups.setdefault(labels[kind], []).append(name)
    return "; ".join(f"{label}: {_names(names)}" for label, names in groups.items())


def _names(names):
    names = list(names)
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def _ranks_with(ranks, predicate):
    found = [str(seen.rank) for seen in ranks if predicate(seen)]
    return f"rank {found[0]}" if len(found) == 1 else f"ranks {', '.join(found)}"
