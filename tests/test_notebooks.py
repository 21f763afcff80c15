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


# ---- outputs that depend on measured time -----------------------------------------------
#
# No output nbval compares may depend on measured time (issue 47): a cell tagged
# `measures-time` prints its times masked by tests/nbval_sanitize.cfg, its
# ratios as ×<ratio>, and draws the rest. A True or False it prints must be an
# invariant of the run, true by construction on any machine however busy; each
# is listed here with the reason it holds.
INVARIANT_VERDICTS = {
    "05_collectives": {
        "every rank left after the last one arrived": "a barrier returns only after every rank "
        "entered it; the times are read from one machine's monotonic clock"},
    "12b_scaling_limits": {
        "link: ": "compares the values of two all-reduces, not their times"},
    "15c_checkpointing_and_pipelines": {
        "each stage ran M forwards and M backwards": "counts of the slots each stage ran",
        "every slot started after its input had arrived": "a stage cannot start a micro-batch before "
        "receiving it; one clock",
        "1F1B held at most 2 and 1 micro-batches": "follows from each stage's order of work, which "
        "the schedule fixes"},
}


def sanitize(text: str) -> str:
    """``text`` after the rules of tests/nbval_sanitize.cfg, applied as nbval applies them."""
    lines = (ROOT / "tests" / "nbval_sanitize.cfg").read_text().splitlines()
    for regex, replace in zip(lines, lines[1:]):
        if regex.startswith("regex: ") and replace.startswith("replace: "):
            text = re.sub(regex.removeprefix("regex: "), replace.removeprefix("replace: "), text)
    return text


def timing_cells():
    for notebook in NOTEBOOKS:
        cells = json.loads((ROOT / notebook).read_text())["cells"]
        for index, cell in enumerate(cells):
            source = "".join(cell["source"])
            if ("measures-time" in cell["metadata"].get("tags", []) and "NBVAL_IGNORE_OUTPUT" not in source):
                text = "".join("".join(out.get("text", "")) for out in cell.get("outputs", []))
                yield Path(notebook).stem, index, sanitize(text)


def test_timing_cells_print_no_verdict_drawn_from_their_times():
    found = []
    for stem, index, text in timing_cells():
        allowed = INVARIANT_VERDICTS.get(stem, {})
        for line in text.splitlines():
            if re.search(r"\b(True|False)\b", line) and not any(line.startswith(start) for start in allowed):
                found.append(f"{stem} cell {index}: {line!r}")
    assert found == [], ("a timing cell prints a verdict drawn from measured times; print the ratio "
                         "(×<ratio> is masked) or draw it, or list the line in INVARIANT_VERDICTS "
                         "with why it holds on any machine:\n" + "\n".join(found))


def test_invariant_verdicts_are_still_printed():
    printed = {(stem, line) for stem, _, text in timing_cells() for line in text.splitlines()}
    for stem, starts in INVARIANT_VERDICTS.items():
        for start in starts:
            assert any(s == stem and line.startswith(start) for s, line in printed), (stem, start)


def test_the_sanitizer_masks_every_straggler_verdict():
    """find_straggler's verdicts come from measured times (chapter 13b, Lab 5b): each of its
    sentences is masked whole, wrapped or not, and the lines after it are kept."""
    from ddp_lab.debugging.stragglers import RankTimes, find_straggler

    even = [RankTimes(rank, 1.0, 0.1, 10) for rank in range(4)]
    verdicts = [find_straggler(even), find_straggler(even[:3] + [RankTimes(3, 2.0, 0.0, 10)]),
                find_straggler([RankTimes(0, 1.0, 0.0, 10)] + even[1:3] + [RankTimes(3, 2.0, 0.5, 10)])]
    for verdict in verdicts:
        for before, after in (("-> ", "\n\nrank 0: computing"), ("", "\n✓ all 3 answers correct")):
            masked = sanitize(f"{before}{verdict}{after}")
            assert masked == f"{before}<verdict from measured times>{after}", masked
