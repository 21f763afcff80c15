"""Lab 5b checker: find the bug in five broken training scripts.

Each script in ``labs/scripts/lab5b_*.py`` hides one realistic mistake: it
hangs, or finishes with replicas that no longer agree, or runs at the pace
of its slowest rank. The reader diagnoses it with Chapter 13b's tools and
submits

* a **diagnosis**, checked by :func:`check_diagnosis`: the cause (one of
  :data:`CAUSES`), the line of the script where the mistake is, and, where
  the mistake is one rank's, which ranks; a wrong answer is explained with
  what the tools show;
* a **fix**, checked by :func:`check_fix`: the corrected script is run on 4
  real ranks and must finish, end with replicas that agree bit for bit
  (:func:`ddp_lab.debugging.compare_replicas`) and, for the slow rank, no
  longer have a straggler (:func:`ddp_lab.debugging.find_straggler`).

:func:`run_lab_script` runs a script as the checker does: on 4 ranks of
``ddp_lab.launch``, each rank calling the script's ``main()`` (which returns
the model) with the environment torchrun gives, then comparing the replicas
and gathering each rank's time computing and waiting in collectives (every
``torch.distributed`` collective the script calls is timed, then run as it
is; optimizer steps are counted with torch's global step hook, for the
per-step figures).
"""

from __future__ import annotations

import functools
import runpy
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ddp_lab.checks.result import CheckResult, Mistake
from ddp_lab.launcher.errors import LaunchError, RankFailed

__all__ = ["CAUSES", "BUGS", "Bug", "ScriptRun", "run_lab_script", "check_diagnosis", "check_fix"]

CAUSES = {
    "collective_order": "the ranks call their collectives in different orders",
    "uneven_data": "the ranks run different numbers of steps, because their data are not the same size",
    "unsynchronised_buffer": "a buffer that each rank updates itself and that is never synchronised",
    "blocking_sends": "blocking sends that wait for receives no rank has reached (a deadlock)",
    "straggler": "one rank is slower than the others, and they wait for it",
    "rank_dependent_seed": "a random seed that differs between ranks",
    "missing_set_epoch": "a DistributedSampler without set_epoch",
}


@dataclass(frozen=True)
class Bug:
    """One broken script: what is wrong with it, and how a wrong diagnosis is explained.

    ``lines`` are fragments of code: any line of the script containing one
    of them is accepted as "the line". ``ranks`` is None when the mistake is
    in code every rank runs alike.
    """

    script: str
    cause: str
    lines: tuple[str, ...]
    ranks: tuple[int, ...] | None
    evidence: str
    where: str
    which_ranks: str = ""
    stragglers: bool = False


