"""Binder's environment (binder/) brings a CPU-only PyTorch in the book's range, and ddp_lab.

repo2docker runs ``pip install -r binder/requirements.txt`` from the
repository's root; pip reads the index options written in that file. A torch
requirement without the CPU index and the ``+cpu`` build would pull the CUDA
build from PyPI, several GB, at every new image.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import tomllib
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
CPU_INDEX = "https://download.pytorch.org/whl/cpu"


@pytest.fixture(autouse=True)
def no_rank_outlives_a_test():
    """No rank is started here (overrides tests/conftest.py's check)."""
    yield


def lines(path: Path) -> list[str]:
    """The requirement and option lines of a requirements file, comments dropped."""
    return [line.split(" #")[0].strip() for line in path.read_text().splitlines()
            if line.strip() and not line.lstrip().startswith("#")]


def binder_torch() -> Requirement:
    (torch,) = [Requirement(line) for line in lines(ROOT / "binder" / "requirements.txt")
                if not line.startswith("-") and Requirement(line).name == "torch"]
    return torch


def test_torch_is_one_cpu_build_from_the_cpu_index():
    options = [line for line in lines(ROOT / "binder" / "requirements.txt") if line.startswith("-")]
    assert f"--extra-index-url {CPU_INDEX}" in options or f"--index-url {CPU_INDEX}" in options
    (specifier,) = binder_torch().specifier
    assert specifier.operator == "==" and specifier.version.endswith("+cpu"), specifier
    assert Version(specifier.version).local == "cpu"


def test_torch_is_inside_the_packages_range_and_is_cis_pin():
    pinned = Version(next(iter(binder_torch().specifier)).version)
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    (package_range,) = [Requirement(line).specifier for line in declared if Requirement(line).name == "torch"]
    assert package_range.contains(pinned), f"binder's torch {pinned} is outside pyproject.toml's {package_range}"
    ci = re.search(r"python -m pip install torch==([\d.]+)\s", (ROOT / ".ci" / "run").read_text()).group(1)
    assert pinned.public == ci
    (book_range,) = [Requirement(line).specifier for line in lines(ROOT / "requirements.txt")
                     if not line.startswith("-") and Requirement(line).name == "torch"]
    assert book_range.contains(pinned)


def test_ddp_lab_comes_from_the_repository():
    assert "-e ." in lines(ROOT / "binder" / "requirements.txt")


def test_binders_python_is_one_the_package_supports():
    runtime = (ROOT / "binder" / "runtime.txt").read_text().strip()
    assert re.fullmatch(r"python-3\.\d+", runtime), runtime
    requires = SpecifierSet(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"])
    assert requires.contains(runtime.removeprefix("python-") + ".0")
