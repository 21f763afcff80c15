"""book/_ext/execute_ahead.py: the listed notebooks run two at a time, into
myst-nb's cache, and a notebook that fails there is left to myst-nb.

A real Sphinx build of a small project with real kernels.
"""

import subprocess
import sys
import textwrap
from pathlib import Path

import nbformat

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


def notebook(folder, name, code):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(f"# {name}"),
                                          nbformat.v4.new_code_cell(code)])
    nb.metadata.kernelspec = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, folder / f"{name}.ipynb")


def build(folder, *options):
    (folder / "conf.py").write_text(textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(EXTENSIONS)!r})
        extensions = ["myst_nb", "execute_ahead"]
        nb_execution_mode = "cache"
        nb_execution_timeout = {WAIT + 30}
        execute_ahead_notebooks = ["first", "second", "broken"]
    """))
    (folder / "index.md").write_text("# Test\n\n```{toctree}\nfirst\nsecond\nbroken\nalone\n```\n")
    out = folder.parent / "out"  # outside the sources, so that Sphinx does not read the cache as pages
    run = subprocess.run([sys.executable, "-m", "sphinx", *options, "-b", "html", str(folder), str(out / "html")],
                         capture_output=True, text=True, timeout=300)
    return run.stdout + run.stderr


def test_listed_notebooks_run_side_by_side_into_the_cache_and_failures_are_left_to_myst_nb(tmp_path):
    source = tmp_path / "source"
    source.mkdir()
    notebook(source, "first", MEET.format(me="first", other="second", wait=WAIT))
    notebook(source, "second", MEET.format(me="second", other="first", wait=WAIT))
    notebook(source, "broken", "raise ValueError('on purpose')")
    notebook(source, "alone", "print('not listed')")

    log = build(source)

    assert "executing 3 notebooks ahead, 2 at a time" in log, log
    for name in ("first", "second"):
        assert f"{name}.ipynb: executed ahead" in log, log
        assert f"{name}.ipynb: Using cached notebook" in log, log  # myst-nb did not run it again
    assert "first met second" in (tmp_path / "out" / "html" / "first.html").read_text()
    assert "broken.ipynb: failed ahead (CellExecutionError)" in log, log
    assert "broken.ipynb: WARNING: Executing notebook failed" in log, log  # myst-nb ran it and reported it
    assert "alone.ipynb: executed ahead" not in log
    assert "alone.ipynb: Executed notebook" in log, log

    log = build(source, "-E")  # every page read again: only the notebook that failed runs again
    for name in ("first", "second", "alone"):
        assert f"{name}.ipynb: executed ahead" not in log and f"{name}.ipynb: Executed" not in log, log
    assert "broken.ipynb: failed ahead" in log, log
