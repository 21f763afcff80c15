"""Lab 7: FSDP2 (``fully_shard``) under a memory budget, checked on real ranks against DDP.

The reader writes ``train_sharded(steps)``, run on every rank. It must

1. seed with ``torch.manual_seed(SEED)`` and build the lab's model with
   :func:`make_model` (the same on every rank);
2. shard it with ``torch.distributed.fsdp.fully_shard``: each ``Linear``
   layer, then the model itself, so that the *model states* each rank
   holds (parameters, gradients and optimizer state) fit in :data:`BUDGET`
   bytes;
3. build ``torch.optim.Adam(model.parameters(), lr=LR)`` and train
   ``steps`` steps, step k on this rank's batch :func:`batch` ``(k, rank)``
   with ``F.cross_entropy``;
4. return ``(model, optimizer, losses)``, ``losses`` being this rank's loss
   of each step (floats).

:func:`check_fsdp_budget` runs it on real gloo ranks, right after a DDP
reference run of the same model, seed and data (``DistributedDataParallel``
and the same Adam), and checks four things:

* **budget**: the bytes of the model states held by each rank, counted
  tensor by tensor after the last step (the local shard of each ``DTensor``;
  Adam's per-parameter tensors, its scalar step counters left out; and any
  tensor the optimizer holds that is not one of the model's parameters);
* **structure**: the model itself sharded (the *root* of FSDP), every
  parameter a ``DTensor`` shard, the optimizer built over those shards;
* **losses**: each rank's loss curve equal to the DDP run's on that rank;
* **weights**: the final weights equal to DDP's, assembled from every rank's
  shard (FSDP2 cuts each parameter along dim 0 in rank order, ``torch.chunk``).

The tolerances are those of float32 sums added in another order: DDP
all-reduces the gradients in buckets, FSDP reduce-scatters each group with
``ReduceOp.AVG`` (for float32: ``_get_gradient_divide_factors`` in
``torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py``), the same sum
and division in other groupings and orders. A float32 has 24 significant
bits (a relative step of 6·10⁻⁸), and a reordered sum changes a value by a
few such steps. Measured with the reference solution on 3 and 4 ranks,
over 4 and 10 steps: the losses differ from DDP's by at most 4.8·10⁻⁷ (two
units in the last place of a float32 near 2, the loss here), the
weights by at most 1.2·10⁻⁷ (on 2 ranks nothing differs: a sum of two
numbers is the same in either order). The checker allows 10⁻⁶ + 10⁻⁵·|loss|
on the losses and 10⁻⁵ + 10⁻⁴·|w| on the weights, over forty times the
largest difference seen; each slip below moves a loss by more than 10⁻³.

Nothing happens in the ranks after the reader's function returns but local
counting: no collective of the checker's can pair with one the reader's code
left waiting, so a rank that hangs is reported where it waits.

The slips it names: nothing sharded (over the budget, by how much); a seed
that depends on the rank (DDP broadcasts rank 0's weights when it wraps the
model and would have hidden it, ``fully_shard`` broadcasts nothing); each
rank trained on another rank's batches or on data of its own; the root
module not sharded (a parameter outside every sharded layer stays whole
and unsynchronised; with every layer sharded, each layer is a root of its
own and stays whole from its forward to its backward pass); the optimizer
built before ``fully_shard`` (it keeps the original full tensors, which
``fully_shard`` replaced); a rank that raises, dies or hangs.

Used in Lab 7.
"""

from __future__ import annotations

import itertools
import re
from collections import OrderedDict
from dataclasses import dataclass, field

import torch
from torch import nn

from ddp_lab.checks.harness import (
    YourCodeExited,
    exit_mistake,
    first_line,
    launch_checked,
    same_values,
    still_computing,
    stuck_ranks,
)
from ddp_lab.checks.result import CheckResult, Mistake, signature_mistake
from ddp_lab.checks.wording import steps_text
from ddp_lab.launcher.errors import RankDied, RankFailed, RanksTimedOut
from ddp_lab.validate import check_positive_int, is_int

