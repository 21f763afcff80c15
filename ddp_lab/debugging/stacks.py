"""Where is each rank stuck? Its Python stack, read from outside with py-spy.

A hung job prints nothing: every rank waits inside a collective for a rank
that called a different one, or none. The question is *where* each rank
waits, and the answer is in each process's stack. ``py-spy dump --pid PID``
reads it from outside, without stopping or changing the process (it reads
the process's memory through ``ptrace``/``process_vm_readv``): it works on a
job you did not prepare for debugging, on any node you can log in to.

:func:`stacks_of_hung_job` does it for a ``torchrun`` job on this machine:
it starts the job, waits until every worker sits in a collective, dumps
each worker's main thread (workers are found as the agent's children, and
told apart by their ``RANK`` variable), then lets the job end on its own
timeout, or stops it. A job that does not hang (it ends, or fails, before a
worker's stack could be read) says so: ``HungJob.finished_before_read``
lists those ranks, and ``report()`` puts it in words with the job's exit
code, rather than showing empty stacks. :func:`stack_lines` prints a stack as a reader wants
it: the script's own frames with their lines, torch's frames by function
name only (their line numbers change with every PyTorch release).

Used in Chapter 13b ("A hang, diagnosed from the outside") and in Lab 5b.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from ddp_lab.cluster.torchrun import (
    RUN_TAG,
    TorchrunRun,
    loopback_environment,
    processes_tagged,
    start_command,
    stop_agent,
    torchrun_command,
    without_lookup_warnings,
)
from ddp_lab.host import process_running
from ddp_lab.validate import check_int_between, check_positive_int

__all__ = ["Frame", "HungJob", "py_spy_command", "dump_stack", "stack_lines", "stacks_of_hung_job"]

_TORCH_DIR = os.sep + "torch" + os.sep
# Frames that only pass a call on: the logging wrapper around every c10d call, runpy.
_PASS_THROUGH = ("_exception_logger.<locals>.wrapper", "_time_logger.<locals>.wrapper", "wrapper")


@dataclass(frozen=True)
class Frame:
    """One frame of a stack: the function, its file and the line it is at."""

    function: str
    filename: str
    line: int

    @property
    def in_torch(self) -> bool:
        return _TORCH_DIR in self.filename

    @property
    def in_torch_distributed(self) -> bool:
        return f"{_TORCH_DIR}distributed{os.sep}" in self.filename


def py_spy_command() -> str:
    """The path of the ``py-spy`` program (next to this Python, or on PATH)."""
    beside = Path(sys.executable).with_name("py-spy")
    found = str(beside) if beside.is_file() else shutil.which("py-spy")
    if not found:
        raise FileNotFoundError("py-spy is not installed: python -m pip install py-spy")
    return found


def dump_stack(pid: int, *, timeout: float = 20.0) -> list[Frame]:
    """The Python stack of the main thread of process ``pid``, innermost frame first.

    Runs ``py-spy dump --pid PID --json``. Raises RuntimeError with py-spy's
    own message when it cannot read the process (no such process, or no
    permission to trace it: see Chapter 13b for ``ptrace`` on your machine).
    """
    check_positive_int("pid", pid)
    result = subprocess.run([py_spy_command(), "dump", "--pid", str(pid), "--json"],
                            capture_output=True, text=True, timeout=timeout)
    if result.returncode != 0:
        raise RuntimeError(f"py-spy could not read process {pid}: {(result.stderr or result.stdout).strip()}")
    threads = json.loads(result.stdout)
    main = next((t for t in threads if t.get("os_thread_id") == pid or t.get("thread_name") == "MainThread"),
                threads[0] if threads else None)
    if main is None:
        return []
    return [Frame(f["name"], f["filename"], int(f["line"])) for f in main["frames"]]


def stack_lines(frames: list[Frame]) -> list[str]:
    """A stack as a reader reads a traceback, outermost call first.

    The script's frames keep their file and line (``train.py:23 in
    sync_metrics``); torch's keep only their module and function
    (``torch.distributed: all_reduce``), since their line numbers change
    from one PyTorch release to the next; wrappers that only pass a call
    on are left out.
    """
    lines = []
    for frame in reversed(frames):
        if frame.function in _PASS_THROUGH:
            continue
        if frame.in_torch:
            module = "torch.distributed" if frame.in_torch_distributed else "torch"
            lines.append(f"    {module}: {frame.function}")
        elif "<frozen runpy>" in frame.filename or frame.filename.endswith("runpy.py"):
            continue
        else:
            lines.append(f"{os.path.basename(frame.filename)}:{frame.line} in {frame.function}")
    return lines


@dataclass
class HungJob:
    """What :func:`stacks_of_hung_job` saw: each rank's stack, and the run's output.

    ``finished_before_read`` holds the ranks whose process had exited before
    py-spy could read where it waited (the job did not hang there: it ended,
    or failed); their entry in ``stacks`` is empty, or the last stack seen
    while the process still ran. ``hung`` is True when no rank is among them.
    """

    stacks: dict[int, list[Frame]] = field(default_factory=dict)
    run: TorchrunRun | None = None
    seconds_to_end: float = 0.0  # from the dump to the end of the job
    tag: str = ""  # RUN_TAG in the environment of the job's agent and workers
    finished_before_read: list[int] = field(default_factory=list)

    @property
    def hung(self) -> bool:
        """Whether every rank was still running when its stack was read."""
        return not self.finished_before_read

    def processes_left(self) -> list[int]:
        """The pids of this job's processes still running (none, once it has been stopped).

        Found by the job's own tag, not by the script's name: another run of the
        same script at the same time (a test beside the notebook) is not counted.
        """
        return [process.pid for process in processes_tagged(self.tag)]

    def report(self) -> str:
        """Every rank's stack, in rank order; first, if the job did not hang, a line that says so."""
        lines = []
        if self.finished_before_read:
            ended = "" if self.run is None or self.run.returncode is None else \
                f" (torchrun's exit code {self.run.returncode})"
            ranks = self.finished_before_read
            which = f"rank {ranks[0]}" if len(ranks) == 1 else "ranks " + ", ".join(map(str, ranks))
            lines.append(f"the job did not hang: {which} exited before {'its' if len(ranks) == 1 else 'their'} "
                         f"stack could be read{ended}. A stack shown below is the last one seen while "
                         f"the process ran, not where it waited; the run's output says how it ended.")
        for rank in sorted(self.stacks):
            lines.append(f"rank {rank}:")
            lines += [f"  {line}" for line in stack_lines(self.stacks[rank]) or ["(no Python stack)"]]
        return "\n".join(lines)


