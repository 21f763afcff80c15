"""tests/plumbing/machine_turns.py: shared turns run side by side, an alone turn
has the machine to itself, a waiting alone turn is served before newcomers,
and a participant that dies frees the machine.

Each participant is a ``Turns`` of its own (its own open files), in a thread
or a process of its own: flock does not care which.
"""

import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import nbformat
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from plumbing.machine_turns import Turns  # noqa: E402

BLOCKED = 0.3  # seconds a blocked take is given to (wrongly) return


@pytest.fixture(autouse=True)
def no_rank_outlives_a_test():
    """No rank is started here (overrides tests/conftest.py's check)."""
    yield


def taking(folder, alone, log, name):
    """Start a thread that takes a turn, logs it, and holds it until released."""
    turns = Turns(folder)
    done = threading.Event()

    def run():
        turns.take(alone)
        log.append(name)
        done.wait()
        turns.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, done


def wait_for(log, name, seconds=10):
    deadline = time.monotonic() + seconds
    while name not in log:
        assert time.monotonic() < deadline, f"{name} never got its turn: {log}"
        time.sleep(0.01)


def test_shared_turns_run_side_by_side(tmp_path):
    log = []
    first, end_first = taking(tmp_path, False, log, "first")
    second, end_second = taking(tmp_path, False, log, "second")
    wait_for(log, "first")
    wait_for(log, "second")  # while first still holds its turn
    end_first.set(), end_second.set()


def test_an_alone_turn_waits_for_shared_ones_and_then_has_the_machine(tmp_path):
    log = []
    shared, end_shared = taking(tmp_path, False, log, "shared")
    wait_for(log, "shared")
    alone, end_alone = taking(tmp_path, True, log, "alone")
    time.sleep(BLOCKED)
    assert log == ["shared"], "the alone turn started beside a shared one"
    end_shared.set()
    wait_for(log, "alone")
    later, end_later = taking(tmp_path, False, log, "later")
    time.sleep(BLOCKED)
    assert log == ["shared", "alone"], "a shared turn started beside the alone one"
    end_alone.set()
    wait_for(log, "later")
    end_later.set()


def test_a_waiting_alone_turn_goes_before_newcomers(tmp_path):
    log = []
    shared, end_shared = taking(tmp_path, False, log, "shared")
    wait_for(log, "shared")
    alone, end_alone = taking(tmp_path, True, log, "alone")
    time.sleep(BLOCKED)  # the alone turn now waits at the turnstile
    newcomer, end_newcomer = taking(tmp_path, False, log, "newcomer")
    time.sleep(BLOCKED)
    assert log == ["shared"], "a newcomer got past a waiting alone turn"
    end_shared.set()
    wait_for(log, "alone")
    time.sleep(BLOCKED)
    assert log == ["shared", "alone"]
    end_alone.set()
    wait_for(log, "newcomer")
    end_newcomer.set()


def test_a_process_that_dies_holding_the_machine_frees_it(tmp_path):
    holder = subprocess.Popen(
        [sys.executable, "-c",
         f"import sys, time; sys.path.insert(0, {str(Path(__file__).resolve().parents[1] / 'tests')!r})\n"
         f"from plumbing.machine_turns import Turns\n"
         f"turns = Turns({str(tmp_path)!r}); turns.take(alone=True)\n"
         f"print('holding', flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "holding"
        log = []
        waiter, end_waiter = taking(tmp_path, False, log, "waiter")
        time.sleep(BLOCKED)
        assert log == [], "a shared turn started while another process had the machine alone"
        holder.kill()
        wait_for(log, "waiter")
        end_waiter.set()
    finally:
        holder.kill()
        holder.wait()


# ------------------------------------------------------------ wired into pytest

ROOT = Path(__file__).resolve().parents[1]

MEET = """import pathlib, time
here = pathlib.Path({folder!r})
(here / "{me}.started").touch()
deadline = time.monotonic() + 60
while not (here / "{other}.started").exists():
    assert time.monotonic() < deadline, "{other} is not running beside {me}"
    time.sleep(0.05)"""
BUSY = """with open(here / "busy.times", "w") as times:
    start = time.time()
    while time.time() < start + 2:
        times.write(f"{time.time()}\\n")
        time.sleep(0.01)"""
TIMED = 'start = time.time(); time.sleep(0.5); (here / "timed.times").write_text(f"{start} {time.time()}")'


def test_pytest_runs_a_timing_cell_with_nothing_beside_it(tmp_path):
    """Two notebooks under two xdist workers, through the root conftest.py: one
    keeps a cell busy for 2 s, the other's timing cell must run before or after it."""
    folder = ROOT / "_build" / f"turns-{tmp_path.name}"  # under the root conftest.py
    folder.mkdir(parents=True)
    try:
        def write(name, *cells):
            nb = nbformat.v4.new_notebook(cells=[
                nbformat.v4.new_code_cell(c) if isinstance(c, str)
                else nbformat.v4.new_code_cell(c[0], metadata={"tags": c[1]}) for c in cells])
            nb.metadata.kernelspec = {"name": "python3", "display_name": "Python 3", "language": "python"}
            nbformat.write(nb, folder / f"{name}.ipynb")

        write("a_busy", MEET.format(folder=str(folder), me="a", other="b"), BUSY)
        write("b_timed", MEET.format(folder=str(folder), me="b", other="a"), (TIMED, ["measures-time"]))
        run = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-n", "2",
                              str(folder / "a_busy.ipynb"), str(folder / "b_timed.ipynb")],
                             cwd=ROOT, capture_output=True, text=True, timeout=180)
        assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
        busy = [float(t) for t in (folder / "busy.times").read_text().split()]
        start, end = map(float, (folder / "timed.times").read_text().split())
        assert not any(start < t < end for t in busy), "the timing cell ran beside a busy cell"
    finally:
        shutil.rmtree(folder, ignore_errors=True)
