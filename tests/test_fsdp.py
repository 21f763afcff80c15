"""FSDP2 measured (Chapter 15b): sharding, the collectives of one step, the bytes held,
the cost model and the timeline's drawing. One launch of 2 real gloo ranks trains a
small MLP whose widths 2 does not divide (5 and 3 rows), under DDP and three FSDP
settings; the tests read what the ranks returned."""

import math
from fractions import Fraction

import matplotlib
import pytest
import torch
import torch.distributed as dist
from torch import nn

import ddp_lab
from ddp_lab.cost import collective_time, scaling
from ddp_lab.cost.fsdp import fsdp_tokens_to_hide, layer_all_gather_seconds, layer_forward_seconds
from ddp_lab.cost.ring_bytes import ring_bytes
from ddp_lab.data_parallel.fsdp import (
    StepRecord,
    TracedCollective,
    measure_step,
    parameter_shards,
    read_trace,
    shard_per_layer,
    traffic,
)
from ddp_lab.draw.fsdp_timeline import ROWS, draw_fsdp_timeline, draw_fsdp_timelines
from ddp_lab.models import mlp

matplotlib.use("Agg")

WIDTHS = (4, 5, 3)  # fc1: 5 rows, fc2: 3 rows: on 2 ranks, 3 + 2 and 2 + 1
PSI = 4 * 5 + 5 + 5 * 3 + 3  # 43 parameters
FC1, FC2 = 4 * (6 * 4 + 6), 4 * (4 * 5 + 4)  # the padded groups, in bytes: 6 rows and 4 rows
SETTINGS = {"DDP": None, "FSDP": {}, "no reshard": {"reshard_after_forward": False},
            "prefetch": {"forward_prefetch": True}}


def run_every_setting():
    results = {}
    for name, options in SETTINGS.items():
        model = mlp(WIDTHS, seed=0)
        if options is None:
            model = nn.parallel.DistributedDataParallel(model)
        else:
            shard_per_layer(model, **options)
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
        data = torch.Generator().manual_seed(1 + dist.get_rank())
        x, y = torch.randn(6, WIDTHS[0], generator=data), torch.randint(0, WIDTHS[-1], (6,), generator=data)
        results[name] = (measure_step(model, optimizer, x, y), parameter_shards(model))
    return results


@pytest.fixture(scope="module")
def ranks():
    return ddp_lab.launch(run_every_setting, 2, backend="gloo", timeout=120)


def issued(record):
    return [(c.op, c.nbytes, c.layer, c.prefetched) for c in record.issued]


def test_each_parameter_is_a_row_shard_split_as_torch_chunk_splits_it(ranks):
    shapes = [{s.name: (s.local_shape, s.local_bytes, s.allocated_bytes) for s in rank["FSDP"][1]} for rank in ranks]
    assert shapes[0]["fc1.weight"] == ((3, 4), 48, 48)
    assert shapes[1]["fc1.weight"] == ((2, 4), 32, 48)  # a view of a buffer padded to 3 rows
    assert shapes[0]["fc2.bias"] == ((2,), 8, 8) and shapes[1]["fc2.bias"] == ((1,), 4, 8)
    assert {s.placement for s in ranks[0]["FSDP"][1]} == {"Shard(dim=0)"}
    assert sum(s.local_bytes for rank in ranks for s in rank["FSDP"][1]) == 4 * PSI
    assert {s.placement for s in ranks[0]["DDP"][1]} == {"whole tensor"}


def test_fsdp_gathers_each_unit_twice_and_reduce_scatters_it_once(ranks):
    record = ranks[0]["FSDP"][0]
    assert issued(record) == [
        ("all_gather", FC1, "fc1", False), ("all_gather", FC2, "fc2", False),   # forward
        ("all_gather", FC2, "fc2", False), ("all_gather", FC1, "fc1", True),    # backward: fc1 prefetched
        ("reduce_scatter", FC2, "fc2", False), ("reduce_scatter", FC1, "fc1", False)]
    assert issued(ranks[1]["FSDP"][0]) == issued(record)


def test_gloo_runs_the_reduce_scatter_as_an_all_reduce_of_the_whole_group(ranks):
    executed = [(c.op, c.nbytes, c.layer) for c in ranks[0]["FSDP"][0].executed]
    assert executed == [("all_gather", FC1, "fc1"), ("all_gather", FC2, "fc2"), ("all_gather", FC2, "fc2"),
                        ("all_gather", FC1, "fc1"), ("all_reduce", FC2, "fc2"), ("all_reduce", FC1, "fc1")]


