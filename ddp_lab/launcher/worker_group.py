"""The worker group: starting, watching and stopping the rank processes of one launch.

``RankProcesses`` starts ``world_size`` processes together and keeps three
lines to each: a control pipe (jobs out, replies in), an output pipe (what the
rank prints) and the process's sentinel (readable when it exits). One loop
waits on all of them at once, so a reply, a print, a crash and the timeout
are all noticed as soon as they happen.

The ranks are forked from a forkserver (``ddp_lab.launcher.forkserver``).
What they print is read as it comes, kept within bounds and, where someone
watches, shown on a live line while they run (``ddp_lab.launcher.output``).

The rendezvous store (where ranks find each other) is hosted here, in the
notebook, on a loopback socket the operating system picked, exactly as
torchrun's agent hosts it. Two notebooks launching at once get two ports.
Ranks started by ``ddp_lab.spawn`` (``plan.style == "spawn"``) meet where
their own code says instead, and no store is hosted for them.

The machinery behind Chapter 3's ``launch``.
"""

from __future__ import annotations

import ast
import itertools
import multiprocessing
import os
import signal
import socket
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from multiprocessing.connection import wait

from ddp_lab.host import loopback_interface
from ddp_lab.launcher import protocol, shutdown
from ddp_lab.launcher.forkserver import forkserver_context
from ddp_lab.launcher.output import LiveLine, RankOutput
from ddp_lab.launcher.run_result import Outcome
from ddp_lab.launcher.where_stuck import (
    describe_where, rendezvous_arguments, timeout_hint, waiting_kind)
from ddp_lab.launcher.worker import RankSetup, rank_main
from ddp_lab.launcher.worker_env import spawn_environment, torchrun_environment

# After the first rank fails, how long to wait for the others' replies: a
# bug present on every rank then shows as "rank 0 failed (1, 2, 3 too)",
# the same on every run, instead of whichever rank happened to be first.
FAILURE_GRACE = 0.25
# After a failure, how often to look again at ranks that are merely busy
# (see ``collect``'s ``wait_for_busy``).
BUSY_CHECK_INTERVAL = 0.5
# How long an unfinished rank gets to say where it is stuck.
WHERE_GRACE = 1.0
# How long ranks get to leave cleanly before they are killed.
EXIT_GRACE = 5.0


@dataclass(frozen=True)
class _Where:
    """Where an unfinished rank was: one line, and what it waits for
    (``where_stuck.waiting_kind``: None when not waiting for another rank)."""

    text: str
    kind: str = None
    arguments: dict = field(default_factory=dict)  # its rendezvous values, if any


@dataclass
class _Rank:
    rank: int
    process: multiprocessing.Process
    control: object  # multiprocessing Connection
    output_pipe: object  # multiprocessing Connection, read end
    output: RankOutput = field(default_factory=RankOutput)


