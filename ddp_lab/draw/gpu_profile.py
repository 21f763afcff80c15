"""Draw one profiled DDP step on a GPU: the CPU's phases and calls above, the GPU's streams below.

Input: the summaries that ``ddp_lab.gpu_check.step_profile`` keeps of a
``torch.profiler`` trace (the ``ddp_step_profile`` check's details in a
results file of ``python -m ddp_lab.gpu_check``), each GPU event marked
``communication`` or not (``step_profile.with_communication_marked``). Each summary is one panel,
on a time axis of milliseconds from the start of the step's forward:

* *CPU*: the forward, the backward and the optimizer step, as Python ran them;
* *all-reduce calls*: each all-reduce DDP issued, from the backend's own
  marker (``nccl:all_reduce``, ``gloo:all_reduce``): when the CPU handed the
  bucket over and, for gloo, until its thread had finished with it;
* one row per CUDA stream: the GPU's kernels and copies, coloured by the
  phase that launched them (copies off the compute stream in vermillion).

The GPU runs behind the CPU: a kernel starts after the call that queued it,
so the GPU rows lag the CPU row. Chapter 14 draws the stored runs; Chapter 8
draws the same overlap from a model.
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from ddp_lab.draw.palette import BLUE, GREY, ORANGE, SKY_BLUE, VERMILLION

__all__ = ["draw_step_profile", "PHASE_COLOURS"]

PHASE_COLOURS = {"forward": SKY_BLUE, "backward": BLUE, "optimizer.step": ORANGE, None: GREY}
COMMUNICATION = VERMILLION
BAR_HEIGHT = 0.6
MS = 1e3


def draw_step_profile(summaries: Sequence[dict], *, titles: Sequence[str] | None = None) -> Figure:
    """One panel per summary, stacked, each on its own time axis (ms)."""
    if not summaries:
        raise ValueError("draw_step_profile needs at least one summary")
    titles = list(titles) if titles is not None else [None] * len(summaries)
    if len(titles) != len(summaries):
        raise ValueError(f"{len(titles)} titles for {len(summaries)} summaries")
    heights = [2 + len(s["streams"]) for s in summaries]
    figure, axes = plt.subplots(len(summaries), 1, figsize=(7.2, 0.55 * sum(heights) + 1.2 * len(summaries)),
                                gridspec_kw={"height_ratios": heights}, squeeze=False)
    plt.close(figure)
    for ax, summary, title in zip(axes[:, 0], summaries, titles):
        _panel(ax, summary, title)
    figure.legend(handles=[Patch(color=c, label=f"launched in {p}") for p, c in PHASE_COLOURS.items() if p]
                  + [Patch(color=COMMUNICATION, label="communication: NCCL kernel, or a copy off the compute stream")],
                  loc="lower center", ncol=2, fontsize=8, frameon=False)
    figure.tight_layout(rect=(0, 0.07, 1, 1))
    return figure


def _panel(ax, summary, title):
    rows = ["CPU", "all-reduce calls"] + [f"stream {lane['stream']}" for lane in summary["streams"]]
    for phase in summary["phases"]:
        _bar(ax, 0, phase, PHASE_COLOURS.get(phase["name"], GREY))
    for call in summary["collectives"]:
        _bar(ax, 1, call, COMMUNICATION, alpha=0.5)
    for row, lane in enumerate(summary["streams"], start=2):
        for event in lane["events"]:
            talks = event["communication"]
            _bar(ax, row, event, COMMUNICATION if talks else PHASE_COLOURS.get(event.get("phase"), GREY))
    ax.set_yticks(range(len(rows)), rows, fontsize=8)
    ax.set_ylim(len(rows) - 0.4, -0.6)
    ax.set_xlabel("milliseconds from the start of the forward")
    ax.grid(axis="x", color="0.9", linewidth=0.8)
    ax.set_axisbelow(True)
    if title:
        ax.set_title(title, fontsize=10, loc="left")


def _bar(ax, row, span, colour, alpha=1.0):
    width = max(span["dur_us"], 1.0) / MS
    ax.barh(row, width, left=span["start_us"] / MS, height=BAR_HEIGHT, color=colour, alpha=alpha,
            edgecolor="none")
