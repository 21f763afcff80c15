"""Shared fixtures: every test leaves no rank process behind; a test that runs
ranks in a temporary folder of its own gets one with a short path; the browser
tests save screenshots where ``--screenshots`` asks for them.
"""

import shutil
import tempfile
from pathlib import Path

import pytest
from plumbing.rank_census import wait_until_no_ranks

from ddp_lab.launcher.forkserver import add_forkserver_preload

# A test's rank function lives in its test file, so every rank imports that file
# and pytest with it (about 0.2 s of CPU per rank, a thousand ranks a run). The
# forkserver of each pytest process imports pytest once instead.
add_forkserver_preload("pytest")


@pytest.fixture(autouse=True)
def no_rank_outlives_a_test():
    yield
    left = wait_until_no_ranks()
    assert not left, f"rank processes left running: {left}"


@pytest.fixture
def short_temp():
    """A temporary folder with a short path, removed afterwards: a test gives it
    as ``TMPDIR`` to a process that launches ranks, then looks into it.

    The ranks' forkserver puts its Unix socket in ``$TMPDIR/pymp-*/``, and a
    socket's path may be at most 107 bytes (``sun_path``): under pytest's
    ``tmp_path`` (``/tmp/pytest-of-root/pytest-115/popen-gw1/<test name>0/``)
    it is longer once the session counter grows, and the launch fails with
    ``OSError: AF_UNIX path too long``.
    """
    folder = Path(tempfile.mkdtemp(prefix="short-"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="session")
def screenshots(request) -> "Path | None":
    """The folder where the browser tests save screenshots, or None when pytest
    runs without ``--screenshots``.

    Screenshots are for people: no check reads them (the tests compare what a
    page shows, text and pictures' markup, with Python's answers). Taking one of
    a whole chapter, 10,000 to 15,000 pixels tall, costs more CPU than loading
    the page, so a plain run, CI's included, takes none.
    """
    if not request.config.getoption("--screenshots"):
        return None
    folder = Path(__file__).resolve().parents[1] / "_build" / "screenshots"
    folder.mkdir(parents=True, exist_ok=True)
    return folder
