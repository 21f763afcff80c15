"""Animate a traced collective: every rank's chunks, step by step.

The picture is drawn from a ``TracedRun`` (``ddp_lab.collectives.traced``):
the values in the cells are the values the ranks really held after each
step. Any traced collective is drawn the same way; the words of its first
and last frames are in :data:`TEXTS`, by collective. Conventions:

- ranks stand on a circle, rank 0 at the top, in the order of the ring;
- each rank shows its W chunks as cells with their first values;
- a cell's colour says how far it has come: for an all-reduce, how many
  ranks' inputs its sum contains, white for its own input only, deeper blue
  as partial sums grow, green when the chunk holds the sum of all W inputs;
  for an all-to-all, white while cell j still holds the rank's chunk for
  rank j, green once rank j's chunk for it has arrived;
- an arrow is one transfer of this step, labelled with the chunk it carries
  ("all" when the whole tensor travels); a cell with an orange edge has
  just been received.

``animate(run)`` returns a matplotlib ``FuncAnimation``; ``to_html(run)``
renders it as self-contained HTML with play and step controls, which works
in a live notebook and in the static book alike.

The frame is sized for a phone: 350 px wide (4.86 in at 72 dpi), with no
text under 10 pt, so that every number is at least 10 px in the 358 px
column of a 390 px phone; the page widens the picture to the column, up to
:data:`MAX_SHOWN_PX`, and the frames are drawn at twice their pixels
(``ddp_lab.draw.RETINA``) so that it stays sharp. A printed page cannot
press play: the HTML also holds a strip of every frame, each with its
step, hidden on screen and shown in print, where the player and its
buttons are hidden instead (an ``@media print`` rule inside the HTML, so it
works on any page).

Used in Chapter 6 (the ring and naive all-reduces) and Chapter 5 (the
pairwise all-to-all).
"""

from __future__ import annotations

import base64
import html
import io
import math
import uuid

import matplotlib.pyplot as plt
from matplotlib.animation import FuncAnimation
from matplotlib.colors import LinearSegmentedColormap
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch, Rectangle

from ddp_lab.draw import RETINA
from ddp_lab.draw.palette import BLUE, EDGE, GREEN, MUTED_TEXT, ORANGE, PANEL, TEXT

FINISHED = GREEN    # Okabe-Ito green
RECEIVED = ORANGE    # Okabe-Ito orange
ARROW = BLUE       # Okabe-Ito blue
PARTIAL = LinearSegmentedColormap.from_list("partial", ["#ffffff", "#9ecae1"])
TITLES = {"ring": "Ring all-reduce", "naive": "Naive all-reduce (through rank 0)",
          "pairwise": "Pairwise all-to-all"}
# By collective: the caption of the inputs' frame, and the last frame's
# verdict ({verdict}: "equal to" or "DIFFERENT FROM" torch's result).
TEXTS = {
    "all_reduce": ("Each rank holds its own input,\ncut into W chunks (c0, c1, ...).",
                   "Every rank holds the sum,\n{verdict} torch's dist.all_reduce."),
    "all_to_all": ("Chunk cj of each rank is for rank j;\na value's tens digit is its rank.",
                   "Cell cj holds rank j's chunk,\n{verdict} dist.all_to_all_single."),
}

CELL_W, CELL_H = 0.52, 0.56
RADIUS_X, RADIUS_Y = 2.1, 1.75
SHOWN_VALUES = 2
FIGSIZE = (4.86, 5.5)   # inches: 350 x 396 px at 72 dpi, a phone's column
DPI = 72                 # CSS pixels per inch of the frame: 1 pt of text is 1 px
MAX_SHOWN_PX = 540       # the widest the page shows it (a desktop column)
FONT = 10                # points, the smallest text of a frame
TITLE_FONT = 11.5


def animate(run, *, interval=1200, dpi=DPI):
    """A FuncAnimation of ``run``: frame 0 shows the inputs, frame s+1 step s."""
    fig, ax = new_axes(dpi)
    frames = len(run.traces[0].steps) + 1

    def draw(frame):
        ax.clear()
        draw_frame(run, frame, ax)

    animation = FuncAnimation(fig, draw, frames=frames, interval=interval)
    plt.close(fig)  # the animation, not a static copy, is what a notebook shows
    return animation


