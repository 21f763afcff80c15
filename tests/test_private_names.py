"""The private-API list, checked the other way: every private name of another library that
the package, the notebooks, the scripts, the tools or the tests use is in it (issue 47).

``tests/test_private_apis.py`` checks that each entry of ``ddp_lab/private_apis.py`` still
resolves and is still used where it says. This file checks that nothing is missing from
it: it reads every Python file and every notebook code cell with ``ast``, and collects

- imports of a module or name with a leading underscore (``from torch.utils._python_dispatch
  import TorchDispatchMode``, ``from multiprocessing import _x``), and
- attribute reads and writes of a name with a single leading underscore (``dist._foo``,
  ``model._forward_pre_hooks``), except on ``self`` and ``cls``,

then drops the private names this project defines itself (functions, classes, variables,
attributes, keyword arguments), since those are its own business. Each name left must be
the name of an entry of ``PRIVATE_APIS``, or be in :data:`NOT_PRIVATE` below, with the
reason it is left out. A new use of a private API then fails here, naming the file and
line, until it is listed (and so guarded by ``test_private_apis.py``).
"""

import ast
import json
import re
from collections import defaultdict
from pathlib import Path

from ddp_lab.private_apis import PRIVATE_APIS

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ["ddp_lab", "tests", "tools", "labs", "book", "conftest.py"]
SKIP = {"_build", "node_modules", ".ipynb_checkpoints", "__pycache__"}
# The guard of the list reads inside the listed APIs to check their behaviour (what _World.pg_map
# reads, what a config holds): its own uses are the list's, not the book's.
GUARDS = {"tests/test_private_apis.py", "tests/test_private_names.py"}

# Names with a leading underscore that are no private API, each with the reason.
NOT_PRIVATE = {
    "_exit": "os._exit: documented in the os module (process exit without cleanup)",
    "_getframe": "sys._getframe: documented in the sys module (CPython implementation detail, stable since 2.1)",
    "_current_frames": "sys._current_frames: documented in the sys module",
    "_repr_html_": "IPython's documented display protocol (rich display: _repr_html_)",
    "_repr_mimebundle_": "IPython's documented display protocol (_repr_mimebundle_)",
    "_esm": "anywidget's documented attribute: the widget's ES module (anywidget.dev)",
    "_": "the conventional name of an unused value",
}


def python_sources():
    """(path, place, source) of every .py file and of every notebook code cell (place: ``cell N``)."""
    for top in SOURCES:
        base = ROOT / top
        paths = [base] if base.is_file() else sorted(base.rglob("*"))
        for path in paths:
            if SKIP & set(path.relative_to(ROOT).parts) or path.relative_to(ROOT).as_posix() in GUARDS:
                continue
            if path.suffix == ".py":
                yield path, "line", path.read_text()
            elif path.suffix == ".ipynb":
                for index, cell in enumerate(json.loads(path.read_text())["cells"]):
                    if cell["cell_type"] == "code":
                        # IPython's ! and % lines are not Python: blank them, keeping the line count
                        source = re.sub(r"(?m)^\s*[!%].*$", "", "".join(cell["source"]))
                        yield path, f"cell {index}, line", source


def private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


class Uses(ast.NodeVisitor):
    """Private names used (``uses``) and defined (``defined``) by one source."""

    def __init__(self):
        self.uses = []  # (name, line)
        self.defined = set()

    def visit_Import(self, node):
        for alias in node.names:
            for part in alias.name.split("."):
                if private(part):
                    self.uses.append((part, node.lineno))

    def visit_ImportFrom(self, node):
        module = node.module or ""
        if node.level == 0 and not module.startswith("ddp_lab"):
            for part in module.split("."):
                if private(part):
                    self.uses.append((part, node.lineno))
            for alias in node.names:
                if private(alias.name):
                    self.uses.append((alias.name, node.lineno))

    def visit_Attribute(self, node):
        owner = node.value
        if private(node.attr) and not (isinstance(owner, ast.Name) and owner.id in ("self", "cls")):
            self.uses.append((node.attr, node.lineno))
        if isinstance(node.ctx, ast.Store) and private(node.attr):
            self.defined.add(node.attr)
        self.generic_visit(node)

    def _define(self, name):
        if private(name):
            self.defined.add(name)

    def visit_FunctionDef(self, node):
        self._define(node.name)
        for argument in node.args.args + node.args.kwonlyargs + node.args.posonlyargs:
            self._define(argument.arg)
        self.generic_visit(node)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_ClassDef(self, node):
        self._define(node.name)
        self.generic_visit(node)

    def visit_Name(self, node):
        if isinstance(node.ctx, ast.Store):
            self._define(node.id)

    def visit_Attribute_store(self, node):  # pragma: no cover - folded into visit_Attribute
        pass

    def visit_Call(self, node):
        for keyword in node.keywords:  # dict(_x=1) or setattr-like builders
            if keyword.arg:
                self._define(keyword.arg)
        if (isinstance(node.func, ast.Name) and node.func.id == "setattr" and len(node.args) >= 2
                and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)):
            self._define(node.args[1].value)
        self.generic_visit(node)


def scan():
    uses, defined = defaultdict(list), set()
    for path, place, source in python_sources():
        visitor = Uses()
        visitor.visit(ast.parse(source, filename=str(path)))
        defined |= visitor.defined
        for name, line in visitor.uses:
            uses[name].append((path.relative_to(ROOT).as_posix(), f"{place} {line}"))
    return uses, defined


def listed_files():
    """{private name: the files the list says use it}: an entry's own name, and each private
    part of its path (``torch.utils._python_dispatch.TorchDispatchMode`` -> ``_python_dispatch``)."""
    files = defaultdict(set)
    for api in PRIVATE_APIS:
        for name in {api.name} | {part for part in api.path.split(".") if private(part)}:
            files[name] |= set(api.used_by)
    return files


def test_every_private_name_of_another_library_is_listed_with_the_file_that_uses_it():
    uses, defined = scan()
    listed = listed_files()
    missing = defaultdict(list)
    for name, where in uses.items():
        if name in defined or name in NOT_PRIVATE:
            continue
        for file, place in where:
            if file not in listed.get(name, ()):
                missing[name].append(f"{file} ({place})")
    assert not missing, "private names used where ddp_lab/private_apis.py does not say:\n" + "\n".join(
        f"  {name}: {', '.join(where[:4])}" for name, where in sorted(missing.items()))


def test_the_scan_sees_a_private_use():
    """The scanner itself: an unlisted private attribute of an imported module is found."""
    visitor = Uses()
    visitor.visit(ast.parse("import torch\nx = torch.distributed._secret_thing(1)\nself._mine = 2\n"))
    assert ("_secret_thing", 2) in visitor.uses
    assert ("_mine", 3) not in visitor.uses and "_mine" in visitor.defined


def test_every_exception_is_still_used():
    uses, _ = scan()
    unused = sorted(set(NOT_PRIVATE) - set(uses) - {"_"})
    assert not unused, f"NOT_PRIVATE lists names nothing uses any more: {unused}"
