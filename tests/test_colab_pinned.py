"""Colab as it is: ``pip install ddp-lab`` on Colab's own packages changes none of them,
and the chapters run there (issue 50).

A reader on Colab runs the install cell on a runtime whose packages Google
chose: Python 3.13, torch 2.11.0, ipython 7.34.0, ipywidgets 7.7.1 and the
rest of ``tests/colab/pip-freeze.txt`` (Colab's published list, copied with
its source). If ddp_lab asked for a torch outside what Colab has, pip would
replace Colab's torch with a multi-gigabyte CUDA build and break its
torchvision; if the chapters used an API newer than Colab's torch, or a
widget feature of ipywidgets 8, the reader would meet the error, not us.

So this test plays Colab:

1. a virtual environment on Python 3.13 (the nearest Python where this machine
   has no 3.13) with Colab's versions of what the chapters touch, installed
   under Colab's list as pip constraints (the *base*);
2. the wheel of this checkout's ddp_lab, built here, installed the way the
   install cell installs it (``pip install ddp-lab==<version>``, the wheel
   found through ``--find-links``, everything else from the package index,
   with no constraint from this machine's pip configuration), into a fresh
   layer over the base, so that the base stays as Colab has it;
3. ``pip freeze`` before and after: pip changed no version that was there;
4. nbval on four chapters copied outside the checkout: 2 (the book's
   controls, on ipywidgets 7), 5 (collectives), 8 (DDP) and 11 (torchrun and
   the book's scripts, from the installed package).

Colab's torch is the CPU build from download.pytorch.org
(``torch-2.11.0+cpu``), which this machine cannot reach: the base takes
torch 2.11.0 from PyPI, the CUDA build, which runs gloo on a machine without
a GPU all the same. Colab's ``nvidia-nccl-cu13==2.31.2`` (for its other
packages) is left out of the constraints: PyPI's torch 2.11.0 pins 2.28.9.

The base costs about 2.6 GB of downloads, 5 GB of disk and three minutes on
two cores, so it is made once and kept: in the folder ``DDP_LAB_COLAB_VENV``
names, else under ``~/.cache/ddp-lab/``. CI makes it while the book builds::

    python tests/test_colab_pinned.py --prepare "$folder"

and the test then reuses it (a base is reused only if it was made from this
very list, on this Python).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest
from plumbing import wheel_build  # tests/plumbing/: one home for the build

ROOT = Path(__file__).resolve().parents[1]
COLAB_FREEZE = ROOT / "tests" / "colab" / "pip-freeze.txt"
# The versions issue 50 names, which the install must leave as they are (the
# test checks every package of the base, these by name too).
NAMED = ("torch", "ipython", "ipykernel", "ipywidgets", "anywidget", "numpy", "matplotlib",
         "cloudpickle", "psutil", "pip")
# What the chapters and ddp_lab touch, at Colab's versions; pytest and nbval
# run the notebooks (Colab has pytest; nbval's own needs come at Colab's versions).
BASE_PACKAGES = ("torch", "numpy", "matplotlib", "ipython", "ipykernel", "ipywidgets", "anywidget",
                 "cloudpickle", "psutil", "jsonschema", "pytest", "nbval")
# Colab lines that are not constraints here (see the module docstring).
LEFT_OUT = ("nvidia-nccl-cu13",)
CHAPTERS = ("book/part1_foundations/02_nodes_and_ranks.ipynb",
            "book/part2_communication/05_collectives.ipynb",
            "book/part3_ddp/08_distributed_data_parallel.ipynb",
            "book/part4_running/11_torchrun.ipynb")
READY = "colab-base.json"


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def colab_versions() -> dict[str, str]:
    """Every package of Colab's list and its version (``torch @ .../torch-2.11.0%2Bcpu-...`` gives 2.11.0)."""
    versions = {}
    for line in COLAB_FREEZE.read_text().splitlines():
        if match := re.fullmatch(r"([A-Za-z0-9_.-]+)==(\S+)", line.strip()):
            versions[canonical(match[1])] = match[2]
        elif match := re.fullmatch(r"([A-Za-z0-9_.-]+) @ \S+/[^/]+?-(\d[\w.]*?)(?:%2B\w+)?-[^/]*\.whl", line.strip()):
            versions[canonical(match[1])] = match[2]
    return versions


def colab_python() -> tuple[int, int]:
    """Colab's Python (major, minor), from the first lines of tests/colab/pip-freeze.txt."""
    return tuple(int(part) for part in re.search(r"Python (\d+)\.(\d+)", COLAB_FREEZE.read_text()).groups())