BUGS = {
    "checkpoint_order": Bug(
        "lab5b_checkpoint_order.py", "collective_order",
        ("save_checkpoint(model, path)", "mean = mean_loss(loss)", "dist.barrier()  # wait until rank 0",
         "if rank != 0:"),
        (0,),
        "the job hangs with rank 0 waiting in barrier() (inside save_checkpoint) while ranks 1-3 wait in "
        "all_reduce() (inside mean_loss): every rank calls the same two collectives, rank 0 in the other order",
        "the mistake is where the order of the two collectives differs: rank 0 calls save_checkpoint (and its "
        "barrier) before mean_loss, the other ranks call mean_loss first and their barrier after",
        "ranks 1, 2 and 3 behave alike; rank 0 is the one whose order of collectives differs"),
    "uneven_shards": Bug(
        "lab5b_uneven_shards.py", "uneven_data",
        ("shard_x, shard_y = x[rank::world_size]", "for start in range(0, len(shard_x) - args.batch_size + 1"),
        (2, 3),
        "ranks 2 and 3 wait in the final barrier while ranks 0 and 1 still wait in the all_reduce of a "
        "training step: 22 samples over 4 ranks are shards of 6, 6, 5 and 5, so 3, 3, 2 and 2 full batches of 2",
        "the mistake is where the data set is split into shards of unequal size (or where the batches are cut "
        "from them): a rank with a smaller shard runs fewer steps",
        "ranks 2 and 3 get 5 samples, ranks 0 and 1 get 6: the ranks with the smaller shards run one step "
        "fewer and leave the loop early"),
    "batchnorm": Bug(
        "lab5b_batchnorm.py", "unsynchronised_buffer",
        ("def average_gradients(model):", "for parameter in model.parameters():", "average_gradients(model)"),
        None,
        "the job finishes, yet compare_replicas finds the BatchNorm layer's running_mean and running_var "
        "different on ranks 1-3 while every parameter agrees: the averaged gradients keep the parameters "
        "equal, but the running statistics are buffers, updated in each forward pass from the rank's own batch",
        "the mistake is in the synchronisation, average_gradients: it averages the parameters' gradients and "
        "leaves the buffers alone; average the buffers too (or broadcast rank 0's) after each step"),
    "ring_sends": Bug(
        "lab5b_ring_sends.py", "blocking_sends",
        ("dist.send(tensor, dst=peer)",),
        None,
        "the job hangs with every rank waiting in send() inside all_reduce_by_hand: on gloo a send returns "
        "only once the receiver has posted the matching recv, and every rank sends before it receives",
        "the mistake is the blocking dist.send: every rank sends before any rank receives"),
    "slow_rank": Bug(
        "lab5b_slow_rank.py", "straggler",
        ("send_to_dashboard(step, loss.item())", "time.sleep(0.04)", "if rank == DASHBOARD_RANK:"),
        (2,),
        "the job finishes and the replicas agree, but split into computing and waiting, rank 2 computes "
        "about 40 ms longer per step and waits the least, while the other ranks wait about that long in "
        "every all_reduce",
        "the mistake is the blocking call to the dashboard on one rank, between backward and the all-reduce",
        "rank 2 is the dashboard's rank: it computes the longest and waits the least; the others only wait "
        "for it", stragglers=True),
}


@dataclass
class ScriptRun:
    """One run of a script on real ranks: finished or not, and what was measured."""

    script: str
    error: LaunchError | None = None
    replicas: object = None   # ddp_lab.debugging.ReplicaReport, when it finished
    times: list | None = None  # ddp_lab.debugging.RankTimes per rank, when it finished

    @property
    def finished(self) -> bool:
        return self.error is None

    def __str__(self) -> str:
        if self.finished:
            return f"{self.script}: finished without an error"
        return f"{self.script}: did not finish.\n{_error_text(self.error)}"

    __repr__ = __str__


def _error_text(error: LaunchError) -> str:
    if isinstance(error, RankFailed):
        return f"rank {error.rank} raised {error.exc_type}: {error.exc_message.strip().splitlines()[0][:300]}"
    return str(error)


def _script_path(script) -> Path:
    if isinstance(script, str) and script in BUGS:
        from ddp_lab.cluster.scripts import book_script

        return book_script(BUGS[script].script)
    path = Path(script)
    if not path.is_file():
        raise ValueError(f"script must be one of {sorted(BUGS)} or the path of a Python file, "
                         f"got {str(script)!r} (no such file)")
    return path


def run_lab_script(script, *, world_size: int = 4, args=(), timeout: float = 30.0) -> ScriptRun:
    """Run a Lab 5b script (a name of :data:`BUGS` or a path) on ``world_size`` ranks.

    The script's ``main(argv)`` must return the model (or its DDP wrapper).
    A script that hangs is stopped after ``timeout`` seconds; the ScriptRun
    then holds the launcher's report of where each rank waited. What the
    script writes in the temporary folder (``lab5b_checkpoint_order.py``'s
    checkpoint, which a hung run never deletes) goes into a folder of the
    run's own, removed when it ends.
    """
    from ddp_lab.launcher import launch

    path = _script_path(script)
    if isinstance(world_size, bool) or not isinstance(world_size, int) or not 2 <= world_size <= 8:
        raise ValueError(f"world_size must be an int from 2 to 8, got {world_size!r}")
    run = ScriptRun(path.name)
    try:
        with tempfile.TemporaryDirectory(prefix="ddp_lab_lab5b_") as scratch:
            results = launch(_run_in_rank, world_size, args=(str(path), [str(a) for a in args], scratch),
                             init_process_group=False, timeout=timeout)
    except LaunchError as error:
        run.error = error
        return run
    run.replicas, run.times = results[0]
    return run


