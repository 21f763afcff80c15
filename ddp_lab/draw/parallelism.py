"""Pictures of Part V: DataParallel vs DDP, pipeline schedules, tensor parallelism.

* :func:`draw_dataparallel_vs_ddp`: one process whose GPU 0 is the hub of
  every step (DataParallel) next to N equal processes on a ring (DDP);
* :func:`draw_pipeline_schedule`: the slots of :func:`ddp_lab.model_parallel.pipeline.pipeline_schedule`
  as a Gantt chart, one row per stage, idle time hatched;
* :func:`draw_pipeline_schedules`: GPipe above 1F1B for the same P and M;
* :func:`draw_bubble_fractions`: the measured bubble of each schedule
  against M, with the formula (Chapter 15c);
* :func:`draw_tensor_parallel`: the Megatron split of an MLP block over two GPUs.

Each returns a matplotlib Figure (closed in pyplot, so a notebook shows it
once, as the cell's value).
"""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
from matplotlib.figure import Figure
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch, Rectangle

from ddp_lab.draw.palette import BLUE, GREEN, GREY, ORANGE, PANEL, PURPLE, SKY_BLUE, VERMILLION, YELLOW
from ddp_lab.model_parallel.pipeline import bubble_fraction, pipeline_schedule
from ddp_lab.validate import check_int_between

__all__ = ["draw_dataparallel_vs_ddp", "draw_pipeline_schedule", "draw_pipeline_schedules",
           "draw_bubble_fractions", "draw_tensor_parallel"]

GPU_COLOURS = (BLUE, ORANGE, GREEN, PURPLE, SKY_BLUE, VERMILLION, YELLOW, GREY)
FORWARD, BACKWARD, IDLE = SKY_BLUE, BLUE, "#EEEEEE"
SLOT_FONT = 8  # points: 11 px in a figure no wider than the book's column; a slot too narrow for it is not labelled


def _box(ax, x, y, w, h, *, face, edge="0.3", radius=0.08, lw=1.0, z=1, alpha=1.0):
    patch = FancyBboxPatch((x, y), w, h, boxstyle=f"round,pad=0,rounding_size={radius}",
                           facecolor=face, edgecolor=edge, linewidth=lw, zorder=z, alpha=alpha)
    ax.add_patch(patch)
    return patch


def _arrow(ax, start, end, *, colour="0.25", both=False, rad=0.0, lw=1.3, z=3):
    style = "<|-|>" if both else "-|>"
    ax.add_patch(FancyArrowPatch(start, end, arrowstyle=style, mutation_scale=11, color=colour, lw=lw,
                                 connectionstyle=f"arc3,rad={rad}", zorder=z, shrinkA=2, shrinkB=2))


def _gpu(ax, cx, cy, label, colour, size=0.78):
    _box(ax, cx - size / 2, cy - size / 2, size, size, face=colour, edge="0.2", radius=0.06, z=4)
    ax.text(cx, cy, label, ha="center", va="center", fontsize=9 if size > 0.7 else 8, color="white",
            fontweight="bold", zorder=5)


def _steps(ax, lines):
    """What happens in every step, under a panel: a bold heading, then one line each."""
    for i, line in enumerate(lines):
        ax.text(0.2, 1.6 - 0.24 * i, line, fontsize=8.5, va="top", fontweight="bold" if i == 0 else None)


def _towards(a, b, half_a, half_b):
    """The points where the segment from box centre a to box centre b leaves a and enters b.

    Both boxes are squares (half sides ``half_a``, ``half_b``): an arrow drawn
    between these points starts and ends on the boxes' edges, heads visible.
    """
    dx, dy = b[0] - a[0], b[1] - a[1]
    longest = max(abs(dx), abs(dy))
    ta, tb = half_a / longest, 1 - half_b / longest
    return (a[0] + ta * dx, a[1] + ta * dy), (a[0] + tb * dx, a[1] + tb * dy)