def new_axes(dpi=DPI):
    """A figure sized for one frame, with the axes filling it."""
    fig, ax = plt.subplots(figsize=FIGSIZE, dpi=dpi)
    fig.subplots_adjust(left=0.01, right=0.99, bottom=0.01, top=0.915)
    return fig, ax


def to_html(run, **options):
    """The animation as self-contained HTML (IPython's ``HTML`` object).

    matplotlib's player (``to_jshtml``), its frames drawn at twice their
    pixels and shown as wide as the column allows (at most
    :data:`MAX_SHOWN_PX`), then the print strip: every frame as an image
    with its step written under it, hidden on screen; in print the strip
    shows and the player does not.
    """
    from IPython.display import HTML

    return HTML(animation_html(run, **options))


def animation_html(run, *, interval=1200, dpi=DPI):
    """The HTML of :func:`to_html`, as a string."""
    # The player shows each frame at its own pixels: draw them at 2x, shown at 1x by the style below.
    player = animate(run, interval=interval, dpi=dpi * RETINA).to_jshtml(default_mode="once")
    # matplotlib's player gives its <img> no alt text: say what the frame shows.
    alt = html.escape(f"{TITLES[run.algorithm]} on {run.world_size} ranks, one frame a step: "
                      "each rank's chunks and the values they hold; the buttons below play and step")
    player = player.replace('<img id="_anim_img', f'<img alt="{alt}" id="_anim_img', 1)
    box = f"ddp-anim-{uuid.uuid4().hex}"
    width = round(FIGSIZE[0] * dpi)
    style = (f"<style>\n"
             f"#{box} img {{ width: 100%; max-width: {MAX_SHOWN_PX}px; height: auto; }}\n"
             f"#{box} .anim-state label {{ display: inline-block; margin-right: 0.5em; }}\n"
             f"#{box} .ddp-print-strip {{ display: none; }}\n"
             f"@media print {{\n"
             f"  #{box} .ddp-player {{ display: none !important; }}\n"
             f"  #{box} .ddp-print-strip {{ display: flex; flex-wrap: wrap; gap: 8px; }}\n"
             f"  #{box} .ddp-print-strip figure {{ margin: 0; width: {width}px; break-inside: avoid; }}\n"
             f"  #{box} .ddp-print-strip img {{ width: {width}px; max-width: 100%; }}\n"
             f"}}\n</style>")
    frames = []
    for frame in range(len(run.traces[0].steps) + 1):
        fig, ax = new_axes(dpi)
        draw_frame(run, frame, ax)
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png", dpi=dpi * RETINA)
        plt.close(fig)
        label = html.escape(_step_label(run, frame))
        data = base64.b64encode(buffer.getvalue()).decode("ascii")
        frames.append(f'<figure class="ddp-print-frame"><img alt="{label}" src="data:image/png;base64,{data}">'
                      f"<figcaption>{label}</figcaption></figure>")
    return (f'<div id="{box}" class="ddp-animation">{style}'
            f'<div class="ddp-player">{player}</div>'
            f'<div class="ddp-print-strip">{"".join(frames)}</div></div>')


def _step_label(run, frame):
    steps = len(run.traces[0].steps)
    if frame == 0:
        return "the inputs"
    return f"step {frame} of {steps} ({run.traces[0].steps[frame - 1].phase})"