__all__ = ["SEED", "LR", "STEPS", "BATCH", "BUDGET", "make_model", "batch", "check_fsdp_budget"]

SEED = 0
LR = 0.01
STEPS = 4
BATCH = 8  # samples per rank and step
WIDTHS = (32, 128, 128, 8)
BUDGET = 200_000  # bytes of model states per rank
LOSS_RTOL, LOSS_ATOL = 1e-5, 1e-6
WEIGHT_RTOL, WEIGHT_ATOL = 1e-4, 1e-5
CHECKS = ("budget", "structure", "losses", "weights")

# What make_model and batch were asked for in this rank (a rank is a process of its own).
_RECORD = {"initial": [], "batches": []}


def _build() -> nn.Sequential:
    inputs, hidden, width, classes = WIDTHS
    return nn.Sequential(OrderedDict([
        ("fc1", nn.Linear(inputs, hidden)), ("relu1", nn.ReLU()),
        ("fc2", nn.Linear(hidden, width)), ("relu2", nn.ReLU()),
        ("norm", nn.LayerNorm(width)),
        ("fc3", nn.Linear(width, classes)),
    ]))


def make_model() -> nn.Sequential:
    """The lab's model, from the current random state: seed first (``torch.manual_seed(SEED)``).

    ``fc1`` (32 -> 128), ``relu1``, ``fc2`` (128 -> 128), ``relu2``, ``norm``
    (a ``LayerNorm``, with a weight and a bias of its own), ``fc3``
    (128 -> 8): 22,024 parameters.
    """
    model = _build()
    _RECORD["initial"].append({name: p.detach().clone() for name, p in model.named_parameters()})
    return model


def batch(step: int, rank: int):
    """Rank ``rank``'s batch of step ``step``: ``BATCH`` inputs of 32 values and their classes (0 to 7).

    The same on every call, in every process: each (step, rank) has its own generator.
    """
    if not is_int(step) or not is_int(rank) or step < 0 or rank < 0:
        raise ValueError(f"batch(step, rank) takes two ints >= 0, got {step!r} and {rank!r}")
    import torch.distributed as dist

    caller = dist.get_rank() if dist.is_initialized() else None
    _RECORD["batches"].append((step, rank, caller))
    return _data(step, rank)


def _data(step, rank):
    generator = torch.Generator().manual_seed(1_000 * (step + 1) + rank)
    x = torch.randn(BATCH, WIDTHS[0], generator=generator)
    return x, torch.randint(0, WIDTHS[-1], (BATCH,), generator=generator)


# ---------------------------------------------------------------------- in each rank


@dataclass
class _RankReport:
    rank: int
    world_size: int
    reference_losses: list
    reference_weights: dict
    reference_initial: dict
    losses: list = field(default_factory=list)
    shards: dict = field(default_factory=dict)  # name -> (local tensor, sharded on dim 0 across the world)
    initial: list = field(default_factory=list)
    batches: list = field(default_factory=list)
    parameters: int = 0
    gradients: int = 0
    optimizer: int = 0
    stale: int = 0  # bytes of tensors the optimizer holds that are not the model's parameters
    stale_count: int = 0
    root_sharded: bool = False
    is_ddp: bool = False
    plain: list = field(default_factory=list)  # parameters that are not DTensor shards
    returned: str | None = None  # what is wrong with the return value, if anything

    @property
    def total(self) -> int:
        return self.parameters + self.gradients + self.optimizer + self.stale


def _local(tensor):
    return tensor.to_local() if hasattr(tensor, "to_local") else tensor


def _nbytes(tensor) -> int:
    local = _local(tensor)
    return local.numel() * local.element_size()


def _reference(rank):
    """The DDP run: same seed, same model, same batches, same Adam."""
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.manual_seed(SEED)
    module = _build()
    initial = {name: p.detach().clone() for name, p in module.named_parameters()}
    model = DDP(module)
    optimizer = torch.optim.Adam(model.parameters(), lr=LR)
    return model, optimizer, initial, F.cross_entropy


