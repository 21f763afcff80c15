"""Plot measured communication times or bandwidths against message size.

Takes the rows of :mod:`ddp_lab.bench.collectives` (``Timing`` objects:
collective, world size, bytes, seconds) and draws one line per collective on
log-log axes, sizes in bytes along the bottom. With ``fits``, the alpha-beta
model fitted to each collective (``latency + nbytes / bandwidth``) is drawn
as a dashed line of the same colour, so the two regimes are visible: flat
where latency dominates, rising with slope 1 where bandwidth does. With
``band``, a shaded band of the same colour spans the fastest to the slowest
repeat at each size: the line alone would hide how much a busy machine moved
the figures.

Nothing here starts a process or measures anything: it only draws.

Used in Chapters 4 and 5.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from ddp_lab.cost import bus_factor
from ddp_lab.draw.palette import BLACK, BLUE, FAINT, GREEN, GREY, ORANGE, PURPLE, SKY_BLUE, VERMILLION
from ddp_lab.units import format_bytes, format_rate, format_seconds

__all__ = ["draw_timings"]

QUANTITIES = {
    "seconds": ("time per call (median)", lambda r: r.seconds),
    "best": ("time per call (fastest of the repeats)", lambda r: r.best),
    "algbw": ("algorithm bandwidth (bytes/s)", lambda r: r.algbw),
    "busbw": ("bus bandwidth (bytes/s)", lambda r: r.busbw),
}
# Each quantity of one repeat, for the band: (row, seconds of that repeat) -> value.
OF_ONE_REPEAT = {
    "seconds": lambda r, s: s,
    "best": lambda r, s: s,
    "algbw": lambda r, s: r.nbytes / s,
    "busbw": lambda r, s: r.nbytes / s * bus_factor(r.collective, r.world_size),
}
COLOURS = (BLUE, VERMILLION, GREEN, PURPLE, ORANGE, SKY_BLUE, GREY, BLACK)


def draw_timings(rows, *, y: str = "seconds", fits: dict | None = None, title: str | None = None,
                 ax=None, band: bool = False) -> Figure:
    """One line per collective: ``y`` against size.

    ``y``: "seconds" (median time), "best" (fastest repeat), "algbw" or
    "busbw". ``fits``: optional ``{collective: (latency, bandwidth)}`` to draw
    the model ``latency + nbytes / bandwidth`` (with ``y`` a time).
    ``band``: shade, at each size, from the fastest to the slowest repeat
    (``Timing.samples``).
    """
    if y not in QUANTITIES:
        raise ValueError(f"y must be one of {', '.join(QUANTITIES)}, got {y!r}")
    rows = list(rows)
    if not rows:
        raise ValueError("draw_timings needs at least one measurement")
    if fits and y not in ("seconds", "best"):
        raise ValueError("fits are times: draw them with y='seconds' or y='best'")
    label, value = QUANTITIES[y]
    if ax is None:
        fig, ax = plt.subplots(figsize=(6.4, 4.0))
        plt.close(fig)
    names = list(dict.fromkeys(r.collective for r in rows))
    for index, name in enumerate(names):
        mine = sorted((r for r in rows if r.collective == name), key=lambda r: r.nbytes)
        colour = COLOURS[index % len(COLOURS)]
        ax.plot([r.nbytes for r in mine], [value(r) for r in mine], "o-", color=colour,
                label=name, markersize=4, linewidth=1.5)
        if band and all(r.samples for r in mine):
            repeats = [[OF_ONE_REPEAT[y](r, s) for s in r.samples] for r in mine]
            ax.fill_between([r.nbytes for r in mine], [min(v) for v in repeats], [max(v) for v in repeats],
                            color=colour, alpha=0.15, linewidth=0)
        if fits and name in fits:
            latency, bandwidth = fits[name]
            sizes = [r.nbytes for r in mine]
            ax.plot(sizes, [latency + n / bandwidth for n in sizes], "--", color=colour,
                    linewidth=1, label=f"{name}: fitted α + n/B")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: _tick(format_bytes(v))))
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_minor_formatter(NullFormatter())
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: _tick(format_seconds(v) if y in ("seconds", "best") else format_rate(v))))
    ax.set_xlabel("message size")
    ax.set_ylabel(label)
    ax.grid(True, which="major", color=FAINT, linewidth=0.8)
    ax.legend(frameon=False, fontsize=9)
    world = sorted({r.world_size for r in rows})
    ax.set_title(title if title is not None else
                 f"measured on this machine, {' / '.join(map(str, world))} gloo ranks", fontsize=11)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    ax.figure.tight_layout()
    return ax.figure


def _tick(label):
    """An axis label without the zeros that say nothing: ``1.00 ms`` -> ``1 ms``."""
    return label.replace(".00 ", " ")
