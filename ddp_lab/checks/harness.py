"""What every lab checker shares: the launch, the sandbox in the ranks, the comparison of tensors.

A checker (Labs 2 to 6) runs the reader's code on real ranks and turns what
happened into a ``CheckResult``; it never raises on a wrong answer. The
pieces they share live here, once:

- ``launch_checked``: start the ranks, and hand back either their values or
  the failure (a hang, a crash, a death), for the checker to explain in the
  words of its own exercise; ``stuck_ranks`` and ``first_line`` put that
  failure in a few words, and ``still_computing`` tells a rank that was merely
  busy (no deadlock) from ranks that wait for each other; a rank whose code
  called ``sys.exit()`` comes back as ``YourCodeExited``, which
  ``exit_mistake`` words;
- ``point_to_point_only``: inside a rank, switch off the collectives the
  exercise must build from send/recv (Labs 2 and 3), each refusal worded by
  the checker, and optionally record every message sent;
- ``close_elements``, ``same_values`` and ``show_values``: in the notebook,
  compare the reader's tensors with the expected ones, and quote them in a
  mistake's message (Labs 2 to 4 and 6).

Which collectives the reader's code issued, with their sizes (Labs 4 and 6),
is written down by the package's one recorder,
``ddp_lab.collectives.recorder.record_collectives``.
"""

from __future__ import annotations

import contextlib

from ddp_lab.checks.result import Mistake
from ddp_lab.launcher.api import launch
from ddp_lab.launcher.errors import RankDied, RankFailed, RanksTimedOut

__all__ = ["FORBIDDEN", "YourCodeExited", "launch_checked", "launch_mistake", "exit_mistake", "stuck_ranks", "still_computing", "first_line",
           "point_to_point_only", "close_elements", "same_values", "show_values"]

# The collectives that move data: switched off where the exercise is to build one.
FORBIDDEN = ("all_gather", "all_gather_into_tensor", "all_gather_single", "all_reduce",
             "reduce", "broadcast", "gather", "scatter", "reduce_scatter",
             "reduce_scatter_tensor", "reduce_scatter_single", "all_to_all",
             "all_to_all_single", "all_gather_object", "broadcast_object_list")


class YourCodeExited(Exception):
    """The reader's code ended a rank with ``sys.exit()``, ``exit()`` or ``raise SystemExit``.

    A launch counts ``sys.exit(0)`` as a normal end with no value (as
    torchrun does), and a nonzero code as a failure: either way nothing
    comes back to check. Raised in the rank by ``_exits_reported``, so that
    the launch stops the other ranks at once (they would wait for this one
    in their next collective until the timeout), and handed to the checker
    by ``launch_checked``. ``code`` is what the code passed to ``sys.exit``;
    ``rank`` the lowest rank that exited; ``also`` the other ranks that did.
    """

    def __init__(self, rank, code, also=()):
        self.rank, self.code, self.also = rank, code, tuple(also)
        call = "sys.exit()" if code is None else f"sys.exit({code})"
        where = _ranks([rank, *self.also])
        super().__init__(
            f"your code called {call} on {where}"
            + (" (or exit(), or raise SystemExit, which do the same)" if code is None else "")
            + ": that ends the rank before the checker sees what your code does, and leaves the other "
              "ranks waiting for it (they were stopped). Return from your function instead of exiting")

    def __reduce__(self):
        return type(self), (self.rank, self.code, self.also)


def _exits_reported(fn, *args):
    """In a rank: ``fn(*args)``, with a ``SystemExit`` turned into ``YourCodeExited``.

    ``code`` travels as text (``repr``): ``sys.exit`` takes any object.
    """
    try:
        return fn(*args)
    except SystemExit as stop:
        import torch.distributed as dist

        rank = dist.get_rank() if dist.is_initialized() else -1
        raise YourCodeExited(rank, None if stop.code is None else repr(stop.code)) from None


