"""book/_ext/zygote_kernels.py and kernel_zygote.py: the build's kernels, forked from
one process that has imported torch, run as fresh kernels would; their
ranks come from a forkserver the kernel forked; signals, exit codes and
shutdown work as with a started kernel, and nothing is left running.

Real kernels driven by nbclient, as the build drives them.
"""

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import nbformat
import psutil
import pytest
from nbclient import NotebookClient

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "book" / "_ext"))
from zygote_kernels import KernelZygote  # noqa: E402

# What a kernel's own start decides: where it runs, what it imports from, what it was told.
PROBE = """
import os, signal, sys, torch
print("cwd", os.getcwd())
print("path", sys.path)
print("argv", sys.argv[0], sys.argv[1] == "-f", sys.argv[3:])
print("executable", sys.executable)
print("environment", sorted(set(os.environ) - {"JPY_PARENT_PID"}))
print("parent is JPY_PARENT_PID", os.environ["JPY_PARENT_PID"] == str(os.getppid()))
print("main", __name__, sys.modules["__main__"].__class__.__name__)
print("threads", torch.get_num_threads(), "SIGINT", signal.getsignal(signal.SIGINT).__name__)
print("MPLBACKEND", os.environ.get("MPLBACKEND"), "stdin", sys.stdin is None or sys.stdin.closed)
"""
PIDS = "import os; print(os.getpid(), os.getppid())"
# matplotlib is imported in the zygote: its backend and an inline figure must be a fresh kernel's.
FIGURE = """
import matplotlib, matplotlib.pyplot as plt
print("backend", dict.__getitem__(matplotlib.rcParams, "backend"), plt.get_backend())
plt.figure(figsize=(1, 1), dpi=50)
plt.plot([0, 1], [1, 0])
plt.show()
"""


def run(cells, folder, zygote=None, **options):
    """Execute a notebook of ``cells``; the executed notebook."""
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(code) for code in cells])
    nb.metadata.kernelspec = {"name": "python3", "display_name": "Python 3", "language": "python"}
    if zygote is not None:
        options["kernel_manager_class"] = zygote.kernel_manager_class()
    options.setdefault("timeout", 60)
    return NotebookClient(nb, resources={"metadata": {"path": str(folder)}}, **options).execute()


def text(cell):
    return "".join(output.get("text", "") for output in cell.outputs)


def gone(pid):
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@pytest.fixture(scope="module")
def zygote():
    zygote = KernelZygote()
    yield zygote
    zygote.stop()


def test_a_forked_kernel_runs_as_a_fresh_kernel_would(zygote, tmp_path):
    forked = run([PROBE, PIDS, FIGURE], tmp_path, zygote)
    fresh = run([PROBE, PIDS, FIGURE], tmp_path)
    assert text(forked.cells[0]) == text(fresh.cells[0])
    assert text(forked.cells[2]) == text(fresh.cells[2]) == "backend {0} {0}\n".format(
        "module://matplotlib_inline.backend_inline")
    assert [o.data["image/png"] for o in forked.cells[2].outputs if "data" in o] == \
           [o.data["image/png"] for o in fresh.cells[2].outputs if "data" in o] != []
    assert f"cwd {tmp_path}\n" in text(forked.cells[0])
    assert "parent is JPY_PARENT_PID True" in text(forked.cells[0])
    forked_parent = int(text(forked.cells[1]).split()[1])
    fresh_parent = int(text(fresh.cells[1]).split()[1])
    assert (forked_parent, fresh_parent) == (zygote.process.pid, os.getpid())


def test_a_kernel_given_another_matplotlib_backend_draws_with_it(zygote, tmp_path, monkeypatch):
    monkeypatch.setenv("MPLBACKEND", "agg")  # the kernels' environment: this process's
    forked = run([FIGURE], tmp_path, zygote)
    assert text(forked.cells[0]).startswith("backend agg agg\n")
    assert not [o for o in forked.cells[0].outputs if "data" in o]  # agg shows nothing inline


def test_its_ranks_come_from_a_forkserver_the_kernel_forked(zygote, tmp_path):
    nb = run([
        "import ddp_lab, os\n"
        "def rank(): import torch.distributed as dist; return dist.get_rank()\n"
        "print(ddp_lab.launch(rank, world_size=2))",
        "from multiprocessing import forkserver\n"
        "server = forkserver._forkserver._forkserver_pid\n"
        "print(os.getpid(), server, open(f'/proc/{server}/cmdline').read() == open('/proc/self/cmdline').read())",
    ], tmp_path, zygote)
    assert text(nb.cells[0]).endswith("[0, 1]\n")
    kernel, server, same_command = text(nb.cells[1]).split()
    # A fresh forkserver's command line is "python -c 'from multiprocessing.forkserver import main; ...'".
    assert same_command == "True"
    assert gone(int(server)) and gone(int(kernel))