def _run_on_rank(train, steps):
    import torch.distributed as dist
    from torch.distributed.fsdp import FSDPModule
    from torch.distributed.tensor import DTensor, Shard
    from torch.nn.parallel import DistributedDataParallel as DDP

    rank, world_size = dist.get_rank(), dist.get_world_size()
    model, optimizer, initial, loss_fn = _reference(rank)
    losses = []
    for step in range(steps):
        x, y = _data(step, rank)
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    report = _RankReport(rank, world_size, losses,
                         {name: p.detach().clone() for name, p in model.module.named_parameters()}, initial)
    del model, optimizer

    _RECORD["initial"].clear()
    _RECORD["batches"].clear()
    result = train(steps)  # the reader's code: what it raises, the launch reports
    report.initial = list(_RECORD["initial"])
    report.batches = list(_RECORD["batches"])
    report.returned, report.losses = _check_return(result, steps)
    if report.returned:
        return report
    theirs, their_optimizer, _ = result
    report.is_ddp = isinstance(theirs, DDP)
    report.root_sharded = isinstance(theirs, FSDPModule)
    named = [(name.removeprefix("module."), p) for name, p in theirs.named_parameters()]
    mine = {id(p) for _, p in named}
    for name, p in named:
        sharded = (isinstance(p, DTensor) and p.device_mesh.size() == world_size
                   and tuple(p.placements) == (Shard(0),))
        report.shards[name] = (_local(p).detach().clone(), sharded)
        if not isinstance(p, DTensor):
            report.plain.append(name)
        report.parameters += _nbytes(p)
        report.gradients += _nbytes(p.grad) if p.grad is not None else 0
    for group in their_optimizer.param_groups:
        for p in group["params"]:
            if id(p) not in mine:
                report.stale_count += 1
                report.stale += _nbytes(p) + (_nbytes(p.grad) if p.grad is not None else 0)
    report.optimizer = sum(_nbytes(value) for state in their_optimizer.state.values() for value in state.values()
                           if torch.is_tensor(value) and value.dim() > 0)
    return report


def _check_return(result, steps):
    """``(what is wrong with train_sharded's return value, None)``, or ``(None, the losses as floats)``."""
    if not isinstance(result, tuple) or len(result) != 3:
        return f"returned {type(result).__name__}, not (model, optimizer, losses)", None
    model, optimizer, losses = result
    if not isinstance(model, nn.Module):
        return f"returned {type(model).__name__} as the model: return the sharded model itself", None
    if not isinstance(optimizer, torch.optim.Optimizer):
        return f"returned {type(optimizer).__name__} as the optimizer: return the torch.optim.Adam you stepped", None
    return _read_losses(losses, steps)


def _read_losses(losses, steps):
    """``(None, [float] * steps)`` from any iterable of ``steps`` numbers, or ``(what is wrong, None)``.

    Read once (an iterator or a generator gives its values only once), and
    never more than ``steps + 1`` values: a tensor is counted with
    ``numel()`` and converted in one call, a long list or iterator is not
    walked to its end. The checker's own reading must never take long enough
    to count against the timeout, which measures the reader's code.
    """
    per_step = "append loss.item() once per step"
    if isinstance(losses, (str, bytes, dict)):
        return f"returned a {type(losses).__name__} as the losses: return a list of floats, {per_step}", None
    if torch.is_tensor(losses):
        if losses.numel() != steps:
            return f"returned a tensor of {losses.numel():,} losses for {steps} steps: {per_step}", None
        if losses.is_complex() or losses.device.type == "meta":
            return f"returned losses that are not numbers: {per_step}", None
        return None, losses.detach().reshape(-1).double().cpu().tolist()
    try:
        values = list(itertools.islice(iter(losses), steps + 1))
    except TypeError:
        return (f"returned {type(losses).__name__} as the losses, which is not a list: return a list of floats, "
                f"{per_step}"), None
    if len(values) != steps:
        count = f"{len(values)}" if len(values) <= steps else (
            f"{len(losses):,}" if hasattr(losses, "__len__") else f"more than {steps}")
        return f"returned {count} losses for {steps} steps: {per_step}", None
    try:
        return None, [float(loss) for loss in values]
    except (TypeError, ValueError, RuntimeError):
        return f"returned losses that are not numbers: {per_step}", None


