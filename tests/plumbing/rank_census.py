"""Which rank processes are alive: the census every test of ddp_lab.launch takes.

Its own module, not conftest.py: test functions defined at a test module's top
level reach the ranks by reference, so a rank imports the test module and
with it these names; ``import conftest`` there could find the repository
root's conftest.py first (pytest puts the root on sys.path to collect
ddp_lab's doctests), ``import plumbing.rank_census`` finds only this file.
"""

import time

import psutil


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
