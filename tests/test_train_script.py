"""The book's torchrun scripts (labs/scripts/), run for real under torchrun.

* every script documents every option in ``--help``;
* train.py trains on 2 processes and writes its snapshot and final weights;
* fault tolerance: rank 1 crashes once in step 13; under ``--max-restarts 1``
  the job resumes from its last snapshot and ends with weights equal, bit for
  bit, to those of an uninterrupted run with the same seed;
* two nodes on one machine: two torchrun agents (``--nnodes 2``, c10d
  rendezvous on loopback) form one job of 4 ranks.
"""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from ddp_lab.cluster.torchrun import run_together, run_two_nodes, torchrun_command

SCRIPTS = Path(__file__).resolve().parents[1] / "labs" / "scripts"
TRAIN = SCRIPTS / "train.py"
PRINT_ENV = SCRIPTS / "print_env.py"
# 256 samples, 16 per rank and step, 2 ranks: 8 steps per epoch, 24 in all.
# Snapshots at steps 5, 8, 10, 15, 16, 20, 24; the failure in step 13 resumes from step 10.
SHORT = ["--samples", "256", "--epochs", "3", "--snapshot-every", "5"]


def load_script(path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("script", [TRAIN, PRINT_ENV], ids=lambda p: p.name)
def test_help_documents_every_option(script):
    result = subprocess.run([sys.executable, str(script), "--help"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    text = " ".join(result.stdout.split())  # argparse wraps long lines
    parser = load_script(script).build_parser()
    for action in parser._actions:
        for option in action.option_strings:
            assert option in text, f"{option} missing from {script.name} --help"
        assert action.help and " ".join(action.help.split()).split("%")[0][:30] in text, action


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    """The same training twice at once: uninterrupted, and failing once in step 13."""
    folder = tmp_path_factory.mktemp("train")
    commands = []
    for name, extra, restarts in [("plain", [], 0), ("failed", ["--fail-at-step", "13", "--fail-rank", "1"], 1)]:
        args = [*SHORT, "--snapshot", folder / f"{name}_snapshot.pt", "--final", folder / f"{name}_final.pt", *extra]
        commands.append(torchrun_command(TRAIN, args, nproc_per_node=2, max_restarts=restarts))
    plain, failed = run_together(commands, timeout=240)
    return folder, plain, failed


def test_short_run_trains_and_writes_snapshot(two_runs):
    folder, plain, _ = two_runs
    assert plain.ok, plain.tail()
    lines = plain.rank_lines()
    assert lines[0] == "[rank 0] restart 0: WORLD_SIZE=2, backend gloo, devices cpu"
    assert "[rank 0] no snapshot: starting from scratch" in lines
    assert lines[-1] == "[rank 0] done: 24 steps"
    assert [line for line in lines if "snapshot at step" in line] == [
        f"[rank 0] snapshot at step {step}: epoch {epoch}, batch {batch}"
        for step, epoch, batch in [(5, 0, 5), (8, 1, 0), (10, 1, 2), (15, 1, 7), (16, 2, 0), (20, 2, 4), (24, 3, 0)]]
    snapshot = torch.load(folder / "plain_snapshot.pt", weights_only=True)
    assert (snapshot["epoch"], snapshot["batches_done"], snapshot["step"]) == (3, 0, 24)
    assert len(snapshot["rng"]) == 2 and snapshot["world_size"] == 2
    assert not (folder / "plain_snapshot.pt.tmp").exists()  # renamed over the snapshot


def test_failed_once_resumes_and_ends_bit_for_bit_equal(two_runs):
    folder, plain, failed = two_runs
    assert failed.ok, failed.tail()
    lines = failed.rank_lines()
    assert "[rank 1] injected failure in step 13 (epoch 1, batch 4)" in lines
    assert "[rank 0] restart 1: WORLD_SIZE=2, backend gloo, devices cpu" in lines
    assert "[rank 0] resumed from snapshot at epoch 1, batch 2 of 8 (step 10)" in lines
    assert lines.index("[rank 1] injected failure in step 13 (epoch 1, batch 4)") < lines.index(
        "[rank 0] restart 1: WORLD_SIZE=2, backend gloo, devices cpu")
    assert "failed (exitcode: 1) local_rank: 1" in failed.stderr  # torchrun's own report of the crash
    expected = torch.load(folder / "plain_final.pt", weights_only=True)
    got = torch.load(folder / "failed_final.pt", weights_only=True)
    assert expected.keys() == got.keys()
    for name in expected:
        assert torch.equal(expected[name], got[name]), name
    # The epochs after the restart print the same loss as the uninterrupted run.
    assert [l for l in lines if "epoch 2:" in l] == [l for l in plain.rank_lines() if "epoch 2:" in l]


def test_two_agents_on_loopback_form_one_job_of_four_ranks():
    runs = run_two_nodes(PRINT_ENV, nproc_per_node=2, timeout=180)
    for run in runs:
        assert run.ok, run.tail()
        assert "--nnodes 2" in run.command_line and "--rdzv_backend c10d" in run.command_line
    assert "--node_rank 0" in runs[0].command_line and "--node_rank 1" in runs[1].command_line
    # Global rank 0 lives on whichever agent the rendezvous made node 0: it prints the table.
    table = [line for run in runs for line in run.rank_lines() if "  RANK=" in line]
    rows = [dict(item.split("=", 1) for item in line.split()[2:]) for line in table]
    assert sorted(int(row["RANK"]) for row in rows) == [0, 1, 2, 3]
    by_node = {}
    for row in rows:
        by_node.setdefault(row["GROUP_RANK"], []).append(int(row["LOCAL_RANK"]))
    assert {node: sorted(ranks) for node, ranks in by_node.items()} == {"0": [0, 1], "1": [0, 1]}
    shared = "\n".join(line for run in runs for line in run.rank_lines())
    assert "WORLD_SIZE=4" in shared and "GROUP_WORLD_SIZE=2" in shared and "MASTER_ADDR=127.0.0.1" in shared
