"""The launch config: what a launch will do, and refusing bad input before it starts.

Everything here is checked in the notebook, before any process exists: a
mistake in the arguments gets a clear message naming the bad value and what
is allowed, instead of a crash in four processes at once. So is the place
the launch is called from: a script that launches from its top-level code,
without the ``if __name__ == "__main__":`` guard, is told so here
(``check_main_module``), before any rank could die of it; so is a working
directory deleted from under the notebook (``check_working_directory``).

The names follow torch's: ``LaunchConfig`` is what
``torch.distributed.launcher.api.LaunchConfig`` is to torchrun, the
validated settings of one run.

Chapter 3 shows how ``backend="auto"`` decides; Chapter 14 asks it on a GPU machine.
"""

from __future__ import annotations

import ast
import os
import sys
import threading
from dataclasses import dataclass

from ddp_lab.host import available_cores, cuda_device_count
from ddp_lab.launcher.errors import wrap
from ddp_lab.validate import check_divisible, check_positive_int, check_positive_number

BACKENDS = ("auto", "gloo", "nccl")
# What "auto" initialises when every rank has a GPU: nccl for CUDA tensors and
# gloo for CPU tensors, in one process group. Plain "nccl" maps only the cuda
# device (torch's Backend.backend_capability["nccl"] is ["cuda"]), so a
# collective on a CPU tensor would raise "No backend type associated with
# device type cpu"; the book's CPU examples must run unchanged on a GPU box.
GPU_AND_CPU = "cpu:gloo,cuda:nccl"
# How the ranks meet (``LaunchConfig.style``): "torchrun", the launcher hosts
# the store and sets torchrun's variables (``launch``); "spawn", as under
# ``torch.multiprocessing.spawn``, the ranks' own code chooses where to meet
# (``ddp_lab.spawn``).
STYLES = ("torchrun", "spawn")
DEFAULT_TIMEOUT = 60.0
# Collectives and the rendezvous store must not give up before the launcher does:
# the launcher's own timeout, which also says where ranks were stuck, ends a hang
# first. They get this much longer (``LaunchConfig.process_group_timeout``); so
# does a process that runs a launch and is given up on from outside
# (``ddp_lab.gpu_check.launches``): the one home of the margin.
TIMEOUT_MARGIN = 60.0
# Every timeout (a launch's, a spawn's) is at most a week. Waiting on the
# ranks' pipes counts in milliseconds held in a C int, which overflows past
# 24.8 days; a week is far beyond any lesson's need.
MAX_TIMEOUT = 7 * 24 * 3600.0
# All ranks run on this one machine, one process each.
MAX_WORLD_SIZE = 256
MAX_THREADS = 256


@dataclass(frozen=True)
class LaunchConfig:
    """A validated launch: how many ranks, which backend, how long to wait."""

    world_size: int
    nodes: int
    backend: str
    threads: int
    timeout: float
    init_process_group: bool
    style: str = "torchrun"

    @property
    def ranks_per_node(self):
        return self.world_size // self.nodes

    @property
    def process_group_timeout(self) -> float:
        """Seconds the ranks' collectives and store wait: the launch's timeout and ``TIMEOUT_MARGIN``."""
        return self.timeout + TIMEOUT_MARGIN


def make_config(world_size, *, backend="auto", nodes=1, threads=None,
                timeout=DEFAULT_TIMEOUT, init_process_group=True, style="torchrun",
                world_size_name="world_size"):
    """Check the arguments of a launch and resolve ``backend="auto"``: a ``LaunchConfig``.

    ``world_size_name`` is what the caller calls the number of ranks
    (``spawn`` says ``nprocs``, as ``torch.multiprocessing.spawn`` does).
    """
    check_positive_int(world_size_name, world_size, MAX_WORLD_SIZE,
                       "processes on this one machine")
    if style not in STYLES:
        raise ValueError(f"unknown style {style!r}: use one of {', '.join(map(repr, STYLES))}")
    check_positive_int("nodes", nodes)
    check_divisible(world_size_name, world_size, "nodes", nodes,
                    f"each node runs the same number of ranks; use a nodes value that divides {world_size}")
    if threads is not None:
        check_positive_int("threads", threads, MAX_THREADS, "threads per rank")
    timeout = check_timeout(timeout)
    return LaunchConfig(
        world_size=world_size,
        nodes=nodes,
        backend=choose_backend(backend, world_size),
        threads=threads or threads_per_rank(world_size),
        timeout=timeout,
        init_process_group=bool(init_process_group),
        style=style,
    )


