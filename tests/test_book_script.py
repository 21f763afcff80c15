"""Where ``book_script`` (and so Chapters 11 to 14 and the Lab 5b checker) finds the book's scripts.

From the checkout's ``labs/scripts/``, or from the installed package
(``ddp_lab/book_scripts/``, which the wheel carries): never from the
network, never from a folder near the notebook, and only the book's own
script names.
"""

import inspect
import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from test_wheel import book_scripts, build_dists, clean_env

from ddp_lab.checks import debugging
from ddp_lab.cluster import scripts
from ddp_lab.cluster.scripts import book_script, script_names

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def no_network(monkeypatch):
    """Any connection attempt fails the test."""
    def refuse(*args, **kwargs):
        raise AssertionError(f"book_script tried to open a connection: {args}")
    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


def installed_layout(tmp_path, monkeypatch, with_scripts=True):
    """scripts.py as pip installs it: site-packages/ddp_lab/cluster/scripts.py, the scripts beside it."""
    package = tmp_path / "site-packages" / "ddp_lab"
    (package / "cluster").mkdir(parents=True)
    monkeypatch.setattr(scripts, "__file__", str(package / "cluster" / "scripts.py"))
    if with_scripts:
        (package / "book_scripts").mkdir()
        for name in ("train.py", "print_env.py", debugging.BUGS["batchnorm"].script):
            (package / "book_scripts" / name).write_text("# the installed copy\n")
    return package


def test_the_download_is_gone(no_network):
    assert not hasattr(scripts, "SCRIPTS_URL")
    source = inspect.getsource(scripts)
    assert "urllib" not in source and "http" not in source.replace("https://", "")
    assert "SCRIPTS_URL" not in scripts.__all__
    assert book_script("train.py").is_file()


def test_an_installed_package_runs_its_own_scripts_never_one_found_near_the_notebook(tmp_path, monkeypatch,
                                                                                    no_network):
    # The notebook's folder lies under a directory that happens to hold
    # labs/scripts/<name>: that file is no part of the package and must not be run.
    package = installed_layout(tmp_path, monkeypatch)
    name = debugging.BUGS["batchnorm"].script
    planted = tmp_path / "elsewhere" / "labs" / "scripts"
    planted.mkdir(parents=True)
    (planted / name).write_text("raise SystemExit('planted')\n")
    (planted / "train.py").write_text("raise SystemExit('planted')\n")
    (planted / "planted.py").write_text("raise SystemExit('planted')\n")
    below = tmp_path / "elsewhere" / "notebooks" / "deep"
    below.mkdir(parents=True)
    monkeypatch.chdir(below)
    assert book_script("train.py") == package / "book_scripts" / "train.py"
    assert debugging._script_path("batchnorm") == package / "book_scripts" / name
    monkeypatch.chdir(tmp_path / "elsewhere")   # the folder that holds labs/scripts itself
    assert book_script("train.py") == package / "book_scripts" / "train.py"
    with pytest.raises(ValueError, match="'planted.py' is not one of the book's scripts"):
        book_script("planted.py")


def test_an_installation_without_the_scripts_says_so_and_downloads_nothing(tmp_path, monkeypatch, no_network):
    installed_layout(tmp_path, monkeypatch, with_scripts=False)
    with pytest.raises(FileNotFoundError, match=r"reinstall it \(pip install ddp-lab\)"):
        book_script("train.py")


@pytest.mark.parametrize("name", ["../pyproject.toml", "..", "train.py/..", "/etc/passwd", "sub/train.py",
                                  "..\\train.py", "train", "TRAIN.PY", "", "setup.py", "__init__.py"])
def test_a_name_that_is_not_one_of_the_book_scripts_is_refused_with_the_list(name):
    with pytest.raises(ValueError) as refused:
        book_script(name)
    message = str(refused.value)
    assert message.startswith(f"{name!r} is not one of the book's scripts; the scripts are: ")
    assert "train.py" in message and "print_env.py" in message and "train.sbatch" in message


def test_a_name_that_is_not_a_string_is_refused():
    with pytest.raises(TypeError, match="must be a str such as 'train.py', got PosixPath"):
        book_script(Path("train.py"))


def test_a_checkout_finds_its_own_scripts_from_any_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = book_script("train.py")
    assert path == ROOT / "labs" / "scripts" / "train.py"
    assert script_names() == book_scripts()


def test_the_installed_wheel_finds_each_script(tmp_path):
    wheel, _ = build_dists(tmp_path / "build")
    site = tmp_path / "site"
    env = clean_env()
    install = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site),
                              str(wheel)], env=env, capture_output=True, text=True, timeout=300)
    assert install.returncode == 0, install.stdout + install.stderr
    probe = ("import json, ddp_lab\nfrom ddp_lab.cluster.scripts import book_script, script_names\n"
             "print(json.dumps([ddp_lab.__file__, {n: book_script(n).read_text() for n in script_names()}]))")
    done = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, env={**env, "PYTHONPATH": str(site)},
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    where, texts = json.loads(done.stdout)
    assert Path(where).is_relative_to(site), where
    assert sorted(texts) == book_scripts()
    for name, text in texts.items():
        assert text == (ROOT / "labs" / "scripts" / name).read_text(), name
