"""Pictures of a job that hangs or crawls: each rank's last collectives, and computing vs waiting.

Two drawings of Chapter 13b ("When it hangs, diverges or crashes"), each
from data its own runs produce:

* :func:`draw_last_collectives` takes the flight records of a hung job
  (``ddp_lab.debugging.read_flight_records``: ``{rank: dump}``, the dumps
  PyTorch's flight recorder writes) and draws one lane per rank, one box per
  collective, placed by its sequence number in the group. Where the ranks
  agree the boxes line up in one colour; the first sequence number at which
  they differ is drawn in red, and each rank's last box is marked "waits
  here": the picture of a hang is ranks that stopped in *different* calls
  with the same number.
* :func:`draw_wait_compute` takes the per-rank totals of
  ``WaitComputeTimer.gather()`` (``RankTimes``: seconds computing and
  waiting over some steps) of one or several runs and draws, per rank, a bar
  of the mean step split into computing and waiting in collectives. Every
  rank's bar has about the same length, since a collective ends for all
  ranks together; a straggler's bar is nearly all computing, the others'
  nearly all waiting.

Measured times differ from run to run, so the second picture does too; what
it shows (which rank computes, which ones wait) does not. Nothing here
imports torch or starts a process: the inputs are plain data, drawn as they
come.

Used in Chapter 13b.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
from matplotlib.figure import Figure
from matplotlib.patches import FancyBboxPatch, Patch

from ddp_lab.draw.palette import BLUE, EDGE, ERROR_RED, INK, MUTED_TEXT, ORANGE, SKY_BLUE, TEXT

__all__ = ["draw_last_collectives", "draw_wait_compute"]

FONT = 10  # points: 13.9 px at 100 dpi, in figures no wider than the 725 px column
WIDTH = 7.2  # inches: 720 px at matplotlib's 100 dpi, the column's width
AGREE = SKY_BLUE
COMPUTE = BLUE
WAIT = ORANGE


def _entries(dump: Mapping) -> dict[int, tuple[str, str]]:
    """{sequence number: (operation, sizes)} of one rank's collectives (point-to-point left out)."""
    if not isinstance(dump, Mapping) or "entries" not in dump:
        raise TypeError("expected a flight record (a dict with 'entries', from read_flight_records), "
                        f"got {type(dump).__name__}")
    found = {}
    for entry in dump["entries"]:
        if entry.get("is_p2p"):
            continue
        op = str(entry["profiling_name"]).split(":", 1)[-1]
        sizes = ", ".join(str(list(s)) if len(s) else "scalar" for s in entry.get("input_sizes", []))
        found[int(entry["collective_seq_id"])] = (op, sizes or "no tensor")
    return found


def draw_last_collectives(dumps: Mapping[int, Mapping], *, last: int = 6, title: str | None = None) -> Figure:
    """One lane per rank, one box per collective by sequence number; the first mismatch in red.

    ``dumps``: ``{rank: flight record}`` as ``read_flight_records`` returns
    it. ``last``: how many sequence numbers to draw, ending at the highest
    any rank reached (a buffer holds up to ``TORCH_FR_BUFFER_SIZE`` of
    them). A rank without an entry for a number is drawn with an empty,
    dashed box: it never called that collective.
    """
    if not dumps:
        raise ValueError("draw_last_collectives needs the flight record of at least one rank")
    if not isinstance(last, int) or last < 1:
        raise ValueError(f"last must be a positive number of collectives, got {last!r}")
    by_rank = {int(rank): _entries(dump) for rank, dump in sorted(dumps.items())}
    every = sorted({seq for entries in by_rank.values() for seq in entries})
    if not every:
        raise ValueError("the flight records hold no collective: was TORCH_FR_BUFFER_SIZE set before "
                         "the process group was created?")
    seqs = every[-last:]
    differ = [s for s in seqs if len({by_rank[r].get(s) for r in by_rank}) > 1]
    first_differ = differ[0] if differ else None
    ranks = list(by_rank)
    fig, ax = plt.subplots(figsize=(WIDTH, 1.35 + 0.95 * len(ranks)))
    plt.close(fig)  # shown once, as the cell's value
    for lane, rank in enumerate(ranks):
        _draw_lane(ax, len(ranks) - 1 - lane, by_rank[rank], seqs, first_differ)
    _label_lanes(ax, ranks, seqs)
    if title is None:
        title = ("every rank agrees" if first_differ is None else
                 f"the ranks agree up to number {first_differ - 1}, then call different collectives")
    ax.set_title(title, fontsize=FONT + 1, color=INK, loc="left")
    fig.tight_layout()
    fig.patch.set_facecolor("white")  # opaque: legible on the book's dark theme too
    return fig