# -------------------------------------------------------------------- the notebook side


def check_fsdp_budget(train, *, world_size: int = 2, steps: int = STEPS, budget: int = BUDGET,
                      timeout: float = 60) -> CheckResult:
    """Check ``train(steps) -> (model, optimizer, losses)``, FSDP2 under ``budget`` bytes per rank, against DDP.

    Runs on ``world_size`` gloo ranks (2 to 4); see the module's docstring
    for the four checks and the slips they name.
    """
    if not callable(train):
        raise TypeError(f"pass your function itself, e.g. check_fsdp_budget(train_sharded); got "
                        f"{type(train).__name__}: {train!r}")
    if not is_int(world_size) or not 2 <= world_size <= 4:
        raise ValueError(f"world_size must be 2, 3 or 4, got {world_size!r}")
    check_positive_int("steps", steps, 20)
    check_positive_int("budget", budget)
    name = getattr(train, "__name__", type(train).__name__)
    subject = f"{name} vs DDP: {world_size} ranks, {steps} steps, budget {budget:,} bytes per rank"
    total = len(CHECKS)
    wrong_signature = signature_mistake(train, 1, "def train_sharded(steps)")
    if wrong_signature:
        return CheckResult(subject, 0, total, "check", (wrong_signature,))
    reports, error = launch_checked(_run_on_rank, world_size, args=(train, steps), threads=1, timeout=timeout)
    if error is not None:
        return CheckResult(subject, 0, total, "check", (_launch_mistake(error, timeout, world_size),))
    returned = [r for r in reports if r.returned]
    if returned:
        first = returned[0]
        which = "every rank" if len(returned) == len(reports) else f"rank {first.rank}"
        return CheckResult(subject, 0, total, "check", (Mistake(which, "returns", first.returned),))
    return _verdict(subject, total, reports, budget)


def _launch_mistake(error, timeout, world_size):
    if isinstance(error, YourCodeExited):
        return exit_mistake(f"rank {error.rank}", error)
    if isinstance(error, RanksTimedOut):
        slow = still_computing("all ranks", error, timeout)
        if slow is not None:
            return slow
        waiting = sorted(error.unfinished)
        done = sorted(set(range(world_size)) - set(waiting))
        returned = f"; {_ranks(done)} had already returned" if done else ""
        detail = error.unfinished[waiting[0]] if len(waiting) == 1 else stuck_ranks(error)
        return Mistake(_ranks(waiting), "hang",
                       f"waited until the {timeout:g} s timeout ({detail}){returned}. "
                       f"FSDP's all-gathers and reduce-scatters are collectives: every rank must shard the same "
                       f"modules and run the same forward and backward passes, as many times. A fully_shard, a "
                       f"forward pass or a loop that runs on some ranks only (inside `if rank == ...`, or a "
                       f"number of steps that depends on the rank) leaves the others waiting")
    if isinstance(error, RankDied):
        message = first_line(error)
        if error.signal_name == "SIGABRT":
            message += (": gloo aborts a rank whose collective does not match the other ranks' (another "
                        "operation, or another size). Do all ranks shard the same modules and run the same steps?")
        return Mistake(f"rank {error.rank}", "crash", message)
    if isinstance(error, RankFailed):
        where = _reader_line(error.remote_traceback)
        message = f"your code raised {error.exc_type}: {error.exc_message.strip().splitlines()[0]}{where}"
        if error.still_running:
            message += "; the other ranks, left waiting for it, were stopped"
        return Mistake(f"rank {error.rank}", "error", message)
    return Mistake("a rank", "crash", first_line(error))


