"""Chapter 15e's pictures: the bytes of DDP, FSDP and HSDP per mesh dimension, and what a checkpoint's ranks wrote.

:func:`draw_bytes_per_dimension` takes, for each layout, the bytes one rank
sent in one step per collective and per process group (measured on real
ranks by ``ddp_lab.data_parallel.fsdp_production.hsdp_run`` and priced by
``ddp_lab.cost.ring_bytes.ring_bytes``) and draws a stacked bar per layout:
one colour per collective, each part of HSDP's bar labelled with its mesh
dimension, hatched where that is the replicate dimension.

:func:`draw_checkpoint_files` takes what
``ddp_lab.data_parallel.fsdp_production.checkpoint_contents`` read from a
``torch.distributed.checkpoint`` folder and draws a bar per file: the bytes
of the model's shards, of the optimizer's tensors, and the rest of the file
(``torch.save``'s framing of each tensor, pickled values, the metadata).

Plain data in, a matplotlib figure out; no process is started here.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.patches import Patch

from ddp_lab.draw import palette
from ddp_lab.draw.palette import COLLECTIVE_COLOURS, COLLECTIVE_LABELS  # the book's one table: 15f draws them alike

__all__ = ["draw_bytes_per_dimension", "draw_checkpoint_files"]
_DIMENSIONS = ("all ranks", "shard", "replicate")


def draw_bytes_per_dimension(layouts: dict):
    """A stacked bar per layout of the bytes one rank sends per step; returns the figure.

    ``layouts`` maps a layout's name ("DDP") to rows ``(collective,
    dimension, bytes)``: ``collective`` one of ``COLLECTIVE_COLOURS``,
    ``dimension`` one of "all ranks", "shard", "replicate" (the group it ran
    over), ``bytes`` a number >= 0.
    """
    if not layouts:
        raise ValueError("layouts must name at least one layout, e.g. {'DDP': [('all_reduce', 'all ranks', 11184)]}")
    for name, rows in layouts.items():
        for row in rows:
            if len(row) != 3 or row[0] not in COLLECTIVE_COLOURS or row[1] not in _DIMENSIONS or row[2] < 0:
                raise ValueError(f"layout {name!r}: each row must be (collective, dimension, bytes) with a "
                                 f"collective in {sorted(COLLECTIVE_COLOURS)}, a dimension in {_DIMENSIONS} and "
                                 f"bytes >= 0, got {row!r}")
    fig, ax = plt.subplots(figsize=(7.2, 0.75 * len(layouts) + 1.6))
    names = list(layouts)
    top = max(sum(float(b) for *_, b in rows) for rows in layouts.values())
    seen = set()
    for y, name in enumerate(names):
        left = 0.0
        for collective, dimension, nbytes in layouts[name]:
            ax.barh(y, float(nbytes), left=left, height=0.6, color=COLLECTIVE_COLOURS[collective],
                    hatch="//" if dimension == "replicate" else None, edgecolor="white")
            seen.add(collective)
            if dimension != "all ranks":
                ax.text(left + float(nbytes) / 2, y, dimension, ha="center", va="center", fontsize=10,
                        color=palette.INK, bbox={"facecolor": "white", "edgecolor": "none", "pad": 1.5})
            left += float(nbytes)
        ax.text(left + top * 0.01, y, f"{left:,.0f} B", va="center", fontsize=10, color=palette.TEXT)
    ax.set_yticks(range(len(names)), names, fontsize=11)
    ax.invert_yaxis()
    ax.set_xlim(0, top * 1.18)
    ax.set_xlabel("bytes one rank sends per step (ring count)", fontsize=10)
    ax.tick_params(axis="x", labelsize=10)
    ax.spines[["top", "right"]].set_visible(False)
    handles = [Patch(color=COLLECTIVE_COLOURS[c], label=COLLECTIVE_LABELS[c]) for c in COLLECTIVE_COLOURS if c in seen]
    if any(d == "replicate" for rows in layouts.values() for _, d, _ in rows):
        handles.append(Patch(facecolor=palette.GREY, hatch="//", edgecolor="white", label="across replicas"))
    ax.legend(handles=handles, fontsize=10, frameon=False, loc="upper center", bbox_to_anchor=(0.5, -0.3),
              ncol=len(handles))
    fig.tight_layout()
    plt.close(fig)  # shown once, as the cell's value
    return fig


def draw_checkpoint_files(contents: dict):
    """A bar per file of a checkpoint folder: model shards, optimizer tensors, the rest; returns the figure.

    ``contents`` is ``{"sizes": {file: bytes}, "pieces": {file: [(key,
    shape, numel, nbytes), ...]}}`` as ``checkpoint_contents`` returns it;
    keys starting with "model." count as the model's.
    """
    if not isinstance(contents, dict) or not {"sizes", "pieces"} <= set(contents):
        raise ValueError("contents must be checkpoint_contents(folder)'s dict, with 'sizes' and 'pieces'")
    files = list(contents["sizes"])
    model, optimizer, rest = [], [], []
    for name in files:
        pieces = contents["pieces"].get(name, [])
        m = sum(p[3] for p in pieces if p[0].startswith("model."))
        o = sum(p[3] for p in pieces if not p[0].startswith("model."))
        model.append(m)
        optimizer.append(o)
        rest.append(contents["sizes"][name] - m - o)
    fig, ax = plt.subplots(figsize=(7.2, 3.2))
    x = range(len(files))
    ax.bar(x, model, color=palette.BLUE, label="model shards")
    ax.bar(x, optimizer, bottom=model, color=palette.ORANGE, label="optimizer tensors")
    ax.bar(x, rest, bottom=[m + o for m, o in zip(model, optimizer)], color=palette.GREY,
           label="the rest: framing, pickled values, metadata")
    for i, name in enumerate(files):
        ax.text(i, contents["sizes"][name], f"{contents['sizes'][name]:,}", ha="center", va="bottom",
                fontsize=10, color=palette.TEXT)
    ax.set_xticks(list(x), files, fontsize=10)
    ax.set_ylabel("bytes in the file", fontsize=10)
    ax.tick_params(axis="y", labelsize=10)
    ax.set_ylim(0, max(contents["sizes"].values()) * 1.35)
    ax.spines[["top", "right"]].set_visible(False)
    ax.legend(fontsize=10, frameon=False, loc="upper left", ncol=2)
    fig.tight_layout()
    plt.close(fig)  # shown once, as the cell's value
    return fig
