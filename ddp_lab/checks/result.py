"""What a lab checker returns: passed or not, and each mistake explained.

A checker never raises on a wrong answer: it returns a :class:`CheckResult`,
which a notebook shows as a green tick or as a list of mistakes, each saying
where it is and why the expected answer is what it is. ``bool(result)`` is
True when the answer is right, so a test of a reference solution can write
``assert check_...(...)``.
"""

from __future__ import annotations

import html
import inspect
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["Mistake", "CheckResult", "signature_mistake"]

MAX_SHOWN = 10  # mistakes listed in full; the rest are counted


@dataclass(frozen=True)
class Mistake:
    """One mistake: ``where`` it is ("node 1, GPU 2"), a short ``kind`` tag
    ("swapped", "off_by_one", ...) and a ``message`` that explains it."""

    where: str
    kind: str
    message: str

    def __str__(self) -> str:
        return f"{self.where}: {self.message}"


@dataclass(frozen=True)
class CheckResult:
    """The verdict on one answer.

    ``correct`` of ``total`` items (each a ``noun``: "process", ...) were
    right; ``subject`` says what was checked, e.g. the topology.
    """

    subject: str
    correct: int
    total: int
    noun: str
    mistakes: tuple[Mistake, ...] = ()

    @property
    def passed(self) -> bool:
        return not self.mistakes

    def __bool__(self) -> bool:
        return self.passed

    def headline(self) -> str:
        """``✓ all 8 processes correct`` or ``✗ 6 of 8 processes correct``."""
        if self.passed:
            count = f"all {_plural(self.total, self.noun)}" if self.total != 1 else f"the {self.noun} is"
            return f"✓ {count} correct"
        return f"✗ {self.correct} of {_plural(self.total, self.noun)} correct"

    def __str__(self) -> str:
        lines = [f"{self.headline()} ({self.subject})"]
        lines += [f"  • {mistake}" for mistake in self.mistakes[:MAX_SHOWN]]
        if len(self.mistakes) > MAX_SHOWN:
            lines.append(f"  … and {len(self.mistakes) - MAX_SHOWN} more (all in .mistakes)")
        return "\n".join(lines)

    # A notebook shows the text rather than the dataclass fields.
    __repr__ = __str__

    def _repr_html_(self) -> str:
        colour = "#1a7f37" if self.passed else "#b3261e"
        parts = [
            f'<div><span style="color:{colour};font-weight:bold">{html.escape(self.headline())}</span>'
            f' <span style="color:#555">({html.escape(self.subject)})</span>'
        ]
        if self.mistakes:
            items = "".join(
                f"<li><b>{html.escape(m.where)}</b>: {html.escape(m.message)}</li>"
                for m in self.mistakes[:MAX_SHOWN]
            )
            parts.append(f'<ul style="margin-top:0.3em">{items}</ul>')
            if len(self.mistakes) > MAX_SHOWN:
                more = len(self.mistakes) - MAX_SHOWN
                parts.append(f"<p>… and {more} more (all in <code>.mistakes</code>)</p>")
        parts.append("</div>")
        return "".join(parts)


def _plural(count: int, noun: str) -> str:
    """``1 process``, ``8 processes``, ``3 local ranks``."""
    if count == 1:
        return f"{count} {noun}"
    return f"{count} {noun}es" if noun.endswith("s") else f"{count} {noun}s"


def signature_mistake(function: Callable, arguments: int, expected: str) -> Mistake | None:
    """A Mistake when the reader's ``function`` cannot take ``arguments``
    positional arguments, None when it can.

    Checked before calling it, so that a wrong signature is reported once and
    plainly, not as a TypeError for every case the checker tries.
    """
    try:
        inspect.signature(function).bind(*range(arguments))
    except TypeError as error:
        name = getattr(function, "__name__", "your function")
        message = f"cannot be called with {arguments} arguments ({error}); write it as {expected}"
        return Mistake(name, "signature", message)
    except ValueError:  # a builtin without a signature: the checker's calls will tell
        pass
    return None
