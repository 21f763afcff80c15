"""Pictures of memory per rank: DDP against ZeRO stages 1-3, and a calculator.

* :func:`draw_memory_per_rank`: one stacked bar per stage (parameters,
  gradients, optimizer state), with the total at the end of each bar and,
  optionally, a GPU's capacity as a dashed line;
* :func:`draw_memory_cases`: the same for several (model, world size) cases
  side by side: the static figures of the book;
* :func:`draw_memory_vs_world_size`: bytes per rank as the world grows, one
  line per stage (log-log): ZeRO-3 keeps falling as 1/N, ZeRO-1 and ZeRO-2
  level off at the states they do not shard;

The numbers come from :mod:`ddp_lab.memory`; nothing here computes a formula.

Used in Chapter 15.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter

from ddp_lab.draw.palette import BLUE, GREEN, MUTED_TEXT, ORANGE, SKY_BLUE, VERMILLION
from ddp_lab.memory import STAGES, bytes_per_parameter, memory_per_rank, memory_table
from ddp_lab.units import format_gb

__all__ = ["draw_memory_per_rank", "draw_memory_cases", "draw_memory_vs_world_size",
           "describe_parameters"]

# Okabe-Ito colours: one per model state, one per stage.
STATE_COLOURS = {"parameters": BLUE, "gradients": ORANGE, "optimizer": GREEN}
STAGE_COLOURS = {"DDP": MUTED_TEXT, "ZeRO-1": SKY_BLUE, "ZeRO-2": ORANGE, "ZeRO-3": GREEN}
STATE_LABELS = {"parameters": "parameters", "gradients": "gradients", "optimizer": "optimizer state"}
OPTIMIZER_NAMES = {"adam": "Adam", "sgd-momentum": "SGD with momentum", "sgd": "SGD"}


def describe_parameters(count: float) -> str:
    """``7.5e9`` -> ``'7.5B'``, ``1.25e8`` -> ``'125M'``."""
    for size, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if count >= size:
            return f"{count / size:.3g}{suffix}"
    return f"{count:.3g}"


def draw_memory_per_rank(table, *, capacity_gb: float | None = None, title: str | None = None,
                         ax=None, legend: bool = True) -> Figure:
    """Stacked horizontal bars, one per stage of ``table`` (from ``memory_table``), in GB."""
    table = list(table)
    if not table:
        raise ValueError("draw_memory_per_rank needs at least one MemoryPerRank row")
    if ax is None:
        fig, ax = plt.subplots(figsize=(7.0, 2.9), layout="tight")
        plt.close(fig)
    rows = range(len(table))[::-1]  # the first stage on top
    for y, row in zip(rows, table):
        left = 0.0
        for state, colour in STATE_COLOURS.items():
            width = getattr(row, state) / 1e9
            ax.barh(y, width, left=left, color=colour, height=0.62, edgecolor="white", linewidth=0.6,
                    label=STATE_LABELS[state] if y == rows[0] else None)
            left += width
        ax.text(left, y, "  " + format_gb(row.total), va="center", ha="left", fontsize=9)
    ax.set_yticks(list(rows), [row.stage for row in table])
    largest = max(row.total for row in table) / 1e9
    right = max(largest, capacity_gb or 0) * 1.22
    if capacity_gb:
        ax.axvline(capacity_gb, color=VERMILLION, linestyle="--", linewidth=1.2)
        ax.text(capacity_gb, len(table) - 0.45, f" {capacity_gb:g} GB GPU", color=VERMILLION,
                fontsize=8.5, va="bottom", ha="left")
    ax.set_xlim(0, right)
    ax.set_ylim(-0.6, len(table) - 0.2)
    ax.set_xlabel("memory per rank for the model states (GB)")
    ax.spines[["top", "right"]].set_visible(False)
    ax.grid(axis="x", color="0.9")
    ax.set_axisbelow(True)
    if title:
        ax.set_title(title, fontsize=10.5, loc="left")
    if legend:
        ax.legend(loc="lower right", fontsize=8.5, frameon=False)
    return ax.figure


def draw_memory_cases(cases, *, precision: str = "mixed", optimizer: str = "adam",
                      capacity_gb: float | None = 80) -> Figure:
    """One panel per ``(num_parameters, world_size)`` case, stacked vertically."""
    cases = list(cases)
    if not cases:
        raise ValueError("draw_memory_cases needs at least one (num_parameters, world_size) case")
    fig, axes = plt.subplots(len(cases), 1, figsize=(7.2, 2.35 * len(cases)), squeeze=False)
    plt.close(fig)
    b = bytes_per_parameter(precision, optimizer)
    for index, (ax, (count, world)) in enumerate(zip(axes[:, 0], cases)):
        table = memory_table(count, world, precision=precision, optimizer=optimizer)
        draw_memory_per_rank(table, capacity_gb=capacity_gb, ax=ax, legend=index == 0,
                             title=f"{describe_parameters(count)} parameters on {world} GPUs")
        if index < len(cases) - 1:
            ax.set_xlabel("")
    fig.suptitle(f"Model states per GPU, {precision} precision with {OPTIMIZER_NAMES[optimizer]} "
                 f"({b.parameters} + {b.gradients} + {b.optimizer} bytes per parameter)",
                 fontsize=11, x=0.02, ha="left")
    fig.tight_layout()
    return fig


def draw_memory_vs_world_size(num_parameters: float, *, world_sizes=None, precision: str = "mixed",
                              optimizer: str = "adam", capacity_gb: float | None = 80, ax=None) -> Figure:
    """Total bytes per rank against the world size, one line per stage, log-log."""
    world_sizes = list(world_sizes or [2 ** k for k in range(11)])
    if ax is None:
        fig, ax = plt.subplots(figsize=(6.4, 4.0))
        plt.close(fig)
    for stage in STAGES:
        totals = [memory_per_rank(num_parameters, n, stage, precision=precision, optimizer=optimizer).total / 1e9
                  for n in world_sizes]
        ax.plot(world_sizes, totals, "o-", markersize=3.5, color=STAGE_COLOURS[stage], label=stage, linewidth=1.8)
        ax.annotate(stage, (world_sizes[-1], totals[-1]), xytext=(5, 0), textcoords="offset points",
                    va="center", fontsize=9, color=STAGE_COLOURS[stage])
    if capacity_gb:
        ax.axhline(capacity_gb, color=VERMILLION, linestyle="--", linewidth=1.1)
        ax.text(world_sizes[-1], capacity_gb * 0.9, f"{capacity_gb:g} GB GPU", color=VERMILLION, fontsize=8.5,
                ha="right", va="top")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    ax.set_xticks(world_sizes, [str(n) for n in world_sizes])
    ax.set_xlim(world_sizes[0] / 1.3, world_sizes[-1] * 2.6)
    ax.set_xlabel("world size N (data-parallel ranks)")
    ax.set_ylabel("model states per rank (GB)")
    ax.set_title(f"{describe_parameters(num_parameters)} parameters, {precision} precision, "
                 f"{OPTIMIZER_NAMES[optimizer]}",
                 fontsize=10.5, loc="left")
    ax.grid(color="0.9", which="both")
    ax.spines[["top", "right"]].set_visible(False)
    return ax.figure


