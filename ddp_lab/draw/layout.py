"""Draw a job's layout: nodes, their GPUs, and the processes that drive them.

Two pictures, one renderer:

* :func:`draw_topology` draws what the arithmetic of
  :class:`~ddp_lab.topology.Topology` predicts;
* :func:`draw_reported_layout` draws what a real running group reports about
  itself (each rank sends back its host, pid, RANK, LOCAL_RANK and device).

Both turn their input into plain :class:`NodeBox` and :class:`ProcessBox`
records and hand them to :func:`draw_nodes`, so the prediction and the
measurement look alike and can be compared side by side.

Conventions of the pictures:

* a grey rounded box is a node, a small square inside it a GPU, and a
  coloured rounded box around GPUs one process, labelled with its global rank
  R_g and local rank R_l;
* the colour is the local rank (Okabe-Ito palette, readable with colour
  blindness; it repeats after 8 local ranks), so the same colours recur on
  every node, as the local ranks do;
* nodes run left to right and wrap into rows: at most 4 per row, fewer when
  a node holds many GPUs, preferring full rows (3 wide nodes one under the
  other rather than 2 + 1); above ``max_nodes`` nodes the middle ones are
  replaced by a single "⋯" box, keeping the first nodes and the last one, so
  the highest rank W - 1 stays in the picture.

The functions return a matplotlib Figure (already closed in pyplot), so a
notebook shows it once, as the value of the cell; save it with
``fig.savefig(...)``.

Used in Chapters 2 and 12 and in Lab 1.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import matplotlib.pyplot as plt
from matplotlib.colors import to_rgb
from matplotlib.figure import Figure
from matplotlib.patches import FancyBboxPatch, Patch

from ddp_lab.draw.palette import EDGE, INK, OKABE_ITO, PANEL, TEXT
from ddp_lab.topology import Topology

__all__ = [
    "NodeBox",
    "ProcessBox",
    "draw_nodes",
    "draw_topology",
    "draw_reported_layout",
]

# Okabe & Ito's palette, distinguishable with the common colour-vision
# deficiencies; its black is replaced by grey so that labels stay readable.

# Geometry, in "slots": one slot is the width a GPU takes in its node.
CHIP = 0.62  # side of a GPU square
INSET = 0.06  # gap between a process box and the edge of its slots
PAD = 0.2  # padding inside a node box
GAP = 0.4  # space between two node boxes
MARGIN = 0.15  # space around the whole drawing
TITLE_LINE = 0.32  # height of a node's title line
RANK_LINE = 0.27  # height of a "R_g = 5" line
DETAIL_LINE = 0.22  # height of a "pid 4242" line
MAX_ROW_WIDTH = 16.5  # widest row of nodes, in slots, before wrapping
MAX_COLUMNS = 4

# Size of the figure, in inches.
INCHES_PER_SLOT = 0.75
MAX_WIDTH_IN, MAX_HEIGHT_IN, MIN_WIDTH_IN = 9.0, 11.0, 4.6
TITLE_BAND_IN, LEGEND_BAND_IN = 0.45, 0.6


@dataclass(frozen=True)
class ProcessBox:
    """One process in a node picture.

    ``slots`` are the positions (0 = leftmost) of the chips it drives in its
    node box; ``details`` are extra lines under its ranks, e.g. a pid.
    """

    global_rank: int
    local_rank: int
    slots: tuple[int, ...]
    details: tuple[str, ...] = ()


@dataclass(frozen=True)
class NodeBox:
    """One node in a picture: a title, one label per chip ("GPU" over "0"),
    and the processes that drive the chips. A node without chips stands for
    nodes left out of the picture and is drawn as a dashed "⋯" box."""

    title: str
    chips: tuple[str, ...] = ()
    processes: tuple[ProcessBox, ...] = ()
    subtitle: str = ""


# ---------------------------------------------------------------- the renderer


def draw_nodes(nodes: Sequence[NodeBox], *, ax=None, title: str | None = None) -> Figure:
    """Draw node boxes in a grid, with a colour legend for the local ranks.

    The renderer behind :func:`draw_topology` and
    :func:`draw_reported_layout`; call it directly to draw a layout of your
    own. With ``ax`` it draws into an existing Axes (e.g. one of
    ``plt.subplots(1, 2)``) and returns that Axes' figure.
    """
    if not nodes:
        raise ValueError("draw_nodes needs at least one NodeBox")
    cell_w = max(_node_width(node) for node in nodes)
    cell_h = _node_height(nodes)
    rows, columns = _grid(len(nodes), cell_w)
    width = columns * cell_w + (columns - 1) * GAP + 2 * MARGIN
    height = rows * cell_h + (rows - 1) * GAP + 2 * MARGIN
    if ax is None:
        ax = _new_axes(width, height)
    ax.set_xlim(0, width)
    ax.set_ylim(-height, 0)  # y runs downwards from the top row
    ax.set_aspect("equal")
    ax.set_anchor("N")  # side by side, drawings of different heights align at the top
    ax.axis("off")

    fonts = _font_sizes(_inches_per_slot(ax, width, height), nodes)
    for index, node in enumerate(nodes):
        row, column = divmod(index, columns)
        left = MARGIN + column * (cell_w + GAP)
        top = -MARGIN - row * (cell_h + GAP)
        if node.chips:
            _draw_node(ax, node, left, top, cell_h, fonts)
        else:
            _draw_elided_node(ax, node, left, top, cell_w, cell_h, fonts)

    local_ranks = sorted({p.local_rank for node in nodes for p in node.processes})
    _draw_legend(ax, local_ranks, fonts)
    if title:
        ax.set_title(title, fontsize=fonts["figure_title"], pad=6)
    return ax.figure


def _node_width(node: NodeBox) -> float:
    return max(len(node.chips), 1) + 2 * PAD


def _node_height(nodes: Sequence[NodeBox]) -> float:
    """One height for all node boxes, so that a grid of them lines up."""
    title_lines = 2 if any(node.subtitle for node in nodes if node.chips) else 1
    detail_lines = max((len(p.details) for node in nodes for p in node.processes), default=0)
    process_h = 0.1 + CHIP + 0.1 + 2 * RANK_LINE + detail_lines * DETAIL_LINE + 0.08
    return PAD / 2 + title_lines * TITLE_LINE + process_h + PAD


def _grid(count: int, cell_w: float) -> tuple[int, int]:
    """Rows and columns for ``count`` nodes.

    As many nodes per row as fit in MAX_ROW_WIDTH (at most MAX_COLUMNS),
    preferring full rows: 3 wide nodes go one under the other rather than
    2 + 1. Only when that would give a long single column (over 4 nodes) are
    the rows merely balanced (5 nodes: 3 + 2).
    """
    fit = max(1, min(MAX_COLUMNS, count, int((MAX_ROW_WIDTH + GAP) // (cell_w + GAP))))
    columns = max(c for c in range(1, fit + 1) if count % c == 0)
    if columns == 1 and count > 4 and fit > 1:
        columns = math.ceil(count / math.ceil(count / fit))
    return math.ceil(count / columns), columns


def _new_axes(width: float, height: float):
    """A figure sized so that a slot is at most INCHES_PER_SLOT wide, with
    bands above and below the drawing for the title and the legend."""
    scale = min(INCHES_PER_SLOT, MAX_WIDTH_IN / width, MAX_HEIGHT_IN / height)
    draw_w, draw_h = width * scale, height * scale
    fig_w = max(draw_w, MIN_WIDTH_IN)
    fig_h = draw_h + TITLE_BAND_IN + LEGEND_BAND_IN
    fig = plt.figure(figsize=(fig_w, fig_h))
    # Closed in pyplot, so a notebook shows the figure once, as the returned
    # value, not a second time when the cell ends.
    plt.close(fig)
    return fig.add_axes(
        ((fig_w - draw_w) / 2 / fig_w, LEGEND_BAND_IN / fig_h, draw_w / fig_w, draw_h / fig_h)
    )


def _inches_per_slot(ax, width: float, height: float) -> float:
    """How large a slot comes out on paper: fonts are sized from it."""
    box = ax.get_position()
    fig_w, fig_h = ax.figure.get_size_inches()
    return min(box.width * fig_w / width, box.height * fig_h / height)


def _font_sizes(scale: float, nodes: Sequence[NodeBox]) -> dict[str, float]:
    """Font sizes in points: each line fills its share of a slot, shrunk
    where needed so that every rank and detail line fits its process box
    (the same size in every box, for a calm picture)."""
    points = 72 * scale
    processes = [p for node in nodes for p in node.processes]

    def room(process: ProcessBox) -> float:  # usable width of its box, in points
        return 0.9 * (len(process.slots) - 2 * INSET) * points

    # "$R_g = 10$" is about 2.4 + 0.65 x digits font sizes wide; an average
    # character of a detail line about 0.6 font sizes.
    rank = min(
        [points * RANK_LINE / 1.3]
        + [room(p) / (2.4 + 0.65 * len(str(p.global_rank))) for p in processes]
    )
    detail = min(
        [points * DETAIL_LINE / 1.3]
        + [room(p) / (0.6 * len(line)) for p in processes for line in p.details]
    )
    return {
        "node_title": points * TITLE_LINE / 1.45,
        "node_subtitle": points * TITLE_LINE / 1.75,
        "rank": rank,
        "detail": detail,
        "chip": points * 0.2 / 1.25,
        "legend": max(8.0, points * 0.2),
        "figure_title": max(9.5, points * 0.24),
    }


def _colour(local_rank: int) -> str:
    return OKABE_ITO[local_rank % len(OKABE_ITO)]


def _tint(colour: str) -> tuple[float, float, float, float]:
    """The colour, see-through: fills of process boxes and legend patches."""
    return (*to_rgb(colour), 0.4)


def _darker(colour: str) -> tuple[float, float, float]:
    """The colour, darkened: outlines stay visible even for yellow."""
    return tuple(0.7 * c for c in to_rgb(colour))


def _rounded_box(ax, left, bottom, width, height, *, radius, zorder, **style) -> FancyBboxPatch:
    patch = FancyBboxPatch(
        (left, bottom), width, height, boxstyle=f"round,pad=0,rounding_size={radius}", zorder=zorder, **style
    )
    ax.add_artist(patch)  # not add_patch: the limits are set already, and updating them is slow
    return patch


def _fit(text: str, width: float, font_per_slot: float) -> str:
    """Shorten ``text`` with "…" so that it fits ``width`` slots (a character
    is about 0.6 of the font size wide)."""
    max_chars = max(3, int(width / (0.6 * font_per_slot)))
    return text if len(text) <= max_chars else text[: max_chars - 1] + "…"


def _draw_node(ax, node: NodeBox, left: float, top: float, height: float, fonts) -> None:
    width = _node_width(node)
    box = _rounded_box(
        ax, left, top - height, width, height, radius=0.12, zorder=1,
        facecolor=PANEL, edgecolor="#4d4d4d", linewidth=1.2,
    )
    box.set_gid(f"node box {node.title}")
    y = top - PAD / 2 - TITLE_LINE / 2
    ax.text(left + PAD, y, node.title, ha="left", va="center", fontsize=fonts["node_title"],
            fontweight="bold", color=INK, zorder=5)
    if node.subtitle:
        y -= TITLE_LINE
        subtitle = _fit(node.subtitle, width - 2 * PAD, TITLE_LINE / 1.75)
        ax.text(left + PAD, y, subtitle, ha="left", va="center",
                fontsize=fonts["node_subtitle"], color="#444444", zorder=5)
    process_top = y - TITLE_LINE / 2
    process_bottom = top - height + PAD
    for process in node.processes:
        _draw_process(ax, process, left + PAD, process_top, process_bottom, fonts)
    chip_top = process_top - 0.1
    for slot, label in enumerate(node.chips):
        _draw_chip(ax, label, left + PAD + slot + 0.5, chip_top, fonts)


def _draw_elided_node(ax, node: NodeBox, left, top, width, height, fonts) -> None:
    _rounded_box(
        ax, left, top - height, width, height, radius=0.12, zorder=1,
        facecolor="white", edgecolor=EDGE, linewidth=1.0, linestyle="--",
    )
    ax.text(left + width / 2, top - height / 2, node.title, ha="center", va="bottom",
            fontsize=2 * fonts["node_title"], color="#444444", zorder=5)
    ax.text(left + width / 2, top - height / 2, node.subtitle, ha="center", va="top",
            fontsize=fonts["node_title"], color="#444444", zorder=5)


def _draw_process(ax, process: ProcessBox, slots_left, top, bottom, fonts) -> None:
    """A rounded box around the process's chips, ranks and details under them."""
    colour = _colour(process.local_rank)
    left = slots_left + min(process.slots) + INSET
    right = slots_left + max(process.slots) + 1 - INSET
    patch = _rounded_box(
        ax, left, bottom, right - left, top - bottom, radius=0.1, zorder=2,
        facecolor=_tint(colour), edgecolor=_darker(colour), linewidth=1.4,
    )
    patch.set_gid(f"process {process.global_rank}")
    centre = (left + right) / 2
    y = top - 0.1 - CHIP - 0.1
    label = ax.text(
        centre, y, f"$R_g = {process.global_rank}$\n$R_l = {process.local_rank}$",
        ha="center", va="top", fontsize=fonts["rank"], linespacing=1.25, color="black", zorder=5,
    )
    label.set_gid(f"ranks {process.global_rank}")
    if process.details:
        y -= 2 * RANK_LINE + 0.02
        details = ax.text(centre, y, "\n".join(process.details), ha="center", va="top",
                          fontsize=fonts["detail"], linespacing=1.2, color=INK, zorder=5)
        details.set_gid(f"details {process.global_rank}")


