"""The environment variables a rank sees, exactly as torchrun sets them.

torchrun tells every process who it is through environment variables.
``ddp_lab`` sets the same ones, so code from this book runs unchanged under
``torchrun``, and code written for torchrun runs unchanged from a notebook.

- ``WORLD_SIZE``: how many processes take part in the job, on all nodes.
- ``RANK``: this process's global rank, ``0 .. WORLD_SIZE-1``.
- ``LOCAL_WORLD_SIZE``: how many processes run on this node.
- ``LOCAL_RANK``: this process's rank on its node, ``0 .. LOCAL_WORLD_SIZE-1``;
  on a GPU machine it is also the index of the GPU the process drives.
- ``GROUP_RANK``: the index of this node (torchrun's ``--node_rank``).
- ``MASTER_ADDR`` / ``MASTER_PORT``: where the rendezvous store listens.

``worker_environment`` composes a rank's whole environment: the notebook's,
then these variables (or, under ``ddp_lab.spawn``, what ``mp.spawn`` gives),
then the network interface and the GPUs it may use.

Chapters 2 and 3 print these variables; Chapter 11 shows torchrun setting the same.
"""

from __future__ import annotations

import os

from ddp_lab.host import loopback_interface, uses_nccl
from ddp_lab.launcher.config import say_once


def worker_environment(config, rank, master_port, notebook_env=None):
    """Everything rank ``rank`` of a launch (a ``config.LaunchConfig``) finds in ``os.environ``.

    The notebook's environment (``notebook_env``, by default ``os.environ``)
    with torchrun's variables on top, and the store at ``master_port``; under
    ``ddp_lab.spawn`` (``config.style == "spawn"``) what ``spawn_environment``
    says instead. Then the interface and the GPUs (``network_and_devices``).
    """
    notebook_env = os.environ if notebook_env is None else notebook_env
    if config.style == "spawn":
        env = spawn_environment(notebook_env, rank, config.world_size)
    else:
        env = dict(notebook_env)
        env.update(torchrun_environment(
            rank, config.world_size, nodes=config.nodes, master_port=master_port))
    env.update(network_and_devices(config, rank, notebook_env))
    return env


def torchrun_environment(rank, world_size, *, nodes=1, master_addr="127.0.0.1",
                         master_port, restart_count=0):
    """The variables torchrun would give global rank ``rank`` of ``world_size``.

    ``nodes`` splits the ranks into that many equal nodes, in order: with
    ``world_size=4, nodes=2``, ranks 0 and 1 are local ranks 0 and 1 of node 0,
    ranks 2 and 3 are local ranks 0 and 1 of node 1.

    >>> env = torchrun_environment(3, 4, nodes=2, master_port=29500)
    >>> env["RANK"], env["LOCAL_RANK"], env["GROUP_RANK"]
    ('3', '1', '1')
    """
    per_node = world_size // nodes
    values = {
        "RANK": rank,
        "WORLD_SIZE": world_size,
        "LOCAL_RANK": rank % per_node,
        "LOCAL_WORLD_SIZE": per_node,
        "GROUP_RANK": rank // per_node,
        "GROUP_WORLD_SIZE": nodes,
        "ROLE_NAME": "default",
        "ROLE_RANK": rank,
        "ROLE_WORLD_SIZE": world_size,
        "MASTER_ADDR": master_addr,
        "MASTER_PORT": master_port,
        "TORCHELASTIC_RESTART_COUNT": restart_count,
        "TORCHELASTIC_MAX_RESTARTS": 0,
        # Like torchrun's agent, the launcher hosts the rendezvous store itself;
        # this tells init_process_group("env://") to connect to it as a client.
        "TORCHELASTIC_USE_AGENT_STORE": True,
    }
    return {name: str(value) for name, value in values.items()}


def spawn_environment(notebook_env, rank, world_size):
    """What a rank of ``ddp_lab.spawn`` sees: the notebook's environment, as under mp.spawn.

    ``torch.multiprocessing.spawn`` sets no variable: its processes inherit
    the parent's environment, and the function chooses where to meet
    (``MASTER_ADDR``/``MASTER_PORT``, or an ``init_method``). So does
    ``ddp_lab.spawn``, with two changes:

    - every ``TORCHELASTIC_*`` variable is removed. With
      ``TORCHELASTIC_USE_AGENT_STORE=True`` (which ``launch`` sets, as
      torchrun does), ``init_process_group`` connects every rank, rank 0
      included, as a *client* to a store it expects the launcher to host
      (``torch/distributed/rendezvous.py``, ``_create_c10d_store``); with
      the ranks' own address and port nobody hosts it, and they wait until
      the timeout. Without the variable rank 0 hosts the store, as the
      mp.spawn tutorials expect;
    - ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK`` and ``LOCAL_WORLD_SIZE`` are
      set (one node), so ``init_process_group("gloo")`` without ``rank=``
      and ``world_size=`` works too once an address is chosen.

    >>> env = spawn_environment({"TORCHELASTIC_USE_AGENT_STORE": "True", "HOME": "/root"}, 1, 2)
    >>> sorted(env.items())
    [('HOME', '/root'), ('LOCAL_RANK', '1'), ('LOCAL_WORLD_SIZE', '2'), ('RANK', '1'), ('WORLD_SIZE', '2')]
    """
    env = {name: value for name, value in notebook_env.items()
           if not name.startswith("TORCHELASTIC_")}
    env.update(RANK=str(rank), WORLD_SIZE=str(world_size),
               LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world_size))
    return env


def network_and_devices(config, rank, notebook_env):
    """Keep a local launch on loopback; give simulated nodes their own GPUs.

    gloo and nccl pick the interface named in ``GLOO_SOCKET_IFNAME`` and
    ``NCCL_SOCKET_IFNAME``; left unset, they may choose a network card and
    announce an address no other rank can reach. Every rank of a launch is
    on this machine, so both name the loopback interface, whatever the
    notebook inherited from its shell (a value meant for a real cluster's
    network card would make the ranks listen there, off loopback): an
    overridden value is said once, in the output. With nccl and
    ``nodes > 1``, each simulated node sees only its own GPUs, numbered from
    0, so ``LOCAL_RANK`` picks the GPU exactly as on a real node (Chapter 12).
    """
    env = {}
    loopback = loopback_interface()
    if loopback:
        for name in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"):
            env[name] = loopback
            if notebook_env.get(name, loopback) != loopback:
                say_once(f"ddp_lab: {name}={notebook_env[name]!r} in the environment is not used: "
                         f"a launch's ranks all run here and talk over the loopback interface ({loopback!r})")
    if uses_nccl(config.backend) and config.nodes > 1:
        first = rank // config.ranks_per_node * config.ranks_per_node
        env["CUDA_VISIBLE_DEVICES"] = ",".join(
            str(first + i) for i in range(config.ranks_per_node))
    return env