def draw_dataparallel_vs_ddp(gpus: int = 4) -> Figure:
    """DataParallel (one process, GPU 0 as hub) beside DDP (one process per GPU, a ring)."""
    check_int_between('gpus', gpus, 2, 8)
    fig, axes = plt.subplots(1, 2, figsize=(8.4, 4.2))
    plt.close(fig)
    for ax in axes:
        ax.set_xlim(0, 5)
        ax.set_ylim(0, 5.2)
        ax.set_aspect("equal")
        ax.axis("off")

    # DataParallel: one process box, GPU 0 in the middle, the others around it.
    ax = axes[0]
    ax.set_title("DataParallel: 1 process, N threads", fontsize=11, loc="left")
    _box(ax, 0.15, 1.85, 4.7, 3.25, face=PANEL, edge="0.4", radius=0.15, lw=1.2)
    ax.text(0.3, 2.0, "one Python process: one GIL for all the threads", fontsize=8, va="bottom", color="0.3")
    hub = (2.5, 3.4)
    _gpu(ax, *hub, "GPU 0", VERMILLION, size=0.9)
    others = [(2.5 + 1.7 * math.cos(a), 3.4 + 1.2 * math.sin(a))
              for a in [math.pi * (0.5 + 2 * k / (gpus - 1)) for k in range(gpus - 1)]]
    for k, (x, y) in enumerate(others, start=1):
        _gpu(ax, x, y, f"GPU {k}", GREY)
        _arrow(ax, *_towards(hub, (x, y), 0.45, 0.39), both=True, colour=VERMILLION, lw=1.6)
    steps = ["every step, through GPU 0:",
             "1. split the batch, copy the pieces out",
             "2. copy the model out again (replicate)",
             "3. forward, one thread per GPU",
             "4. gather the outputs back to GPU 0",
             "5. backward; sum the gradients on GPU 0",
             "6. update the weights on GPU 0 only"]
    _steps(ax, steps)

    # DDP: N process boxes on a ring.
    ax = axes[1]
    ax.set_title("DistributedDataParallel: N processes", fontsize=11, loc="left")
    centre, rx, ry = (2.5, 3.45), 1.6, 1.05
    angles = [math.pi / 2 - 2 * math.pi * k / gpus for k in range(gpus)]
    points = [(centre[0] + rx * math.cos(a), centre[1] + ry * math.sin(a)) for a in angles]
    for k, point in enumerate(points):
        _arrow(ax, *_towards(point, points[(k + 1) % gpus], 0.52, 0.52), colour=GREEN, lw=1.6)
    for k, (x, y) in enumerate(points):
        _box(ax, x - 0.5, y - 0.5, 1.0, 1.0, face=PANEL, edge="0.4", radius=0.1, z=3)
        ax.text(x, y + 0.36, f"process {k}", ha="center", va="center", fontsize=8, color="0.3", zorder=5)
        _gpu(ax, x, y - 0.08, f"GPU {k}", GPU_COLOURS[k % len(GPU_COLOURS)], size=0.6)
    ax.text(*centre, "ring\nall-reduce", ha="center", va="center", fontsize=8.5, color=GREEN)
    steps = ["every step, in every process:",
             "1. load its own share of the batch",
             "2. forward on its own replica (no copies)",
             "3. backward; all-reduce gradient buckets",
             "    while the backward pass goes on",
             "4. update its own replica: all stay equal",
             "(the model is copied once, at the start)"]
    _steps(ax, steps)
    fig.tight_layout()
    return fig


def draw_pipeline_schedule(slots, *, ax=None, title: str | None = None) -> Figure:
    """A Gantt chart of pipeline slots: one row per stage, F and B boxes, idle time hatched."""
    slots = list(slots)
    if not slots:
        raise ValueError("draw_pipeline_schedule needs at least one slot")
    stages = max(s.stage for s in slots) + 1
    end = max(s.end for s in slots)
    if ax is None:
        fig, ax = plt.subplots(figsize=(7.2, 0.55 * stages + 1.0))
        plt.close(fig)
    for stage in range(stages):
        y = stages - 1 - stage
        ax.add_patch(Rectangle((0, y - 0.4), end, 0.8, facecolor=IDLE, edgecolor="none", hatch="///", zorder=0))
    points_per_unit = ax.get_window_extent().width * 72 / ax.figure.dpi / end
    for slot in slots:
        y = stages - 1 - slot.stage
        colour = FORWARD if slot.phase == "F" else BACKWARD
        ax.add_patch(Rectangle((slot.start, y - 0.4), slot.end - slot.start, 0.8, facecolor=colour,
                               edgecolor="white", linewidth=1.0, zorder=2))
        label = f"{slot.phase}{slot.microbatch}"
        if 0.6 * SLOT_FONT * len(label) + 1 <= (slot.end - slot.start) * points_per_unit:  # else it would spill
            ax.text((slot.start + slot.end) / 2, y, label, ha="center", va="center",
                    fontsize=SLOT_FONT, color="black" if slot.phase == "F" else "white", zorder=3)
    ax.set_xlim(0, end)
    ax.set_ylim(-0.6, stages - 0.4)
    ax.set_yticks(range(stages), [f"stage {s}\n(GPU {s})" for s in range(stages)][::-1], fontsize=8)
    ax.set_xlabel("time (forward of one micro-batch on one stage = 1)")
    ax.spines[["top", "right", "left"]].set_visible(False)
    ax.tick_params(axis="y", length=0)
    if title:
        ax.set_title(title, fontsize=10.5, loc="left")
    return ax.figure


