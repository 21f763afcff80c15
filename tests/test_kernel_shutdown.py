"""A Jupyter kernel that launched ranks shuts down at once and leaves nothing.

Without ddp_lab.launcher.shutdown, ipykernel waited 29 s for the forkserver and
the resource tracker, two children it never collects.
"""

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import psutil
import pytest
from nbval.kernel import CURRENT_ENV_KERNEL_NAME
from plumbing.nbval_unix_sockets import KernelOnUnixSockets, NotebookOnUnixSockets
from plumbing.unix_socket_kernels import start_new_kernel  # tests/plumbing/: no TCP port race

from ddp_lab.host import process_running

HELPER_PIDS = (
    "from multiprocessing import forkserver, resource_tracker\n"
    "print(json.dumps([forkserver._forkserver._forkserver_pid, resource_tracker._resource_tracker._pid]))"
)
# Without ddp_lab's shutdown hook ipykernel waits 29 s (its SIGTERM and SIGKILL
# rounds, see the module doc of ddp_lab.launcher.shutdown). A clean shutdown
# takes 0.2 s on an idle machine, and once took 10.2 s on a loaded one (the
# kernel logging "IOStream.flush timed out": ipykernel 7.4's own wait, up to
# 10 s). Time tells the two apart badly under load; the kernel's debug log
# tells them apart for certain: the tests below read it.


def run_in_kernel(kernel_client, code):
    printed = []

    def keep(message):
        if message["msg_type"] == "stream":
            printed.append(message["content"]["text"])

    reply = kernel_client.execute_interactive(code, timeout=60, output_hook=keep)
    assert reply["content"]["status"] == "ok", reply["content"]
    return "".join(printed)




def descendants(pid):
    """Every process below pid: helpers and ranks."""
    return [child.pid for child in psutil.Process(pid).children(recursive=True)]


def shut_down(manager):
    start = time.monotonic()
    manager.request_shutdown()
    while manager.is_alive() and time.monotonic() - start < 60:
        time.sleep(0.02)
    seconds = time.monotonic() - start
    manager.shutdown_kernel(now=True)  # no-op when gone; cleans up the connection files
    return seconds


