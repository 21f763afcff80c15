"""How long each test file and notebook took last time: longest first.

pytest-xdist's workers take whole files (a notebook's cells run in order, in
one kernel). Started in an arbitrary order, the longest file can come last
and run alone while the other workers idle. Started longest first, the
workers finish close together (Graham's LPT rule: within 4/3 of the best
schedule).

The seconds are in ``tests/file_durations.json``, written by
``python -m pytest --store-durations`` (the root conftest.py): for a
notebook, what nbval spent executing it. A stale figure only costs speed,
never a result. Imports nothing but the standard library: the root
conftest.py loads it before torch.
"""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FILE_DURATIONS = ROOT / "tests" / "file_durations.json"


def stored_durations() -> dict[str, float]:
    """The table: seconds by path relative to the repository root (empty if missing)."""
    try:
        return json.loads(FILE_DURATIONS.read_text())
    except FileNotFoundError:
        return {}


def longest_first(paths: list[Path]) -> list[Path]:
    """``paths`` sorted by their recorded seconds, longest first; unknown files last, ties in order."""
    stored = stored_durations()

    def seconds(path: Path) -> float:
        path = path.resolve()
        return stored.get(path.relative_to(ROOT).as_posix(), 0.0) if path.is_relative_to(ROOT) else 0.0

    return sorted(paths, key=lambda path: -seconds(path))
