"""draw_timings: one line per collective, and the band of the repeats (plain data in, a figure out)."""

import matplotlib

matplotlib.use("Agg")

import pytest
from matplotlib.collections import PolyCollection

from ddp_lab.bench.collectives import Timing
from ddp_lab.cost import bus_factor
from ddp_lab.draw.timings import draw_timings

ROWS = [Timing("all_reduce", 4, n, 2e-3 * k, (1e-3 * k, 2e-3 * k, 5e-3 * k)) for k, n in ((1, 4096), (2, 16384))]


def bands(fig):
    return [c for c in fig.axes[0].collections if isinstance(c, PolyCollection)]


def test_no_band_unless_asked():
    assert bands(draw_timings(ROWS)) == []


@pytest.mark.parametrize("y", ["seconds", "busbw"])
def test_band_spans_the_fastest_to_the_slowest_repeat(y):
    (band,) = bands(draw_timings(ROWS, y=y, band=True))
    values = band.get_paths()[0].vertices[:, 1]
    of = (lambda r, s: s) if y == "seconds" else (lambda r, s: r.nbytes / s * bus_factor("all_reduce", 4))
    expected = [of(r, s) for r in ROWS for s in (min(r.samples), max(r.samples))]
    assert min(values) == pytest.approx(min(expected)) and max(values) == pytest.approx(max(expected))


def test_band_needs_the_repeats():
    rows = [Timing("all_reduce", 4, 4096, 2e-3)]  # no samples kept
    assert bands(draw_timings(rows, band=True)) == []