_TIMED = ("all_reduce", "broadcast", "barrier", "all_gather", "reduce", "gather", "scatter", "send", "recv",
          "reduce_scatter", "all_to_all", "all_gather_object", "broadcast_object_list", "gather_object")


@contextmanager
def _timed_collectives(timer):
    """Time every torch.distributed collective called by name (``dist.all_reduce(...)``), as waiting."""
    import torch.distributed as dist

    originals = {name: getattr(dist, name) for name in _TIMED if hasattr(dist, name)}

    def timed(function):
        @functools.wraps(function)
        def wrapper(*args, **kwargs):
            with timer.waiting():
                return function(*args, **kwargs)
        return wrapper

    for name, function in originals.items():
        setattr(dist, name, timed(function))
    try:
        yield
    finally:
        for name, function in originals.items():
            setattr(dist, name, function)


def _run_in_rank(path: str, argv: list[str], scratch: str):
    """In each rank: run the script's main(), with ``scratch`` as its temporary
    folder, then compare the replicas and gather the times."""
    import torch
    import torch.distributed as dist
    from torch.optim.optimizer import register_optimizer_step_post_hook

    from ddp_lab.debugging import WaitComputeTimer, compare_replicas

    tempfile.tempdir = scratch  # what tempfile.gettempdir() answers in this rank
    namespace = runpy.run_path(path, run_name="lab5b_script")
    if "main" not in namespace:
        raise ValueError(f"{Path(path).name} has no main() function: keep main(argv) returning the model")
    timer = WaitComputeTimer()
    original_init = dist.init_process_group
    started = []

    def init_then_start_clock(*args, **kwargs):
        original_init(*args, **kwargs)
        started.append(time.perf_counter())  # start-up is neither computing nor waiting
        timer.start()  # the first step's clock

    def count_step(optimizer, args, kwargs):
        timer.step()

    dist.init_process_group = init_then_start_clock
    counting = register_optimizer_step_post_hook(count_step)  # every optimizer's step, for per-step figures
    try:
        with _timed_collectives(timer):
            model = namespace["main"](argv)
        ended = time.perf_counter()
    finally:
        dist.init_process_group = original_init
        counting.remove()
    timer.compute_s = (ended - started[0]) - timer.wait_s if started else 0.0
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"{NOT_A_MODEL} {_returned(model)}, not the model: keep main(argv) "
                        "returning the model (or its DDP wrapper)")
    report = compare_replicas(model)
    times = timer.gather()
    dist.destroy_process_group()
    return report, times


NOT_A_MODEL = "main() returned"


def _returned(value) -> str:
    """``None``, ``a tensor of shape (3,)``, ``a dict``: what came back, in a few words."""
    if value is None:
        return "None"
    shape = getattr(value, "shape", None)
    if shape is not None:
        return f"a {type(value).__name__} of shape {tuple(shape)}"
    return f"a {type(value).__name__}"


def _largest_difference(report) -> str:
    """``; the largest gap between two ranks is 0.0123, in bn.running_mean``, from a ReplicaReport."""
    if not report.max_difference:
        return ""
    name, gap = max(report.max_difference.items(), key=lambda item: item[1])
    return f"; the largest difference between two ranks is {gap:.3g}, in {name}"


