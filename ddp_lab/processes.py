"""Starting, watching and stopping the rank processes of one launch.

``RankProcesses`` starts ``world_size`` processes together and keeps three
lines to each: a control pipe (jobs out, replies in), an output pipe (what the
rank prints) and the process's sentinel (readable when it exits). One loop
waits on all of them at once, so a reply, a print, a crash and the timeout
are all noticed as soon as they happen.

Why a forkserver? Starting a fresh Python and importing torch takes seconds
(that is what ``torch.multiprocessing.spawn`` pays). Forking the notebook is
fast but unsafe once the notebook has touched CUDA, because a forked child
inherits a CUDA context it cannot use. Python's *forkserver* is a small helper
process started once, which imports torch but never CUDA, and forks each rank
from itself: fast like fork, safe like spawn. It holds no process group and
no port between launches.

The rendezvous store (where ranks find each other) is hosted here, in the
notebook, on a loopback socket the operating system picked, exactly as
torchrun's agent hosts it. Two notebooks launching at once get two ports.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import socket
import time
from dataclasses import dataclass, field
from datetime import timedelta
from multiprocessing.connection import wait

from .kernel_shutdown import stop_helpers_with_the_kernel
from .output import RankOutput
from .plan import loopback_interface
from .rank_env import torchrun_environment
from .rank_process import RankSetup, rank_main
from .where import describe_where

# After the first rank fails, how long to wait for the others' replies: a
# bug present on every rank then shows as "rank 0 failed (1, 2, 3 too)",
# the same on every run, instead of whichever rank happened to be first.
FAILURE_GRACE = 0.25
# How long an unfinished rank gets to say where it is stuck.
WHERE_GRACE = 1.0
# How long ranks get to leave cleanly before they are killed.
EXIT_GRACE = 5.0


@dataclass
class Outcome:
    """What came back from the ranks for one job."""

    results: dict = field(default_factory=dict)    # rank -> pickled value
    failures: dict = field(default_factory=dict)   # rank -> failure info
    died: dict = field(default_factory=dict)       # rank -> exit code
    unfinished: dict = field(default_factory=dict)  # rank -> where it was
    timed_out: bool = False

    @property
    def ok(self):
        return not (self.failures or self.died or self.unfinished)


@dataclass
class _Rank:
    rank: int
    process: multiprocessing.Process
    control: object  # multiprocessing Connection
    output_pipe: object  # multiprocessing Connection, read end
    output: RankOutput = field(default_factory=RankOutput)


def forkserver_context():
    """The multiprocessing context ranks are started from (see module doc)."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")  # Windows
    stop_helpers_with_the_kernel()  # the forkserver is the kernel's child: see kernel_shutdown
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["ddp_lab.forkserver_preload"])
    return context


def start_forkserver():
    """Start the forkserver now, in the background, rather than at the first launch.

    It takes a second or two to start, because it imports torch. Called in a
    notebook's first cell, it gets ready while the reader reads, and the
    first launch is then as fast as the next ones. Returns at once; does
    nothing if the forkserver already runs, or where there is none (Windows).
    """
    context = forkserver_context()
    if context.get_start_method() == "forkserver":
        from multiprocessing import forkserver

        forkserver.ensure_running()


