"""A launch used the wrong way gets an error that says what to do, before anything starts (issue 44).

A thread that a script's unguarded top-level code started; a tutorial's
``run(rank, size)`` given to ``launch``; a function that initialises the
process group the launcher already made; and ``python -m ddp_lab``, which
says what the package is and which commands the book runs.
"""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

import ddp_lab

ROOT = Path(__file__).resolve().parents[1]

THREAD_AT_TOP_LEVEL = """
import os, threading, ddp_lab
def work():
    print("launched", len(ddp_lab.launch(os.getpid, 2, timeout=60)), flush=True)
thread = threading.Thread(target=work)
thread.start()
thread.join()
"""

THREAD_AT_TOP_LEVEL_NOT_JOINED = """
import os, threading, torch, ddp_lab
def work():
    print("launched", len(ddp_lab.launch(os.getpid, 2, timeout=60)), flush=True)
threading.Thread(target=work).start()
"""

THREAD_UNDER_THE_GUARD = """
import os, threading, ddp_lab
def work():
    print("launched", len(ddp_lab.launch(os.getpid, 2, timeout=60)), flush=True)
if __name__ == "__main__":
    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
"""

GUARD = '`if __name__ == "__main__":` guard'


def run_python(args, folder, temp, timeout=120):
    """``python args`` in ``folder``, with ``temp`` as its temporary folder (to look into afterwards)."""
    env = {**os.environ, "TMPDIR": str(temp)}
    done = subprocess.run([sys.executable, *args], cwd=folder, env=env, capture_output=True,
                          text=True, timeout=timeout)
    return done, temp


def test_a_thread_started_by_unguarded_top_level_code_is_refused_before_anything_starts(tmp_path, short_temp):
    # Each rank imports the script again, which starts the thread again, which
    # launches from inside the rank: ranks failing to start ranks, pymp-* folders left.
    script = tmp_path / "thread_at_top.py"
    script.write_text(THREAD_AT_TOP_LEVEL)
    done, temp = run_python([str(script)], tmp_path, short_temp)
    assert (f"RuntimeError: {script} starts ranks from its top-level code, line 7, without the {GUARD} "
            "(from a thread, while the main thread runs that line)") in done.stderr, done.stderr
    assert "launched" not in done.stdout
    assert "bootstrapping phase" not in done.stderr  # no rank ran the script's top level
    assert list(temp.glob("pymp-*")) == []

    # Run with python -m and not joined: the main thread has finished the module, which
    # the ranks would import again by name, starting the thread again.
    (tmp_path / "not_joined.py").write_text(THREAD_AT_TOP_LEVEL_NOT_JOINED)
    done, temp = run_python(["-m", "not_joined"], tmp_path, short_temp)
    assert (f"{tmp_path / 'not_joined.py'} starts ranks from its top-level code without the {GUARD} "
            "(from a thread that code started)") in done.stderr, done.stderr
    assert "launched" not in done.stdout and list(temp.glob("pymp-*")) == []

    # Under the guard, the same thread launches.
    (tmp_path / "guarded.py").write_text(THREAD_UNDER_THE_GUARD)
    done, temp = run_python([str(tmp_path / "guarded.py")], tmp_path, short_temp)
    assert "launched 2" in done.stdout, done.stdout + done.stderr
    assert GUARD not in done.stderr and list(temp.glob("pymp-*")) == []


def run(rank, size):
    """PyTorch's tutorial "Writing Distributed Applications": written for mp.spawn."""
    tensor = torch.ones(1) * (rank + 1)
    dist.all_reduce(tensor)
    return tensor.item()


def test_a_tutorials_rank_size_function_is_refused_with_what_to_do_instead():
    with pytest.raises(TypeError) as caught:  # not RankFailed: no rank started
        ddp_lab.launch(run, 2)
    message = str(caught.value)
    assert message.startswith("run(rank, size) needs 2 positional arguments (rank, size), but launch "
                              "calls run(): rank, size are missing.")
    assert "ddp_lab.launch calls fn(*args, **kwargs), the same call on every rank" in message
    assert "dist.get_rank()" in message and "dist.get_world_size()" in message
    assert "torch.multiprocessing.spawn passes the rank as the first argument instead" in message
    with pytest.raises(TypeError, match=re.escape("but launch calls run(1): size is missing")):
        ddp_lab.launch(run, 2, args=(1,))
    # What the message suggests works.
    assert ddp_lab.launch(lambda: run(dist.get_rank(), dist.get_world_size()), 2) == [3.0, 3.0]
    assert ddp_lab.launch(run, 2, args=(1,), kwargs={"size": 2}) == [4.0, 4.0]


def starts_its_own_group():
    """A torchrun script's main(): it initialises the group itself."""
    dist.init_process_group("gloo")
    try:
        return dist.get_world_size()
    finally:
        dist.destroy_process_group()


def test_a_function_that_initialises_the_group_again_is_told_the_launcher_made_it():
    with pytest.raises(ddp_lab.RankFailed) as caught:
        ddp_lab.launch(starts_its_own_group, 2, backend="gloo")
    error = caught.value
    assert error.exc_type == "ValueError" and isinstance(error.exception, ValueError)
    assert error.exc_message.startswith(
        "trying to initialize the default process group twice: ddp_lab.launch initialised it on "
        "every rank before calling your function. Use that group as it is (dist.get_rank(), "
        "dist.get_world_size(), and dist.group.WORLD where a group is asked for)")
    assert "launch it with init_process_group=False" in error.exc_message
    assert "dist.init_process_group(\"gloo\")" in error.remote_traceback  # the reader's line is shown
    assert ddp_lab.launch(starts_its_own_group, 2, init_process_group=False) == [2, 2]


def test_python_m_ddp_lab_says_what_it_is_and_the_books_commands():
    done = subprocess.run([sys.executable, "-m", "ddp_lab"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    version = re.search(r'^version = "(.+)"', (ROOT / "pyproject.toml").read_text(), re.M).group(1)
    assert done.stdout.startswith("ddp_lab: real torch.distributed process groups from a notebook cell")
    assert f"version {version}" in done.stdout
    readme = " ".join((ROOT / "README.md").read_text().split())
    commands = [line.strip() for line in done.stdout.splitlines()
                if line.startswith("  ") and not line.startswith("      ")]
    assert "python -m ddp_lab.gpu_check --out book/part4_running/gpu_results/" in commands
    assert {"python -m ddp_lab.bench launch", "jupyter-book build -W -n --keep-going .",
            "python -m pytest"} <= set(commands)
    for command in commands:  # each as README.md gives it
        assert command in readme, f"python -m ddp_lab prints {command!r}, which README.md does not give"
    done = subprocess.run([sys.executable, "-m", "ddp_lab", "--version"], capture_output=True, text=True,
                          timeout=60)
    assert (done.returncode, done.stdout) == (0, f"ddp_lab {version}\n")
