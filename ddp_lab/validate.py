"""Refusing bad arguments before anything starts, with a message that names the value.

Every public function of ddp_lab checks its arguments first, so that a
mistake gets one clear sentence ("world_size must be a positive int, got
0") instead of a crash in four processes at once. The checks that recur
live here; a module whose lesson needs a sentence of its own (the
topology of Chapter 2, the devices of Lab 1) still uses :func:`is_int` for
the test itself.

Python's ``True`` is an ``int`` (``True == 1``), and a count of ``True``
is almost always a bug upstream, so a bool is never accepted as a number:

>>> is_int(3), is_int(True), is_int(3.0)
(True, False, False)
>>> check_positive_int("world_size", 0)
Traceback (most recent call last):
    ...
ValueError: world_size must be a positive int, got 0
"""

from __future__ import annotations

import math
import numbers

__all__ = ["is_int", "is_number", "check_positive_int", "check_int_at_least", "check_int_between",
           "check_positive_number", "check_non_negative_number", "check_choice"]


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


def check_positive_number(name: str, value, unit: str = "") -> float:
    """``value`` if it is a finite number > 0 (of ``unit``, e.g. "seconds"), else ValueError."""
    if not is_number(value) or not value > 0 or math.isinf(value):
        what = f"a finite number of {unit} > 0" if unit else "a finite number > 0"
        raise ValueError(f"{name} must be {what}, got {value!r}")
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


def check_choice(name: str, value, allowed) -> str:
    """``value`` if it is one of ``allowed``, else ValueError listing them."""
    if value not in allowed:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, allowed))}; got {value!r}")
    return value
