"""What the ranks print, gathered per rank and shown in rank order.

Ranks run at the same time, so their prints reach the notebook in whatever
order the operating system schedules them. Showing them in that order would
make every run look different. Instead each rank's output is collected on
its own and rendered rank by rank, every line labelled::

    [rank 0] hello from 0
    [rank 1] hello from 1

Every chapter that launches shows its ranks' output this way (Chapter 3 explains it).
"""

from __future__ import annotations

import codecs
import sys


class RankOutput:
    """The text one rank has written to its stdout and stderr so far."""

    def __init__(self):
        # An incremental decoder keeps a UTF-8 character that arrives split
        # across two reads in one piece.
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._parts = []

    def feed(self, data: bytes) -> None:
        self._parts.append(self._decoder.decode(data))

    def take(self) -> str:
        """Return the text gathered since the last ``take`` and forget it."""
        text = "".join(self._parts)
        self._parts.clear()
        return text


def label_lines(rank: int, text: str) -> str:
    """Prefix every line of ``text`` with ``[rank N]``."""
    if not text:
        return ""
    lines = text.splitlines()
    return "".join(f"[rank {rank}] {line}\n" for line in lines)


def render_by_rank(texts) -> str:
    """One block of labelled lines: rank 0's output first, then rank 1's..."""
    return "".join(label_lines(rank, text) for rank, text in enumerate(texts))


def show(texts):
    """Print the ranks' output, rank by rank, into the cell."""
    text = render_by_rank(texts)
    if text:
        sys.stdout.write(text)
        sys.stdout.flush()
