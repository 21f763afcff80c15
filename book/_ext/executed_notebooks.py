"""Executed once, compared twice: the build's fresh executions, kept for nbval.

CI builds the book, which executes every notebook, and then runs the tests,
where nbval executes every notebook again to compare its outputs with the
committed ones. On two cores the second execution is half the test suite's
time, and it recomputes something already known: the same code, run by the
same interpreter with the same packages on the same CPU, under the same
settings, gives the outputs the build has just written down.

So the build (``execute_ahead``) saves each notebook it executed under
``_build/executed/``, together with a record of everything its
outputs depend on (its *inputs*), taken just before the kernel started:

* the notebook's code cells, in order;
* every file under ``ddp_lab/``, ``book/`` and ``labs/`` that is not a
  notebook (the package the notebooks import, the scripts they run, the
  build's own extensions), byte for byte;
* the interpreter and every installed distribution with its version;
* the CPU (its model and instruction-set flags) and the cores the process
  may use;
* every environment variable that reaches the float path, the launcher or
  the kernel: ``OMP_*``, ``MKL_*``, ``ATEN_*``, ``ONEDNN_*``, ``TORCH_*``,
  ``NCCL_*``, ``GLOO_*``, ``CUDA_*``, ``LD_PRELOAD``, ``PYTHON*`` and the
  like (``INPUT_VARIABLES``).

``tests/nbval_replay.py`` takes the same inputs when nbval collects a
notebook. If a saved execution's are equal to them, nbval compares *that* execution's
outputs with the committed ones, cell by cell, with its own comparison and
sanitize rules (an error in a cell fails it, as in a live run); anything
else (no build, an edited file, another package version, another CPU, a
variable set differently, a notebook that failed in the build) and nbval
executes the notebook itself, as always. This is the rule build systems
use for test results (Bazel caches a test's result under a digest of all
its inputs): the check is the same, done once. ``python -m pytest
--execute-notebooks`` executes every notebook regardless, and
``tools/cpu_variants.py`` always does (its simulated CPUs change what the
inputs cannot see, such as ``LD_PRELOAD``'d libraries' contents).

Imports nothing but the standard library: the root conftest.py loads it
before torch.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import sys
from functools import lru_cache
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EXECUTED = ROOT / "_build" / "executed"
SOURCE_FOLDERS = ("ddp_lab", "book", "labs")
SKIPPED_FOLDERS = {"_build", "__pycache__", ".ipynb_checkpoints", ".jupyter_cache", "node_modules"}
# Environment variables whose value can change what a notebook prints.
INPUT_VARIABLES = ("OMP_", "KMP_", "GOMP_", "MKL_", "OPENBLAS_", "ATEN_", "ONEDNN_", "DNNL_",
                   "TORCH", "PYTORCH_", "NCCL_", "GLOO_", "CUDA_", "NVIDIA_", "MASTER_",
                   "WORLD_SIZE", "RANK", "LOCAL_", "GROUP_", "LD_", "PYTHON", "IPYTHON",
                   "JUPYTER", "MPLBACKEND", "DDP_LAB_", "SLURM_", "TZ", "LANG", "LC_")
METADATA_KEY = "ddp_book_execution"


def inputs(notebook: dict) -> dict:
    """What ``notebook``'s outputs depend on, as seen from this process: a digest
    per part, and the variables themselves (so that a mismatch can be named)."""
    code = ["".join(cell["source"]) for cell in notebook["cells"] if cell["cell_type"] == "code"]
    return {
        "code cells": _digest(code),
        "source files": _sources_digest(),
        "python": [sys.version, sys.prefix, platform.platform()],
        "packages": _digest(_packages()),
        "cpu": _digest(_cpu()),
        "cores": sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "environment": {name: value for name, value in sorted(os.environ.items())
                        if name.startswith(INPUT_VARIABLES)},
    }


def saved_path(notebook_path: Path, sources: Path | None = None, folder: Path | None = None) -> Path:
    """Where a build keeps its execution of ``notebook_path``: in ``folder``,
    at the notebook's place under ``sources``. For the book, ``_build/executed/``
    beside the HTML and the repository (the defaults)."""
    sources, folder = Path(sources or ROOT).resolve(), folder or EXECUTED
    return folder / Path(notebook_path).resolve().relative_to(sources)


def save(path: Path, executed: dict, inputs_before: dict, seconds: float, cell_times=None) -> None:
    """Save an executed notebook at ``path`` (``saved_path`` in the book's own
    build) with the inputs taken before it ran; ``cell_times`` maps a cell's
    index to its start and end (seconds since the epoch), to see how the
    build's notebooks shared the machine."""
    executed = json.loads(json.dumps(executed))  # a copy, plain JSON
    executed["metadata"][METADATA_KEY] = {"inputs": inputs_before, "seconds": round(seconds, 2),
                                          "cell_times": cell_times or {}}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.with_suffix(".tmp").write_text(json.dumps(executed))
    path.with_suffix(".tmp").replace(path)  # whole, or not at all


def matching_execution(notebook_path: Path, notebook: dict) -> tuple[dict | None, str]:
    """The build's execution of ``notebook_path`` if it ran from this process's
    inputs, else None; and why not, in a few words."""
    path = saved_path(notebook_path)
    if not path.exists():
        return None, "no execution saved by a build"
    executed = json.loads(path.read_text())
    saved = executed.get("metadata", {}).get(METADATA_KEY, {}).get("inputs", {})
    now = inputs(notebook)
    differ = [part for part in now if saved.get(part) != now[part]]
    if "environment" in differ:
        names = set(saved.get("environment", {})) | set(now["environment"])
        differ[differ.index("environment")] = "variables " + ", ".join(sorted(
            name for name in names if saved.get("environment", {}).get(name) != now["environment"].get(name)))
    if differ:
        return None, "other " + "; ".join(differ)
    return executed, "same inputs"


def _digest(value) -> str:
    return hashlib.sha256(json.dumps(value).encode()).hexdigest()


@lru_cache(maxsize=1)
def _sources_digest() -> str:
    digest = hashlib.sha256()
    for path in _source_files():
        digest.update(path.relative_to(ROOT).as_posix().encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def _source_files():
    files = []
    for folder in SOURCE_FOLDERS:
        for directory, subfolders, names in os.walk(ROOT / folder):
            subfolders[:] = sorted(name for name in subfolders if name not in SKIPPED_FOLDERS)
            files += [Path(directory) / name for name in names if not name.endswith((".ipynb", ".pyc"))]
    return sorted(files)


@lru_cache(maxsize=1)
def _packages() -> list[str]:
    # A set: the repository's own ddp_lab.egg-info is found too where the
    # working folder is on sys.path (python -m pytest), not elsewhere.
    return sorted({f"{dist.metadata['Name']}=={dist.version}" for dist in metadata.distributions()})


@lru_cache(maxsize=1)
def _cpu() -> list[str]:
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return [platform.processor(), platform.machine()]
    wanted = ("vendor_id", "model name", "cpu family", "model\t", "flags")
    return sorted({line for line in lines if line.startswith(wanted)})