def _draw_chip(ax, label: str, centre_x: float, top: float, fonts) -> None:
    _rounded_box(
        ax, centre_x - CHIP / 2, top - CHIP, CHIP, CHIP, radius=0.05, zorder=3,
        facecolor="white", edgecolor=TEXT, linewidth=1.0,
    )
    ax.text(centre_x, top - CHIP / 2, label, ha="center", va="center", fontsize=fonts["chip"],
            linespacing=1.1, color=TEXT, zorder=5)


def _draw_legend(ax, local_ranks: Sequence[int], fonts) -> None:
    if not local_ranks:
        return
    handles = [
        Patch(facecolor=_tint(_colour(r)), edgecolor=_darker(_colour(r)), label=str(r))
        for r in local_ranks
    ]
    ax.legend(
        handles=handles, title="colour = local rank $R_l$", loc="upper center",
        bbox_to_anchor=(0.5, 0.0), ncol=min(len(handles), 8), frameon=False,
        fontsize=fonts["legend"], title_fontsize=fonts["legend"], handlelength=1.2,
        columnspacing=1.0, borderaxespad=0.2,
    )


# ------------------------------------------------------- what the pictures show


def draw_topology(topology: Topology, *, ax=None, title: str | None = None, max_nodes: int = 8) -> Figure:
    """Draw the layout a :class:`~ddp_lab.topology.Topology` predicts.

    Every GPU appears as a square in its node, every process as a coloured
    box around the GPU(s) it drives, labelled with its global rank R_g and
    local rank R_l. The default title describes the topology. Above
    ``max_nodes`` nodes only the first ``max_nodes - 2`` and the last are
    drawn, with a "⋯" box for the others.
    """
    boxes = [_topology_node(topology, n) for n in _nodes_to_draw(topology.nodes, max_nodes)]
    return draw_nodes(boxes, ax=ax, title=str(topology) if title is None else title)


