"""Running ``torchrun`` from Python: one machine, or two agents as two nodes (Chapters 11, 12).

A chapter (or a test, or a lab checker) runs a real training script the way
a reader would in a terminal, and keeps what it printed:

    >>> run = run_torchrun("train.py", ["--epochs", "1"], nproc_per_node=2)  # doctest: +SKIP
    >>> print(run.command_line)                                              # doctest: +SKIP
    torchrun --standalone --nproc_per_node 2 train.py --epochs 1
    >>> run.rank_lines()                                                     # doctest: +SKIP
    ['[rank 0] restart 0: WORLD_SIZE=2, backend gloo, devices cpu', ...]

The command is ``python -m torch.distributed.run`` with the notebook's own
interpreter, which is the same program the ``torchrun`` command runs, so the
script sees the torch (and ddp_lab) of this kernel. The agent and the workers
it starts are fresh Pythons, as torchrun starts them everywhere.

Everything stays on this machine: each run's agents and workers share a
network namespace of their own whose only interface is loopback
(:mod:`ddp_lab.cluster.private_network`; torchrun's stores would otherwise
listen on every interface), gloo binds to the loopback interface
(``GLOO_SOCKET_IFNAME``) and ports are picked free by the operating system.
Each agent gets a temporary folder of its own (``TMPDIR``), removed with it:
torchrun leaves a ``torchelastic_*`` folder behind in it on every run. An agent still running when a call ends (a
timeout, an error, an interrupted notebook) is stopped together with its
workers, so no process outlives a call. So are the workers of an agent that
died first (killed, say): they would run on, holding its output open. And
an agent whose notebook dies (the kernel killed, with no chance to clean
up) gets SIGTERM from Linux itself (a parent-death signal), on which
torchrun stops its workers.

What the workers print goes to the agent's stdout and stderr; torchrun's own
log lines (restarts, exit codes) go to stderr. A script that prefixes its
lines with ``[rank N]`` can be read back with :meth:`TorchrunRun.rank_lines`,
which is what makes a chapter's output the same on every run. The book's
scripts themselves are found by ``ddp_lab.cluster.scripts``.
"""

from __future__ import annotations

import ctypes
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass

from ddp_lab.cluster.private_network import NOTICE, PrivateNetwork, private_network_available
from ddp_lab.host import free_port, loopback_interface  # free_port: offered here too (Chapter 2)
from ddp_lab.validate import check_int_at_least, check_positive_int

__all__ = ["TorchrunRun", "free_port", "torchrun_command", "run_torchrun", "run_two_nodes", "run_together",
           "start_command", "RESTART_SAFE"]

TORCHRUN_MODULE = ("-m", "torch.distributed.run")  # what the torchrun console script runs

RANK_LINE = re.compile(r"^\[rank (\d+)\] ")
GLUED_RANK_LINE = re.compile(r"(?<=\S)(?=\[rank \d+\] )")  # where a second rank's line begins
# A fresh rendezvous store for each attempt: see loopback_environment.
RESTART_SAFE = {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}
AGENT_LOG = re.compile(r"^[IWEF]\d{4} \d\d:\d\d:\d\d")  # glog: level, date, time
# Every process of one agent (the agent, its workers, what they start) carries
# this variable, set to a value of its own: found by it, a worker is found
# even after its agent died and it was handed to another parent.
RUN_TAG = "DDP_LAB_TORCHRUN_TAG"
# How long the workers of an agent that exited may keep its output open
# before they are taken for orphans and stopped.
ORPHAN_GRACE = 1.0


