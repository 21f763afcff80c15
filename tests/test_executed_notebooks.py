"""nbval compares the build's execution of a notebook only when it ran from the
same inputs, with nbval's own checks (book/_ext/executed_notebooks.py,
tests/nbval_replay.py).

The end-to-end tests run pytest on a one-cell notebook in a temporary
project whose conftest points executed_notebooks at it. The notebook prints
2; a saved "build execution" that printed 3 tells which one was compared.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

import executed_notebooks

ROOT = Path(__file__).resolve().parents[1]

CONFTEST = f"""
import sys
from pathlib import Path
sys.path[:0] = [{str(ROOT / "book" / "_ext")!r}, {str(ROOT / "tests")!r}]
import executed_notebooks
executed_notebooks.ROOT = Path(__file__).parent
executed_notebooks.EXECUTED = executed_notebooks.ROOT / "_build" / "executed"
executed_notebooks.SOURCE_FOLDERS = ("package",)
pytest_plugins = ["nbval_replay"]
"""


@pytest.fixture
def no_rank_outlives_a_test():
    """No rank is started here (overrides tests/conftest.py's check)."""
    yield


def notebook(printed: str, code: str = "print(1 + 1)", error: bool = False):
    cell = nbformat.v4.new_code_cell(code, execution_count=1)
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=printed)]
    if error:
        cell.outputs.append(nbformat.v4.new_output("error", ename="ValueError", evalue="boom",
                                                   traceback=["ValueError: boom"]))
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# A page"), cell])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    return nb


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A project with one notebook (committed output "2"), a package folder, and
    executed_notebooks pointed at it, here and in the pytest it runs."""
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "package").mkdir()
    (tmp_path / "package" / "module.py").write_text("VALUE = 1\n")
    nbformat.write(notebook("2\n"), tmp_path / "page.ipynb")
    monkeypatch.setattr(executed_notebooks, "ROOT", tmp_path)
    monkeypatch.setattr(executed_notebooks, "EXECUTED", tmp_path / "_build" / "executed")
    monkeypatch.setattr(executed_notebooks, "SOURCE_FOLDERS", ("package",))
    executed_notebooks._sources_digest.cache_clear()
    yield tmp_path
    executed_notebooks._sources_digest.cache_clear()


def save_build_execution(project: Path, executed: nbformat.NotebookNode):
    """What execute_ahead does: the inputs as they are now, then the executed notebook."""
    committed = nbformat.read(project / "page.ipynb", as_version=4)
    executed_notebooks.save(executed_notebooks.saved_path(project / "page.ipynb"), executed, executed_notebooks.inputs(committed), 1.0)
    executed_notebooks._sources_digest.cache_clear()


def run_pytest(project: Path, *options: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist", "-o", "addopts=",
               "--nbval", "--nbval-current-env", "-q", "page.ipynb", *options]
    return subprocess.run(command, cwd=project, capture_output=True, text=True, timeout=120,
                          env=os.environ.copy())


# ---------------------------------------------------------------- what counts as the same inputs


def test_the_same_inputs_match_and_each_kind_of_change_is_named(project, monkeypatch):
    nb = nbformat.read(project / "page.ipynb", as_version=4)
    save_build_execution(project, notebook("2\n"))
    assert executed_notebooks.matching_execution(project / "page.ipynb", nb)[1] == "same inputs"

    prose = nbformat.read(project / "page.ipynb", as_version=4)
    prose.cells[0].source = "# Another title"
    prose.cells[1].outputs = []
    assert executed_notebooks.matching_execution(project / "page.ipynb", prose)[1] == "same inputs"

    edited = nbformat.read(project / "page.ipynb", as_version=4)
    edited.cells[1].source = "print(2 + 0)"
    assert executed_notebooks.matching_execution(project / "page.ipynb", edited) == (None, "other code cells")

    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    monkeypatch.setenv("MKL_CBWR", "AUTO")
    assert executed_notebooks.matching_execution(project / "page.ipynb", nb) == (
        None, "other variables MKL_CBWR, OMP_NUM_THREADS")
    monkeypatch.undo()
    monkeypatch.setattr(executed_notebooks, "ROOT", project)
    monkeypatch.setattr(executed_notebooks, "EXECUTED", project / "_build" / "executed")
    monkeypatch.setattr(executed_notebooks, "SOURCE_FOLDERS", ("package",))

    (project / "package" / "module.py").write_text("VALUE = 2\n")
    executed_notebooks._sources_digest.cache_clear()
    assert executed_notebooks.matching_execution(project / "page.ipynb", nb) == (None, "other source files")


def test_no_saved_execution_is_named(project):
    nb = nbformat.read(project / "page.ipynb", as_version=4)
    assert executed_notebooks.matching_execution(project / "page.ipynb", nb) == (None, "no execution saved by a build")


# ---------------------------------------------------------------- nbval through the plugin


def test_a_current_build_execution_is_compared_and_no_kernel_runs(project):
    nbformat.write(notebook("3\n"), project / "page.ipynb")  # committed: 3, as the build printed
    save_build_execution(project, notebook("3\n"))
    result = run_pytest(project)
    assert result.returncode == 0, result.stdout + result.stderr  # a kernel would have printed 2
    assert "1 compared as the build executed them" in result.stdout
    assert "0 executed here" in result.stdout


def test_a_build_execution_that_differs_fails_as_nbval_reports_it(project):
    save_build_execution(project, notebook("3\n"))
    result = run_pytest(project)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Cell outputs differ" in result.stdout
    assert "1 compared as the build executed them" in result.stdout


def test_an_exception_in_the_build_execution_fails_the_cell(project):
    save_build_execution(project, notebook("2\n", error=True))
    result = run_pytest(project)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Cell execution caused an exception" in result.stdout
    assert "ValueError: boom" in result.stdout


def test_other_inputs_or_the_option_execute_the_notebook_here(project):
    save_build_execution(project, notebook("3\n"))  # would fail if it were compared
    (project / "package" / "module.py").write_text("VALUE = 2\n")  # ...but the sources changed
    result = run_pytest(project)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "page.ipynb: other source files" in result.stdout

    (project / "package" / "module.py").write_text("VALUE = 1\n")
    save_build_execution(project, notebook("3\n"))
    result = run_pytest(project, "--execute-notebooks")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "page.ipynb: --execute-notebooks" in result.stdout