def draw_pipeline_schedules(stages: int = 4, microbatches: int = 8) -> Figure:
    """GPipe above 1F1B, same stages and micro-batches: same bubble, different memory."""
    fig, axes = plt.subplots(2, 1, figsize=(7.2, 1.1 * stages + 2.4), sharex=True)
    plt.close(fig)
    bubble = bubble_fraction(stages, microbatches)
    for ax, schedule, note in [(axes[0], "gpipe", f"all forwards first: each stage holds {microbatches} "
                                "micro-batches' activations"),
                               (axes[1], "1f1b", f"one forward, one backward: stage s holds at most "
                                f"{stages} - s")]:
        slots = pipeline_schedule(stages, microbatches, schedule)
        name = "GPipe" if schedule == "gpipe" else "1F1B"
        draw_pipeline_schedule(slots, ax=ax, title=f"{name}: {note}")
    axes[0].set_xlabel("")
    handles = [Rectangle((0, 0), 1, 1, facecolor=FORWARD), Rectangle((0, 0), 1, 1, facecolor=BACKWARD),
               Rectangle((0, 0), 1, 1, facecolor=IDLE, hatch="///")]
    fig.legend(handles, ["forward of micro-batch m (Fm)", "backward (Bm), twice as long", "idle: the bubble"],
               loc="upper center", ncol=3, fontsize=8.5, frameon=False, bbox_to_anchor=(0.5, 1.0))
    fig.suptitle(f"P = {stages} stages, M = {microbatches} micro-batches: bubble = (P-1)/(M+P-1) = "
                 f"{bubble:.0%} of the step", fontsize=11, y=0.955)
    fig.tight_layout(rect=(0, 0, 1, 0.93))
    return fig


def draw_bubble_fractions(bubble, *, stages: int, ax=None, title: str | None = None,
                          names=(("gpipe", "GPipe"), ("1f1b", "1F1B"))) -> Figure:
    """The idle fraction of a step against M: each schedule measured, and the formula (P-1)/(M+P-1).

    ``bubble`` maps ``(schedule, M)`` to a measured fraction (Chapter 15c's
    ``measured_bubble`` of each timed step). Each point is labelled with its
    percentage: at each M the higher of the two schedules above its point,
    the lower below, on a white ground that the lines pass under, so that no
    label lies on another, on a marker or on a line.
    """
    check_int_between("stages", stages, 2, 1024)
    counts = sorted({m for _, m in bubble})
    if not counts:
        raise ValueError("draw_bubble_fractions needs at least one measured (schedule, M)")
    if ax is None:
        fig, ax = plt.subplots(figsize=(7.2, 3.6))
        plt.close(fig)
    many = range(1, max(counts) + 1)
    ax.plot(many, [bubble_fraction(stages, m) for m in many], color="0.3", linestyle="--",
            label=f"(P-1)/(M+P-1), P = {stages}", zorder=1)
    drawn = [(key, name) for key, name in names if any((key, m) in bubble for m in counts)]
    for (key, name), colour, marker in zip(drawn, (BLUE, ORANGE, GREEN, PURPLE), ("o", "s", "^", "D")):
        ms = [m for m in counts if (key, m) in bubble]
        ax.plot(ms, [bubble[key, m] for m in ms], color=colour, marker=marker, label=f"{name}, measured", zorder=2)
        for m in ms:
            others = [bubble[k, m] for k, _ in drawn if k != key and (k, m) in bubble]
            above = all(bubble[key, m] > o or (bubble[key, m] == o and drawn[0][0] == key) for o in others)
            ax.annotate(f"{bubble[key, m]:.0%}", (m, bubble[key, m]), textcoords="offset points",
                        xytext=(0, 8 if above else -8), ha="center", va="bottom" if above else "top",
                        fontsize=10, color=colour, zorder=4,
                        bbox=dict(boxstyle="round,pad=0.1", facecolor="white", edgecolor="none", alpha=0.9))
    ax.set_xscale("log", base=2)
    ax.set_xticks(counts, [str(m) for m in counts])
    ax.minorticks_off()
    ax.set_xlim(0.9, max(counts) * 1.3)
    ax.set_ylim(0, max(0.55, max(bubble.values()) + 0.1))
    ax.yaxis.set_major_formatter(lambda value, _: f"{value:.0%}")
    ax.set_xlabel("micro-batches per step, M", fontsize=10)
    ax.set_ylabel("idle fraction of the step", fontsize=10)
    ax.tick_params(labelsize=10)
    ax.spines[["top", "right"]].set_visible(False)
    ax.legend(frameon=False, fontsize=10, loc="upper right")
    if title:
        ax.set_title(title, fontsize=10.5, loc="left")
    return ax.figure


