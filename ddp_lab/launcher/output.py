"""What the ranks print: shown live while they run, then rank by rank (Chapter 3).

Ranks run at the same time, so their prints reach the notebook in whatever
order the operating system schedules them. Showing them in that order would
make every run look different. Instead each rank's output is collected on
its own and, when the call ends, rendered rank by rank, every line labelled::

    [rank 0] hello from 0
    [rank 1] hello from 1

That final rendering is what a saved notebook holds, the same on every run
(nbval compares it). Lines are split as a terminal shows them: a ``\\r``
returns to the start of the line, so a progress bar that redraws itself
with ``\\r`` ends as one line, its last state.

**While the ranks run**, a person watching sees a *live line*: the latest
line of each rank that printed, ``[rank 0] epoch 3 | [rank 1] epoch 3``,
redrawn in place (``\\r``) at most every ``LIVE_INTERVAL`` seconds, from
``LIVE_AFTER`` seconds into the call (quick calls never show one). When the
call ends, the line is overwritten with spaces and a ``\\r``, and the final
rendering is written over it. What a ``\\r`` overwrote is dropped by nbval
and nbclient (their stream coalescing, as in ``nbval/plugin.py``'s
``coalesce_streams``), by myst-nb, and by JupyterLab and VS Code, which keep
the end of a longer overwritten line (``fixCarriageReturn`` in their output
models): there the first line of the final rendering may keep trailing
spaces (invisible; the book's committed outputs come from ``jupyter
execute``, which never shows the live line). A terminal gets ``\\r``
and "erase line". Only one line, because a ``\\r`` can take back only the
line it is on: a display with several lines (IPython's ``display_id``) would
leave an empty output behind in the saved notebook, an output more than
nbval expects.

It is shown where someone watches: in a Jupyter kernel whose front end can
answer ``input()`` (``allow_stdin``, which a person's front end sets and
batch runners, ``jupyter execute``, nbclient and nbval, do not), or when
stdout is a terminal. ``DDP_LAB_LIVE_OUTPUT=always`` or ``never`` decides
instead. Scripts whose output goes to a file or pipe print as before.

**Memory is bounded**: a rank's output keeps its first and last
``KEEP_CHARS`` characters; what lies between is counted, dropped as it
arrives, and named by one line in the final rendering (only there, and only
when the output was that long; a ``\\r``-redrawn line that the cut falls in
still ends as its last state). A rank printing 200 MB costs the notebook a
few MiB, not gigabytes (``tests/test_launch_output.py`` measures it).

Every chapter that launches shows its ranks' output this way.
"""

from __future__ import annotations

import codecs
import os
import re
import shutil
import sys
import time
from collections import deque

# How much of each rank's output is kept: its first and last KEEP_CHARS characters.
KEEP_CHARS = 512 * 1024
# The live line: first drawn this many seconds into a call, then at most every LIVE_INTERVAL.
LIVE_AFTER = 1.0
LIVE_INTERVAL = 0.25
LIVE_WIDTH = 160  # characters, in a notebook (a terminal's own width elsewhere)
_RECENT_CHARS = 1000  # enough to find a rank's latest line

# Line boundaries as str.splitlines() has them, but a lone "\r": a terminal
# returns to the start of the line there, and the text after it overwrites.
_LINE_BREAK = re.compile("\r\n|[\n\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]")


class RankOutput:
    """What one rank has written to its stdout and stderr since the last ``take``.

    Keeps the first and the last ``keep`` characters, and counts what is
    dropped between them.
    """

    def __init__(self, keep=KEEP_CHARS):
        # An incremental decoder keeps a UTF-8 character that arrives split
        # across two reads in one piece.
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._keep = keep
        self._clear()

    def _clear(self):
        self._head, self._head_len = [], 0
        self._tail, self._tail_len = deque(), 0
        self._total, self._newlines = 0, 0
        self._recent = ""

    def feed(self, data: bytes) -> None:
        text = self._decoder.decode(data)
        self._total += len(text)
        self._newlines += text.count("\n")
        self._recent = (self._recent + text[-_RECENT_CHARS:])[-_RECENT_CHARS:]
        room = self._keep - self._head_len
        if room > 0:
            self._head.append(text[:room])
            self._head_len += min(room, len(text))
            text = text[room:]
        if text:
            self._tail.append(text)
            self._tail_len += len(text)
            while self._tail_len - len(self._tail[0]) >= self._keep:
                self._tail_len -= len(self._tail.popleft())

    def latest_line(self) -> str:
        """The line the rank is writing now, or its last one, as a terminal shows it."""
        lines = _LINE_BREAK.split(self._recent.rstrip("\n"))
        return _as_shown(lines[-1])

    def take(self) -> str:
        """Return the text gathered since the last ``take`` and forget it.

        When the middle was dropped, one line in its place says how much.
        """
        head, tail = "".join(self._head), "".join(self._tail)
        total, newlines = self._total, self._newlines
        self._clear()
        if len(head) + len(tail) == total:
            return head + tail
        tail = tail[-self._keep:]
        cut = head.rfind("\n") + 1
        state = _last_state(tail)
        if state is not None:
            # The line cut in two by the dropped middle was redrawn with "\r", and the tail
            # holds its last state, which is what a terminal shows of it: keep that state,
            # none of the older states at the end of the head.
            head, tail = head[:cut], state
        else:
            tail = tail[tail.find("\n") + 1:]  # from the first whole line on
            head = head[:cut] if cut else head  # a head with no line break at all stays whole
        dropped = total - len(head) - len(tail)
        lines = newlines - head.count("\n") - tail.count("\n")
        unfinished = head and not head.endswith("\n")  # a head with no line break at all
        return head + ("\n" if unfinished else "") + _elision_line(dropped, lines, self._keep) + tail


