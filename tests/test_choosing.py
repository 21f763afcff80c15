"""Chapter 15d's decision procedure (ddp_lab.model_parallel.choosing): memory first,
then communication, for a 7B and a 70B model on nodes of 8 GPUs of 80 GB."""

import pytest

from ddp_lab.cost.links import LINKS
from ddp_lab.cost.scaling import GPUS
from ddp_lab.memory import memory_per_rank
from ddp_lab.model_parallel.choosing import (
    Cluster,
    Training,
    Transformer,
    activation_bytes,
    choose_layout,
    fitting_layouts,
    tensor_parallel_degrees,
)

SEVEN_B = Transformer("7B", 7e9, 4096, 32)
SEVENTY_B = Transformer("70B", 70e9, 8192, 80)
TRAINING = Training(sequence=4096, micro_batch=1, global_batch=1024, utilisation=0.4)


def cluster(nodes=8):
    return Cluster(nodes, 8, 80e9, GPUS["h100"].flops, LINKS["nvlink"], LINKS["infiniband"])


def test_activations_are_34_sbh_per_layer_divided_by_the_tensor_parallel_degree():
    assert activation_bytes(SEVEN_B, TRAINING) == 34 * 4096 * 4096 * 32
    assert activation_bytes(SEVENTY_B, TRAINING, tp=8) == 34 * 4096 * 8192 * 80 / 8
    assert tensor_parallel_degrees(8) == [1, 2, 4, 8] and tensor_parallel_degrees(6) == [1, 2]


def test_memory_keeps_the_least_sharded_stage_that_fits_for_each_degree():
    layouts, lines = fitting_layouts(SEVENTY_B, cluster(), TRAINING)
    assert [(layout.tp, layout.dp, layout.stage) for layout in layouts] == [(2, 32, "ZeRO-3"), (4, 16, "ZeRO-2"),
                                                                             (8, 8, "ZeRO-1")]
    eight = layouts[-1]
    assert eight.states == memory_per_rank(70e9 / 8, 8, "ZeRO-1").total  # 35 GB + 13.125 GB
    assert eight.memory <= 80e9 < memory_per_rank(70e9 / 8, 8, "DDP").total
    assert lines[0].startswith("   TP 1 x DP 64") and "ZeRO-3 109 GB no" in lines[0]


def test_7b_data_parallel_with_zero_1_and_no_tensor_parallelism():
    decision = choose_layout(SEVEN_B, cluster(), TRAINING)
    best = decision.layout
    assert (best.tp, best.dp, best.stage) == (1, 64, "ZeRO-1") and best.tensor_parallel == 0
    assert [(layout.tp, layout.stage) for layout in decision.candidates] == [(1, "ZeRO-1"), (2, "DDP"), (4, "DDP"),
                                                                              (8, "DDP")]
    # TP costs more the larger its degree; the data-parallel share falls with the replicas' size
    tp = [layout.tensor_parallel for layout in decision.candidates]
    assert tp == sorted(tp)
    assert decision.steps[-1].startswith("3. Choice: TP 1 x DP 64, ZeRO-1, 47.6 GB per GPU")


@pytest.mark.parametrize("model, nodes", [(SEVEN_B, 8), (SEVENTY_B, 8), (SEVENTY_B, 1)])
def test_the_reasoning_fits_the_books_80_columns_and_loses_no_word(model, nodes):
    decision = choose_layout(model, cluster(nodes), TRAINING if nodes > 1 else Training(4096, 1, 64, 0.4))
    printed = str(decision).splitlines()
    assert max(len(line) for line in printed) <= 80
    assert " ".join(printed).split() == " ".join(decision.steps).split()
    # each layout tried starts its own line; what wraps continues further in
    assert (sum(line.startswith(("   TP", "   Nothing")) for line in printed)
            == sum(step.startswith(("   TP", "   Nothing")) for step in decision.steps))


def test_70b_tensor_parallel_inside_the_node_and_zero_1_across_nodes():
    decision = choose_layout(SEVENTY_B, cluster(), TRAINING)
    best = decision.layout
    assert (best.tp, best.dp, best.stage) == (8, 8, "ZeRO-1")
    zero3 = decision.candidates[0]
    assert zero3.stage == "ZeRO-3" and zero3.data_parallel > zero3.compute  # its per-micro-batch gathers dominate
    # compute: 6 Ψ tokens / (GPUs x peak x utilisation)
    assert best.compute == pytest.approx(6 * 70e9 * 1024 * 4096 / (64 * GPUS["h100"].flops * 0.4))
    assert best.communication < 0.25 * best.compute


def test_a_model_too_large_for_the_gpus_gets_no_layout():
    decision = choose_layout(SEVENTY_B, cluster(nodes=1), Training(4096, 1, 64, 0.4))
    assert decision.layout is None and decision.candidates == []
    assert "Nothing fits" in str(decision)


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="hidden must be a positive int, got 0"):
        Transformer("x", 1e9, 0, 2)
    with pytest.raises(ValueError, match="utilisation must be a number in \\(0, 1\\], got 0"):
        Training(4096, 1, 8, 0)
    with pytest.raises(ValueError, match="precision must be one of"):
        Training(4096, 1, 8, 0.5, precision="fp8")
    with pytest.raises(TypeError, match="intra must be a ddp_lab.cost.links.Link"):
        Cluster(1, 8, 80e9, 1e15, 450e9, LINKS["infiniband"])
    with pytest.raises(TypeError, match="model must be a ddp_lab.model_parallel.choosing.Transformer"):
        choose_layout("7B", cluster(), TRAINING)
    with pytest.raises(ValueError, match="global_batch 100 does not split into micro-batches of 1 over 64"):
        choose_layout(SEVEN_B, cluster(), Training(4096, 1, 100, 0.4))
