"""book/_ext/execute_ahead.py: notebooks run two at a time into myst-nb's
cache while Sphinx reads the other pages, a cell tagged measures-time runs
with no other cell beside it, and a notebook that fails there is left to myst-nb.

Real Sphinx builds of a small project, with real kernels.
"""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import nbformat
import pytest

EXTENSIONS = Path(__file__).resolve().parents[1] / "book" / "_ext"
WAIT = 60  # seconds a notebook waits for its partner: ample when both run at once

# Each of the pair waits until the other has started: run one after the
# other, the first would never see the second and fail.
MEET = textwrap.dedent("""
    import pathlib, time
    here = pathlib.Path.cwd()
    (here / "{me}.started").touch()
    deadline = time.monotonic() + {wait}
    while not (here / "{other}.started").exists():
        assert time.monotonic() < deadline, "{other} is not running beside {me}"
        time.sleep(0.05)
    print("{me} met {other}")
""")
# Keeps the cell that met the other notebook running for 2 s more, noting the time.
BUSY = textwrap.dedent("""
    with open("busy.times", "w") as times:
        start = time.time()
        while time.time() < start + 2:
            times.write(f"{time.time()}\\n")
            time.sleep(0.01)
""")
# Who started this kernel? (book/_ext/zygote_kernels.py)
PARENT = 'import os; print("parent:", open(f"/proc/{os.getppid()}/cmdline").read().split("\\0")[1])'
# A timing cell: when did it run?
TIMED = 'start = time.time(); time.sleep(0.5); open("timed.times", "w").write(f"{start} {time.time()}")'


def notebook(folder, name, *cells):
    """cells: code, or (code, tags)."""
    code_cells = [nbformat.v4.new_code_cell(c) if isinstance(c, str)
                  else nbformat.v4.new_code_cell(c[0], metadata={"tags": c[1]}) for c in cells]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(f"# {name}"), *code_cells])
    nb.metadata.kernelspec = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, folder / f"{name}.ipynb")


def build(folder, *options):
    (folder / "conf.py").write_text(textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(EXTENSIONS)!r})
        extensions = ["myst_nb", "execute_ahead"]
        nb_execution_mode = "cache"
        nb_execution_timeout = {WAIT + 30}

        def setup(app):  # when each page was read: "docname seconds-since-the-epoch" lines
            import time
            app.connect("doctree-read", lambda app, doctree: open({str(folder.parent / "read.times")!r}, "a").write(
                f"{{app.env.docname}} {{time.time()}}\\n"))
    """))
    pages = "\n".join(sorted(path.stem for path in folder.glob("*.ipynb")))
    (folder / "index.md").write_text(f"# Test\n\n```{{toctree}}\n{pages}\n```\n")
    out = folder.parent / "out"  # outside the sources, so that Sphinx does not read the cache as pages
    run = subprocess.run([sys.executable, "-m", "sphinx", *options, "-b", "html", str(folder), str(out / "html")],
                         capture_output=True, text=True, timeout=300)
    return run.stdout + run.stderr


@pytest.fixture(scope="module")
def book(tmp_path_factory):
    """A book of three notebooks, built once: (source folder, build log)."""
    source = tmp_path_factory.mktemp("book") / "source"
    source.mkdir()
    notebook(source, "a_busy", MEET.format(me="a_busy", other="b_timed", wait=WAIT) + BUSY, PARENT)
    notebook(source, "b_timed", MEET.format(me="b_timed", other="a_busy", wait=WAIT), (TIMED, ["measures-time"]))
    notebook(source, "broken", "raise ValueError('on purpose')")
    return source, build(source)


def test_notebooks_run_side_by_side_into_myst_nbs_cache(book):
    source, log = book
    assert "executing 3 notebooks ahead, 2 at a time" in log, log
    for name in ("a_busy", "b_timed"):
        assert f"{name}.ipynb: executed ahead" in log, log
        assert f"{name}.ipynb: Using cached notebook" in log, log  # myst-nb did not run it again
    assert "a_busy met b_timed" in (source.parent / "out" / "html" / "a_busy.html").read_text()


def test_the_other_pages_are_read_while_the_notebooks_execute(book):
    source, _ = book
    read = {}
    for line in (source.parent / "read.times").read_text().splitlines():
        name, when = line.split()
        read.setdefault(name, float(when))  # the first build's
    kept = nbformat.read(source.parent / "out" / "executed" / "a_busy.ipynb", as_version=4)
    cell_times = kept.metadata.ddp_book_execution.cell_times
    first_cell, last_cell = min(t[0] for t in cell_times.values()), max(t[1] for t in cell_times.values())
    assert read["index"] < first_cell, "the index page was read only after the notebooks had run"
    assert read["a_busy"] >= last_cell  # a notebook is read once its execution has ended


def test_the_kernels_are_forked_by_the_zygote(book):
    source, _ = book
    kept = nbformat.read(source.parent / "out" / "executed" / "a_busy.ipynb", as_version=4)
    assert kept.cells[2].outputs[0].text == f"parent: {EXTENSIONS / 'kernel_zygote.py'}\n"


def test_each_execution_is_kept_for_nbval_with_the_inputs_it_ran_from(book):
    source, _ = book
    kept = nbformat.read(source.parent / "out" / "executed" / "a_busy.ipynb", as_version=4)
    assert kept.cells[1].outputs[0].text == "a_busy met b_timed\n"
    inputs = kept.metadata.ddp_book_execution.inputs
    assert set(inputs) == {"code cells", "source files", "python", "packages", "cpu", "cores", "environment"}
    assert inputs["environment"]["OMP_NUM_THREADS"] == os.environ["OMP_NUM_THREADS"]
    assert not (source.parent / "out" / "executed" / "broken.ipynb").exists()  # failed: nothing to compare


def test_a_cell_tagged_measures_time_runs_with_no_other_cell_beside_it(book):
    source, _ = book
    start, end = map(float, (source / "timed.times").read_text().split())
    busy = [float(line) for line in (source / "busy.times").read_text().split()]
    beside = [t for t in busy if start <= t <= end]
    assert beside == [], f"the other notebook ran {len(beside)} times during the timing cell"
    assert busy[0] < start  # the busy cell was running when the timing cell asked for the machine


def test_a_notebook_that_fails_ahead_is_left_to_myst_nb(book):
    _, log = book
    assert "broken.ipynb: failed ahead (CellExecutionError)" in log, log
    assert "broken.ipynb: WARNING: Executing notebook failed" in log, log  # myst-nb ran it and reported it


def test_a_rebuild_executes_only_what_is_not_cached(book):
    source, _ = book
    log = build(source, "-E")  # every page read again
    for name in ("a_busy", "b_timed"):
        assert f"{name}.ipynb: executed ahead" not in log and f"{name}.ipynb: Executed" not in log, log
    assert "executing 1 notebooks ahead" in log and "broken.ipynb: failed ahead" in log, log
