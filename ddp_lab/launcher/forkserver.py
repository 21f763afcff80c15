"""The forkserver every rank is forked from (Chapter 3: how ``launch`` starts ranks fast).

Why a forkserver? Starting a fresh Python and importing torch takes seconds
(that is what ``torch.multiprocessing.spawn`` pays). Forking the notebook is
fast but unsafe once the notebook has touched CUDA, because a forked child
inherits a CUDA context it cannot use. Python's *forkserver* is a small helper
process started once, which imports torch but never CUDA, and forks each rank
from itself: fast like fork, safe like spawn. It holds no process group and
no port between launches.

The forkserver imports ``ddp_lab.launcher.forkserver_preload`` once when it
starts; ``start_forkserver()``, in a notebook's first cell, starts it in the
background.
"""

from __future__ import annotations

import multiprocessing

from ddp_lab.launcher import shutdown


def forkserver_context():
    """The multiprocessing context ranks are started from (see module doc)."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")  # Windows
    shutdown.stop_helpers_with_the_kernel()  # the forkserver is the kernel's child
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["ddp_lab.launcher.forkserver_preload"])
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
