"""The alpha-beta cost model of communication, and algorithm vs bus bandwidth.

Sending ``n`` bytes over one link costs a fixed start-up time (the *latency*,
alpha: system calls, a round trip, waking the receiver) plus the time the bytes
spend on the wire (``n / bandwidth``, the beta term)::

    time = latency + n / bandwidth

Small messages are all latency; large ones are all bandwidth. A collective is
a schedule of such transfers, so its cost follows from two numbers: how many
*steps* each rank waits through (each pays the latency once), and how many
*bytes* each rank sends in total (paid at the bandwidth). For the ring
algorithms that NCCL and gloo use on large tensors:

=================  ===========  =========================
collective         steps        bytes sent by each rank
=================  ===========  =========================
all_reduce         2(W-1)       2(W-1)/W x n
all_gather         W-1          (W-1)/W x n   (n = output size)
reduce_scatter     W-1          (W-1)/W x n   (n = input size)
broadcast, reduce  W-1 (chain)  n             (pipelined)
=================  ===========  =========================

*Algorithm bandwidth* (algbw) is what a user sees: the tensor's size divided by
the time the call took. It falls as the world grows, even on a perfect network,
because each rank must send more than ``n`` bytes. *Bus bandwidth* (busbw)
multiplies algbw by the ring's factor (``bus_factor``): it is the speed each
link actually ran at, so it can be compared with the hardware's link speed and
across world sizes. This is the convention of nccl-tests.

Used in Chapters 4 and 5, by the benchmarks, and by ``ddp_lab.cost.links`` and
``ddp_lab.cost.scaling`` (Chapter 12b); ``ddp_lab.cost`` exports every name of it.
"""

from __future__ import annotations

import math

from ddp_lab.validate import check_non_negative_number, check_positive_int, check_positive_number

__all__ = ["COLLECTIVES", "transfer_time", "bus_factor", "ring_steps", "bytes_sent_per_rank", "collective_time",
           "algbw", "busbw", "fit_latency_bandwidth", "naive_all_reduce_time", "bucket_schedule",
           "bucketed_backward_time"]

COLLECTIVES = (
    "all_reduce",
    "all_gather",
    "reduce_scatter",
    "all_to_all",
    "broadcast",
    "reduce",
    "scatter",
    "gather",
    "send_recv",
    "barrier",
)


def _check_collective(collective: str) -> None:
    if collective not in COLLECTIVES:
        raise ValueError(f"unknown collective {collective!r}; expected one of {', '.join(COLLECTIVES)}")


def _check_link(latency: float, bandwidth: float) -> None:
    """A link's two numbers: a finite latency >= 0 and a bandwidth > 0, ``inf`` for an ideal link.

    An infinitely fast link leaves the latency term alone (the all-reduce cost
    explorer of Chapter 6 draws it so), as a latency of 0 leaves the bandwidth
    term; :func:`fit_latency_bandwidth` returns ``inf`` for measurements in
    which larger messages took no longer.
    """
    check_non_negative_number("latency", latency, "seconds")
    check_positive_number("bandwidth", bandwidth, "bytes/s", infinite="an ideal link")


def transfer_time(nbytes: float, latency: float, bandwidth: float) -> float:
    """Seconds to send ``nbytes`` over one link: ``latency + nbytes / bandwidth``.

    ``latency`` in seconds, ``bandwidth`` in bytes per second.
    """
    check_non_negative_number("nbytes", nbytes, "bytes")
    _check_link(latency, bandwidth)
    return latency + nbytes / bandwidth


def bus_factor(collective: str, world_size: int) -> float:
    """How many times the tensor's size each rank sends, for the ring algorithm.

    all_reduce: 2(W-1)/W (a reduce-scatter then an all-gather);
    all_gather, reduce_scatter, all_to_all: (W-1)/W;
    broadcast, reduce, send_recv: 1 (each link carries the whole tensor once);
    scatter, gather: (W-1)/W (the root sends or receives every other rank's
    share); barrier: 0 (it carries no data).

    ``busbw = algbw * bus_factor(collective, W)``.
    """
    _check_collective(collective)
    check_positive_int("world_size", world_size)
    w = world_size
    if collective == "all_reduce":
        return 2 * (w - 1) / w
    if collective in ("all_gather", "reduce_scatter", "all_to_all", "scatter", "gather"):
        return (w - 1) / w
    if collective in ("broadcast", "reduce", "send_recv"):
        return 1.0
    return 0.0  # barrier


def ring_steps(collective: str, world_size: int) -> int:
    """Latency-bound steps of the ring algorithm: each step pays the latency once."""
    _check_collective(collective)
    check_positive_int("world_size", world_size)
    w = world_size
    if collective == "all_reduce":
        return 2 * (w - 1)
    if collective == "send_recv":
        return 1
    if collective == "barrier":
        return 2 * (w - 1)  # a barrier is an all_reduce of nothing
    return w - 1


def bytes_sent_per_rank(collective: str, nbytes: int, world_size: int) -> float:
    """Bytes each rank sends in the ring algorithm for a tensor of ``nbytes``.

    ``nbytes`` is the size of the full tensor: the input of all_reduce,
    broadcast and reduce, the *output* of all_gather, the *input* of
    reduce_scatter. For scatter and gather it is what the root sends or
    receives (the other ranks send or receive ``nbytes / W``).
    """
    check_non_negative_number("nbytes", nbytes, "bytes")
    return nbytes * bus_factor(collective, world_size)


def collective_time(collective: str, nbytes: int, world_size: int, latency: float, bandwidth: float) -> float:
    """Predicted seconds for a ring collective: steps x latency + bytes sent / bandwidth."""
    _check_link(latency, bandwidth)
    steps = ring_steps(collective, world_size)
    return steps * latency + bytes_sent_per_rank(collective, nbytes, world_size) / bandwidth