def test_an_interrupt_reaches_the_kernel_and_shutdown_leaves_nothing(zygote, tmp_path):
    nb = run([
        "import os, ddp_lab; ddp_lab.start_forkserver()\n"
        "from multiprocessing import forkserver, resource_tracker\n"
        "print(os.getpid(), forkserver._forkserver._forkserver_pid, resource_tracker._resource_tracker._pid)",
        "import time; time.sleep(60)",
        "print('went on')",
    ], tmp_path, zygote, timeout=3, interrupt_on_timeout=True, allow_errors=True)
    assert nb.cells[1].outputs[0].ename == "KeyboardInterrupt"  # nbclient's SIGINT to the kernel's group
    assert text(nb.cells[2]) == "went on\n"
    pids = [int(pid) for pid in text(nb.cells[0]).split()]
    assert all(gone(pid) for pid in pids), [(pid, gone(pid)) for pid in pids]


def test_the_exit_code_comes_from_the_zygote(zygote, tmp_path):
    command = [sys.executable, "-m", "ipykernel_launcher", "-f", str(tmp_path / "kernel.json")]
    kernel = zygote.fork_kernel(command, env=dict(os.environ), cwd=tmp_path)
    assert kernel.poll() is None
    kernel.kill()
    assert kernel.wait(timeout=10) == -signal.SIGKILL
    assert kernel.poll() == -signal.SIGKILL


def test_a_kernel_outlives_its_zygote_by_a_few_seconds_at_most(tmp_path):
    # ipykernel polls its parent, JPY_PARENT_PID, once a second: told the zygote's pid,
    # a kernel whose build died does not run on for ever.
    zygote = KernelZygote()
    command = [sys.executable, "-m", "ipykernel_launcher", "-f", str(tmp_path / "kernel.json")]
    kernel = zygote.fork_kernel(command, env=dict(os.environ), cwd=tmp_path)
    deadline = time.monotonic() + 30
    while not (tmp_path / "kernel.json").exists() and time.monotonic() < deadline:
        time.sleep(0.1)  # the kernel writes its connection file once it has started
    zygote.process.kill()
    zygote.process.wait()
    try:
        assert kernel.wait(timeout=max(1, deadline - time.monotonic())) == -signal.SIGKILL  # its status is lost
        assert gone(kernel.pid)
    finally:
        kernel.kill()


def test_other_commands_and_kernels_after_the_zygote_start_fresh(tmp_path):
    zygote = KernelZygote()
    assert zygote.can_fork([sys.executable, "-m", "ipykernel_launcher", "-f", "k.json"])
    assert not zygote.can_fork(["python3.9", "-m", "ipykernel_launcher", "-f", "k.json"])
    assert not zygote.can_fork([sys.executable, "-m", "other_kernel", "-f", "k.json"])
    zygote.stop()
    assert zygote.process.returncode == 0
    assert not zygote.can_fork([sys.executable, "-m", "ipykernel_launcher", "-f", "k.json"])
    nb = run([PIDS], tmp_path, zygote)
    assert int(text(nb.cells[0]).split()[1]) == os.getpid()  # started by this process, as jupyter_client does


def test_the_forkserver_is_forked_only_from_a_single_thread():
    from ddp_lab.launcher.forkserver import start_forkserver_by_fork

    stop = threading.Event()
    thread = threading.Thread(target=stop.wait)
    thread.start()
    try:
        with pytest.raises(RuntimeError, match="with 2 threads: only a single-threaded process can fork safely"):
            start_forkserver_by_fork()
    finally:
        stop.set()
        thread.join()


def test_the_forked_forkserver_keeps_only_the_descriptors_it_is_given():
    # Run from a fresh single-threaded Python: forking pytest's worker, which has threads, is not safe.
    script = textwrap.dedent("""
        import os
        from ddp_lab.launcher.forkserver import _fork_running_command

        given_read, given = os.pipe()
        other_read, other = os.pipe()
        command = (f"import os\\ntry:\\n    os.fstat({other}); seen = 'open'\\nexcept OSError:\\n    seen = 'closed'\\n"
                   f"os.write({given}, seen.encode())")
        pid = _fork_running_command("python", ["python", "-c", command], [given])
        os.close(given)
        print(os.read(given_read, 100).decode(), os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
    """)
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert run.stdout == "closed 0\n", run.stdout + run.stderr
