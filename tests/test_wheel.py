"""The wheel and the sdist of ddp_lab hold what a notebook needs outside a checkout.

``python -m build`` makes both from a copy of what the build reads
(pyproject.toml, README.md, MANIFEST.in, ddp_lab/, labs/scripts/): the wheel
must carry every module of the package, the controls' JavaScript and the
book's scripts (``labs/scripts/`` as ``ddp_lab/book_scripts/``). Then the
wheel is installed into a fresh virtual environment, in a temporary folder
with no checkout beside it, and Chapter 11 (torchrun, ``train.py`` and
``print_env.py`` found by ``book_script``) runs there under nbval, as a
reader's ``pip install ddp-lab`` would run it.

The fresh environment sees this one's third-party packages (torch, Jupyter,
nbval) through a ``.pth`` line, so that nothing is downloaded or installed
but the wheel: installing torch and Jupyter anew would cost minutes. This
environment's own ddp_lab stays out of reach (see ``fresh_venv``): the test
checks that ``ddp_lab`` is imported from the fresh environment.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sysconfig
import tarfile
import venv
import zipfile
from pathlib import Path

import pytest
from plumbing import wheel_build  # tests/plumbing/: one home for the build

ROOT = Path(__file__).resolve().parents[1]
CHAPTER = ROOT / "book" / "part4_running" / "11_torchrun.ipynb"


def version() -> str:
    return re.search(r'^version = "([^"]+)"$', (ROOT / "pyproject.toml").read_text(), re.M).group(1)


def book_scripts() -> list[str]:
    """The files of labs/scripts/, as the wheel must carry them."""
    return sorted(path.name for path in (ROOT / "labs" / "scripts").iterdir()
                  if path.is_file() and not path.name.startswith((".", "_")) and path.suffix != ".pyc")


def build_dists(folder: Path) -> tuple[Path, Path]:
    """(wheel, sdist) of ddp_lab (tests/plumbing/wheel_build.py)."""
    return wheel_build.build(folder)


def fresh_venv(folder: Path) -> Path:
    """A new virtual environment that sees this one's packages, but not its ddp_lab; its python.

    The packages are seen through a folder of links to this environment's
    site-packages, less ddp_lab's own entries, named by a ``.pth`` line: pip
    there finds torch and the rest installed (as on Colab), and no ddp_lab.
    """
    venv.create(folder, with_pip=False, symlinks=True)
    python = folder / "bin" / "python"
    purelib = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    outer = folder / "outer-packages"
    outer.mkdir()
    for site in dict.fromkeys([sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]]):
        for entry in Path(site).iterdir():
            if not entry.name.lower().startswith(("ddp_lab", "ddp-lab", "__editable__")) \
                    and entry.suffix != ".pth" and not (outer / entry.name).exists():
                (outer / entry.name).symlink_to(entry)
    Path(purelib, "outer_packages.pth").write_text(f"{outer}\n")
    return python


def clean_env() -> dict:
    """This process's environment without what would point a child at the checkout or this pytest run."""
    # VIRTUAL_ENV too: IPython (so every kernel) adds the site-packages of the environment it
    # names to sys.path, .pth files and all, and this one's has the checkout's ddp_lab.
    env = {key: value for key, value in os.environ.items()
           if key not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV") and not key.startswith("PYTEST_")}
    env["PIP_NO_INDEX"] = "1"   # the wheel alone; nothing from an index
    return env


@pytest.fixture(autouse=True)
def no_rank_outlives_a_test():
    """The ranks here are the fresh environment's, stopped by its own nbval run (overrides tests/conftest.py)."""
    yield


@pytest.fixture(scope="module")
def dists(tmp_path_factory):
    return build_dists(tmp_path_factory.mktemp("dists"))


def test_the_wheel_holds_every_module_the_controls_and_the_book_scripts(dists):
    wheel, _ = dists
    assert wheel.name == f"ddp_lab-{version()}-py3-none-any.whl"
    names = set(zipfile.ZipFile(wheel).namelist())
    modules = {path.relative_to(ROOT).as_posix() for path in (ROOT / "ddp_lab").rglob("*.py")
               if "__pycache__" not in path.parts}
    assert modules - names == set(), "modules missing from the wheel (pyproject.toml's packages list)"
    widgets = {f"ddp_lab/widgets/js/{path.name}" for path in (ROOT / "ddp_lab" / "widgets" / "js").iterdir()
               if path.suffix in (".js", ".css")}
    assert widgets - names == set()
    with zipfile.ZipFile(wheel) as archive:
        for name in book_scripts():
            assert archive.read(f"ddp_lab/book_scripts/{name}") == (ROOT / "labs" / "scripts" / name).read_bytes()
        # the stored runs that Chapters 5, 6, 9, 12, 12b and 14 show, outside a checkout too
        stored = sorted((ROOT / "book" / "part4_running").glob("*_results/*.json"))
        assert stored
        for path in stored:
            kept = f"ddp_lab/stored_runs/{path.parent.name}/{path.name}"
            assert archive.read(kept) == path.read_bytes(), kept
    assert not [name for name in names if name.endswith(".pyc") or "__pycache__" in name]
    metadata = zipfile.ZipFile(wheel).read(f"ddp_lab-{version()}.dist-info/METADATA").decode()
    assert "Requires-Dist: torch<2.16,>=2.11" in metadata


def test_the_sdist_carries_the_scripts_and_the_changelog_and_no_tests(dists):
    _, sdist = dists
    top = f"ddp_lab-{version()}"
    names = set(tarfile.open(sdist).getnames())
    assert {f"{top}/labs/scripts/{name}" for name in book_scripts()} <= names
    assert f"{top}/pyproject.toml" in names and f"{top}/CHANGELOG.md" in names
    assert not [name for name in names if name.startswith(f"{top}/tests/")]


def test_chapter_11_runs_from_the_installed_wheel_in_a_fresh_venv(dists, tmp_path):
    wheel, _ = dists
    python = fresh_venv(tmp_path / "venv")
    env = clean_env()
    env["PATH"] = f"{python.parent}{os.pathsep}{env.get('PATH', '')}"
    work = tmp_path / "reader"   # no checkout here, nor above
    work.mkdir()
    before = subprocess.run([python, "-c", "import ddp_lab"], cwd=work, env=env, capture_output=True, text=True)
    assert before.returncode != 0, "ddp_lab must not be importable in the fresh venv before the wheel is installed"
    # With its requirements checked against what the environment has (no index: PIP_NO_INDEX),
    # as on Colab: pip must find them all satisfied and install ddp-lab alone.
    install = subprocess.run([python, "-m", "pip", "install", "-q", str(wheel)],
                             cwd=work, env=env, capture_output=True, text=True, timeout=300)
    assert install.returncode == 0, install.stdout + install.stderr
    site = next((tmp_path / "venv" / "lib").glob("python3*/site-packages"))
    assert sorted(path.name for path in site.iterdir()) == \
        ["ddp_lab", f"ddp_lab-{version()}.dist-info", "outer_packages.pth"]
    probe = ("import json, ddp_lab\nfrom ddp_lab.cluster.scripts import book_script, script_names\n"
             "print(json.dumps({'file': ddp_lab.__file__, 'scripts': {n: str(book_script(n)) for n in script_names()}}))")
    found = subprocess.run([python, "-c", probe], cwd=work, env=env, capture_output=True, text=True, timeout=120)
    assert found.returncode == 0, found.stderr
    found = json.loads(found.stdout)
    assert Path(found["file"]).is_relative_to(tmp_path / "venv"), found["file"]
    assert sorted(found["scripts"]) == book_scripts()
    assert all(Path(path).is_relative_to(tmp_path / "venv") for path in found["scripts"].values()), found

    notebook = work / CHAPTER.name
    shutil.copy(CHAPTER, notebook)
    shutil.copy(ROOT / "tests" / "nbval_sanitize.cfg", work / "nbval_sanitize.cfg")
    run = subprocess.run([python, "-m", "pytest", "--nbval", notebook.name, "-p", "no:cacheprovider",
                          "--nbval-current-env", "--nbval-sanitize-with", "nbval_sanitize.cfg",
                          "--nbval-cell-timeout", "300", "-q", "-rA", "--tb=short"],
                         cwd=work, env=env, capture_output=True, text=True, timeout=900)
    print(run.stdout[-4000:])
    code_cells = sum(cell["cell_type"] == "code" for cell in json.loads(CHAPTER.read_text())["cells"])
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]
    assert f"{code_cells} passed" in run.stdout, run.stdout[-2000:]
