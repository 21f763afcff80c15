"""Every notebook of the book can be opened on Colab and is listed in the TOC."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]

# The first cell of every notebook: installs ddp_lab on Colab, does nothing elsewhere
# (tools/set_repository.py writes it from _config.yml and pyproject.toml).
sys.path.insert(0, str(ROOT / "tools"))
from set_repository import install_cell, version  # noqa: E402

COLAB_CELL = install_cell(version())
HIDDEN_INPUT_TAGS = {"remove-input", "hide-input", "remove-cell"}

NOTEBOOKS = sorted(
    path.relative_to(ROOT).as_posix()
    for folder in ("book", "labs")
    for path in (ROOT / folder).rglob("*.ipynb")
    if ".ipynb_checkpoints" not in path.parts
)


def toc_files() -> set[str]:
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    files = {toc["root"]}

    def walk(entries):
        for entry in entries:
            files.add(entry.get("file"))
            walk(entry.get("sections", []))
            walk(entry.get("chapters", []))

    walk(toc.get("parts", []))
    walk(toc.get("chapters", []))
    return files - {None}


def test_there_are_notebooks():
    assert NOTEBOOKS, "no notebooks found under book/ and labs/"


@pytest.mark.parametrize("notebook", NOTEBOOKS)
def test_notebook_starts_with_the_colab_cell(notebook):
    cells = json.loads((ROOT / notebook).read_text())["cells"]
    first = cells[0]
    source = "".join(first["source"])
    assert first["cell_type"] == "code" and source.strip() == COLAB_CELL, (
        f"{notebook} must start with this code cell:\n{COLAB_CELL}\n\nit starts with:\n{source}"
    )
    tags = set(first.get("metadata", {}).get("tags", []))
    assert tags & HIDDEN_INPUT_TAGS, f"{notebook}: tag the Colab cell 'remove-input'"


@pytest.mark.parametrize("notebook", NOTEBOOKS)
def test_notebook_is_in_the_toc(notebook):
    # only_build_toc_files: a notebook missing from _toc.yml would silently not be built
    assert notebook.removesuffix(".ipynb") in toc_files(), f"add {notebook} to _toc.yml"


def test_every_toc_entry_exists():
    missing = [f for f in sorted(toc_files())
               if not any((ROOT / f).with_suffix(s).exists() for s in (".md", ".ipynb"))]
    assert not missing, f"_toc.yml names files that do not exist: {missing}"


# An absolute path of the machine that ran a notebook (its checkout, a
# temporary folder, a home folder), or a frame of the launcher: a page must
# show the reader's code and the same text on every machine.
MACHINE_PATH = re.compile(r"(?<![\w.~<>-])/(?:tmp|home|root|work|Users|var/folders)/[\w.-]|"
                          + re.escape(str(ROOT)) + r"|ddp_lab/launcher/")


def output_texts(cell):
    for output in cell.get("outputs", []):
        yield "".join(output.get("text", ""))
        yield "".join(output.get("data", {}).get("text/plain", ""))
        yield "\n".join(output.get("traceback", []))


@pytest.mark.parametrize("notebook", NOTEBOOKS)
def test_no_output_shows_a_path_of_the_machine_or_a_launcher_frame(notebook):
    cells = json.loads((ROOT / notebook).read_text())["cells"]
    found = [(number, match.group(0)) for number, cell in enumerate(c for c in cells if c["cell_type"] == "code")
             for text in output_texts(cell) for match in MACHINE_PATH.finditer(text)]
    assert not found, f"{notebook}: outputs show machine paths or launcher frames (code cell, text): {found[:5]}"