def launch_checked(fn, world_size, *, args=(), timeout, threads=None):
    """``(values by rank, None)``, or ``(None, the error)`` if a rank hung, failed, died or exited.

    Always gloo: the checkers compare values bit for bit on the CPU. A rank
    whose code called ``sys.exit`` (any code, 0 included) is reported as a
    ``YourCodeExited``: see ``exit_mistake``.
    """
    try:
        return launch(_exits_reported, world_size, args=(fn, *args), backend="gloo", threads=threads,
                      timeout=timeout), None
    except (RanksTimedOut, RankFailed, RankDied) as error:
        return None, _exited(error) or error


def _exited(error) -> YourCodeExited | None:
    """The ``YourCodeExited`` a ``RankFailed`` carries, with the other ranks that exited too; else None."""
    name = YourCodeExited.__name__
    if not isinstance(error, RankFailed) or error.exc_type != name:
        return None
    also = sorted(r for r, what in error.other_failures.items() if what.startswith(name + ":"))
    exited = error.exception
    code = exited.code if isinstance(exited, YourCodeExited) else None
    return YourCodeExited(error.rank, code, also)


def exit_mistake(where: str, error: YourCodeExited) -> Mistake:
    """The Mistake of kind ``exit`` for ranks whose code called ``sys.exit``."""
    return Mistake(where, "exit", str(error))


def stuck_ranks(error: RanksTimedOut) -> str:
    """``rank 0: waiting in all_reduce() ...; rank 1: ...``: where each unfinished rank was."""
    return "; ".join(f"rank {r}: {w}" for r, w in sorted(error.unfinished.items()))


def busy_ranks(error: RanksTimedOut) -> list[int]:
    """The unfinished ranks that waited for no other rank: still running their own code.

    The launcher's where-line of such a rank reads ``running f() line N: ...``
    (``ddp_lab.launcher.where_stuck.describe_where``); one waiting in a
    collective, a send, a receive or ``wait()`` reads ``waiting in ...``.
    """
    return sorted(rank for rank, where in error.unfinished.items() if where.startswith("running "))


def timed_out(where: str, error: RanksTimedOut, timeout, hint: str) -> Mistake:
    """The Mistake for ranks stopped at the timeout: ``too_slow`` when one was still
    computing (``still_computing``), else a ``hang``, with where each rank waited and
    ``hint``, the exercise's words on what makes its collectives wait."""
    return still_computing(where, error, timeout) or Mistake(
        where, "hang", f"the ranks did not finish within {timeout:g} s ({stuck_ranks(error)}). {hint}")


def launch_mistake(error, timeout, hang_hint: str) -> Mistake:
    """The Mistake for a checked launch that returned no values (``launch_checked``'s error).

    A rank's code called ``sys.exit`` (``exit``, on that rank); the ranks were
    stopped at the timeout (``timed_out``: ``too_slow`` or a ``hang`` with
    ``hang_hint``); or a rank crashed (``crash``, with the error's first line).
    The checkers of Labs 4 and 6 (DDP, accumulation, ZeRO-1) report a failed
    launch with it.
    """
    if isinstance(error, YourCodeExited):
        return exit_mistake(f"rank {error.rank}", error)
    if isinstance(error, RanksTimedOut):
        return timed_out("all ranks", error, timeout, hang_hint)
    return Mistake("a rank", "crash", first_line(error))


def still_computing(where: str, error: RanksTimedOut, timeout) -> Mistake | None:
    """A ``too_slow`` Mistake when some rank was still computing at the timeout; None otherwise.

    A timeout is a deadlock only when every unfinished rank waits for another
    one. If a rank was still running the reader's code, it is slow (or loops
    forever), and the ranks waiting were waiting for it: that is what the
    mistake says, with where each rank was. None leaves the checker to explain
    the deadlock in the words of its exercise.
    """
    busy = busy_ranks(error)
    if not busy:
        return None
    waiting = sorted(set(error.unfinished) - set(busy))
    ranks = _ranks(busy)
    if waiting:
        what = (f"{_ranks(waiting)} {'was' if len(waiting) == 1 else 'were'} waiting for "
                f"{ranks}, which {'was' if len(busy) == 1 else 'were'} still running your code. "
                f"If that code is merely slow, give it more time (e.g. timeout={2 * timeout:g}); "
                "if it never gets to the call the others wait in (a loop that never ends, a branch "
                "that skips it), that is the mistake")
    else:
        what = (f"no rank was waiting for another: {'it was' if len(busy) == 1 else 'they were'} "
                "still running your code, so this is no deadlock. The code is slow, or loops "
                f"forever: make it faster, or give it more time (e.g. timeout={2 * timeout:g})")
    return Mistake(where, "too_slow", f"the ranks did not finish within {timeout:g} s and were stopped; "
                                      f"{what}. Where they were: {stuck_ranks(error)}")