def _nodes_to_draw(count: int, max_nodes: int) -> list[int | range]:
    """Node indices to draw; a range stands for the nodes left out."""
    if max_nodes < 3:
        raise ValueError(f"max_nodes must be at least 3 (first node, ⋯, last node), got {max_nodes}")
    if count <= max_nodes:
        return list(range(count))
    shown = max_nodes - 2
    return [*range(shown), range(shown, count - 1), count - 1]


def _topology_node(topology: Topology, node: int | range) -> NodeBox:
    if isinstance(node, range):
        return NodeBox(title="⋯", subtitle=f"nodes {node.start} to {node.stop - 1} (not drawn)")
    processes = tuple(
        ProcessBox(p.global_rank, p.local_rank, slots=p.gpus) for p in topology.processes_on(node)
    )
    chips = tuple(f"GPU\n{g}" for g in range(topology.gpus_per_node))
    return NodeBox(title=f"node {node}", chips=chips, processes=processes)


REPORT_KEYS = ("host", "pid", "RANK", "LOCAL_RANK", "WORLD_SIZE", "device")


def draw_reported_layout(reports: Sequence[Mapping], *, ax=None, title: str | None = None) -> Figure:
    """Draw the layout that the ranks of a running group report.

    ``reports`` holds one mapping per rank with the keys ``host``, ``pid``,
    ``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE`` and ``device`` (a string such as
    ``"cuda:1"`` or ``"cpu"``, or a list of them for a process spanning
    GPUs), and optionally ``GROUP_RANK`` (the node index torchrun gives each
    node) or ``node``. Values may be strings, as read from ``os.environ``.

    Processes are grouped into nodes by (host, GROUP_RANK): two nodes
    simulated on one machine share a host name but not a GROUP_RANK, and so
    appear as two node boxes. Each process box shows its ranks, pid and
    device; each chip is a device it reported.
    """
    processes = [_parse_report(i, report) for i, report in enumerate(reports)]
    if not processes:
        raise ValueError("draw_reported_layout needs at least one report")
    by_node: dict[tuple, list[dict]] = {}
    for process in sorted(processes, key=lambda p: p["RANK"]):
        by_node.setdefault((process["host"], process["node"]), []).append(process)
    boxes = [_reported_node(host, node, members) for (host, node), members in by_node.items()]
    if title is None:
        sizes = sorted({p["WORLD_SIZE"] for p in processes})
        world = ", ".join(map(str, sizes))
        title = f"Reported by {len(processes)} running processes: WORLD_SIZE = {world}"
    return draw_nodes(boxes, ax=ax, title=title)