@dataclass(frozen=True)
class TorchrunRun:
    """One finished ``torchrun`` agent: its command, exit code and output."""

    command: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    @property
    def command_line(self) -> str:
        """The command as a reader would type it: ``torchrun ...``."""
        words = list(self.command)
        if tuple(words[1:3]) == TORCHRUN_MODULE:
            words = ["torchrun"] + words[3:]
        if "--max-restarts" in words:  # restarts need a fresh store per attempt
            words = [f"{name}={value}" for name, value in RESTART_SAFE.items()] + words
        return shlex.join(words)

    def rank_lines(self, rank: int | None = None) -> list[str]:
        """The lines the script printed with a ``[rank N] `` prefix (of ``rank`` only, if given).

        The workers share the agent's stdout, and ``print`` writes its text and
        its newline in two writes: two ranks printing at once can put their
        lines on one line of the pipe (``[rank 3] ... 4[rank 2] ... 4``, then an
        empty line). Such a line is split where the second prefix begins.
        """
        lines = []
        for glued in self.stdout.splitlines():
            for line in GLUED_RANK_LINE.split(glued):
                match = RANK_LINE.match(line)
                if match and (rank is None or int(match.group(1)) == rank):
                    lines.append(line)
        return lines

    def rank_table(self) -> list[dict]:
        """The rows of a rank table the script printed: ``[rank 0]   RANK=0  LOCAL_RANK=0 ...``.

        Each row becomes a dict of its ``NAME=value`` pairs (values as text).
        """
        rows = []
        for line in self.rank_lines():
            words = line.split()[2:]
            if words and words[0].startswith("RANK="):
                rows.append(dict(word.split("=", 1) for word in words if "=" in word))
        return rows

    def tail(self, lines: int = 25) -> str:
        """The last lines the workers printed (stdout, then stderr), for an error message.

        torchrun's own log lines and its closing report (a traceback of the
        agent, then a table of failed ranks) are left out: the workers'
        tracebacks say what went wrong.
        """
        kept = self.stdout.splitlines() + worker_stderr(self.stderr)
        return "\n".join(kept[-lines:])


def worker_stderr(stderr: str) -> list[str]:
    """stderr without torchrun's log lines (``W1122 02:24:27.438000 ...``) and closing report."""
    lines = stderr.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("Traceback") and any("torch/distributed/run.py" in near for near in lines[i:i + 6]):
            lines = lines[:i]  # the agent's own traceback and report start here
            break
    return [line for line in lines if line.strip() and not AGENT_LOG.match(line)]


def torchrun_command(script, args=(), *, nproc_per_node=2, max_restarts=0, nnodes=1,
                     node_rank=None, rdzv_endpoint=None, rdzv_id=None, local_addr="127.0.0.1",
                     extra=()):
    """The command line of one torchrun agent, as a list of words.

    With ``nnodes=1`` and no ``rdzv_endpoint`` the agent runs ``--standalone``:
    it hosts its own rendezvous on a free port. Otherwise it joins the c10d
    rendezvous at ``rdzv_endpoint`` (``host:port``) with ``rdzv_id`` (the
    same on every node) and announces itself as ``local_addr``
    (``--local-addr``; ``127.0.0.1`` by default, so the workers'
    ``MASTER_ADDR`` is loopback too; a node of
    :class:`ddp_lab.cluster.namespaces.Cluster` gives its own address).
    """
    check_positive_int("nproc_per_node", nproc_per_node)
    check_positive_int("nnodes", nnodes)
    check_int_at_least('max_restarts', max_restarts, 0)
    words = [sys.executable, *TORCHRUN_MODULE]
    if nnodes == 1 and rdzv_endpoint is None:
        words += ["--standalone"]
    else:
        if rdzv_endpoint is None or rdzv_id is None:
            raise ValueError("a multi-node run needs rdzv_endpoint ('host:port') and rdzv_id")
        words += ["--nnodes", str(nnodes)]
        if node_rank is not None:
            words += ["--node_rank", str(node_rank)]
        words += ["--rdzv_backend", "c10d", "--rdzv_endpoint", rdzv_endpoint,
                  "--rdzv_id", str(rdzv_id), "--local-addr", str(local_addr)]
    words += ["--nproc_per_node", str(nproc_per_node)]
    if max_restarts:
        words += ["--max-restarts", str(max_restarts)]
    words += [*extra, os.fspath(script), *map(str, args)]
    return words


def loopback_environment(env=None) -> dict:
    """The environment of an agent: this one, plus loopback-only networking.

    ``GLOO_SOCKET_IFNAME`` makes gloo open its sockets on the loopback
    interface; ``OMP_NUM_THREADS=1`` is torchrun's default, set here
    explicitly so it does not print a warning about it; unbuffered output
    keeps the lines of a crashed worker.

    ``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1`` works around a torchrun bug that
    breaks restarts: by default the workers of every attempt share the
    agent's key-value store, and the workers of a restarted attempt can read
    the addresses their crashed predecessors published there, then hang or
    fail to connect (pytorch/pytorch#135712). With it, rank 0 of each attempt
    hosts a fresh store. See :data:`RESTART_SAFE`.
    """
    merged = dict(os.environ)
    interface = loopback_interface()
    if interface:
        merged["GLOO_SOCKET_IFNAME"] = interface
    merged.setdefault("OMP_NUM_THREADS", "1")
    merged["PYTHONUNBUFFERED"] = "1"
    merged.update(RESTART_SAFE)
    merged.update(env or {})
    return merged


