"""Nothing outlives the notebook: live worker groups and helpers are stopped at exit.

Every worker group (``ddp_lab.launcher.worker_group``), a ``launch`` or
``spawn`` in flight, is registered here while it has ranks
(``stop_at_exit``, ``forget``). At interpreter exit, and when a Jupyter
kernel is told to shut down, each one still registered is killed with
every process it started: left alone, Python's exit would wait on the ranks
for ever. The registry holds the groups themselves, so this module needs
nothing from the rest of the launcher (Chapter 3's "nothing outlives a
launch", and the README's "what outlives a launch").

A Jupyter kernel that launched ranks then shuts down at once, as follows.

A launch leaves two helper processes behind, children of the kernel, which
multiprocessing started: the forkserver (see ``forkserver``) and the
*resource tracker* (it frees shared memory and semaphores that a crashed
process leaves). Both stay until the kernel exits, then leave by themselves.

ipykernel (6.9 and later), asked to shut down or restart, first stops every
child in its process group: it sends SIGTERM and looks again after 0.01,
0.03, 0.1, 0.3, 1, 3 and 10 s, then does the same with SIGKILL. That goes
badly with these two. The resource tracker ignores SIGTERM, so it outlives
the first 14 seconds. And a process that has exited stays in the process
table, a *zombie*, until its parent collects its exit status with
``waitpid``, which the kernel never does: it waited 29 s, every time, for
two processes that were already dead.

So in a kernel, ddp_lab stops both helpers itself at the moment the kernel
is told to shut down, before ipykernel looks for children: it stops ranks
still running (as exit would), ends the forkserver, closes the pipe the
tracker watches, and collects both with ``waitpid``. The kernel then finds
no children and exits at once.

Exit itself is quicker too. As Python shuts down, its garbage collector walks
every object still alive, several times; in a kernel that imported torch
that is a few hundred thousand objects and most of a second. None of them can be
garbage worth finding at that point (the operating system takes the memory
back), so the kernel's objects are frozen out of the collector's sight
(``gc.freeze()``) once it is told to shut down: 1.0 s to exit becomes 0.2 s.
"""

from __future__ import annotations

import atexit
import gc
import multiprocessing.util  # noqa: F401  (its exit handler must run after ours: see below)
import os
import signal
import sys
import threading

_watched_shells = set()
_live = {}  # id -> every worker group with ranks running, in the order they started


def stop_at_exit(group):
    """Have ``group.kill()`` called at interpreter exit or kernel shutdown, unless it is forgotten first."""
    _live[id(group)] = group


def forget(group):
    """``group`` has stopped its ranks: nothing left to stop at exit."""
    _live.pop(id(group), None)


# atexit calls its handlers last registered, first called: registered after
# multiprocessing's own (which joins every child still running, and would
# wait on a running rank for ever), this one stops the ranks before it.
@atexit.register
def stop_all_worker_groups():
    """Kill every worker group still running (a launch in flight in another thread, say)."""
    for group in list(_live.values()):
        _quietly(group.kill)


def stop_helpers_with_the_kernel():
    """In a Jupyter kernel, stop the helpers when the kernel shuts down."""
    shell = kernel_shell()
    if shell is None or id(shell) in _watched_shells:
        return
    _watched_shells.add(id(shell))
    # ipykernel sets exit_now first thing when asked to shut down.
    shell.observe(_stop_helpers, names="exit_now")


def _stop_helpers(change):
    if not change["new"]:
        return
    from multiprocessing import forkserver, resource_tracker

    stop_all_worker_groups()  # what exit would do anyway; ranks keep the tracker's pipe open
    _end_forkserver(getattr(forkserver, "_forkserver", None))
    _end_resource_tracker(getattr(resource_tracker, "_resource_tracker", None))
    gc.freeze()  # the kernel exits next: see the module doc


# Both helpers are multiprocessing's; their pids and _stop() methods (which
# its own tests use: close the helper's pipe, then waitpid) are private, so
# any surprise from another Python version leaves the job to ipykernel.

def _end_forkserver(server):
    """End the forkserver now: it holds nothing but the torch it imported,
    and left to exit by itself it would spend most of a second tearing that down."""
    pid = getattr(server, "_forkserver_pid", None)
    if pid is None:
        return
    _quietly(os.kill, pid, signal.SIGTERM)
    _quietly(server._stop)  # closes its pipe, collects it


def _end_resource_tracker(tracker, grace=1.0):
    """Let the tracker exit by itself (it first frees what was left), and kill
    it if that takes longer than ``grace`` seconds: a rank still alive, say a
    launch running in another thread, would keep its pipe open for ever."""
    pid = getattr(tracker, "_pid", None)
    if pid is None:
        return
    stopping = threading.Thread(target=_quietly, args=(tracker._stop,), daemon=True)
    stopping.start()
    stopping.join(grace)
    if stopping.is_alive():
        _quietly(os.kill, pid, signal.SIGKILL)
        stopping.join(grace)


def _quietly(fn, *args):
    try:
        fn(*args)
    except Exception:
        pass


def kernel_shell():
    """The IPython shell if this process is a Jupyter kernel, else None.

    Looked up, not imported: a script that never loaded IPython is no kernel,
    and importing it just to find out would slow its first launch.
    """
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    return shell if getattr(shell, "kernel", None) is not None else None
