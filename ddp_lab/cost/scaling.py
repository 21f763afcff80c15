"""When does data parallelism stop scaling? One cost model for a DDP step (Chapter 12b).

A DDP step on W ranks is the compute of one rank plus whatever part of the
gradient all-reduce the backward pass did not hide:

* **compute**: a transformer's forward and backward passes cost about
  ``6 x parameters x tokens`` floating-point operations (2 for the forward
  pass, 4 for the backward), so ``compute = 6 P T / F`` for ``T`` tokens per
  rank at ``F`` FLOP/s; or measured;
* **all-reduce** of the gradients (``P x bytes per gradient``): the alpha-beta
  model of Chapter 5 (:mod:`ddp_lab.cost.alpha_beta`), a ring at the speed of its
  slowest link (:func:`ddp_lab.cost.links.allreduce_seconds`), or hierarchical
  (reduce in the node, all-reduce between node leaders, broadcast in the
  node; :func:`hierarchical_all_reduce_seconds`);
* **overlap** (Chapter 8): DDP sends buckets while the backward pass goes
  on, so at best the all-reduce hides behind the backward pass (two thirds of
  the compute) and only what sticks out counts; at worst nothing hides.

From it: the step time, the *scaling efficiency* (the throughput of W ranks
over W times that of one rank with the same per-rank batch:
``compute / step``) and the smallest per-rank batch whose backward pass
is as long as the all-reduce (:func:`tokens_to_hide`).

Pure arithmetic: no torch, nothing measured here. The chapter calibrates it
twice, with latency and bandwidth measured on the namespace cluster, and
with published hardware figures (:data:`GPUS`, :data:`ddp_lab.cost.links.LINKS`)
against published scaling results (:mod:`ddp_lab.cost.published_scaling`); the
control :class:`ddp_lab.widgets.scaling.ScalingModel` lets the reader move
every input.
"""

from __future__ import annotations

from dataclasses import dataclass

from ddp_lab.validate import check_fraction, check_non_negative_number, check_positive_int, check_positive_number

from .alpha_beta import collective_time
from .links import Link, allreduce_seconds

__all__ = ["GPU", "GPUS", "BACKWARD_SHARE", "compute_seconds", "flat_all_reduce_seconds",
           "hierarchical_all_reduce_seconds", "step_seconds", "scaling_efficiency",
           "tokens_to_hide"]

# The backward pass costs twice the forward pass: 4 of the 6 P T operations.
BACKWARD_SHARE = 2 / 3


@dataclass(frozen=True)
class GPU:
    """A GPU's dense 16-bit peak FLOP rate, with its source."""

    name: str
    flops: float
    source: str


GPUS = {
    "h100": GPU("H100 SXM", 989e12, "NVIDIA H100 datasheet: BF16 Tensor Core 1,979 TFLOP/s with "
                                    "sparsity, 989 dense"),
    "a100": GPU("A100 SXM", 312e12, "NVIDIA A100 datasheet: BF16 Tensor Core 312 TFLOP/s dense "
                                    "(624 with sparsity)"),
}


def compute_seconds(parameters: float, tokens: float, flops: float, utilisation: float = 1.0) -> float:
    """``6 x parameters x tokens / (flops x utilisation)``: one rank's forward and backward.

    ``utilisation`` is the share of the peak rate the model really reaches
    (its *model FLOPs utilisation*, MFU; 0.3 to 0.5 is typical of large
    training runs).
    """
    check_positive_number("parameters", parameters)
    check_positive_number("tokens", tokens)
    check_positive_number("flops", flops, "FLOP/s")
    check_fraction("utilisation", utilisation)
    return 6 * parameters * tokens / (flops * utilisation)


def flat_all_reduce_seconds(nbytes: float, nodes: int, ranks_per_node: int, *, intra: Link,
                            inter: Link | None = None) -> float:
    """One ring over all ``nodes x ranks_per_node`` ranks, paced by its slowest link.

    ``inter`` is what one node can send to the next: one network card's
    bandwidth, or all of them together when every GPU has its own card and
    the library runs one ring per card (NCCL does).
    """
    return allreduce_seconds(nbytes, nodes, ranks_per_node, intra=intra, inter=inter)


def hierarchical_all_reduce_seconds(nbytes: float, nodes: int, ranks_per_node: int, *, intra: Link,
                                    inter: Link | None = None) -> float:
    """Reduce in each node, all-reduce between one leader per node, broadcast in each node.

    The node steps cost a pipelined chain each (``ranks_per_node - 1``
    latencies, ``nbytes`` over the node's links); only the leaders' ring
    crosses the network, with ``2(N-1)/N x nbytes`` per leader and ``2(N-1)``
    network latencies instead of the flat ring's ``2(W-1)``. One leader
    sends through one network card: ``inter`` is that card.
    """
    check_positive_int("nodes", nodes)
    check_positive_int("ranks_per_node", ranks_per_node)
    if nodes > 1 and inter is None:
        raise ValueError("a job on several nodes needs the link between them: pass inter=")
    seconds = 0.0
    if ranks_per_node > 1:
        for phase in ("reduce", "broadcast"):
            seconds += collective_time(phase, nbytes, ranks_per_node, intra.latency, intra.bandwidth)
    if nodes > 1:
        seconds += collective_time("all_reduce", nbytes, nodes, inter.latency, inter.bandwidth)
    return seconds


def step_seconds(compute: float, all_reduce: float, *, overlap: bool = True) -> float:
    """One step: the compute, plus the all-reduce the backward pass did not hide.

    With ``overlap`` (DDP's buckets on hardware with room for both, Chapter 8)
    the all-reduce runs beside the backward pass, ``BACKWARD_SHARE`` of the
    compute: ``forward + max(backward, all_reduce)``. Without, it comes after
    the compute: ``compute + all_reduce``. Real steps lie between the two.
    """
    check_non_negative_number("compute", compute, "seconds")
    check_non_negative_number("all_reduce", all_reduce, "seconds")
    if not overlap:
        return compute + all_reduce
    backward = BACKWARD_SHARE * compute
    return compute - backward + max(backward, all_reduce)


def scaling_efficiency(compute: float, step: float) -> float:
    """Throughput of W ranks over W x that of one rank with the same per-rank batch.

    One rank alone takes ``compute`` per step; with W ranks each step takes
    ``step``, for W times the samples: the efficiency is ``compute / step``.
    """
    check_positive_number("compute", compute, "seconds")
    check_positive_number("step", step, "seconds")
    return compute / step


def tokens_to_hide(parameters: float, all_reduce: float, flops: float, utilisation: float = 1.0) -> float:
    """Tokens per rank whose backward pass lasts as long as the all-reduce.

    The backward pass of ``T`` tokens takes ``4 P T / (F x utilisation)``;
    with at least this many tokens per rank, a perfectly overlapped
    all-reduce of ``all_reduce`` seconds costs nothing. (The all-reduce does
    not depend on the batch: its size is the gradients'.)
    """
    check_positive_number("parameters", parameters)
    check_non_negative_number("all_reduce", all_reduce, "seconds")
    check_positive_number("flops", flops, "FLOP/s")
    check_fraction("utilisation", utilisation)
    return all_reduce * flops * utilisation / (4 * parameters)

