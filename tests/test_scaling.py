"""The scaling cost model of Chapter 12b: its arithmetic, checked by hand, and
the published results it is compared with (ddp_lab.cost.published_scaling)."""

import dataclasses

import pytest

from ddp_lab.cost import published_scaling, scaling
from ddp_lab.cost.links import LINKS, Link
from ddp_lab.cost.published_scaling import RUNS, PublishedRun, predict

FAST = Link("fast", 100.0, 0.0)     # 100 bytes/s, no latency: easy arithmetic
SLOW = Link("slow", 10.0, 1.0)      # 10 bytes/s, 1 s per step


def test_compute_is_six_flops_per_parameter_per_token():
    assert scaling.compute_seconds(1e9, 1000, 6e12) == pytest.approx(1.0)
    assert scaling.compute_seconds(1e9, 1000, 6e12, utilisation=0.5) == pytest.approx(2.0)


def test_flat_ring_runs_at_the_slowest_link():
    # W = 4: each rank sends 2 x 3/4 x 40 = 60 bytes at 10 B/s, in 6 steps of 1 s
    assert scaling.flat_all_reduce_seconds(40, 2, 2, intra=FAST, inter=SLOW) == pytest.approx(6 + 6)
    assert scaling.flat_all_reduce_seconds(40, 1, 4, intra=FAST) == pytest.approx(60 / 100)


def test_hierarchical_sends_less_across_the_link():
    # in node: reduce (1 step, 40 B) + broadcast (1 step, 40 B) at 100 B/s = 0.8 s;
    # leaders (2 of them): 2 x 1/2 x 40 = 40 B at 10 B/s + 2 steps of 1 s = 6 s
    assert scaling.hierarchical_all_reduce_seconds(40, 2, 2, intra=FAST, inter=SLOW) == pytest.approx(6.8)
    assert (scaling.hierarchical_all_reduce_seconds(40, 2, 2, intra=FAST, inter=SLOW)
            < scaling.flat_all_reduce_seconds(40, 2, 2, intra=FAST, inter=SLOW))


def test_hierarchical_loses_when_the_node_is_no_faster_than_the_network():
    # reduce + broadcast move 2n inside the node, the leaders n across: 3n
    # against the flat ring's 1.5n, at the same speed
    same = Link("same", 1e9, 0.0)
    n = 1e6
    assert scaling.hierarchical_all_reduce_seconds(n, 2, 2, intra=same, inter=same) == pytest.approx(3e-3)
    assert scaling.flat_all_reduce_seconds(n, 2, 2, intra=same, inter=same) == pytest.approx(1.5e-3)


def test_one_node_or_one_rank_per_node():
    assert scaling.hierarchical_all_reduce_seconds(40, 1, 1, intra=FAST) == 0
    # one rank per node: only the leaders' all-reduce, the flat ring itself
    assert (scaling.hierarchical_all_reduce_seconds(40, 4, 1, intra=FAST, inter=SLOW)
            == pytest.approx(scaling.flat_all_reduce_seconds(40, 4, 1, intra=FAST, inter=SLOW)))


def test_step_with_and_without_overlap():
    assert scaling.step_seconds(3.0, 1.0, overlap=False) == 4.0
    assert scaling.step_seconds(3.0, 1.0) == pytest.approx(3.0)       # hidden behind 2 s of backward
    assert scaling.step_seconds(3.0, 5.0) == pytest.approx(1.0 + 5.0)  # forward, then the all-reduce
    assert scaling.scaling_efficiency(3.0, 4.0) == 0.75


def test_tokens_to_hide_makes_backward_equal_to_the_all_reduce():
    tokens = scaling.tokens_to_hide(7e9, 0.2, 989e12, utilisation=0.4)
    backward = scaling.BACKWARD_SHARE * scaling.compute_seconds(7e9, tokens, 989e12, utilisation=0.4)
    assert backward == pytest.approx(0.2)
    assert scaling.step_seconds(backward / scaling.BACKWARD_SHARE, 0.2) == pytest.approx(
        backward / scaling.BACKWARD_SHARE)


def test_published_figures_are_the_vendors():
    assert LINKS["nvlink"].bandwidth == 450e9 and "900 GB/s" in LINKS["nvlink"].source
    assert LINKS["pcie"].bandwidth == 32e9 and "64 GB/s" in LINKS["pcie"].source
    assert LINKS["infiniband"].bandwidth == 400e9 / 8
    assert scaling.GPUS["h100"].flops == 989e12