def _matrix(ax, x, y, w, h, label, colour, *, text_colour="white", z=2):
    ax.add_patch(Rectangle((x, y), w, h, facecolor=colour, edgecolor="0.2", linewidth=0.8, zorder=z))
    ax.text(x + w / 2, y + h / 2, label, ha="center", va="center", fontsize=9, color=text_colour, zorder=z + 1)


def draw_tensor_parallel() -> Figure:
    """Z = GeLU(X A) B on two GPUs: A split by columns, B by rows, one all-reduce."""
    fig, ax = plt.subplots(figsize=(10.0, 4.4))
    plt.close(fig)
    ax.set_xlim(-0.2, 13.4)
    ax.set_ylim(-0.7, 5.4)
    ax.set_aspect("equal")
    ax.axis("off")
    colours = (GPU_COLOURS[0], GPU_COLOURS[1])
    for gpu, base in enumerate((3.0, 0.4)):
        colour = colours[gpu]
        _box(ax, -0.1, base - 0.3, 10.5, 2.15, face=PANEL, edge=colour, radius=0.12, lw=1.4, z=0)
        ax.text(0.05, base + 1.58, f"GPU {gpu}", fontsize=9, color=colour, fontweight="bold", va="center")
        _matrix(ax, 0.3, base + 0.1, 1.2, 1.0, "X", "0.55")                        # b x d, replicated
        ax.text(1.75, base + 0.6, "×", fontsize=14, ha="center", va="center")
        _matrix(ax, 2.0, base - 0.05, 0.6, 1.3, f"A{gpu}", colour)                 # d x h/2: columns of A
        _arrow(ax, (2.65, base + 0.6), (3.7, base + 0.6), colour="0.3")
        ax.text(3.17, base + 0.75, "GeLU", fontsize=8.5, ha="center", va="bottom")
        _matrix(ax, 3.75, base + 0.1, 0.6, 1.0, f"Y{gpu}", colour)                 # b x h/2
        ax.text(4.65, base + 0.6, "×", fontsize=14, ha="center", va="center")
        _matrix(ax, 4.95, base + 0.3, 1.3, 0.6, f"B{gpu}", colour)                 # h/2 x d: rows of B
        ax.text(6.6, base + 0.6, "=", fontsize=14, ha="center", va="center")
        _matrix(ax, 6.95, base + 0.1, 1.2, 1.0, f"Z{gpu}", colour)                 # b x d partial sum
        ax.text(9.25, base + 0.6, "partial sum", fontsize=8.5, ha="center", va="center", color="0.3")
        _arrow(ax, (8.2, base + 0.6), (10.6, 2.6 if gpu == 0 else 2.1), colour="0.3", rad=0.0)
    _box(ax, 10.65, 1.7, 1.55, 1.3, face=GREEN, edge="0.2", radius=0.1, z=2)
    ax.text(11.42, 2.35, "all-reduce\n(sum)", ha="center", va="center", fontsize=9, color="white", zorder=3)
    _arrow(ax, (12.2, 2.35), (12.55, 2.35), colour="0.3")
    _matrix(ax, 12.55, 1.85, 0.8, 1.0, "Z", "0.35")
    ax.text(0.0, -0.55, "X: the input, the same on both GPUs.  A (d × h) split by columns: each GPU computes its own "
            "columns of Y, no communication.\nB (h × d) split by rows: each GPU's product is a partial sum of Z; "
            "one all-reduce adds them. Each GPU stores half of A and B.", fontsize=8.5, va="top", color="0.2")
    return fig
