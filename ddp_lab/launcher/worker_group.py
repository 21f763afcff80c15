"""The worker group: starting, watching and stopping the rank processes of one launch.

``WorkerGroup`` (torch elastic's name for the workers one agent runs) starts
``world_size`` processes together, each with its job, and keeps three lines
to each: a control pipe (questions out, replies in), an output pipe (what
the rank prints) and the process's sentinel (readable when it exits). One
loop waits on all of them at once, so a reply, a print, a crash and the
timeout are all noticed as soon as they happen.

The ranks are forked from a forkserver (``ddp_lab.launcher.forkserver``).
What they print is read as it comes, kept within bounds and, where someone
watches, shown on a live line while they run (``ddp_lab.launcher.output``).
What each rank finds in its environment is ``ddp_lab.launcher.worker_env``'s.

Each launch gives its ranks a temporary folder of their own, inside
multiprocessing's (the notebook's), and removes it once they are dead. A rank
that launches ranks itself starts a forkserver of its own, whose socket is a
``listener-*`` file in that folder; a rank that ends normally stops it
(``worker._stop_own_forkserver``), but a rank killed with SIGKILL (a timeout,
a crash) has no chance to, and the file would stay until the notebook exits.

The rendezvous store (where ranks find each other) is hosted here, in the
notebook, on a loopback socket the operating system picked, exactly as
torchrun's agent hosts it. Two notebooks launching at once get two ports.
Ranks started by ``ddp_lab.spawn`` (``config.style == "spawn"``) meet where
their own code says instead, and no store is hosted for them.

The machinery behind Chapter 3's ``launch``.
"""

from __future__ import annotations

import itertools
import multiprocessing
import os
import shutil
import signal
import socket
import tempfile
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from multiprocessing import util
from multiprocessing.connection import wait

import psutil

from ddp_lab.host import process_running
from ddp_lab.launcher import protocol, shutdown
from ddp_lab.launcher.forkserver import prepare_forkserver, start_process
from ddp_lab.launcher.output import LiveLine, RankOutput
from ddp_lab.launcher.run_result import RunResult
from ddp_lab.launcher.where_stuck import describe_where, rendezvous_arguments, timeout_hint, waiting_kind
from ddp_lab.launcher.worker import WorkerSpec, worker_main
from ddp_lab.launcher.worker_env import worker_environment

# After the first rank fails, how long to wait for the others' replies: a
# bug present on every rank then shows as "rank 0 failed (1, 2, 3 too)",
# the same on every run, instead of whichever rank happened to be first.
FAILURE_GRACE = 0.25
# How long an unfinished rank gets to say where it is stuck.
WHERE_GRACE = 1.0
# How long ranks get to leave cleanly before they are killed.
EXIT_GRACE = 5.0
# How long a forkserver that has closed its pipes gets to be seen dead (_exit_code_lost).
FORKSERVER_GRACE = 1.0


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
    forkserver: int | None = None  # the pid of the forkserver that started it
    # False once that forkserver has died: its sentinel then fires whether or
    # not the rank has ended (see _exit_code_lost), and only its control line
    # says when it ends.
    exit_watched: bool = True