class RankProcesses:
    """``plan.world_size`` running ranks and the lines to talk to them.

    One job is in flight at a time (``self.job``): ``send_job`` sends it to
    every rank, ``collect`` reads the replies that carry its id and drops
    any other (a late reply to an earlier job, a late stack). The messages
    are listed in ``ddp_lab.launcher.protocol``.
    """

    def __init__(self, plan, *, first_job=None, source_lines=None):
        _check_main_module_can_be_imported()
        self.plan = plan
        self._ids = itertools.count(1)  # job and query ids (msg_id)
        self.job = None  # the Outcome of the job in flight, or of the last one
        self._query = None  # the id of the last "where" question
        self._stacks = {}  # rank -> its answer to that question
        self._asked = set()  # ranks whose answer to that question is awaited
        self.stale_replies = 0  # replies dropped because they answered an older message
        self._live = LiveLine()  # what the ranks print, shown while they run (output.py)
        # Under spawn the ranks' own code hosts its store (rank 0), where it chooses.
        self._store, self.port = (_loopback_store(plan.timeout) if plan.style == "torchrun"
                                  else (None, None))
        # The first job travels with the process's arguments: no round trip.
        first = self._first_messages(first_job)
        context = forkserver_context()
        self._ranks = []
        self._killed = False
        shutdown.stop_at_exit(self)  # from now on, interpreter exit or kernel shutdown stops it
        try:
            for rank in range(plan.world_size):
                setup = self._setup(rank, source_lines or {})
                self._ranks.append(_start_rank(context, setup, first[rank]))
        except BaseException:
            self.kill()
            raise

    def _first_messages(self, first_job):
        """Each rank's first message: one job for all (``(kind, *fields)``),
        or a list of one per rank (``spawn`` pickles its rank into each), one id."""
        if first_job is None:
            return [None] * self.plan.world_size
        jobs = first_job if isinstance(first_job, list) else [first_job] * self.plan.world_size
        job_id = self._new_job(jobs[0][0])[1]
        return [(kind, job_id, *fields) for kind, *fields in jobs]

    def _setup(self, rank, source_lines):
        plan = self.plan
        if plan.style == "spawn":
            env = spawn_environment(os.environ, rank, plan.world_size)
        else:
            env = dict(os.environ)
            env.update(torchrun_environment(
                rank, plan.world_size, nodes=plan.nodes, master_port=self.port))
        env.update(_network_and_device_env(plan, rank))
        return RankSetup(
            rank=rank,
            env=env,
            threads=plan.threads,
            backend=plan.backend,
            init_process_group=plan.init_process_group,
            # Collectives must not give up before the launcher does: the
            # launcher's own timeout, which also says where ranks were stuck,
            # ends a hang first.
            process_group_timeout=plan.timeout + 60,
            source_lines=source_lines,
        )

    @property
    def pids(self):
        return [r.process.pid for r in self._ranks]

    def exited(self):
        """``{rank: exit code}`` of the ranks whose process has ended."""
        return {r.rank: r.process.exitcode for r in self._ranks
                if r.process.exitcode is not None}

    def _new_job(self, kind, *fields):
        """The message for a new job, with a fresh id; it becomes ``self.job``."""
        job_id = next(self._ids)
        self.job = Outcome(job_id, pending=set(range(self.plan.world_size)))
        return (kind, job_id, *fields)

    def send_job(self, kind, *fields):
        """Send a new job (``protocol.CALL``, ``EXEC`` or ``PULL``) to every rank.

        Each message is written whole, even if Ctrl-C comes meanwhile: the
        KeyboardInterrupt is raised once every rank has the job (see
        ``interrupts_deferred``), and the caller then interrupts the job.
        """
        if self.job is not None and self.job.pending:
            raise RuntimeError(
                f"job {self.job.job_id} still awaits the replies of ranks "
                f"{sorted(self.job.pending)}: collect them (or interrupt it) first")
        message = self._new_job(kind, *fields)
        with interrupts_deferred():
            for r in self._ranks:
                try:
                    r.control.send(message)
                except OSError:  # its end of the pipe is closed: it died
                    self._record_death(r)

    def interrupt(self):
        """Ctrl-C for the job in flight, on every rank that has not replied to it."""
        job = self.job
        for r in self._ranks:
            if job is not None and r.rank in job.pending:
                try:
                    with interrupts_deferred():
                        r.control.send((protocol.INTERRUPT, job.job_id))
                except OSError:
                    pass  # it died: collect notices

    def collect(self, timeout, *, wait_for_busy=False):
        """Read the replies to the job in flight: until every rank replied, or trouble.

        Returns ``self.job``. What came back is kept there as it comes, so
        after a KeyboardInterrupt a second call takes up where the first
        stopped: a rank that already replied is not waited for again.

        After a rank fails or dies, the others get ``FAILURE_GRACE`` to reply
        too; then those still running are asked where they are. Ranks waiting
        in torch.distributed are stuck (the failed rank will never join
        them), and collecting stops. Ranks that are merely busy (sleeping,
        computing) are waited for, until the timeout, when ``wait_for_busy``
        is set: persistent ranks keep their variables if they finish. A death
        always stops collecting: the process group has lost a member.
        """
        job = self.job
        deadline = time.monotonic() + timeout
        look_at = None  # when to look where the unfinished ranks are
        self._live.begin()
        while job.pending:
            now = time.monotonic()
            if look_at is None and (job.failures or job.died):
                look_at = now + FAILURE_GRACE
            if now >= deadline:
                job.timed_out = not (job.failures or job.died)
                break
            if look_at is not None and now >= look_at:
                where = self._ask_where(job.pending)
                stuck = [rank for rank in job.pending if where[rank].kind]  # some replied meanwhile
                if job.died or stuck or not wait_for_busy:
                    self._give_up(where)
                    break
                look_at = time.monotonic() + BUSY_CHECK_INTERVAL
                continue
            self._wait_once(min(deadline, look_at or deadline, now + self._live.wake_in()) - now)
            self._live.draw([r.output for r in self._ranks])
        if job.pending and not job.unfinished:
            self._give_up(self._ask_where(job.pending))
        return job

    def _give_up(self, where):
        """Record where the ranks that did not reply were (they are stopped next),
        and what their waits mean (``where_stuck.timeout_hint``)."""
        job = self.job
        late = _Where("replied too late")
        for rank in job.pending:
            job.unfinished[rank] = where.get(rank, late).text
            if where.get(rank, late).kind:
                job.in_collective.add(rank)
        job.hint = timeout_hint(
            {rank: where.get(rank, late).kind for rank in job.pending},
            {rank: where[rank].arguments for rank in job.pending
             if rank in where and where[rank].kind == "rendezvous"},
            world_size=self.plan.world_size,
            launcher="ddp_lab.spawn" if self.plan.style == "spawn" else "ddp_lab.launch",
            store=("127.0.0.1", self.port) if self.port is not None else None)

    def _wait_once(self, seconds):
        """Wait for anything from the ranks, up to ``seconds``, and take it in."""
        job = self.job
        lines = {}
        for r in self._ranks:
            if r.output_pipe is not None:
                lines[r.output_pipe] = ("output", r)
            if r.rank in job.pending or r.rank in self._asked:
                lines[r.control] = ("control", r)
            if r.rank in job.pending:
                lines[r.process.sentinel] = ("exited", r)
        for line in wait(list(lines), timeout=max(0.0, seconds)):
            kind, r = lines[line]
            if kind == "output":
                self._read_output(r)
            elif kind == "control":
                self._read_message(r)
            elif r.rank in job.pending and not r.control.poll():
                self._record_death(r)  # exited, with no reply left to read

    def _read_message(self, r):
        """Read one message from rank ``r``; keep it if it answers what was asked."""
        job = self.job
        with interrupts_deferred():  # a message is read whole and kept, or not read
            message = _receive(r.control)
            if message is None:  # end of file: its process is gone
                self._asked.discard(r.rank)
                if r.rank in job.pending:
                    self._record_death(r)
                return
            kind, msg_id, payload = message
            if kind == protocol.STACK and msg_id == self._query:
                self._stacks[r.rank] = payload
                self._asked.discard(r.rank)
            elif kind in (protocol.DONE, protocol.FAILED) and msg_id == job.job_id \
                    and r.rank in job.pending:
                job.pending.discard(r.rank)
                self._read_output(r)  # what it printed before replying is in the pipe
                if kind == protocol.DONE:
                    job.results[r.rank] = payload
                else:
                    job.failures[r.rank] = payload
            else:
                self.stale_replies += 1  # the answer to an older message: dropped

    def _record_death(self, r):
        r.process.join(1.0)
        self.job.died[r.rank] = r.process.exitcode
        self.job.pending.discard(r.rank)
        self._asked.discard(r.rank)

    def _ask_where(self, ranks):
        """Ask these ranks for their stacks: ``{rank: _Where(one line, what it waits for, ...)}``.

        Replies to the job that come in meanwhile are taken in as usual.
        """
        self._query = next(self._ids)
        self._stacks = {}
        self._asked = set()
        where = {rank: _Where("no answer (stuck outside Python?)") for rank in ranks}
        for r in self._ranks:
            if r.rank in ranks:
                try:
                    with interrupts_deferred():
                        r.control.send((protocol.WHERE, self._query))
                    self._asked.add(r.rank)
                except OSError:
                    where[r.rank] = _Where("its process is gone")
        deadline = time.monotonic() + WHERE_GRACE
        while self._asked and time.monotonic() < deadline:
            self._wait_once(deadline - time.monotonic())
        self._asked = set()
        for rank, frames in self._stacks.items():
            where[rank] = _Where(describe_where(frames), waiting_kind(frames),
                                 rendezvous_arguments(frames))
        return where

    def _read_output(self, r):
        while r.output_pipe is not None:
            try:
                data = os.read(r.output_pipe.fileno(), 1 << 16)
            except BlockingIOError:
                return
            if not data:
                r.output_pipe.close()
                r.output_pipe = None
                return
            r.output.feed(data)

    def take_output(self):
        """Everything printed since the last call, one string per rank.

        The live line, if one was drawn, is taken back first: what is
        printed next replaces it.
        """
        self._live.end()
        for r in self._ranks:
            self._read_output(r)
        return [r.output.take() for r in self._ranks]

    def close(self):
        """Let every rank leave its process group and exit; kill latecomers."""
        for r in self._ranks:
            try:
                r.control.send((protocol.EXIT,))
            except OSError:
                pass
        deadline = time.monotonic() + EXIT_GRACE
        for r in self._ranks:
            r.process.join(max(0.0, deadline - time.monotonic()))
        self.kill()

    def kill(self):
        """Stop every rank and whatever it started, at once, and free everything.

        A rank that exited cleanly may have left processes it started
        (``subprocess.Popen``, ``os.fork``) running: they are still in its
        process group, and are killed with it. Only a process that left the
        group (``start_new_session=True``, ``os.setsid``) is out of reach.
        """
        if self._killed:
            return
        with interrupts_deferred():  # half-done, it would leave pipes and zombies
            self._killed = True
            for r in self._ranks:
                _kill_group(r.process)
            for r in self._ranks:
                r.process.join()
                self._read_output(r)
                r.control.close()
                if r.output_pipe is not None:
                    r.output_pipe.close()
                    r.output_pipe = None
                r.process.close()
            self._store = None  # closes the store's listening socket
            shutdown.forget(self)