def _last_state(tail):
    """The tail from the last state of its first line on, when that (cut) line was redrawn
    with ``\r`` and a whole state of it lies in the tail; None otherwise."""
    found = _LINE_BREAK.search(tail)
    end = found.start() if found else len(tail)
    redrawn = tail[:end].split("\r")[1:]  # the parts after a "\r": each begins a whole state
    if not any(redrawn):
        return None
    return _as_shown(tail[:end].split("\r", 1)[1]) + tail[end:]


def _elision_line(characters, lines, keep):
    return (f"[... {characters:,} characters ({lines:,} lines) not shown: ddp_lab keeps "
            f"the first and the last {keep:,} characters that each rank prints ...]\n")


def _as_shown(line):
    """A line as a terminal leaves it: the text after its last ``\\r`` (a
    trailing ``\\r`` overwrote nothing yet, so the text before it stays)."""
    shown = [part for part in line.split("\r") if part]
    return shown[-1] if shown else ""


def split_lines(text: str) -> list:
    """The lines of ``text`` as a terminal shows them: ``str.splitlines``, but a
    lone ``\\r`` (a progress bar redrawing itself) overwrites instead of
    starting a new line.

    >>> split_lines("a\\n 10%\\r 50%\\r100%\\nb\\r\\n")
    ['a', '100%', 'b']
    """
    lines = _LINE_BREAK.split(text)
    if lines and lines[-1] == "":
        lines.pop()  # text that ends with a line break has no line after it
    return [_as_shown(line) for line in lines]


def label_lines(rank: int, text: str) -> str:
    """Prefix every line of ``text`` with ``[rank N]``."""
    if not text:
        return ""
    return "".join(f"[rank {rank}] {line}\n" for line in split_lines(text))


def render_by_rank(texts) -> str:
    """One block of labelled lines: rank 0's output first, then rank 1's..."""
    return "".join(label_lines(rank, text) for rank, text in enumerate(texts))


def show(texts):
    """Print the ranks' output, rank by rank, into the cell."""
    text = render_by_rank(texts)
    if text:
        sys.stdout.write(text)
        sys.stdout.flush()


class LiveLine:
    """The live line of one call (see the module docstring): ``begin``, ``draw``, ``end``."""

    def __init__(self):
        self._drawn = 0  # the longest line drawn so far (0: none shown)
        self._next = float("inf")

    def begin(self):
        """A call starts: decide whether anyone watches, and when to draw first."""
        self._drawn = 0
        self._next = time.monotonic() + LIVE_AFTER if live_output_wanted() else float("inf")

    def wake_in(self):
        """Seconds until the line wants drawing (infinity when it is off)."""
        return max(0.0, self._next - time.monotonic())

    def draw(self, outputs):
        """Redraw the line from the ranks' ``RankOutput``s, if it is time."""
        now = time.monotonic()
        if now < self._next:
            return
        self._next = now + LIVE_INTERVAL
        line = status_line([output.latest_line() for output in outputs], _width())
        if line:
            self._write(line)

    def end(self):
        """The call ended: take the line back, so what is printed next replaces it."""
        if self._drawn:
            self._write("")
            sys.stdout.write("\r")
            sys.stdout.flush()
        self._drawn = 0
        self._next = float("inf")

    def _write(self, line):
        """Draw ``line`` over the last one. A terminal erases it ("\\x1b[K"); a
        notebook front end overwrites character by character (JupyterLab and
        VS Code: a shorter line would leave the end of the longer one), so the
        line is padded with spaces to the longest drawn."""
        if _on_a_terminal():
            sys.stdout.write("\r\x1b[K" + line)
        else:
            sys.stdout.write("\r" + line.ljust(self._drawn))
        sys.stdout.flush()
        self._drawn = max(self._drawn, len(line))


def status_line(latest, width):
    """``[rank 0] a | [rank 1] b`` from each rank's latest line, within ``width``.

    >>> status_line(["epoch 3", "", "epoch 2"], 80)
    '[rank 0] epoch 3 | [rank 2] epoch 2'
    """
    parts = [f"[rank {rank}] {line}" for rank, line in enumerate(latest) if line]
    if not parts:
        return ""
    share = max(12, (width - 3 * (len(parts) - 1)) // len(parts))
    parts = [part if len(part) <= share else part[:share - 3] + "..." for part in parts]
    return " | ".join(parts)[:width]


def live_output_wanted():
    """Whether a person is watching this call (see the module docstring)."""
    choice = os.environ.get("DDP_LAB_LIVE_OUTPUT", "auto").strip().lower()
    if choice in ("always", "1", "yes"):
        return True
    if choice in ("never", "0", "no"):
        return False
    from ddp_lab.launcher.shutdown import kernel_shell

    shell = kernel_shell()
    if shell is not None:
        # ipykernel sets this from each execute request's allow_stdin
        # (ipykernel/ipkernel.py, _forward_input); input() works only then.
        return bool(getattr(shell.kernel, "_allow_stdin", False))
    return _on_a_terminal()


def _on_a_terminal():
    try:
        return sys.stdout.isatty()
    except (AttributeError, ValueError):  # replaced or closed
        return False


def _width():
    return shutil.get_terminal_size().columns - 1 if _on_a_terminal() else LIVE_WIDTH