def run_together(commands, *, env=None, envs=None, cwd=None, timeout=120.0,
                 private_network=True) -> list[TorchrunRun]:
    """Start every command at once, wait for all, return their runs in order.

    ``env`` adds variables for every command, ``envs`` (a list, one dict per
    command) for each command alone. Each command is started by
    :func:`start_command`, all of them in one private network (a namespace
    whose only interface is loopback) unless ``private_network`` is False:
    the commands of a :class:`~ddp_lab.cluster.namespaces.Cluster` run in
    its nodes' namespaces instead.

    Past ``timeout`` seconds, or on any error (KeyboardInterrupt included),
    every agent still running is stopped with all its workers, and a
    TimeoutError names the commands that were still running.
    """
    commands = list(commands)
    envs = list(envs) if envs is not None else [{}] * len(commands)
    if len(envs) != len(commands):
        raise ValueError(f"envs has {len(envs)} entries for {len(commands)} commands")
    environment = loopback_environment(env)
    tags = [f"{os.getpid()}-{time.monotonic_ns()}-{i}" for i in range(len(commands))]
    network = new_private_network() if private_network else None
    processes = []
    try:
        for command, own, tag in zip(commands, envs, tags):
            processes.append(start_command(command, env={**environment, **own, RUN_TAG: tag}, cwd=cwd,
                                           network=network or False))
            if network:
                network.hold(processes[0].pid)
        outputs = _communicate_all(processes, timeout, tags)
    finally:
        for process, tag in zip(processes, tags):
            stop_agent(process, tag)
        if network:
            network.close()
    if network:
        outputs = [(out, without_lookup_warnings(err)) for out, err in outputs]
    return [TorchrunRun(tuple(process.args), process.returncode, out, err)
            for process, (out, err) in zip(processes, outputs)]


# In a private network there is no name server: torch's store server, naming a
# client for its log, gets "temporary failure" (EAI_AGAIN) where this machine's
# network answers "no such name" and torch prints the address instead. The
# line says nothing about the job.
LOOKUP_WARNING = re.compile(r"^\[W\d{4} [^\]]*socket\.cpp:\d+\] \[c10d\] The hostname of the client socket "
                            r"cannot be retrieved\. err=-3\n", re.M)


def without_lookup_warnings(stderr: str) -> str:
    """stderr without the c10d lines a private network's missing name server causes (see above)."""
    return LOOKUP_WARNING.sub("", stderr)


def start_command(command, *, env, cwd=None, network=None) -> subprocess.Popen:
    """Start one command of a run (a torchrun agent, or ``ip netns exec ... torchrun``).

    In a session of its own, so that stopping it reaches everything it
    started; with its output on pipes, as text. On Linux the command also
    gets SIGTERM when the thread that started it dies (``PR_SET_PDEATHSIG``,
    prctl(2)): a notebook kernel that is killed outright takes its agents
    with it, and torchrun stops its workers on SIGTERM.

    ``network``: the :class:`~ddp_lab.cluster.private_network.PrivateNetwork`
    to run in; None (the default) for one of its own, False for this
    machine's network as it is. ``TMPDIR`` is a new folder, which
    :func:`stop_agent` removes.
    """
    if network is None:
        network = new_private_network()
    folder = tempfile.mkdtemp(prefix="ddp_lab_torchrun_")

    def before_exec():
        _die_with_parent()
        if network:
            network.enter()

    try:
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                   env={**env, "TMPDIR": folder}, cwd=cwd, start_new_session=True,
                                   preexec_fn=before_exec)
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    process.temporary_folder = folder
    return process


def new_private_network():
    """A new loopback-only network for a run, or None (with a notice, once) where the system allows none."""
    if private_network_available():
        return PrivateNetwork()
    global _noticed
    if not _noticed:
        print(NOTICE, file=sys.stderr)
        _noticed = True
    return None


_noticed = False