def _draw_lane(ax, y: float, mine: dict, seqs: list[int], first_differ: int | None) -> None:
    """One rank's boxes at height ``y``: a box per sequence number, "waits here" under its last."""
    reached = max(mine) if mine else None
    for x, seq in enumerate(seqs):
        call = mine.get(seq)
        red = seq == first_differ
        ax.add_patch(FancyBboxPatch((x - 0.44, y - 0.3), 0.88, 0.6, boxstyle="round,pad=0.02,rounding_size=0.06",
                                    facecolor="white" if call is None else ("#F6D5D2" if red else AGREE),
                                    edgecolor=ERROR_RED if red else EDGE, linewidth=2 if red else 1,
                                    linestyle="--" if call is None else "-"))
        if call is None:
            ax.text(x, y, "not called", ha="center", va="center", fontsize=FONT, color=MUTED_TEXT)
            continue
        op, sizes = call
        ax.text(x, y + 0.1, op, ha="center", va="center", fontsize=FONT, color=INK)
        ax.text(x, y - 0.14, sizes, ha="center", va="center", fontsize=FONT, color=TEXT)
        if seq == reached:
            ax.annotate("waits here", (x, y - 0.3), (x, y - 0.47), ha="center", va="top",
                        fontsize=FONT, color=ERROR_RED if red else MUTED_TEXT,
                        arrowprops=dict(arrowstyle="-", color=EDGE, linewidth=0.8))


def _label_lanes(ax, ranks: list[int], seqs: list[int]) -> None:
    """Sequence numbers along the bottom, a rank's name on each lane, no frame."""
    ax.set_xticks(range(len(seqs)), [str(s) for s in seqs], fontsize=FONT)
    ax.set_yticks(range(len(ranks)), [f"rank {r}" for r in reversed(ranks)], fontsize=FONT)
    ax.set_xlim(-0.55, len(seqs) - 0.45)
    ax.set_ylim(-0.75, len(ranks) - 0.5)
    ax.set_xlabel("the collective's sequence number in the group", fontsize=FONT, color=TEXT)
    ax.tick_params(length=0)
    for side in ("top", "right", "left", "bottom"):
        ax.spines[side].set_visible(False)


def _per_step_ms(times) -> list[tuple[int, float, float]]:
    rows = []
    for t in times:
        for name in ("rank", "compute_s", "wait_s", "steps"):
            if not hasattr(t, name):
                raise TypeError("expected RankTimes (from WaitComputeTimer.gather()), "
                                f"got {type(t).__name__}")
        steps = max(int(t.steps), 1)
        rows.append((int(t.rank), 1e3 * t.compute_s / steps, 1e3 * t.wait_s / steps))
    return rows


def draw_wait_compute(runs: Mapping[str, Sequence] | Sequence, *,
                      stragglers: Mapping[str, int | None] | None = None) -> Figure:
    """Per rank, the mean step split into computing and waiting in collectives; one panel per run.

    ``runs``: ``{title: [RankTimes, ...]}`` (one panel each, on one shared
    time axis, so that runs compare at a glance), or a single list of
    ``RankTimes``. ``stragglers``: ``{title: rank or None}``, e.g. from
    ``find_straggler``; the named rank's label says "straggler".
    """
    if not isinstance(runs, Mapping):
        runs = {"": runs}
    if not runs or any(len(times) == 0 for times in runs.values()):
        raise ValueError("draw_wait_compute needs at least one run with the times of at least one rank")
    stragglers = dict(stragglers or {})
    unknown = sorted(set(stragglers) - set(runs))
    if unknown:
        raise ValueError(f"stragglers names runs {unknown} that are not among the runs {sorted(runs)}")
    data = {title: _per_step_ms(times) for title, times in runs.items()}
    longest = max(c + w for rows in data.values() for _, c, w in rows)
    heights = [0.55 + 0.38 * len(rows) for rows in data.values()]
    fig, axes = plt.subplots(len(data), 1, figsize=(WIDTH, sum(heights) + 1.0), sharex=True, squeeze=False,
                             gridspec_kw={"height_ratios": heights})
    plt.close(fig)
    for ax, (title, rows) in zip(axes[:, 0], data.items()):
        slow = stragglers.get(title)
        ys = range(len(rows) - 1, -1, -1)  # rank 0 at the top
        for y, (rank, compute, wait) in zip(ys, rows):
            ax.barh(y, compute, height=0.62, color=COMPUTE, edgecolor="white", linewidth=0.6)
            ax.barh(y, wait, left=compute, height=0.62, color=WAIT, edgecolor="white", linewidth=0.6)
        ax.set_yticks(list(ys), [f"rank {r}" + (" (straggler)" if r == slow else "") for r, _, _ in rows],
                      fontsize=FONT)
        for label, (rank, _, _) in zip(ax.get_yticklabels(), rows):
            label.set_color(ERROR_RED if rank == slow else TEXT)
        ax.set_ylim(-0.6, len(rows) - 0.4)
        ax.set_xlim(0, longest * 1.05)
        ax.tick_params(axis="y", length=0)
        ax.tick_params(axis="x", labelsize=FONT)
        ax.grid(axis="x", color="0.9", linewidth=0.8)
        ax.set_axisbelow(True)
        for side in ("top", "right", "left"):
            ax.spines[side].set_visible(False)
        if title:
            ax.set_title(title, fontsize=FONT + 1, color=INK, loc="left")
    axes[-1, 0].set_xlabel("milliseconds per step (mean over the steps)", fontsize=FONT, color=TEXT)
    handles = [Patch(color=COMPUTE, label="computing"), Patch(color=WAIT, label="waiting in collectives")]
    fig.legend(handles=handles, loc="lower center", ncol=2, frameon=False, fontsize=FONT)
    fig.tight_layout(rect=(0, 0.35 / fig.get_figheight(), 1, 1))
    fig.patch.set_facecolor("white")  # opaque: legible on the book's dark theme too
    return fig