def test_ddp_all_reduces_the_gradients_once_and_fsdp_sends_one_and_a_half_times_as_much(ranks):
    ddp, fsdp = ranks[0]["DDP"][0], ranks[0]["FSDP"][0]
    assert [(c.op, c.nbytes) for c in ddp.issued] == [("all_reduce", 4 * PSI)]
    ddp_sent = sum(row.ring_bytes for row in traffic(ddp.issued, 2).values())
    fsdp_sent = sum(row.ring_bytes for row in traffic(fsdp.issued, 2).values())
    assert ddp_sent == 4 * PSI
    assert fsdp_sent / ddp_sent == Fraction(3, 2) * Fraction(FC1 + FC2, 4 * PSI)  # ZeRO's 1.5, padded
    gloo_sent = sum(row.ring_bytes for row in traffic(fsdp.executed, 2).values())
    assert gloo_sent / ddp_sent == 2 * Fraction(FC1 + FC2, 4 * PSI)


def test_without_resharding_the_backward_gathers_nothing_and_the_full_parameters_stay(ranks):
    record = ranks[0]["no reshard"][0]
    assert [c.op for c in record.issued] == ["all_gather"] * 2 + ["reduce_scatter"] * 2
    assert (record.after_forward.full, record.after_forward.sharded, record.after_forward.nbytes) == (4, 0, 4 * PSI)
    sharded = ranks[0]["FSDP"][0].after_forward
    assert (sharded.full, sharded.sharded, sharded.nbytes) == (0, 4, 4 * (3 * 4 + 3 + 2 * 5 + 2))
    assert record.held == ranks[0]["FSDP"][0].held


def test_the_ranks_hold_sixteen_bytes_per_parameter_together_the_last_one_padded(ranks):
    held = [rank["FSDP"][0].held for rank in ranks]
    assert sum(h.total for h in held) == 16 * PSI                 # fp32 Adam: 4 + 4 + 8
    assert held[0].allocated_total == held[0].total
    assert held[1].allocated_total > held[1].total                # parameters and gradients padded
    assert held[1].allocated_optimizer == held[1].optimizer       # Adam's moments are not
    assert all(h.replicated == 4 * 4 for h in held)               # one step counter per parameter
    assert ranks[0]["DDP"][0].held.total == 16 * PSI


def test_forward_prefetch_gathers_the_next_layer_before_this_one_computes(ranks):
    record = ranks[0]["prefetch"][0]
    gather_fc2 = next(s for s in record.spans if s.kind == "all_gather" and s.layer == "fc2")
    compute_fc1 = next(s for s in record.spans if s.kind == "forward" and s.layer == "fc1")
    assert gather_fc2.prefetched and gather_fc2.start < compute_fc1.start
    default = ranks[0]["FSDP"][0]
    first = [s.kind for s in default.spans if s.kind in ("all_gather", "forward")][:4]
    assert first == ["all_gather", "forward", "all_gather", "forward"]


def test_the_timeline_draws_every_span_in_its_row(ranks):
    records = [ranks[0][name][0] for name in ("FSDP", "no reshard", "prefetch")]
    fig = draw_fsdp_timelines(records, titles=["a", "b", "c"])
    assert len(fig.axes) == 3 and [ax.get_title(loc="left") for ax in fig.axes] == ["a", "b", "c"]
    ax = draw_fsdp_timeline(records[0]).axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == list(reversed(ROWS))
    assert len(ax.patches) == len(records[0].spans)


def test_the_drawing_refuses_what_it_cannot_draw(ranks):
    with pytest.raises(ValueError, match="at least one"):
        draw_fsdp_timelines([])
    with pytest.raises(TypeError, match="StepRecord"):
        draw_fsdp_timeline("a step")
    with pytest.raises(ValueError, match="no spans"):
        draw_fsdp_timeline(StepRecord(rank=0, world_size=2))
    with pytest.raises(ValueError, match="2 titles for 1 records"):
        draw_fsdp_timelines([ranks[0]["FSDP"][0]], titles=["a", "b"])


def test_ring_bytes_are_exact_and_refuse_what_is_not_a_ring_collective():
    assert ring_bytes("all_reduce", 300, 3) == 400
    assert ring_bytes("all_gather", 300, 3) == ring_bytes("reduce_scatter", 300, 3) == 200
    assert ring_bytes("broadcast", 300, 3) == 300
    assert ring_bytes("all_gather", 10, 3) == Fraction(20, 3)
    with pytest.raises(ValueError, match="op must be one of"):
        ring_bytes("gather", 8, 2)
    for nbytes in (-1, 2.0, True):
        with pytest.raises(ValueError, match="nbytes must be an int >= 0"):
            ring_bytes("all_gather", nbytes, 2)
    with pytest.raises(ValueError, match="world_size must be a positive int"):
        ring_bytes("all_gather", 8, 0)
    with pytest.raises(TypeError, match="expected TracedCollective"):
        traffic([("all_gather", 8)], 2)
    rows = traffic([TracedCollective("all_gather", 8, 0.0, 1.0), TracedCollective("all_gather", 4, 1.0, 2.0)], 2)
    assert (rows["all_gather"].count, rows["all_gather"].tensor_bytes, rows["all_gather"].ring_bytes) == (2, 12, 6)


