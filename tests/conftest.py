"""Shared fixtures: every test leaves no rank process behind.

(The float kernels are pinned for every test and notebook by the conftest.py
at the repository root.)
"""

import time

import psutil
import pytest


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