def check_timeout(timeout, name="timeout"):
    """The one rule for every timeout: a finite number of seconds > 0, at most ``MAX_TIMEOUT``.

    Checked before anything starts or is sent, so a bad value never leaves
    ranks running (or stopped) behind a confusing error. ``inf`` is refused
    like ``nan``: a launch always ends. Returns it as a float.
    """
    return float(check_positive_number(name, timeout, "seconds", maximum=MAX_TIMEOUT, what="one week"))


def choose_backend(backend, world_size):
    """What the ranks' process group is initialised with.

    ``"gloo"`` and ``"nccl"`` as asked (nccl only with a GPU for every rank).
    ``"auto"``: when every rank can have a GPU of its own, ``GPU_AND_CPU``
    (``"cpu:gloo,cuda:nccl"``: nccl for CUDA tensors, gloo for CPU tensors,
    as ``torch.distributed.init_process_group`` documents for a
    device-to-backend string); otherwise gloo. It says once, in the output,
    which one it picked and why.
    """
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}: use one of {', '.join(map(repr, BACKENDS))}")
    gpus = cuda_device_count()
    if backend == "nccl" and gpus < world_size:
        # wrapped at 80 characters, the width of the book's pages (Chapter 3)
        raise ValueError(wrap(
            f"backend 'nccl' needs one CUDA device per rank: world_size={world_size} "
            f"but this machine has {gpus}. Use backend='gloo' (CPU) or fewer ranks."))
    if backend != "auto":
        return backend
    devices = f"{gpus} CUDA device{'s' if gpus != 1 else ''} for {world_size} rank{'s' if world_size != 1 else ''}"
    if gpus >= world_size:
        choice, why = GPU_AND_CPU, f"{devices}: nccl for CUDA tensors, gloo for CPU tensors"
    elif gpus:
        choice, why = "gloo", f"only {devices}"
    else:
        choice, why = "gloo", "no CUDA device"
    say_once(f"ddp_lab: backend 'auto' chose {choice!r} ({why})")
    return choice