def _lines_of(path: Path, fragment: str) -> list[int]:
    """The numbers of the lines that start with ``fragment`` (indentation aside)."""
    return [number for number, line in enumerate(path.read_text().splitlines(), 1)
            if line.strip().startswith(fragment)]


def check_diagnosis(bug: str, *, cause: str, line: int, ranks=None) -> CheckResult:
    """Check a diagnosis of one of the scripts: its cause, its line and, where it matters, its ranks."""
    if bug not in BUGS:
        raise ValueError(f"bug must be one of {sorted(BUGS)}, got {bug!r}")
    if cause not in CAUSES:
        raise ValueError(f"cause must be one of {sorted(CAUSES)}, got {cause!r}")
    if isinstance(line, bool) or not isinstance(line, int) or line < 1:
        raise ValueError(f"line must be a line number of the script (an int >= 1), got {line!r}")
    spec = BUGS[bug]
    if ranks is not None:
        if isinstance(ranks, int):
            ranks = (ranks,)
        try:
            ranks = tuple(sorted({int(r) for r in ranks}))
        except (TypeError, ValueError):
            raise ValueError(f"ranks must be a rank or a list of ranks, got {ranks!r}") from None
    path = _script_path(bug)
    source = path.read_text().splitlines()
    accepted = sorted({n for fragment in spec.lines for n in _lines_of(path, fragment)})
    mistakes = []
    if cause != spec.cause:
        mistakes.append(Mistake("cause", "wrong_cause", f"not {CAUSES[cause]}: {spec.evidence}"))
    if line not in accepted:
        code = source[line - 1].strip() if line <= len(source) else "(past the end of the script)"
        mistakes.append(Mistake("line", "wrong_line", f"line {line} is `{code}`; {spec.where}"))
    total = 2
    if spec.ranks is not None:
        total = 3
        if ranks is None:
            mistakes.append(Mistake("ranks", "no_ranks", f"name the rank(s) at fault: {spec.which_ranks}"))
        elif ranks != spec.ranks:
            named = ", ".join(map(str, ranks)) or "none"
            mistakes.append(Mistake("ranks", "wrong_ranks", f"not rank(s) {named}: {spec.which_ranks}"))
    return CheckResult(f"diagnosis of {spec.script}", total - len(mistakes), total, "answer", tuple(mistakes))


def check_fix(bug: str, script, *, timeout: float = 30.0) -> CheckResult:
    """Run a corrected script on 4 real ranks: it must finish, with replicas that agree
    (and, for the slow rank, without a straggler)."""
    from ddp_lab.debugging import find_straggler

    if bug not in BUGS:
        raise ValueError(f"bug must be one of {sorted(BUGS)}, got {bug!r}")
    spec = BUGS[bug]
    path = _script_path(script)
    subject = f"{path.name} as a fix of {spec.script}, on 4 ranks"
    total = 3 if spec.stragglers else 2
    run = run_lab_script(path, timeout=timeout)
    if isinstance(run.error, RankFailed) and run.error.exc_message.startswith(NOT_A_MODEL):
        return CheckResult(subject, 0, total, "check", (Mistake(
            "run", "no_model", f"the script ran, but on rank {run.error.rank} {run.error.exc_message}"),))
    if not run.finished:
        return CheckResult(subject, 0, total, "check", (Mistake(
            "run", "did_not_finish", f"the fixed script must run to the end; it did not.\n{_error_text(run.error)}"),))
    mistakes = []
    if not run.replicas.agree:
        mistakes.append(Mistake("replicas", "differ", f"the run finished, but {run.replicas}"
                                f"{_largest_difference(run.replicas)}. Every rank must end with the same model"))
    if spec.stragglers:
        verdict = find_straggler(run.times)
        if verdict:
            mistakes.append(Mistake("stragglers", "still_slow", f"{verdict.sentence}: take the slow call off the "
                                    f"critical path of its rank (less often, or in a background thread)"))
    return CheckResult(subject, total - len(mistakes), total, "check", tuple(mistakes))