def wait_until_gone(pids, seconds=10.0):
    deadline = time.monotonic() + seconds
    while any(process_running(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return [p for p in pids if process_running(p)]


def test_a_kernel_told_to_shut_down_freezes_its_objects_so_exit_skips_collecting_them():
    # What ddp_lab does when the shell's exit_now turns True, in a fresh Python.
    code = ("import gc, torch\n"
            "from ddp_lab.launcher.shutdown import _stop_helpers\n"
            "before = gc.get_freeze_count()\n"
            "_stop_helpers({'new': True})\n"
            "print(before, gc.get_freeze_count())")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    before, after = map(int, run.stdout.split())
    assert before == 0 and after > 100_000, run.stdout + run.stderr


@pytest.fixture
def kernel(tmp_path):
    # The kernel's own log, at debug level: it says whether ipykernel found children to stop.
    manager, client = start_new_kernel(extra_arguments=["--debug"], stderr_path=tmp_path / "kernel.log")
    manager.log_path = tmp_path / "kernel.log"
    run_in_kernel(client, "import json, os, tempfile, threading, time, ddp_lab\n"
                          "def one():\n    return 1\n"
                          "def slow(folder):\n"
                          "    open(os.path.join(folder, os.environ['RANK']), 'w').close()\n"
                          "    time.sleep(30)")
    yield manager, client
    client.stop_channels()
    if manager.is_alive():
        manager.shutdown_kernel(now=True)


@pytest.mark.parametrize("cell", [
    "ddp_lab.launch(one, 4)",
    # The shutdown arrives while both ranks of a launch are still running.
    "folder = tempfile.mkdtemp(dir=TMP_PATH)\n"
    "threading.Thread(target=ddp_lab.launch, args=(slow, 2), kwargs={'args': (folder,)}, daemon=True).start()\n"
    "while len(os.listdir(folder)) < 2:\n    time.sleep(0.02)",
], ids=["after-a-launch", "launch-in-flight"])
def test_the_kernel_shuts_down_promptly_and_leaves_no_process(kernel, cell, tmp_path):
    manager, client = kernel
    run_in_kernel(client, cell.replace("TMP_PATH", repr(str(tmp_path))))
    helpers = json.loads(run_in_kernel(client, HELPER_PIDS))
    started = descendants(manager.provisioner.process.pid)
    assert set(helpers) <= set(started)

    seconds = shut_down(manager)

    # What makes the shutdown prompt is an event, not a time: ipykernel found no child
    # to stop, so it never entered its SIGTERM and SIGKILL rounds (29 s). The kernel's
    # debug log says which; the time is printed for the reader of the test's output.
    log = manager.log_path.read_text()
    assert "Kernel has no children." in log, log[-2000:]
    assert "Sending <Signals." not in log, log[-2000:]
    print(f"the kernel exited {seconds:.1f} s after the shutdown request")
    assert wait_until_gone(started) == []


EXIT_MID_LAUNCH = """
import json, os, threading, time
import ddp_lab
from ddp_lab.launcher import shutdown

def slow():
    time.sleep(3600)

if __name__ == "__main__":
    threading.Thread(target=ddp_lab.launch, args=(slow, 2), kwargs={"timeout": 900}, daemon=True).start()
    while not shutdown._live or len(next(iter(shutdown._live.values())).pids) < 2:
        time.sleep(0.02)
    print(json.dumps(next(iter(shutdown._live.values())).pids), flush=True)
    # The main thread ends here, the launch still in flight: exit must stop its ranks
    # (multiprocessing's own exit handler would wait for them for ever).
"""


def test_python_exiting_mid_launch_stops_the_ranks(tmp_path):
    script = tmp_path / "exit_mid_launch.py"
    script.write_text(EXIT_MID_LAUNCH)
    root = str(Path(__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", "")}
    # The ranks sleep an hour: a script that ends within the 300 s limit did not wait for them
    # (no wall-clock bound of our own, which a loaded machine once broke: 64.3 s against 60).
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr
    pids = json.loads(done.stdout.splitlines()[-1])
    assert len(pids) == 2
    assert wait_until_gone(pids) == []


def test_nbval_asks_each_notebooks_kernel_to_stop_and_nothing_stays_in_the_temporary_folder(monkeypatch, short_temp):
    # nbval's own stop kills the kernel: the pymp-* folder of the forkserver's socket stayed
    # behind, one per notebook and run (2,340 of them in /tmp after a day of runs).
    monkeypatch.setenv("TMPDIR", str(short_temp))  # the kernel's temporary folder, for it alone
    kernel = KernelOnUnixSockets(CURRENT_ENV_KERNEL_NAME)
    pid = kernel.km.provisioner.process.pid
    try:
        run_in_kernel(kernel.kc, "import ddp_lab\ndef one():\n    return 1\nprint(ddp_lab.launch(one, 2))")
        assert any(name.startswith("pymp-") for name in os.listdir(short_temp))  # the forkserver's, while it runs
    finally:
        kernel.stop()
    assert wait_until_gone([pid]) == []
    # torchinductor_<user>: torch's compile cache, kept across runs by design
    assert sorted(name for name in os.listdir(short_temp) if not name.startswith("torchinductor_")) == []


def test_nbval_stops_each_notebooks_kernel_through_its_stop_method():
    # The test above calls KernelOnUnixSockets.stop itself; the suite relies on nbval's
    # teardown calling it (nbval 0.11: IPyNbFile.teardown, `self.kernel.stop()`). Were nbval
    # to stop its kernels some other way, the pymp-* folders would come back unnoticed.
    calls = []

    class Kernel:
        def is_alive(self):
            return not calls

        def stop(self):
            calls.append("stop")

    notebook = SimpleNamespace(kernel=Kernel(), parent=SimpleNamespace(config=SimpleNamespace(option=SimpleNamespace())))
    NotebookOnUnixSockets.teardown(notebook)
    assert calls == ["stop"]
