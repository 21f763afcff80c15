"""Where is it stuck? One line for each rank that did not finish (Chapter 3, "when ranks hang").

When a launch times out, the launcher asks each unfinished rank for the
stack of its main thread. A raw stack is long; what a reader needs is the
collective the rank is waiting in and the line of *their* code that called
it, e.g.::

    waiting in all_reduce() (torch.distributed), called from work() line 4: dist.all_reduce(t)
"""

from __future__ import annotations

import importlib.util
import os

# Where torch is installed, found without importing it (that takes a second).
_TORCH_DIR = os.path.dirname(importlib.util.find_spec("torch").origin) + os.sep
_DISTRIBUTED_DIR = os.path.join(_TORCH_DIR, "distributed") + os.sep
_DDP_LAB_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep  # the package, all of it
_STDLIB_DIR = os.path.dirname(os.__file__) + os.sep


def describe_where(frames):
    """One line about a stack given as (filename, lineno, function, code) tuples."""
    if not frames:
        return "no Python stack (stuck in C code)"
    user = [f for f in frames if _is_user_code(f[0])]
    torch_call = _outermost_torch_call(frames, after=user[-1] if user else None)
    if not user:
        if torch_call:
            return f"waiting in {torch_call} (while starting up)"
        return "idle, waiting for a job"
    filename, lineno, function, code = user[-1]
    where_in = "cell" if function == "<module>" else f"{function}()"
    place = f"{where_in} line {lineno}" + (f": {code}" if code else "")
    if torch_call:
        return f"waiting in {torch_call}, called from {place}"
    return f"running {place}"


def waits_in_torch_distributed(frames):
    """Whether the stack is inside torch.distributed: in a collective, a
    send/recv or the rendezvous, which other ranks must join to end it.

    After a rank failed, such a rank is stuck (the failed one will never
    join), while a rank that is computing or sleeping will finish.
    """
    return any(filename.startswith(_DISTRIBUTED_DIR) for filename, *_ in frames)


def _outermost_torch_call(frames, after):
    """The torch.distributed function the user's code called, if any."""
    start = frames.index(after) + 1 if after is not None else 0
    for filename, _, function, _ in frames[start:]:
        if filename.startswith(_TORCH_DIR) and function != "wrapper":
            module = "torch.distributed" if "distributed" in filename else "torch"
            return f"{function}() ({module})"
    return None


def _is_user_code(filename):
    if filename.startswith((_TORCH_DIR, _DDP_LAB_DIR)):
        return False
    return not filename.startswith(_STDLIB_DIR) or "site-packages" in filename