def _waiting_in_collective(frames: list[Frame]) -> bool:
    """Inside torch.distributed, past start-up (not in init_process_group or the rendezvous)."""
    names = {f.function for f in frames}
    return (any(f.in_torch_distributed for f in frames)
            and not names & {"init_process_group", "_env_rendezvous_handler", "_create_c10d_store"})


# Seconds a worker's stack must stay the same, in a collective, to count as waiting there:
# shorter than the book's hung scripts' process-group timeouts (3 to 5 s), after which they fail.
STILL_FOR = 1.0


def stacks_of_hung_job(script, args=(), *, nproc_per_node: int = 2, env=None, settle: float = 30.0,
                       timeout: float = 60.0) -> HungJob:
    """Run ``torchrun --standalone --nproc_per_node N script args``, and dump
    each worker's stack with py-spy once it waits in a collective.

    A worker counts as waiting when its stack stays the same, inside
    torch.distributed and past start-up, for ``STILL_FOR`` seconds of dumps.
    (Two dumps in a row were not enough: on a busy machine a rank can wait a
    fraction of a second in a gradient all-reduce that then completes, and
    that wait was once reported as the hang.) Workers not waiting within
    ``settle`` seconds of being found are dumped as they are. The job should then end by
    itself (the script's ``init_process_group(timeout=...)``); after
    ``timeout`` seconds in all, it is stopped, workers included.

    A job that does not hang is no error here (it is the answer to "does
    the fix work?"): the ranks that exited before their stack could be read,
    or that never came, are listed in ``finished_before_read``, and
    ``report()`` begins with a line that says the job did not hang.
    """
    check_int_between("nproc_per_node", nproc_per_node, 1, 16)
    for name, value in (("settle", settle), ("timeout", timeout)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 3600:
            raise ValueError(f"{name} must be a number of seconds, more than 0 and at most 3600, got {value!r}")
    if not Path(script).is_file():
        raise ValueError(f"script must be the path of a Python file, got {str(script)!r} (no such file)")
    py_spy_command()  # fail before starting anything when py-spy is missing

    command = torchrun_command(script, args, nproc_per_node=nproc_per_node)
    tag = f"{os.getpid()}-{time.monotonic_ns()}-hung"
    agent = start_command(command, env={**loopback_environment(env), RUN_TAG: tag})
    output = {}

    def drain():
        output["stdout"], output["stderr"] = agent.communicate()

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    job = HungJob(tag=tag)
    start = time.monotonic()
    try:
        workers = _find_workers(agent, nproc_per_node, deadline=start + settle)
        # From the workers' start: on a loaded machine the agent's own start-up
        # (importing torch) can take much of ``settle`` before a worker exists.
        deadline = time.monotonic() + settle
        for rank in sorted(workers):
            job.stacks[rank], exited = _settled_stack(workers[rank], deadline)
            if exited:
                job.finished_before_read.append(rank)
        # Workers never found: the job ended (or failed) before they started, or were seen.
        job.finished_before_read = sorted({*job.finished_before_read, *(set(range(nproc_per_node)) - set(workers))})
        dumped = time.monotonic()
        try:
            agent.wait(max(0.1, timeout - (dumped - start)))
        except subprocess.TimeoutExpired:
            pass
        job.seconds_to_end = time.monotonic() - dumped
    finally:
        stop_agent(agent, tag)
        reader.join(5)
    job.run = TorchrunRun(tuple(command), agent.returncode, output.get("stdout", ""),
                          without_lookup_warnings(output.get("stderr", "")))
    return job


def _find_workers(agent, count: int, deadline: float) -> dict[int, int]:
    """{rank: pid} of the agent's workers, read from their RANK variable."""
    import psutil

    workers = {}
    while time.monotonic() < deadline and agent.poll() is None:
        try:
            for child in psutil.Process(agent.pid).children():
                try:
                    rank = child.environ().get("RANK")
                except psutil.Error:
                    continue
                if rank is not None:
                    workers[int(rank)] = child.pid
        except psutil.Error:
            break
        if len(workers) == count:
            break
        time.sleep(0.05)
    return workers


def _settled_stack(pid: int, deadline: float) -> tuple[list[Frame], bool]:
    """``(stack, exited)``: the stack once it has sat in a collective for ``STILL_FOR`` seconds, or
    the last one seen at ``deadline``; ``exited`` when the process ended first (its last stack seen,
    if any, is returned)."""
    previous, since = None, None
    while True:
        try:
            frames = dump_stack(pid)
        except RuntimeError:
            if not process_running(pid):  # the process has exited: its last stack seen
                return previous or [], True
            # py-spy can fail to read a live process that is changing under it (a
            # busy machine saw it once): keep the stack seen so far, and try again
            if time.monotonic() >= deadline:
                return previous or [], False
            time.sleep(0.2)
            continue
        now = time.monotonic()
        if frames != previous:
            previous, since = frames, now
        elif _waiting_in_collective(frames) and now - since >= STILL_FOR:
            return frames, False
        if now >= deadline:
            return frames, False
        time.sleep(0.2)
