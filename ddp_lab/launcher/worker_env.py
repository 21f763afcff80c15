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

Chapters 2 and 3 print these variables; Chapter 11 shows torchrun setting the same.
"""

from __future__ import annotations


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
