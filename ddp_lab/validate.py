"""Refusing bad arguments before anything starts, with a message that names the value.

Every public function of ddp_lab checks its arguments first, so that a
mistake gets one clear sentence ("world_size must be a positive int, got
0") instead of a crash in four processes at once. Every check lives here,
one rule per kind of argument:

* a **count** (ranks, nodes, steps, bytes per value): an ``int`` >= 1
  (:func:`check_positive_int`), or >= some other bound
  (:func:`check_int_at_least`, :func:`check_int_between`,
  :func:`check_whole_number`, whose longer sentence Chapter 2's layout and
  Lab 1's devices teach with);
* a **size, time or bandwidth**: a *finite* real number > 0
  (:func:`check_positive_number`) or >= 0
  (:func:`check_non_negative_number`, a latency of 0 is an ideal link);
  ``nan`` and ``inf`` are refused, as a formula fed with either returns
  ``nan`` or ``inf`` instead of failing, unless the parameter documents
  what ``inf`` means, and the message says it (``infinite=``: a bandwidth
  of ``inf`` is an ideal link). A number with a range of its own (a link's
  rate in Chapter 12): :func:`check_number_between`;
* a **share** (a utilisation): a number in (0, 1] (:func:`check_fraction`);
* a **choice** among names: :func:`check_choice`;
* a count that another must **split** evenly (the rows of a tensor over its
  ranks, ranks over nodes): :func:`check_divisible`.

Python's ``True`` is an ``int`` (``True == 1``), and a count of ``True``
is almost always a bug upstream, so a bool is never accepted as a number:

>>> is_int(3), is_int(True), is_int(3.0)
(True, False, False)
>>> check_positive_int("world_size", 0)
Traceback (most recent call last):
    ...
ValueError: world_size must be a positive int, got 0
>>> check_positive_number("latency", float("nan"), "seconds")
Traceback (most recent call last):
    ...
ValueError: latency must be a finite number of seconds > 0, got nan
"""

from __future__ import annotations

import math
import numbers

__all__ = ["is_int", "is_number", "check_positive_int", "check_int_at_least", "check_int_between",
           "check_whole_number", "check_positive_number", "check_non_negative_number", "check_number_between",
           "check_fraction", "check_choice", "check_divisible"]


def is_int(value) -> bool:
    """A whole number (``int``, numpy or torch integers), and not a bool."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def is_number(value) -> bool:
    """A real number (int or float, numpy's too), and not a bool."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def check_positive_int(name: str, value, maximum: int | None = None, what: str = "") -> int:
    """``value`` if it is an int >= 1 (and at most ``maximum``, ``what`` saying why), else ValueError."""
    if not is_int(value) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{name} must be at most {maximum}" + (f" ({what})" if what else "")
                         + f", got {value!r}")
    return value


def check_int_at_least(name: str, value, minimum: int) -> int:
    """``value`` if it is an int >= ``minimum``, else ValueError."""
    if not is_int(value) or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")
    return value


def check_int_between(name: str, value, low: int, high: int, why: str = "") -> int:
    """``value`` if it is an int from ``low`` to ``high``, else ValueError (``why`` says why the range)."""
    if not is_int(value) or not low <= value <= high:
        raise ValueError(f"{name} must be an int from {low} to {high}" + (f" ({why})" if why else "")
                         + f", got {value!r}")
    return value


def check_whole_number(name: str, value, minimum: int = 1) -> int:
    """``value`` if it is an int >= ``minimum``, else ValueError in two sentences.

    The same rule as :func:`check_positive_int`, said at more length for a
    reader who is learning what the count is (Chapter 2's
    :class:`ddp_lab.topology.Topology`, whose words the layout explorer's
    page repeats, and Lab 1's :func:`ddp_lab.devices.devices_for`): ``2.0``
    equals ``2`` and ``True`` is an ``int``, but a node count of either is
    almost always a bug upstream (a division or a comparison that slipped
    in), so both are refused rather than guessed at.

    >>> check_whole_number("nodes", 2.0)
    Traceback (most recent call last):
        ...
    ValueError: nodes must be a whole number (an int such as 1, 2, 4), got 2.0 of type float
    """
    if not is_int(value):
        examples = "1, 2, 4" if minimum >= 1 else "0, 1, 2"
        raise ValueError(f"{name} must be a whole number (an int such as {examples}), "
                         f"got {value!r} of type {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name} must be at least {minimum}, got {value}")
    return value


