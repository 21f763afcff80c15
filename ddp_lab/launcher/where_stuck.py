"""Where is it stuck? One line for each rank that did not finish (Chapter 3, "when ranks hang").

When a launch times out, the launcher asks each unfinished rank for the
stack of its main thread. A raw stack is long; what a reader needs is the
collective the rank is waiting in and the line of *their* code that called
it, e.g.::

    waiting in all_reduce() (torch.distributed), called from work() line 4: dist.all_reduce(t)

and, under all the lines, one hint about what such a wait means. The hint
depends on what the ranks wait in (``waiting_kind``): a collective (some
rank never called it), a send or a receive (its partner never posted the
other half), or ``init_process_group`` (some rank never came to the
rendezvous; the values the rank passed, which ``main_thread_stack`` reads
from its frame, often say why). A rank that waits in none of these is
merely running its own code, and the hint says nothing about collectives.

A rank builds its stack with ``main_thread_stack``; the notebook reads it
with the other functions here.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import threading
import traceback

# Where torch is installed, found without importing it (that takes a second).
_TORCH_DIR = os.path.dirname(importlib.util.find_spec("torch").origin) + os.sep
_DISTRIBUTED_DIR = os.path.join(_TORCH_DIR, "distributed") + os.sep
_DDP_LAB_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep  # the package, all of it
# ... but for the book's scripts, which the wheel carries inside it (pip install ddp-lab): the
# reader's code, as labs/scripts/ is in a checkout
_BOOK_SCRIPTS_DIR = _DDP_LAB_DIR + "book_scripts" + os.sep
_STDLIB_DIR = os.path.dirname(os.__file__) + os.sep

# torch.distributed functions (torch/distributed/distributed_c10d.py) by what
# a rank blocked in them is waiting for. Any other function there counts as
# a collective: every rank of the group must call it.
POINT_TO_POINT = frozenset({"send", "recv", "isend", "irecv", "batch_isend_irecv",
                            "send_object_list", "recv_object_list"})
RENDEZVOUS = frozenset({"init_process_group"})
# The arguments worth reading from a rank stuck in the rendezvous, by function:
# init_process_group's own, and those of torch/distributed/rendezvous.py's
# _create_c10d_store, which env:// and tcp:// call with the address resolved.
_RENDEZVOUS_ARGUMENTS = {
    "init_process_group": ("init_method", "world_size", "rank"),
    "_create_c10d_store": ("hostname", "port", "world_size", "rank"),
}

COLLECTIVE_HINT = ("A rank that waits in a collective is waiting for a rank that never "
                   "joined it: check that every rank calls the same collectives in the same order.")
POINT_TO_POINT_HINT = ("A rank that waits in send() or recv() (or in wait() on an isend or irecv) is "
                       "waiting for its partner to post the matching recv() or send(): check that every "
                       "send has a receive on the other rank, and that two ranks do not both send first.")


def main_thread_stack():
    """The main thread's stack, outermost first, as (file, line, function, code, arguments).

    ``arguments`` is empty except in the rendezvous functions above, where it
    holds the values passed (``world_size``, ``rank``, the store's
    ``hostname`` and ``port``): read from the live frame, so that a rank
    waiting for ranks that never come can be told which values were wrong.
    """
    frame = sys._current_frames().get(threading.main_thread().ident)
    if frame is None:
        return []
    live = []
    while frame is not None:
        live.append(frame)
        frame = frame.f_back
    live.reverse()
    summaries = traceback.StackSummary.extract(((f, f.f_lineno) for f in live), lookup_lines=True)
    return [(s.filename, s.lineno, s.name, s.line, _rendezvous_arguments_of(f))
            for s, f in zip(summaries, live)]


def _rendezvous_arguments_of(frame):
    names = _RENDEZVOUS_ARGUMENTS.get(frame.f_code.co_name)
    if not names or not frame.f_code.co_filename.startswith(_DISTRIBUTED_DIR):
        return {}
    values = frame.f_locals
    return {name: values[name] for name in names
            if isinstance(values.get(name), (int, str)) and not isinstance(values[name], bool)}


def describe_where(frames):
    """One line about a stack given as (filename, lineno, function, code, ...) tuples."""
    if not frames:
        return "no Python stack (stuck in C code)"
    user = [f for f in frames if _is_user_code(f[0])]
    torch_call = _format_call(_outermost_torch_frame(frames, after=user[-1] if user else None))
    if not user:
        if torch_call:
            return f"waiting in {torch_call} (while starting up)"
        return "in the launcher's own code (starting up or replying), not in the function"
    filename, lineno, function, code = user[-1][:4]
    where_in = "cell" if function == "<module>" else f"{function}()"
    place = f"{where_in} line {lineno}" + (f": {code}" if code else "")
    if torch_call:
        return f"waiting in {torch_call}, called from {place}"
    if waits_on_a_request(frames):
        return f"waiting in wait() on a request (torch.distributed), called from {place}"
    return f"running {place}"


def waits_in_torch_distributed(frames):
    """Whether the stack is inside torch.distributed: in a collective, a
    send/recv or the rendezvous, which other ranks must join to end it.

    After a rank failed, such a rank is stuck (the failed one will never
    join), while a rank that is computing or sleeping will finish.
    """
    return any(frame[0].startswith(_DISTRIBUTED_DIR) for frame in frames)


def waits_on_a_request(frames):
    """Whether the rank is in ``req.wait()`` on the request of an ``isend``/``irecv`` (or of a
    collective with ``async_op=True``).

    ``Work.wait`` is C++: no frame of torch.distributed shows it, only the
    rank's own line calling ``.wait(`` as the innermost frame. (A Python
    ``wait`` such as ``threading.Event.wait`` has frames of its own below.)
    """
    if not frames or not _is_user_code(frames[-1][0]):
        return False
    code = frames[-1][3] or ""
    return ".wait(" in code


def waiting_kind(frames):
    """What the rank waits for: "rendezvous", "point-to-point", "collective", or None.

    Taken from the torch.distributed function that the rank's own code (or,
    while starting, the launcher) called; None when it is not waiting in
    torch.distributed at all (it is computing, sleeping, reading a file).
    """
    if waits_on_a_request(frames):
        return "point-to-point"
    if not waits_in_torch_distributed(frames):
        return None
    user = [f for f in frames if _is_user_code(f[0])]
    call = _outermost_torch_frame(frames, after=user[-1] if user else None)
    name = call[2] if call is not None else ""
    if name in RENDEZVOUS:
        return "rendezvous"
    if name in POINT_TO_POINT:
        return "point-to-point"
    return "collective"


def rendezvous_arguments(frames):
    """The rendezvous values found on the stack; the innermost frame's win
    (``_create_c10d_store`` has the address that ``env://`` resolved)."""
    found = {}
    for frame in frames:
        if len(frame) > 4:
            found.update(frame[4])
    return found


def timeout_hint(kinds, arguments, *, world_size, launcher, store=None):
    """What the waits of the unfinished ranks mean, in a sentence or two.

    ``kinds`` maps each unfinished rank to ``waiting_kind``; ``arguments``
    the rendezvous values of those in ``init_process_group``. ``launcher``
    is ``"ddp_lab.launch"`` (its ranks meet at the launcher's ``store``,
    ``(host, port)``) or ``"ddp_lab.spawn"`` (they meet where their code says).
    """
    lines = []
    running = sorted(rank for rank, kind in kinds.items() if kind is None)
    if "rendezvous" in kinds.values():
        lines.append(_rendezvous_hint(arguments, world_size, launcher, store))
    if "collective" in kinds.values() and running:
        waiting = sorted(rank for rank, kind in kinds.items() if kind == "collective")
        lines.append(f"{_ranks(waiting).capitalize()} {'waits' if len(waiting) == 1 else 'wait'} in a "
                     f"collective that {_ranks(running)} {'has' if len(running) == 1 else 'have'} not reached: "
                     f"{'it is' if len(running) == 1 else 'they are'} still running {_their(running)} own code "
                     "(see the lines above). If that is merely slow, give a longer timeout; if it never "
                     "calls the collective, check that every rank calls the same collectives in the same order.")
    elif "collective" in kinds.values():
        lines.append(COLLECTIVE_HINT)
    elif "point-to-point" in kinds.values():
        lines.append(POINT_TO_POINT_HINT)
    if not lines and kinds:
        lines.append("No rank was waiting for another: they were still running their own code "
                     "(see the lines above). If that code is merely slow, give it a longer timeout.")
    return "\n".join(lines)


def _ranks(ranks):
    """'rank 1', 'ranks 0, 2': the words for a list of ranks."""
    return f"rank {ranks[0]}" if len(ranks) == 1 else "ranks " + ", ".join(map(str, ranks))


def _their(ranks):
    return "its" if len(ranks) == 1 else "their"


def _rendezvous_hint(arguments, world_size, launcher, store):
    """Why ranks wait in init_process_group, from the values they passed."""
    for rank, values in sorted(arguments.items()):
        size = values.get("world_size", -1)
        if size > 0 and size != world_size:
            return (f"Rank {rank} called init_process_group with world_size={size}, but "
                    f"{launcher} started {world_size} processes: it waits for ranks that will "
                    f"never come. Every rank must pass world_size={world_size} (and a rank "
                    f"from 0 to {world_size - 1}).")
    places = {rank: (values["hostname"], values["port"])
              for rank, values in arguments.items() if "port" in values}
    if store is not None:
        elsewhere = {rank: place for rank, place in places.items() if place != store}
        if elsewhere:
            rank = min(elsewhere)
            return (f"Rank {rank} looks for the rendezvous store at {_address(elsewhere[rank])}, "
                    f"but {launcher} hosts it at {_address(store)} (MASTER_ADDR, MASTER_PORT): "
                    "as under torchrun (TORCHELASTIC_USE_AGENT_STORE=True), the ranks only "
                    "connect to the launcher's store. Leave MASTER_ADDR, MASTER_PORT and "
                    "init_method alone, or run code that chooses its own, as mp.spawn tutorials "
                    "do, with ddp_lab.spawn(fn, args, nprocs).")
    if len(set(places.values())) > 1:
        where = ", ".join(f"rank {rank} at {_address(place)}" for rank, place in sorted(places.items()))
        return (f"The ranks look for each other at different addresses ({where}): every rank "
                "must use the same MASTER_ADDR and MASTER_PORT (or init_method).")
    return (f"A rank that waits in init_process_group is waiting for all {world_size} ranks "
            "to join: every rank must call it, with the same address and "
            f"world_size={world_size}, each with its own rank.")


def _address(place):
    return f"{place[0]}:{place[1]}"


def _outermost_torch_frame(frames, after):
    """The frame of the torch function the user's code called, if any."""
    start = frames.index(after) + 1 if after is not None else 0
    for frame in frames[start:]:
        if frame[0].startswith(_TORCH_DIR) and frame[2] != "wrapper":
            return frame
    return None


def _format_call(frame):
    if frame is None:
        return None
    module = "torch.distributed" if "distributed" in frame[0] else "torch"
    return f"{frame[2]}() ({module})"


def _is_user_code(filename):
    if filename.startswith(_BOOK_SCRIPTS_DIR):
        return True
    if filename.startswith((_TORCH_DIR, _DDP_LAB_DIR)):
        return False
    return not filename.startswith(_STDLIB_DIR) or "site-packages" in filename
