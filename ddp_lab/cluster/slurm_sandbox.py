"""A Slurm job on one machine without Slurm: the sbatch script dry-run, the tasks of srun started here (Chapter 13).

``ddp_lab.cluster.slurm`` translates Slurm's variables; this module lets
Chapter 13 show that translation at work on a laptop. ``dry_run_sbatch``
runs an sbatch script with stand-ins for ``scontrol`` and ``srun`` and
reports what ``srun`` would have been asked to start; ``srun_here`` starts
the tasks of a job step as processes of this machine, each with the
variables srun would give it (``task_environment``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path

from ddp_lab.cluster.torchrun import free_port, run_together
from ddp_lab.validate import check_positive_int

__all__ = ["dry_run_sbatch", "task_environment", "srun_here"]


def dry_run_sbatch(script, environ: Mapping, *, timeout: float = 60.0, usr1_after: float | None = None) -> dict:
    """Run an sbatch script here, with stand-ins for Slurm's ``scontrol`` and ``srun``.

    ``environ`` holds the Slurm variables of the job (``SLURM_JOB_ID``,
    ``SLURM_JOB_NODELIST``, ``SLURM_NNODES``, ...). The stand-in ``scontrol
    show hostnames`` expands the host list with :func:`ddp_lab.cluster.slurm.expand_hostlist`,
    and ``scontrol requeue JOBID`` records the request; the stand-in ``srun``
    starts nothing: it records the command it was given and the environment
    it would pass on. ``usr1_after``: send SIGUSR1 to the script that many
    seconds after it starts, as ``#SBATCH --signal=B:USR1@...`` makes Slurm
    do before the time limit (the stand-in ``srun`` then runs for a few
    seconds, as a job step would). Returns ``{"srun": argv after "srun",
    "env": {name: value}, "stdout": what the script printed, "requeued":
    the job ids it asked to requeue}``. Raises RuntimeError with the
    script's stderr if it fails.
    """
    with tempfile.TemporaryDirectory(prefix="ddp_lab_sbatch_") as tmp:
        folder = Path(tmp)
        tools = {
            "scontrol": ("import os, sys\nfrom ddp_lab.cluster.slurm import expand_hostlist\n"
                         "if sys.argv[1:2] == ['requeue']:\n"
                         "    open(os.environ['DDP_LAB_REQUEUE_RECORD'], 'a').write(sys.argv[2] + '\\n')\n"
                         "elif sys.argv[1:3] == ['show', 'hostnames']:\n"
                         "    print('\\n'.join(expand_hostlist(sys.argv[3])))\n"
                         "else:\n"
                         "    raise SystemExit('stand-in scontrol: only show hostnames and requeue')\n"),
            "srun": ("import json, os, sys, time\n"
                     "json.dump({'srun': sys.argv[1:], 'env': dict(os.environ)},"
                     " open(os.environ['DDP_LAB_SRUN_RECORD'], 'w'))\n"
                     "time.sleep(float(os.environ['DDP_LAB_SRUN_SECONDS']))\n"),
        }
        for name, body in tools.items():
            tool = folder / name
            tool.write_text(f"#!{sys.executable}\n{body}")
            tool.chmod(0o755)
        package_root = str(Path(__file__).resolve().parents[2])  # what holds ddp_lab/
        env = {"PATH": f"{folder}{os.pathsep}{os.environ.get('PATH', '')}", "HOME": str(folder),
               "PYTHONPATH": package_root, "DDP_LAB_SRUN_RECORD": str(folder / "srun.json"),
               "DDP_LAB_REQUEUE_RECORD": str(folder / "requeued"),
               "DDP_LAB_SRUN_SECONDS": "0" if usr1_after is None else str(usr1_after + 10), **environ}
        stdout, stderr, code = _run_script(script, env, folder, timeout, usr1_after)
        if code != 0:
            raise RuntimeError(f"{script} exited with code {code}:\n{stderr.strip()}")
        record = json.loads((folder / "srun.json").read_text())
        requeue_file = folder / "requeued"
        requeued = requeue_file.read_text().split() if requeue_file.exists() else []
    ignore = {"PWD", "OLDPWD", "SHLVL", "_"}  # set by bash itself
    passed = {name: value for name, value in record["env"].items()
              if env.get(name) != value and name not in ignore and not name.startswith("LC_")
              and not name.startswith("DDP_LAB_")}
    return {"srun": record["srun"], "env": passed, "stdout": stdout, "requeued": requeued}


def _run_script(script, env, folder, timeout, usr1_after):
    """bash SCRIPT in a session of its own; SIGUSR1 after ``usr1_after`` s; nothing of it left after."""
    process = subprocess.Popen(["bash", os.fspath(script)], env=env, cwd=folder, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        if usr1_after is not None:
            try:
                process.wait(usr1_after)
            except subprocess.TimeoutExpired:
                process.send_signal(signal.SIGUSR1)
        process.wait(timeout)
    finally:
        try:
            os.killpg(process.pid, signal.SIGKILL)  # the stand-in srun, if the script left it running
        except ProcessLookupError:
            pass
        stdout, stderr = process.communicate()  # its pipes close with the last of them
    return stdout, stderr, process.returncode


def task_environment(procid: int, *, nodes: int, tasks_per_node: int, job_id: int | str,
                     nodelist: str) -> dict[str, str]:
    """The variables srun sets for task ``procid`` of a step of ``nodes`` x ``tasks_per_node`` tasks.

    Tasks are placed in blocks (srun's default): tasks 0 .. k-1 on the first
    node, k .. 2k-1 on the second, and so on.
    """
    total = nodes * tasks_per_node
    return {
        "SLURM_JOB_ID": str(job_id), "SLURM_JOB_NODELIST": nodelist, "SLURM_NODELIST": nodelist,
        "SLURM_NNODES": str(nodes), "SLURM_JOB_NUM_NODES": str(nodes),
        "SLURM_NTASKS": str(total), "SLURM_NPROCS": str(total),
        "SLURM_TASKS_PER_NODE": f"{tasks_per_node}(x{nodes})" if nodes > 1 else str(tasks_per_node),
        "SLURM_NTASKS_PER_NODE": str(tasks_per_node),
        "SLURM_PROCID": str(procid), "SLURM_LOCALID": str(procid % tasks_per_node),
        "SLURM_NODEID": str(procid // tasks_per_node),
    }


def srun_here(command, *, nodes: int = 2, tasks_per_node: int = 2, job_id: int = 4242, cwd=None,
              timeout: float = 120.0):
    """Start the tasks of a Slurm job step on this machine, as srun would on ``nodes`` nodes.

    Each of the ``nodes x tasks_per_node`` copies of ``command`` gets the
    variables of :func:`task_environment`. The node list names this machine
    once per node (``localhost,localhost``), so that the first host, the
    ``MASTER_ADDR`` of :func:`torch_env_from_slurm`, is reachable here; the
    port is a free one, passed as ``MASTER_PORT``. Returns one
    :class:`ddp_lab.cluster.torchrun.TorchrunRun` per task, in task order.
    """
    for name, value in (("nodes", nodes), ("tasks_per_node", tasks_per_node)):
        check_positive_int(name, value)
    nodelist = ",".join(["localhost"] * nodes)
    port = str(free_port())
    envs = [{**task_environment(p, nodes=nodes, tasks_per_node=tasks_per_node, job_id=job_id,
                                nodelist=nodelist), "MASTER_PORT": port}
            for p in range(nodes * tasks_per_node)]
    return run_together([list(command)] * len(envs), envs=envs, cwd=cwd, timeout=timeout)
