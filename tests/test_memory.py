"""Memory per rank under DDP and ZeRO (ddp_lab.memory), checked against the
ZeRO paper's numbers, and against what real ranks hold (ddp_lab.data_parallel.zero_fsdp)."""

import pytest
import torch

import ddp_lab
from ddp_lab.data_parallel.zero_fsdp import SIZES, STRATEGIES, train_and_measure
from ddp_lab.memory import (
    STAGES,
    BytesPerParameter,
    bytes_per_parameter,
    max_parameters,
    memory_per_rank,
    memory_table,
)
from ddp_lab.models import mlp

GB = 1e9


def test_mixed_precision_adam_is_the_papers_2_2_12():
    assert bytes_per_parameter("mixed", "adam") == BytesPerParameter(2, 2, 12)
    assert bytes_per_parameter("mixed", "adam").total == 16
    assert bytes_per_parameter("fp32", "adam") == BytesPerParameter(4, 4, 8)
    assert bytes_per_parameter("mixed", "sgd-momentum") == BytesPerParameter(2, 2, 8)
    assert bytes_per_parameter("fp32", "sgd") == BytesPerParameter(4, 4, 0)


def test_the_papers_example_7_5b_parameters_on_64_gpus():
    # Rajbhandari et al. 2020, Figure 1: 120 GB, 31.4 GB, 16.6 GB, 1.9 GB per GPU.
    totals = [round(row.total / GB, 1) for row in memory_table(7.5e9, 64)]
    assert totals == [120.0, 31.4, 16.6, 1.9]
    # by hand: DDP 16 x 7.5e9; ZeRO-1 (2 + 2) x 7.5e9 + 12 x 7.5e9 / 64; ...
    assert memory_per_rank(7.5e9, 64, "DDP").total == 16 * 7.5e9
    assert memory_per_rank(7.5e9, 64, "ZeRO-1").total == 4 * 7.5e9 + 12 * 7.5e9 / 64
    assert memory_per_rank(7.5e9, 64, "ZeRO-2").total == 2 * 7.5e9 + 14 * 7.5e9 / 64
    assert memory_per_rank(7.5e9, 64, "ZeRO-3").total == 16 * 7.5e9 / 64


def test_which_state_each_stage_shards():
    n = 8
    ddp, z1, z2, z3 = memory_table(1e9, n)
    assert (ddp.parameters, ddp.gradients, ddp.optimizer) == (2e9, 2e9, 12e9)
    assert (z1.parameters, z1.gradients, z1.optimizer) == (2e9, 2e9, 12e9 / n)
    assert (z2.parameters, z2.gradients, z2.optimizer) == (2e9, 2e9 / n, 12e9 / n)
    assert (z3.parameters, z3.gradients, z3.optimizer) == (2e9 / n, 2e9 / n, 12e9 / n)
    assert [row.stage for row in memory_table(1e9, n)] == list(STAGES)


def test_one_rank_shards_nothing_and_more_ranks_never_cost_more():
    assert len({row.total for row in memory_table(3e9, 1)}) == 1
    for stage in STAGES:
        totals = [memory_per_rank(3e9, n, stage).total for n in (1, 2, 4, 64, 1024)]
        assert totals == sorted(totals, reverse=True)
    # ZeRO-1 levels off at the unsharded parameters and gradients: 4 bytes per parameter
    assert memory_per_rank(3e9, 10**6, "ZeRO-1").total == pytest.approx(4 * 3e9, rel=1e-5)


def test_largest_model_that_fits():
    assert max_parameters(80 * GB, 1) == 5e9  # 80 GB / 16 bytes
    assert max_parameters(80 * GB, 64, "ZeRO-3") == pytest.approx(64 * 5e9)
    assert memory_per_rank(max_parameters(40 * GB, 8, "ZeRO-2"), 8, "ZeRO-2").total == pytest.approx(40 * GB)


@pytest.mark.parametrize("call, says", [
    (lambda: bytes_per_parameter("fp16"), "precision must be one of 'mixed', 'fp32'; got 'fp16'"),
    (lambda: bytes_per_parameter("mixed", "adagrad"), "optimizer must be one of"),
    (lambda: memory_per_rank(1e9, 8, "ZeRO-4"), "stage must be one of 'DDP', 'ZeRO-1', 'ZeRO-2', 'ZeRO-3'"),
    (lambda: memory_per_rank(1e9, 0), "world_size must be a positive int, got 0"),
    (lambda: memory_per_rank(1e9, 2.0), "world_size must be a positive int, got 2.0"),
    (lambda: memory_per_rank(-1, 8), "num_parameters must be a finite number > 0, got -1"),
    (lambda: max_parameters(0, 8), "memory_bytes must be a finite number > 0"),
])
def test_bad_arguments_are_named(call, says):
    with pytest.raises(ValueError, match=says.replace("(", r"\(").replace(")", r"\)")):
        call()


def all_strategies():
    return [train_and_measure(strategy) for strategy in STRATEGIES]


def test_real_ranks_hold_what_the_formulas_say():
    """DDP, ZeRO-1 (ZeroRedundancyOptimizer) and FSDP on 2 gloo ranks, fp32 Adam."""
    results = ddp_lab.launch(all_strategies, 2, backend="gloo", timeout=120)
    psi = sum(p.numel() for p in mlp(SIZES).parameters())
    by = {(state.strategy, state.rank): (state, full) for rank_results in results for state, full in rank_results}
    for rank in (0, 1):
        ddp, _ = by["DDP", rank]
        expected = memory_per_rank(psi, 2, "DDP", precision="fp32")
        assert (ddp.parameters, ddp.gradients, ddp.optimizer) == (expected.parameters, expected.gradients,
                                                                  expected.optimizer)
        fsdp, _ = by["FSDP", rank]
        expected = memory_per_rank(psi, 2, "ZeRO-3", precision="fp32")
        assert (fsdp.parameters, fsdp.gradients, fsdp.optimizer) == (expected.parameters, expected.gradients,
                                                                     expected.optimizer)
        assert fsdp.shapes["fc2.weight"] == (128, 256)  # rows 0-127 or 128-255 of a 256 x 256 matrix
    # ZeRO-1 splits the optimizer state by whole parameters: the two shares add up to one copy.
    zero1 = [by["ZeRO-1", rank][0] for rank in (0, 1)]
    assert sum(z.optimizer for z in zero1) == memory_per_rank(psi, 1, "DDP", precision="fp32").optimizer
    assert all(z.parameters == 4 * psi and z.optimizer < 8 * psi for z in zero1)
    # ... and all three compute the same training, bit for bit on 2 gloo ranks.
    reference = by["DDP", 0][1]
    for strategy in STRATEGIES:
        for rank in (0, 1):
            weights = by[strategy, rank][1]
            assert all(torch.equal(reference[name], weights[name]) for name in reference), (strategy, rank)
