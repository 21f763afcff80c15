"""Lab 5 checker: a torchrun training script that survives a failure.

The reader writes a training script; the checker runs it twice under
``torchrun`` with 2 processes on gloo, at the same time:

* **uninterrupted**: ``torchrun --standalone --nproc_per_node 2 script.py``;
* **failed once**: ``torchrun ... --max-restarts 1 script.py --fail-at-step K
  --fail-rank R``: rank R crashes in step K, torchrun restarts the job, and
  the script must resume from its last snapshot.

and checks six things: the script runs; the failure happens and the job is
restarted; the restarted job resumes (reads the snapshot on every rank and
does not redo the steps already done); the snapshot is written by rank 0
only; it is written atomically (a temporary file, then ``os.replace``); the
final weights of both runs are equal, bit for bit.

The weights alone cannot tell a resumed job from one that started over (both
end with the same weights), so the scripts run inside a probe
(:mod:`ddp_lab.checks.torchrun_probe`) that records every optimizer step,
``torch.save``, ``torch.load`` and ``os.replace`` of every rank.

The script must accept these options (the book's ``labs/scripts/train.py``
does): ``--snapshot PATH``, ``--final PATH`` (rank 0 saves the model's
``state_dict`` there at the end), ``--fail-at-step K`` and ``--fail-rank R``
(crash in step K on rank R, only when ``TORCHELASTIC_RESTART_COUNT`` is 0).
"""

from __future__ import annotations

import json
import os
import tempfile
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ddp_lab.checks.result import CheckResult, Mistake
from ddp_lab.cluster.torchrun import TorchrunRun, run_together, torchrun_command
from ddp_lab.validate import check_int_at_least, is_int

__all__ = ["check_torchrun_script"]

PROBE = Path(__file__).with_name("torchrun_probe.py")
CHECKS = 6  # runs, restarts, resumes, rank 0 writes, atomic, bit for bit


@dataclass
class Events:
    """What the probe recorded for one run: per (attempt, rank), in order."""

    by_worker: dict = field(default_factory=lambda: defaultdict(list))

    @classmethod
    def read(cls, folder: Path) -> "Events":
        events = cls()
        for file in sorted(folder.glob("attempt*_rank*.jsonl")):
            attempt, rank = file.stem.removeprefix("attempt").split("_rank")
            lines = file.read_text().splitlines()
            events.by_worker[int(attempt), int(rank)] = [json.loads(line) for line in lines if line]
        return events

    def attempts(self) -> set[int]:
        return {attempt for attempt, _ in self.by_worker}

    def ranks(self, attempt: int) -> list[int]:
        return sorted(rank for a, rank in self.by_worker if a == attempt)

    def of(self, attempt: int, rank: int, kind: str) -> list[dict]:
        return [e for e in self.by_worker.get((attempt, rank), []) if e["kind"] == kind]

    def steps(self, attempt: int, rank: int) -> int:
        return len(self.of(attempt, rank, "step"))


def check_torchrun_script(script, *, fail_at_step: int = 13, fail_rank: int = 1, nproc_per_node: int = 2,
                          args=(), timeout: float = 240.0) -> CheckResult:
    """Run ``script`` under torchrun, once uninterrupted and once with rank
    ``fail_rank`` failing in step ``fail_at_step``, and check that it resumes
    from its snapshot and ends with the same weights, bit for bit.

    ``args`` are extra options for the script, the same in both runs.
    ``fail_at_step`` must come after the first snapshot, or there is nothing
    to resume from. Raises ValueError for bad arguments (not for a wrong
    script: that is a failed check, with its reasons).
    """
    script = Path(script).absolute()  # a relative name, resolved before any run changes folder
    if not script.is_file():
        raise ValueError(f"script must be the path of a Python file, got {str(script)!r} (no such file)")
    for name, value, minimum in (("fail_at_step", fail_at_step, 1), ("nproc_per_node", nproc_per_node, 2)):
        check_int_at_least(name, value, minimum)
    if not is_int(fail_rank) or not 0 <= fail_rank < nproc_per_node:
        raise ValueError(f"fail_rank must be a rank of the job, 0 to {nproc_per_node - 1}, got {fail_rank!r}")
    subject = (f"{script.name} under torchrun: {nproc_per_node} processes, rank {fail_rank} fails "
               f"once in step {fail_at_step}, --max-restarts 1")

    with tempfile.TemporaryDirectory(prefix="ddp_lab_check_") as tmp:
        runs = {name: _RunFiles(Path(tmp) / name) for name in ("uninterrupted", "failed")}
        failure = ["--fail-at-step", fail_at_step, "--fail-rank", fail_rank]
        commands = [
            runs["uninterrupted"].command(script, args, nproc_per_node, max_restarts=0),
            runs["failed"].command(script, [*args, *failure], nproc_per_node, max_restarts=1),
        ]
        try:
            results = run_together(commands, cwd=script.parent, timeout=timeout)
        except TimeoutError:  # run_together has killed both jobs
            return CheckResult(subject, 0, CHECKS, "check", (Mistake(
                "both runs", "hung", f"the jobs did not finish within {timeout:g} s: a rank probably waits in "
                f"a collective that another rank never calls (a barrier or gather_object run by rank 0 "
                f"only, for instance). Run the script yourself with torchrun to see where it stops"),))
        for run, result in zip(runs.values(), results):
            run.finish(result)
        passed, mistakes = _judge(runs["uninterrupted"], runs["failed"], fail_at_step, fail_rank)
    return CheckResult(subject, passed, CHECKS, "check", mistakes)


