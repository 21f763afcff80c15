"""What the forkserver imports once, before it forks any rank.

The forkserver (see ``ddp_lab.launcher.forkserver``) imports this module when it starts. Every
rank it forks later gets these modules for free, already in memory.

Two lines around the imports follow the recipe in the documentation of
Python's ``gc`` module for a process that forks without exec:

- ``gc.disable()`` while importing. torch and ``torch._dynamo`` create about
  370,000 objects the cyclic garbage collector tracks, and it would walk them
  again and again while they are made, though none of them is garbage: that
  alone takes about a quarter of the import's time.
- ``gc.freeze()`` once they are all made. It moves every object into a
  permanent generation that collections never walk. The ranks forked later
  inherit that generation, so their own collections skip torch's objects, and
  the memory pages holding them stay shared with the forkserver instead of
  being copied when a collection would touch them.

``torch._dynamo`` is imported too because any rank that builds an optimizer
needs it: torch's optimizers import it when their first parameter group is
added.

One more thing is set here, for the forkserver alone: how it dies. When a
request to it breaks off (a process connects to its socket and closes it,
or a launch is killed while it asks for a rank), multiprocessing's loop
(``multiprocessing.forkserver.main``) gets ``EOFError`` while it receives the
request's file descriptors, and the forkserver exits, printing that
traceback on the notebook's stderr. Nothing is wrong with the reader's code:
the next launch starts a new forkserver and says so in one line
(``ddp_lab.launcher.forkserver.start_process``). So the forkserver exits
quietly then (``_quiet_when_a_request_breaks_off``); any other error it dies
of is still printed, and the ranks it forks keep Python's usual hook.

Part of the machinery of Chapter 3's ``launch``.
"""

import gc
import os
import sys


def _quiet_when_a_request_breaks_off():
    forkserver_pid = os.getpid()
    printing = sys.excepthook

    def excepthook(kind, value, tb):
        if os.getpid() == forkserver_pid and _receiving_a_request(tb):
            return  # the next launch says it in one line
        printing(kind, value, tb)

    sys.excepthook = excepthook


def _receiving_a_request(tb):
    """Whether the error came from receiving a request's file descriptors
    (``multiprocessing.reduction.recvfds``, called by the forkserver's loop)."""
    names = []
    while tb is not None:
        code = tb.tb_frame.f_code
        names.append((os.path.basename(code.co_filename), code.co_name))
        tb = tb.tb_next
    return ("forkserver.py", "main") in names and names[-1] == ("reduction.py", "recvfds")


_quiet_when_a_request_breaks_off()

gc.disable()
try:
    import torch  # noqa: F401
    import torch._dynamo  # noqa: F401
    import torch.distributed  # noqa: F401

    from ddp_lab.launcher import worker  # noqa: F401
finally:
    gc.freeze()
    gc.enable()
