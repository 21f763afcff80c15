"""Share the machine, or have it alone: turns for cells that measure time.

A cell that measures time (tagged ``measures-time``) must not share the two
cores with another notebook, or it prints half the machine's speed, and an
invariant it prints ("every DETAIL repeat slower than every plain one") can
flip. Everything else may run side by side. That is a readers-writer lock:
ordinary work takes a *shared* turn, a timing cell takes the machine
*alone*, and once it asks, no new shared turn starts (it is never starved).

The lock is two files locked with ``flock``, so the same lock works between
processes (pytest-xdist's workers; the root conftest.py) and between threads::

    turns = Turns(folder)        # one per participant: each opens its own files
    turns.take(alone=False)      # block until allowed
    ...
    turns.release()

A shared turn takes the *turnstile* file shared for a moment, then the
*machine* file shared; an alone turn takes the turnstile exclusively and
keeps it while it waits for, and then holds, the machine file exclusively.
So a waiting alone turn closes the turnstile to newcomers, and gets the
machine as soon as the shared turns already in have left.

flock locks belong to an open file, not to a process: two ``Turns`` in one
process exclude each other exactly as two processes would. They are freed
when the file is closed, also when a process dies, so a crashed participant
never leaves the machine locked.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

# The tag of a notebook cell that measures time: it takes the machine alone
# (the root conftest.py's nbval turns).
TIMING_TAG = "measures-time"


class Turns:
    """One participant's turns on the machine; the lock files live in ``folder``."""

    def __init__(self, folder: str | os.PathLike):
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        self._turnstile = open(folder / "turnstile.lock", "a+b")
        self._machine = open(folder / "machine.lock", "a+b")
        self.held = None  # None, "shared" or "alone"

    def take(self, alone: bool) -> None:
        """Give up any turn held, then wait for a shared turn, or for the machine alone."""
        self.release()
        if alone:
            fcntl.flock(self._turnstile, fcntl.LOCK_EX)
            fcntl.flock(self._machine, fcntl.LOCK_EX)
        else:
            fcntl.flock(self._turnstile, fcntl.LOCK_SH)
            try:
                fcntl.flock(self._machine, fcntl.LOCK_SH)
            finally:
                fcntl.flock(self._turnstile, fcntl.LOCK_UN)
        self.held = "alone" if alone else "shared"

    def release(self) -> None:
        if self.held is not None:
            fcntl.flock(self._machine, fcntl.LOCK_UN)
            fcntl.flock(self._turnstile, fcntl.LOCK_UN)  # a no-op after a shared turn
            self.held = None

    def close(self) -> None:
        self.release()
        self._turnstile.close()
        self._machine.close()