@pytest.mark.parametrize("call, message", [
    (lambda: scaling.compute_seconds(0, 1, 1), "parameters must be a finite number > 0, got 0"),
    (lambda: scaling.compute_seconds(1, 1, 1, utilisation=1.5), "utilisation must be a number in (0, 1], got 1.5"),
    (lambda: scaling.step_seconds(-1, 0), "compute must be a finite number of seconds >= 0, got -1"),
    (lambda: scaling.hierarchical_all_reduce_seconds(1, 2, 2, intra=FAST), "needs the link between them"),
    (lambda: scaling.hierarchical_all_reduce_seconds(1, 0, 2, intra=FAST), "nodes must be a positive int, got 0"),
    (lambda: scaling.scaling_efficiency(1, True), "step must be a finite number of seconds > 0, got True"),
    # once let through: an infinite count of parameters or FLOP/s, a utilisation of True (0 < True <= 1)
    (lambda: scaling.compute_seconds(float("inf"), 1, 1), "parameters must be a finite number > 0, got inf"),
    (lambda: scaling.tokens_to_hide(1, 1, float("inf")), "flops must be a finite number of FLOP/s > 0, got inf"),
    (lambda: scaling.step_seconds(1, float("inf")), "all_reduce must be a finite number of seconds >= 0, got inf"),
    (lambda: scaling.compute_seconds(1, 1, 1, utilisation=True), "utilisation must be a number in (0, 1], got True"),
])
def test_bad_input_is_named(call, message):
    with pytest.raises(ValueError) as error:
        call()
    assert message in str(error.value)


# -- published results (ddp_lab.cost.published_scaling) ------------------------------------


def test_predict_brackets_a_run_by_hand():
    # 2 nodes x 2 GPUs, 10 parameters x 4 bytes = 40 bytes at 10 B/s, 1 s per step:
    # the flat ring takes 12 s (see test_flat_ring_runs_at_the_slowest_link)
    run = PublishedRun("test", "2 x 2", "toy", 10, 1, 30.0, 2, 2, SLOW, None, "flat", 0.8)
    serial, overlapped = predict(run)
    assert serial == pytest.approx(30 / 42)                  # compute, then the all-reduce
    assert overlapped == pytest.approx(30 / (10 + 20))      # 12 s hidden behind 20 s of backward
    assert overlapped == 1.0


def test_against_one_server_the_ratio_of_step_times():
    # hierarchical, 2 nodes x 2: 0.8 s in the node (test_hierarchical_sends_less_across_the_link)
    # + 6 s across; one node alone: 0.8 s
    run = PublishedRun("test", "2 x 2", "toy", 10, 1, 3.0, 2, 2, SLOW, FAST, "hierarchical", 0.5,
                       baseline_gpus=2)
    serial, _ = predict(run)
    assert serial == pytest.approx((3 + 0.8) / (3 + 6.8))
    with pytest.raises(ValueError, match="baseline_gpus must be 1 or gpus_per_node"):
        predict(PublishedRun("test", "", "toy", 10, 1, 3.0, 2, 2, SLOW, FAST, "flat", 0.5, baseline_gpus=3))


def test_published_figures_are_the_sources():
    by = {(run.setup, run.model): run for run in RUNS}
    rdma = by["Horovod, 4 x 4 Pascal, 25 Gb/s RDMA", "VGG-16"]
    assert rdma.efficiency == 13.7 / 16 and rdma.compute == 64 / 130.9 and rdma.gpus == 16
    assert by["Horovod, 16 x 4 Pascal, 40 Gb/s TCP", "Inception V3"].efficiency == 53.3 / 64
    assert by["Horovod, 128 x 4 Pascal, 25 Gb/s RoCE", "VGG-16"].efficiency == 0.68
    assert by["Horovod, 32 x 4 Pascal, 25 Gb/s RoCE", "VGG-16"].efficiency == 0.79
    goyal = by["Goyal et al., 32 x 8 P100 NVLink, 50 Gb/s", "ResNet-50"]
    assert goyal.gpus == 256 and goyal.efficiency == 0.90 and goyal.parameters == 25e6
    assert goyal.compute * scaling.BACKWARD_SHARE == pytest.approx(0.120)   # "Backprop ... takes 120 ms"
    assert LINKS["ethernet50"].bandwidth == 50e9 / 8 and LINKS["ethernet25"].bandwidth == 25e9 / 8
    assert LINKS["nvlink1"].bandwidth == 80e9 and "160 GB/s" in LINKS["nvlink1"].source
    assert len(RUNS) == 17


def test_every_published_run_is_predicted_with_two_ordered_bounds():
    for run in RUNS:
        serial, overlapped = predict(run)
        assert 0 < serial <= overlapped <= 1, run
    # one server against one server is perfectly efficient; its all-reduce stays inside the server
    goyal = RUNS[-1]
    assert predict(dataclasses.replace(goyal, nodes=1)) == (1.0, 1.0)
    assert published_scaling.all_reduce_seconds(goyal, nodes=1) < published_scaling.all_reduce_seconds(goyal)
