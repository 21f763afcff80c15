"""The network of a multi-node job: interfaces, ports, and what links cost.

Three questions a multi-node job raises, one function each:

* **Which interface?** A cluster node often has several (loopback, Ethernet,
  InfiniBand, a container bridge). :func:`interfaces` lists them with their
  IPv4 addresses; ``GLOO_SOCKET_IFNAME`` and ``NCCL_SOCKET_IFNAME`` name
  the one to use.
* **Which ports?** :func:`rank_sockets`, run inside a rank, reports the TCP
  sockets the process holds: the port it listens on (chosen by the OS for
  the backend's connections, a different one every run), its connections
  to the other ranks, and to the rendezvous store at ``MASTER_PORT``.
* **Which links?** :func:`allreduce_seconds` applies the ring all-reduce cost
  model of :mod:`ddp_lab.cost` to a job laid out over nodes: a ring runs at
  the speed of its slowest link, and as soon as a job spans two machines,
  that link is the network between them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from .cost import collective_time

__all__ = ["Link", "LINKS", "interfaces", "RankSockets", "rank_sockets", "allreduce_seconds"]


@dataclass(frozen=True)
class Link:
    """A kind of link: its name, where it is, its bandwidth and latency, and the source.

    ``bandwidth`` in bytes/s, one direction, per GPU (NVLink, PCIe) or per
    network card; ``latency`` in seconds per step of a ring collective.
    """

    name: str
    bandwidth: float
    latency: float
    where: str = ""
    source: str = ""


# The book's one table of link speeds: Chapter 1 teaches it, Chapters 12 and
# the scaling model use it. Bandwidths are the vendors' rated figures, one
# direction (vendors quote NVLink and PCIe for both directions together:
# halved here). Real transfers reach somewhat less. Latencies are the
# per-step latency NCCL's own tuning model charges a ring step with its
# Simple protocol (hwLat in NVIDIA/nccl src/graph/tuning.cc: 3.4 us over
# NVLink, 5.7 us over PCIe, 9.6 us over the network), orders of magnitude
# to reason with; gloo over TCP is slower still.
_NVLINK_LAT, _PCIE_LAT, _NET_LAT = 3.4e-6, 5.7e-6, 9.6e-6
LINKS = {
    "nvlink": Link("NVLink 4 (H100 SXM)", 450e9, _NVLINK_LAT, "inside a node",
                   "NVIDIA H100 Tensor Core GPU datasheet: NVLink 900 GB/s (both directions)"),
    "nvlink3": Link("NVLink 3 (A100 SXM)", 300e9, _NVLINK_LAT, "inside a node",
                    "NVIDIA A100 Tensor Core GPU datasheet: NVLink 600 GB/s (both directions)"),
    "pcie": Link("PCIe 4.0 x16", 32e9, _PCIE_LAT, "inside a node",
                 "PCI-SIG, PCIe 4.0: 16 GT/s per lane, 64 GB/s for x16 (both directions)"),
    "infiniband": Link("InfiniBand NDR 400 Gb/s", 50e9, _NET_LAT, "between nodes",
                       "NVIDIA ConnectX-7 / Quantum-2 NDR: 400 Gb/s per port"),
    "infiniband_hdr": Link("InfiniBand HDR 200 Gb/s", 25e9, _NET_LAT, "between nodes",
                           "NVIDIA ConnectX-6 / Quantum HDR: 200 Gb/s per port"),
    "ethernet100": Link("Ethernet 100 Gb/s", 12.5e9, _NET_LAT, "between nodes",
                        "IEEE 802.3ba: 100 Gb/s Ethernet"),
    "ethernet25": Link("Ethernet 25 Gb/s", 3.125e9, _NET_LAT, "between nodes",
                       "IEEE 802.3by: 25 Gb/s Ethernet"),
    "ethernet10": Link("Ethernet 10 Gb/s", 1.25e9, _NET_LAT, "between nodes",
                       "IEEE 802.3ae: 10 Gb/s Ethernet"),
}


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
    connections = psutil.Process().net_connections(kind="tcp")
    listening = tuple(sorted(c.laddr.port for c in connections if c.status == psutil.CONN_LISTEN))
    established = [c for c in connections if c.status == psutil.CONN_ESTABLISHED and c.raddr]
    to_store = sum(c.raddr.port == store_port for c in established)
    to_ranks = sum(c.raddr.port != store_port and c.laddr.port != store_port for c in established)
    return RankSockets(dist.get_rank(), listening, to_store, to_ranks, _ephemeral_range())


def allreduce_seconds(nbytes: float, nodes: int, gpus_per_node: int, *, intra: Link, inter: Link | None = None) -> float:
    """Time of one ring all-reduce of ``nbytes`` over ``nodes`` x ``gpus_per_node`` GPUs.

    A flat ring visits every GPU; all of them send at once, so the whole ring
    moves at the speed of its slowest hop: ``intra`` on one node, ``inter``
    (the network) as soon as the ring leaves a node. Each rank sends
    2(W-1)/W x nbytes in 2(W-1) steps (:func:`ddp_lab.cost.collective_time`).
    Real libraries do better with several rings and NICs, but the slowest
    link still sets the pace.
    """
    for name, value in (("nodes", nodes), ("gpus_per_node", gpus_per_node)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    if nodes > 1 and inter is None:
        raise ValueError("a job on several nodes needs the link between them: pass inter=")
    link = inter if nodes > 1 else intra
    return collective_time("all_reduce", nbytes, nodes * gpus_per_node, link.latency, link.bandwidth)
