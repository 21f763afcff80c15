"""Ranks that stay alive between cells.

``launch`` starts fresh processes for every call. For interactive work (try a
collective, look at the tensors, try another) it is nicer to keep W ranks
running, with their process group initialised once and their variables kept
from one cell to the next, like ipyparallel's engines::

    ranks = ddp_lab.Ranks(4)
    ranks.execute("t = torch.ones(2) * rank")   # runs on every rank
    ranks.execute("dist.all_reduce(t); t")      # prints each rank's t
    ranks.pull("t")                             # [tensor, tensor, ...]
    ranks.stop()

The ``%%ddp`` cell magic (``ddp_lab.magic``) is a thin layer over this class.

When a cell fails on some rank while the others finish, the ranks stay
usable. When ranks are left stuck (waiting in a collective for the rank that
failed, or past the timeout), they are stopped, and ``restart()`` starts
fresh ones: their variables are gone.
"""

from __future__ import annotations

import atexit
import itertools
import weakref

from . import serialize
from .launcher import interactive_sources, pickle_call, raise_for, show
from .plan import DEFAULT_TIMEOUT, make_plan
from .processes import RankProcesses

# How long ranks get to answer Ctrl-C before they are stopped.
INTERRUPT_GRACE = 1.0

_running = weakref.WeakSet()
_cell_numbers = itertools.count(1)


class Ranks:
    """``world_size`` persistent ranks with an initialised process group."""

    def __init__(self, world_size, *, backend="auto", nodes=1, threads=None,
                 timeout=DEFAULT_TIMEOUT, start=True):
        self.plan = make_plan(world_size, backend=backend, nodes=nodes,
                              threads=threads, timeout=timeout)
        self._processes = None
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
        if self.running:
            return self
        self._processes = RankProcesses(self.plan, first_jobs=[("exec", "", "<ddp start>")])
        _running.add(self)
        self._finish(self.plan.timeout)
        return self

    def stop(self):
        """Let the ranks leave the process group and exit."""
        if self.running:
            processes, self._processes = self._processes, None
            _running.discard(self)
            processes.close()
            show(processes.take_output())

    def restart(self):
        """Stop the ranks (if running) and start fresh ones."""
        self.stop()
        return self.start()

    def execute(self, source, *, timeout=None):
        """Run ``source`` on every rank, print output rank by rank.

        Each rank keeps its own variables between calls. They start with
        ``torch``, ``dist``, ``rank``, ``world_size`` and ``local_rank``.
        The value of a last bare expression is printed, as in a notebook.
        """
        filename = f"<ddp cell {next(_cell_numbers)}>"
        self._submit(("exec", source, filename), timeout)

    def run(self, fn, *args, timeout=None, **kwargs):
        """Call ``fn(*args, **kwargs)`` on every rank; return results by rank."""
        # The cells typed since the ranks started go along, for tracebacks.
        job = ("call", pickle_call(fn, args, kwargs), interactive_sources())
        results = self._submit(job, timeout)
        return [serialize.loads(r) for r in results]

    def pull(self, *names, timeout=None):
        """Fetch variables from every rank: one value (or tuple) per rank."""
        results = [serialize.loads(r) for r in self._submit(("pull", names), timeout)]
        if len(names) == 1:
            return [values[names[0]] for values in results]
        return [tuple(values[n] for n in names) for values in results]

    def _submit(self, job, timeout):
        if not self.running:
            raise RuntimeError(
                "the ranks are not running: start them with ranks.start() "
                "(or %ddp start N in a notebook)")
        self._processes.send_all(job)
        return self._finish(timeout or self.plan.timeout)

    def _finish(self, timeout):
        """Collect one reply per rank; keep or stop the ranks as the outcome says."""
        processes = self._processes
        try:
            outcome = processes.collect(timeout)
        except KeyboardInterrupt:
            processes.interrupt()
            outcome = processes.collect(INTERRUPT_GRACE)
            if not outcome.ok and (outcome.unfinished or outcome.died):
                self._abandon()
            show(processes.take_output())
            raise
        if outcome.unfinished or outcome.died:
            self._abandon()
        show(processes.take_output())
        if not self.running and not outcome.ok:
            print("ddp_lab: the ranks were stopped; ranks.restart() "
                  "(or %ddp restart) starts fresh ones")
        raise_for(outcome, timeout)
        return [outcome.results[rank] for rank in range(self.world_size)]

    def _abandon(self):
        processes, self._processes = self._processes, None
        _running.discard(self)
        processes.kill()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    def __repr__(self):
        state = "running" if self.running else "stopped"
        return f"<Ranks world_size={self.world_size} backend={self.plan.backend!r} {state}>"


@atexit.register
def stop_all_ranks():
    """Stop every ``Ranks`` still running (at exit: Python would wait for them for ever)."""
    for ranks in list(_running):
        ranks._abandon()