_FRAME = re.compile(r'^\s*File "([^"]+)", line (\d+), in (\S+)\n\s+(\S.*)$', re.M)


def _reader_line(traceback_text: str) -> str:
    """`` (in train_sharded: model(x))``: the last frame of the reader's own code in a traceback's text."""
    frames = [m for m in _FRAME.finditer(traceback_text or "")
              if "ddp_lab" not in m.group(1) and "torch" not in m.group(1)]
    if not frames:
        return ""
    last = frames[-1]
    return f" (in {last.group(3)}: {last.group(4).strip()})"


def _ranks(ranks):
    ranks = list(ranks)
    return f"rank {ranks[0]}" if len(ranks) == 1 else "ranks " + ", ".join(map(str, ranks))


def _where(reports, selected):
    return "every rank" if len(selected) == len(reports) else _ranks(r.rank for r in selected)


# ------------------------------------------------------------------------ the verdict


def _verdict(subject, total, reports, budget):
    failed, mistakes = set(), []
    structure = _structure_mistake(reports)
    if structure is not None:
        failed.add("structure")
        mistakes.append(structure)
    over = [r for r in reports if r.total > budget]
    if over:
        failed.add("budget")
        if structure is None or structure.kind != "not_sharded":
            mistakes.append(_budget_mistake(reports, over, budget))
        else:  # one message for both: the budget is what not sharding costs
            mistakes[-1] = Mistake(structure.where, "not_sharded",
                                   _budget_text(reports, over, budget) + " " + structure.message)
    losses_wrong = _losses_wrong(reports)
    weights_wrong = _weights_wrong(reports)
    failed |= {"losses"} if losses_wrong else set()
    failed |= {"weights"} if weights_wrong else set()
    if losses_wrong or weights_wrong:
        cause = _cause(reports, losses_wrong)
        if cause is not None:
            mistakes.append(cause)
        elif structure is None or structure.kind == "root_only_children":
            mistakes.append(_difference_mistake(reports, losses_wrong, weights_wrong))
    return CheckResult(subject, total - len(failed), total, "check", tuple(mistakes))


def _budget_text(reports, over, budget):
    r = max(over, key=lambda report: report.total)
    parts = f"parameters {r.parameters:,}, gradients {r.gradients:,}, optimizer state {r.optimizer:,}"
    if r.stale:
        parts += f", tensors only the optimizer holds {r.stale:,}"
    which = "each rank holds" if len(over) == len(reports) and len({x.total for x in over}) == 1 \
        else f"rank {r.rank} holds"
    excess = r.total - budget
    return (f"{which} {r.total:,} bytes of model states ({parts}): {excess:,} byte{'s' if excess != 1 else ''} "
            f"over the budget of {budget:,} ({r.total / budget:.2f} times it).")


def _budget_mistake(reports, over, budget):
    text = _budget_text(reports, over, budget)
    whole = sorted({name for r in over for name in r.plain})
    if whole:
        text += (f" Whole on every rank: {', '.join(whole)}. Shard every layer that has parameters, and the "
                 f"model, with fully_shard")
    else:
        text += " Shard more of the model, or over more ranks"
    return Mistake(_where(reports, over), "over_budget", text)


