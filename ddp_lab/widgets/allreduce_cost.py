"""Chapter 6's cost model, to play with: ring against naive all-reduce as the
number of ranks W, the message size n, the latency α and the bandwidth β change.

Both algorithms take 2(W-1) steps and pay the latency in each; the naive one
(rank 0 as a hub) also pushes 2(W-1) whole tensors through one link, the ring
only 2(W-1)/W of one per rank. The control draws both times against W (log
scales) with the shared latency term, marks the current W, and splits each
time at that W into its latency and bandwidth terms. Formulas:
:func:`ddp_lab.cost.naive_all_reduce_time` and
:func:`ddp_lab.cost.collective_time` (``"all_reduce"``), checked against the
JavaScript by ``tests/test_widgets_js.py``. A world size is refused as those
functions refuse it; a size, latency or bandwidth that is a bool or not finite
(which their checks let through) with :mod:`ddp_lab.validate`'s words.
"""

from __future__ import annotations

import math
from functools import partial

from ddp_lab.cost import collective_time, naive_all_reduce_time
from ddp_lab.draw.palette import BLUE, VERMILLION
from ddp_lab.units import format_bytes, format_seconds
from ddp_lab.validate import check_positive_int, check_positive_number

from .control import CheckedFloat, CheckedInt, Control, figure_html, javascript

__all__ = ["AllReduceCost", "all_reduce_times"]

MAX_WORLD_SIZE = 64
MESSAGE_SIZES = tuple(2 ** k for k in range(10, 31))  # 1 KiB to 1 GiB
COLOURS = {"ring": BLUE, "naive": VERMILLION}


def all_reduce_times(nbytes: float, world_size: int, latency: float, bandwidth: float) -> dict:
    """Python's answer for one setting: each algorithm's latency and bandwidth
    terms and total, from ddp_lab.cost (a term is the time with the other
    parameter made free: no latency, or infinite bandwidth)."""
    times = {}
    for name, model in (("ring", lambda a, b: collective_time("all_reduce", nbytes, world_size, a, b)),
                        ("naive", lambda a, b: naive_all_reduce_time(nbytes, world_size, a, b))):
        times[name] = {"latency": model(latency, math.inf), "bandwidth": model(0.0, bandwidth),
                       "total": model(latency, bandwidth)}
    return times


class AllReduceCost(Control):
    """Ring vs naive all-reduce time, Chapter 6 (``book/part2_communication/06_ring_allreduce``)."""

    world_size = CheckedInt(8, min=2, max=MAX_WORLD_SIZE, check=check_positive_int).tag(sync=True)
    message_bytes = CheckedFloat(float(64 * 2 ** 20), min=MESSAGE_SIZES[0], max=MESSAGE_SIZES[-1],
                                 check=partial(check_positive_number, unit="bytes")).tag(sync=True)
    latency = CheckedFloat(10e-6, min=1e-6, max=1e-3,
                           check=partial(check_positive_number, unit="seconds")).tag(sync=True)
    bandwidth = CheckedFloat(10e9, min=1e8, max=1e11,
                             check=partial(check_positive_number, unit="bytes per second")).tag(sync=True)

    _esm = javascript("allreduce_cost.js", {
        "max_world_size": MAX_WORLD_SIZE,
        "message_sizes": list(MESSAGE_SIZES),
        "colours": COLOURS,
    })

    @property
    def times(self) -> dict:
        """Python's answer for the setting on screen (see :func:`all_reduce_times`)."""
        return all_reduce_times(self.message_bytes, self.world_size, self.latency, self.bandwidth)

    def static_html(self) -> str:
        import matplotlib.pyplot as plt

        worlds = list(range(2, MAX_WORLD_SIZE + 1))
        series = [all_reduce_times(self.message_bytes, w, self.latency, self.bandwidth) for w in worlds]
        fig, ax = plt.subplots(figsize=(5.6, 3.4), layout="tight")
        plt.close(fig)
        for name in ("naive", "ring"):
            ax.plot(worlds, [t[name]["total"] for t in series], color=COLOURS[name], linewidth=2, label=name)
        ax.plot(worlds, [t["ring"]["latency"] for t in series], "--", color="#777", label="latency term")
        now = self.times
        for name in ("naive", "ring"):
            ax.plot([self.world_size], [now[name]["total"]], "o", color=COLOURS[name])
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("world size W (ranks)")
        ax.set_ylabel("all-reduce time (s)")
        ax.grid(color="0.9", which="both")
        ax.legend(frameon=False)
        title = (f"W = {self.world_size}, n = {format_bytes(self.message_bytes)}, "
                 f"α = {format_seconds(self.latency, 'text')}, β = {self.bandwidth / 1e9:.3g} GB/s: "
                 f"ring {format_seconds(now['ring']['total'], 'text')}, "
                 f"naive {format_seconds(now['naive']['total'], 'text')}")
        return f"<p>{title}</p>" + figure_html(fig, alt=title)
