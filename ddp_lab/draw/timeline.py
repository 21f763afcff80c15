"""Draw a measured backward pass of a DDP model as a Gantt chart.

Input: :class:`ddp_lab.data_parallel.overlap_timeline.BackwardTimeline` records, measured on a
rank. Each is drawn with rows that share a time axis (milliseconds after
``backward()`` was called):

* the top row, *backward*, holds one bar per layer: when autograd computed
  that layer's gradients (last layer first, so time runs from the output
  of the network back to its input);
* below it, one row per bucket holds that bucket's all-reduce: from the
  moment DDP launched it to the moment it completed. All-reduces can be in
  flight together, so each bucket has a row of its own.

A layer and the bucket that holds its parameters have the same colour, so
the picture shows which gradients each all-reduce carries and how soon it
could start. A dashed line marks when the last gradient was computed, a
solid one when ``backward()`` returned: the all-reduce time between the two
is the communication the backward pass did not hide.

:func:`draw_timelines` stacks several timelines (two bucket sizes, say) on
one shared time axis for comparison.

Used in Chapter 8.
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.patheffects as effects
import matplotlib.pyplot as plt
from matplotlib.figure import Figure
from matplotlib.patches import Patch, Rectangle

from ddp_lab.draw.palette import BLUE, GREEN, GREY, INK, ORANGE, PURPLE, SKY_BLUE, VERMILLION

__all__ = ["draw_timeline", "draw_timelines", "label_bars"]

# Okabe & Ito, without black and yellow (too light for white labels).
BUCKET_COLOURS = (BLUE, ORANGE, GREEN, PURPLE, VERMILLION, SKY_BLUE, GREY)
BAR_HEIGHT = 0.62
MS = 1e3


def draw_timeline(timeline, *, ax=None, title: str | None = None, xmax: float | None = None) -> Figure:
    """Draw one :class:`~ddp_lab.data_parallel.overlap_timeline.BackwardTimeline`; return the figure.

    The top row is the backward pass, one bar per layer; below it, one row
    per bucket, its bar spanning from the launch of its all-reduce to its
    completion (including any time spent queued behind earlier buckets).
    """
    _check(timeline)
    buckets = len(timeline.buckets)
    if ax is None:
        fig, ax = plt.subplots(figsize=(7.2, 0.9 + 0.42 * (buckets + 1)))
        plt.close(fig)  # shown once, as the cell's value
    colour_of_layer = _layer_colours(timeline)
    backward_row = buckets  # rows: the backward pass on top, then bucket 0, 1, ... downwards

    bars = [_bar(ax, backward_row, layer.start, layer.end,
                 colour_of_layer.get(layer.label, GREY), layer.label)
            for layer in timeline.layers]
    bars += [_bar(ax, backward_row - 1 - index, bucket.start, bucket.end, _bucket_colour(index), "")
             for index, bucket in enumerate(timeline.buckets)]

    compute_end, backward_end = timeline.compute_end * MS, timeline.backward_end * MS
    ax.axvline(compute_end, color="0.25", linestyle="--", linewidth=1)
    ax.axvline(backward_end, color="0.1", linewidth=1.3)
    not_hidden = timeline.communication_after_compute * MS
    if not_hidden > 0:
        ax.add_patch(Rectangle((compute_end, -0.5), not_hidden, buckets, color=VERMILLION,
                               alpha=0.10, linewidth=0, zorder=0))
    rows = [f"bucket {i}: {_layer_range(timeline.bucket_layers(i))}" for i in reversed(range(buckets))]
    ax.set_yticks(range(buckets + 1), rows + ["backward"])
    ax.set_ylim(-0.6, buckets + 0.6)
    ax.set_xlim(0, xmax if xmax is not None else backward_end * 1.04)
    ax.set_xlabel("time after backward() was called (ms)")
    ax.grid(axis="x", color="0.9", linewidth=0.8)
    ax.set_axisbelow(True)
    for side in ("top", "right", "left"):
        ax.spines[side].set_visible(False)
    ax.tick_params(axis="y", length=0, labelsize=9)
    label_bars(ax, bars)
    ax.set_title(title if title is not None else
                 f"rank {timeline.rank}, {timeline.cap_text(spaced=True)}: "
                 f"{buckets} bucket{'s' if buckets != 1 else ''}", fontsize=10.5, loc="left")
    return ax.figure


def draw_timelines(timelines: Sequence, *, titles: Sequence[str] | None = None) -> Figure:
    """Stack several timelines on one shared time axis, with one legend for the lines."""
    timelines = list(timelines)
    if not timelines:
        raise ValueError("draw_timelines needs at least one timeline")
    if titles is not None and len(titles) != len(timelines):
        raise ValueError(f"got {len(titles)} titles for {len(timelines)} timelines")
    for timeline in timelines:
        _check(timeline)
    xmax = max(t.backward_end for t in timelines) * MS * 1.04
    rows = [len(t.buckets) + 1 for t in timelines]
    fig, axes = plt.subplots(len(timelines), 1, figsize=(7.2, 1.2 + 0.42 * sum(rows) + 0.5 * len(timelines)),
                             sharex=True, squeeze=False,
                             gridspec_kw={"height_ratios": [r + 1.2 for r in rows]})
    plt.close(fig)
    for i, (ax, timeline) in enumerate(zip(axes[:, 0], timelines)):
        draw_timeline(timeline, ax=ax, xmax=xmax, title=None if titles is None else titles[i])
        if i < len(timelines) - 1:
            ax.set_xlabel("")
    handles = [
        plt.Line2D([], [], color="0.25", linestyle="--", linewidth=1, label="last gradient computed"),
        plt.Line2D([], [], color="0.1", linewidth=1.3, label="backward() returns"),
        Patch(color=VERMILLION, alpha=0.15, label="all-reduce not hidden by the backward pass"),
    ]
    fig.legend(handles=handles, loc="lower center", ncol=3, frameon=False, fontsize=9)
    fig.tight_layout(rect=(0, 0.45 / fig.get_figheight(), 1, 1))
    return fig


def _layer_range(layers):
    """``fc7, fc6`` for a few layers, ``fc7 … fc1`` for many."""
    return ", ".join(layers) if len(layers) <= 3 else f"{layers[0]} … {layers[-1]}"


def _check(timeline):
    for name in ("layers", "buckets", "backward_end", "bucket_contents"):
        if not hasattr(timeline, name):
            raise TypeError(f"expected a BackwardTimeline (from ddp_lab.data_parallel.overlap_timeline), got {type(timeline).__name__}")
    if not timeline.layers:
        raise ValueError("the timeline has no layers: nothing was recorded")


def _bucket_colour(index):
    return BUCKET_COLOURS[index % len(BUCKET_COLOURS)]


def _layer_colours(timeline):
    colours = {}
    for index in range(len(timeline.buckets)):
        for layer in timeline.bucket_layers(index):
            colours.setdefault(layer, _bucket_colour(index))
    return colours


def _bar(ax, y, start, end, colour, label):
    left, width = start * MS, max((end - start) * MS, 0.0)
    ax.barh(y, width, left=left, height=BAR_HEIGHT, color=colour, edgecolor="white", linewidth=0.8)
    return (left, width, y, label)


def label_bars(ax, bars, fontsize=8, *, outline=False):
    """Write each label inside its bar, where it fits (estimated from the axes' size);
    ``bars`` are ``(left, width, y, label)`` in milliseconds. With ``outline``, each
    letter gets a dark edge, for bars of light colours (Chapter 15b's timeline)."""
    x0, x1 = ax.get_xlim()
    box = ax.get_position()
    points_per_ms = box.width * ax.figure.get_figwidth() * 72 / (x1 - x0)
    edge = [effects.withStroke(linewidth=1.6, foreground=INK)] if outline else None
    for left, width, y, label in bars:
        if label and 0.72 * fontsize * len(label) + 6 <= width * points_per_ms:
            ax.text(left + width / 2, y, label, ha="center", va="center", fontsize=fontsize,
                    color="white", fontweight="bold", clip_on=True, path_effects=edge)
