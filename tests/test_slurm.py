"""Slurm's variables mapped to torchrun's (ddp_lab.cluster.slurm), and the sbatch script.

Sample environments are what Slurm sets for the tasks of real job shapes;
the sbatch script runs against stand-ins for ``scontrol`` and ``srun`` that
record the torchrun command, which torchrun's own parser then reads.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ddp_lab.cluster.slurm import (
    SlurmEnvironmentError,
    expand_hostlist,
    expand_tasks_per_node,
    master_port_for_job,
    torch_env_from_slurm,
    torchrun_args_from_slurm,
)
from ddp_lab.cluster.slurm_sandbox import dry_run_sbatch

SBATCH = Path(__file__).resolve().parents[1] / "labs" / "scripts" / "train.sbatch"


# ---------------------------------------------------------------- host lists

@pytest.mark.parametrize("hostlist, hosts", [
    ("node7", ["node7"]),
    ("node[1-3]", ["node1", "node2", "node3"]),
    ("gpu[01-03,07],cpu5", ["gpu01", "gpu02", "gpu03", "gpu07", "cpu5"]),
    ("node[08-11]", ["node08", "node09", "node10", "node11"]),
    ("node[8-11]", ["node8", "node9", "node10", "node11"]),  # no padding asked for
    ("node[098-101]", ["node098", "node099", "node100", "node101"]),
    ("rack[1-2]-n[8-9]", ["rack1-n8", "rack1-n9", "rack2-n8", "rack2-n9"]),
    ("a[1],b,c[3-4]", ["a1", "b", "c3", "c4"]),
    ("node[5]", ["node5"]),
    ("[1-2]x", ["1x", "2x"]),
    ("gpu-a100-[001-002].cluster", ["gpu-a100-001.cluster", "gpu-a100-002.cluster"]),
])
def test_expand_hostlist(hostlist, hosts):
    assert expand_hostlist(hostlist) == hosts


@pytest.mark.parametrize("hostlist, says", [
    ("", "empty host list"),
    ("node[1-3", "never closed"),
    ("node1-3]", "']' without '['"),
    ("node[3-1]", "runs backwards"),
    ("node[a-b]", "bad range 'a-b'"),
    ("node[]", "bad range ''"),
    ("node[1-2,]", "bad range ''"),
    ("node1,,node2", "two commas"),
    ("node[[1]]", "nested"),
])
def test_expand_hostlist_errors_say_what_is_wrong(hostlist, says):
    with pytest.raises(SlurmEnvironmentError, match=says.replace("[", r"\[").replace("]", r"\]")) as error:
        expand_hostlist(hostlist)
    assert isinstance(error.value, ValueError)


def test_tasks_per_node():
    assert expand_tasks_per_node("4(x2),2") == [4, 4, 2]
    assert expand_tasks_per_node("8") == [8]
    assert expand_tasks_per_node("1(x3)") == [1, 1, 1]
    with pytest.raises(SlurmEnvironmentError, match="SLURM_TASKS_PER_NODE='4x2'"):
        expand_tasks_per_node("4x2")


def test_master_port_is_the_same_everywhere_and_below_the_ephemeral_range():
    assert master_port_for_job("123456") == master_port_for_job(123456) == 23456
    ports = {master_port_for_job(job) for job in range(1000, 1100)}
    assert len(ports) == 100 and all(20000 <= port < 32768 for port in ports)
    with pytest.raises(SlurmEnvironmentError, match="SLURM_JOB_ID='abc'"):
        master_port_for_job("abc")


# ---------------------------------------------------------------- sample environments

def task_env(procid, *, nodes=2, per_node=4, nodelist="gpu[07-08]", job_id="4242", **extra):
    """What Slurm sets for task ``procid`` of ``srun --nodes N --ntasks-per-node G`` (block layout)."""
    env = {
        "SLURM_JOB_ID": job_id, "SLURM_JOB_NAME": "ddp-train",
        "SLURM_JOB_NODELIST": nodelist, "SLURM_NODELIST": nodelist,
        "SLURM_NNODES": str(nodes), "SLURM_JOB_NUM_NODES": str(nodes),
        "SLURM_NTASKS": str(nodes * per_node), "SLURM_NPROCS": str(nodes * per_node),
        "SLURM_TASKS_PER_NODE": f"{per_node}(x{nodes})" if nodes > 1 else str(per_node),
        "SLURM_NTASKS_PER_NODE": str(per_node),
        "SLURM_PROCID": str(procid), "SLURM_LOCALID": str(procid % per_node),
        "SLURM_NODEID": str(procid // per_node),
    }
    env.update(extra)
    return env


def test_two_nodes_of_four_tasks():
    table = [torch_env_from_slurm(task_env(p)) for p in range(8)]
    assert [(e["RANK"], e["LOCAL_RANK"], e["GROUP_RANK"]) for e in table] == [
        ("0", "0", "0"), ("1", "1", "0"), ("2", "2", "0"), ("3", "3", "0"),
        ("4", "0", "1"), ("5", "1", "1"), ("6", "2", "1"), ("7", "3", "1")]
    for env in table:
        assert env["WORLD_SIZE"] == "8" and env["LOCAL_WORLD_SIZE"] == "4" and env["GROUP_WORLD_SIZE"] == "2"
        assert env["NODE_RANK"] == env["GROUP_RANK"]
        assert env["MASTER_ADDR"] == "gpu07"  # the first node, on every task
        assert env["MASTER_PORT"] == str(20000 + 4242 % 12000)


def test_uneven_tasks_per_node():
    env = task_env(4, nodes=3, per_node=2, nodelist="cpu[1-3]",
                   SLURM_NTASKS="5", SLURM_TASKS_PER_NODE="2(x2),1", SLURM_LOCALID="0", SLURM_NODEID="2")
    out = torch_env_from_slurm(env)
    assert (out["RANK"], out["LOCAL_RANK"], out["LOCAL_WORLD_SIZE"], out["GROUP_RANK"]) == ("4", "0", "1", "2")
    assert out["MASTER_ADDR"] == "cpu1"


def test_master_port_given_or_from_the_environment():
    assert torch_env_from_slurm(task_env(0), master_port=29500)["MASTER_PORT"] == "29500"
    assert torch_env_from_slurm(task_env(0, MASTER_PORT="31000"))["MASTER_PORT"] == "31000"
    with pytest.raises(SlurmEnvironmentError, match="MASTER_PORT='99999'"):
        torch_env_from_slurm(task_env(0, MASTER_PORT="99999"))


def test_only_the_long_names_of_older_slurm():
    env = task_env(1)
    for name in ("SLURM_JOB_NODELIST", "SLURM_NTASKS", "SLURM_NNODES"):
        del env[name]
    out = torch_env_from_slurm(env)  # SLURM_NODELIST, SLURM_NPROCS, SLURM_JOB_NUM_NODES
    assert (out["RANK"], out["WORLD_SIZE"], out["MASTER_ADDR"]) == ("1", "8", "gpu07")


@pytest.mark.parametrize("change, says", [
    ({"SLURM_PROCID": None}, "SLURM_PROCID is not set"),
    ({"SLURM_JOB_NODELIST": None, "SLURM_NODELIST": None}, "SLURM_JOB_NODELIST (or SLURM_NODELIST) is not set"),
    ({"SLURM_JOB_ID": None}, "SLURM_JOB_ID is not set"),
    ({"SLURM_PROCID": "three"}, "SLURM_PROCID='three' is not a whole number"),
    ({"SLURM_PROCID": "8"}, "SLURM_PROCID=8 is not below SLURM_NTASKS=8"),
    ({"SLURM_NODEID": "2"}, "SLURM_NODEID=2 is not below SLURM_NNODES=2"),
    ({"SLURM_LOCALID": "4"}, "SLURM_LOCALID=4 is not below the 4 task"),
    ({"SLURM_TASKS_PER_NODE": "4(x3)"}, "gives 12 tasks on 3 nodes"),
    ({"SLURM_JOB_NODELIST": "gpu[07-08"}, "never closed"),
    ({"SLURM_NTASKS": "0"}, "SLURM_NTASKS=0 must be at least 1"),
])
def test_errors_name_the_variable(change, says):
    env = task_env(3)
    for name, value in change.items():
        if value is None:
            env.pop(name)
        else:
            env[name] = value
    with pytest.raises(SlurmEnvironmentError, match=says.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        torch_env_from_slurm(env)


def test_torchrun_arguments_for_one_task_per_node():
    env = task_env(0, nodes=2, per_node=1)
    assert torchrun_args_from_slurm(env, nproc_per_node=4) == [
        "--nnodes", "2", "--nproc_per_node", "4", "--rdzv_id", "4242", "--rdzv_backend", "c10d",
        "--rdzv_endpoint", f"gpu07:{20000 + 4242 % 12000}"]
    with pytest.raises(ValueError, match="nproc_per_node"):
        torchrun_args_from_slurm(env, nproc_per_node=0)


def test_module_sets_the_variables_then_runs_the_command():
    env = {**os.environ, **task_env(6)}
    command = [sys.executable, "-m", "ddp_lab.cluster.slurm", sys.executable, "-c",
               "import os; print(os.environ['RANK'], os.environ['LOCAL_RANK'], os.environ['MASTER_ADDR'])"]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["6", "2", "gpu07"]


# ---------------------------------------------------------------- the sbatch script

def test_sbatch_script_starts_torchrun_once_per_node_with_rendezvous_on_the_first():
    assert subprocess.run(["bash", "-n", str(SBATCH)]).returncode == 0
    job = {"SLURM_JOB_ID": "4242", "SLURM_JOB_NAME": "ddp-train", "SLURM_JOB_NODELIST": "gpu[07-08]",
           "SLURM_NNODES": "2", "SLURM_GPUS_ON_NODE": "4", "SLURM_CPUS_PER_TASK": "32",
           "SNAPSHOT": "/shared/ddp/snapshot.pt"}
    run = dry_run_sbatch(SBATCH, job)
    assert run["stdout"] == "job 4242: 2 nodes x 4 processes, rendezvous at gpu07:24242\n"
    argv = run["srun"]
    assert argv[:4] == ["--kill-on-bad-exit=1", "-c", "32", "torchrun"]  # -c: srun 22.05/23.02 do not inherit it
    from torch.distributed.run import get_args_parser

    args = get_args_parser().parse_args(argv[4:])  # torchrun's own parser reads the command
    assert (args.nnodes, args.nproc_per_node, args.rdzv_backend) == ("2", "4", "c10d")
    assert (args.rdzv_endpoint, args.rdzv_id, args.max_restarts) == ("gpu07:24242", "4242", 3)
    assert args.training_script == "train.py"
    assert args.training_script_args == ["--snapshot", "/shared/ddp/snapshot.pt", "--epochs", "10"]
    assert run["env"] == {"OMP_NUM_THREADS": "8", "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}


def test_sbatch_dry_run_reports_a_failing_script(tmp_path):
    script = tmp_path / "bad.sbatch"
    script.write_text("#!/bin/bash\nset -u\necho $SLURM_NOT_SET\n")
    with pytest.raises(RuntimeError, match="SLURM_NOT_SET: unbound variable"):
        dry_run_sbatch(script, {})


def test_sbatch_script_requeues_itself_on_the_signal_before_the_time_limit():
    # Issue 36, item 2: a job that reaches its time limit ends in TIMEOUT and is
    # not requeued; the script asks for SIGUSR1 120 s before and requeues itself.
    text = SBATCH.read_text()
    assert "#SBATCH --signal=B:USR1@120" in text and "#SBATCH --requeue" in text
    job = {"SLURM_JOB_ID": "4242", "SLURM_JOB_NAME": "ddp-train", "SLURM_JOB_NODELIST": "gpu[07-08]",
           "SLURM_NNODES": "2", "SLURM_GPUS_ON_NODE": "4", "SLURM_CPUS_PER_TASK": "32"}
    assert dry_run_sbatch(SBATCH, job)["requeued"] == []  # no signal, no requeue
    run = dry_run_sbatch(SBATCH, job, usr1_after=1)
    assert run["requeued"] == ["4242"]
    assert run["stdout"].endswith("time limit near: requeueing job 4242\n")
