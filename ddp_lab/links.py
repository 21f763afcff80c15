"""What the links of a cluster cost: typical figures, and a ring all-reduce over nodes (Chapter 12).

:func:`allreduce_seconds` applies the ring all-reduce cost model of
:mod:`ddp_lab.cost` to a job laid out over nodes: a ring runs at the speed
of its slowest link, and as soon as a job spans two machines, that link is
the network between them. Arithmetic only: nothing here starts a process or
imports torch.

>>> one_node = allreduce_seconds(1e9, 1, 8, intra=LINKS["nvlink"])
>>> two_nodes = allreduce_seconds(1e9, 2, 8, intra=LINKS["nvlink"], inter=LINKS["ethernet100"])
>>> round(two_nodes / one_node)
38
"""

from __future__ import annotations

from dataclasses import dataclass

from ddp_lab.cost import collective_time
from ddp_lab.validate import check_positive_int

__all__ = ["Link", "LINKS", "allreduce_seconds"]


@dataclass(frozen=True)
class Link:
    """A kind of link: a name, its bandwidth (bytes/s, one direction) and latency (s)."""

    name: str
    bandwidth: float
    latency: float


# Typical figures, one direction, per GPU (NVLink, PCIe) or per node (NICs);
# orders of magnitude to reason with, not measurements of any machine.
LINKS = {
    "nvlink": Link("NVLink 4 (H100)", 450e9, 2e-6),
    "pcie": Link("PCIe 4.0 x16", 25e9, 5e-6),
    "infiniband": Link("InfiniBand NDR, 400 Gb/s", 50e9, 5e-6),
    "ethernet100": Link("Ethernet 100 Gb/s", 12.5e9, 20e-6),
    "ethernet10": Link("Ethernet 10 Gb/s", 1.25e9, 50e-6),
}


def allreduce_seconds(nbytes: float, nodes: int, gpus_per_node: int, *, intra: Link, inter: Link | None = None) -> float:
    """Time of one ring all-reduce of ``nbytes`` over ``nodes`` x ``gpus_per_node`` GPUs.

    A flat ring visits every GPU; all of them send at once, so the whole ring
    moves at the speed of its slowest hop: ``intra`` on one node, ``inter``
    (the network) as soon as the ring leaves a node. Each rank sends
    2(W-1)/W x nbytes in 2(W-1) steps (:func:`ddp_lab.cost.collective_time`).
    Real libraries do better with several rings and NICs, but the slowest
    link still sets the pace.
    """
    check_positive_int("nodes", nodes)
    check_positive_int("gpus_per_node", gpus_per_node)
    if nodes > 1 and inter is None:
        raise ValueError("a job on several nodes needs the link between them: pass inter=")
    link = inter if nodes > 1 else intra
    return collective_time("all_reduce", nbytes, nodes * gpus_per_node, link.latency, link.bandwidth)