class WorkerGroup:
    """``config.world_size`` running ranks, each running ``job``, and the lines to talk to them.

    ``job`` is one ``(protocol.CALL, pickled call)`` for every rank, or a
    list of one per rank (``spawn`` pickles its rank into each); it travels
    with each process's arguments, under one job id. ``collect`` reads the
    replies that carry that id, and the stacks that answer the last
    ``where``; anything else is a late answer to an older question, dropped.
    The messages are listed in ``ddp_lab.launcher.protocol``.
    """

    def __init__(self, config, job, *, source_lines=None):
        self.config = config
        self._ids = itertools.count(1)  # job and query ids (msg_id)
        self.job = RunResult(next(self._ids), pending=set(range(config.world_size)))
        self._query = None  # the id of the last "where" question
        self._stacks = {}  # rank -> its answer to that question
        self._asked = set()  # ranks whose answer to that question is awaited
        self._live = LiveLine()  # what the ranks print, shown while they run (output.py)
        # Under spawn the ranks' own code hosts its store (rank 0), where it chooses.
        self._store, self.port = (_loopback_store(config.process_group_timeout)
                                  if config.style == "torchrun" else (None, None))
        jobs = job if isinstance(job, list) else [job] * config.world_size
        context = prepare_forkserver()
        self._ranks = []
        self._killed = False
        # The ranks' own temporary folder (see the module doc), removed by kill().
        self._temp_dir = tempfile.mkdtemp(prefix="ranks-", dir=util.get_temp_dir())
        shutdown.stop_at_exit(self)  # from now on, interpreter exit or kernel shutdown stops it
        try:
            for rank, (kind, *fields) in enumerate(jobs):
                spec = self._spec(rank, source_lines or {})
                self._ranks.append(_start_rank(context, spec, (kind, self.job.job_id, *fields), self._temp_dir))
        except BaseException:
            self.kill()
            raise

    def _spec(self, rank, source_lines):
        config = self.config
        return WorkerSpec(
            rank=rank,
            env=worker_environment(config, rank, self.port),
            threads=config.threads,
            backend=config.backend,
            init_process_group=config.init_process_group,
            process_group_timeout=config.process_group_timeout,
            source_lines=source_lines,
        )

    @property
    def pids(self):
        return [r.process.pid for r in self._ranks]

    def collect(self):
        """Read the replies to the job: until every rank replied, the launch's timeout
        (``config.timeout``) passed, or trouble. Returns ``self.job``.

        After a rank fails or dies, the others get ``FAILURE_GRACE`` to reply
        too (the same bug on every rank is then reported as rank 0's, every
        time); those still running are then asked where they are, and
        stopped: often they wait in a collective for the failed rank, which
        will never join them.
        """
        job = self.job
        deadline = time.monotonic() + self.config.timeout
        give_up_at = None
        self._live.begin()
        while job.pending:
            now = time.monotonic()
            if give_up_at is None and (job.failures or job.died):
                give_up_at = now + FAILURE_GRACE
            if now >= min(deadline, give_up_at or deadline):
                break
            self._wait_once(min(deadline, give_up_at or deadline, now + self._live.wake_in()) - now)
            self._live.draw([r.output for r in self._ranks])
        if job.pending:
            self._give_up(self._ask_where(job.pending))
        return job

    def _give_up(self, where):
        """Record where the ranks that did not reply were (they are stopped next),
        and what their waits mean (``where_stuck.timeout_hint``)."""
        job = self.job
        late = _Where("replied too late")
        for rank in job.pending:
            job.unfinished[rank] = where.get(rank, late).text
        job.hint = timeout_hint(
            {rank: where.get(rank, late).kind for rank in job.pending},
            {rank: where[rank].arguments for rank in job.pending
             if rank in where and where[rank].kind == "rendezvous"},
            world_size=self.config.world_size,
            launcher="ddp_lab.spawn" if self.config.style == "spawn" else "ddp_lab.launch",
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
            if r.rank in job.pending and r.exit_watched:
                lines[r.process.sentinel] = ("exited", r)
        for line in wait(list(lines), timeout=max(0.0, seconds)):
            kind, r = lines[line]
            if kind == "output":
                self._read_output(r)
            elif kind == "control":
                self._read_message(r)
            elif r.rank in job.pending and not r.control.poll():
                if _exit_code_lost(r):
                    r.exit_watched = False  # it may run on: its control line tells when it ends
                else:
                    self._record_death(r, code_lost=False)  # exited, with no reply left to read

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
            # else: the answer to an older question (a late stack): dropped

    def _record_death(self, r, code_lost=None):
        """Record that rank ``r`` ended without replying; its exit code is None when
        ``code_lost`` (the caller has asked ``_exit_code_lost``; else it is asked here)."""
        r.process.join(EXIT_GRACE)  # ended: at once, unless a busy machine holds its forkserver up
        if code_lost is None:
            code_lost = not r.exit_watched or _exit_code_lost(r)
        self.job.died[r.rank] = None if code_lost else r.process.exitcode
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
        Then the ranks' temporary folder goes, with whatever their
        multiprocessing left in it (the socket of a forkserver of their own).
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
            shutil.rmtree(self._temp_dir, ignore_errors=True)
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


def _start_rank(context, spec, job, temp_dir):
    control, rank_control = context.Pipe(duplex=True)
    output_pipe, rank_output = context.Pipe(duplex=False)
    process = context.Process(
        target=worker_main,
        args=(spec, rank_control, rank_output, job),
        name=f"ddp_lab-rank-{spec.rank}",
    )
    # A process takes a copy of its parent's multiprocessing settings (_config),
    # where multiprocessing.util.get_temp_dir() looks for the temporary folder.
    process._config["tempdir"] = temp_dir
    try:
        start_process(process)
    finally:
        rank_control.close()  # the rank has its own copies now
        rank_output.close()
    os.set_blocking(output_pipe.fileno(), False)
    return _Rank(spec.rank, process, control, output_pipe, forkserver=_parent(process.pid))


def _parent(pid) -> int | None:
    """The pid of the process that forked ``pid`` (for a rank, its forkserver);
    None if it has already been collected."""
    try:
        return psutil.Process(pid).ppid()
    except psutil.NoSuchProcess:
        return None


def _exit_code_lost(r) -> bool:
    """Whether rank ``r``'s sentinel fired because its forkserver died, so that
    no one can read how the rank ended.

    Under the forkserver, a rank's sentinel is a pipe from the forkserver,
    which writes the rank's exit code there once it has collected the ended
    rank. When the forkserver itself dies (``forkserver.start_process`` says
    when), every sentinel it held fires, and multiprocessing reads the end of
    each pipe as exit code 255: for a rank that runs on, and for one that
    ended while the forkserver could not collect it. A report that they
    exited with code 255 would be false. So a 255 is believed only from a
    rank that has ended while the forkserver that started it lives on (it
    then wrote the 255). A forkserver closes its pipes as it exits, an
    instant before it is seen dead, so a dying one gets ``FORKSERVER_GRACE``
    to be seen so.
    """
    if r.process.exitcode != 255 or r.forkserver is None:
        return False
    if process_running(r.process.pid):
        return True  # its sentinel fired, yet it runs
    deadline = time.monotonic() + FORKSERVER_GRACE
    while process_running(r.forkserver):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.01)
    return True


def _loopback_store(store_timeout):
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
        "127.0.0.1", port, None, True, timedelta(seconds=store_timeout),
        wait_for_workers=False, master_listen_fd=listener.detach(),  # the store owns it now
    )
    return store, port


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
