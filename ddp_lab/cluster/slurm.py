"""From Slurm's environment to torchrun's: who am I, and where is rank 0?

Slurm describes a job to every task it starts with variables of its own;
PyTorch reads torchrun's (``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``,
``MASTER_ADDR``, ...). There are two ways to bridge them.

1. **One task per node, running torchrun** (the sbatch script of the book,
   ``labs/scripts/train.sbatch``). Slurm starts one ``torchrun`` on each
   node; torchrun starts the processes and sets their variables. It only
   needs the number of nodes, and where to meet: the first node of the job.
   :func:`torchrun_args_from_slurm` builds those arguments.

2. **One task per process, no torchrun** (``srun --ntasks-per-node=4 python
   train.py``). Slurm starts every process itself, so each one translates
   Slurm's variables into torchrun's: :func:`torch_env_from_slurm`, or run
   ``srun python -m ddp_lab.cluster.slurm python train.py ...``, which sets them and
   then runs the command.

The translation, for the task with ``SLURM_PROCID`` p on node ``SLURM_NODEID`` n:

=====================  ================================================
torchrun's variable    from Slurm's
=====================  ================================================
``RANK``               ``SLURM_PROCID``: the task's index in the job
``WORLD_SIZE``         ``SLURM_NTASKS``: tasks in the job
``LOCAL_RANK``         ``SLURM_LOCALID``: the task's index on its node
``LOCAL_WORLD_SIZE``   the tasks on node n, from ``SLURM_TASKS_PER_NODE``
``GROUP_RANK``         ``SLURM_NODEID``: the node's index in the job
``GROUP_WORLD_SIZE``   ``SLURM_NNODES``: nodes in the job
``MASTER_ADDR``        the first host of ``SLURM_JOB_NODELIST``
``MASTER_PORT``        ``MASTER_PORT`` if set, else from ``SLURM_JOB_ID``
=====================  ================================================

The node list comes compressed, as in ``gpu[01-03,07],cpu5``; on a cluster
``scontrol show hostnames`` expands it, and :func:`expand_hostlist` does the
same here without Slurm.

Chapter 13 uses it; ``ddp_lab.cluster.slurm_sandbox`` runs an sbatch script
and the tasks of ``srun`` on one machine. This module imports no torch (from
ddp_lab, only the light ``ddp_lab.validate``): every Slurm task of a job pays
its start-up.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping

from ddp_lab.validate import check_positive_int

__all__ = [
    "SlurmEnvironmentError",
    "expand_hostlist",
    "expand_tasks_per_node",
    "master_port_for_job",
    "torch_env_from_slurm",
    "torchrun_args_from_slurm",
]

# Ports derived from a job id fall in [PORT_BASE, PORT_BASE + PORT_SPAN): above
# the well-known and common service ports, below Linux's ephemeral range
# (32768-60999), from which the OS picks ports for outgoing connections.
PORT_BASE, PORT_SPAN = 20000, 12000


class SlurmEnvironmentError(ValueError):
    """A Slurm variable is missing, malformed, or contradicts another one."""


# ---------------------------------------------------------------- node lists

def expand_hostlist(hostlist: str) -> list[str]:
    """The host names of a Slurm host list, in order (what ``scontrol show hostnames`` prints).

    >>> expand_hostlist("gpu[01-03,07],cpu5")
    ['gpu01', 'gpu02', 'gpu03', 'gpu07', 'cpu5']
    >>> expand_hostlist("rack[1-2]-n[8-9]")
    ['rack1-n8', 'rack1-n9', 'rack2-n8', 'rack2-n9']

    Commas inside brackets separate ranges, outside they separate hosts. A
    range keeps the zero padding of its first number (``[08-10]`` gives
    ``08, 09, 10``). Several bracket groups in one name expand to every
    combination, the first group varying slowest.
    """
    if not isinstance(hostlist, str) or not hostlist.strip():
        raise SlurmEnvironmentError(f"empty host list {hostlist!r}: expected e.g. 'node[01-04]'")
    hosts = []
    for item in _split_top_level(hostlist.strip()):
        hosts += _expand_host(item, hostlist)
    return hosts


def _split_top_level(text: str) -> list[str]:
    """Split at the commas that are not inside brackets."""
    items, depth, start = [], 0, 0
    for i, char in enumerate(text):
        if char == "[":
            depth += 1
            if depth > 1:
                raise SlurmEnvironmentError(f"nested '[' at position {i} of host list {text!r}")
        elif char == "]":
            depth -= 1
            if depth < 0:
                raise SlurmEnvironmentError(f"']' without '[' at position {i} of host list {text!r}")
        elif char == "," and depth == 0:
            items.append(text[start:i])
            start = i + 1
    if depth:
        raise SlurmEnvironmentError(f"'[' is never closed in host list {text!r}")
    items.append(text[start:])
    if any(not item for item in items):
        raise SlurmEnvironmentError(f"empty host name in host list {text!r} (two commas in a row?)")
    return items


def _expand_host(item: str, whole: str) -> list[str]:
    """``n[1-2]-ib[0,3]`` -> n1-ib0, n1-ib3, n2-ib0, n2-ib3."""
    match = re.search(r"\[([^\]]*)\]", item)
    if not match:
        return [item]
    prefix, suffix = item[:match.start()], item[match.end():]
    return [prefix + number + rest
            for number in _expand_ranges(match.group(1), whole)
            for rest in _expand_host(suffix, whole)]


def _expand_ranges(ranges: str, whole: str) -> list[str]:
    """``01-03,07`` -> 01, 02, 03, 07 (padded to the width of each range's first number)."""
    numbers = []
    for part in ranges.split(","):
        match = re.fullmatch(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?", part)
        if not match:
            raise SlurmEnvironmentError(f"bad range {part!r} in host list {whole!r}: expected "
                                        f"a number or first-last, e.g. [01-04,07]")
        first, last = match.group(1), match.group(2) or match.group(1)
        if int(last) < int(first):
            raise SlurmEnvironmentError(f"range {part!r} in host list {whole!r} runs backwards")
        numbers += [str(n).zfill(len(first)) for n in range(int(first), int(last) + 1)]
    return numbers


def expand_tasks_per_node(tasks_per_node: str) -> list[int]:
    """Slurm's ``SLURM_TASKS_PER_NODE``, one count per node.

    >>> expand_tasks_per_node("4(x2),2")
    [4, 4, 2]
    """
    counts = []
    for part in str(tasks_per_node).split(","):
        match = re.fullmatch(r"\s*(\d+)\s*(?:\(x(\d+)\))?\s*", part)
        if not match:
            raise SlurmEnvironmentError(f"SLURM_TASKS_PER_NODE={tasks_per_node!r}: bad part {part!r}, "
                                        f"expected counts like '4(x2),2'")
        counts += [int(match.group(1))] * int(match.group(2) or 1)
    return counts


def master_port_for_job(job_id: int | str) -> int:
    """A port for the job's rendezvous, derived from its id: the same on every node.

    Every node must agree on the port without talking to each other first,
    so it has to come from something they all know: the job id. A fixed port
    (29500, torchrun's default) would collide when two jobs share a node;
    consecutive job ids get different ports here. The range avoids the ports
    the OS hands out for outgoing connections (see PORT_BASE).

    >>> master_port_for_job(123456)
    23456
    """
    try:
        number = int(job_id)
    except (TypeError, ValueError):
        raise SlurmEnvironmentError(f"SLURM_JOB_ID={job_id!r} is not a number") from None
    return PORT_BASE + number % PORT_SPAN


# ---------------------------------------------------------------- the translation

def _get(environ: Mapping, name: str, *alternatives: str) -> str:
    for key in (name, *alternatives):
        if environ.get(key, "").strip():
            return environ[key].strip()
    also = f" (or {', '.join(alternatives)})" if alternatives else ""
    raise SlurmEnvironmentError(f"{name}{also} is not set: is this running inside a Slurm job step (srun)?")


def _get_int(environ: Mapping, name: str, *alternatives: str, minimum: int = 0) -> int:
    text = _get(environ, name, *alternatives)
    try:
        value = int(text)
    except ValueError:
        raise SlurmEnvironmentError(f"{name}={text!r} is not a whole number") from None
    if value < minimum:
        raise SlurmEnvironmentError(f"{name}={value} must be at least {minimum}")
    return value


def _master(environ: Mapping, master_port: int | None) -> tuple[str, str]:
    hosts = expand_hostlist(_get(environ, "SLURM_JOB_NODELIST", "SLURM_NODELIST"))
    if master_port is None and environ.get("MASTER_PORT", "").strip():
        master_port = environ["MASTER_PORT"].strip()
    port = str(master_port) if master_port is not None else str(master_port_for_job(_get(environ, "SLURM_JOB_ID")))
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise SlurmEnvironmentError(f"MASTER_PORT={port!r} is not a port number (1-65535)")
    return hosts[0], port


def torch_env_from_slurm(environ: Mapping | None = None, *, master_port: int | None = None) -> dict[str, str]:
    """torchrun's variables for this Slurm task (one task per training process).

    ``environ`` defaults to ``os.environ``. ``MASTER_PORT`` is, in order:
    the ``master_port`` argument, ``MASTER_PORT`` from the environment, or
    :func:`master_port_for_job` of ``SLURM_JOB_ID``. Raises
    SlurmEnvironmentError (a ValueError) naming the variable that is
    missing, malformed or inconsistent.

    >>> env = {"SLURM_PROCID": "5", "SLURM_LOCALID": "1", "SLURM_NODEID": "1", "SLURM_NTASKS": "8",
    ...        "SLURM_NNODES": "2", "SLURM_TASKS_PER_NODE": "4(x2)", "SLURM_JOB_ID": "4242",
    ...        "SLURM_JOB_NODELIST": "gpu[07-08]"}
    >>> torch_env_from_slurm(env)["RANK"], torch_env_from_slurm(env)["MASTER_ADDR"]
    ('5', 'gpu07')
    """
    environ = os.environ if environ is None else environ
    rank = _get_int(environ, "SLURM_PROCID")
    world_size = _get_int(environ, "SLURM_NTASKS", "SLURM_NPROCS", minimum=1)
    local_rank = _get_int(environ, "SLURM_LOCALID")
    node = _get_int(environ, "SLURM_NODEID")
    nodes = _get_int(environ, "SLURM_NNODES", "SLURM_JOB_NUM_NODES", minimum=1)
    per_node = expand_tasks_per_node(_get(environ, "SLURM_TASKS_PER_NODE"))
    master_addr, port = _master(environ, master_port)

    if rank >= world_size:
        raise SlurmEnvironmentError(f"SLURM_PROCID={rank} is not below SLURM_NTASKS={world_size}")
    if node >= nodes:
        raise SlurmEnvironmentError(f"SLURM_NODEID={node} is not below SLURM_NNODES={nodes}")
    if len(per_node) != nodes or sum(per_node) != world_size:
        raise SlurmEnvironmentError(f"SLURM_TASKS_PER_NODE={environ['SLURM_TASKS_PER_NODE']!r} gives "
                                    f"{sum(per_node)} tasks on {len(per_node)} nodes, but SLURM_NTASKS="
                                    f"{world_size} and SLURM_NNODES={nodes}")
    if local_rank >= per_node[node]:
        raise SlurmEnvironmentError(f"SLURM_LOCALID={local_rank} is not below the {per_node[node]} "
                                    f"task(s) of node {node} (SLURM_TASKS_PER_NODE)")
    values = {
        "RANK": rank,
        "WORLD_SIZE": world_size,
        "LOCAL_RANK": local_rank,
        "LOCAL_WORLD_SIZE": per_node[node],
        "GROUP_RANK": node,
        "NODE_RANK": node,
        "GROUP_WORLD_SIZE": nodes,
        "MASTER_ADDR": master_addr,
        "MASTER_PORT": port,
    }
    return {name: str(value) for name, value in values.items()}


def torchrun_args_from_slurm(environ: Mapping | None = None, *, nproc_per_node: int,
                             master_port: int | None = None) -> list[str]:
    """The arguments of the torchrun that one Slurm task per node runs.

    Every node gets the same command: the c10d rendezvous on the first node
    of the job, named by the job id, assigns the node ranks itself.

    >>> torchrun_args_from_slurm({"SLURM_NNODES": "2", "SLURM_JOB_ID": "77",
    ...                           "SLURM_JOB_NODELIST": "gpu[07-08]"}, nproc_per_node=4)
    ['--nnodes', '2', '--nproc_per_node', '4', '--rdzv_id', '77', '--rdzv_backend', 'c10d', '--rdzv_endpoint', 'gpu07:20077']
    """
    environ = os.environ if environ is None else environ
    check_positive_int('nproc_per_node', nproc_per_node)
    nodes = _get_int(environ, "SLURM_NNODES", "SLURM_JOB_NUM_NODES", minimum=1)
    master_addr, port = _master(environ, master_port)
    return ["--nnodes", str(nodes), "--nproc_per_node", str(nproc_per_node),
            "--rdzv_id", _get(environ, "SLURM_JOB_ID"), "--rdzv_backend", "c10d",
            "--rdzv_endpoint", f"{master_addr}:{port}"]


def main(argv=None):
    """``python -m ddp_lab.cluster.slurm COMMAND [ARGS...]``: run COMMAND with torchrun's variables set."""
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print("usage: srun python -m ddp_lab.cluster.slurm COMMAND [ARGS...]\n\n"
              "Run COMMAND (e.g. python train.py) with RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,\n"
              "GROUP_RANK, MASTER_ADDR and MASTER_PORT set from this Slurm task's variables.")
        return 0 if argv else 2
    environment = dict(os.environ)
    environment.update(torch_env_from_slurm(environment))
    os.execvpe(argv[0], argv, environment)


if __name__ == "__main__":
    sys.exit(main())