def _ranks(ranks):
    return f"rank {ranks[0]}" if len(ranks) == 1 else "ranks " + ", ".join(map(str, ranks))


def first_line(error: Exception) -> str:
    """The first line of a launch error: which rank, and what it raised or how it died."""
    return str(error).splitlines()[0]


@contextlib.contextmanager
def point_to_point_only(refusal, *, record_sends=False):
    """In a rank, make every collective of ``FORBIDDEN`` raise ``RuntimeError(refusal(name))``.

    Yields a list that, with ``record_sends``, collects ``(destination,
    copy of the tensor)`` for every message this rank sends: whether written
    ``dist.send``, ``dist.isend``, a P2POp or ``group.send`` (as
    ``ddp_lab.ring_all_reduce`` does), a send ends in ``ProcessGroup.send``,
    so that is where it is recorded. Everything is put back on exit. Load
    the reader's function inside the block: ``from torch.distributed import
    all_reduce`` then finds the refusing one.
    """
    import torch.distributed as dist

    def forbidden(name):
        def collective(*args, **kwargs):
            raise RuntimeError(refusal(name))
        return collective

    sends = []
    group_class = dist.ProcessGroup
    original_send = group_class.__dict__["send"]

    def recording_send(group, tensors, dst, *args, **kwargs):
        sends.extend((dst, tensor.detach().clone()) for tensor in tensors)
        return original_send(group, tensors, dst, *args, **kwargs)

    saved = {name: getattr(dist, name) for name in FORBIDDEN if hasattr(dist, name)}
    for name in saved:
        setattr(dist, name, forbidden(name))
    if record_sends:
        group_class.send = recording_send
    try:
        yield sends
    finally:
        group_class.send = original_send
        for name, original in saved.items():
            setattr(dist, name, original)


# ------------------------------------------------------- comparing tensors, quoting them


def close_elements(a, b, *, rtol, atol):
    """Element by element, whether ``a`` and ``b`` agree (a bool tensor).

    Within ``rtol`` and ``atol``, compared in float64, where either holds
    floats; exactly where both hold integers (a sum of whole numbers has one
    right answer). ``a`` and ``b`` must broadcast together.
    """
    if a.dtype.is_floating_point or b.dtype.is_floating_point:
        return a.double().isclose(b.double(), rtol=rtol, atol=atol)
    return a.double() == b.double()


def same_values(a, b, *, rtol=1e-5, atol=1e-8) -> bool:
    """Whether ``a`` and ``b`` have one shape and agree everywhere (:func:`close_elements`).

    The defaults are ``torch.allclose``'s; a checker whose reference takes
    another path through float sums (DDP's buckets, a sharded optimizer)
    passes looser ones.
    """
    return a.shape == b.shape and bool(close_elements(a, b, rtol=rtol, atol=atol).all())


def show_values(tensor, limit=6, digits=4) -> str:
    """``[1, 2.5, 3.142, …]``: a tensor's first ``limit`` values, as a mistake's message quotes them.

    Floats with ``digits`` significant digits, integers whole; ``…`` when
    there are more.
    """
    flat = tensor.flatten().tolist()
    values = [f"{v:.{digits}g}" if isinstance(v, float) else str(v) for v in flat[:limit]]
    return "[" + ", ".join(values) + (", …" if len(flat) > limit else "") + "]"
