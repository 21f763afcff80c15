"""Draw one measured FSDP training step as a Gantt chart, in the style of Chapter 8's DDP timeline.

Input: :class:`ddp_lab.data_parallel.fsdp.StepRecord` records, measured on
a rank with ``torch.profiler``. Each is drawn as four rows that share a time
axis (milliseconds after the step's forward began):

* *compute*: each layer's forward (``aten::linear``) and, after the dashed
  line, its backward (``AddmmBackward0``), one colour per layer;
* *all-gather* and *reduce-scatter*: FSDP's calls on the training thread,
  from the moment it issued each collective to the end of its wait (their
  ``FSDP::all_gather`` and ``FSDP::post_backward_reduce`` markers);
  hatched bars were issued by another layer's *prefetch*;
* *gloo thread*: the collective itself, as gloo's worker thread ran it:
  ``AG`` an all-gather, ``AR`` an all-reduce (gloo runs FSDP's
  reduce-scatter as one).

A layer and every bar that serves it share a colour, so the picture shows
which parameters each collective carries and in which order they come.
Dashed lines separate forward, backward and the optimizer step.

:func:`draw_fsdp_timelines` stacks several steps (FSDP's default, with
``reshard_after_forward=False``, with explicit forward prefetch) on one
shared time axis. Nothing here imports torch: the records are plain data.

Used in Chapter 15b.
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from ddp_lab.draw.palette import BLUE, GREEN, GREY, MUTED_TEXT, ORANGE, PURPLE, SKY_BLUE, VERMILLION
from ddp_lab.draw.timeline import label_bars

__all__ = ["ROWS", "draw_fsdp_timeline", "draw_fsdp_timelines"]

LAYER_COLOURS = (BLUE, ORANGE, GREEN, PURPLE, VERMILLION, SKY_BLUE)
ROWS = ("compute", "all-gather", "reduce-scatter", "gloo thread")  # top to bottom
_ROW_OF_KIND = {"forward": 0, "backward": 0, "all_gather": 1, "reduce_scatter": 2, "gloo": 3}
_SHORT = {"all_gather": "AG", "all_reduce": "AR", "reduce_scatter": "RS"}  # gloo's collectives, in its row
BAR_HEIGHT = 0.62
MS = 1e3


def draw_fsdp_timeline(record, *, ax=None, title: str | None = None, xmax: float | None = None) -> Figure:
    """Draw one :class:`~ddp_lab.data_parallel.fsdp.StepRecord`; return the figure."""
    _check(record)
    if ax is None:
        fig, ax = plt.subplots(figsize=(7.2, 2.4))
        plt.close(fig)  # shown once, as the cell's value
    colours = _layer_colours(record)
    top = len(ROWS) - 1
    bars = []
    for span in record.spans:
        y = top - _ROW_OF_KIND[span.kind]
        left, width = span.start * MS, max((span.end - span.start) * MS, 0.0)
        ax.barh(y, width, left=left, height=BAR_HEIGHT, color=colours.get(span.layer, GREY),
                edgecolor="white", linewidth=0.6, hatch="////" if span.prefetched else None)
        bars.append((left, width, y, _label(span)))
    for name in ("backward", "optimizer.step"):
        if name in record.phases:
            ax.axvline(record.phases[name][0] * MS, color="0.3", linestyle="--", linewidth=1)
    ax.set_xlim(0, xmax if xmax is not None else _end(record) * MS * 1.02)
    _phase_names(ax, record)
    ax.set_yticks(range(len(ROWS)), list(reversed(ROWS)))
    ax.set_ylim(-0.6, len(ROWS) - 0.4)
    ax.set_xlabel("time after the step's forward began (ms)")
    ax.grid(axis="x", color="0.9", linewidth=0.8)
    ax.set_axisbelow(True)
    for side in ("top", "right", "left"):
        ax.spines[side].set_visible(False)
    ax.tick_params(axis="y", length=0, labelsize=9)
    label_bars(ax, bars, fontsize=7.5, outline=True)
    ax.set_title(title if title is not None else f"rank {record.rank} of {record.world_size}",
                 fontsize=10.5, loc="left", pad=14)
    return ax.figure


def draw_fsdp_timelines(records: Sequence, *, titles: Sequence[str] | None = None) -> Figure:
    """Stack several steps on one shared time axis, with one legend for the layers and the hatching."""
    records = list(records)
    if not records:
        raise ValueError("draw_fsdp_timelines needs at least one StepRecord")
    if titles is not None and len(titles) != len(records):
        raise ValueError(f"got {len(titles)} titles for {len(records)} records")
    for record in records:
        _check(record)
    xmax = max(_end(r) for r in records) * MS * 1.02
    fig, axes = plt.subplots(len(records), 1, figsize=(7.2, 0.7 + 2.35 * len(records)), sharex=True,
                             squeeze=False)
    plt.close(fig)
    for i, (ax, record) in enumerate(zip(axes[:, 0], records)):
        draw_fsdp_timeline(record, ax=ax, xmax=xmax, title=None if titles is None else titles[i])
        if i < len(records) - 1:
            ax.set_xlabel("")
    colours = _layer_colours(records[0])
    handles = [Patch(color=colour, label=layer) for layer, colour in colours.items()]
    handles.append(Patch(facecolor="white", edgecolor=MUTED_TEXT, hatch="////", label="issued by a prefetch"))
    fig.legend(handles=handles, loc="lower center", ncol=len(handles), frameon=False, fontsize=9)
    fig.tight_layout(rect=(0, 0.4 / fig.get_figheight(), 1, 1))
    return fig


def _check(record):
    for name in ("spans", "phases", "rank", "world_size"):
        if not hasattr(record, name):
            raise TypeError("expected a StepRecord (from ddp_lab.data_parallel.fsdp.measure_step), "
                            f"got {type(record).__name__}")
    if not record.spans:
        raise ValueError("the record has no spans: was the step profiled by measure_step?")
    unknown = sorted({s.kind for s in record.spans} - set(_ROW_OF_KIND))
    if unknown:
        raise ValueError(f"spans of unknown kind {unknown}; known: {', '.join(_ROW_OF_KIND)}")


def _end(record):
    """When the last thing drawn ends: a span, or the optimizer step."""
    return max([s.end for s in record.spans] + [end for _, end in record.phases.values()])


def _layer_colours(record):
    layers = []
    for span in sorted(record.spans, key=lambda s: s.start):
        if span.kind == "forward" and span.layer and span.layer not in layers:
            layers.append(span.layer)
    for span in record.spans:  # layers seen only in collectives, after those that computed
        if span.layer and span.layer not in layers:
            layers.append(span.layer)
    return {layer: LAYER_COLOURS[i % len(LAYER_COLOURS)] for i, layer in enumerate(layers)}


def _label(span):
    if span.kind == "backward":
        return f"∇{span.layer}"
    if span.kind == "gloo":
        return _SHORT.get(span.op, span.op)
    return span.layer


def _phase_names(ax, record):
    x0, x1 = ax.get_xlim()
    for name, (start, end) in record.phases.items():
        middle = (max(start * MS, x0) + min(end * MS, x1)) / 2
        ax.text(middle, len(ROWS) - 0.45, name, ha="center", va="bottom", fontsize=8.5, color=MUTED_TEXT,
                clip_on=False)
