"""Ranks that stay alive between cells.

``launch`` starts fresh processes for every call. For interactive work (try a
collective, look at the tensors, try another) it is nicer to keep W ranks
running, with their process group initialised once and their variables kept
from one cell to the next, like ipyparallel's engines::

    ranks = ddp_lab.Ranks(4)
    ranks.execute("t = torch.ones(2) * rank")   # runs on every rank
    ranks.execute("dist.all_reduce(t); t")      # prints each rank's t
    ranks.pull("t")                             # [tensor, tensor, ...]
    ranks.push(f=f)                             # a notebook function, now on every rank
    ranks.stop()

The ``%%ddp`` cell magic (``ddp_lab.launcher.magic``) is a thin layer over this class.

When a cell fails on some rank while the others finish, the ranks stay
usable; ranks merely busy (computing, sleeping) when another failed are
waited for. Ctrl-C interrupts the cell on every rank, and keeps the ranks.
When ranks are left stuck (waiting in a collective for the rank that
failed, deaf to Ctrl-C, or past the timeout), or a rank died, they are
stopped with a line that says why, and ``restart()`` starts fresh ones:
their variables are gone. A rank found dead before a call starts is named,
and the call runs on no rank.

No chapter uses it yet: a documented tool (README, "Ranks that stay between cells").
"""

from __future__ import annotations

import itertools
import threading
import time

from ddp_lab.launcher import protocol
from ddp_lab.launcher.config import DEFAULT_TIMEOUT, check_timeout, make_plan
from ddp_lab.launcher.errors import RankDied, describe_exit
from ddp_lab.launcher.jobs import interactive_sources, pickle_call, pickle_values
from ddp_lab.launcher.output import show
from ddp_lab.launcher.run_result import raise_for, unpickle_results
from ddp_lab.launcher.worker_group import RankProcesses, interrupts_deferred

# How long ranks get to answer Ctrl-C before they are stopped.
INTERRUPT_GRACE = 1.0
# The last line of RanksTimedOut from persistent ranks: what was lost, what next.
VARIABLES_GONE = ("The ranks were stopped, and the variables they held are gone: %ddp restart "
                  "(or ranks.restart()) starts fresh ones; then run again the cells that made "
                  "the variables you need.")

_cell_numbers = itertools.count(1)


