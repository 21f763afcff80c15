"""Chapter 15g on real ranks: expert parallelism, ring attention and sequence parallelism
against one process, their bytes against ``ddp_lab.cost``'s formulas (one launch of 4 ranks)."""

import pytest

import ddp_lab
from ddp_lab.cost import experts as cost_experts
from ddp_lab.cost import sequences
from ddp_lab.cost.ring_bytes import ring_bytes


def _on_rank():
    from ddp_lab.model_parallel import experts, ring_attention, sequence_parallel

    return (experts.compare_with_one_process(16, 8, skews=(0.0, 1.5)),
            ring_attention.compare_with_full_attention(16, 8),
            sequence_parallel.compare_with_tensor_parallel(8, 16))


@pytest.fixture(scope="module")
def runs():
    return ddp_lab.launch(_on_rank, 4, backend="gloo")


def test_experts_equal_one_process_and_bytes_match_the_formula(runs):
    for skew in (0.0, 1.5):
        routes = [r[0][skew]["sent"] for r in runs]
        for rank, (moe, _, _) in enumerate(runs):
            run = moe[skew]
            assert all(run["same"])
            assert run["received"] == [routes[s][rank] for s in range(4)]
            formula = cost_experts.moe_step_bytes(routes, rank, hidden=8)
            names = [(phase, name) for phase, name, _ in run["calls"]]
            assert names == [("forward", "all_to_all")] * 3 + [("backward", "all_to_all")] * 2
            sizes = [nbytes for _, _, nbytes in run["calls"]]
            assert sizes[:3] == [formula["counts"], formula["dispatch"], formula["combine"]]
            assert sum(sizes[3:]) == formula["backward"]
    skewed = cost_experts.tokens_per_expert([r[0][1.5]["sent"] for r in runs])
    assert max(skewed) > 16 and sum(skewed) == 64


def test_ring_attention_equals_full_attention_and_receives_w_minus_1_blocks(runs):
    for _, (same, calls), _ in runs:
        assert same
        received = sum(nbytes for name, nbytes in calls if name == "recv")
        assert received == sequences.ring_attention_bytes(16, 4, 8)
        assert [name for name, _ in calls] == ["send", "recv"] * 3


def test_sequence_parallelism_equals_tensor_parallelism(runs):
    for _, _, sp in runs:
        assert sp["same"] == {"tensor parallel": True, "sequence parallel": True}
        tp_calls, sp_calls = sp["calls"]["tensor parallel"], sp["calls"]["sequence parallel"]
        assert [n for _, n, _ in tp_calls] == ["all_reduce"] * 2
        assert sorted(n for _, n, _ in sp_calls) == ["all_gather", "all_gather", "reduce_scatter", "reduce_scatter"]
        wire = sum(ring_bytes(n, b, 4) for _, n, b in sp_calls)
        assert wire == sum(ring_bytes(n, b, 4) for _, n, b in tp_calls)
        assert sp["norm_saved"] == {"tensor parallel": sequences.norm_region_elements(8, 16, 4, False),
                                    "sequence parallel": sequences.norm_region_elements(8, 16, 4, True)}


def test_overlap_condition_is_the_ring_attention_papers_without_latency():
    # 16-bit values, no latency: n >= F / beta, Liu et al.'s c >= F / B
    assert sequences.min_overlap_block(128, 989e12, 0.0, 450e9) == 2198
    n = sequences.min_overlap_block(128, 989e12, 3.4e-6, 450e9)
    assert sequences.overlap_holds(n, 128, 989e12, 3.4e-6, 450e9)
    assert not sequences.overlap_holds(n - 1, 128, 989e12, 3.4e-6, 450e9)


def test_bad_inputs_are_named():
    with pytest.raises(ValueError, match="W x W table"):
        cost_experts.moe_step_bytes([[1, 2]], 0, 8)
    with pytest.raises(ValueError, match="split evenly over the 3 ranks"):
        sequences.ring_attention_bytes(16, 3, 8)
    with pytest.raises(ValueError, match="capacity_factor"):
        cost_experts.expert_capacity(64, 4, 0)
