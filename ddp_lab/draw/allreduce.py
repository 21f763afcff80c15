"""Animate a traced all-reduce: every rank's chunks, step by step.

The picture is drawn from an ``AllReduceRun`` (``ddp_lab.collectives.traced_all_reduce``):
the values in the cells are the values the ranks really held after each
step. Conventions:

- ranks stand on a circle, rank 0 at the top, in the order of the ring;
- each rank shows its W chunks as cells with their first values;
- a cell's colour says how many ranks' inputs its sum contains: white for
  its own input only, deeper blue as partial sums grow, green when the
  chunk holds the sum of all W inputs;
- an arrow is one transfer of this step, labelled with the chunk it carries
  ("all" when the whole tensor travels); a cell with an orange edge has
  just been received.

``animate(run)`` returns a matplotlib ``FuncAnimation``; ``to_html(run)``
renders it as self-contained HTML with play and step controls, which works
in a live notebook and in the static book alike.

Used in Chapter 6.
"""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
from matplotlib.animation import FuncAnimation
from matplotlib.colors import LinearSegmentedColormap
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch, Rectangle

from ddp_lab.draw.palette import BLUE, EDGE, GREEN, MUTED_TEXT, ORANGE, PANEL, TEXT

FINISHED = GREEN    # Okabe-Ito green
RECEIVED = ORANGE    # Okabe-Ito orange
ARROW = BLUE       # Okabe-Ito blue
PARTIAL = LinearSegmentedColormap.from_list("partial", ["#ffffff", "#9ecae1"])
TITLES = {"ring": "Ring all-reduce", "naive": "Naive all-reduce (through rank 0)"}

CELL_W, CELL_H = 0.5, 0.44
RADIUS_X, RADIUS_Y = 2.1, 1.5
SHOWN_VALUES = 2


def animate(run, *, interval=1200, dpi=72):
    """A FuncAnimation of ``run``: frame 0 shows the inputs, frame s+1 step s."""
    fig, ax = new_axes(dpi)
    frames = len(run.traces[0].steps) + 1

    def draw(frame):
        ax.clear()
        draw_frame(run, frame, ax)

    animation = FuncAnimation(fig, draw, frames=frames, interval=interval)
    plt.close(fig)  # the animation, not a static copy, is what a notebook shows
    return animation


def new_axes(dpi=72):
    """A figure sized for one frame, with the axes filling it."""
    fig, ax = plt.subplots(figsize=(7.5, 5.6), dpi=dpi)
    fig.subplots_adjust(left=0.01, right=0.99, bottom=0.01, top=0.93)
    return fig, ax


def to_html(run, **options):
    """The animation as self-contained HTML (IPython's ``HTML`` object)."""
    from IPython.display import HTML

    return HTML(animate(run, **options).to_jshtml(default_mode="once"))


def draw_frame(run, frame, ax):
    """Draw the state after ``frame`` steps (0 = the inputs) on ``ax``."""
    world_size = run.world_size
    ax.set_xlim(-3.35, 3.35)
    ax.set_ylim(-2.55, 2.35)
    ax.set_aspect("equal")
    ax.axis("off")
    centres = _rank_centres(world_size)
    for trace, centre in zip(run.traces, centres):
        _draw_rank(ax, trace, frame, centre, world_size)
    if frame > 0:
        for trace in run.traces:
            for destination, chunk in trace.steps[frame - 1].sends:
                _draw_transfer(ax, centres[trace.rank], centres[destination], chunk)
    ax.set_title(_title(run, frame), fontsize=12, loc="left")
    ax.text(-3.3, -2.5, _caption(run, frame), fontsize=9, va="bottom", color=TEXT)


def _rank_centres(world_size):
    angles = [math.pi / 2 - 2 * math.pi * r / world_size for r in range(world_size)]
    if world_size == 2:
        angles = [math.pi, 0.0]  # side by side reads better than top and bottom
    return [(RADIUS_X * math.cos(a), RADIUS_Y * math.sin(a)) for a in angles]


def _state(trace, frame):
    """The chunks, contributions and just-received chunks after ``frame`` steps."""
    if frame == 0:
        return trace.initial, [1] * trace.world_size, set()
    step = trace.steps[frame - 1]
    received = {chunk for _, chunk in step.receives}
    if None in received:
        received = set(range(trace.world_size))
    return step.chunks, step.contributions, received


