"""The errors a launch can end with.

Each error names the rank (or ranks) it is about, because the first question
after a failed distributed run is always *which process?*. A launch that runs
out of time raises an error that is also a built-in ``TimeoutError``, so
``except TimeoutError`` catches it like any other timeout.

Each can be pickled (``__reduce__`` gives the arguments back), so it can
cross a process boundary too: a launch run inside another process pool, say.

Chapter 3 on: what a failed launch says (Chapter 8 catches ``RankFailed``).
"""

from __future__ import annotations


class LaunchError(RuntimeError):
    """Something went wrong in the rank processes of a launch."""


class RankFailed(LaunchError):
    """A rank raised an exception; the message carries its remote traceback.

    Attributes:
        rank: the global rank that raised (the lowest one, if several did).
        exc_type: the exception's class name, e.g. ``"ValueError"``.
        exc_message: ``str()`` of the remote exception.
        remote_traceback: the traceback as the rank saw it.
        exception: the remote exception object itself when it could be
            pickled back, else ``None``.
        other_failures: ``{rank: "ExcType: message"}`` for the other ranks
            that raised too.
        still_running: ``{rank: where}`` for ranks that had not finished
            (typically waiting in a collective for the rank that failed);
            they were stopped.
    """

    def __init__(self, rank, exc_type, exc_message, remote_traceback,
                 exception=None, other_failures=None, still_running=None):
        self.rank = rank
        self.exc_type = exc_type
        self.exc_message = exc_message
        self.remote_traceback = remote_traceback
        self.exception = exception
        self.other_failures = dict(other_failures or {})
        self.still_running = dict(still_running or {})
        headline = f"rank {rank} raised {exc_type}: {exc_message}"
        if self.other_failures:
            others = ", ".join(str(r) for r in sorted(self.other_failures))
            headline += f" (ranks {others} failed too)"
        lines = [headline]
        if self.still_running:
            lines.append("ranks still running were stopped:")
            lines += [f"  rank {r}: {w}" for r, w in sorted(self.still_running.items())]
        lines += ["", f"Traceback from rank {rank}:", remote_traceback.rstrip()]
        super().__init__("\n".join(lines))

    def __reduce__(self):
        return type(self), (self.rank, self.exc_type, self.exc_message, self.remote_traceback,
                            self.exception, self.other_failures, self.still_running)


class RankDied(LaunchError):
    """A rank process ended without reporting a result.

    It was killed by a signal (``signal_name`` is set: SIGKILL is what the
    out-of-memory killer sends) or it exited with a code (``os._exit(3)``).
    With ``between_calls=True`` it died while idle, after one call of
    persistent ``Ranks`` and before the next, which then ran on no rank.
    """

    def __init__(self, rank, exitcode, between_calls=False):
        self.rank = rank
        self.exitcode = exitcode
        self.between_calls = between_calls
        self.signal_name = None
        if exitcode is not None and exitcode < 0:
            self.signal_name = _signal_name(-exitcode)
        how = describe_exit(exitcode)
        if between_calls:
            message = (f"rank {rank} {how} after the last call: this call ran on no rank. "
                       "A process group cannot go on without one of its ranks, so the "
                       "others were stopped too; ranks.restart() (or %ddp restart) "
                       "starts fresh ones")
        elif exitcode is not None and exitcode >= 0:
            message = f"rank {rank} {how} before returning a result"
        else:
            message = f"rank {rank} {how}"
        if exitcode == -9:
            message += "; the kernel's out-of-memory killer sends this one too"
        super().__init__(message)

    def __reduce__(self):
        return type(self), (self.rank, self.exitcode, self.between_calls)


def describe_exit(exitcode):
    """How a process ended, from its exit code: "was killed by signal SIGKILL (9)"."""
    if exitcode is not None and exitcode < 0:
        return f"was killed by signal {_signal_name(-exitcode)} ({-exitcode})"
    return f"exited with code {exitcode}"


class RanksTimedOut(LaunchError, TimeoutError):
    """Some ranks were still running when the launch's timeout expired.

    Attributes:
        timeout: the timeout in seconds.
        unfinished: ``{rank: where}``, where ``where`` says what the rank was
            doing when it was stopped (e.g. waiting in ``all_reduce``).
        hint: what those waits mean, the message's last lines: a collective
            some rank never called, a send with no receive, ranks that never
            came to ``init_process_group`` (``ddp_lab.launcher.where_stuck``).
    """

    def __init__(self, timeout, unfinished, hint=""):
        self.timeout = timeout
        self.unfinished = dict(unfinished)
        self.hint = hint
        ranks = ", ".join(str(r) for r in sorted(self.unfinished))
        lines = [f"ranks {ranks} did not finish within {timeout:g} s and were stopped"]
        if len(self.unfinished) == 1:
            lines[0] = lines[0].replace("ranks", "rank", 1).replace("were", "was")
        for rank in sorted(self.unfinished):
            lines.append(f"  rank {rank}: {self.unfinished[rank]}")
        if hint:
            lines.append(hint)
        super().__init__("\n".join(lines))

    def __reduce__(self):
        return type(self), (self.timeout, self.unfinished, self.hint)


def _signal_name(number):
    import signal

    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"