def test_sharding_and_measuring_refuse_bad_arguments_before_anything_starts():
    with pytest.raises(TypeError, match="model must be a torch.nn.Module"):
        shard_per_layer("mlp")
    with pytest.raises(TypeError, match="reshard_after_forward must be True or False"):
        shard_per_layer(mlp(WIDTHS), reshard_after_forward=2)
    with pytest.raises(ValueError, match="device_type must be 'cpu' or 'cuda'"):
        shard_per_layer(mlp(WIDTHS), device_type="tpu")
    with pytest.raises(ValueError, match="no nn.Linear"):
        shard_per_layer(nn.Sequential(nn.ReLU()))
    with pytest.raises(RuntimeError, match="inside a rank"):
        shard_per_layer(mlp(WIDTHS))
    model = mlp(WIDTHS)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(TypeError, match="optimizer must be"):
        measure_step(model, "sgd", None, None)
    with pytest.raises(ValueError, match="warmup must be an int >= 0"):
        measure_step(model, optimizer, None, None, warmup=-1)
    with pytest.raises(ValueError, match="no 'forward' marker"):
        read_trace({"traceEvents": []}, 0, 2)


def test_fsdp_and_ddp_share_the_bandwidth_term_and_fsdp_pays_the_latency_per_layer():
    flops, beta, world, layer = 989e12, 50e9, 128, 7e9 / 32
    no_latency = fsdp_tokens_to_hide(layer, 2, world, 0.0, beta, flops, 0.4)
    all_reduce = collective_time("all_reduce", 2 * 7e9, world, 0.0, beta)
    assert math.isclose(no_latency, scaling.tokens_to_hide(7e9, all_reduce, flops, 0.4))
    with_latency = fsdp_tokens_to_hide(layer, 2, world, 9.6e-6, beta, flops, 0.4)
    assert math.isclose(with_latency - no_latency, (world - 1) * 9.6e-6 * flops * 0.4 / (2 * layer))
    forward = layer_forward_seconds(layer, with_latency, flops, 0.4)
    assert math.isclose(forward, layer_all_gather_seconds(2 * layer, world, 9.6e-6, beta))
    with pytest.raises(ValueError, match=r"utilisation must be a number in \(0, 1\]"):
        fsdp_tokens_to_hide(layer, 2, world, 9.6e-6, beta, flops, 0)
    with pytest.raises(ValueError, match="layer_bytes must be"):
        layer_all_gather_seconds(0, world, 9.6e-6, beta)
    with pytest.raises(ValueError, match="tokens must be"):
        layer_forward_seconds(layer, -1, flops)


@pytest.mark.parametrize("latency, bandwidth, says", [
    (float("nan"), 50e9, "latency must be a finite number of seconds >= 0, got nan"),
    (float("inf"), 50e9, "latency must be a finite number of seconds >= 0, got inf"),
    (True, 50e9, "latency must be a finite number of seconds >= 0, got True"),
    (-1e-6, 50e9, "latency must be a finite number of seconds >= 0, got -1e-06"),
    (9.6e-6, float("nan"), "bandwidth must be a finite number of bytes/s > 0, got nan"),
    (9.6e-6, float("inf"), "bandwidth must be a finite number of bytes/s > 0, got inf"),
    (9.6e-6, True, "bandwidth must be a finite number of bytes/s > 0, got True"),
])
def test_latency_and_bandwidth_must_be_finite_numbers(latency, bandwidth, says):
    """nan, inf or True gave a time of nan or inf (or a bandwidth of 1 byte/s) without a word."""
    for call in (lambda: layer_all_gather_seconds(1e6, 8, latency, bandwidth),
                 lambda: fsdp_tokens_to_hide(1e6, 2, 8, latency, bandwidth, 989e12)):
        with pytest.raises(ValueError) as refused:
            call()
        assert str(refused.value) == says
    with pytest.raises(ValueError, match="layer_parameters must be a finite number > 0, got True"):
        fsdp_tokens_to_hide(True, 2, 8, 9.6e-6, 50e9, 989e12)
