"""The pure pieces of the launcher: environment, output rendering, 'where'."""

import subprocess
import sys

from ddp_lab.launcher.output import RankOutput, render_by_rank
from ddp_lab.launcher.worker_env import torchrun_environment
from ddp_lab.launcher.where_stuck import describe_where


def test_torchrun_environment_splits_ranks_over_nodes():
    envs = [torchrun_environment(r, 8, nodes=2, master_port=1234) for r in range(8)]
    assert [e["LOCAL_RANK"] for e in envs] == ["0", "1", "2", "3"] * 2
    assert [e["GROUP_RANK"] for e in envs] == ["0"] * 4 + ["1"] * 4
    assert {e["LOCAL_WORLD_SIZE"] for e in envs} == {"4"}
    assert {e["MASTER_PORT"] for e in envs} == {"1234"}


def test_output_keeps_a_character_split_across_reads_whole():
    output = RankOutput()
    data = "λ ok\n".encode()
    output.feed(data[:1])
    output.feed(data[1:])
    assert output.take() == "λ ok\n"
    assert output.take() == ""


def test_render_labels_every_line_and_keeps_rank_order():
    assert render_by_rank(["a\nb\n", "", "c"]) == "[rank 0] a\n[rank 0] b\n[rank 2] c\n"


def test_where_names_the_collective_and_the_calling_line():
    import torch.distributed.distributed_c10d as c10d

    frames = [
        ("/tmp/ipykernel_1/2.py", 4, "work", "dist.all_reduce(t)"),
        (c10d.__file__, 100, "wrapper", "return func(*args)"),
        (c10d.__file__, 200, "all_reduce", "work.wait()"),
    ]
    assert describe_where(frames) == (
        "waiting in all_reduce() (torch.distributed), called from work() line 4: dist.all_reduce(t)")
    assert describe_where(frames[:1]) == "running work() line 4: dist.all_reduce(t)"
    assert describe_where([("<ddp cell 3>", 2, "<module>", "x = 1")]) == "running cell line 2: x = 1"
    assert describe_where([]) == "no Python stack (stuck in C code)"


def test_the_launch_benchmark_prints_its_figures():
    run = subprocess.run([sys.executable, "-m", "ddp_lab.bench", "launch", "--world-size", "2",
                          "--repeats", "2"], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    for row in ["ddp_lab.launch, first call", "ddp_lab.launch, repeated", "persistent ranks, one cell",
                "plain fork + gloo init", "gloo teardown left to the exit", "torch.multiprocessing.spawn"]:
        assert row in run.stdout
    assert run.stdout.count("x\n") == 6