class _RunFiles:
    """The folders of one run: probe events, snapshot, final weights."""

    def __init__(self, root: Path):
        self.events_dir, self.snapshot_dir, self.out_dir = root / "events", root / "snapshot", root / "out"
        for folder in (self.events_dir, self.snapshot_dir, self.out_dir):
            folder.mkdir(parents=True)
        self.snapshot = (self.snapshot_dir / "snapshot.pt").resolve()
        self.final = (self.out_dir / "final.pt").resolve()
        self.result: TorchrunRun | None = None
        self.events = Events()

    def command(self, script, args, nproc_per_node, max_restarts):
        script_args = [str(self.events_dir), str(script.resolve()),
                       "--snapshot", str(self.snapshot), "--final", str(self.final), *args]
        return torchrun_command(PROBE, script_args, nproc_per_node=nproc_per_node, max_restarts=max_restarts)

    def finish(self, result: TorchrunRun):
        self.result = result
        self.events = Events.read(self.events_dir)
        self.final_weights = _load(self.final)


def _load(path: Path):
    try:
        return torch.load(path, map_location="cpu", weights_only=True) if path.exists() else None
    except Exception as error:  # the reader's file: report, never crash the check
        return error


def _judge(plain: _RunFiles, failed: _RunFiles, fail_at_step: int, fail_rank: int):
    """How many of the checks passed, and a Mistake for each one that did not.

    A check that cannot be made (no weights to compare after a crash) counts
    as not passed, without a mistake of its own: the crash explains it.
    """
    crashed = _crashed("uninterrupted run", plain)
    if crashed:
        return 0, (crashed,)
    total_steps = plain.events.steps(0, 0)
    restarted = _restarted(failed, fail_at_step, fail_rank, total_steps)
    if restarted:
        return 1, (restarted,)
    finished = _crashed("run after the restart", failed)
    checks = [finished, _resumed(failed, total_steps), _rank_zero_writes(failed), _atomic(failed)]
    if not finished:
        checks.append(_same_weights(plain, failed))
    mistakes = tuple(m for m in checks if m is not None)
    return 1 + len(checks) - len(mistakes), mistakes


def _crashed(name: str, run: _RunFiles) -> Mistake | None:
    if not run.result.ok:
        return Mistake(name, "crashed", f"torchrun exited with code {run.result.returncode}; "
                       f"the end of its output:\n{_indent(_without_probe(run.result.tail(60))[-12:])}")
    if run.final_weights is None:
        return Mistake(name, "no_final", "no final weights: at the end, rank 0 must save the model's "
                       "state_dict to the path given by --final")
    if isinstance(run.final_weights, Exception):
        return Mistake(name, "bad_final", f"the file given by --final cannot be loaded: {run.final_weights}")
    return None


def _restarted(failed: _RunFiles, fail_at_step: int, fail_rank: int, total_steps: int) -> Mistake | None:
    if 1 in failed.events.attempts():
        return None
    if total_steps < fail_at_step:
        return Mistake("failure", "too_late", f"the run has only {total_steps} steps, so step {fail_at_step} "
                       f"never comes: pass a smaller fail_at_step, or arguments that make the run longer")
    if failed.result.ok:
        return Mistake("failure", "not_injected", f"the job never failed: with --fail-at-step {fail_at_step} "
                       f"--fail-rank {fail_rank}, rank {fail_rank} must raise in step {fail_at_step} "
                       f"when TORCHELASTIC_RESTART_COUNT is 0")
    return Mistake("failure", "no_restart", "the job failed but torchrun did not restart it; the end of its "
                   f"output:\n{_indent(failed.result.tail(15))}")


