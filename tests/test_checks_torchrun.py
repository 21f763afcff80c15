"""Lab 5's checker (ddp_lab.checks.torchrun) on real torchrun jobs.

The reference script (labs/scripts/train.py) passes every check; a copy that
starts over instead of resuming, lets every rank write the snapshot, and
writes it in place, fails with a message for each of those mistakes.
"""

from pathlib import Path

import pytest
import torch

from ddp_lab.checks.torchrun import check_torchrun_script, compare_weights

TRAIN = Path(__file__).resolve().parents[1] / "labs" / "scripts" / "train.py"
SHORT = ["--samples", "256", "--epochs", "3"]  # 24 steps; snapshots every 5; step 13 resumes from 10


def broken_copy(folder: Path) -> Path:
    """train.py with three classic mistakes."""
    source = TRAIN.read_text()
    replacements = [
        ("    snapshot = load_snapshot(args.snapshot)\n", "    snapshot = None  # never resumes\n"),
        ("    if rank == 0:\n        save_snapshot(", "    if True:  # every rank writes\n        save_snapshot("),
        ('    tmp = f"{path}.tmp"\n', '    tmp = path  # written in place\n'),
        # and with open(path, "wb"), as train.py wrote before it created its temporary file exclusively
        ("    with contextlib.suppress(FileNotFoundError):\n        os.unlink(tmp)", "    if False:\n        pass"),
        ('    with open(tmp, "xb") as file:', '    with open(tmp, "wb") as file:'),
        ("    os.replace(tmp, path)\n", ""),
    ]
    for old, new in replacements:
        assert old in source, f"train.py changed: {old!r} not found"
        source = source.replace(old, new)
    path = folder / "train_broken.py"
    path.write_text(source)
    return path


def test_reference_script_passes():
    result = check_torchrun_script(TRAIN, args=SHORT)
    assert result, str(result)
    assert result.correct == result.total == 6
    assert str(result).startswith("✓ all 6 checks correct (train.py under torchrun: 2 processes, rank 1 fails")


def test_script_that_starts_over_fails_with_clear_messages(tmp_path):
    result = check_torchrun_script(broken_copy(tmp_path), args=SHORT)
    assert not result
    kinds = {mistake.kind: mistake.message for mistake in result.mistakes}
    assert set(kinds) == {"from_scratch", "every_rank", "not_atomic"}, str(result)
    assert "never read the snapshot" in kinds["from_scratch"] and "ran all 24 steps again" in kinds["from_scratch"]
    assert "rank(s) 1 wrote the snapshot too" in kinds["every_rank"]
    assert "os.replace" in kinds["not_atomic"]
    # Starting over from the same seed ends with the same weights: only the probe can tell.
    assert result.correct == 3 and "final weights" not in str(result)


def test_a_script_that_crashes_shows_its_traceback(tmp_path):
    script = tmp_path / "crash.py"
    script.write_text("import sys\nraise SystemExit('cannot find the data: ' + ' '.join(sys.argv[1:3]))\n")
    result = check_torchrun_script(script)
    assert not result and result.correct == 0
    (mistake,) = result.mistakes
    assert mistake.kind == "crashed" and "cannot find the data: --snapshot" in mistake.message


def test_weight_comparison_names_the_tensor_and_the_gap():
    a = {"w": torch.zeros(3), "b": torch.ones(2)}
    assert compare_weights(a, {k: v.clone() for k, v in a.items()}) is None
    mistake = compare_weights(a, {"w": torch.tensor([0.0, 0.5, 0.0]), "b": torch.ones(2)})
    assert mistake.kind == "differ" and "'w' by up to 0.5" in mistake.message
    assert compare_weights(a, {"w": torch.zeros(3)}).kind == "keys"
    assert compare_weights(a, None).kind == "not_a_state_dict"


@pytest.mark.parametrize("kwargs, says", [
    ({"script": "no_such_script.py"}, "no such file"),
    ({"fail_rank": 2}, "fail_rank must be a rank of the job, 0 to 1, got 2"),
    ({"fail_at_step": 0}, "fail_at_step must be an int >= 1, got 0"),
    ({"nproc_per_node": 1}, "nproc_per_node must be an int >= 2, got 1"),
])
def test_misuse_raises(kwargs, says):
    kwargs = {"script": TRAIN, **kwargs}
    with pytest.raises(ValueError, match=says):
        check_torchrun_script(kwargs.pop("script"), **kwargs)
