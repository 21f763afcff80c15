"""Chapter 15g's picture of expert load: tokens each expert received, by the rank they came from.

:func:`draw_expert_load` takes, for each router, the routing table measured
on real ranks (``routes[s][e]``: tokens rank s sent to expert e) and draws
one panel per router: a stacked bar per expert, one colour per source
rank, the expert capacity as a dashed line, and above each bar the bytes
that rank's expert received from the other ranks
(``ddp_lab.cost.experts.moe_wire_bytes``).
"""

from __future__ import annotations

import matplotlib.pyplot as plt

from ddp_lab.cost.experts import check_routes, moe_wire_bytes, tokens_per_expert
from ddp_lab.draw import palette

__all__ = ["draw_expert_load"]


def draw_expert_load(routers: dict, capacity: int, hidden: int, value_bytes: int = 4):
    """One panel per ``{name: routes}``; returns the figure."""
    if not routers:
        raise ValueError("routers must name at least one routing table, e.g. {'balanced': routes}")
    tables = {name: check_routes(routes) for name, routes in routers.items()}
    fig, axes = plt.subplots(1, len(tables), figsize=(7.2, 3.2), sharey=True, squeeze=False)
    top = max(max(tokens_per_expert(t)) for t in tables.values())
    for ax, (name, rows) in zip(axes[0], tables.items()):
        world = len(rows)
        bottoms = [0] * world
        for source, row in enumerate(rows):
            ax.bar(range(world), row, bottom=bottoms, color=palette.OKABE_ITO[source % 8],
                   edgecolor="white", label=f"from rank {source}")
            bottoms = [b + n for b, n in zip(bottoms, row)]
        ax.axhline(capacity, color=palette.ERROR_RED, linestyle="--", linewidth=1.2,
                   label=f"capacity {capacity}")
        for expert, total in enumerate(bottoms):
            wire = moe_wire_bytes(rows, expert, hidden, value_bytes)["dispatch"]
            ax.text(expert, total + top * 0.02, f"{wire} B", ha="center", va="bottom", fontsize=10,
                    color=palette.MUTED_TEXT)
        ax.set_xticks(range(world), [f"expert {e}\n(rank {e})" for e in range(world)], fontsize=10)
        ax.set_title(f"{name} router", fontsize=11, color=palette.INK)
        ax.set_ylim(0, top * 1.18)
        ax.spines[["top", "right"]].set_visible(False)
    axes[0][0].set_ylabel("tokens received", fontsize=10)
    axes[0][-1].legend(fontsize=9, frameon=False, loc="upper right", bbox_to_anchor=(1.0, 0.9))
    fig.tight_layout()
    return fig
