"""The forkserver every rank is forked from (Chapter 3: how ``launch`` starts ranks fast).

Why a forkserver? Starting a fresh Python and importing torch takes seconds
(that is what ``torch.multiprocessing.spawn`` pays). Forking the notebook is
fast but unsafe once the notebook has touched CUDA, because a forked child
inherits a CUDA context it cannot use. Python's *forkserver* is a small helper
process started once, which imports torch but never CUDA, and forks each rank
from itself: fast like fork, safe like spawn. It holds no process group and
no port between launches.

The forkserver imports ``ddp_lab.launcher.forkserver_preload`` once when it
starts, and any module named with ``add_forkserver_preload()`` before that;
``start_forkserver()``, in a notebook's first cell, starts it in the
background.

The forkserver belongs to the process that started it. A child made with
``os.fork()`` inherits its parent's record of it (multiprocessing's
``ForkServer``), but the forkserver is not the child's child: multiprocessing
would fail on the child's first launch with a bare ``ChildProcessError``.
The launcher notes which process started each forkserver and, in any other
process, forgets the inherited one and starts a forkserver of its own
(``_forget_inherited_forkserver``).
"""

from __future__ import annotations

import importlib.util
import multiprocessing
import os
import threading
import time

from ddp_lab.launcher import shutdown

PRELOAD = "ddp_lab.launcher.forkserver_preload"
_added_preloads: list[str] = []  # add_forkserver_preload's, imported before PRELOAD
_started_by: dict[int, int] = {}  # forkserver pid -> pid of the process that started it