def _resumed(failed: _RunFiles, total_steps: int) -> Mistake | None:
    ranks = failed.events.ranks(1)
    loaded = [r for r in ranks if any(e["path"] == str(failed.snapshot) for e in failed.events.of(1, r, "load"))]
    steps_after = failed.events.steps(1, 0)
    if not loaded:
        return Mistake("resume", "from_scratch", f"the restarted job never read the snapshot (no torch.load of "
                       f"it on any rank) and ran all {steps_after} steps again: it started from scratch. "
                       f"At start, load the snapshot when the file exists and continue from it")
    if len(loaded) < len(ranks):
        return Mistake("resume", "some_ranks", f"only rank(s) {_list(loaded)} read the snapshot after the "
                       f"restart; every rank must load it, so that all continue from the same point")
    if steps_after >= total_steps:
        return Mistake("resume", "redid_steps", f"the restarted job read the snapshot but ran all "
                       f"{steps_after} steps again: continue from the snapshot's epoch and skip the "
                       f"batches of that epoch already used")
    return None


def _snapshot_saves(run: _RunFiles):
    """(attempt, rank, event) of every save into the snapshot's folder, and every rename onto the snapshot."""
    folder = str(run.snapshot_dir.resolve())
    for (attempt, rank), events in sorted(run.events.by_worker.items()):
        for event in events:
            if event["kind"] == "save" and event["path"] and os.path.dirname(event["path"]) == folder:
                yield attempt, rank, event
            if event["kind"] == "replace" and event["dst"] == str(run.snapshot):
                yield attempt, rank, event


def _rank_zero_writes(run: _RunFiles) -> Mistake | None:
    writers = sorted({rank for _, rank, _ in _snapshot_saves(run)})
    if not writers:
        return Mistake("snapshot", "never_written", f"no snapshot was written: save it with torch.save to "
                       f"the path given by --snapshot (here {run.snapshot.name})")
    others = [r for r in writers if r != 0]
    if others:
        return Mistake("snapshot", "every_rank", f"rank(s) {_list(others)} wrote the snapshot too: the ranks "
                       f"hold the same model, so one copy is enough, and on a shared file system their "
                       f"writes overwrite each other. Write it from rank 0 only (if rank == 0:)")
    return None


def _atomic(run: _RunFiles) -> Mistake | None:
    saves = list(_snapshot_saves(run))
    in_place = [e for _, _, e in saves if e["kind"] == "save" and e["path"] == str(run.snapshot)]
    renamed = [e for _, _, e in saves if e["kind"] == "replace"]
    if in_place or (saves and not renamed):
        return Mistake("snapshot", "not_atomic", "the snapshot is written in place: a crash in the middle "
                       "of torch.save leaves a truncated file that the restart cannot load. Save to a "
                       "temporary file in the same folder, then os.replace(tmp, path)")
    return None


def _same_weights(plain: _RunFiles, failed: _RunFiles) -> Mistake | None:
    return compare_weights(plain.final_weights, failed.final_weights)


def compare_weights(expected, got) -> Mistake | None:
    """None when two state_dicts hold equal tensors (bit for bit), else a Mistake naming the first that differs."""
    if not isinstance(expected, dict) or not isinstance(got, dict):
        return Mistake("final weights", "not_a_state_dict", "--final must hold a state_dict (a dict of tensors)")
    if expected.keys() != got.keys():
        return Mistake("final weights", "keys", f"the two runs saved different tensors: "
                       f"{sorted(expected)} vs {sorted(got)}")
    differ = []
    for name, tensor in expected.items():
        other = got[name]
        if not (torch.is_tensor(tensor) and torch.is_tensor(other)):
            continue
        if tensor.shape != other.shape or tensor.dtype != other.dtype:
            differ.append((name, float("inf")))
        elif not torch.equal(tensor, other):
            differ.append((name, (tensor.double() - other.double()).abs().max().item()))
    if not differ:
        return None
    name, gap = differ[0]
    more = f" (and {len(differ) - 1} more tensor(s))" if len(differ) > 1 else ""
    return Mistake("final weights", "differ", f"after the restart the weights differ from the uninterrupted "
                   f"run: {name!r} by up to {gap:.3g}{more}. Restore everything the steps depend on: model, "
                   f"optimizer, epoch and batches used, and every rank's random number generator state")


def _without_probe(text: str) -> list[str]:
    """The lines of a traceback without the frames of the probe and of runpy, which are the checker's."""
    kept, skip_code = [], False
    for line in text.splitlines():
        if skip_code and not line.split(":", 1)[-1].lstrip().startswith("File "):
            continue  # the source line (and ^^^ markers) under a skipped frame
        skip_code = False
        if "torchrun_probe.py" in line or "<frozen runpy>" in line:
            skip_code = "torchrun_probe.py" in line
            continue
        kept.append(line)
    return kept


def _indent(lines) -> str:
    lines = lines.splitlines() if isinstance(lines, str) else lines
    return "\n".join("      " + line for line in lines)


def _list(ranks) -> str:
    return ", ".join(map(str, ranks))
