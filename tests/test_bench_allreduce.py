"""The all-reduce benchmark, run for real (short trials) on gloo ranks."""

import pytest

import ddp_lab
from ddp_lab.bench import allreduce as bench
from ddp_lab.cost import bus_factor


def test_measure_times_each_implementation_at_every_size():
    table = bench.measure(world_size=2, sizes=[1024, 64 << 10], implementations=("builtin", "textbook", "ring"),
                          trial_seconds=0.01, trials=2)
    assert [row["bytes"] for row in table] == [1024, 64 << 10]
    for row in table:
        for name in ("builtin", "textbook", "ring"):
            figures = row[name]
            assert figures["seconds"] > 0  # a time; how long depends on the machine's load
            assert len(figures["samples"]) == 2 and min(figures["samples"]) <= figures["seconds"]
            assert figures["algbw"] == pytest.approx(row["bytes"] / figures["seconds"])
            assert figures["busbw"] == pytest.approx(figures["algbw"] * bus_factor("all_reduce", 2))
    lines = bench.format_table(table).splitlines()
    assert lines[0] == "builtin:" and lines[2].split()[:2] == ["1", "KiB"]
    ring = lines.index("ring:")
    assert "ring/builtin" in lines[ring + 1] and lines[ring + 2].split()[-1].endswith("x")
    textbook = lines.index("textbook:")
    assert lines[textbook + 1].split()[-2:] == ["busbw", "textbook/builtin"]  # apart, however long the name
    assert len(lines[textbook + 1]) == len(lines[textbook + 2])  # the ratio under its heading
    assert max(len(line) for line in lines) <= 80  # fits the book's text column


def loop_sizes_on_each_rank(trial_seconds):
    import torch

    return bench.iterations_for(bench.builtin, torch.ones(1000), trial_seconds)


def test_every_rank_runs_loops_of_the_same_length():
    # A rank that ran one call more than the others would wait for ever.
    counts = ddp_lab.launch(loop_sizes_on_each_rank, 3, args=(0.05,), backend="gloo")
    assert len(set(counts)) == 1 and 1 <= counts[0] <= bench.MAX_ITERATIONS


def test_bad_options_are_refused_before_any_rank_starts():
    with pytest.raises(ValueError, match=r"unknown implementations \['fast'\]"):
        bench.measure(implementations=("builtin", "fast"))
    with pytest.raises(ValueError, match="trials must be >= 1 and trial_seconds > 0, got trials=0"):
        bench.measure(trials=0)
    with pytest.raises(ValueError, match="trial_seconds=-1"):
        bench.measure(trial_seconds=-1)


def test_sizes_grow_fourfold_and_parse_with_units():
    assert bench.default_sizes(1 << 10, 64 << 10) == [1 << 10, 4 << 10, 16 << 10, 64 << 10]
    assert [bench.parse_size(s) for s in ("1KiB", "64MiB", "512")] == [1024, 64 << 20, 512]