def threads_per_rank(world_size):
    """Intra-op threads for each rank when the launch does not say.

    ``OMP_NUM_THREADS`` if it is set, as torchrun does (it passes the
    variable on to every worker, and sets it to 1 only when it is missing and
    more than one worker runs per node: ``torch/distributed/run.py``);
    otherwise the CPU cores this process may use, shared evenly, at least one
    each. The book prints nothing that depends on this count: threads split
    a reduction's float sums differently, so the printed numbers hold on any
    setting (``tools/cpu_variants.py`` checks; Chapter 10 says why).
    """
    configured = os.environ.get("OMP_NUM_THREADS", "").split(",")[0].strip()
    if configured:  # "4,2" (nested OpenMP levels): the first is the intra-op count
        if not configured.isdigit() or not 1 <= int(configured) <= MAX_THREADS:
            raise ValueError(
                f"OMP_NUM_THREADS={configured!r} in the environment is not a whole number "
                f"of threads from 1 to {MAX_THREADS}: set it to e.g. 1, or unset it to "
                "share the cores")
        return int(configured)
    return max(1, available_cores() // world_size)


_said = set()


def say_once(message):
    """Print ``message`` the first time it is asked for in this process (a launch's notices)."""
    if message not in _said:
        _said.add(message)
        print(message)


def check_working_directory():
    """Refuse a launch from a working directory that no longer exists.

    Every rank starts in the caller's working directory, and multiprocessing
    asks for it (``os.getcwd()``) before it forks one; a folder deleted after
    ``os.chdir`` into it (a temporary folder, say) would end the launch with a
    bare ``FileNotFoundError`` from deep inside multiprocessing. Say what it is,
    before anything starts.
    """
    try:
        os.getcwd()
    except FileNotFoundError:
        try:  # Linux still knows which folder it was: "/tmp/tmpab12 (deleted)"
            was = " (" + os.readlink("/proc/self/cwd") + ")"
        except OSError:
            was = ""
        raise FileNotFoundError(
            f"the current working directory{was} no longer exists: it was deleted after this "
            "process changed into it, and every rank would start there. os.chdir to an existing "
            "folder (e.g. os.chdir(os.path.expanduser(\"~\"))) and try again.") from None


def check_main_module():
    """Refuse a launch that multiprocessing would break in every rank.

    Like ``torch.multiprocessing.spawn``, each rank imports the caller's
    script (as ``__mp_main__``) before it starts. A notebook is fine (it has
    no file). Code piped into ``python -`` names a file that does not exist,
    and every rank would die on start-up. A script is fine if it launches
    from under the usual ``if __name__ == "__main__":`` guard; without it,
    the launch in its top-level code runs again in each rank as the rank
    imports it, multiprocessing refuses to start ranks from a rank still
    starting, and every rank dies with exit code 1.

    A launch from another thread is looked at the same way: a thread that the
    script's unguarded top-level code started is started again in every rank
    as it imports the script, and launches from there (each rank then fails
    to start ranks of its own and leaves a ``pymp-*`` folder behind). So the
    main thread is looked at: if it runs the script's top-level code outside
    the guard (``_check_thread_of_main_script``), the launch is refused as if
    it came from that line.
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
        raise RuntimeError(_unguarded(top_level.f_code.co_filename, top_level.f_lineno))
    if top_level is None and main_file is not None \
            and threading.current_thread() is not threading.main_thread():
        _check_thread_of_main_script(main)


def _unguarded(filename, line=None, thread=False):
    """The message refusing a launch from a script's top-level code outside the guard.

    ``line`` is the top-level statement running (None: the script has ended,
    and has no guard at all); ``thread``, whether the launch came from a thread.
    """
    where = "its top-level code" + (f", line {line}," if line is not None else "")
    if not thread:
        how = ""
    elif line is not None:
        how = " (from a thread, while the main thread runs that line)"
    else:
        how = " (from a thread that code started)"
    again = "that line" if line is not None else "that code"
    if thread:
        again += ", and start the thread,"
    return (f"{filename} starts ranks from {where} without the `if __name__ == \"__main__\":` "
            f"guard{how}. Each rank imports the script before it starts, and would run {again} "
            "again. Put the code that launches under the guard:\n\n"
            "    if __name__ == \"__main__\":\n        ddp_lab.launch(...)")


def _main_script_frame(main, frame=None):
    """The frame running the main script's top-level code, if this call came from it
    (or, given ``frame``, if that stack holds it)."""
    frame = sys._getframe() if frame is None else frame
    while frame is not None:
        if frame.f_code.co_name == "<module>" and main is not None \
                and frame.f_globals is vars(main):
            return frame
        frame = frame.f_back
    return None


def _check_thread_of_main_script(main):
    """Refuse a launch from a thread while the script's unguarded top-level code runs.

    The main thread's stack says where the script is (``sys._current_frames``):
    in a top-level statement outside the guard, that statement started or
    awaits this launch, and every rank would run it again. When the main
    thread has left the script's code (it waits for the other threads to
    end before the interpreter exits), Python has taken ``__file__`` from a
    script run by its path, and the ranks import nothing; a module run with
    ``python -m`` keeps it and is imported again by name, so one with no
    guard at all has started this thread from its top level.
    """
    stack = sys._current_frames().get(threading.main_thread().ident)
    top_level = _main_script_frame(main, stack) if stack is not None else None
    if top_level is not None:
        if not _under_main_guard(top_level):
            raise RuntimeError(_unguarded(top_level.f_code.co_filename, top_level.f_lineno, thread=True))
    elif not _has_main_guard(main.__file__):
        raise RuntimeError(_unguarded(main.__file__, thread=True))


def _under_main_guard(frame):
    """Whether the frame's current top-level statement is ``if __name__ == "__main__":``.

    When the source cannot be read or parsed, the answer is yes: only a
    script known to lack the guard is refused.
    """
    tree = _parsed(frame.f_code.co_filename)
    if tree is None:
        return True
    line = frame.f_lineno
    for statement in tree.body:
        if statement.lineno <= line <= statement.end_lineno:
            return isinstance(statement, ast.If) and _tests_main_name(statement.test)
    return True


def _has_main_guard(filename):
    """Whether the script has an ``if __name__ == "__main__":`` at its top level (yes if unreadable)."""
    tree = _parsed(filename)
    return tree is None or any(isinstance(statement, ast.If) and _tests_main_name(statement.test)
                               for statement in tree.body)


def _parsed(filename):
    """The script's syntax tree, or None when it cannot be read or parsed."""
    try:
        with open(filename, encoding="utf-8") as source:
            return ast.parse(source.read())
    except (OSError, SyntaxError, ValueError):
        return None


def _tests_main_name(test):
    """``__name__ == "__main__"``, written either way round."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1
            and isinstance(test.ops[0], ast.Eq)):
        return False
    sides = {ast.dump(test.left), ast.dump(test.comparators[0])}
    return sides == {ast.dump(ast.Name("__name__", ast.Load())), ast.dump(ast.Constant("__main__"))}
