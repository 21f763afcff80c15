"""Rooflines: measured points under measured ceilings, and a datasheet's roofs (Chapter 14b).

:func:`roofline_figure` takes one or more records of
:mod:`ddp_lab.bench.roofline` (this CPU's, and a GPU's from a results file
when there is one) and draws, on log-log axes of arithmetic intensity
against FLOP/s, each record's ceilings as lines: the memory slope
(``intensity x bandwidth``, from the measured copy) and one flat roof per
number format (the best matmul rate measured), meeting at that format's
ridge. Each measured matmul is a point at its intensity (``n x n @ n x
n``, :func:`ddp_lab.cost.roofline.matmul_intensity`) and its rate.

:func:`datasheet_figure` draws rated roofs (:data:`ddp_lab.cost.roofline.ACCELERATORS`)
with named intensities marked on them: an elementwise add, the matmuls of
a tensor-parallel MLP at several degrees.

Nothing here measures anything: it only draws.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from ddp_lab.cost.roofline import matmul_intensity
from ddp_lab.draw.palette import BLUE, FAINT, GREEN, MUTED_TEXT, ORANGE, PURPLE, SKY_BLUE, VERMILLION

__all__ = ["roofline_figure", "datasheet_figure"]

# bytes per element of each format's operands (a TF32 product reads fp32 tensors)
BYTES = {"float32": 4, "tf32": 4, "bfloat16": 2, "float16": 2, "bf16": 2, "fp8": 1}
FORMAT_COLOURS = {"float32": BLUE, "tf32": SKY_BLUE, "bfloat16": VERMILLION, "float16": ORANGE}
STYLES = ("-", "--", ":", "-.")


def _axes(ax, title):
    if ax is None:
        fig, ax = plt.subplots(figsize=(6.4, 4.2))
        plt.close(fig)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOPs per byte)")
    ax.set_ylabel("FLOP/s")
    ax.grid(True, which="major", color=FAINT, linewidth=0.8)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    if title:
        ax.set_title(title, fontsize=11, loc="left")
    return ax


def _roof(ax, peak, bandwidth, low, high, colour, style, label):
    ridge = peak / bandwidth
    xs = [low, min(max(ridge, low), high), high]
    ax.plot(xs, [min(peak, x * bandwidth) for x in xs], style, color=colour, linewidth=1.6, label=label)


def roofline_figure(records, *, marks=(), title: str | None = None, ax=None) -> Figure:
    """Each record's measured ceilings (lines) and measured matmuls (points).

    ``records``: a record or a list of records of
    :func:`ddp_lab.bench.roofline.measure_roofline`. Records are told apart
    by line style, number formats by colour. ``marks``: ``(label,
    intensity)`` pairs (an elementwise add, say), drawn on the first
    record's memory slope.
    """
    if isinstance(records, dict):
        records = [records]
    records = list(records)
    if not records:
        raise ValueError("roofline_figure needs at least one record")
    ax = _axes(ax, title if title is not None else "measured on this machine")
    intensities = [matmul_intensity(n, n, n, BYTES[name])
                   for record in records for name, rows in record["formats"].items() for n in rows["sizes"]]
    marks = list(marks)
    low, high = min([2.0 ** -2] + [x / 2 for _, x in marks]), max(intensities) * 4
    for index, record in enumerate(records):
        style = STYLES[index % len(STYLES)]
        who = "CPU" if record["kind"] == "cpu" else record["device"]
        for name, rows in record["formats"].items():
            colour = FORMAT_COLOURS.get(name, GREEN)
            _roof(ax, max(rows["flops"]), record["bandwidth"], low, high, colour, style,
                  f"{who}, {name}: best matmul and copy")
            xs = [matmul_intensity(n, n, n, BYTES[name]) for n in rows["sizes"]]
            ax.plot(xs, rows["flops"], "o", color=colour, markersize=5)
            offset = (4, 4) if index == 0 and name == "bfloat16" else (4, -11)
            for x, y, n in zip(xs, rows["flops"], rows["sizes"]):
                ax.annotate(str(n), (x, y), textcoords="offset points", xytext=offset,
                            fontsize=9, color=MUTED_TEXT)
    for label, x in marks:
        y = x * records[0]["bandwidth"]
        ax.plot([x], [y], "s", color=GREEN, markersize=5)
        ax.annotate(label, (x, y), textcoords="offset points", xytext=(6, -4), fontsize=9, color=MUTED_TEXT)
    ax.legend(frameon=False, fontsize=9, loc="upper left")
    ax.figure.tight_layout()
    return ax.figure


def datasheet_figure(accelerators, marks, *, number_format: str = "bf16", title: str | None = None,
                     ax=None) -> Figure:
    """Rated roofs of ``accelerators`` (:class:`ddp_lab.cost.roofline.Accelerator`) with ``marks``.

    ``marks``: ``(label, intensity)`` pairs, drawn as points on the lowest
    roof with their labels.
    """
    accelerators = list(accelerators)
    marks = list(marks)
    if not accelerators:
        raise ValueError("datasheet_figure needs at least one accelerator")
    ax = _axes(ax, title if title is not None else f"rated rooflines, {number_format} dense")
    xs = [x for _, x in marks] + [a.ridge(number_format) for a in accelerators]
    low, high = min(xs + [1.0]) / 4, max(xs) * 4
    colours = (BLUE, ORANGE, GREEN, PURPLE)
    for index, acc in enumerate(accelerators):
        colour = colours[index % len(colours)]
        _roof(ax, acc.peak[number_format], acc.bandwidth, low, high, colour, "-",
              f"{acc.name}: ridge {acc.ridge(number_format):.0f} FLOPs/byte")
        ax.axvline(acc.ridge(number_format), color=colour, linewidth=0.8, linestyle=":")
    lowest = min(accelerators, key=lambda a: a.bandwidth)
    for label, x in marks:
        y = min(lowest.peak[number_format], x * lowest.bandwidth)
        ax.plot([x], [y], "o", color=SKY_BLUE, markeredgecolor=BLUE, markersize=6)
        ax.annotate(label, (x, y), textcoords="offset points", xytext=(0, -9), fontsize=9,
                    color=MUTED_TEXT, ha="center", va="top", rotation=90)
    ax.legend(frameon=False, fontsize=9, loc="lower right")
    ax.figure.tight_layout()
    return ax.figure
