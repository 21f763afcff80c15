"""Draw what every rank held before and after a collective.

One function, :func:`draw_collective`, draws any list of per-rank
:class:`~ddp_lab.collectives.before_after.CollectiveRecord` (what ``ddp_lab.launch`` returns
when each rank returns its record) as a grid:

* one row per rank, labelled with the rank in its own colour;
* on the left what the rank held *before* the call, on the right what it held
  *after*; each named tensor is a strip of cells showing its values (a 2-d
  tensor a block of rows), a list of tensors is several strips side by side,
  and ``None`` (nothing held, like the ``scatter_list`` of a rank that is not
  the root) is written as ``None``;
* a cell's colour says **where its value came from**, found from the data
  itself: a value that only one rank held before the call gets that rank's
  colour, wherever it ends up, so you can follow it as it moves; a value that
  no rank held before is the result of combining several ranks' values (a
  reduction) and is drawn dark; a value that several ranks held before is
  drawn light grey, since its origin cannot be told.

The inference is exact when no value is held by two ranks and no sum equals
an original value. The book's demos make sure of it by giving rank ``r`` the
values ``1, 2, ..., 9`` times ``10**r``: each rank owns a decimal digit, so a
single rank's value has one non-zero digit and a sum of several ranks' has
several (``1111`` is one from every rank). With values that collide (rank 1
holding 12 while a sum of rank 0's 1 and rank 1's 11 is also 12), a combined
value may be coloured as a rank's.

A list of tensors can have each of its parts labelled underneath
(``part_labels={"input": "to {i}", "output": "from {i}"}``): the all-to-all
of Chapter 5 sends part j of every rank's input to rank j, and the labels
say which rank each part goes to or came from.

The function returns a matplotlib Figure (closed in pyplot, so a notebook
shows it once, as the value of the cell).

Used in Chapter 5.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import matplotlib.pyplot as plt
import torch
from matplotlib.colors import to_rgb
from matplotlib.figure import Figure
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch, Rectangle

from ddp_lab.draw.palette import FAINT, MUTED_TEXT, OKABE_ITO, TEXT

__all__ = ["draw_collective", "value_origins", "cell_origin", "format_value"]

COMBINED = "#3B3B3B"  # a reduction of several ranks' values
SHARED = FAINT  # held by several ranks before: origin unknown
NOTHING_TEXT = "#8A8A8A"

# Geometry, in cell units (a cell is 1 x 1).
GAP_IN_LIST = 0.3  # between the tensors of a list
GAP_BETWEEN = 0.8  # between two named values of a rank
NAME_LINE = 0.55  # the name above a value
PART_LABEL_LINE = 0.6  # the labels under the parts of a list (part_labels)
ROW_GAP = 0.45  # between two ranks
LABEL_W = 2.0  # the "rank 0" column
ARROW_W = 1.6  # the column with the arrows
HEADER_H = 0.8  # "before" / "after"
NOTHING_W = 1.2  # width of a "-" for nothing
MARGIN = 0.2
LEGEND_LINE = 0.75
INCHES_PER_UNIT = 0.42
MAX_WIDTH_IN = 11.0


def rank_colour(rank: int) -> str:
    """The colour of a rank (Okabe-Ito, as in the layout pictures)."""
    return OKABE_ITO[rank % len(OKABE_ITO)]


def format_value(value: float) -> str:
    """``3.0 -> '3'``, ``2.5 -> '2.5'``, ``0.3333 -> '0.333'``, ``1e6 -> '1e+06'``."""
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    if value == int(value) and abs(value) < 1e5:
        return str(int(value))
    return f"{value:.3g}"


def value_origins(records: Sequence) -> dict:
    """``{value: set of ranks that held it before}`` over all the records."""
    origins = {}
    for record in records:
        for value in record.before.values():
            for number in _numbers(value):
                origins.setdefault(number, set()).add(record.rank)
    return origins


def cell_origin(number: float, origins: dict):
    """The rank a value came from, ``"combined"`` or ``"shared"``."""
    ranks = origins.get(number)
    if ranks is None:
        return "combined"
    if len(ranks) == 1:
        return next(iter(ranks))
    return "shared"


def draw_collective(records: Sequence, *, title: str | None = None, part_labels: dict | None = None) -> Figure:
    """Draw per-rank records of one operation as a before -> after grid.

    ``records``: one :class:`~ddp_lab.collectives.before_after.CollectiveRecord` per rank (any
    order; they are drawn by rank). ``title`` defaults to the records' name
    and note, e.g. ``"broadcast (src=0)"``. ``part_labels`` maps the name of
    a list-valued tensor to a label written under each of its parts, with
    ``{i}`` for the part's index: ``{"input": "to {i}"}``.
    """
    records = _check_records(records)
    labels = _check_part_labels(part_labels)
    origins = value_origins(records)
    cw = _cell_width(records)
    before_w = max(_values_width(r.before, cw) for r in records)
    after_w = max(_values_width(r.after, cw) for r in records)
    heights = [max(_values_height(r.before, labels), _values_height(r.after, labels)) for r in records]

    x_before = MARGIN + LABEL_W
    x_arrow = x_before + before_w
    x_after = x_arrow + ARROW_W
    width = x_after + after_w + MARGIN
    height = MARGIN + HEADER_H + sum(heights) + ROW_GAP * (len(records) - 1) + MARGIN
    legend = _legend_entries(records, origins)
    legend_h = LEGEND_LINE * len(legend) + 0.3 if legend else 0.0

    scale = min(INCHES_PER_UNIT, MAX_WIDTH_IN / width)
    fig = plt.figure(figsize=(width * scale, (height + legend_h) * scale + 0.45))
    ax = fig.add_axes([0, 0, 1, (height + legend_h) * scale / ((height + legend_h) * scale + 0.45)])
    ax.set_xlim(0, width)
    ax.set_ylim(-(height + legend_h), 0)  # y runs downwards
    ax.set_aspect("equal")
    ax.axis("off")
    points = scale * 72  # points per unit
    fonts = {"cell": min(11, 0.36 * points), "name": min(10, 0.3 * points),
             "rank": min(12, 0.36 * points), "header": min(12, 0.38 * points)}

    top = -MARGIN
    ax.text(x_before, top - HEADER_H / 2, "before", fontsize=fonts["header"], va="center",
            fontweight="bold", color=TEXT)
    ax.text(x_after, top - HEADER_H / 2, "after", fontsize=fonts["header"], va="center",
            fontweight="bold", color=TEXT)
    y = top - HEADER_H
    for record, h in zip(records, heights):
        _draw_rank_label(ax, record.rank, MARGIN, y, h, fonts)
        _draw_values(ax, record.before, x_before, y, origins, fonts, cw, labels)
        _draw_values(ax, record.after, x_after, y, origins, fonts, cw, labels)
        _draw_arrow(ax, x_arrow, x_after, y - NAME_LINE - (h - NAME_LINE) / 2)
        y -= h + ROW_GAP
    if legend:
        _draw_legend(ax, legend, MARGIN, -height - 0.35, fonts)

    first = records[0]
    fig.suptitle(title if title is not None else _default_title(first),
                 fontsize=fonts["header"] + 1, y=1 - 0.08 / ((height + legend_h) * scale + 0.45),
                 va="top", fontfamily="monospace")
    plt.close(fig)
    return fig


# --- checking and measuring ---------------------------------------------------------


def _check_records(records):
    if isinstance(records, (str, bytes)) or not isinstance(records, Sequence) or not records:
        raise ValueError(
            f"draw_collective needs a non-empty list of records (one per rank, as "
            f"ddp_lab.launch returns them), got {records!r}")
    for index, r in enumerate(records):
        if not all(hasattr(r, a) for a in ("name", "rank", "before", "after")):
            raise TypeError(
                f"records[{index}] is a {type(r).__name__}, not a CollectiveRecord: "
                f"have each rank return rec.after(...) (see ddp_lab.collectives.before_after)")
    names = sorted({r.name for r in records})
    if len(names) > 1:
        raise ValueError(f"the records are of different operations {names}: draw one operation at a time")
    ranks = [r.rank for r in records]
    if len(set(ranks)) != len(ranks):
        raise ValueError(f"two records have the same rank (ranks {ranks}): pass one record per rank")
    return sorted(records, key=lambda r: r.rank)


def _check_part_labels(part_labels):
    if part_labels is None:
        return {}
    if not isinstance(part_labels, dict) or not all(
            isinstance(k, str) and isinstance(v, str) and "{i}" in v for k, v in part_labels.items()):
        raise ValueError(f"part_labels must map a value's name to a label with {{i}} for the part's "
                         f"index, e.g. {{'input': 'to {{i}}'}}; got {part_labels!r}")
    return part_labels


def _numbers(value):
    if value is None:
        return []
    if isinstance(value, tuple):
        return [n for v in value for n in _numbers(v)]
    return [float(n) for n in value.detach().reshape(-1).to(torch.float64).tolist()]


def _shape2d(tensor):
    """(rows, columns) a tensor is drawn as: 0-d and 1-d in one row."""
    if tensor.dim() <= 1:
        return 1, max(1, tensor.numel()) if tensor.dim() == 1 else 1
    return math.prod(tensor.shape[:-1]), tensor.shape[-1]


def _cell_width(records):
    """Cells widen for long values (``8888``), so the text keeps a readable size."""
    longest = max((len(format_value(n)) for r in records for values in (r.before, r.after)
                   for v in values.values() for n in _numbers(v)), default=1)
    return max(1.0, 0.3 * longest + 0.2)


def _value_width(value, cw):
    if value is None:
        return NOTHING_W
    if isinstance(value, tuple):
        if not value:
            return NOTHING_W
        return sum(_shape2d(v)[1] * cw for v in value) + GAP_IN_LIST * (len(value) - 1)
    return _shape2d(value)[1] * cw


def _value_rows(value):
    if value is None or (isinstance(value, tuple) and not value):
        return 1
    if isinstance(value, tuple):
        return max(_shape2d(v)[0] for v in value)
    return _shape2d(value)[0]


def _values_width(values, cw):
    if not values:
        return NOTHING_W
    widths = [max(_value_width(v, cw), _name_width(n)) for n, v in values.items()]
    return sum(widths) + GAP_BETWEEN * (len(widths) - 1)


def _name_width(name):
    return 0.28 * len(name)


def _values_height(values, labels):
    rows = max((_value_rows(v) for v in values.values()), default=1)
    labelled = any(isinstance(v, tuple) and v and n in labels for n, v in values.items())
    return NAME_LINE + rows + (PART_LABEL_LINE if labelled else 0.0)


# --- drawing -------------------------------------------------------------------------


def _draw_rank_label(ax, rank, x, top, h, fonts):
    colour = rank_colour(rank)
    ax.add_patch(FancyBboxPatch(
        (x + 0.05, top - NAME_LINE - 0.9), LABEL_W - 0.45, 0.8,
        boxstyle="round,pad=0,rounding_size=0.18", facecolor=colour, edgecolor="none"))
    ax.text(x + 0.05 + (LABEL_W - 0.45) / 2, top - NAME_LINE - 0.5, f"rank {rank}",
            ha="center", va="center", fontsize=fonts["rank"], fontweight="bold",
            color=_text_colour(colour))


def _draw_values(ax, values, x, top, origins, fonts, cw, labels):
    if not values:
        _draw_nothing(ax, x, top - NAME_LINE, fonts)
        return
    for name, value in values.items():
        ax.text(x, top - NAME_LINE / 2, name, fontsize=fonts["name"], va="center",
                color=MUTED_TEXT, fontfamily="monospace")
        if value is None or (isinstance(value, tuple) and not value):
            _draw_nothing(ax, x, top - NAME_LINE, fonts)
        elif isinstance(value, tuple):
            cx, label = x, labels.get(name)
            for index, part in enumerate(value):
                _draw_tensor(ax, part, cx, top - NAME_LINE, origins, fonts, cw)
                width = _shape2d(part)[1] * cw
                if label is not None:
                    ax.text(cx + width / 2, top - NAME_LINE - _value_rows(value) - PART_LABEL_LINE / 2,
                            label.format(i=index), ha="center", va="center", fontsize=fonts["name"],
                            color=MUTED_TEXT)
                cx += width + GAP_IN_LIST
        else:
            _draw_tensor(ax, value, x, top - NAME_LINE, origins, fonts, cw)
        x += max(_value_width(value, cw), _name_width(name)) + GAP_BETWEEN


def _draw_nothing(ax, x, top, fonts):
    ax.text(x, top - 0.5, "None", ha="left", va="center", fontsize=fonts["name"],
            color=NOTHING_TEXT, fontfamily="monospace", fontstyle="italic")


def _draw_tensor(ax, tensor, x, top, origins, fonts, cw):
    rows, columns = _shape2d(tensor)
    numbers = _numbers(tensor)
    if not numbers:  # an empty tensor: an outline
        ax.add_patch(Rectangle((x + 0.05, top - 0.95), 0.9, 0.9, fill=False,
                               edgecolor=NOTHING_TEXT, linestyle=":"))
        return
    for index, number in enumerate(numbers):
        row, column = divmod(index, columns)
        colour = _cell_colour(cell_origin(number, origins))
        cx, cy = x + column * cw, top - row - 1
        ax.add_patch(Rectangle((cx + 0.04, cy + 0.04), cw - 0.08, 0.92,
                               facecolor=colour, edgecolor="white", linewidth=0.8))
        text = format_value(number)
        size = fonts["cell"] * min(1.0, (cw + 0.5) / (0.3 * len(text) + 0.7))
        ax.text(cx + cw / 2, cy + 0.5, text, ha="center", va="center", fontsize=size,
                color=_text_colour(colour))


def _draw_arrow(ax, x0, x1, y):
    ax.add_patch(FancyArrowPatch((x0 + 0.35, y), (x1 - 0.35, y), arrowstyle="-|>",
                                 mutation_scale=14, color="#9A9A9A", linewidth=1.4))


def _legend_entries(records, origins):
    kinds = set()
    for record in records:
        for value in record.after.values():
            kinds |= {cell_origin(n, origins) for n in _numbers(value)}
        for value in record.before.values():
            kinds |= {cell_origin(n, origins) for n in _numbers(value)}
    entries = [("colour of a rank: the value came from that rank", None)]
    if "combined" in kinds:
        entries.append(("combined from several ranks (reduced)", COMBINED))
    if "shared" in kinds:
        entries.append(("held by several ranks before", SHARED))
    return entries if len(entries) > 1 else []


def _draw_legend(ax, entries, x, y, fonts):
    """One entry per line, under the grid."""
    for text, colour in entries:
        if colour is not None:
            ax.add_patch(Rectangle((x, y - 0.3), 0.6, 0.6, facecolor=colour, edgecolor="white"))
        ax.text(x + (0.8 if colour is not None else 0), y, text, fontsize=fonts["name"],
                va="center", color=MUTED_TEXT)
        y -= LEGEND_LINE


def _cell_colour(origin):
    if origin == "combined":
        return COMBINED
    if origin == "shared":
        return SHARED
    return rank_colour(origin)


def _text_colour(background):
    r, g, b = to_rgb(background)
    luminance = 0.2126 * r + 0.7152 * g + 0.0722 * b
    return "black" if luminance > 0.45 else "white"


def _default_title(record):
    return f"{record.name} ({record.note})" if record.note else record.name
