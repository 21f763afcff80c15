"""Every page says what it ran on: the record tools/execute_notebook.py writes, and the line book/_ext/ran_on.py shows."""

import json
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "book" / "_ext"))
sys.path.insert(0, str(ROOT / "tools"))

import execute_notebook  # noqa: E402
import ran_on  # noqa: E402

NOTEBOOKS = sorted(path for folder in ("book", "labs") for path in (ROOT / folder).rglob("*.ipynb")
                   if ".ipynb_checkpoints" not in path.parts and "_build" not in path.parts)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[str(p.relative_to(ROOT)) for p in NOTEBOOKS])
def test_every_notebook_records_what_it_ran_on(path):
    record = ran_on.read_record(path)
    assert record is not None, (f"{path.relative_to(ROOT)} does not say what its outputs ran on: execute it with "
                                f"python tools/execute_notebook.py {path.relative_to(ROOT)}")
    assert re.fullmatch(r"\d+\.\d+\.\d+\S*", record["torch"]), record
    assert re.fullmatch(r"3\.\d+\.\d+", record["python"]), record
    assert re.fullmatch(r"\d{4}-\d\d-\d\d", record["date"]), record
    assert isinstance(record["cores"], int) and record["cores"] >= 1, record
    assert record["cpu"].strip(), record


def test_the_line_a_page_shows():
    record = {"torch": "2.13.0", "python": "3.11.9", "cpu": "AMD EPYC 7B13", "cores": 2, "date": "2026-11-28"}
    assert ran_on.stamp_text(record) == \
        "Outputs on this page: torch 2.13.0, Python 3.11, AMD EPYC 7B13 (2 cores), 2026-11-28"
    assert ran_on.stamp_text({**record, "cores": 1}).endswith("(1 core), 2026-11-28")


def test_a_notebook_without_a_record_or_a_page_that_is_no_notebook_has_none(tmp_path):
    bare = tmp_path / "bare.ipynb"
    nbformat.write(nbformat.v4.new_notebook(), bare)
    assert ran_on.read_record(bare) is None
    page = tmp_path / "page.md"
    page.write_text("# A page\n")
    assert ran_on.read_record(page) is None


def test_the_tool_records_what_the_kernel_imported(tmp_path):
    path = tmp_path / "tiny.ipynb"
    nb = nbformat.v4.new_notebook(metadata={"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                           "language": "python"}})
    nb.cells = [nbformat.v4.new_markdown_cell("# Tiny"), nbformat.v4.new_code_cell("print(6 * 7)")]
    nbformat.write(nb, path)
    result = subprocess.run([sys.executable, str(ROOT / "tools" / "execute_notebook.py"), str(path)],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    done = nbformat.read(path, as_version=4)
    assert [cell.cell_type for cell in done.cells] == ["markdown", "code"]  # the probe is not left behind
    assert done.cells[1].outputs[0]["text"] == "42\n"
    record = done.metadata["ddp_book"]["ran_on"]
    assert record["torch"] == torch.__version__  # the kernel runs this environment's Python
    assert record["python"] == ".".join(map(str, sys.version_info[:3]))
    assert ran_on.read_record(path) == record
    assert "widgets" not in done.metadata or isinstance(done.metadata["widgets"], dict)


def test_a_failing_notebook_is_left_as_it_was(tmp_path):
    path = tmp_path / "broken.ipynb"
    nb = nbformat.v4.new_notebook(metadata={"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                           "language": "python"}})
    nb.cells = [nbformat.v4.new_code_cell("raise ValueError('on purpose')")]
    nbformat.write(nb, path)
    before = path.read_text()
    result = subprocess.run([sys.executable, str(ROOT / "tools" / "execute_notebook.py"), str(path)],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 1
    assert "FAILED, left unchanged" in result.stderr and "on purpose" in result.stderr
    assert path.read_text() == before


def test_the_tool_refuses_what_is_not_a_notebook(tmp_path):
    with pytest.raises(ValueError, match=r"not a notebook: give \.ipynb files"):
        execute_notebook.execute(tmp_path / "notes.md")
    with pytest.raises(FileNotFoundError, match="no such notebook"):
        execute_notebook.execute(tmp_path / "missing.ipynb")


def test_the_built_page_shows_the_line(tmp_path):
    """A small Sphinx project with MyST-NB and the extension, as the book's build uses them."""
    source = tmp_path / "src"
    source.mkdir()
    (source / "conf.py").write_text(
        "import sys\n"
        f"sys.path.insert(0, {str(ROOT / 'book' / '_ext')!r})\n"
        "extensions = ['myst_nb', 'ran_on']\n"
        "nb_execution_mode = 'off'\n"
        "exclude_patterns = ['_build']\n")
    nb = nbformat.v4.new_notebook(metadata={"language_info": {"name": "python"}})
    nb.cells = [nbformat.v4.new_markdown_cell("# Stamped\n\nText.\n\n```{toctree}\npage\n```"),
                nbformat.v4.new_code_cell("1")]
    nb.metadata["ddp_book"] = {"ran_on": {"torch": "2.13.0", "python": "3.11.9", "cpu": "Test CPU",
                                          "cores": 4, "date": "2026-11-28"}}
    nbformat.write(nb, source / "index.ipynb")
    plain = nbformat.v4.new_notebook()
    plain.cells = [nbformat.v4.new_markdown_cell("# Not stamped")]
    nbformat.write(plain, source / "plain.ipynb")
    (source / "page.md").write_text("# A page\n\n```{toctree}\nplain\n```\n")
    out = tmp_path / "html"
    result = subprocess.run([sys.executable, "-m", "sphinx", "-W", "-q", "-b", "html", str(source), str(out)],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    page = (out / "index.html").read_text()
    line = "Outputs on this page: torch 2.13.0, Python 3.11, Test CPU (4 cores), 2026-11-28"
    assert f'<p class="ran-on">{line}</p>' in page
    assert page.index("Stamped") < page.index(line) < page.index("Text.")  # under the title
    assert "Outputs on this page" not in (out / "plain.html").read_text()
    assert "Outputs on this page" not in (out / "page.html").read_text()


def test_the_record_is_plain_json_in_the_notebook():
    path = ROOT / "book" / "part4_running" / "12_multi_node.ipynb"
    metadata = json.loads(path.read_text())["metadata"]
    assert set(metadata["ddp_book"]["ran_on"]) == set(ran_on.KEYS)
