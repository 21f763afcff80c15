"""A torchrun agent forked from the forkserver (ddp_lab.cluster.forked_agent) runs,
reports and stops as one started with ``python -m torch.distributed.run`` does."""

import os
import re
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

from ddp_lab.cluster.forked_agent import ForkedAgent, can_fork_agent
from ddp_lab.cluster.torchrun import (TorchrunRun, loopback_environment, run_torchrun, run_together,
                                      torchrun_command)

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the forkserver and psutil's views are Linux")


def _script(tmp_path, body, name="job.py"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return path


def _gone(pid):
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_only_a_torchrun_agent_of_this_interpreter_is_forked():
    agent = torchrun_command("train.py", ["--epochs", "1"])
    assert can_fork_agent(agent)
    assert not can_fork_agent(["ip", "netns", "exec", "node0", *agent])  # must start inside the namespace
    assert not can_fork_agent(["/usr/bin/python3.99", *agent[1:]])
    assert not can_fork_agent([sys.executable, "print_env.py"])
    assert not can_fork_agent([sys.executable])


def test_the_agent_is_the_forkservers_child_in_the_runs_directory_and_environment(tmp_path):
    # Each worker looks at its agent: whose child it is, where it runs, what it was given.
    script = _script(tmp_path, """\
        import os, psutil
        agent = psutil.Process(os.getppid())
        print(f"[rank {os.environ['RANK']}] agent forked from the forkserver:",
              "forkserver" in " ".join(agent.parent().cmdline()), flush=True)
        print(f"[rank {os.environ['RANK']}] cwd {os.getcwd()} BOOK_VAR={os.environ.get('BOOK_VAR')}", flush=True)
        """)
    run = run_torchrun(script.name, nproc_per_node=1, cwd=tmp_path, env={"BOOK_VAR": "from the notebook"})
    assert run.ok, run.tail()
    assert run.command_line == "torchrun --standalone --nproc_per_node 1 job.py"
    assert run.rank_lines() == ["[rank 0] agent forked from the forkserver: True",
                                f"[rank 0] cwd {tmp_path} BOOK_VAR=from the notebook"]


def test_a_failing_job_reports_as_it_does_from_a_started_agent(tmp_path):
    script = _script(tmp_path, """\
        import os
        rank = int(os.environ["RANK"])
        print(f"[rank {rank}] started", flush=True)
        if rank == 1:
            raise ValueError("boom")
        """)
    command = torchrun_command(script, nproc_per_node=2)
    env = loopback_environment()
    forked = ForkedAgent(command, env=env, cwd=tmp_path)
    forked_out, forked_err = forked.communicate()
    started = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                               cwd=tmp_path, start_new_session=True)
    started_out, started_err = started.communicate()

    assert forked.returncode == started.returncode == 1
    for out in (forked_out, started_out):  # two workers' prints may interleave mid-line
        assert sorted(re.findall(r"\[rank \d\] started", out)) == ["[rank 0] started", "[rank 1] started"]
    for out, err in ((forked_out, forked_err), (started_out, started_err)):
        # torchrun's closing report: the agent's uncaught ChildFailedError, which tail() leaves out
        assert "torch.distributed.elastic.multiprocessing.errors.ChildFailedError" in err
        tail = TorchrunRun(tuple(command), 1, out, err).tail()
        assert tail.endswith("ValueError: boom") and "ChildFailedError" not in tail


def test_a_bad_torchrun_argument_exits_with_argparses_code_and_usage():
    command = torchrun_command("job.py", extra=("--no-such-option",))
    forked = ForkedAgent(command, env=loopback_environment())
    _, err = forked.communicate()
    assert forked.returncode == 2
    assert err.startswith("usage: run.py") and "unrecognized arguments: --no-such-option" in err


def test_a_forked_agent_past_its_timeout_is_stopped_with_its_workers(tmp_path):
    script = _script(tmp_path, """\
        import os, time
        with open(f"{os.environ['RANK']}.pids", "w") as f:
            f.write(f"{os.getpid()} {os.getppid()}")
        time.sleep(60)
        """)
    start = time.monotonic()
    with pytest.raises(TimeoutError, match="still running after 8 s"):
        run_torchrun(script.name, nproc_per_node=2, cwd=tmp_path, timeout=8)
    assert time.monotonic() - start < 20
    pids = [int(pid) for rank in (0, 1) for pid in (tmp_path / f"{rank}.pids").read_text().split()]
    assert len(set(pids)) == 3  # two workers and their agent
    assert all(_gone(pid) for pid in pids), [(pid, _gone(pid)) for pid in pids]


def test_the_workers_of_a_forked_agent_that_was_killed_are_stopped(tmp_path):
    # The worker kills its agent and runs on, holding the agent's output open.
    script = _script(tmp_path, """\
        import os, signal, time
        print(os.getpid(), flush=True)
        os.kill(os.getppid(), signal.SIGKILL)
        time.sleep(60)
        """)
    start = time.monotonic()
    [run] = run_together([torchrun_command(script, nproc_per_node=1)], cwd=tmp_path, timeout=30)
    assert time.monotonic() - start < 15
    assert run.returncode == -9
    worker = int(run.stdout.split()[0])
    time.sleep(0.2)
    assert _gone(worker)
    assert os.getpid() != worker
