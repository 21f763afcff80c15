"""The book's torchrun scripts (labs/scripts/), run for real under torchrun.

* every script documents every option in ``--help``;
* the two torchrun commands of train.py's docstring, run exactly as written:
  the first trains on 2 processes and writes its snapshots; in the second,
  rank 1 crashes once in step 13, and under ``--max-restarts 1`` the job
  resumes from its last snapshot and ends with weights equal, bit for bit, to
  those of the first (the command sets TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1
  for the agent: without it a restart can hang, pytorch/pytorch#135712);
  ``--final`` is run by Lab 5's checker (tests/test_checks_torchrun.py);
* two nodes on one machine: two torchrun agents (``--nnodes 2``, c10d
  rendezvous on loopback) form one job of 4 ranks;
* nonsensical options are argparse errors (a learning rate that is not finite,
  a failure after the run's last step); a damaged snapshot is reported with its
  path and what to do; the temporary snapshot file never follows a link;
* a snapshot records its run's seed, sample count and hidden size: one of
  another run is refused, one of a finished run said to leave nothing to train.
"""

import ast
import contextlib
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from ddp_lab.cluster.torchrun import run_together, run_torchrun, run_two_nodes, torchrun_command, worker_stderr

SCRIPTS = Path(__file__).resolve().parents[1] / "labs" / "scripts"
TRAIN = SCRIPTS / "train.py"
PRINT_ENV = SCRIPTS / "print_env.py"