@contextmanager
def interrupts_deferred():
    """Hold Ctrl-C back until the block ends, then raise it there.

    A message to or from a rank goes through the pipe in pieces. A
    KeyboardInterrupt between two pieces would leave half a message in the
    pipe, and the rank (or the notebook) would read the next message as the
    rest of this one: the pipe is out of step for good. So a message is sent,
    or read and recorded, whole; an interrupt meanwhile is raised just after.
    Only the main thread gets KeyboardInterrupt: elsewhere nothing is held.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held = []
    previous = signal.getsignal(signal.SIGINT)
    if previous is None:  # a handler installed outside Python: leave it be
        yield
        return
    signal.signal(signal.SIGINT, lambda signum, frame: held.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if held:
            signal.raise_signal(signal.SIGINT)  # through the usual handler, now


def _check_main_module_can_be_imported():
    """Refuse a launch that multiprocessing would break in every rank.

    Like ``torch.multiprocessing.spawn``, each rank imports the caller's
    script (as ``__mp_main__``) before it starts. A notebook is fine (it has
    no file). Code piped into ``python -`` names a file that does not exist,
    and every rank would die on start-up. A script is fine if it launches
    from under the usual ``if __name__ == "__main__":`` guard; without it,
    the launch in its top-level code runs again in each rank as the rank
    imports it, multiprocessing refuses to start ranks from a rank still
    starting, and every rank dies with exit code 1.
    """
    main = sys.modules.get("__main__")
    main_file = getattr(main, "__file__", None)
    if main_file is not None and not os.path.exists(main_file):
        raise RuntimeError(
            f"cannot start ranks from code whose __main__ is {main_file!r}: each rank "
            "re-imports the main script, and this one is not a file. Save the code "
            "to a .py file (with an `if __name__ == \"__main__\":` guard) or run it "
            "in a notebook.")
    top_level = _main_script_frame(main)
    if top_level is not None and not _under_main_guard(top_level):
        raise RuntimeError(
            f"{top_level.f_code.co_filename} starts ranks from its top-level code, line "
            f"{top_level.f_lineno}, without the `if __name__ == \"__main__\":` guard. "
            "Each rank imports the script before it starts, and would run that line "
            "again. Put the code that launches under the guard:\n\n"
            "    if __name__ == \"__main__\":\n        ddp_lab.launch(...)")


def _main_script_frame(main):
    """The frame running the main script's top-level code, if this call came from it."""
    frame = sys._getframe()
    while frame is not None:
        if frame.f_code.co_name == "<module>" and main is not None \
                and frame.f_globals is vars(main):
            return frame
        frame = frame.f_back
    return None


