"""What the links of a cluster cost: typical figures, and a ring all-reduce over nodes (Chapter 12b).

:func:`allreduce_seconds` applies the ring all-reduce cost model of
:mod:`ddp_lab.cost.alpha_beta` to a job laid out over nodes: a ring runs at the speed
of its slowest link, and as soon as a job spans two machines, that link is
the network between them. Arithmetic only: nothing here starts a process or
imports torch.

>>> one_node = allreduce_seconds(1e9, 1, 8, intra=LINKS["nvlink"])
>>> two_nodes = allreduce_seconds(1e9, 2, 8, intra=LINKS["nvlink"], inter=LINKS["ethernet100"])
>>> round(two_nodes / one_node)
38

Each link keeps its rated speed (``bandwidth``, what the vendor quotes) and,
where a reader's job will see less, what NCCL's benchmarks reach on it
(``achieved``, as nccl-tests' bus bandwidth, with its source). A cost model
that should price a real job takes :meth:`Link.at_achieved`:

>>> nvlink = LINKS["nvlink"]
>>> nvlink.bandwidth / 1e9, nvlink.achieved / 1e9, nvlink.at_achieved().bandwidth / 1e9
(450.0, 370.0, 370.0)
"""

from __future__ import annotations

from dataclasses import dataclass

from ddp_lab.cost.alpha_beta import collective_time
from ddp_lab.validate import check_positive_int

__all__ = ["Link", "LINKS", "NVLS_ALLREDUCE_BUSBW", "allreduce_seconds"]


@dataclass(frozen=True)
class Link:
    """A kind of link: its name, where it is, its bandwidth and latency, and the source.

    ``bandwidth`` in bytes/s, one direction, per GPU (NVLink, PCIe) or per
    network card: the rated figure; ``latency`` in seconds per step of a ring
    collective. ``achieved``: the bus bandwidth NCCL's ring reaches on it in
    nccl-tests (``None`` where the book has no sourced figure), with
    ``achieved_source``.
    """

    name: str
    bandwidth: float
    latency: float
    where: str = ""
    source: str = ""
    achieved: float | None = None
    achieved_source: str = ""

    def at_achieved(self) -> "Link":
        """This link priced at its achieved bandwidth (its rated one where none is known)."""
        if self.achieved is None:
            return self
        return Link(f"{self.name}, achieved", self.achieved, self.latency, self.where,
                    self.achieved_source, self.achieved, self.achieved_source)


# The book's one table of link speeds: Chapter 1 teaches it, Chapter 12b, the
# scaling model and its control (ddp_lab.widgets.scaling) use it; NVLink 1 and
# 40/50 Gb/s Ethernet are the hardware of the published results that
# Chapter 12b compares the model with (ddp_lab.cost.published_scaling).
# Bandwidths are the vendors' rated figures, one direction (vendors quote
# NVLink and PCIe for both directions together: halved here). Real transfers
# reach somewhat less. Latencies are the per-step latency NCCL's own tuning
# model charges a ring step with its Simple protocol (hwLat in NVIDIA/nccl
# src/graph/tuning.cc: 3.4 us over NVLink, 5.7 us over PCIe, 9.6 us over the
# network), orders of magnitude to reason with; gloo over TCP is slower still.
#
# Achieved figures are nccl-tests' bus bandwidth (busbw = algbw x 2(n-1)/n for an
# all-reduce, nccl-tests doc/PERFORMANCE.md) at large sizes, as NCCL's own
# developers gave them: on NVLink 4 "450GB/s is the line rate. With the protocol
# overhead (~20%) NCCL can get an effective NVLink bandwidth of 370GB/s", seen as
# busbw with NCCL_ALGO=RING (S. Jeaugey, NVIDIA/nccl-tests issue 212, 2024-05-06);
# "For NDR @ 400Gbps you should see 46-48GB/s per NIC" (D. Addison, NVIDIA/nccl-tests
# issue 290, 2025-03-03). An 8-GPU H100 all-reduce with NVLink SHARP (NVLS, NCCL's
# default there) reports more busbw than the line rate, NVLS_ALLREDUCE_BUSBW: the
# switch does the additions, so busbw no longer counts bytes on one GPU's wire.
_NVLINK_LAT, _PCIE_LAT, _NET_LAT = 3.4e-6, 5.7e-6, 9.6e-6
_NCCL_212 = ("NVIDIA/nccl-tests issue 212 (S. Jeaugey, 2024-05-06): ring busbw about 370 GB/s "
             "of the 450 GB/s line rate, ~20% protocol overhead")
