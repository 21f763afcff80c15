"""Build ddp_lab's wheel (and sdist) from a copy of what the build reads: one home for
tests/test_wheel.py and tests/test_colab_pinned.py.

The copy keeps the build out of the checkout (no ``build/`` folder there, no race with
another build), and fails if pyproject.toml comes to need a file outside
``BUILD_INPUTS``. ``--no-isolation``: the build uses this environment's setuptools
(requirements.txt) rather than downloading one.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# What pyproject.toml packs: the package, the book's scripts (ddp_lab/book_scripts) and the
# stored runs (ddp_lab/stored_runs), with what the sdist adds (MANIFEST.in).
BUILD_INPUTS = ("pyproject.toml", "README.md", "MANIFEST.in", "CHANGELOG.md", "ddp_lab", "labs/scripts",
                "book/part4_running/gpu_results", "book/part4_running/cluster_results")
_SKIP = shutil.ignore_patterns("__pycache__", "*.pyc", ".ipynb_checkpoints")


def build(folder: Path, *, sdist: bool = True) -> tuple[Path, Path | None]:
    """(wheel, sdist or None) built into ``folder / "dist"``."""
    source = folder / "source"
    for name in BUILD_INPUTS:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, source / name, ignore=_SKIP)
        elif (ROOT / name).exists():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, source / name)
    kinds = [] if sdist else ["--wheel"]
    done = subprocess.run([sys.executable, "-m", "build", "--no-isolation", *kinds, "--outdir",
                           str(folder / "dist"), str(source)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (wheel,) = (folder / "dist").glob("*.whl")
    sdists = list((folder / "dist").glob("*.tar.gz"))
    return wheel, (sdists[0] if sdists else None)
