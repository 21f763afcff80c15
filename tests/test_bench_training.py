"""The training-throughput benchmark: a real (short) measurement, and its table."""

import pytest

from ddp_lab.bench.training import Throughput, format_table, main, measure


def test_measure_one_rank_on_real_processes():
    (one_core,) = measure(1, {"one core": 1}, budget=0.1)
    assert one_core.world_size == 1 and one_core.threads == 1 and one_core.setting == "one core"
    assert one_core.steps >= 1 and one_core.samples_per_second > 0
    assert len(one_core.samples) == 3 and min(one_core.samples) <= one_core.samples_per_second <= max(one_core.samples)


def test_table_gives_ratios_against_one_rank_on_one_thread_and_flags_oversubscription(monkeypatch):
    monkeypatch.setattr("ddp_lab.bench.training.available_cores", lambda: 2)
    results = [Throughput(1, 1, "one core", 1000.0, 10, 128), Throughput(1, 2, "set", 1500.0, 10, 128),
               Throughput(2, 1, "set", 1800.0, 10, 128), Throughput(4, 2, "default", 100.0, 10, 128)]
    lines = format_table(results).splitlines()
    assert " ".join(lines[:2]).startswith("DDP training throughput: MLP 64-256-256-256-10, batch 128 per rank, "
                                          "gloo, 2 cores")
    assert all(len(line) <= 80 for line in lines), [line for line in lines if len(line) > 80]  # Chapter 10's column
    rows = lines[5:9]
    assert rows[0].split()[-1] == "1.00x"
    assert rows[1].split()[4:8] == ["1500", "1500", "to", "1500"]  # no repeats kept: the range is the figure
    assert rows[2].split()[-1] == "1.80x" and not rows[2].endswith("*")
    assert rows[3].endswith("0.10x  *") and lines[9] == "* more threads than cores"


def test_bad_arguments_stop_before_anything_starts():
    with pytest.raises(SystemExit):
        main(["--seconds", "0"])


def test_table_gives_the_median_and_range_of_the_repeats(monkeypatch):
    monkeypatch.setattr("ddp_lab.bench.training.available_cores", lambda: 2)
    results = [Throughput(1, 1, "one core", 1000.0, 10, 128, (900.0, 1000.0, 1100.0)),
               Throughput(2, 1, "set", 1500.0, 10, 128, (1500.0, 400.0, 1600.0))]
    lines = format_table(results).splitlines()
    assert lines[1].endswith("samples/s: median and range of 3 repeats")
    assert lines[5].split()[5:9] == ["1000", "900", "to", "1100"]  # "one core" is two words
    assert lines[6].split()[4:9] == ["1500", "400", "to", "1600", "1.50x"]
    assert "*" not in "\n".join(lines)  # 1 and 2 threads: never more than the cores the test pretends
    assert results[1].spread == {"min": 400.0, "median": 1500.0, "max": 1600.0}