NVLS_ALLREDUCE_BUSBW = (480e9, "NVIDIA/nccl-tests issue 212 (S. Jeaugey, 2024-05-06): peak all-reduce "
                               "busbw ~480 GB/s (algbw ~275 GB/s) on 8 H100 with NVLink SHARP; "
                               "issue 272 (2024-11-27): 475 GB/s on 8 H200")
LINKS = {
    "nvlink": Link("NVLink 4 (H100 SXM)", 450e9, _NVLINK_LAT, "inside a node",
                   "NVIDIA H100 Tensor Core GPU datasheet: NVLink 900 GB/s (both directions)",
                   370e9, _NCCL_212),
    "nvlink3": Link("NVLink 3 (A100 SXM)", 300e9, _NVLINK_LAT, "inside a node",
                    "NVIDIA A100 Tensor Core GPU datasheet: NVLink 600 GB/s (both directions)"),
    "nvlink1": Link("NVLink 1 (P100 SXM2)", 80e9, _NVLINK_LAT, "inside a node",
                    "NVIDIA Tesla P100 SXM2: NVLink 160 GB/s (both directions), 80 GB/s each way "
                    "(Microway, 'NVIDIA Tesla P100 NVLink 16GB GPU Accelerator Up Close')"),
    "pcie": Link("PCIe 4.0 x16", 32e9, _PCIE_LAT, "inside a node",
                 "PCI-SIG, PCIe 4.0: 16 GT/s per lane, 64 GB/s for x16 (both directions)"),
    "infiniband": Link("InfiniBand NDR 400 Gb/s", 50e9, _NET_LAT, "between nodes",
                       "NVIDIA ConnectX-7 / Quantum-2 NDR: 400 Gb/s per port",
                       47e9, "NVIDIA/nccl-tests issue 290 (D. Addison, 2025-03-03): 46-48 GB/s "
                             "busbw per 400 Gb/s NDR card, NCCL_ALGO=RING over two nodes"),
    "infiniband_hdr": Link("InfiniBand HDR 200 Gb/s", 25e9, _NET_LAT, "between nodes",
                           "NVIDIA ConnectX-6 / Quantum HDR: 200 Gb/s per port"),
    "ethernet100": Link("Ethernet 100 Gb/s", 12.5e9, _NET_LAT, "between nodes",
                        "IEEE 802.3ba: 100 Gb/s Ethernet"),
    "ethernet50": Link("Ethernet 50 Gb/s", 6.25e9, _NET_LAT, "between nodes",
                       "IEEE 802.3cd: 50 Gb/s Ethernet (Goyal et al. 2017's servers: Mellanox ConnectX-4 50Gbit)"),
    "ethernet40": Link("Ethernet 40 Gb/s", 5e9, _NET_LAT, "between nodes",
                       "IEEE 802.3ba: 40 Gb/s Ethernet"),
    "ethernet25": Link("Ethernet 25 Gb/s", 3.125e9, _NET_LAT, "between nodes",
                       "IEEE 802.3by: 25 Gb/s Ethernet"),
    "ethernet10": Link("Ethernet 10 Gb/s", 1.25e9, _NET_LAT, "between nodes",
                       "IEEE 802.3ae: 10 Gb/s Ethernet"),
}


def allreduce_seconds(nbytes: float, nodes: int, gpus_per_node: int, *, intra: Link, inter: Link | None = None) -> float:
    """Time of one ring all-reduce of ``nbytes`` over ``nodes`` x ``gpus_per_node`` GPUs.

    A flat ring visits every GPU; all of them send at once, so the whole ring
    moves at the speed of its slowest hop: ``intra`` on one node, ``inter``
    (the network) as soon as the ring leaves a node. Each rank sends
    2(W-1)/W x nbytes in 2(W-1) steps (:func:`ddp_lab.cost.alpha_beta.collective_time`).
    Real libraries do better with several rings and NICs, but the slowest
    link still sets the pace.
    """
    check_positive_int("nodes", nodes)
    check_positive_int("gpus_per_node", gpus_per_node)
    if nodes > 1 and inter is None:
        raise ValueError("a job on several nodes needs the link between them: pass inter=")
    link = inter if nodes > 1 else intra
    return collective_time("all_reduce", nbytes, nodes * gpus_per_node, link.latency, link.bandwidth)
