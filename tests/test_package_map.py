"""The two maps of the package name every folder and module of ddp_lab, and nothing else.

A reader finds their way into ``ddp_lab`` through one of two maps: the
README's (a ``text`` block under "The package, folder by folder") and the
docstring of ``ddp_lab/__init__.py`` (``help(ddp_lab)``). A folder added
without a line in both, or a module moved away while a map still names it,
fails here. The top level also stays small: a dozen modules at most, the
rest in folders, one folder per subject of the book.
"""

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "ddp_lab"
MAX_TOP_LEVEL_MODULES = 12  # .py files directly in ddp_lab/, __init__.py included, __main__.py not

FOLDERS = sorted(f"{p.parent.name}/" for p in PACKAGE.glob("*/__init__.py"))
MODULES = sorted(p.stem for p in PACKAGE.glob("*.py") if p.name != "__init__.py")


def readme_map() -> set[str]:
    """The names the README's map lists: the first column of each line of its ``text`` block.

    An entry line is indented by two spaces; its names (``launcher/``,
    ``topology, devices``, ``draw/ widgets/``) stand before the first run of
    two or more spaces, the description after it. Deeper lines continue a
    description.
    """
    text = (ROOT / "README.md").read_text()
    found = re.search(r"^```text\nddp_lab/\n(.*?)^```$", text, re.S | re.M)
    assert found, "README.md: no ```text block starting with ddp_lab/ (the package map)"
    names = set()
    for line in found.group(1).splitlines():
        if re.match(r"  \S", line):
            head = re.split(r"\s{2,}", line.strip(), maxsplit=1)[0]
            names.update(name for name in re.split(r"[,\s]+", head) if name)
    return names


def docstring_map() -> set[str]:
    """The names the package docstring's map lists: each ````name```` or ````name/```` followed by ``:`` or ``,``."""
    doc = ast.get_docstring(ast.parse((PACKAGE / "__init__.py").read_text()))
    start = doc.find("The package, folder by folder")
    assert start >= 0, "ddp_lab/__init__.py: its docstring has no 'The package, folder by folder' map"
    end = doc.find("\n\n", doc.find("\n- ", start))
    section = doc[start:] if end < 0 else doc[start:end]
    return set(re.findall(r"``([a-z_]+/?)``(?=[:,])", section))


MAPS = {"README.md": readme_map, "ddp_lab/__init__.py": docstring_map}


def test_the_maps_are_read():
    readme, docstring = readme_map(), docstring_map()
    assert {"launcher/", "collectives/", "topology"} <= readme
    assert {"launcher/", "collectives/", "topology"} <= docstring


@pytest.mark.parametrize("where", sorted(MAPS))
def test_every_folder_and_module_is_on_the_map(where):
    listed = MAPS[where]()
    missing = [name for name in FOLDERS + MODULES if name not in listed]
    assert not missing, f"{where}: its map of ddp_lab does not name {', '.join(missing)}"


@pytest.mark.parametrize("where", sorted(MAPS))
def test_the_map_names_nothing_that_is_gone(where):
    stale = sorted(MAPS[where]() - set(FOLDERS + MODULES))
    assert not stale, f"{where}: its map of ddp_lab names {', '.join(stale)}, which ddp_lab/ does not have"


def test_the_top_level_stays_small():
    modules = sorted(p.name for p in PACKAGE.glob("*.py") if p.name != "__main__.py")  # python -m ddp_lab
    assert len(modules) <= MAX_TOP_LEVEL_MODULES, (
        f"ddp_lab/ has {len(modules)} modules at its top level ({', '.join(modules)}): at most "
        f"{MAX_TOP_LEVEL_MODULES}; put the new one in the folder of its subject")