class RankProcesses:
    """``plan.world_size`` running ranks and the lines to talk to them."""

    def __init__(self, plan, *, first_jobs=(), source_lines=None):
        _check_main_module_can_be_imported()
        self.plan = plan
        self._store, self.port = _loopback_store(plan.timeout)
        context = forkserver_context()
        self._ranks = []
        self._killed = False
        try:
            for rank in range(plan.world_size):
                setup = self._setup(rank, source_lines or {})
                self._ranks.append(_start_rank(context, setup, first_jobs))
        except BaseException:
            self.kill()
            raise

    def _setup(self, rank, source_lines):
        plan = self.plan
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

    def send_all(self, job):
        for r in self._ranks:
            r.control.send(job)

    def collect(self, timeout):
        """Wait for every rank's reply to the current job, or for trouble."""
        outcome = Outcome()
        pending = {r.rank for r in self._ranks}
        deadline = time.monotonic() + timeout
        grace_end = None
        while pending:
            if grace_end is None and (outcome.failures or outcome.died):
                grace_end = time.monotonic() + FAILURE_GRACE
            until = deadline if grace_end is None else min(deadline, grace_end)
            remaining = until - time.monotonic()
            if remaining <= 0:
                outcome.timed_out = grace_end is None
                break
            self._wait_once(pending, outcome, remaining)
        if pending:
            outcome.unfinished = self._ask_where(pending)
        return outcome

    def _wait_once(self, pending, outcome, seconds):
        lines = {}
        for r in self._ranks:
            if r.output_pipe is not None:
                lines[r.output_pipe] = ("output", r)
            if r.rank in pending:
                lines[r.control] = ("control", r)
                lines[r.process.sentinel] = ("exited", r)
        for line in wait(list(lines), timeout=max(0.0, seconds)):
            kind, r = lines[line]
            if kind == "output":
                self._read_output(r)
            elif r.rank in pending:
                self._read_reply(r, pending, outcome)

    def _read_reply(self, r, pending, outcome):
        message = _receive(r.control)
        if message is None or message[0] == "stack":
            if message is None or not r.process.is_alive():
                r.process.join(1.0)
                outcome.died[r.rank] = r.process.exitcode
                pending.discard(r.rank)
            return
        pending.discard(r.rank)
        self._read_output(r)  # what it printed before replying is in the pipe
        if message[0] == "done":
            outcome.results[r.rank] = message[1]
        else:
            outcome.failures[r.rank] = message[1]

    def _ask_where(self, pending):
        """Ask still-running ranks for their stacks; describe each in a line."""
        where = {rank: "no answer (stuck outside Python?)" for rank in pending}
        asked = [r for r in self._ranks if r.rank in pending]
        for r in asked:
            try:
                r.control.send(("where",))
            except OSError:
                where[r.rank] = "its process is gone"
        deadline = time.monotonic() + WHERE_GRACE
        waiting = {r.control: r for r in asked}
        while waiting and time.monotonic() < deadline:
            for line in wait(list(waiting), timeout=deadline - time.monotonic()):
                r = waiting[line]
                message = _receive(r.control)
                if message is None or message[0] == "stack":
                    del waiting[line]
                if message is not None and message[0] == "stack":
                    where[r.rank] = describe_where(message[1])
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
        """Everything printed since the last call, one string per rank."""
        for r in self._ranks:
            self._read_output(r)
        return [r.output.take() for r in self._ranks]

    def interrupt(self):
        """Send Ctrl-C (SIGINT) to every rank; a running job raises KeyboardInterrupt."""
        for r in self._ranks:
            _signal_group(r.process, signal.SIGINT)

    def close(self):
        """Let every rank leave its process group and exit; kill latecomers."""
        for r in self._ranks:
            try:
                r.control.send(("exit",))
            except OSError:
                pass
        deadline = time.monotonic() + EXIT_GRACE
        for r in self._ranks:
            r.process.join(max(0.0, deadline - time.monotonic()))
        self.kill()

    def kill(self):
        """Stop every rank and whatever it started, at once, and free everything."""
        if self._killed:
            return
        self._killed = True
        for r in self._ranks:
            _signal_group(r.process, signal.SIGKILL)
        for r in self._ranks:
            r.process.join()
            self._read_output(r)
            r.control.close()
            if r.output_pipe is not None:
                r.output_pipe.close()
                r.output_pipe = None
            r.process.close()
        self._store = None  # closes the store's listening socket


def _check_main_module_can_be_imported():
    """Refuse a launch that multiprocessing would break in every rank.

    Like ``torch.multiprocessing.spawn``, each rank imports the caller's
    script (as ``__mp_main__``) before it starts: a script is fine (with the
    usual ``if __name__ == "__main__":`` guard), a notebook is fine (it has
    no file), but code piped into ``python -`` names a file that does not
    exist, and every rank would die on start-up.
    """
    import sys

    main_file = getattr(sys.modules.get("__main__"), "__file__", None)
    if main_file is not None and not os.path.exists(main_file):
        raise RuntimeError(
            f"cannot start ranks from code whose __main__ is {main_file!r}: each rank "
            "re-imports the main script, and this one is not a file. Save the code "
            "to a .py file (with an `if __name__ == \"__main__\":` guard) or run it "
            "in a notebook.")


def _start_rank(context, setup, first_jobs):
    control, rank_control = context.Pipe(duplex=True)
    output_pipe, rank_output = context.Pipe(duplex=False)
    process = context.Process(
        target=rank_main,
        args=(setup, rank_control, rank_output, tuple(first_jobs)),
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


def _signal_group(process, signum):
    if process.pid is None or process.exitcode is not None:
        return
    try:
        os.killpg(process.pid, signum)  # the rank leads its own process group
    except (ProcessLookupError, PermissionError):
        try:
            os.kill(process.pid, signum)
        except ProcessLookupError:
            pass
