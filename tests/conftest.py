"""Shared fixtures: every test leaves no rank process behind; the browser tests
save screenshots where ``--screenshots`` asks for them.

(The float kernels are pinned for every test and notebook by the conftest.py
at the repository root.)
"""

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