def _structure_mistake(reports):
    """The first thing FSDP2 wants that the model or optimizer lacks, or None."""
    first = reports[0]
    sharded = [name for name, (_, on_dim0) in first.shards.items() if on_dim0]
    if not sharded:
        if first.is_ddp:
            what = ("The model is wrapped in DistributedDataParallel, which keeps a full replica on every "
                    "rank: that is what the budget forbids")
        else:
            what = ("No parameter is sharded and nothing averages the gradients: each rank trained a copy "
                    "of its own")
        return Mistake("every rank", "not_sharded",
                       f"{what}. Call fully_shard on each Linear layer and then on the model, before building "
                       f"the optimizer: on {first.world_size} ranks each rank then keeps 1/{first.world_size} "
                       f"of every parameter, gradient and optimizer state")
    stale = [r for r in reports if r.stale_count]
    if stale:
        r = stale[0]
        unchanged = bool(r.initial) and _same_tensors(_full_weights(reports, r), r.initial[-1])
        return Mistake(_where(reports, stale), "optimizer_first",
                       f"the optimizer holds {r.stale_count} tensors that are not the model's parameters "
                       f"({r.stale:,} bytes): it was built before fully_shard. fully_shard replaces every "
                       f"parameter of the modules it shards by a new nn.Parameter, a DTensor holding this "
                       f"rank's shard (FSDPParam._init_sharded_param in "
                       f"torch/distributed/fsdp/_fully_shard/_fsdp_param.py), and the optimizer kept the old, "
                       f"full ones. They never get a gradient, so optimizer.step() did not change the model"
                       f"{' at all' if unchanged else ''}, and they keep the full weights in memory. Build the "
                       f"optimizer after fully_shard, from the sharded model.parameters(): FSDP2's documentation "
                       f"says the optimizer must be initialized with the DTensor parameters")
    if not first.root_sharded:
        plain = first.plain
        if plain:
            return Mistake("every rank", "root_not_sharded",
                           f"{', '.join(plain)} {'is a plain tensor' if len(plain) == 1 else 'are plain tensors'}, "
                           f"whole on every rank: the model itself was not passed to fully_shard, and no "
                           f"fully_shard call covers {'it' if len(plain) == 1 else 'them'}. FSDP neither shards "
                           f"such a parameter nor reduces its gradient, so each rank updated its copy with its "
                           f"own gradient and the copies drifted apart. Call fully_shard(model) after the "
                           f"layers: the root's group takes every parameter not already in a layer's group "
                           f"(fully_shard's docstring)")
        return Mistake("every rank", "root_only_children",
                       "the model itself was not passed to fully_shard, so each sharded layer became a root of its "
                       "own (the first FSDP state to run forward is a root: FSDPState._lazy_init). A root keeps its "
                       "parameters whole from its forward pass to its backward pass (fully_shard sets "
                       "reshard_after_forward to False for the root), so at the end of the forward pass every layer "
                       "was whole on every rank, as under DDP: the states after the step fit the budget, the peak "
                       "of the step does not shrink. Call fully_shard(model) last, so that one root runs the step")
    if first.plain:
        return Mistake("every rank", "not_sharded_parameter",
                       f"{', '.join(first.plain)} {'is' if len(first.plain) == 1 else 'are'} not DTensor shards: "
                       f"shard every module that has parameters, then the model, with fully_shard")
    return None


def _close_losses(r):
    return same_values(torch.tensor(r.losses, dtype=torch.float64),
                       torch.tensor(r.reference_losses, dtype=torch.float64), rtol=LOSS_RTOL, atol=LOSS_ATOL)


def _losses_wrong(reports):
    """[(rank, first step that differs)] for the ranks whose loss curve is not DDP's."""
    wrong = []
    for r in reports:
        if not _close_losses(r):
            first = next(s for s, (a, b) in enumerate(zip(r.losses, r.reference_losses))
                         if abs(a - b) > LOSS_ATOL + LOSS_RTOL * abs(b))
            wrong.append((r.rank, first))
    return wrong


def _full_weights(reports, r):
    """Rank ``r``'s view of the full weights: shards on dim 0 put together in rank order, plain tensors as held."""
    full = {}
    for name, (tensor, on_dim0) in r.shards.items():
        if on_dim0 and all(name in other.shards and other.shards[name][1] for other in reports):
            full[name] = torch.cat([other.shards[name][0] for other in reports], dim=0)
        else:
            full[name] = tensor
    return full


