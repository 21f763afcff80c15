"""Chapter 8's bucket-size trade-off: how large should DDP's buckets be?

DDP all-reduces the gradients bucket by bucket, each as soon as it is full,
while the backward pass goes on. The control models it with
:func:`ddp_lab.cost.bucket_schedule`: G bytes of gradients in
n = ceil(G / bucket size) equal buckets, ready at an even pace over the
backward pass T_b, each one ring all-reduce (2(W-1) latencies α and
2(W-1)/W of its bytes at bandwidth β), one after the other. It draws the
timeline of one backward pass (computation on top, the all-reduces below,
the part left after the last gradient shaded) and the time against the
bucket size, with the best size on the slider. Small buckets pay the latency
n times; large ones leave a long tail. The JavaScript formulas are checked
against ddp_lab.cost by ``tests/test_widgets_js.py``. A world size is refused
as bucket_schedule refuses it; a size, time, latency or bandwidth that is a
bool or not finite (which its checks let through) with
:mod:`ddp_lab.validate`'s words.
"""

from __future__ import annotations

from functools import partial

from ddp_lab.cost import bucket_schedule, bucketed_backward_time
from ddp_lab.draw.palette import BLUE, GREEN, VERMILLION
from ddp_lab.units import format_seconds
from ddp_lab.validate import check_positive_int, check_positive_number

from .control import CheckedFloat, CheckedInt, Control, figure_html, javascript

__all__ = ["BucketTradeoff", "format_mib"]

MiB = 2 ** 20
MAX_WORLD_SIZE = 64
GRADIENT_SIZES = tuple(float(2 ** k * MiB) for k in range(2, 15))            # 4 MiB to 16 GiB
BUCKET_SIZES = tuple(float(2 ** (k / 2) * MiB) for k in range(-4, 29))       # 0.25 MiB to 16 GiB
# "exposed": the communication left after the backward pass
COLOURS = {"compute": GREEN, "comm": BLUE, "exposed": VERMILLION}


def format_mib(nbytes: float) -> str:
    """``25 * 2**20 -> '25 MiB'``, as ``bucket_cap_mb`` counts (DDP's "MB" are MiB)."""
    mib = nbytes / MiB
    return f"{mib:,.0f} MiB" if mib >= 1000 else f"{mib:.3g} MiB"


class BucketTradeoff(Control):
    """DDP's bucket size against the backward pass, Chapter 8
    (``book/part3_ddp/08_distributed_data_parallel``)."""

    gradient_bytes = CheckedFloat(400.0 * MiB, min=GRADIENT_SIZES[0], max=GRADIENT_SIZES[-1],
                                  check=partial(check_positive_number, unit="bytes")).tag(sync=True)
    bucket_bytes = CheckedFloat(25.0 * MiB, min=BUCKET_SIZES[0], max=BUCKET_SIZES[-1],
                                check=partial(check_positive_number, unit="bytes")).tag(sync=True)
    backward_seconds = CheckedFloat(0.1, min=1e-3, max=1.0,
                                    check=partial(check_positive_number, unit="seconds")).tag(sync=True)
    world_size = CheckedInt(8, min=2, max=MAX_WORLD_SIZE, check=check_positive_int).tag(sync=True)
    latency = CheckedFloat(50e-6, min=1e-6, max=1e-3,
                           check=partial(check_positive_number, unit="seconds")).tag(sync=True)
    bandwidth = CheckedFloat(10e9, min=1e8, max=1e11,
                             check=partial(check_positive_number, unit="bytes per second")).tag(sync=True)

    _esm = javascript("buckets.js", {
        "gradient_sizes": list(GRADIENT_SIZES),
        "bucket_sizes": list(BUCKET_SIZES),
        "max_world_size": MAX_WORLD_SIZE,
        "colours": COLOURS,
    })

    def _arguments(self, bucket_bytes=None):
        return (self.gradient_bytes, self.bucket_bytes if bucket_bytes is None else bucket_bytes,
                self.backward_seconds, self.world_size, self.latency, self.bandwidth)

    @property
    def schedule(self):
        """Python's (ready, start, end) of every bucket for the setting on screen."""
        return bucket_schedule(*self._arguments())

    @property
    def best(self) -> tuple[float, float]:
        """The bucket size on the slider with the shortest backward, and that time."""
        sizes = [s for s in BUCKET_SIZES if s <= self.gradient_bytes * 1.0001]
        return min(((s, bucketed_backward_time(*self._arguments(s))) for s in sizes), key=lambda pair: pair[1])

    def static_html(self) -> str:
        import matplotlib.pyplot as plt

        sizes = [s for s in BUCKET_SIZES if s <= self.gradient_bytes * 1.0001]
        times = [bucketed_backward_time(*self._arguments(s)) for s in sizes]
        fig, ax = plt.subplots(figsize=(6.4, 3.0), layout="tight")
        plt.close(fig)
        ax.plot([s / MiB for s in sizes], times, color=COLOURS["comm"], linewidth=2)
        ax.axhline(self.backward_seconds, color=COLOURS["compute"], linestyle="--")
        now = bucketed_backward_time(*self._arguments())
        ax.plot([self.bucket_bytes / MiB], [now], "o", color=COLOURS["comm"])
        ax.set_xscale("log", base=2)
        ax.set_xlabel("bucket size (MiB)")
        ax.set_ylabel("backward with communication (s)")
        ax.set_yscale("log")
        ax.grid(color="0.9")
        best_size, best_time = self.best
        title = (f"{len(self.schedule)} buckets of {format_mib(self.gradient_bytes / len(self.schedule))}: "
                 f"T = {format_seconds(now, 'text')} "
                 f"for T_b = {format_seconds(self.backward_seconds, 'text')}; "
                 f"best on the slider {format_mib(best_size)} ({format_seconds(best_time, 'text')})")
        return f"<p>{title}</p>" + figure_html(fig, alt=title)