def check_positive_number(name: str, value, unit: str = "", maximum: float | None = None,
                          what: str = "", infinite: str = "") -> float:
    """``value`` if it is a finite number > 0 (of ``unit``, e.g. "seconds") and at most
    ``maximum`` (``what`` saying why), else ValueError.

    ``infinite`` names what ``inf`` means where a parameter documents it (a
    bandwidth: "an ideal link", whose bytes take no time); then ``inf`` is
    accepted and the message says so:

    >>> check_positive_number("bandwidth", float("inf"), "bytes/s", infinite="an ideal link")
    inf
    >>> check_positive_number("bandwidth", 0, "bytes/s", infinite="an ideal link")
    Traceback (most recent call last):
        ...
    ValueError: bandwidth must be a number of bytes/s > 0 (inf: an ideal link), got 0
    """
    if not is_number(value) or not value > 0 or (math.isinf(value) and not infinite):
        if infinite:
            kind = (f"a number of {unit} > 0" if unit else "a number > 0") + f" (inf: {infinite})"
        else:
            kind = f"a finite number of {unit} > 0" if unit else "a finite number > 0"
        raise ValueError(f"{name} must be {kind}, got {value!r}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{name} must be at most {maximum:g}" + (f" {unit}" if unit else "")
                         + (f" ({what})" if what else "") + f", got {value!r}")
    return value


def check_non_negative_number(name: str, value, unit: str = "") -> float:
    """``value`` if it is a finite number >= 0 (of ``unit``), else ValueError: a latency of 0 is an ideal link.

    >>> check_non_negative_number("latency", float("nan"), "seconds")
    Traceback (most recent call last):
        ...
    ValueError: latency must be a finite number of seconds >= 0, got nan
    """
    if not is_number(value) or not value >= 0 or math.isinf(value):
        what = f"a finite number of {unit} >= 0" if unit else "a finite number >= 0"
        raise ValueError(f"{name} must be {what}, got {value!r}")
    return value


def check_number_between(name: str, value, low: float, high: float, unit: str = "") -> float:
    """``value`` if it is a number (of ``unit``) from ``low`` to ``high``, else ValueError: a
    setting with a range of its own, such as a link's rate in Chapter 12's cluster."""
    if not is_number(value) or not low <= value <= high:
        kind = f"a number of {unit}" if unit else "a number"
        raise ValueError(f"{name} must be {kind} from {low:g} to {high:g}, got {value!r}")
    return value


def check_fraction(name: str, value) -> float:
    """``value`` if it is a number in (0, 1] (a share of a peak rate: a utilisation), else ValueError.

    >>> check_fraction("utilisation", 40)
    Traceback (most recent call last):
        ...
    ValueError: utilisation must be a number in (0, 1], got 40
    """
    if not is_number(value) or not 0 < value <= 1:
        raise ValueError(f"{name} must be a number in (0, 1], got {value!r}")
    return value


def check_choice(name: str, value, allowed) -> str:
    """``value`` if it is one of ``allowed``, else ValueError listing them."""
    if value not in allowed:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, allowed))}; got {value!r}")
    return value


def check_divisible(name: str, value: int, by_name: str, by: int, why: str) -> int:
    """``value // by`` if ``by`` divides ``value``, else ValueError naming both and ``why`` it must.

    Both are counts the caller has checked already.

    >>> check_divisible("tokens", 16, "dp", 2, "each replica takes tokens / dp rows")
    8
    >>> check_divisible("tokens", 7, "dp", 2, "each replica takes tokens / dp rows")
    Traceback (most recent call last):
        ...
    ValueError: tokens = 7 must be divisible by dp = 2: each replica takes tokens / dp rows
    """
    if value % by:
        raise ValueError(f"{name} = {value} must be divisible by {by_name} = {by}: {why}")
    return value // by