def draw_frame(run, frame, ax):
    """Draw the state after ``frame`` steps (0 = the inputs) on ``ax``."""
    world_size = run.world_size
    ax.set_xlim(-3.3, 3.3)
    ax.set_ylim(-3.55, 2.45)
    ax.set_aspect("equal")
    ax.axis("off")
    centres = _rank_centres(world_size)
    for trace, centre in zip(run.traces, centres):
        _draw_rank(ax, trace, frame, centre, world_size)
    if frame > 0:
        for trace in run.traces:
            for destination, chunk in trace.steps[frame - 1].sends:
                _draw_transfer(ax, centres[trace.rank], centres[destination], chunk)
    ax.set_title(_title(run, frame), fontsize=TITLE_FONT, loc="left")
    ax.text(-3.25, -3.5, _caption(run, frame), fontsize=FONT, va="bottom", color=TEXT)


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
    ax.add_patch(FancyBboxPatch((left - 0.08, bottom - 0.3), width + 0.16, CELL_H + 0.68,
                                boxstyle="round,pad=0.02,rounding_size=0.06",
                                facecolor=PANEL, edgecolor=EDGE, linewidth=0.8))
    ax.text(centre[0], bottom + CELL_H + 0.2, f"rank {trace.rank}", ha="center",
            va="center", fontsize=FONT + 0.5, fontweight="bold")
    for index, (values, count) in enumerate(zip(chunks, contributions)):
        _draw_cell(ax, (left + index * CELL_W, bottom), values, count, world_size,
                   index in received)
    for index in range(world_size):
        ax.text(left + (index + 0.5) * CELL_W, bottom - 0.15, f"c{index}", ha="center",
                va="center", fontsize=FONT, color=MUTED_TEXT)


def _draw_cell(ax, corner, values, count, world_size, just_received):
    finished = count >= world_size
    colour = FINISHED if finished else PARTIAL((count - 1) / max(1, world_size - 1))
    ax.add_patch(Rectangle(corner, CELL_W, CELL_H, facecolor=colour,
                           edgecolor=RECEIVED if just_received else MUTED_TEXT,
                           linewidth=2.0 if just_received else 0.6, zorder=2))
    ax.text(corner[0] + CELL_W / 2, corner[1] + CELL_H / 2, _format_values(values),
            ha="center", va="center", fontsize=FONT, zorder=3,
            color="white" if finished else "black", linespacing=1.0)


def _format_values(values):
    shown = [f"{v:g}" for v in values[:SHOWN_VALUES].tolist()]
    if len(values) > SHOWN_VALUES:
        shown.append("…")
    return "\n".join(shown) if shown else "∅"


def _draw_transfer(ax, source, destination, chunk):
    arrow = FancyArrowPatch(source, destination, connectionstyle="arc3,rad=-0.25",
                            arrowstyle="-|>", mutation_scale=14, color=ARROW,
                            linewidth=1.8, shrinkA=36, shrinkB=36, zorder=4, alpha=0.85)
    ax.add_patch(arrow)
    middle = arrow.get_path().vertices[1]  # the curve's control point
    label = "all" if chunk is None else f"c{chunk}"
    ax.text(*((middle + [(source[0] + destination[0]) / 2, (source[1] + destination[1]) / 2]) / 2),
            label, ha="center", va="center", fontsize=FONT, color=ARROW, zorder=5,
            bbox=dict(boxstyle="round,pad=0.15", facecolor="white", edgecolor="none"))


def _title(run, frame):
    name = TITLES[run.algorithm]
    steps = len(run.traces[0].steps)
    if frame == 0:
        return f"{name}, W = {run.world_size}:\nthe inputs"
    phase = run.traces[0].steps[frame - 1].phase
    return f"{name}, W = {run.world_size}:\nstep {frame} of {steps} ({phase})"


def _caption(run, frame):
    steps = len(run.traces[0].steps)
    first, last = TEXTS[run.collective]
    if frame == 0:
        return first
    sent = [sum(_bytes_until(t, frame)) for t in run.traces]
    line = "bytes sent so far:\n" + ", ".join(f"rank {r}: {b}" for r, b in enumerate(sent))
    if frame == steps:
        verdict = "equal to" if run.correct else "DIFFERENT FROM"
        line += "\n" + last.format(verdict=verdict)
    return line


def _bytes_until(trace, frame):
    """Bytes this rank sent in the first ``frame`` steps (from its sends)."""
    element = trace.initial[0].element_size() if trace.initial else 4
    for step in trace.steps[:frame]:
        for _, chunk in step.sends:
            sizes = trace.chunk_sizes if chunk is None else [trace.chunk_sizes[chunk]]
            yield sum(sizes) * element
