"""The alpha-beta cost model and the bandwidth conventions of nccl-tests."""

import math
import re

import pytest

from ddp_lab import cost
from ddp_lab.units import format_bytes


@pytest.mark.parametrize("w", [1, 2, 3, 4, 8, 64])
def test_bus_factor_of_the_ring(w):
    assert cost.bus_factor("all_reduce", w) == pytest.approx(2 * (w - 1) / w)
    assert cost.bus_factor("all_gather", w) == pytest.approx((w - 1) / w)
    assert cost.bus_factor("reduce_scatter", w) == pytest.approx((w - 1) / w)
    assert cost.bus_factor("broadcast", w) == 1.0
    assert cost.bus_factor("reduce", w) == 1.0
    assert cost.bus_factor("barrier", w) == 0.0


def test_all_reduce_is_a_reduce_scatter_then_an_all_gather():
    for w in range(1, 9):
        both = cost.bus_factor("reduce_scatter", w) + cost.bus_factor("all_gather", w)
        assert cost.bus_factor("all_reduce", w) == pytest.approx(both)
        assert cost.ring_steps("all_reduce", w) == 2 * cost.ring_steps("all_gather", w)


def test_all_reduce_factor_tends_to_two():
    assert cost.bus_factor("all_reduce", 4) == 1.5
    assert cost.bus_factor("all_reduce", 1024) < 2
    assert math.isclose(cost.bus_factor("all_reduce", 10**6), 2, rel_tol=1e-5)


def test_transfer_time_is_latency_plus_size_over_bandwidth():
    assert cost.transfer_time(0, 1e-5, 1e9) == pytest.approx(1e-5)
    assert cost.transfer_time(1e9, 1e-5, 1e9) == pytest.approx(1 + 1e-5)


def test_collective_time_adds_steps_and_bytes():
    t = cost.collective_time("all_reduce", 4000, 4, latency=1e-3, bandwidth=1000)
    assert t == pytest.approx(6 * 1e-3 + 1.5 * 4000 / 1000)


def test_algbw_and_busbw():
    assert cost.algbw(2e9, 1.0) == 2e9
    assert cost.busbw("all_reduce", 2e9, 1.0, 4) == pytest.approx(3e9)
    assert cost.busbw("all_gather", 2e9, 2.0, 2) == pytest.approx(0.5e9)


def test_bytes_sent_per_rank():
    assert cost.bytes_sent_per_rank("all_reduce", 1000, 4) == 1500
    assert cost.bytes_sent_per_rank("broadcast", 1000, 4) == 1000