class Ranks:
    """``world_size`` persistent ranks with an initialised process group.

    Every call (``execute``, ``run``, ``pull``) ends with the ranks in step
    with the notebook, whichever way it ends: each rank has replied to it,
    or the ranks were stopped and a message says why. A reply is matched to
    its call by the call's job id, so a call never returns another's reply.
    Calls from two threads take turns.
    """

    def __init__(self, world_size, *, backend="auto", nodes=1, threads=None,
                 timeout=DEFAULT_TIMEOUT, start=True):
        self.plan = make_plan(world_size, backend=backend, nodes=nodes,
                              threads=threads, timeout=timeout)
        self._processes = None
        self._stopped_because = None  # why the ranks were last stopped, if not asked to
        self._lock = threading.RLock()  # one call at a time: they share each rank's pipe
        if start:
            self.start()

    @property
    def world_size(self):
        return self.plan.world_size

    @property
    def running(self):
        return self._processes is not None

    @property
    def pids(self):
        """The process ids of the ranks, in rank order."""
        return self._processes.pids if self.running else []

    def start(self):
        """Start the ranks and initialise their default process group."""
        with self._lock:
            if self.running:
                return self
            self._stopped_because = None
            try:
                with interrupts_deferred():  # ranks that started are always ours to stop
                    self._processes = RankProcesses(
                        self.plan, first_job=(protocol.EXEC, "", "<ddp start>"))
            except BaseException:  # Ctrl-C while they started
                self._abandon("interrupted while they started")
                raise
            self._collect(self.plan.timeout)
        return self

    def stop(self):
        """Let the ranks leave the process group and exit."""
        with self._lock:
            if self.running:
                processes, self._processes = self._processes, None
                processes.close()
                show(processes.take_output())

    def restart(self):
        """Stop the ranks (if running) and start fresh ones."""
        with self._lock:
            self.stop()
            return self.start()

    def execute(self, source, *, timeout=None):
        """Run ``source`` on every rank, print output rank by rank.

        Each rank keeps its own variables between calls. They start with
        ``torch``, ``dist``, ``rank``, ``world_size`` and ``local_rank``.
        The value of a last bare expression is printed, as in a notebook.
        """
        filename = f"<ddp cell {next(_cell_numbers)}>"
        self._call(timeout, protocol.EXEC, source, filename)

    def run(self, fn, *args, timeout=None, **kwargs):
        """Call ``fn(*args, **kwargs)`` on every rank; return results by rank."""
        # The cells typed since the ranks started go along, for tracebacks.
        return self._call(timeout, protocol.CALL, pickle_call(fn, args, kwargs),
                          interactive_sources())

    def push(self, *, timeout=None, **values):
        """Give every rank these variables: ``ranks.push(train=train, data=data)``.

        This is how Python from ordinary notebook cells reaches the ranks: a
        function, class or value defined in the notebook is sent by value
        (cloudpickle, as ``run`` sends its function) and becomes a variable
        of every rank, for the cells that follow. ``%ddp push NAME ...`` does
        the same for the ranks of ``%ddp start``.
        """
        self._call(timeout, protocol.PUSH, pickle_values(values))

    def pull(self, *names, timeout=None):
        """Fetch variables from every rank: one value (or tuple) per rank."""
        results = self._call(timeout, protocol.PULL, names)
        if len(names) == 1:
            return [values[names[0]] for values in results]
        return [tuple(values[n] for n in names) for values in results]

    def _call(self, timeout, kind, *fields):
        """Send one job to every rank and collect its replies: the values, by rank."""
        timeout = self.plan.timeout if timeout is None else check_timeout(timeout)
        with self._lock:
            self._refuse_if_not_ready()
            outcome = self._collect(timeout, send=(kind, *fields))
            return unpickle_results(outcome, self.world_size)

    def _refuse_if_not_ready(self):
        """Refuse a call before any rank runs it: no ranks, or a rank died since the last call."""
        if not self.running:
            why = f" ({self._stopped_because})" if self._stopped_because else ""
            raise RuntimeError(
                f"the ranks are not running{why}: start them with ranks.start() "
                "(or %ddp start N in a notebook)")
        exited = self._processes.exited()
        if exited:
            rank = min(exited)
            processes = self._processes
            self._abandon(f"rank {rank} {describe_exit(exited[rank])} between calls")
            show(processes.take_output())
            raise RankDied(rank, exited[rank], between_calls=True)

    def _collect(self, timeout, send=None):
        """Send the job (if given) and collect the replies; keep or stop the ranks as they say."""
        processes = self._processes
        try:
            if send is not None:
                processes.send_job(*send)
            outcome = processes.collect(timeout, wait_for_busy=True)
        except BaseException as error:  # Ctrl-C, or anything else: leave the ranks in step
            self._abort(error)
            raise
        if outcome.unfinished or outcome.died:
            self._abandon(_why_stopped(outcome, timeout))
            outcome.hint = "\n".join(filter(None, [outcome.hint, VARIABLES_GONE]))
        show(processes.take_output())
        self._say_if_stopped()
        raise_for(outcome, timeout)
        return outcome

    def _abort(self, error):
        """Bring the ranks back in step after a call was left by an exception.

        The ranks still running the job are interrupted (Ctrl-C) and get
        ``INTERRUPT_GRACE`` seconds to reply; another Ctrl-C meanwhile is
        passed on to them. Replies that came before are kept: a rank that had
        finished is not waited for. Ranks that do not reply are stuck, and
        all are stopped, with a message that says why.
        """
        processes = self._processes
        interrupted = bool(processes.job.pending)
        try:
            outcome = self._interrupt_and_collect(processes)
        except BaseException:
            self._abandon(f"they could not be brought back in step after {type(error).__name__}")
            raise
        if outcome.unfinished or outcome.died:
            self._abandon(_why_stopped(outcome, INTERRUPT_GRACE, interrupted=True))
        show(processes.take_output())
        if interrupted and not isinstance(error, KeyboardInterrupt):
            print(f"ddp_lab: {type(error).__name__} in the notebook ended the call; the "
                  "ranks' job was interrupted (Ctrl-C), to keep them in step")
        self._say_if_stopped()

    @staticmethod
    def _interrupt_and_collect(processes):
        deadline = time.monotonic() + INTERRUPT_GRACE
        while True:
            try:
                processes.interrupt()
                return processes.collect(max(0.0, deadline - time.monotonic()), wait_for_busy=True)
            except KeyboardInterrupt:  # Ctrl-C again: the ranks get it too
                continue

    def _abandon(self, why):
        """Stop the ranks at once (they cannot go on) and remember why."""
        if self._processes is None:
            return
        processes, self._processes = self._processes, None
        self._stopped_because = why
        processes.kill()  # what they printed stays readable: take_output()

    def _say_if_stopped(self):
        if not self.running and self._stopped_because:
            print(f"ddp_lab: the ranks were stopped ({self._stopped_because}) and their "
                  "variables are gone; %ddp restart (or ranks.restart()) starts fresh ones")

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    def __repr__(self):
        if self.running:
            exited = self._processes.exited()
            state = "running"
            if exited:
                state += "; " + ", ".join(f"rank {rank} {describe_exit(code)}"
                                          for rank, code in sorted(exited.items()))
                state += ": %ddp restart (or ranks.restart()) starts fresh ranks"
        elif self._stopped_because:
            state = f"stopped ({self._stopped_because})"
        else:
            state = "stopped"
        return f"<Ranks world_size={self.world_size} backend={self.plan.backend!r} {state}>"


def _why_stopped(outcome, timeout, interrupted=False):
    """Why a call's outcome means the ranks cannot go on, in a few words."""
    if outcome.died:
        rank = min(outcome.died)
        return (f"rank {rank} {describe_exit(outcome.died[rank])}: a process group "
                "cannot go on without one of its ranks")
    ranks = _ranks_text(outcome.unfinished)
    if outcome.in_collective and (outcome.failures or interrupted):
        waiting = _ranks_text(outcome.in_collective)
        if outcome.failures:
            return (f"{waiting} waited in torch.distributed for rank "
                    f"{min(outcome.failures)}, which had failed and will never join")
        return f"{waiting} waited in torch.distributed, where Ctrl-C cannot reach"
    if interrupted:
        return f"{ranks} did not answer Ctrl-C within {timeout:g} s"
    return f"{ranks} did not finish within {timeout:g} s"


def _ranks_text(ranks):
    ranks = sorted(ranks)
    return f"rank {ranks[0]}" if len(ranks) == 1 else "ranks " + ", ".join(map(str, ranks))

