"""tests/plumbing/recorded_durations.py: files start longest first, by tests/file_durations.json."""

import json

from plumbing import recorded_durations
from plumbing.recorded_durations import ROOT, longest_first, stored_durations


def test_longest_first_follows_the_table_and_puts_unknown_files_last(tmp_path, monkeypatch):
    table = tmp_path / "file_durations.json"
    table.write_text(json.dumps({"tests/test_launch.py": 99.0, "book/part4_running/13b_debugging.ipynb": 120.0}))
    monkeypatch.setattr(recorded_durations, "FILE_DURATIONS", table)
    launch, debugging = ROOT / "tests" / "test_launch.py", ROOT / "book" / "part4_running" / "13b_debugging.ipynb"
    unknown, elsewhere = ROOT / "tests" / "test_unknown.py", tmp_path / "test_outside.py"
    assert longest_first([unknown, elsewhere, launch, debugging]) == [debugging, launch, unknown, elsewhere]


def test_the_committed_table_names_files_that_exist_and_the_notebooks():
    stored = stored_durations()
    assert stored, "tests/file_durations.json is missing: python -m pytest --store-durations"
    gone = [name for name in stored if not (ROOT / name).exists()]
    assert len(gone) < len(stored) / 4, f"refresh tests/file_durations.json; gone: {gone}"
    assert any(name.endswith(".ipynb") for name in stored), "nbval executes the notebooks: time them too"