_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def _die_with_parent():
    """In the child, before exec: ask Linux for SIGTERM when the parent dies (elsewhere: nothing)."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def run_torchrun(script, args=(), *, nproc_per_node=2, max_restarts=0, env=None, cwd=None,
                 timeout=120.0) -> TorchrunRun:
    """Run ``torchrun --standalone --nproc_per_node N script args`` and wait for it."""
    command = torchrun_command(script, args, nproc_per_node=nproc_per_node, max_restarts=max_restarts)
    return run_together([command], env=env, cwd=cwd, timeout=timeout)[0]


def run_two_nodes(script, args=(), *, nproc_per_node=2, rdzv_id="ddp-lab", env=None, cwd=None,
                  timeout=120.0) -> list[TorchrunRun]:
    """Two torchrun agents on this machine, joined as two nodes.

    Both run ``--nnodes 2`` with ``--node_rank 0`` and ``1``, and meet at a
    c10d rendezvous on ``127.0.0.1`` at a free port, exactly as two machines
    would meet at the first one's address. ``rdzv_id`` names the job: agents
    with the same endpoint and id form one job. Returns the two agents' runs,
    node_rank 0 first.
    """
    endpoint = f"127.0.0.1:{free_port()}"
    commands = [torchrun_command(script, args, nproc_per_node=nproc_per_node, nnodes=2, node_rank=n,
                                 rdzv_endpoint=endpoint, rdzv_id=rdzv_id) for n in (0, 1)]
    return run_together(commands, env=env, cwd=cwd, timeout=timeout)


def _communicate_all(processes, timeout, tags):
    """Read every process's output to the end, within one shared deadline.

    One thread per process drains its pipes: two agents of one job wait for
    each other, so an agent blocked on a full pipe while we read the other
    one would stall both.

    The output ends when every process holding the pipes has exited, not
    just the agent: an agent that was killed leaves its workers running (each
    in a session of its own), and they keep writing to its output. Those are
    stopped ``ORPHAN_GRACE`` seconds after their agent is gone.
    """
    outputs = [("", "")] * len(processes)

    def drain(index, process):
        outputs[index] = process.communicate()

    threads = [threading.Thread(target=drain, args=(i, p), daemon=True) for i, p in enumerate(processes)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + timeout
    agent_gone = {}  # index -> when its agent was seen to have exited
    while any(thread.is_alive() for thread in threads):
        now = time.monotonic()
        if now >= deadline:
            still = [shlex.join(p.args[3:]) for p, t in zip(processes, threads) if t.is_alive()]
            raise TimeoutError(f"torchrun still running after {timeout:g} s: {still}")
        for i, (process, thread) in enumerate(zip(processes, threads)):
            if thread.is_alive() and process.poll() is not None:
                if now - agent_gone.setdefault(i, now) >= ORPHAN_GRACE:
                    _kill_all(processes_tagged(tags[i]))  # their output ends with them
        # The last thread may have ended since the loop's test (the orphans just
        # stopped, say): then there is nothing left to wait for.
        alive = next((thread for thread in threads if thread.is_alive()), None)
        if alive is not None:
            alive.join(min(0.1, deadline - now))
    return outputs


def stop_agent(process, tag, grace: float = 5.0):
    """Stop an agent that is still running, and every process it started.

    torchrun starts each worker in a session of its own, so the agent's
    session does not hold them: the workers are listed (with psutil) before
    anything is stopped. The agent gets SIGTERM first, on which torchrun
    stops its workers itself; whatever is still alive after ``grace``
    seconds is killed. Last, any process still carrying the agent's
    ``RUN_TAG`` is killed: workers of an agent that died before them.
    """
    if process.poll() is None:
        family = _descendants(process.pid)
        process.terminate()
        try:
            process.wait(grace)
        except subprocess.TimeoutExpired:
            pass
        _kill_all(family)
        try:
            os.killpg(process.pid, signal.SIGKILL)  # the agent and anything left in its session
        except (ProcessLookupError, PermissionError):
            pass
        process.wait()
    _kill_all(processes_tagged(tag))
    folder = getattr(process, "temporary_folder", None)
    if folder:
        shutil.rmtree(folder, ignore_errors=True)  # torchrun's torchelastic_* folder with it


def _kill_all(members):
    for member in members:
        try:
            member.kill()  # psutil checks the process is still the same one (no reused pid)
        except Exception:  # already gone
            pass


def processes_tagged(tag):
    """The processes whose environment has ``RUN_TAG=tag``: one run's agent and
    workers, and nothing of another run of the same script (empty without psutil)."""
    try:
        import psutil
    except ImportError:
        return []
    tagged = []
    for candidate in psutil.process_iter():
        try:
            if candidate.environ().get(RUN_TAG) == tag:
                tagged.append(candidate)
        except psutil.Error:  # gone, a zombie, or another user's
            pass
    return tagged


def _descendants(pid: int) -> list:
    """The processes started by ``pid`` and by them, recursively (empty without psutil)."""
    try:
        import psutil

        return psutil.Process(pid).children(recursive=True)
    except Exception:  # psutil missing, or the process just exited
        return []
