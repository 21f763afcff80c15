"""How long each notebook and test file took last time: longest first.

Two notebooks at a time in the build (``execute_ahead``), several pytest-xdist
workers in the tests: either way the work is a set of jobs that cannot be
split (a notebook's cells run in order, in one kernel), shared among a few
workers. Started in an arbitrary order, the longest job can come last and
run alone while the other workers idle. Started longest first, the workers
finish close together (Graham's LPT rule: within 4/3 of the best schedule).

The durations come from what was recorded before, so a stale figure only
costs speed, never a result:

* a notebook's committed cells carry the timestamps nbclient wrote when it
  last executed them (``metadata.execution``: ``iopub.status.busy`` to
  ``iopub.status.idle``): what executing it costs, in the build or in a test
  run that executes it;
* a test file's seconds are in ``tests/file_durations.json``, written by
  ``python -m pytest --store-durations`` (the root conftest.py). That table
  holds no notebooks: what pytest spends on one is near 0 when nbval compares
  the build's execution (``tests/nbval_replay.py``). Such figures once
  overrode the cells' timestamps, and the build started its three longest
  notebooks after most of the others.

Imports nothing but the standard library: the root conftest.py loads it
before torch.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FILE_DURATIONS = ROOT / "tests" / "file_durations.json"


def notebook_seconds(notebook: dict) -> float:
    """Seconds the notebook's code cells took when they were last executed (0 if never)."""
    total = 0.0
    for cell in notebook.get("cells", []):
        timing = cell.get("metadata", {}).get("execution", {})
        busy, idle = timing.get("iopub.status.busy"), timing.get("iopub.status.idle")
        if busy and idle:
            total += (_time(idle) - _time(busy)).total_seconds()
    return total


def file_seconds(path: Path, stored: dict[str, float] | None = None) -> float:
    """Seconds ``path`` took last time: a notebook's from its cells, a test
    file's from the table (0 if not in it); ``stored`` is
    ``stored_durations()``, read once by a caller that asks for many files."""
    if path.suffix == ".ipynb":
        return notebook_seconds(json.loads(path.read_text()))
    if stored is None:
        stored = stored_durations()
    path = path.resolve()
    if path.is_relative_to(ROOT):
        return stored.get(path.relative_to(ROOT).as_posix(), 0.0)
    return 0.0


def recorded_seconds(paths: list[Path]) -> dict[Path, float]:
    """Each path's seconds last time (``file_seconds``), the stored table read once."""
    stored = stored_durations()
    return {path: file_seconds(path, stored) for path in paths}


def longest_first(paths: list[Path], seconds: dict[Path, float] | None = None) -> list[Path]:
    """``paths`` sorted by their recorded seconds, longest first; ties keep their order.

    ``seconds``: each path's, from a caller that has them (``recorded_seconds``).
    """
    seconds = recorded_seconds(paths) if seconds is None else seconds
    return sorted(paths, key=lambda path: -seconds[path])


def expected_finish_order(paths: list[Path], workers: int, seconds: dict[Path, float] | None = None) -> list[Path]:
    """``paths`` in the order they should finish when started longest first on ``workers`` workers.

    A simulation of that schedule on the recorded seconds: each job starts
    when a worker frees up, and ends its seconds later. The build reads the
    notebooks in this order while they execute (``execute_ahead``), so that
    its reader seldom waits for one while another is ready.
    """
    seconds = recorded_seconds(paths) if seconds is None else seconds
    free_at = [0.0] * workers
    finish = {}
    for path in longest_first(paths, seconds):
        start = min(free_at)
        finish[path] = start + seconds[path]
        free_at[free_at.index(start)] = finish[path]
    return sorted(paths, key=lambda path: finish[path])


def stored_durations() -> dict[str, float]:
    try:
        return json.loads(FILE_DURATIONS.read_text())
    except FileNotFoundError:
        return {}


def _time(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00"))