def find_python() -> Path:
    """Colab's Python where this machine has it, else the nearest minor version it has."""
    major, minor = colab_python()
    for delta in (0, -1, 1, -2, 2):
        name = f"python{major}.{minor + delta}"
        found = shutil.which(name)
        if found is None or "/shims/" in found:  # a pyenv shim runs only the versions pyenv selects
            found = next(iter(sorted(Path.home().glob(f".pyenv/versions/{major}.{minor + delta}*/bin/{name}"))), None)
        if found:
            return Path(found)
    pytest.skip(f"no Python {major}.{minor - 2} to {major}.{minor + 2} on this machine")


def index_env() -> dict:
    """The environment for a pip that sees the package index as a reader's does: none of
    this machine's pip configuration (its cap on torch, its local wheels), nothing of this
    pytest run, no PYTHONPATH."""
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("PIP_", "PYTEST_")) and key not in ("PYTHONPATH", "PYTHONHOME")}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1")
    return env


def freeze(python: Path) -> dict[str, str]:
    done = subprocess.run([python, "-m", "pip", "freeze", "--all"], env=index_env(), capture_output=True,
                          text=True, check=True)
    return {canonical(name): version for name, version in
            (line.split("==", 1) for line in done.stdout.splitlines() if "==" in line)}


def base_key(python: Path) -> str:
    text = COLAB_FREEZE.read_bytes() + repr((BASE_PACKAGES, LEFT_OUT, str(python.resolve()))).encode()
    return hashlib.sha256(text).hexdigest()[:16]


def prepare(folder: Path, python: Path) -> Path:
    """Make the base in ``folder`` (a new venv on ``python`` with Colab's versions); its python."""
    if folder.exists():
        shutil.rmtree(folder)
    subprocess.run([python, "-m", "venv", folder], check=True)
    base = folder / "bin" / "python"
    versions = colab_versions()
    constraints = folder / "colab-constraints.txt"
    constraints.write_text("".join(f"{name}=={version}\n" for name, version in sorted(versions.items())
                                   if name not in LEFT_OUT))
    for command in ([base, "-m", "pip", "install", "-q", f"pip=={versions['pip']}"],
                    [base, "-m", "pip", "install", "-q", "-c", constraints, *BASE_PACKAGES]):
        subprocess.run(command, env=index_env(), check=True, timeout=1800)
    (folder / READY).write_text(json.dumps({"key": base_key(python), "python": str(python)}))
    return base


def wait_for_preparation(folder: Path, limit_s: float = 1800) -> None:
    """Wait while another process prepares the base in ``folder``: ``.ci/run`` starts
    ``--prepare`` beside the suite and removes ``<folder>.preparing`` when it ends (it
    downloads 2.6 GB: minutes the suite need not wait for, this test alone does)."""
    marker = folder.with_name(folder.name + ".preparing")
    deadline = time.monotonic() + limit_s
    while marker.exists():
        if time.monotonic() > deadline:
            pytest.fail(f"{marker} still there after {limit_s:.0f} s: is the preparation stuck?")
        time.sleep(1)


def base_venv() -> Path:
    """The base's python: the one already made from this list, or a new one (minutes)."""
    python = find_python()
    folder = Path(os.environ.get("DDP_LAB_COLAB_VENV")
                  or Path.home() / ".cache" / "ddp-lab" / f"colab-venv-{python.name}")
    wait_for_preparation(folder)
    try:
        if json.loads((folder / READY).read_text())["key"] == base_key(python):
            return folder / "bin" / "python"
    except (OSError, ValueError, KeyError):
        pass
    return prepare(folder, python)


def version() -> str:
    return re.search(r'^version = "([^"]+)"$', (ROOT / "pyproject.toml").read_text(), re.M)[1]


def build_wheel(folder: Path) -> Path:
    """The wheel of this checkout's ddp_lab (tests/plumbing/wheel_build.py)."""
    return wheel_build.build(folder, sdist=False)[0]


@pytest.fixture(scope="module")
def base() -> Path:
    return base_venv()


