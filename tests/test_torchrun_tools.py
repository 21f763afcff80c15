"""ddp_lab.cluster.torchrun: command lines, reading a run's output, and never leaving a process behind."""

import os
import subprocess
import sys
import time

import psutil
import pytest

from ddp_lab.cluster.scripts import book_script, script_function
from ddp_lab.cluster.torchrun import TorchrunRun, free_port, run_together, torchrun_command


def test_standalone_and_multi_node_command_lines():
    words = torchrun_command("train.py", ["--epochs", 1], nproc_per_node=4, max_restarts=2)
    run = TorchrunRun(tuple(words), 0, "", "")
    assert run.command_line == ("TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 torchrun --standalone --nproc_per_node 4 "
                                "--max-restarts 2 train.py --epochs 1")
    words = torchrun_command("train.py", nnodes=2, node_rank=1, rdzv_endpoint="10.0.0.5:29400", rdzv_id="job")
    assert TorchrunRun(tuple(words), 0, "", "").command_line == (
        "torchrun --nnodes 2 --node_rank 1 --rdzv_backend c10d --rdzv_endpoint 10.0.0.5:29400 "
        "--rdzv_id job --local-addr 127.0.0.1 --nproc_per_node 2 train.py")
    with pytest.raises(ValueError, match="needs rdzv_endpoint"):
        torchrun_command("train.py", nnodes=2)
    with pytest.raises(ValueError, match="nproc_per_node must be a positive int, got 0"):
        torchrun_command("train.py", nproc_per_node=0)


def test_reading_rank_lines_tables_and_tails():
    stdout = ("[rank 0] rank table (WORLD_SIZE=2):\n[rank 0]   RANK=0  LOCAL_RANK=0  device=cpu\n"
              "[rank 0]   RANK=1  LOCAL_RANK=1  device=cpu\nnoise\n[rank 1] hello\n")
    stderr = ("W1122 02:24:27.438000 3154 site-packages/torch/distributed/run.py:874] banner\n"
              "[rank1]: RuntimeError: boom\n"
              "Traceback (most recent call last):\n  File \"<frozen runpy>\", line 198, in _run_module_as_main\n"
              "  File \"/x/torch/distributed/run.py\", line 1032, in <module>\nagent report\n")
    run = TorchrunRun(("python",), 1, stdout, stderr)
    assert run.rank_lines(1) == ["[rank 1] hello"]
    assert run.rank_table() == [{"RANK": "0", "LOCAL_RANK": "0", "device": "cpu"},
                                {"RANK": "1", "LOCAL_RANK": "1", "device": "cpu"}]
    assert run.tail(2) == "[rank 1] hello\n[rank1]: RuntimeError: boom"  # no agent log, no agent report


def test_a_run_past_its_timeout_is_killed_with_its_children():
    # the "agent" starts a child in a session of its own, as torchrun starts its workers
    agent = [sys.executable, "-c",
             "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(3600)'],"
             " start_new_session=True); print('started', flush=True); time.sleep(3600)"]
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    start = time.monotonic()
    with pytest.raises(TimeoutError, match="still running after 2 s"):
        run_together([agent], timeout=2)
    # Both sleep an hour: returning at all says they were killed. Only the side of the
    # bound that means something, an order of magnitude wide (2 s + 5 s of grace).
    assert time.monotonic() - start < 600
    time.sleep(0.5)
    left = [p for p in psutil.Process().children(recursive=True) if p.pid not in before and p.is_running()
            and p.status() != psutil.STATUS_ZOMBIE]
    assert not left, left


def test_free_port_and_book_scripts():
    assert 0 < free_port() < 65536
    path = book_script("train.py")
    assert path.name == "train.py" and "def save_snapshot" in script_function(path, "save_snapshot")
    with pytest.raises(ValueError, match="no top-level function or class 'nope'"):
        script_function(path, "nope")
    with pytest.raises(ValueError, match="envs has 1 entries for 2 commands"):
        run_together([["true"], ["true"]], envs=[{}])


def test_the_workers_of_a_killed_agent_are_stopped_and_the_timeout_holds():
    # The agent dies while its worker (in a session of its own, holding the
    # agent's output open) runs on: the call must not wait for the worker.
    agent = [sys.executable, "-c",
             "import os, signal, subprocess, sys, time\n"
             "worker = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(3600)'], start_new_session=True)\n"
             "print(worker.pid, flush=True)\n"
             "time.sleep(0.5)\n"
             "os.kill(os.getpid(), signal.SIGKILL)"]
    # Waiting for the worker (an hour) would end in run_together's TimeoutError: returning
    # a run at all says it did not wait.
    [run] = run_together([agent], timeout=300)
    assert run.returncode == -9
    worker = int(run.stdout.split()[0])
    time.sleep(0.2)
    assert not psutil.pid_exists(worker) or psutil.Process(worker).status() == psutil.STATUS_ZOMBIE


def test_an_agent_and_its_workers_die_with_a_killed_notebook(tmp_path):
    # Issue 35, item 1: SIGKILL the process that runs torchrun (a kernel
    # killed outright, with no chance to clean up). The agent gets SIGTERM
    # from Linux (its parent-death signal) and stops its workers.
    script = tmp_path / "sleeper.py"
    script.write_text("import time\nprint('[rank] up', flush=True)\ntime.sleep(120)\n")
    # Killed outright, the notebook cannot remove its run's temporary folder (ddp_lab_torchrun_*,
    # with torchrun's log folder in it): its temporary folder is one under tmp_path.
    notebook = subprocess.Popen([sys.executable, "-c", (
        "from ddp_lab.cluster.torchrun import run_torchrun\n"
        f"run_torchrun({str(script)!r}, nproc_per_node=2, timeout=120)\n")],
        env={**os.environ, "TMPDIR": str(tmp_path)})
    try:
        deadline = time.monotonic() + 60
        while len(_running(script)) < 3 and time.monotonic() < deadline:  # the agent and two workers
            time.sleep(0.2)
        assert len(_running(script)) == 3, f"agent and workers never all started: {_running(script)}"
    finally:
        notebook.kill()
        notebook.wait()
    deadline = time.monotonic() + 30
    while _running(script) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = _running(script)
    for process in left:
        process.kill()
    assert not left, f"outlived the killed notebook: {[p.cmdline() for p in left]}"


def _running(script):
    found = []
    for process in psutil.process_iter():
        try:
            if str(script) in process.cmdline() and process.status() != psutil.STATUS_ZOMBIE:
                found.append(process)
        except psutil.Error:
            pass
    return found


def test_rank_lines_split_two_ranks_lines_that_share_one_line_of_the_pipe():
    # print() writes its text, then its newline: two ranks printing at once glue their lines
    # (seen in CI, chapter 12: "[rank 3] ... 4[rank 2] ... 4" then an empty line).
    run = TorchrunRun(("torchrun",), 0, "[rank 3] all-reduce: 4[rank 2] all-reduce: 4\n\n[rank 0] waits for [rank 1]\n", "")
    assert run.rank_lines() == ["[rank 3] all-reduce: 4", "[rank 2] all-reduce: 4", "[rank 0] waits for [rank 1]"]
    assert run.rank_lines(2) == ["[rank 2] all-reduce: 4"]