def load_script(path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_train_py_fits_the_books_pages():
    # Chapters 11 and 14 print its functions: a page shows 80 characters a line
    wide = [(number, len(line)) for number, line in enumerate(TRAIN.read_text().splitlines(), 1)
            if len(line) > 80]
    assert wide == [], f"lines of train.py over 80 characters (number, length): {wide}"


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


# ---------------------------------------------------------------- the commands in train.py's docstring

def documented_commands():
    """The shell commands in train.py's docstring: lines naming torchrun or python, joined across ``\\``."""
    text = ast.get_docstring(ast.parse(TRAIN.read_text()))
    joined = re.sub(r"\\\n\s*", " ", text)  # a continued line goes on after the backslash
    commands = []
    for line in joined.splitlines():
        command = line.split("#")[0].strip()
        if re.match(r"^(\w+=\S+ )*(torchrun|python) ", command):
            commands.append(command)
    return commands


def documented_command(*, restarts):
    [command] = [c for c in documented_commands() if c.startswith(("torchrun", "TORCH"))
                 and ("--max-restarts" in c) == restarts]
    return command


def test_the_documented_restart_command_gives_the_agent_a_fresh_store_per_attempt():
    command = documented_command(restarts=True)
    assert command.startswith("TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 torchrun "), command
    assert "--fail-at-step 13 --fail-rank 1" in command
    assert documented_command(restarts=False) == "torchrun --standalone --nproc_per_node 2 train.py --epochs 3"


@pytest.fixture(scope="module")
def documented_runs(tmp_path_factory):
    """Both torchrun commands of the docstring, run as written, in a shell, at once,
    each in a folder holding a copy of train.py: the uninterrupted training, and the
    one whose rank 1 fails in step 13. Around them TORCH_DISABLE_SHARE_RDZV_TCP_STORE
    is "0" (off): only the command itself turns it on.

    With train.py's defaults (512 samples, 16 per rank and step, 2 ranks): 16 steps
    per epoch, 48 in all, a snapshot every 5 steps and at each epoch's end; the
    failure in step 13 resumes from the snapshot of step 10."""
    folder = tmp_path_factory.mktemp("documented")
    commands = []
    for name, command in [("plain", documented_command(restarts=False)),
                          ("failed", documented_command(restarts=True))]:
        (folder / name).mkdir()
        shutil.copy(TRAIN, folder / name)
        commands.append(["bash", "-c", f"cd {name} && {command}"])
    environment = {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "0",
                   "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    plain, failed = run_together(commands, envs=[environment] * 2, cwd=folder, timeout=240)
    return folder, plain, failed


def test_the_uninterrupted_command_trains_and_writes_snapshots(documented_runs):
    folder, plain, _ = documented_runs
    assert plain.ok, plain.tail()
    lines = plain.rank_lines()
    assert lines[0] == "[rank 0] restart 0: WORLD_SIZE=2, backend gloo, devices cpu"
    assert "[rank 0] no snapshot: starting from scratch" in lines
    assert lines[-1] == "[rank 0] done: 48 steps"
    assert [line for line in lines if "snapshot at step" in line] == [
        f"[rank 0] snapshot at step {step}: epoch {epoch}, batch {batch}"
        for step, epoch, batch in [(5, 0, 5), (10, 0, 10), (15, 0, 15), (16, 1, 0), (20, 1, 4),
                                   (25, 1, 9), (30, 1, 14), (32, 2, 0), (35, 2, 3), (40, 2, 8),
                                   (45, 2, 13), (48, 3, 0)]]
    snapshot = torch.load(folder / "plain" / "snapshot.pt", weights_only=True)
    assert (snapshot["epoch"], snapshot["batches_done"], snapshot["step"]) == (3, 0, 48)
    assert len(snapshot["rng"]) == 2 and snapshot["world_size"] == 2
    assert not (folder / "plain" / "snapshot.pt.tmp").exists()  # renamed over the snapshot


def test_the_restart_command_resumes_and_ends_bit_for_bit_like_the_uninterrupted_one(documented_runs):
    folder, plain, failed = documented_runs
    assert failed.ok, failed.tail()
    lines = failed.rank_lines()
    assert "[rank 1] injected failure in step 13 (epoch 0, batch 12)" in lines
    assert "[rank 0] restart 1: WORLD_SIZE=2, backend gloo, devices cpu" in lines
    assert "[rank 0] resumed from snapshot at epoch 0, batch 10 of 16 (step 10)" in lines
    assert lines.index("[rank 1] injected failure in step 13 (epoch 0, batch 12)") < lines.index(
        "[rank 0] restart 1: WORLD_SIZE=2, backend gloo, devices cpu")
    assert "failed (exitcode: 1) local_rank: 1" in failed.stderr  # torchrun's own report of the crash
    assert "warning: torchrun may restart" not in failed.stderr  # the workers saw TORCHELASTIC_USE_AGENT_STORE=False
    assert lines[-1] == plain.rank_lines()[-1] == "[rank 0] done: 48 steps"
    expected = torch.load(folder / "plain" / "snapshot.pt", weights_only=True)
    got = torch.load(folder / "failed" / "snapshot.pt", weights_only=True)
    assert expected["model"].keys() == got["model"].keys()
    for name in expected["model"]:
        assert torch.equal(expected["model"][name], got["model"][name]), name
    # The epochs after the restart print the same loss as the uninterrupted run.
    for epoch in (1, 2):
        assert ([line for line in lines if f"epoch {epoch}:" in line]
                == [line for line in plain.rank_lines() if f"epoch {epoch}:" in line])


def test_a_restartable_job_with_the_shared_store_gets_a_warning(tmp_path):
    command = torchrun_command(TRAIN, ["--epochs", "0", "--snapshot", tmp_path / "s.pt"],
                               nproc_per_node=2, max_restarts=1)
    [run] = run_together([command], envs=[{"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "0"}], timeout=120)
    assert run.ok, run.tail()
    warnings = [line for line in run.stderr.splitlines() if line.startswith("warning: torchrun may restart")]
    assert len(warnings) == 1 and "TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 torchrun" in warnings[0], run.stderr


# ---------------------------------------------------------------- bad values, bad snapshots

@pytest.mark.parametrize("argument, value, allowed", [
    ("--epochs", "-1", "must be 0 or more, got -1"),
    ("--samples", "0", "must be 1 or more, got 0"),
    ("--snapshot-every", "-1", "must be 0 or more, got -1"),
    ("--hidden", "0", "must be 1 or more, got 0"),
    ("--batch-size", "0", "must be 1 or more, got 0"),
    ("--fail-at-step", "0", "must be 1 or more, got 0"),
    ("--fail-rank", "-1", "must be 0 or more, got -1"),
    ("--epochs", "three", "must be a whole number, got 'three'"),
    ("--lr", "inf", "must be a finite number > 0, got inf"),
    ("--lr", "nan", "must be a finite number > 0, got nan"),
    ("--lr", "0", "must be a finite number > 0, got 0"),
    ("--lr", "fast", "must be a number, got 'fast'"),
])
def test_nonsensical_values_get_argparse_errors(argument, value, allowed, capsys):
    train = load_script(TRAIN)
    with pytest.raises(SystemExit) as stop:
        train.parse_args([argument, value])
    assert stop.value.code == 2
    error = capsys.readouterr().err
    assert error.startswith("usage: ") and f"error: argument {argument}: {allowed}" in error, error


def test_fail_rank_must_be_below_the_world_size_before_any_training(monkeypatch, capsys):
    train = load_script(TRAIN)
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert train.parse_args(["--fail-rank", "1"]).fail_rank == 1
    with pytest.raises(SystemExit) as stop:
        train.parse_args(["--fail-rank", "2"])
    assert stop.value.code == 2
    assert "error: argument --fail-rank: must be a rank of this job, 0 to 1 (WORLD_SIZE=2), got 2" \
        in capsys.readouterr().err
    # as the script: checked before the process group, nothing trained (plain python: WORLD_SIZE 1)
    result = subprocess.run([sys.executable, str(TRAIN), "--fail-at-step", "3", "--fail-rank", "1"],
                            capture_output=True, text=True, timeout=60, env=without("WORLD_SIZE", "RANK"))
    assert result.returncode == 2, result.stderr
    assert "error: argument --fail-rank: must be a rank of this job, 0 (WORLD_SIZE=1), got 1" in result.stderr
    assert result.stdout == ""


def without(*names):
    return {name: value for name, value in os.environ.items() if name not in names}


def a_real_snapshot(train, path):
    """A snapshot as train.py writes it (the model's and an optimizer's state)."""
    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.AdamW(model.parameters())
    model(torch.ones(1, 4)).sum().backward()
    optimizer.step()
    train.save_snapshot(path, {"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                               "epoch": 1, "batches_done": 2, "step": 10, "rng": [train.rng_state()],
                               "world_size": 1, "seed": 0})
    return path


@pytest.mark.parametrize("damage", ["truncated", "garbage", "empty", "a tensor"])
def test_a_damaged_snapshot_is_reported_with_its_path_and_what_to_do(damage, tmp_path):
    train = load_script(TRAIN)
    path = a_real_snapshot(train, tmp_path / "snapshot.pt")
    assert train.load_snapshot(str(path))["step"] == 10  # whole, it loads
    data = path.read_bytes()
    if damage == "truncated":  # the end of a zip file holds its table of contents
        path.write_bytes(data[: len(data) * 2 // 3])
    elif damage == "garbage":
        path.write_bytes(b"not a snapshot\n" * 100)
    elif damage == "empty":
        path.write_bytes(b"")
    else:
        torch.save(torch.ones(3), path)
    with pytest.raises(SystemExit) as stop:
        train.load_snapshot(str(path))
    message = str(stop.value.code)
    assert message.startswith(f"error: --snapshot {path} is not a snapshot this script can resume from (")
    assert message.endswith("Delete it to start from scratch, or point --snapshot elsewhere.")


def test_the_script_stops_on_a_truncated_snapshot_without_a_traceback(tmp_path):
    path = a_real_snapshot(load_script(TRAIN), tmp_path / "snapshot.pt")
    path.write_bytes(path.read_bytes()[:200])
    result = subprocess.run([sys.executable, str(TRAIN), "--epochs", "1", "--snapshot", str(path)],
                            capture_output=True, text=True, timeout=120, env=without("WORLD_SIZE", "RANK"))
    assert result.returncode == 1
    assert "Traceback" not in result.stderr, result.stderr
    assert (f"error: --snapshot {path} is not a snapshot this script can resume from (torch.load failed: "
            "RuntimeError: PytorchStreamReader failed reading zip archive") in result.stderr
    assert "Delete it to start from scratch, or point --snapshot elsewhere." in result.stderr


@pytest.mark.parametrize("target_exists", [True, False], ids=["to a file", "dangling"])
def test_a_link_planted_at_the_temporary_path_is_never_written_through(target_exists, tmp_path):
    """The temporary file's name is known in advance (``snapshot.pt.tmp``): a symbolic link
    placed there must not make rank 0 write the snapshot into the link's target (or create
    it). The link is removed and a new file made in its place (O_EXCL), as a file left by a
    killed write is: the snapshot is still written, and the target is as it was."""
    train = load_script(TRAIN)
    target = tmp_path / "elsewhere" / "precious.txt"
    target.parent.mkdir()
    if target_exists:
        target.write_text("keep me")
    path = tmp_path / "snapshot.pt"
    (tmp_path / "snapshot.pt.tmp").symlink_to(target)
    a_real_snapshot(train, path)
    assert train.load_snapshot(str(path))["step"] == 10
    assert not os.path.lexists(tmp_path / "snapshot.pt.tmp")  # renamed over the snapshot
    assert not path.is_symlink()
    if target_exists:
        assert target.read_text() == "keep me"
    else:
        assert not target.exists()


def test_a_temporary_file_left_by_a_killed_write_is_replaced(tmp_path):
    train = load_script(TRAIN)
    (tmp_path / "snapshot.pt.tmp").write_bytes(b"half a snapshot")
    a_real_snapshot(train, tmp_path / "snapshot.pt")
    assert train.load_snapshot(str(tmp_path / "snapshot.pt"))["step"] == 10


def test_fail_at_step_must_be_a_step_of_the_run_before_any_training(monkeypatch, capsys):
    train = load_script(TRAIN)
    monkeypatch.setenv("WORLD_SIZE", "2")  # the defaults: 512 samples, 256 per rank, 16 steps per epoch
    assert train.parse_args(["--fail-at-step", "48"]).fail_at_step == 48
    for argv, says in [
        (["--fail-at-step", "49"], "must be a step of this run, which has 48 (3 epoch(s) of 16: --samples 512 "
                                   "over WORLD_SIZE=2 in batches of 16), got 49"),
        (["--epochs", "0", "--fail-at-step", "1"], "must be a step of this run, which has 0 (0 epoch(s) of 16: "),
    ]:
        with pytest.raises(SystemExit) as stop:
            train.parse_args(argv)
        assert stop.value.code == 2
        assert f"error: argument --fail-at-step: {says}" in capsys.readouterr().err


@pytest.mark.parametrize("samples, batch_size, world_size", [(512, 16, 2), (100, 16, 3), (7, 2, 4), (5, 8, 1)])
def test_the_steps_of_an_epoch_are_the_batches_each_rank_loads(samples, batch_size, world_size):
    train = load_script(TRAIN)
    dataset = train.make_dataset(0, samples)
    for rank in range(world_size):
        sampler = torch.utils.data.DistributedSampler(dataset, num_replicas=world_size, rank=rank)
        loader = torch.utils.data.DataLoader(dataset, batch_size=batch_size, sampler=sampler)
        assert len(list(loader)) == train.steps_per_epoch(samples, batch_size, world_size)


def test_a_snapshot_of_another_run_is_refused_and_one_of_a_finished_run_said(tmp_path):
    """A run of 2 steps (64 samples on 2 ranks) writes s.pt, recording its run; then at once:
    the same command again (nothing left to train: a notice, exit 0), the same with --seed 1
    (refused), and two copies of s.pt as an older train.py wrote it, without samples and hidden:
    one resumed for a second epoch (a notice), one refused for --hidden 32 (read from the weights)."""
    short = ["--samples", "64", "--snapshot-every", "0"]
    first = run_torchrun(TRAIN, [*short, "--epochs", "1", "--snapshot", "s.pt"], cwd=tmp_path, timeout=120)
    assert first.ok, first.tail()
    assert first.rank_lines() == [  # as before snapshots recorded their run: no word more
        "[rank 0] restart 0: WORLD_SIZE=2, backend gloo, devices cpu",
        "[rank 0] no snapshot: starting from scratch",
        "[rank 0] snapshot at step 2: epoch 1, batch 0",
        first.rank_lines()[3],
        "[rank 0] done: 2 steps"]
    assert first.rank_lines()[3].startswith("[rank 0] epoch 0: loss ")
    snapshot = torch.load(tmp_path / "s.pt", weights_only=True)
    assert (snapshot["seed"], snapshot["samples"], snapshot["hidden"]) == (0, 64, 64)
    older = {key: value for key, value in snapshot.items() if key not in ("samples", "hidden")}
    for name in ("old.pt", "old_hidden.pt"):
        torch.save(older, tmp_path / name)
    commands = [torchrun_command(TRAIN, [*short, *args]) for args in (
        ["--epochs", "1", "--snapshot", "s.pt"],
        ["--epochs", "1", "--snapshot", "s.pt", "--seed", "1"],
        ["--epochs", "2", "--snapshot", "old.pt"],
        ["--epochs", "2", "--snapshot", "old_hidden.pt", "--hidden", "32"])]
    again, seed, old, hidden = run_together(commands, cwd=tmp_path, timeout=180)

    assert again.ok, again.tail()
    assert again.rank_lines()[1:] == [
        "[rank 0] s.pt is from a finished run (epoch 1 of 1): nothing to train; delete it or pass --snapshot "
        "another path",
        "[rank 0] resumed from snapshot at epoch 1, batch 0 of 2 (step 2)",
        "[rank 0] done: 2 steps"]
    assert old.ok, old.tail()
    assert ("[rank 0] old.pt does not record its run's --samples (an older train.py wrote it): resuming without "
            "checking it") in old.rank_lines()
    assert old.rank_lines()[-1] == "[rank 0] done: 4 steps"
    for run, says in [(seed, "--snapshot s.pt is from a run with --seed 0, not --seed 1: pass --seed 0 to "
                             "resume it, or delete it (or pass --snapshot another path) to start over"),
                      (hidden, "--snapshot old_hidden.pt is from a run with --hidden 64, not --hidden 32: ")]:
        assert not run.ok
        errors = worker_stderr(run.stderr)
        assert not any("Traceback" in line for line in errors), run.stderr
        said = [line for line in errors if line.startswith("error: ")]
        # one line, the same from each rank (torchrun may stop one before it says it)
        assert said and all(line == said[0] for line in said), run.stderr
        assert said[0].startswith(f"error: {says}"), run.stderr
        assert "resumed" not in run.stdout and "step" not in run.stdout


@pytest.mark.parametrize("changes, args, says", [
    ({"seed": 3, "samples": 100}, {}, "error: --snapshot s.pt is from a run with --seed 3 --samples 100, not "
                                      "--seed 0 --samples 512: pass --seed 3 --samples 100 to resume it"),
    ({"seed": None, "samples": None, "hidden": None}, {},
     "[rank 0] s.pt does not record its run's --seed, --samples (an older train.py wrote it): resuming without "
     "checking them"),
    ({"epoch": 3}, {"epochs": 2},
     "[rank 0] s.pt is from a run already at epoch 3, past --epochs 2: nothing to train; delete it or pass "
     "--snapshot another path"),
    ({"epoch": 3}, {"epochs": 0}, None),  # --epochs 0 asks for nothing to be trained: nothing to say
    ({"epoch": 2}, {}, None),  # an epoch left: resumed without a word
])
def test_check_resume(changes, args, says, capsys):
    train = load_script(TRAIN)
    parsed = train.parse_args(["--snapshot", "s.pt"])
    for name, value in args.items():
        setattr(parsed, name, value)
    model = train.TinyNet(16, 64, 4, [torch.device("cpu")])
    snapshot = {"model": model.state_dict(), "epoch": 1, "seed": 0, "samples": 512, "hidden": 64}
    snapshot.update(changes)
    snapshot = {key: value for key, value in snapshot.items() if value is not None}
    if says and says.startswith("error: "):
        with pytest.raises(SystemExit) as stop:
            train.check_resume(snapshot, parsed, 0)
        assert str(stop.value.code).startswith(says)
        return
    train.check_resume(snapshot, parsed, 0)
    assert capsys.readouterr().out == (f"{says}\n" if says else "")
    train.check_resume(snapshot, parsed, 1)  # the other ranks say nothing
    assert capsys.readouterr().out == ""


# ---------------------------------------------------------------- what train.py checks before it trains, and how it writes

@pytest.fixture(scope="module")
def one_epoch_with_a_linked_final(tmp_path_factory):
    """One epoch of plain ``python train.py`` (64 samples, batches of 16) whose ``--final`` path is a
    symbolic link to a file that must not change."""
    folder = tmp_path_factory.mktemp("final")
    (folder / "precious.txt").write_text("keep me")
    (folder / "final.pt").symlink_to(folder / "precious.txt")
    result = subprocess.run([sys.executable, str(TRAIN), "--epochs", "1", "--samples", "64", "--snapshot-every", "0",
                             "--snapshot", "s.pt", "--final", "final.pt"], cwd=folder, capture_output=True,
                            text=True, timeout=120, env=without("WORLD_SIZE", "RANK"))
    assert result.returncode == 0, result.stderr
    return folder


def test_the_final_weights_replace_a_link_and_never_write_through_it(one_epoch_with_a_linked_final):
    folder = one_epoch_with_a_linked_final
    assert (folder / "precious.txt").read_text() == "keep me"
    assert not (folder / "final.pt").is_symlink()
    assert "stage1.0.weight" in torch.load(folder / "final.pt", weights_only=True)
    assert not (folder / "final.pt.tmp").exists()


def test_a_resume_with_another_batch_size_is_refused(one_epoch_with_a_linked_final):
    """The snapshot records --batch-size: resumed with another one, it would skip batches of the
    wrong size (the epoch's position is counted in batches)."""
    folder = one_epoch_with_a_linked_final
    assert torch.load(folder / "s.pt", weights_only=True)["batch_size"] == 16
    result = subprocess.run([sys.executable, str(TRAIN), "--epochs", "2", "--samples", "64", "--snapshot", "s.pt",
                             "--batch-size", "4"], cwd=folder, capture_output=True, text=True, timeout=120,
                            env=without("WORLD_SIZE", "RANK"))
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    assert ("error: --snapshot s.pt is from a run with --batch-size 16, not --batch-size 4: pass --batch-size 16 "
            "to resume it") in result.stderr
    assert "resumed" not in result.stdout


def test_check_resume_names_another_batch_size(capsys):
    train = load_script(TRAIN)
    parsed = train.parse_args(["--snapshot", "s.pt", "--batch-size", "8"])
    model = train.TinyNet(16, 64, 4, [torch.device("cpu")])
    snapshot = {"model": model.state_dict(), "epoch": 1, "seed": 0, "samples": 512, "hidden": 64, "batch_size": 16}
    with pytest.raises(SystemExit) as stop:
        train.check_resume(snapshot, parsed, 0)
    assert str(stop.value.code).startswith(
        "error: --snapshot s.pt is from a run with --batch-size 16, not --batch-size 8: pass --batch-size 16 ")
    del snapshot["batch_size"]  # an older train.py's snapshot: resumed, as before, without a word
    train.check_resume(snapshot, parsed, 0)
    assert capsys.readouterr().out == ""


def test_a_final_path_whose_folder_cannot_take_it_is_refused_before_any_training(tmp_path, capsys):
    train = load_script(TRAIN)
    (tmp_path / "a folder").mkdir()
    missing = tmp_path / "no such folder" / "final.pt"
    for final, says in [(missing, f"the folder {missing.parent} does not exist"),
                        (tmp_path / "a folder", f"{tmp_path / 'a folder'} is a folder")]:
        with pytest.raises(SystemExit) as stop:
            train.parse_args(["--final", str(final)])
        assert stop.value.code == 2
        assert f"error: argument --final: {says}" in capsys.readouterr().err
    # as the script: refused before the process group, nothing trained
    result = subprocess.run([sys.executable, str(TRAIN), "--epochs", "1", "--final", str(missing)],
                            capture_output=True, text=True, timeout=60, cwd=tmp_path, env=without("WORLD_SIZE", "RANK"))
    assert result.returncode == 2 and result.stdout == "", result.stderr
    assert not (tmp_path / "snapshot.pt").exists()


def test_a_named_pipe_at_the_snapshot_path_is_refused_without_opening_it(tmp_path, capsys):
    """Opening a FIFO waits for a writer: the script would hang. It is refused from os.stat alone."""
    train = load_script(TRAIN)
    fifo = tmp_path / "snapshot.pt"
    os.mkfifo(fifo)
    with pytest.raises(SystemExit) as stop:
        train.parse_args(["--snapshot", str(fifo)])
    assert stop.value.code == 2
    assert (f"error: argument --snapshot: {fifo} is a named pipe (FIFO), not a file: the snapshot is read from "
            "and written to a file") in capsys.readouterr().err


def test_a_full_disk_is_named_from_the_real_error_torch_save_raises():
    """/dev/full answers every write with ENOSPC, as a full disk does: torch.save then raises
    ``RuntimeError: ... unexpected pos ...``, the OSError in its context."""
    train = load_script(TRAIN)
    full = open("/dev/full", "wb")  # buffered, as save_snapshot's file is  # noqa: SIM115
    try:
        with pytest.raises(RuntimeError) as raised:
            torch.save({"weights": torch.zeros(100_000)}, full)
    finally:
        with contextlib.suppress(OSError):  # closing flushes the buffer: ENOSPC again
            full.close()
    assert "unexpected pos" in str(raised.value)  # what the reader saw before
    assert train.full_disk(raised.value, "s.pt").startswith("error: no space left on device while writing s.pt: ")
    assert train.full_disk(RuntimeError("unexpected pos 1 vs 0"), "s.pt") is None  # no ENOSPC behind it: not named


@pytest.fixture
def tiny_file_system(tmp_path):
    """A 64 KiB tmpfs, where this user may mount one (root, outside a restricted container)."""
    folder = tmp_path / "tiny"
    folder.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(folder)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    yield folder
    subprocess.run(["umount", str(folder)], check=True)


def test_a_snapshot_on_a_full_disk_says_so_and_keeps_the_previous_one(tiny_file_system):
    train = load_script(TRAIN)
    path = tiny_file_system / "snapshot.pt"
    train.save_snapshot(path, {"step": 1})
    with pytest.raises(SystemExit) as stop:
        train.save_snapshot(path, {"step": 2, "weights": torch.zeros(100_000)})  # 400 KB
    assert str(stop.value.code).startswith(f"error: no space left on device while writing {path}: ")
    assert not (tiny_file_system / "snapshot.pt.tmp").exists()  # the partial file is removed
    assert torch.load(path, weights_only=True) == {"step": 1}
