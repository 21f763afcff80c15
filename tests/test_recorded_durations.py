"""book/_ext/recorded_durations.py: a notebook's seconds from its cells'
timestamps, test files' from tests/file_durations.json, longest first."""

import json
import sys
from pathlib import Path

import nbformat
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "book" / "_ext"))
import recorded_durations  # noqa: E402
from recorded_durations import expected_finish_order, longest_first, notebook_seconds  # noqa: E402


@pytest.fixture(autouse=True)
def no_rank_outlives_a_test():
    """No rank is started here (overrides tests/conftest.py's check)."""
    yield


def timed_notebook(*seconds):
    cells = []
    for i, s in enumerate(seconds):
        cell = nbformat.v4.new_code_cell("pass")
        cell.metadata["execution"] = {"iopub.status.busy": f"2026-11-24T10:00:{i:02d}.000000Z",
                                      "iopub.status.idle": f"2026-11-24T10:00:{i + s:09.6f}Z"}
        cells.append(cell)
    cells.append(nbformat.v4.new_code_cell("never executed"))
    return nbformat.v4.new_notebook(cells=cells)


def test_a_notebook_lasts_the_sum_of_its_cells():
    assert notebook_seconds(timed_notebook(0.5, 2.25)) == pytest.approx(2.75)
    assert notebook_seconds(nbformat.v4.new_notebook()) == 0


def test_longest_first_reads_cells_and_the_stored_table(tmp_path, monkeypatch):
    short, long = tmp_path / "short.ipynb", tmp_path / "long.ipynb"
    nbformat.write(timed_notebook(1), short)
    nbformat.write(timed_notebook(3, 3), long)
    unknown = tmp_path / "test_unknown.py"
    unknown.write_text("")
    assert longest_first([unknown, short, long]) == [long, short, unknown]

    root = Path(recorded_durations.__file__).resolve().parents[2]
    table = tmp_path / "file_durations.json"
    table.write_text(json.dumps({"tests/test_launch.py": 99.0}))
    monkeypatch.setattr(recorded_durations, "FILE_DURATIONS", table)
    launch = root / "tests" / "test_launch.py"
    assert longest_first([short, long, launch]) == [launch, long, short]


def test_the_expected_finish_order_simulates_longest_first_on_the_workers(tmp_path):
    # 10 s, 6 s, 5 s and 2 s on two workers, longest first: 10 and 6 start at
    # once; 5 starts when 6 ends and ends at 11; 2 starts at 10 and ends at 12.
    paths = {}
    for name, seconds in (("a", 2), ("b", 10), ("c", 5), ("d", 6)):
        paths[seconds] = tmp_path / f"{name}.ipynb"
        nbformat.write(timed_notebook(seconds), paths[seconds])
    assert expected_finish_order(list(paths.values()), 2) == [paths[6], paths[10], paths[5], paths[2]]
    assert expected_finish_order(list(paths.values()), 4) == [paths[2], paths[5], paths[6], paths[10]]


def test_a_notebook_is_timed_by_its_cells_whatever_the_table_says(tmp_path, monkeypatch):
    # What pytest spent on a notebook it only compared (near 0) must not make
    # the build start its longest notebook last.
    root = Path(recorded_durations.__file__).resolve().parents[2]
    long, short = (root / "book" / "part4_running" / "13b_debugging.ipynb",
                   root / "book" / "part1_foundations" / "00_how_to_read.ipynb")
    assert notebook_seconds(json.loads(long.read_text())) > notebook_seconds(json.loads(short.read_text()))
    table = tmp_path / "file_durations.json"
    table.write_text(json.dumps({"book/part4_running/13b_debugging.ipynb": 0.1,
                                 "book/part1_foundations/00_how_to_read.ipynb": 99.0}))
    monkeypatch.setattr(recorded_durations, "FILE_DURATIONS", table)
    assert longest_first([short, long]) == [long, short]


def test_the_committed_table_names_files_that_exist():
    root = Path(recorded_durations.__file__).resolve().parents[2]
    stored = recorded_durations.stored_durations()
    assert stored, "tests/file_durations.json is missing: python -m pytest --store-durations"
    assert not [name for name in stored if name.endswith(".ipynb")], "notebooks are timed by their cells"
    gone = [name for name in stored if not (root / name).exists()]
    assert len(gone) < len(stored) / 4, f"refresh tests/file_durations.json; gone: {gone}"
