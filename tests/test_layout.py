"""The package's layout holds: no import cycle, torch only where it is used,
in-rank code that never needs the launcher, a docstring naming its chapter.

The import graph is read from the source (``ast``), every ``import`` counted,
those inside functions too: a cycle through a lazy import is still a cycle.
"""

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "ddp_lab"

# Code that runs inside a rank: what a chapter shows must run unchanged under
# torchrun, so none of it may need ddp_lab's launcher.
IN_RANK_FOLDERS = ("collectives", "data_parallel", "model_parallel")
# Notebook-side helpers that live beside the algorithm they start.
STARTS_RANKS = {"ddp_lab.collectives.traced"}

# Imported by a Slurm task, or by a page that only draws or computes:
# none may cost the second that importing torch takes.
TORCH_FREE = ["ddp_lab", "ddp_lab.topology", "ddp_lab.cost", "ddp_lab.cost.links", "ddp_lab.cost.scaling",
              "ddp_lab.cost.published_scaling", "ddp_lab.memory",
              "ddp_lab.units", "ddp_lab.validate", "ddp_lab.host", "ddp_lab.cluster.slurm",
              "ddp_lab.model_parallel.pipeline", "ddp_lab.launcher", "ddp_lab.checks.memory_answer",
              "ddp_lab.checks.ranks", "ddp_lab.draw.layout", "ddp_lab.draw.memory",
              "ddp_lab.draw.parallelism", "ddp_lab.draw.timings", "ddp_lab.private_apis"]


def module_name(path):
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def imports_of(name):
    """The ddp_lab modules ``name`` imports, anywhere in its source."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1]
                                + ([node.module] if node.module else []))
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return {m for m in found if m in MODULES and m != name}


GRAPH = {name: imports_of(name) for name in MODULES}


def reachable(start):
    seen, todo = set(), [start]
    while todo:
        for nxt in GRAPH[todo.pop()]:
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def find_cycle():
    """One import cycle as a list of modules, or None."""
    state, stack = {}, []

    def visit(name):
        state[name] = "open"
        stack.append(name)
        for nxt in sorted(GRAPH[name]):
            if state.get(nxt) == "open":
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                cycle = visit(nxt)
                if cycle:
                    return cycle
        stack.pop()
        state[name] = "done"
        return None

    for name in sorted(MODULES):
        if name not in state:
            cycle = visit(name)
            if cycle:
                return cycle
    return None


def test_the_graph_is_read_from_real_imports():
    assert "ddp_lab.launcher.worker" in GRAPH["ddp_lab.launcher.worker_group"]
    assert "ddp_lab.cost.alpha_beta" in GRAPH["ddp_lab.cost.links"]


def test_no_import_cycle():
    cycle = find_cycle()
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_in_rank_code_never_imports_the_launcher():
    in_rank = [name for name in MODULES if name.split(".")[1:2] and name.split(".")[1] in IN_RANK_FOLDERS
               and name not in STARTS_RANKS]
    assert len(in_rank) > 10
    for name in in_rank:
        launcher = sorted(m for m in reachable(name) if m.startswith("ddp_lab.launcher"))
        assert not launcher, f"{name} runs inside a rank but imports {launcher}"


@pytest.mark.parametrize("module", TORCH_FREE)
def test_pure_modules_import_without_torch(module):
    code = (f"import sys, json, {module}\n"
            "print(json.dumps(sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.'))))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [], f"import {module} imported torch"


def test_import_ddp_lab_keeps_its_public_names_lazily():
    code = ("import sys, ddp_lab\n"
            "names = sorted(ddp_lab.__all__)\n"
            "assert 'torch' not in sys.modules\n"
            "assert all(callable(getattr(ddp_lab, n)) for n in names)\n"
            "print(ddp_lab.launch.__module__, ddp_lab.RankFailed.__module__, 'torch' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.stdout.split() == ["ddp_lab.launcher.api", "ddp_lab.launcher.errors", "True"], done.stderr
    with pytest.raises(AttributeError, match="has no attribute 'lunch'"):
        import ddp_lab

        ddp_lab.lunch


def test_the_root_conftest_needs_no_sphinx():
    code = ("import sys, runpy\n"
            "sys.modules['sphinx'] = None  # any import of sphinx now fails\n"
            f"runpy.run_path({str(ROOT / 'conftest.py')!r})\n"
            "print('ok')")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert done.stdout.strip() == "ok", done.stderr


def test_every_module_names_the_chapter_or_lab_that_uses_it():
    words = ("Chapter", "Lab ", "Labs", "Part ", "chapter", "lab ")
    missing = [name for name, path in MODULES.items()
               if not any(word in (ast.get_docstring(ast.parse(path.read_text())) or "") for word in words)]
    assert not missing, f"docstrings that name no chapter or lab: {missing}"
