"""Chapter 15f's pictures: the collectives of a 2-D step by mesh dimension, and deeper pipelines as they ran.

* :func:`draw_two_d_step`: one row per mesh dimension (dp, tp), one box per
  collective a rank issued, in the order it issued them, forward then
  backward, each labelled with its kind and bytes: drawn from the
  recorder's records;
* :func:`draw_virtual_pipelines`: a Gantt chart per schedule, one row per
  rank, a box per forward (F), whole backward (B), input gradient (I) or
  weight gradient (W), labelled with its stage and micro-batch, from the
  timed slots of a run (``pipeline_run.TimedStage``).
"""

from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from ddp_lab.draw.palette import (
    BLUE,
    COLLECTIVE_COLOURS,
    COLLECTIVE_LABELS,
    EDGE,
    GREEN,
    INK,
    ORANGE,
    PANEL,
    SKY_BLUE,
    TEXT,
)

__all__ = ["draw_two_d_step", "draw_virtual_pipelines", "PHASE_COLOURS"]

PHASE_COLOURS = {"F": SKY_BLUE, "B": BLUE, "I": ORANGE, "W": GREEN}


def draw_two_d_step(calls, *, title: str = "") -> Figure:
    """``calls``: ``(dim, phase, name, nbytes)`` in the order issued; dims "dp" and "tp"."""
    calls = list(calls)
    if not calls:
        raise ValueError("no collectives to draw: pass the recorder's (dim, phase, name, nbytes) records")
    fig, ax = plt.subplots(figsize=(10, 3.4))
    rows = {"tp": 0, "dp": 1}
    split = next((i for i, c in enumerate(calls) if c[1] == "backward"), len(calls))
    for i, (dim, _phase, name, nbytes) in enumerate(calls):
        # "reduce-scatter" on two lines: a box is one collective wide, and the word is wider than "all-gather"
        label = COLLECTIVE_LABELS.get(name, name).replace("reduce-", "reduce-\n")
        colour = COLLECTIVE_COLOURS.get(name, PANEL)
        ax.add_patch(Rectangle((i + 0.05, rows.get(dim, 0) - 0.4), 0.9, 0.8, facecolor=colour, edgecolor=EDGE))
        ax.text(i + 0.5, rows.get(dim, 0), f"{label}\n{nbytes:,} B", ha="center", va="center", fontsize=10,
                color=INK)  # 4.6:1 on green, the darkest of the three
    ax.axvline(split, color=EDGE, linestyle="--")
    ax.text(split / 2, 1.62, "forward", ha="center", fontsize=11, color=TEXT)
    ax.text((split + len(calls)) / 2, 1.62, "backward", ha="center", fontsize=11, color=TEXT)
    ax.set_xlim(0, len(calls))
    ax.set_ylim(-0.6, 1.85)
    ax.set_yticks([0, 1], ["tp: a row\n(same data)", "dp: a column\n(same shard)"], fontsize=10)
    ax.set_xticks([])
    ax.spines[["top", "right", "bottom"]].set_visible(False)
    if title:
        ax.set_title(title, fontsize=11)
    plt.close(fig)
    return fig


def draw_virtual_pipelines(runs: dict, *, unit: float = 1e-3, titles: dict | None = None) -> Figure:
    """``runs``: ``{name: slots}`` with each slot's ``rank`` set; time in units of ``unit`` seconds (ms)."""
    if not runs:
        raise ValueError("no runs to draw: pass {schedule name: slots}")
    fig, axes = plt.subplots(len(runs), 1, figsize=(10, 1.9 * len(runs) + 0.6), squeeze=False)
    longest = max(max(s.end for s in slots) - min(s.start for s in slots) for slots in runs.values()) / unit
    for ax, (name, slots) in zip(axes[:, 0], runs.items()):
        zero = min(s.start for s in slots)
        ranks = sorted({s.rank for s in slots})
        for s in slots:
            y = len(ranks) - 1 - ranks.index(s.rank)
            start, end = (s.start - zero) / unit, (s.end - zero) / unit
            ax.add_patch(Rectangle((start, y - 0.35), end - start, 0.7, facecolor=PHASE_COLOURS[s.phase],
                                   edgecolor="white", linewidth=0.5))
            if end - start > longest / 30:  # a label only where it fits, at the book's 10 px
                ax.text((start + end) / 2, y, f"{s.phase}{s.microbatch}\ns{s.stage}", ha="center",
                        va="center", fontsize=10, color="white" if s.phase == "B" else TEXT)
        ax.set_xlim(0, longest)
        ax.set_ylim(-0.6, len(ranks) - 0.4)
        ax.set_yticks(range(len(ranks)), [f"rank {r}" for r in reversed(ranks)], fontsize=10)
        ax.set_title((titles or {}).get(name, name), fontsize=11)
        ax.tick_params(labelsize=10)
        ax.spines[["top", "right"]].set_visible(False)
    axes[-1, 0].set_xlabel("time (ms)", fontsize=10)
    handles = [Rectangle((0, 0), 1, 1, facecolor=c) for c in PHASE_COLOURS.values()]
    fig.legend(handles, ["forward", "whole backward", "input gradient", "weight gradient"], loc="upper center",
               ncol=4, fontsize=10, frameon=False)
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    plt.close(fig)
    return fig