def forkserver_context():
    """The multiprocessing context ranks are started from (see module doc): a getter, it changes nothing."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")  # Windows
    return multiprocessing.get_context("forkserver")


def prepare_forkserver():
    """Make the forkserver ready for this process's next launch; return its context.

    Forgets a forkserver inherited through ``os.fork()``, has a Jupyter
    kernel stop the helpers when it shuts down (``shutdown``), and names the
    modules the forkserver imports when it starts.
    """
    context = forkserver_context()
    if context.get_start_method() != "forkserver":
        return context
    _forget_inherited_forkserver()
    shutdown.stop_helpers_with_the_kernel()  # the forkserver is the kernel's child
    context.set_forkserver_preload([*_added_preloads, PRELOAD])  # PRELOAD freezes them all
    return context


def add_forkserver_preload(*module_names: str) -> None:
    """Have the forkserver import these modules too, once, before it forks any rank.

    A function defined in an importable module travels to the ranks by
    reference, as its module's name and its own: every rank imports that
    module when it starts, and everything the module imports. A function
    from a pytest test file makes each rank import pytest, about 0.2 s of CPU
    (two ranks: 0.29 core-seconds per launch instead of 0.12). Imported once
    in the forkserver, such modules are already in every rank it forks, like
    torch; ddp_lab's own tests preload pytest this way (tests/conftest.py).

    Call it before the first launch, or ``start_forkserver()``: a running
    forkserver has done its imports, so that raises ``RuntimeError``. A name
    no module has raises ``ValueError`` (the forkserver itself would skip it
    without a word).
    """
    from multiprocessing import forkserver

    for name in module_names:
        if not _is_module(name):
            raise ValueError(f"add_forkserver_preload: no module named {name!r} can be imported; "
                             "give the names of modules, as in an import statement")
    _forget_inherited_forkserver()
    if getattr(forkserver._forkserver, "_forkserver_pid", None) is not None:
        raise RuntimeError(f"cannot preload {', '.join(module_names)}: the forkserver already runs "
                           "and has done its imports; call add_forkserver_preload before the first launch")
    _added_preloads.extend(name for name in module_names if name not in _added_preloads)


def _is_module(name) -> bool:
    try:
        return isinstance(name, str) and importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # a missing parent package; an empty or relative name
        return False


def start_forkserver():
    """Start the forkserver now, in the background, rather than at the first launch.

    It takes a second or two to start, because it imports torch. Called in a
    notebook's first cell, it gets ready while the reader reads, and the
    first launch is then as fast as the next ones. Returns at once; does
    nothing if the forkserver already runs, or where there is none (Windows).
    """
    from ddp_lab.launcher.config import check_working_directory

    check_working_directory()  # multiprocessing's start of the forkserver asks for it
    context = prepare_forkserver()
    if context.get_start_method() == "forkserver":
        from multiprocessing import forkserver

        forkserver.ensure_running()
        _note_owner()


# How a launch fails when the forkserver dies under it (start_process's docstring).
_FORKSERVER_GONE = (ConnectionError, FileNotFoundError, EOFError)


def start_process(process):
    """``process.start()``, and once more on a fresh forkserver if the old one has just died.

    The forkserver exits when a request to it breaks off (another process of
    this user connects to its socket and closes it, or a full table of file
    descriptors cuts a launch's request short). It then takes a fraction of
    a second to die, and a launch in that window fails in one of two ways:

    - the forkserver has closed its socket but is not dead yet, so
      multiprocessing's ``ensure_running`` does not restart it, and the
      launch's connection is refused (``ConnectionRefusedError``), or the
      socket file is gone (``FileNotFoundError``);
    - the launch connected just before the socket closed: its request waits
      in the socket's queue behind the broken one, and the forkserver dies
      holding it. The launch then reads the end of the pipe where the rank's
      pid should come (``EOFError: unexpected EOF``, from
      ``multiprocessing.forkserver.read_signed``), or its request is cut off
      while it is sent (``ConnectionResetError``, ``BrokenPipeError``).

    Either way no rank was started. Here the old forkserver is waited for (at
    most ``grace`` seconds, then killed), multiprocessing starts a new one,
    and the start is tried once more, saying so in one line.
    """
    try:
        process.start()
    except _FORKSERVER_GONE as error:
        _wait_for_dead_forkserver()
        print(f"ddp_lab: the forkserver had stopped ({type(error).__name__}: {error}); "
              "started a new one", flush=True)
        process.start()
    _note_owner()


def _note_owner():
    """Record that this process started (or runs with) the forkserver multiprocessing now has."""
    from multiprocessing import forkserver

    pid = getattr(forkserver._forkserver, "_forkserver_pid", None)
    if pid is not None:
        _started_by[pid] = os.getpid()  # after _forget_inherited_forkserver: this process's


def _forget_inherited_forkserver():
    """In a child made with ``os.fork()``, forget the forkserver its parent started.

    multiprocessing's ``ForkServer`` keeps the forkserver's pid, socket and
    the write end of a pipe that keeps it alive; ``os.fork()`` copies them
    into the child, whose launch would then ask ``waitpid`` about a process
    that is not its child (``ChildProcessError``). When the forkserver was
    started by another process than this one (the pid recorded by
    ``_note_owner``; one started outside ``ddp_lab`` counts as this
    process's when it is its child), the record is reset as a fresh
    ``ForkServer`` has it, and the child's copy of the pipe is closed (the
    parent's forkserver then stops when the parent does, as it should). The
    next launch starts a forkserver of this process's own.
    """
    from multiprocessing import forkserver

    server = forkserver._forkserver
    pid = getattr(server, "_forkserver_pid", None)
    if pid is None:
        return
    owner = _started_by.get(pid)
    if owner == os.getpid() or (owner is None and _is_child(pid)):
        return
    alive_fd = server._forkserver_alive_fd
    server._lock = threading.Lock()  # another thread of the parent may have held it at the fork
    server._forkserver_pid = server._forkserver_address = server._forkserver_alive_fd = None
    if alive_fd is not None:
        try:
            os.close(alive_fd)
        except OSError:
            pass


def _is_child(pid) -> bool:
    """Whether ``pid`` is a child of this process (alive or not yet collected)."""
    try:
        os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return False
    return True


def _wait_for_dead_forkserver(grace: float = 5.0):
    """Block until the forkserver has exited (not reaped: multiprocessing reaps and restarts it)."""
    from multiprocessing import forkserver

    pid = getattr(forkserver._forkserver, "_forkserver_pid", None)
    if pid is None:
        return
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        try:
            if os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
                return  # exited; ensure_running will reap it
        except ChildProcessError:
            return
        time.sleep(0.01)
    os.kill(pid, 9)  # alive but not answering: SIGKILL, and let ensure_running reap it
    os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)