@pytest.mark.parametrize("call, message", [
    (lambda: cost.bus_factor("allreduce", 4), "unknown collective 'allreduce'"),
    (lambda: cost.bus_factor("all_reduce", 0), "world_size must be a positive int, got 0"),
    (lambda: cost.bus_factor("all_reduce", 2.0), "got 2.0"),
    (lambda: cost.transfer_time(10, 0, 0), "bandwidth must be a number of bytes/s > 0 (inf: an ideal link), got 0"),
    (lambda: cost.transfer_time(-1, 0, 1), "nbytes must be a finite number of bytes >= 0, got -1"),
    (lambda: cost.algbw(10, 0), "seconds must be a finite number of seconds > 0, got 0"),
])
def test_bad_input_names_the_bad_value(call, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        call()


INF, NAN = float("inf"), float("nan")


@pytest.mark.parametrize("call, message", [
    # A NaN, an infinite latency or size, or a bool once came out as a time of NaN, inf or 1 byte's worth.
    (lambda: cost.collective_time("all_reduce", 1e6, 4, NAN, 1e9),
     "latency must be a finite number of seconds >= 0, got nan"),
    (lambda: cost.collective_time("all_reduce", 1e6, 4, INF, 1e9),
     "latency must be a finite number of seconds >= 0, got inf"),
    (lambda: cost.collective_time("all_reduce", 1e6, 4, 1e-5, True),
     "bandwidth must be a number of bytes/s > 0 (inf: an ideal link), got True"),
    (lambda: cost.collective_time("all_reduce", 1e6, 4, 1e-5, NAN),
     "bandwidth must be a number of bytes/s > 0 (inf: an ideal link), got nan"),
    (lambda: cost.transfer_time(INF, 0, 1e9), "nbytes must be a finite number of bytes >= 0, got inf"),
    (lambda: cost.bytes_sent_per_rank("all_reduce", NAN, 4),
     "nbytes must be a finite number of bytes >= 0, got nan"),
    (lambda: cost.algbw(1e6, INF), "seconds must be a finite number of seconds > 0, got inf"),
    (lambda: cost.naive_all_reduce_time(True, 4, 1e-5, 1e9),
     "nbytes must be a finite number of bytes >= 0, got True"),
    (lambda: cost.bucket_schedule(400e6, INF, 0.1, 4, 1e-5, 1e9),
     "bucket_bytes must be a finite number of bytes > 0, got inf"),
    (lambda: cost.bucket_schedule(400e6, 25e6, NAN, 4, 1e-5, 1e9),
     "backward_seconds must be a finite number of seconds >= 0, got nan"),
    (lambda: cost.fit_latency_bandwidth([1, 2], [1e-3, INF]),
     "each time must be a finite number of seconds > 0, got inf"),
])
def test_a_size_time_or_latency_is_finite_and_no_bool(call, message):
    with pytest.raises(ValueError) as refused:
        call()
    assert str(refused.value) == message


def test_an_infinite_bandwidth_is_an_ideal_link():
    # what the all-reduce cost explorer draws as the latency term alone
    assert cost.collective_time("all_reduce", 1e6, 4, 1e-5, INF) == 6 * 1e-5
    assert cost.transfer_time(1e6, 0.0, INF) == 0.0


def test_format_bytes():
    assert format_bytes(512) == "512 B"
    assert format_bytes(1536) == "1.5 KiB"
    assert format_bytes(4 * 2**20) == "4 MiB"


def test_fit_latency_bandwidth_recovers_the_model():
    sizes = [1e3, 1e4, 1e5, 1e6, 1e7]
    times = [cost.transfer_time(n, 2e-5, 1.5e9) for n in sizes]
    latency, bandwidth = cost.fit_latency_bandwidth(sizes, times)
    assert latency == pytest.approx(2e-5, rel=1e-6)
    assert bandwidth == pytest.approx(1.5e9, rel=1e-6)
    with pytest.raises(ValueError, match="at least two"):
        cost.fit_latency_bandwidth([1], [1])
    with pytest.raises(ValueError, match="all the sizes are equal"):
        cost.fit_latency_bandwidth([5, 5], [1, 2])


def test_all_to_all_bytes_leave_the_own_chunk_out():
    from fractions import Fraction

    from ddp_lab.cost.ring_bytes import all_to_all_bytes, ring_bytes

    assert ring_bytes("all_to_all", 32, 4) == Fraction(24)
    assert all_to_all_bytes([8, 8, 8, 8], 0) == ring_bytes("all_to_all", 32, 4)
    assert all_to_all_bytes([16, 8, 0, 8], 2) == 32 and all_to_all_bytes([16, 8, 0, 8], 0) == 16
    with pytest.raises(ValueError, match="rank must be an int from 0 to 2"):
        all_to_all_bytes([1, 2, 3], 3)
    with pytest.raises(ValueError, match="input_split_bytes must be one whole number >= 0 per rank"):
        all_to_all_bytes([1, -2], 0)


def test_links_keep_the_rated_figure_and_name_the_achieved_one():
    """Chapter 14b: nccl-tests' ring busbw on NVLink 4 and an NDR card, each with its source."""
    from ddp_lab.cost.links import LINKS, NVLS_ALLREDUCE_BUSBW, allreduce_seconds

    nvlink, card = LINKS["nvlink"], LINKS["infiniband"]
    assert (nvlink.bandwidth, nvlink.achieved) == (450e9, 370e9) and "issue 212" in nvlink.achieved_source
    assert (card.bandwidth, card.achieved) == (50e9, 47e9) and "issue 290" in card.achieved_source
    assert NVLS_ALLREDUCE_BUSBW[0] > nvlink.bandwidth  # the switch adds: busbw above the line rate
    real = nvlink.at_achieved()
    assert real.bandwidth == 370e9 and real.latency == nvlink.latency and "achieved" in real.name
    assert LINKS["pcie"].at_achieved() is LINKS["pcie"]  # no sourced figure: the rated one stays
    rated = allreduce_seconds(1e9, 1, 8, intra=nvlink) - 14 * nvlink.latency
    achieved = allreduce_seconds(1e9, 1, 8, intra=real) - 14 * real.latency
    assert achieved / rated == pytest.approx(450 / 370)


def test_hsdp_bytes_per_step_prices_each_collective_over_its_own_group():
    """Chapter 15e: HSDP's bytes per mesh dimension; one replica is FSDP, shards of one rank are DDP."""
    from fractions import Fraction

    from ddp_lab.cost.fsdp import hsdp_bytes_per_step
    from ddp_lab.cost.ring_bytes import ring_bytes

    hsdp = hsdp_bytes_per_step(7456, replicate=2, shard=2)
    assert hsdp == {"shard": {"all_gather": Fraction(7456), "reduce_scatter": Fraction(3728)},
                    "replicate": {"all_reduce": Fraction(3728)}}
    # 8 GPUs per node, 16 nodes: the all-reduce of a shard crosses the network
    big = hsdp_bytes_per_step(8 * 10**9, replicate=16, shard=8)
    assert big["replicate"]["all_reduce"] == ring_bytes("all_reduce", 10**9, 16) == Fraction(15 * 10**9, 8)
    fsdp = hsdp_bytes_per_step(7456, replicate=1, shard=4)
    assert sum(fsdp["shard"].values()) == 3 * ring_bytes("all_gather", 7456, 4)
    ddp = hsdp_bytes_per_step(7456, replicate=4, shard=1)
    assert ddp["replicate"]["all_reduce"] == ring_bytes("all_reduce", 7456, 4)
    kept = hsdp_bytes_per_step(7456, replicate=2, shard=2, reshard_after_forward=False)
    assert kept["shard"]["all_gather"] == hsdp["shard"]["all_gather"] / 2
    with pytest.raises(ValueError, match=r"parameter_bytes \(7455\) must be a multiple of shard \(2\)"):
        hsdp_bytes_per_step(7455, 2, 2)
    with pytest.raises(ValueError, match="replicate must be a positive int, got 0"):
        hsdp_bytes_per_step(7456, 0, 2)
    with pytest.raises(TypeError, match="reshard_after_forward must be True or False, got 1"):
        hsdp_bytes_per_step(7456, 2, 2, reshard_after_forward=1)