def _weights_wrong(reports):
    """[(rank, parameter name, largest difference)] for the ranks whose final weights are not DDP's."""
    wrong = []
    for r in reports:
        full = _full_weights(reports, r)
        for name, reference in r.reference_weights.items():
            theirs = full.get(name)
            if theirs is None or not same_values(theirs, reference, rtol=WEIGHT_RTOL, atol=WEIGHT_ATOL):
                largest = float((theirs - reference).abs().max()) if theirs is not None and \
                    theirs.shape == reference.shape else float("inf")
                wrong.append((r.rank, name, largest))
                break
    return wrong


def _cause(reports, losses_wrong):
    """The seed or the data, when they explain a loss curve that is not DDP's; None otherwise."""
    if not losses_wrong:
        return None
    built = [r for r in reports if r.initial]
    if len(built) < len(reports):
        return Mistake(_where(reports, [r for r in reports if not r.initial]), "no_make_model",
                       "the model was not built with make_model(), so the checker cannot compare its start with "
                       "DDP's: build it with torch.manual_seed(SEED) then make_model()")
    starts = [r.initial[-1] for r in reports]
    differ = [r for r, start in zip(reports, starts) if not _same_tensors(start, starts[0])]
    if differ:
        return Mistake(_where(reports, differ), "seed",
                       "built the model from other initial weights than rank 0's: the random seed depends on "
                       "the rank. Under DDP that goes unnoticed, because "
                       "DistributedDataParallel broadcasts rank 0's parameters when it wraps the model "
                       "(_sync_module_states in its __init__); fully_shard broadcasts nothing, each rank keeps "
                       "its own rows of its own initialization, and the model is a patchwork. Seed every rank "
                       "the same, torch.manual_seed(SEED), before make_model()")
    if not _same_tensors(starts[0], reports[0].reference_initial):
        return Mistake("every rank", "seed",
                       "the model did not start from the weights torch.manual_seed(SEED) then make_model() "
                       "gives, which the DDP run starts from: seed with SEED, right before make_model()")
    return _data_mistake(reports, losses_wrong)


def _data_mistake(reports, losses_wrong):
    steps = len(reports[0].reference_losses)
    for r in reports:
        requested = [(step, rank) for step, rank, caller in r.batches if caller == r.rank]
        if not requested:
            return Mistake(f"rank {r.rank}", "data",
                           "the batches did not come from batch(step, rank): train step k on batch(k, rank), the "
                           "data the DDP run trains on")
        others = sorted({rank for _, rank in requested if rank != r.rank})
        if others:
            return Mistake(f"rank {r.rank}", "data",
                           f"trained on batch(step, {others[0]}), the batches of {_ranks(others)}: each rank "
                           f"trains on its own share of the global batch, batch(step, dist.get_rank())")
        if [step for step, _ in requested] != list(range(steps)):
            got = [step for step, _ in requested]
            return Mistake(f"rank {r.rank}", "data",
                           f"asked for the batches of steps {got}, in that order: step k trains on "
                           f"batch(k, rank), for k = 0 to {steps - 1}")
    return None


def _same_tensors(a, b):
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def _difference_mistake(reports, losses_wrong, weights_wrong):
    if losses_wrong:
        rank, step = min(losses_wrong, key=lambda item: item[1])
        r = reports[rank]
        return Mistake(f"rank {rank}, {steps_text([step])}", "losses",
                       f"the loss is {r.losses[step]:.6g} where DDP's is {r.reference_losses[step]:.6g}, on the "
                       f"same batch: the model or the update differs from DDP's. Train with "
                       f"torch.optim.Adam(model.parameters(), lr=LR) and F.cross_entropy(model(x), y), one "
                       f"optimizer step per batch")
    rank, name, largest = weights_wrong[0]
    return Mistake(f"rank {rank}", "weights",
                   f"the loss curve is DDP's, but the final weights are not: {name} differs by up to "
                   f"{largest:.3g}. Return the model you trained, after its last optimizer step")