@pytest.fixture(scope="module")
def installed(base, tmp_path_factory) -> dict:
    """A fresh venv layered over the base, with ddp-lab installed as the install cell does."""
    folder = tmp_path_factory.mktemp("colab")
    wheel = build_wheel(folder)
    top = folder / "venv"
    subprocess.run([base, "-m", "venv", "--without-pip", top], check=True)
    python = top / "bin" / "python"
    site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    base_site = subprocess.run([base, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip()
    # addsitedir, not a bare path: the base's own .pth files are read too
    Path(site, "colab_base.pth").write_text(f"import site; site.addsitedir({base_site!r})\n")
    before = freeze(python)
    install = [python, "-m", "pip", "install", "--find-links", wheel.parent, f"ddp-lab=={version()}"]
    report = folder / "report.json"
    dry = subprocess.run([*install, "--dry-run", "--report", report], env=index_env(), cwd=folder,
                         capture_output=True, text=True, timeout=600)
    assert dry.returncode == 0, dry.stdout[-3000:] + dry.stderr[-3000:]
    planned = {canonical(item["metadata"]["name"]): item for item in json.loads(report.read_text())["install"]}
    done = None
    if not set(planned) & set(before):  # the install would replace nothing: do it (else the test fails first)
        done = subprocess.run(install, env=index_env(), cwd=folder, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return {"python": python, "wheel": wheel, "before": before, "planned": planned,
            "after": freeze(python) if done else None, "folder": folder}


def test_the_base_is_waited_for_while_another_process_prepares_it(tmp_path):
    folder = tmp_path / "colab"
    marker = tmp_path / "colab.preparing"
    marker.touch()
    removed = threading.Timer(0.5, marker.unlink)
    removed.start()
    wait_for_preparation(folder, limit_s=600)
    assert not marker.exists()
    marker.touch()
    with pytest.raises(pytest.fail.Exception, match="colab.preparing still there after 0 s"):
        wait_for_preparation(folder, limit_s=0)


def test_the_base_has_colabs_versions(base):
    """The venv plays Colab only if it has Colab's versions of what the chapters touch."""
    colab, here = colab_versions(), freeze(base)
    wanted = {name: colab[name] for name in NAMED}
    assert {name: here.get(name) for name in NAMED} == wanted
    assert {name: version for name, version in here.items() if name not in LEFT_OUT and colab.get(name, version) != version} == {}


def test_installing_ddp_lab_changes_none_of_colabs_packages(installed):
    before, planned, after = installed["before"], installed["planned"], installed["after"]
    print("pinned, before:", " ".join(f"{name}=={before.get(name)}" for name in NAMED))
    replaced = {name: f"{before[name]} -> {item['metadata']['version']}"
                for name, item in planned.items() if name in before}
    assert replaced == {}, f"pip would replace Colab's packages: {replaced} (pyproject.toml's dependencies)"
    assert planned["ddp-lab"]["download_info"]["url"] == installed["wheel"].as_uri(), "ddp-lab not from this wheel"
    print("pinned, after: ", " ".join(f"{name}=={after.get(name)}" for name in NAMED))
    assert {name: after.get(name) for name in before} == before
    assert after["ddp-lab"] == version()


# What differs on Colab's torch 2.11 by design, each said on its page (the file says why).
OLDER_TORCH_RULES = (ROOT / "tests" / "nbval_older_torch.cfg").read_text()


@pytest.mark.parametrize("chapter", CHAPTERS, ids=[Path(chapter).stem for chapter in CHAPTERS])
def test_chapter_passes_nbval_on_colabs_packages(installed, chapter, tmp_path, short_temp):
    assert installed["after"], "ddp-lab was not installed (see the test above)"
    shutil.copy(ROOT / chapter, tmp_path)
    shutil.copy(ROOT / "tests" / "nbval_sanitize.cfg", tmp_path)
    with open(tmp_path / "nbval_sanitize.cfg", "a") as rules:
        rules.write(OLDER_TORCH_RULES)
    # A temporary folder of the run's own, removed after it: nbval kills the kernel at the
    # end, and a killed kernel leaves its forkserver's pymp-* folder behind (the book's own
    # nbval asks its kernels to stop: tests/plumbing/nbval_unix_sockets.py).
    run = subprocess.run([installed["python"], "-m", "pytest", "-p", "no:cacheprovider", "--nbval",
                          "--nbval-current-env", "--nbval-sanitize-with", "nbval_sanitize.cfg",
                          "--nbval-cell-timeout", "300", "-q", "-rf", "--tb=short", Path(chapter).name],
                         cwd=tmp_path, env={**index_env(), "TMPDIR": str(short_temp)}, capture_output=True,
                         text=True, timeout=900)
    code_cells = sum(cell["cell_type"] == "code" for cell in json.loads((ROOT / chapter).read_text())["cells"])
    assert run.returncode == 0, run.stdout[-8000:] + run.stderr[-2000:]
    assert f"{code_cells} passed" in run.stdout, run.stdout[-2000:]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="make the Colab-pinned base venv of tests/test_colab_pinned.py")
    parser.add_argument("--prepare", metavar="FOLDER", type=Path, required=True,
                        help="where to make it (then run the test with DDP_LAB_COLAB_VENV=FOLDER)")
    folder = parser.parse_args().prepare.resolve()
    made = prepare(folder, find_python())
    print(f"Colab-pinned base ready: {made}; the test reuses it with DDP_LAB_COLAB_VENV={folder}")
