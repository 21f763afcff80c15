"""Sizes, times and rates, printed one way throughout the book.

One convention, the one the tools the book quotes use:

- sizes of tensors and messages in binary units (KiB, MiB, GiB: powers of
  1024), as PyTorch's ``bucket_cap_mb`` and memory tools count them;
- rates in decimal units (KB/s, MB/s, GB/s: powers of 1000), as nccl-tests
  prints algbw and busbw (Chapters 4 to 6);
- memory of model states in decimal GB, as the ZeRO paper and GPU data
  sheets state it (Chapter 15, Lab 6);
- times in s, ms and us: fixed decimals in tables, three significant
  digits in the controls' sentences (``format_seconds``'s two styles);
- a repeated measurement as its spread, never one run: the minimum (what the
  machine can do when nothing else runs), the median (what a program
  typically sees) and the maximum (how noisy the machine was).

>>> format_bytes(1536), format_bytes(4 * 2**20)
('1.5 KiB', '4 MiB')
>>> format_rate(1.5e9), format_seconds(0.00042), format_gb(1.875e9)
('1.50 GB/s', '420 us', '1.88 GB')
>>> format_seconds(1.23e-05, "text"), format_seconds(0.0045, "text")
('12.3 µs', '4.5 ms')
>>> spread([3e-3, 1e-3, 2e-3])
{'min': 0.001, 'median': 0.002, 'max': 0.003}
>>> format_spread([3e-3, 1e-3, 2e-3])
'2.00 ms (1.00 ms to 3.00 ms)'
"""

from __future__ import annotations

import statistics

__all__ = ["format_bytes", "format_rate", "format_seconds", "SECONDS_STYLES", "format_gb", "spread",
           "format_spread"]

SECONDS_STYLES = ("table", "text")  # format_seconds's two ways of writing a time


def format_bytes(nbytes: float) -> str:
    """``1536 -> '1.5 KiB'``, ``4 << 20 -> '4 MiB'``: a size in B, KiB, MiB or GiB, to a tenth."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(nbytes) < 1024 or unit == "GiB":
            number = f"{nbytes:.0f}" if unit == "B" else f"{nbytes:.1f}".removesuffix(".0")
            return f"{number} {unit}"
        nbytes /= 1024
    raise AssertionError("unreachable")


def format_rate(bytes_per_second: float) -> str:
    """``1.5e9 -> '1.50 GB/s'``: a bandwidth in decimal units, as nccl-tests prints them."""
    for unit in ("B/s", "KB/s", "MB/s", "GB/s"):
        if bytes_per_second < 1000 or unit == "GB/s":
            return f"{bytes_per_second:.2f} {unit}"
        bytes_per_second /= 1000
    raise AssertionError("unreachable")


def format_seconds(seconds: float, style: str = "table") -> str:
    """A time in us, ms or s, in one of the book's two styles (``SECONDS_STYLES``).

    - ``"table"`` (the default): fixed decimals, so that the columns of a
      table line up, and ``us`` for microseconds, as the benchmarks, the GPU
      report and Chapter 5 print them: ``0.00042 -> '420 us'``,
      ``0.0123 -> '12.30 ms'``, ``2.5 -> '2.50 s'``;
    - ``"text"``: three significant digits and ``µs``, as the controls of
      Chapters 6, 8 and 12 write a time in a sentence, in Python and in the
      browser (``formatSeconds`` in ``ddp_lab/widgets/js/common.js``):
      ``1.23e-05 -> '12.3 µs'``, ``0.0045 -> '4.5 ms'``.
    """
    if style not in SECONDS_STYLES:
        raise ValueError(f"style must be one of {', '.join(map(repr, SECONDS_STYLES))}, got {style!r}")
    if seconds < 1e-3:
        value, unit = seconds * 1e6, "us"
    elif seconds < 1:
        value, unit = seconds * 1e3, "ms"
    else:
        value, unit = seconds, "s"
    if style == "text":
        return f"{value:.3g} {'µs' if unit == 'us' else unit}"
    return f"{value:{'.0f' if unit == 'us' else '.2f'}} {unit}"


def format_gb(nbytes: float, digits: int = 3) -> str:
    """``1.875e9 -> '1.88 GB'``: memory in decimal gigabytes, to ``digits`` significant digits."""
    value = nbytes / 1e9
    return f"{value:.{digits}g} GB" if abs(value) < 10 ** digits else f"{value:,.0f} GB"


def spread(values) -> dict:
    """``{"min", "median", "max"}`` of repeated measurements (times, rates, ratios).

    The book's one summary of a repeated measurement: the median is what a
    program typically sees, the minimum (of a time) what the machine can do
    when nothing else runs, the maximum how noisy it was.
    """
    values = [float(v) for v in values]
    if not values:
        raise ValueError("spread needs at least one value")
    return {"min": min(values), "median": statistics.median(values), "max": max(values)}


def format_spread(values, fmt=format_seconds) -> str:
    """``'2.00 ms (1.00 ms to 3.00 ms)'``: the median, then the range, each formatted by ``fmt``."""
    s = spread(values)
    return f"{fmt(s['median'])} ({fmt(s['min'])} to {fmt(s['max'])})"
