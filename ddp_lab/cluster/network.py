"""The network of a multi-node job: interfaces and ports (Chapter 12).

Two questions a multi-node job raises, one function each (the third, what
the links between the nodes cost, is arithmetic: ``ddp_lab.cost.links``):

* **Which interface?** A cluster node often has several (loopback, Ethernet,
  InfiniBand, a container bridge). :func:`interfaces` lists them with their
  IPv4 addresses; ``GLOO_SOCKET_IFNAME`` and ``NCCL_SOCKET_IFNAME`` name
  the one to use.
* **Which ports?** :func:`rank_sockets`, run inside a rank, reports the TCP
  sockets the process holds: the port it listens on (chosen by the OS for
  the backend's connections, a different one every run), its connections
  to the other ranks, and to the rendezvous store at ``MASTER_PORT``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

__all__ = ["interfaces", "RankSockets", "rank_sockets"]


def interfaces() -> dict[str, list[str]]:
    """This machine's network interfaces and their IPv4 addresses (needs psutil)."""
    import socket

    import psutil

    return {name: [a.address for a in addresses if a.family == socket.AF_INET]
            for name, addresses in psutil.net_if_addrs().items()}


@dataclass(frozen=True)
class RankSockets:
    """The TCP sockets of one rank: what it listens on and whom it talks to."""

    rank: int
    listening: tuple[int, ...]       # ports this process listens on
    to_store: int                    # connections to MASTER_PORT (the rendezvous store)
    to_ranks: int                    # other connections: the backend's, to the other ranks
    ephemeral: tuple[int, int]       # the OS's range for ports it picks

    @property
    def listening_in_ephemeral_range(self) -> bool:
        low, high = self.ephemeral
        return all(low <= port <= high for port in self.listening)


def _ephemeral_range() -> tuple[int, int]:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as file:
            low, high = map(int, file.read().split())
            return low, high
    except OSError:  # not Linux: IANA's range, used by macOS and Windows
        return 49152, 65535


def rank_sockets() -> RankSockets:
    """Run inside a rank (after the process group exists): its TCP sockets."""
    import psutil
    import torch.distributed as dist

    store_port = int(os.environ["MASTER_PORT"])
    process = psutil.Process()
    # net_connections since psutil 6.0; before it (Colab's 5.9.5), the same under its old name
    connections = getattr(process, "net_connections", process.connections)(kind="tcp")
    listening = tuple(sorted(c.laddr.port for c in connections if c.status == psutil.CONN_LISTEN))
    established = [c for c in connections if c.status == psutil.CONN_ESTABLISHED and c.raddr]
    to_store = sum(c.raddr.port == store_port for c in established)
    to_ranks = sum(c.raddr.port != store_port and c.laddr.port != store_port for c in established)
    return RankSockets(dist.get_rank(), listening, to_store, to_ranks, _ephemeral_range())
