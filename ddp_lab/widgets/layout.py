"""Chapter 2's layout explorer: nodes, GPUs per node and GPUs per process in,
the rank of every process out, drawn and listed.

The reader moves three controls (1 to 4 nodes, 1 to 8 GPUs per node, 1 to 8
GPUs per process) and the picture redraws: nodes as grey boxes, their GPUs
inside, each process a coloured box over the GPUs it drives, labelled with
its global rank R_g and local rank R_l, and the table of
:meth:`ddp_lab.Topology.format_table` below it. A number of GPUs per process
that does not divide the GPUs per node is refused with Topology's own
ValueError message, which lists the allowed values; a count that is not an
int (``True``, ``4.0``, NaN) is refused as Topology refuses it, with its words.

It runs in JupyterLab, Colab and the static book (see
:mod:`ddp_lab.widgets.control`); in a kernel, the Python object follows the
controls: ``explorer.topology`` is the Topology on screen.

>>> explorer = LayoutExplorer(nodes=2, gpus_per_node=4, gpus_per_process=2)
>>> explorer.topology.world_size
4
>>> explorer.gpus_per_process = 3
>>> explorer.topology is None, explorer.error.startswith("gpus_per_process=3 does not divide")
(True, True)
"""

from __future__ import annotations

import html

from ddp_lab.draw.palette import INK, OKABE_ITO, PANEL
from ddp_lab.topology import Topology, require_count

from .control import CheckedInt, Control, figure_html, javascript

__all__ = ["LayoutExplorer", "MAX_NODES", "MAX_GPUS_PER_NODE"]

MAX_NODES = 4
MAX_GPUS_PER_NODE = 8


class LayoutExplorer(Control):
    """The layout explorer of Chapter 2 (``book/part1_foundations/02_nodes_and_ranks``)."""

    # each count refused as Topology refuses it (its own check: a lesson of Chapter 2)
    nodes = CheckedInt(2, min=1, max=MAX_NODES, check=require_count).tag(sync=True)
    gpus_per_node = CheckedInt(4, min=1, max=MAX_GPUS_PER_NODE, check=require_count).tag(sync=True)
    gpus_per_process = CheckedInt(1, min=1, max=MAX_GPUS_PER_NODE, check=require_count).tag(sync=True)

    _esm = javascript("layout.js", {
        "palette": list(OKABE_ITO),  # a process's colour, by its local rank, as ddp_lab.draw.layout colours it
        "node_colours": {"fill": PANEL, "title": INK},
        "max_nodes": MAX_NODES,
        "max_gpus_per_node": MAX_GPUS_PER_NODE,
    })

    @property
    def topology(self) -> Topology | None:
        """The Topology on screen, or None when the setting is refused (see :attr:`error`)."""
        try:
            return Topology(self.nodes, self.gpus_per_node, self.gpus_per_process)
        except ValueError:
            return None

    @property
    def error(self) -> str | None:
        """Topology's ValueError message for the setting on screen, or None when it is valid."""
        try:
            Topology(self.nodes, self.gpus_per_node, self.gpus_per_process)
        except ValueError as refusal:
            return str(refusal)
        return None

    def static_html(self) -> str:
        """The picture and the table of the current setting (or the refusal), as HTML."""
        from ddp_lab.draw.layout import draw_topology

        topology = self.topology
        if topology is None:
            return f'<p class="ddp-error">Not a valid layout: {html.escape(self.error)}</p>'
        header = ("node", "GPUs", "global rank R_g (RANK)", "local rank R_l (LOCAL_RANK)")
        rows = "".join(
            f"<tr><td>{row['node']}</td><td>{', '.join(map(str, row['gpus']))}</td>"
            f"<td>{row['global_rank']}</td><td>{row['local_rank']}</td></tr>"
            for row in topology.table()
        )
        return (figure_html(draw_topology(topology), alt=f"The ranks of {topology}")
                + "<table><thead><tr>" + "".join(f"<th>{h}</th>" for h in header)
                + f"</tr></thead><tbody>{rows}</tbody></table>")
