"""The collectives benchmark runs and returns well-formed rows (no timing is asserted)."""

import pytest

from ddp_lab.bench import collectives as bench
from ddp_lab.cost import bus_factor


def test_measure_collectives_rows():
    rows = bench.measure_collectives(world_size=2, sizes=(1024, 4096),
                                     collectives=("send_recv", "all_reduce", "all_gather"), repeats=2)
    assert [(r.collective, r.nbytes) for r in rows] == [
        (c, n) for c in ("send_recv", "all_reduce", "all_gather") for n in (1024, 4096)]
    for r in rows:
        assert r.seconds > 0 and r.world_size == 2
        assert r.busbw == pytest.approx(r.algbw * bus_factor(r.collective, 2))
        assert len(r.samples) == 2 and r.best == min(r.samples) and r.seconds == pytest.approx(
            sum(r.samples) / 2)  # the median of two
    lines = bench.table(rows).splitlines()
    times, rates = lines[:1 + len(rows)], lines[2 + len(rows):]
    assert times[0].split() == ["collective", "size", "fastest", "median", "slowest"]
    assert rates[0].split() == ["collective", "size", "algbw", "busbw", "busbw/link"]
    assert len(lines) == 3 + 2 * len(rows) and lines[1 + len(rows)] == ""
    assert rates[1].split()[-1] == "1.00"  # send_recv against itself
    assert max(len(line) for line in lines) <= 80  # fits the book's text column


def test_table_compares_the_fastest_repeats_with_the_link():
    # A slow median send_recv (one busy moment) must not make a collective look faster than the link.
    rows = [bench.Timing("send_recv", 4, 4096, 3e-3, (1e-4, 3e-3, 4e-3)),
            bench.Timing("broadcast", 4, 4096, 4e-4, (2e-4, 4e-4, 5e-4))]
    lines = bench.table(rows).splitlines()
    assert lines[1].split()[3:6] == ["100", "us", "3.00"]  # fastest, then the median's figure
    assert lines[6].split()[-1] == "0.50"  # fastest broadcast 200 us against fastest send 100 us


def test_parameter_server_timing_rows():
    rows = bench.time_parameter_server_vs_all_reduce(world_size=2, sizes=(4096,), repeats=2)
    assert rows[0]["nbytes"] == 4096
    assert rows[0]["parameter_server"] > 0 and rows[0]["all_reduce"] > 0


def test_bad_arguments():
    with pytest.raises(ValueError, match="unknown collective 'allreduce'"):
        bench.measure_collectives(collectives=("allreduce",))
    with pytest.raises(ValueError, match="world_size must be at least 2"):
        bench.measure_collectives(world_size=1)