def _parse_report(index: int, report: Mapping) -> dict:
    """Check one report and turn its numbers into ints."""
    missing = [key for key in REPORT_KEYS if key not in report]
    if missing:
        raise ValueError(
            f"report {index} lacks {', '.join(missing)}: each report needs {', '.join(REPORT_KEYS)}"
        )
    device = report["device"]  # one device, or a list of them for a process spanning GPUs
    devices = tuple(map(str, device)) if isinstance(device, (list, tuple)) else (str(device),)
    node = report.get("GROUP_RANK", report.get("node"))
    return {
        "host": str(report["host"]),
        "pid": report["pid"],
        "RANK": int(report["RANK"]),
        "LOCAL_RANK": int(report["LOCAL_RANK"]),
        "WORLD_SIZE": int(report["WORLD_SIZE"]),
        "devices": devices,
        "node": None if node is None else int(node),
    }


def _reported_node(host: str, node: int | None, members: list[dict]) -> NodeBox:
    chips: list[str] = []
    processes = []
    for member in sorted(members, key=lambda m: m["LOCAL_RANK"]):
        slots = tuple(range(len(chips), len(chips) + len(member["devices"])))
        chips.extend(_chip_label(device) for device in member["devices"])
        details = (f"pid {member['pid']}", ", ".join(dict.fromkeys(member["devices"])))
        processes.append(ProcessBox(member["RANK"], member["LOCAL_RANK"], slots, details))
    title = host if node is None else f"node {node}"
    return NodeBox(title=title, chips=tuple(chips), processes=tuple(processes),
                   subtitle="" if node is None else host)


def _chip_label(device: str) -> str:
    """The label of a chip: ``cuda:1`` gives "GPU" over "1", ``cpu`` gives "CPU";
    any other device is written as reported."""
    kind, _, index = device.partition(":")
    if kind == "cuda":
        return f"GPU\n{index or '?'}"
    return kind.upper() if kind == "cpu" else device
