"""Draw which dataset indices each rank gets, epoch by epoch.

Input: what the ranks' samplers yielded, as plain nested lists,
``indices[epoch][rank] = [i0, i1, ...]`` (the order a rank iterates them),
and the size of the dataset. Output: one panel per epoch, one row per rank,
one cell per index, in the order the rank sees them.

Conventions of the picture:

* a cell's colour is its *dataset index*, the same colour wherever that
  sample appears, so an epoch that repeats the previous one looks identical
  at a glance, and a sample's travel between ranks can be followed;
* a sample given out a second time in the same epoch (the padding that
  makes the shards equal) is hatched and outlined in red;
* samples no rank gets in an epoch (``drop_last``) are listed under the
  panel.

:func:`draw_shards` draws one run (several epochs side by side);
:func:`draw_shard_runs` stacks several runs, e.g. with and without
``set_epoch``, so they can be compared.

Used in Chapter 9.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
from matplotlib import colormaps
from matplotlib.figure import Figure
from matplotlib.patches import Patch, Rectangle

from ddp_lab.draw.palette import ERROR_RED
from ddp_lab.validate import check_positive_int

__all__ = ["draw_shards", "draw_shard_runs"]

CELL = 0.42  # inches per cell
PADDING_EDGE = ERROR_RED


def draw_shards(indices, dataset_size: int, *, title: str | None = None, axes=None) -> Figure:
    """One panel per epoch of ``indices[epoch][rank]``; return the figure."""
    epochs = _validate(indices, dataset_size)
    if axes is None:
        fig = _figure([indices])
        axes = fig.subplots(1, len(epochs), squeeze=False)[0]
        _legend(fig, [indices], dataset_size)
        if title:
            fig.suptitle(title, fontsize=11, x=0.02, ha="left")
    for epoch, (ax, ranks) in enumerate(zip(axes, epochs)):
        _draw_epoch(ax, ranks, dataset_size, epoch, width=max(len(r) for e in epochs for r in e),
                    show_rank_labels=epoch == 0)
    return axes[0].figure.get_figure(root=True)


def draw_shard_runs(runs: Mapping[str, Sequence], dataset_size: int) -> Figure:
    """Stack several runs (``{title: indices}``) one above the other, epochs side by side."""
    if not runs:
        raise ValueError("draw_shard_runs needs at least one run")
    for indices in runs.values():
        _validate(indices, dataset_size)
    epochs = max(len(indices) for indices in runs.values())
    fig = _figure(list(runs.values()))
    for subfig, (title, indices) in zip(fig.subfigures(len(runs), 1), runs.items()):
        row = subfig.subplots(1, epochs, squeeze=False)[0]
        draw_shards(indices, dataset_size, axes=row[:len(indices)])
        for ax in row[len(indices):]:
            ax.axis("off")
        subfig.suptitle(title, fontsize=10.5, fontweight="bold", x=0.01, ha="left")
    _legend(fig, list(runs.values()), dataset_size)
    return fig


def _validate(indices, dataset_size):
    check_positive_int('dataset_size', dataset_size)
    if not isinstance(indices, Sequence) or not indices:
        raise ValueError("indices must be a non-empty list over epochs of lists over ranks of indices")
    epochs = [[list(rank) for rank in epoch] for epoch in indices]
    for e, ranks in enumerate(epochs):
        if not ranks:
            raise ValueError(f"epoch {e} has no ranks")
        for r, shard in enumerate(ranks):
            bad = [i for i in shard if not isinstance(i, int) or not 0 <= i < dataset_size]
            if bad:
                raise ValueError(f"epoch {e}, rank {r}: index {bad[0]!r} is not in 0..{dataset_size - 1}")
    return epochs


def _figure(runs):
    width = max(len(r) for run in runs for epoch in run for r in epoch)
    ranks = max(len(epoch) for run in runs for epoch in run)
    epochs = max(len(run) for run in runs)
    fig_w = 0.9 + epochs * (width * CELL + 0.5)
    fig_h = len(runs) * (ranks * CELL + 0.95) + 0.75
    fig = plt.figure(figsize=(max(fig_w, 5.5), fig_h), layout="constrained")
    plt.close(fig)  # shown once, as the cell's value
    return fig


def _colour(index, dataset_size):
    if dataset_size <= 20:
        palette = colormaps["tab20"]
        return palette((2 * index) % 20 + (index * 2 // 20) % 2)  # dark and light shades alternate
    return colormaps["viridis"](index / max(dataset_size - 1, 1))


def _text_colour(rgba):
    """Black on light cells, white on dark ones (perceived luminance)."""
    red, green, blue = rgba[:3]
    return "black" if 0.299 * red + 0.587 * green + 0.114 * blue > 0.5 else "white"


def _draw_epoch(ax, ranks, dataset_size, epoch, width, show_rank_labels):
    world_size = len(ranks)
    seen = set()
    # The sampler's global order is rank-interleaved: position p of rank r is p * W + r.
    positions = sorted(((p, r) for r, shard in enumerate(ranks) for p in range(len(shard))))
    repeated = set()
    for p, r in positions:
        index = ranks[r][p]
        if index in seen:
            repeated.add((r, p))
        seen.add(index)
    for r, shard in enumerate(ranks):
        y = world_size - 1 - r
        for p, index in enumerate(shard):
            padding = (r, p) in repeated
            ax.add_patch(Rectangle((p, y), 0.92, 0.86, facecolor=_colour(index, dataset_size),
                                   edgecolor=PADDING_EDGE if padding else "white",
                                   linewidth=2.0 if padding else 0.5, hatch="///" if padding else None))
            ax.text(p + 0.46, y + 0.43, str(index), ha="center", va="center", fontsize=9,
                    color=_text_colour(_colour(index, dataset_size)),
                    fontweight="bold" if padding else "normal")
    ax.set_xlim(-0.1, max(width, 1) + 0.02)
    ax.set_ylim(-0.15, world_size + 0.05)
    ax.set_aspect("equal")
    ax.set_xticks([])
    ax.set_yticks([y + 0.43 for y in range(world_size)],
                  [f"rank {r}" for r in reversed(range(world_size))] if show_rank_labels else [])
    ax.tick_params(length=0, labelsize=9)
    for side in ax.spines.values():
        side.set_visible(False)
    missing = sorted(set(range(dataset_size)) - seen)
    ax.set_title(f"epoch {epoch}", fontsize=10)
    if missing:
        ax.set_xlabel("not seen: " + ", ".join(map(str, missing)), fontsize=9, color="0.3")


def _legend(fig, runs, dataset_size):
    padded = any(_has_repeats(epoch) for run in runs for epoch in run)
    handles = [Patch(facecolor="white", edgecolor="white",
                     label="numbers: dataset indices, in the order each rank sees them")]
    if padded:
        handles.append(Patch(facecolor="white", edgecolor=PADDING_EDGE, hatch="///", linewidth=1.5,
                             label="padding: a sample given out twice in one epoch"))
    wide = fig.get_figwidth() >= 8
    fig.legend(handles=handles, loc="outside lower center", ncol=len(handles) if wide else 1,
               frameon=False, fontsize=8.5, handlelength=1.2 if padded else 0)


def _has_repeats(epoch):
    flat = [i for shard in epoch for i in shard]
    return len(flat) != len(set(flat))
