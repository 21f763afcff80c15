"""The repository's address lives in _config.yml, and everything follows it; the
notebooks' install cell works as Colab runs it (tools/set_repository.py).

Colab is simulated: a fresh virtual environment that sees this environment's
packages (torch and the rest, as Colab has its own) but not ddp_lab, a
stand-in ``google.colab`` module, and the install cell's own code with its
address pointed at a local clone of this repository, tagged as a release is.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import set_repository  # noqa: E402

URL, TAG = set_repository.repository_url(), f"v{set_repository.version()}"


def test_everything_that_names_the_repository_follows_the_config():
    assert set_repository.differences(URL, TAG) == [], "run: python tools/set_repository.py"
    assert set_repository.main(["--check"]) == 0


def test_a_non_github_address_is_refused_naming_it():
    with pytest.raises(ValueError, match="got 'https://gitlab.com/me/book'"):
        set_repository.check_github_url("https://gitlab.com/me/book")


@pytest.fixture(autouse=True)
def no_rank_outlives_a_test():
    """No rank is started here (overrides tests/conftest.py's check)."""
    yield


@pytest.fixture(scope="module")
def colab(tmp_path_factory):
    """A fresh venv seeing this one's packages but not ddp_lab, and a stand-in google.colab."""
    folder = tmp_path_factory.mktemp("colab")
    venv.create(folder / "venv", with_pip=False, symlinks=True)
    python = folder / "venv" / "bin" / "python"
    purelib = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    # This environment's packages come after the new one's, as a .pth line: ddp_lab's own
    # editable install here is a .pth file of its own, which a .pth line does not run.
    Path(purelib, "colab_packages.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    stand_in = folder / "stand_in" / "google" / "colab"
    stand_in.mkdir(parents=True)
    (stand_in.parent / "__init__.py").write_text("")
    (stand_in / "__init__.py").write_text('"""Stands in for Colab\'s module: the install cell looks for it."""\n')
    return python, folder


def run_cell(python, folder, source, cwd):
    """The first cell's code, run by IPython as a kernel would, with google.colab importable."""
    script = folder / "cell.py"
    script.write_text(source)
    runner = ("import sys\nimport google.colab  # Colab's kernel has it imported\n"
              "from IPython.core.interactiveshell import InteractiveShell\n"
              f"result = InteractiveShell.instance().run_cell(open({str(script)!r}).read())\n"
              "sys.exit(0 if result.success else 3)\n")
    env = {**os.environ, "PYTHONPATH": str(folder / "stand_in"), "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    env.pop("PYTHONHOME", None)
    return subprocess.run([python, "-c", runner], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def first_cell():
    cells = json.loads((ROOT / "book" / "part1_foundations" / "00_how_to_read.ipynb").read_text())["cells"]
    return "".join(cells[0]["source"])


def test_the_install_cell_installs_the_tagged_version_and_ddp_lab_imports(colab, tmp_path):
    python, folder = colab
    if not shutil.which("git"):
        pytest.skip("git is needed to make the local clone the cell installs from")
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", "--no-hardlinks", str(ROOT), str(clone)], check=True)
    subprocess.run(["git", "-C", str(clone), "tag", TAG], check=True, capture_output=True)
    cell = first_cell()
    assert f'SOURCE = "git+{URL}@{TAG}"' in cell
    local = cell.replace(f"git+{URL}@{TAG}", f"git+file://{clone}@{TAG}")
    before = subprocess.run([python, "-c", "import ddp_lab"], cwd=tmp_path, capture_output=True, text=True)
    assert before.returncode != 0, "ddp_lab must not be importable before the cell runs"
    done = run_cell(python, folder, local, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    after = subprocess.run([python, "-c", "import ddp_lab, ddp_lab.launcher; print(ddp_lab.__file__)"],
                           cwd=tmp_path, capture_output=True, text=True)
    assert after.returncode == 0, after.stderr
    assert str(ROOT) not in after.stdout  # the installed copy, not this checkout


def test_a_failed_install_stops_the_notebook_with_one_line(colab, tmp_path):
    python, folder = colab
    cell = first_cell().replace(f"git+{URL}@{TAG}", f"git+file://{tmp_path}/no-such-repository@{TAG}")
    done = run_cell(python, folder, cell, cwd=tmp_path)
    assert done.returncode == 3, "the cell must fail, so that Run All stops there"
    shown = [line for line in done.stdout.splitlines() if line.strip()]
    assert shown == [f"ddp_lab could not be installed from git+file://{tmp_path}/no-such-repository@{TAG} "
                     "(pip says why above): connect the runtime to the internet, or run the notebook in a "
                     "clone of the repository"], done.stdout
