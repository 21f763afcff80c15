"""Loaded by pytest first, whatever it runs: unit tests, or notebooks alone.

nbval is the one executor of the book's notebooks: the build renders the
committed outputs, and here every notebook is executed afresh and compared
with them (tests/nbval_sanitize.cfg says what may differ). Nothing here pins
the CPU's float path: what a notebook prints holds on any x86-64 CPU by
design (tools/cpu_variants.py is the proof), as it must for a reader's own run.
"""

import json
import signal
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(1, str(ROOT / "tools"))  # tools/offline_browser.py, shared by the browser tests and the PDF
from plumbing.recorded_durations import FILE_DURATIONS, longest_first  # noqa: E402  (standard library only)

# nbval's kernels listen on Unix sockets, not on TCP ports (tests/plumbing/nbval_unix_sockets.py).
pytest_plugins = ["plumbing.nbval_unix_sockets"]

# Many tests play a reader pressing Ctrl-C (SIGINT, which Python turns into
# KeyboardInterrupt). Python installs that handler at startup only "if the
# parent process has not changed it" (the signal module's documentation), and
# a shell script that starts a command in the background (`cmd &`) starts it
# with SIGINT ignored: those tests would then wait for an interrupt that never
# comes. Install Python's own handler; processes the tests start get it too.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# --doctest-modules imports every module to find its examples; these run
# code when imported (the forkserver's preload freezes the garbage
# collector), or are scripts, or need Sphinx: they have no examples.
collect_ignore_glob = ["ddp_lab/launcher/forkserver_preload.py", "ddp_lab/*/__main__.py",
                       "ddp_lab/checks/torchrun_probe.py", "book/_ext/*.py", "labs/scripts/*.py"]


# ---------------------------------------------------------------- longest file first
#
# pytest-xdist hands each worker whole files (--dist loadfile: a notebook's
# cells run in order, in one kernel), in the order collected (with
# --no-loadscope-reorder). Collected longest first, by the seconds each file
# took last time, no long file starts last and runs alone while the other
# workers idle (tests/plumbing/recorded_durations.py). Refresh the figures with
# `python -m pytest --store-durations`.


def pytest_addoption(parser):
    parser.addoption("--store-durations", action="store_true",
                     help=f"write each file's seconds to {FILE_DURATIONS.relative_to(ROOT)} "
                          "(the order in which the next runs start files)")
    parser.addoption("--screenshots", action="store_true",
                     help="the browser tests save screenshots of every page of the built book and of "
                          "two states of each control under _build/screenshots/, for you to look at")


def pytest_collection_modifyitems(session, config, items):
    files = list(dict.fromkeys(item.path for item in items))
    rank = {path: i for i, path in enumerate(longest_first(files))}
    items.sort(key=lambda item: rank[item.path])  # stable: a file's items keep their order


_seconds_per_file = {}


def pytest_runtest_logreport(report):
    # On the xdist controller every worker's reports arrive here (setup, call, teardown).
    path = report.nodeid.split("::")[0]
    _seconds_per_file[path] = _seconds_per_file.get(path, 0.0) + report.duration


def pytest_sessionfinish(session):
    config = session.config
    if not config.getoption("--store-durations") or hasattr(config, "workerinput"):
        return  # only the controller writes, once every worker has reported
    FILE_DURATIONS.write_text(json.dumps(
        {path: round(seconds, 1) for path, seconds in sorted(_seconds_per_file.items())}, indent=1) + "\n")