def algbw(nbytes: float, seconds: float) -> float:
    """Algorithm bandwidth in bytes/s: the tensor's size over the call's time."""
    check_positive_number("seconds", seconds, "seconds")
    check_non_negative_number("nbytes", nbytes, "bytes")
    return nbytes / seconds


def busbw(collective: str, nbytes: float, seconds: float, world_size: int) -> float:
    """Bus bandwidth in bytes/s: ``algbw * bus_factor(collective, world_size)``.

    Comparable across world sizes and with a link's rated speed.
    """
    return algbw(nbytes, seconds) * bus_factor(collective, world_size)


def fit_latency_bandwidth(nbytes, seconds) -> tuple[float, float]:
    """Fit ``seconds = latency + nbytes / bandwidth`` to measurements.

    A straight line through the (size, time) points: its intercept is the
    latency (seconds), its slope one over the bandwidth (bytes/s). The fit
    minimises *relative* errors (each point weighted by 1 / time²), so that
    the microsecond times of small messages count as much as the
    millisecond times of large ones; an ordinary least-squares line would be
    pulled entirely by the largest messages and miss the latency. Give it
    sizes that span small and large messages, or one of the two terms is not
    measured at all.
    """
    nbytes, seconds = list(map(float, nbytes)), list(map(float, seconds))
    if len(nbytes) != len(seconds) or len(nbytes) < 2:
        raise ValueError(
            f"need at least two (nbytes, seconds) pairs of equal length, got "
            f"{len(nbytes)} sizes and {len(seconds)} times")
    for size, time in zip(nbytes, seconds):
        check_non_negative_number("each size", size, "bytes")
        check_positive_number("each time", time, "seconds")
    if len(set(nbytes)) < 2:
        raise ValueError("all the sizes are equal: measure at least two different sizes")
    weights = [1 / t ** 2 for t in seconds]
    total = sum(weights)
    mean_x = sum(w * x for w, x in zip(weights, nbytes)) / total
    mean_y = sum(w * y for w, y in zip(weights, seconds)) / total
    sxx = sum(w * (x - mean_x) ** 2 for w, x in zip(weights, nbytes))
    sxy = sum(w * (x - mean_x) * (y - mean_y) for w, x, y in zip(weights, nbytes, seconds))
    slope = sxy / sxx
    latency = max(0.0, mean_y - slope * mean_x)
    bandwidth = 1 / slope if slope > 0 else float("inf")
    return latency, bandwidth


# ---------------------------------------------------- the book's two lessons in numbers


def naive_all_reduce_time(nbytes: float, world_size: int, latency: float, bandwidth: float) -> float:
    """Chapter 6's hub all-reduce: ``2(W-1)(latency + nbytes/bandwidth)``.

    Rank 0 receives the whole tensor from each of the other W - 1 ranks, one
    after the other, then sends the sum back to each of them: 2(W-1) transfers
    of ``nbytes``, all through rank 0's link. Compare :func:`collective_time`
    for the ring, ``2(W-1)·latency + 2(W-1)/W·nbytes/bandwidth``: the same
    number of latencies, but the bandwidth term barely grows with W.
    """
    check_positive_int("world_size", world_size)
    check_non_negative_number("nbytes", nbytes, "bytes")
    return 2 * (world_size - 1) * transfer_time(nbytes, latency, bandwidth)


def bucket_schedule(gradient_bytes: float, bucket_bytes: float, backward_seconds: float,
                    world_size: int, latency: float, bandwidth: float) -> list[tuple[float, float, float]]:
    """Chapter 8's bucket model: when each bucket is ready, starts and ends its all-reduce.

    The gradients (``gradient_bytes`` in all) are cut into
    ``n = ceil(gradient_bytes / bucket_bytes)`` equal buckets. The backward
    pass (``backward_seconds``) produces them at an even pace, so bucket i
    (from 1) is ready at ``i/n`` of the backward pass. Each bucket is one ring
    all-reduce (:func:`collective_time`), and the all-reduces run one after
    the other, each starting when its bucket is ready and the previous one
    is done, as DDP launches them in order. Returns ``(ready, start, end)``
    per bucket, in seconds from the start of the backward pass.
    """
    check_positive_number("gradient_bytes", gradient_bytes, "bytes")
    check_positive_number("bucket_bytes", bucket_bytes, "bytes")
    check_non_negative_number("backward_seconds", backward_seconds, "seconds")
    buckets = math.ceil(gradient_bytes / bucket_bytes)
    each = collective_time("all_reduce", gradient_bytes / buckets, world_size, latency, bandwidth)
    schedule, previous_end = [], 0.0
    for i in range(1, buckets + 1):
        ready = backward_seconds * i / buckets
        start = max(ready, previous_end)
        previous_end = start + each
        schedule.append((ready, start, previous_end))
    return schedule


def bucketed_backward_time(gradient_bytes: float, bucket_bytes: float, backward_seconds: float,
                           world_size: int, latency: float, bandwidth: float) -> float:
    """Seconds until the last bucket's all-reduce ends (:func:`bucket_schedule`).

    In closed form, with n buckets and c the time of one bucket's all-reduce,
    ``max(T_b + c, T_b/n + n·c)``: either the computation is the bottleneck
    and only the last bucket's all-reduce is left after it, or the network
    is, and it runs the n all-reduces back to back from the moment the first
    bucket is ready. Small buckets shorten the tail c but pay the latency n
    times.
    """
    return bucket_schedule(gradient_bytes, bucket_bytes, backward_seconds, world_size, latency,
                           bandwidth)[-1][2]
