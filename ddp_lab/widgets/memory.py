"""The memory calculator of Chapter 15 and Lab 6: bytes of model states per
rank under DDP and ZeRO-1/2/3, as the model, the world and the precision change.

Controls: the parameter count Ψ (10⁸ to 10¹¹, log scale), the world size N
(1 to 1024, powers of two), the precision and the optimizer (which set the
bytes per parameter p, g and K), the stage (one, or all four side by side)
and the GPU's memory. The numbers (per state and in total, and whether they
fit) and the stacked bars follow every move.

The bytes per parameter of every precision and optimizer, and which states
each stage shards, are read from :mod:`ddp_lab.memory` when the control is
made and handed to its JavaScript; the formula is memory_per_rank's, checked
against it on a grid by ``tests/test_widgets_js.py``. In a kernel,
``calculator.rows`` is Python's answer for the setting on screen.
"""

from __future__ import annotations

import html

import traitlets

from ddp_lab.draw.palette import VERMILLION
from ddp_lab.memory import OPTIMIZERS, PRECISIONS, STAGES, bytes_per_parameter, memory_per_rank
from ddp_lab.validate import check_positive_int, check_positive_number

from .control import CheckedEnum, CheckedFloat, Control, figure_html, javascript

__all__ = ["MemoryCalculator", "WORLD_SIZES"]

WORLD_SIZES = tuple(2 ** k for k in range(11))
CAPACITY_RANGE = (1.0, 1000.0)


def _sharded(stage: str) -> list[bool]:
    """Which of (parameters, gradients, optimizer state) ``stage`` shards, read
    from memory_per_rank itself: a sharded state halves from 1 rank to 2."""
    one, two = (memory_per_rank(1, n, stage) for n in (1, 2))
    return [getattr(two, state) == getattr(one, state) / 2
            for state in ("parameters", "gradients", "optimizer")]


def _constants() -> dict:
    from ddp_lab.draw.memory import OPTIMIZER_NAMES, STATE_COLOURS, STATE_LABELS

    return {
        "stages": list(STAGES),
        "precisions": list(PRECISIONS),
        "optimizers": list(OPTIMIZERS),
        "optimizer_names": OPTIMIZER_NAMES,
        "bytes_per_parameter": {
            precision: {optimizer: [b.parameters, b.gradients, b.optimizer]
                        for optimizer in OPTIMIZERS
                        for b in [bytes_per_parameter(precision, optimizer)]}
            for precision in PRECISIONS
        },
        "sharded": {stage: _sharded(stage) for stage in STAGES},
        "world_sizes": list(WORLD_SIZES),
        "capacity_range": list(CAPACITY_RANGE),
        "state_colours": STATE_COLOURS,
        "state_labels": STATE_LABELS,
        "capacity_colour": VERMILLION,
    }


class MemoryCalculator(Control):
    """The memory calculator of Chapter 15 (``book/part5_beyond/15_beyond_ddp``)
    and Lab 6 (``labs/lab6_memory``)."""

    # the numbers refused as memory_per_rank refuses them (a bool, NaN; a float world size)
    num_parameters = CheckedFloat(7.5e9, min=1e8, max=1e11, check=check_positive_number).tag(sync=True)
    world_size = CheckedEnum(WORLD_SIZES, default_value=64, check=check_positive_int).tag(sync=True)
    precision = traitlets.Enum(PRECISIONS, default_value="mixed").tag(sync=True)
    optimizer = traitlets.Enum(OPTIMIZERS, default_value="adam").tag(sync=True)
    stage = traitlets.Enum(("all",) + STAGES, default_value="all").tag(sync=True)
    capacity_gb = CheckedFloat(80.0, min=CAPACITY_RANGE[0], max=CAPACITY_RANGE[1],
                               check=check_positive_number).tag(sync=True)

    _esm = javascript("memory.js", _constants())

    @property
    def rows(self):
        """memory_per_rank for the stage(s) on screen: Python's answer."""
        stages = STAGES if self.stage == "all" else (self.stage,)
        return [memory_per_rank(self.num_parameters, self.world_size, stage,
                                precision=self.precision, optimizer=self.optimizer) for stage in stages]

    def static_html(self) -> str:
        from ddp_lab.draw.memory import describe_parameters, draw_memory_per_rank
        from ddp_lab.units import format_gb as _gb

        rows = self.rows
        b = bytes_per_parameter(self.precision, self.optimizer)
        title = (f"Ψ = {describe_parameters(self.num_parameters)}, N = {self.world_size}: p + g + K = "
                 f"{b.parameters} + {b.gradients} + {b.optimizer} bytes per parameter")
        cells = "".join(
            f"<tr><td>{row.stage}</td><td>{_gb(row.parameters)}</td><td>{_gb(row.gradients)}</td>"
            f"<td>{_gb(row.optimizer)}</td><td>{_gb(row.total)}</td>"
            f"<td>{'fits' if row.total / 1e9 <= self.capacity_gb else 'does not fit'}</td></tr>"
            for row in rows)
        return (f"<p>{html.escape(title)}</p>"
                + figure_html(draw_memory_per_rank(rows, capacity_gb=self.capacity_gb), alt=title)
                + "<table><thead><tr><th>stage</th><th>parameters</th><th>gradients</th>"
                  f"<th>optimizer state</th><th>total per rank</th><th>in {self.capacity_gb:g} GB</th>"
                  f"</tr></thead><tbody>{cells}</tbody></table>")
