"""The repository's address lives in _config.yml, the version in pyproject.toml, and everything
follows them; the notebooks' install cell works as Colab runs it (tools/set_repository.py).

Colab is simulated: a fresh virtual environment that sees this environment's
packages (torch and the rest, as Colab has its own) but not ddp_lab, a
stand-in ``google.colab`` module, and pip pointed at a folder holding the
wheel this checkout builds instead of PyPI (``PIP_FIND_LINKS``, ``PIP_NO_INDEX``),
so that ``pip install ddp-lab==<version>`` finds the release as PyPI would serve it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from test_wheel import build_dists, clean_env, fresh_venv

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import set_repository  # noqa: E402

URL, VERSION = set_repository.repository_url(), set_repository.version()
CELL = set_repository.install_cell(VERSION)


def test_every_notebook_begins_with_the_install_cell_of_this_version():
    # Fails until `python tools/set_repository.py` has rewritten the notebooks.
    for path in set_repository.notebooks():
        first = json.loads(path.read_text())["cells"][0]
        assert "remove-input" in first["metadata"].get("tags", []), path
        assert "".join(first["source"]) == CELL, f"{path.relative_to(ROOT)}: run python tools/set_repository.py"


def test_everything_that_names_the_repository_follows_the_config():
    assert set_repository.differences(URL, VERSION) == [], "run: python tools/set_repository.py"
    assert set_repository.main(["--check"]) == 0


def test_the_cell_installs_the_pypi_name_at_pyprojects_version():
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert f'name = "{set_repository.DISTRIBUTION}"' in pyproject
    assert f'"{set_repository.DISTRIBUTION}=={VERSION}"' in CELL
    assert "git+" not in CELL and "github" not in CELL


# ------------------------------------------------------------------ the tool, on a copy


def copy_of_the_book(folder: Path) -> Path:
    """What tools/set_repository.py reads and writes, copied: the notebooks, README, intro, config, pyproject."""
    for path in [*set_repository.notebooks(), ROOT / "README.md", ROOT / "book" / "intro.md",
                 ROOT / "_config.yml", ROOT / "pyproject.toml"]:
        target = folder / path.relative_to(ROOT)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)
    return folder


def snapshot(root: Path) -> dict:
    return {path.relative_to(root): path.read_bytes() for path in sorted(root.rglob("*")) if path.is_file()}


def test_the_tool_rewrites_every_install_cell_and_nothing_else(tmp_path, capsys):
    root = copy_of_the_book(tmp_path / "book")
    before = snapshot(root)
    assert set_repository.main([], root=root) == 0
    after = snapshot(root)
    notebooks = [path.relative_to(root) for path in set_repository.notebooks(root)]
    assert len(notebooks) >= 20
    for name in notebooks:
        old, new = json.loads(before[name]), json.loads(after[name])
        assert "".join(new["cells"][0]["source"]) == CELL
        assert new["cells"][0]["metadata"] == old["cells"][0]["metadata"]   # the remove-input tag kept
        old["cells"][0]["source"] = new["cells"][0]["source"] = []
        assert old == new, f"{name}: only the install cell's source may change"
        # written as nbformat writes (one-space indent, keys in their order, a final newline), as the
        # notebooks already are: a rewrite changes no byte outside the install cell's source
        for text in (before[name].decode(), after[name].decode()):
            assert text == json.dumps(json.loads(text), indent=1, ensure_ascii=False) + "\n", name
    others = set(before) - set(notebooks)
    assert {name for name in others if before[name] != after[name]} <= {Path("README.md"), Path("book/intro.md")}
    assert set_repository.main(["--check"], root=root) == 0
    assert set_repository.main([], root=root) == 0 and snapshot(root) == after   # a second run changes nothing


def test_a_fork_changes_the_config_the_readme_and_the_intro(tmp_path):
    root = copy_of_the_book(tmp_path / "book")
    assert set_repository.main(["https://github.com/me-2/ddp.book_fork"], root=root) == 0
    assert set_repository.repository_url(root) == "https://github.com/me-2/ddp.book_fork"
    assert "https://colab.research.google.com/github/me-2/ddp.book_fork/blob/" in (root / "README.md").read_text()
    assert "[repository](https://github.com/me-2/ddp.book_fork)" in (root / "book" / "intro.md").read_text()
    assert 'Homepage = "https://github.com/me-2/ddp.book_fork"' in (root / "pyproject.toml").read_text()
    assert 'Changelog = "https://github.com/me-2/ddp.book_fork/blob/main/CHANGELOG.md"' in \
        (root / "pyproject.toml").read_text()
    assert set_repository.main(["--check"], root=root) == 0


BAD_ADDRESSES = {
    "https://github.com/../..": "the owner '..' in 'https://github.com/../..' is not a GitHub account name",
    "https://github.com/me/fork.git": "'https://github.com/me/fork.git' is a clone address; give the "
                                      "repository's own, https://github.com/me/fork",
    "https://github.com/ｍｅ/book": "the owner 'ｍｅ' in 'https://github.com/ｍｅ/book' is not a GitHub account name",
    "https://github.com/mé/book": "the owner 'mé'",
    "https://github.com/me/bоok": "the repository name 'bоok'",   # a Cyrillic o
    "https://github.com/-me/book": "the owner '-me'",
    "https://github.com/me--too/book": "the owner 'me--too'",
    "https://github.com/" + "a" * 40 + "/book": "is not a GitHub account name",
    "https://github.com/me/..": "the repository name '..'",
    "https://github.com/me/a b": "the repository name 'a b'",
    "https://github.com/me/book/": "no trailing '/'",
    "https://github.com/me/book/tree/main": "no further path",
    "https://github.com/me": "must be exactly https://github.com/OWNER/NAME",
    "http://github.com/me/book": "must be a GitHub address",
    "https://gitlab.com/me/book": "must be a GitHub address, https://github.com/OWNER/NAME (Colab opens "
                                  "notebooks from GitHub), got 'https://gitlab.com/me/book'",
    "https://github.com.evil.example/me/book": "must be a GitHub address",
    "https://github.com/me/book?tab=readme": "the repository name 'book?tab=readme'",
}


@pytest.mark.parametrize("url", BAD_ADDRESSES)
def test_a_bad_address_is_refused_naming_it_before_anything_is_written(url, tmp_path, capsys):
    with pytest.raises(ValueError) as refused:
        set_repository.check_github_url(url)
    assert BAD_ADDRESSES[url] in str(refused.value)
    root = copy_of_the_book(tmp_path / "book")
    before = snapshot(root)
    with pytest.raises(SystemExit) as stopped:
        set_repository.main([url], root=root)
    assert stopped.value.code == 2
    assert BAD_ADDRESSES[url] in capsys.readouterr().err
    assert snapshot(root) == before


def test_a_bad_address_already_in_the_config_is_refused_too(tmp_path, capsys):
    root = copy_of_the_book(tmp_path / "book")
    config = root / "_config.yml"
    config.write_text(config.read_text().replace(f"  url: {URL}", "  url: https://github.com/me/fork.git"))
    before = snapshot(root)
    with pytest.raises(SystemExit):
        set_repository.main([], root=root)
    error = capsys.readouterr().err
    assert "is a clone address" in error and "(nothing was changed)" in error
    assert snapshot(root) == before


def test_good_addresses_are_accepted():
    for url in ("https://github.com/ddp-lab/ddp-book", "https://github.com/A1/x", "https://github.com/me/.github",
                "https://github.com/" + "a" * 39 + "/" + "b" * 100, "https://github.com/me/book.gitx"):
        set_repository.check_github_url(url)


# ------------------------------------------------------------------ the cell, run as Colab and others run it


@pytest.fixture(autouse=True)
def no_rank_outlives_a_test():
    """No rank is started here (overrides tests/conftest.py's check)."""
    yield


@pytest.fixture(scope="module")
def colab(tmp_path_factory):
    """A fresh venv seeing this one's packages but not ddp_lab, a stand-in google.colab, the wheel in a folder."""
    folder = tmp_path_factory.mktemp("colab")
    python = fresh_venv(folder / "venv")
    stand_in = folder / "stand_in" / "google" / "colab"
    stand_in.mkdir(parents=True)
    (stand_in.parent / "__init__.py").write_text("")
    (stand_in / "__init__.py").write_text('"""Stands in for Colab\'s module: the install cell looks for it."""\n')
    wheel, _ = build_dists(folder / "build")
    index = folder / "index"   # what PyPI would serve for ddp-lab
    index.mkdir()
    shutil.copy(wheel, index)
    return python, folder


def run_cell(python, folder, source, cwd, on_colab=True, index=None):
    """The first cell's code, run by IPython as a kernel would; on Colab, google.colab imported first."""
    script = folder / "cell.py"
    script.write_text(source)
    runner = ("import sys\n" + ("import google.colab  # Colab's kernel has it imported\n" if on_colab else "") +
              "from IPython.core.interactiveshell import InteractiveShell\n"
              f"result = InteractiveShell.instance().run_cell(open({str(script)!r}).read())\n"
              "sys.exit(0 if result.success else 3)\n")
    env = {**clean_env(), "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_FIND_LINKS": str(index or folder / "none")}
    if on_colab:
        env["PYTHONPATH"] = str(folder / "stand_in")
    return subprocess.run([python, "-c", runner], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def test_on_colab_the_cell_installs_this_version_from_the_index_and_ddp_lab_imports(colab, tmp_path):
    python, folder = colab
    before = subprocess.run([python, "-c", "import ddp_lab"], cwd=tmp_path, capture_output=True, text=True)
    assert before.returncode != 0, "ddp_lab must not be importable before the cell runs"
    done = run_cell(python, folder, CELL, cwd=tmp_path, index=folder / "index")
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip() == "", done.stdout
    after = subprocess.run([python, "-c", "import ddp_lab, ddp_lab.launcher; from importlib import metadata; "
                            "print(ddp_lab.__file__, metadata.version('ddp-lab'))"],
                           cwd=tmp_path, capture_output=True, text=True)
    assert after.returncode == 0, after.stderr
    where, installed = after.stdout.split()
    assert Path(where).is_relative_to(folder / "venv") and installed == VERSION
    # pip installed ddp-lab alone: every requirement was met by what the runtime had
    site = next((folder / "venv" / "lib").glob("python3*/site-packages"))
    assert sorted(path.name for path in site.iterdir()) == \
        ["ddp_lab", f"ddp_lab-{VERSION}.dist-info", "outer_packages.pth"]


def test_on_colab_a_failed_install_stops_the_notebook_with_one_line(colab, tmp_path):
    python, folder = colab
    done = run_cell(python, folder, CELL.replace(f"=={VERSION}", "==0.0.0"), cwd=tmp_path, index=tmp_path)
    assert done.returncode == 3, "the cell must fail, so that Run All stops there"
    shown = [line for line in done.stdout.splitlines() if line.strip()]
    assert shown == ["ddp-lab==0.0.0 could not be installed (pip says why above): connect the runtime to the "
                     "internet, or run the notebook in a clone of the book's repository"], done.stdout


def test_elsewhere_a_missing_ddp_lab_is_one_line_saying_how_to_install_it(colab, tmp_path):
    python, folder = colab
    fresh = fresh_venv(tmp_path / "venv")   # no ddp_lab, and not Colab
    done = run_cell(fresh, folder, CELL, cwd=tmp_path, on_colab=False)
    assert done.returncode == 3
    shown = [line for line in done.stdout.splitlines() if line.strip()]
    assert shown == [f"ddp_lab is not installed for this kernel's Python ({fresh}): pip install "
                     f"ddp-lab=={VERSION}, or pip install -e . in a clone of the book's repository"], done.stdout
    assert "ModuleNotFoundError" not in done.stdout + done.stderr


def test_elsewhere_with_ddp_lab_installed_the_cell_does_nothing(tmp_path):
    script = tmp_path / "cell.py"
    script.write_text(CELL)
    runner = ("import sys\nfrom IPython.core.interactiveshell import InteractiveShell\n"
              f"result = InteractiveShell.instance().run_cell(open({str(script)!r}).read())\n"
              "sys.exit(0 if result.success else 3)\n")
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    done = subprocess.run([sys.executable, "-c", runner], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip() == "", done.stdout
