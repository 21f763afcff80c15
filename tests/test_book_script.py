"""Where ``book_script`` (and so the Lab 5b checker) finds the book's scripts."""

import urllib.request

from ddp_lab.checks import debugging
from ddp_lab.cluster import scripts
from ddp_lab.cluster.scripts import book_script


def test_an_installed_package_never_runs_a_script_found_above_the_current_folder(tmp_path, monkeypatch):
    # ddp_lab installed outside a checkout (site-packages), the notebook's folder
    # somewhere under a directory that happens to hold labs/scripts/<name>: that
    # file is no part of the package and must not be run; the download cache is.
    site = tmp_path / "site-packages" / "ddp_lab" / "cluster"
    site.mkdir(parents=True)
    monkeypatch.setattr(scripts, "__file__", str(site / "scripts.py"))
    planted = tmp_path / "elsewhere" / "labs" / "scripts"
    planted.mkdir(parents=True)
    name = debugging.BUGS["batchnorm"].script
    (planted / name).write_text("raise SystemExit('planted')\n")
    (planted / "train.py").write_text("raise SystemExit('planted')\n")
    below = tmp_path / "elsewhere" / "notebooks" / "deep"
    below.mkdir(parents=True)
    monkeypatch.chdir(below)
    home = tmp_path / "home"
    cache = home / ".cache" / "ddp_lab" / "scripts"
    cache.mkdir(parents=True)
    (cache / name).write_text("# the cached copy\n")
    (cache / "train.py").write_text("# the cached copy\n")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setattr(urllib.request, "urlretrieve",
                        lambda *a, **k: (_ for _ in ()).throw(AssertionError("no download expected")))

    assert book_script("train.py") == cache / "train.py"
    assert debugging._script_path("batchnorm") == cache / name
    # Run from the folder that holds labs/scripts itself: still the cache.
    monkeypatch.chdir(tmp_path / "elsewhere")
    assert book_script("train.py") == cache / "train.py"


def test_a_checkout_finds_its_own_scripts_from_any_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = book_script("train.py")
    assert path == scripts.Path(scripts.__file__).resolve().parents[2] / "labs" / "scripts" / "train.py"
    assert path.is_file()
