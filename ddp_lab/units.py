"""Sizes, times and rates, printed one way throughout the book.

One convention, the one the tools the book quotes use:

- sizes of tensors and messages in binary units (KiB, MiB, GiB: powers of
  1024), as PyTorch's ``bucket_cap_mb`` and memory tools count them;
- rates in decimal units (KB/s, MB/s, GB/s: powers of 1000), as nccl-tests
  prints algbw and busbw (Chapters 4 to 6);
- memory of model states in decimal GB, as the ZeRO paper and GPU data
  sheets state it (Chapter 15, Lab 6);
- times in s, ms and us;
- a repeated measurement as its spread, never one run: the minimum (what the
  machine can do when nothing else runs), the median (what a program
  typically sees) and the maximum (how noisy the machine was).

>>> format_bytes(1536), format_bytes(4 * 2**20)
('1.5 KiB', '4 MiB')
>>> format_rate(1.5e9), format_seconds(0.00042), format_gb(1.875e9)
('1.50 GB/s', '420 us', '1.88 GB')
>>> spread([3e-3, 1e-3, 2e-3])
{'min': 0.001, 'median': 0.002, 'max': 0.003}
>>> format_spread([3e-3, 1e-3, 2e-3])
'2.00 ms (1.00 ms to 3.00 ms)'
"""

from __future__ import annotations

import statistics

__all__ = ["format_bytes", "format_rate", "format_seconds", "format_gb", "spread", "format_spread"]


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


def format_seconds(seconds: float) -> str:
    """``0.00042 -> '420 us'``: a time in us, ms or s."""
    if seconds < 1e-3:
        return f"{seconds * 1e6:.0f} us"
    if seconds < 1:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds:.2f} s"


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
