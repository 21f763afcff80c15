"""Shared fixtures: every test leaves no rank process behind.

Before anything imports torch, pin the CPU's float kernels, as the book build
does (``REPRODUCIBLE_NUMERICS`` in book/_ext/book_html.py explains why): the
kernels nbval starts inherit them, and the training numbers the notebooks
print come out the same on any x86 machine with AVX2.
"""

import os
import sys
import time
from pathlib import Path

import psutil
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "book" / "_ext"))
from book_html import REPRODUCIBLE_NUMERICS  # noqa: E402  (imports sphinx, not torch)

for _name, _value in REPRODUCIBLE_NUMERICS.items():
    os.environ.setdefault(_name, _value)


def rank_processes():
    """Processes started by launches: what multiprocessing's helpers started.

    The forkserver and multiprocessing's resource tracker are kept on purpose
    (they hold no process group and no port); what they start is a rank.
    Other children of the test process (the browser of the HTML test, a
    torchrun agent) are not ranks of ddp_lab.launch.
    """
    return [p for helper in psutil.Process().children() if _is_multiprocessing_helper(helper)
            for p in helper.children(recursive=True)]


def _is_multiprocessing_helper(process):
    try:
        command = " ".join(process.cmdline())
    except psutil.Error:  # it just exited
        return False
    return "multiprocessing" in command and ("forkserver" in command or "resource_tracker" in command)


def wait_until_no_ranks(seconds=5.0):
    deadline = time.monotonic() + seconds
    while rank_processes() and time.monotonic() < deadline:
        time.sleep(0.02)
    return rank_processes()


@pytest.fixture(autouse=True)
def no_rank_outlives_a_test():
    yield
    left = wait_until_no_ranks()
    assert not left, f"rank processes left running: {left}"