def _draw_rank(ax, trace, frame, centre, world_size):
    chunks, contributions, received = _state(trace, frame)
    width = world_size * CELL_W
    left, bottom = centre[0] - width / 2, centre[1] - CELL_H / 2
    ax.add_patch(FancyBboxPatch((left - 0.1, bottom - 0.24), width + 0.2, CELL_H + 0.6,
                                boxstyle="round,pad=0.02,rounding_size=0.06",
                                facecolor=PANEL, edgecolor=EDGE, linewidth=0.8))
    ax.text(centre[0], bottom + CELL_H + 0.18, f"rank {trace.rank}", ha="center",
            va="center", fontsize=10.5, fontweight="bold")
    for index, (values, count) in enumerate(zip(chunks, contributions)):
        _draw_cell(ax, (left + index * CELL_W, bottom), values, count, world_size,
                   index in received)
    for index in range(world_size):
        ax.text(left + (index + 0.5) * CELL_W, bottom - 0.12, f"c{index}", ha="center",
                va="center", fontsize=7.5, color="#666666")


def _draw_cell(ax, corner, values, count, world_size, just_received):
    finished = count >= world_size
    colour = FINISHED if finished else PARTIAL((count - 1) / max(1, world_size - 1))
    ax.add_patch(Rectangle(corner, CELL_W, CELL_H, facecolor=colour,
                           edgecolor=RECEIVED if just_received else MUTED_TEXT,
                           linewidth=2.0 if just_received else 0.6, zorder=2))
    ax.text(corner[0] + CELL_W / 2, corner[1] + CELL_H / 2, _format_values(values),
            ha="center", va="center", fontsize=8.5, zorder=3,
            color="white" if finished else "black", linespacing=1.0)


def _format_values(values):
    shown = [f"{v:g}" for v in values[:SHOWN_VALUES].tolist()]
    if len(values) > SHOWN_VALUES:
        shown.append("…")
    return "\n".join(shown) if shown else "∅"


def _draw_transfer(ax, source, destination, chunk):
    arrow = FancyArrowPatch(source, destination, connectionstyle="arc3,rad=-0.25",
                            arrowstyle="-|>", mutation_scale=14, color=ARROW,
                            linewidth=1.8, shrinkA=40, shrinkB=40, zorder=4, alpha=0.85)
    ax.add_patch(arrow)
    middle = arrow.get_path().vertices[1]  # the curve's control point
    label = "all" if chunk is None else f"c{chunk}"
    ax.text(*((middle + [(source[0] + destination[0]) / 2, (source[1] + destination[1]) / 2]) / 2),
            label, ha="center", va="center", fontsize=9, color=ARROW, zorder=5,
            bbox=dict(boxstyle="round,pad=0.15", facecolor="white", edgecolor="none"))


def _title(run, frame):
    name = TITLES[run.algorithm]
    steps = len(run.traces[0].steps)
    if frame == 0:
        return f"{name}, W = {run.world_size}: the inputs"
    phase = run.traces[0].steps[frame - 1].phase
    return f"{name}, W = {run.world_size}: step {frame} of {steps} ({phase})"


def _caption(run, frame):
    steps = len(run.traces[0].steps)
    if frame == 0:
        return "Each rank holds its own input, cut into W chunks (c0, c1, ...)."
    sent = [sum(_bytes_until(t, frame)) for t in run.traces]
    line = "bytes sent so far: " + ", ".join(f"rank {r}: {b}" for r, b in enumerate(sent))
    if frame == steps:
        verdict = "equal to" if run.correct else "DIFFERENT FROM"
        line += f"\nEvery rank now holds the sum, {verdict} torch's dist.all_reduce."
    return line


def _bytes_until(trace, frame):
    """Bytes this rank sent in the first ``frame`` steps (from its sends)."""
    element = trace.initial[0].element_size() if trace.initial else 4
    for step in trace.steps[:frame]:
        for _, chunk in step.sends:
            sizes = trace.chunk_sizes if chunk is None else [trace.chunk_sizes[chunk]]
            yield sum(sizes) * element