def _under_main_guard(frame):
    """Whether the frame's current top-level statement is ``if __name__ == "__main__":``.

    When the source cannot be read or parsed, the answer is yes: only a
    script known to lack the guard is refused.
    """
    try:
        with open(frame.f_code.co_filename, encoding="utf-8") as source:
            tree = ast.parse(source.read())
    except (OSError, SyntaxError, ValueError):
        return True
    line = frame.f_lineno
    for statement in tree.body:
        if statement.lineno <= line <= statement.end_lineno:
            return isinstance(statement, ast.If) and _tests_main_name(statement.test)
    return True


def _tests_main_name(test):
    """``__name__ == "__main__"``, written either way round."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1
            and isinstance(test.ops[0], ast.Eq)):
        return False
    sides = {ast.dump(test.left), ast.dump(test.comparators[0])}
    return sides == {ast.dump(ast.Name("__name__", ast.Load())), ast.dump(ast.Constant("__main__"))}


def _start_rank(context, setup, first_job):
    control, rank_control = context.Pipe(duplex=True)
    output_pipe, rank_output = context.Pipe(duplex=False)
    process = context.Process(
        target=rank_main,
        args=(setup, rank_control, rank_output, first_job),
        name=f"ddp_lab-rank-{setup.rank}",
    )
    try:
        process.start()
    finally:
        rank_control.close()  # the rank has its own copies now
        rank_output.close()
    os.set_blocking(output_pipe.fileno(), False)
    return _Rank(setup.rank, process, control, output_pipe)


def _loopback_store(timeout):
    """A rendezvous store listening on 127.0.0.1 only, on a port the OS chose.

    Binding the socket ourselves (port 0 = "any free port") and handing it to
    the store means there is no gap between picking a port and using it, in
    which another launch could take the same one.
    """
    import torch.distributed as dist

    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(128)
    port = listener.getsockname()[1]
    store = dist.TCPStore(
        "127.0.0.1", port, None, True, timedelta(seconds=timeout + 60),
        wait_for_workers=False, master_listen_fd=listener.detach(),  # the store owns it now
    )
    return store, port


def _network_and_device_env(plan, rank):
    """Keep a local launch on loopback; give simulated nodes their own GPUs."""
    env = {}
    loopback = loopback_interface()
    if loopback:
        env.setdefault("GLOO_SOCKET_IFNAME", os.environ.get("GLOO_SOCKET_IFNAME", loopback))
        env.setdefault("NCCL_SOCKET_IFNAME", os.environ.get("NCCL_SOCKET_IFNAME", loopback))
    if plan.backend == "nccl" and plan.nodes > 1:
        # Each simulated node sees only its own GPUs, numbered from 0, so
        # LOCAL_RANK picks the GPU exactly as on a real node.
        node = rank // plan.ranks_per_node
        first = node * plan.ranks_per_node
        env["CUDA_VISIBLE_DEVICES"] = ",".join(
            str(first + i) for i in range(plan.ranks_per_node))
    return env


def _receive(connection):
    try:
        return connection.recv()
    except (EOFError, OSError):
        return None


def _kill_group(process):
    """SIGKILL a rank's process group: the rank and every process it started.

    The group outlives its leader while any member is alive, so this works
    after the rank itself exited too. (Its number cannot be given to a new
    process while the group has members; once it has none, killpg finds no
    one.) A rank killed before it could lead a group is killed alone.
    """
    if process.pid is None:
        return
    try:
        os.killpg(process.pid, signal.SIGKILL)  # the rank leads its own process group
    except (ProcessLookupError, PermissionError):
        if process.exitcode is None:
            try:
                os.kill(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
