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
"""

from __future__ import annotations

import importlib.util
import multiprocessing

from ddp_lab.launcher import shutdown

PRELOAD = "ddp_lab.launcher.forkserver_preload"
_added_preloads: list[str] = []  # add_forkserver_preload's, imported before PRELOAD


def forkserver_context():
    """The multiprocessing context ranks are started from (see module doc)."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")  # Windows
    shutdown.stop_helpers_with_the_kernel()  # the forkserver is the kernel's child
    context = multiprocessing.get_context("forkserver")
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
    context = forkserver_context()
    if context.get_start_method() == "forkserver":
        from multiprocessing import forkserver

        forkserver.ensure_running()
