"""The code stays clean by the rules in pyproject.toml's [tool.ruff] (pyflakes,
import order, pycodestyle's basics): `ruff check .` from the repository root."""

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_ruff_finds_nothing():
    ruff = shutil.which("ruff") or str(Path(sys.executable).with_name("ruff"))
    result = subprocess.run([ruff, "check", "--no-cache", "."], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_is_pinned_to_one_minor_release_and_it_is_the_one_installed():
    # A new minor release of ruff adds and changes rules: `ruff check .` could fail on
    # a fresh install with no change here. requirements.txt allows one, the one in use.
    from importlib.metadata import version

    from packaging.requirements import Requirement

    lines = (ROOT / "requirements.txt").read_text(encoding="utf-8").splitlines()
    (ruff,) = [Requirement(line.split("#")[0]) for line in lines if line.startswith("ruff")]
    bounds = {spec.operator: spec.version for spec in ruff.specifier}
    assert set(bounds) in ({"=="}, {">=", "<"}), f"ruff is not pinned to a range: {ruff}"
    assert version("ruff") in ruff.specifier, f"ruff {version('ruff')} installed, requirements.txt says {ruff}"
    if "<" in bounds:
        low, high = (tuple(map(int, bounds[op].split(".")[:2])) for op in (">=", "<"))
        assert high == (low[0], low[1] + 1), f"{ruff} allows more than one minor release"
