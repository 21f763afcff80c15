"""Every ``ddp_lab`` name the prose cites exists.

The book's text names modules, functions and files of the companion package
in code (``ddp_lab.cluster.slurm.expand_hostlist``,
``ddp_lab/collectives/ring.py``). When the package is reorganised, a
moved module or a renamed function leaves the text pointing at nothing, and
no notebook cell fails: only a reader who looks finds out. This test reads
the markdown cells of every notebook under ``book/`` and ``labs/``,
``book/intro.md`` and ``README.md``, takes every ``ddp_lab.a.b.c`` name and
every ``ddp_lab/a/b.py`` path written in code (inline code and code
blocks), and resolves each: a dotted name by importing the longest prefix
that is a module (each module once) and looking the rest up as attributes;
a path by its existence in the checkout. It also follows ``from ddp_lab.x
import a, b`` in code blocks.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Names the prose cites as gone, on purpose (README.md: "earlier versions had
# `ddp_lab.Ranks` and a `%%ddp` magic"). They must stay gone; nothing else the
# prose cites may be missing.
REMOVED = {"ddp_lab.Ranks"}

# A fenced code block (indented too: the answers of the exercises are list items).
FENCE = re.compile(r"^[ \t]*(`{3,}|~{3,})[^\n]*\n(.*?)^[ \t]*\1[`~]*[ \t]*$", re.M | re.S)
# An inline code span: a run of backticks, then anything up to the same run,
# across line breaks but not across a blank line (CommonMark's rule).
SPAN = re.compile(r"(?<!`)(`+)(?!`)((?:(?!\n[ \t]*\n).)+?)(?<!`)\1(?!`)", re.S)
DOTTED = re.compile(r"(?<![\w./-])ddp_lab(?:\.[A-Za-z_]\w*)+")
PATH = re.compile(r"(?<![\w./-])ddp_lab/[\w./-]*")
FROM_IMPORT = re.compile(r"^[ \t]*from[ \t]+(ddp_lab(?:\.\w+)*)[ \t]+import[ \t]+([\w, \t]+)", re.M)


def sources() -> list[Path]:
    notebooks = sorted(p for folder in ("book", "labs") for p in (ROOT / folder).rglob("*.ipynb")
                       if ".ipynb_checkpoints" not in p.parts)
    return [*notebooks, ROOT / "book" / "intro.md", ROOT / "README.md"]


def markdown_texts(path: Path) -> list[tuple[str, str]]:
    """(where, text) of each markdown part of ``path``: a notebook's markdown cells, or the whole file."""
    if path.suffix != ".ipynb":
        return [(path.relative_to(ROOT).as_posix(), path.read_text(encoding="utf-8"))]
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    where = path.relative_to(ROOT).as_posix()
    return [(f"{where} cell {index}", "".join(cell["source"]))
            for index, cell in enumerate(cells) if cell["cell_type"] == "markdown"]


def cited_names(text: str) -> list[str]:
    """The ``ddp_lab`` names and paths ``text`` writes in code, in order, each once."""
    code = [block.group(2) for block in FENCE.finditer(text)]
    code += [span.group(2) for span in SPAN.finditer(FENCE.sub("", text))]
    names = []
    for piece in code:
        names += DOTTED.findall(piece)
        names += [path.rstrip(".") for path in PATH.findall(piece)]
        for module, imported in FROM_IMPORT.findall(piece):
            names += [f"{module}.{name.split()[0]}" for name in imported.split(",") if name.strip()]
    return list(dict.fromkeys(names))


@functools.cache
def _import(module: str):
    return importlib.import_module(module)


@functools.cache
def _is_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


@functools.cache
def why_unresolved(name: str) -> str | None:
    """None when ``name`` (``ddp_lab.a.b`` or ``ddp_lab/a/b.py``) exists, else what is missing."""
    if "/" in name:
        return None if (ROOT / name).exists() else f"no file or folder {name} in the checkout"
    parts = name.split(".")
    found, value = parts[0], _import(parts[0])
    for part in parts[1:]:
        candidate = f"{found}.{part}"
        if hasattr(value, "__path__") and _is_module(candidate):  # a package's submodule
            value = _import(candidate)
        else:
            try:
                value = getattr(value, part)
            except AttributeError:
                return f"{found} has no attribute or submodule {part!r}"
        found = candidate
    return None


CITATIONS = [(path.relative_to(ROOT).as_posix(), where, name)
             for path in sources() for where, text in markdown_texts(path) for name in cited_names(text)]


def test_the_prose_cites_names_and_they_are_found():
    cited = {name for _, _, name in CITATIONS}
    assert len(cited) > 40, f"only {len(cited)} ddp_lab names found in the prose: is the scan broken?"
    # one of each kind: a function, a module's function, a path, a name split over two lines of a span
    assert {"ddp_lab.launch", "ddp_lab.cluster.slurm.expand_hostlist", "ddp_lab/collectives/ring.py",
            "ddp_lab.cluster.measure"} <= cited


@pytest.mark.parametrize("source", sorted({source for source, _, _ in CITATIONS}))
def test_every_ddp_lab_name_the_prose_cites_exists(source):
    missing = [f"{where}: `{name}`: {why_unresolved(name)}" for path, where, name in CITATIONS
               if path == source and name not in REMOVED and why_unresolved(name)]
    assert not missing, f"{source} cites ddp_lab names that do not exist:\n" + "\n".join(missing)


@pytest.mark.parametrize("name", sorted(REMOVED))
def test_names_cited_as_removed_are_gone(name):
    assert why_unresolved(name), f"{name} exists again: drop it from REMOVED, or the text that says it is gone"


def test_the_scan_catches_wrong_names():
    text = ("Run `ddp_lab.ring.ring_all_reduce` (see `ddp_lab/ring.py`), then `python -m\n"
            "ddp_lab.cluster.nowhere --out x` and ``ddp_lab.collectives.ring.no_such_function``.\n\n"
            "```python\nfrom ddp_lab.collectives.ring import ring_all_reduce, missing_name\n```\n"
            "Not in code: ddp_lab.not_cited. Good: `ddp_lab.launch(fn, 2)`, `ddp_lab/launcher/`.\n")
    names = cited_names(text)
    assert "ddp_lab.not_cited" not in names
    assert [name for name in names if why_unresolved(name)] == [
        "ddp_lab.collectives.ring.missing_name", "ddp_lab.ring.ring_all_reduce", "ddp_lab/ring.py",
        "ddp_lab.cluster.nowhere", "ddp_lab.collectives.ring.no_such_function"]
    assert why_unresolved("ddp_lab.collectives.ring.ring_all_reduce") is None
    assert why_unresolved("ddp_lab.launch") is None
    assert why_unresolved("ddp_lab/launcher") is None
