"""FSDP2 as production scripts use it (Chapter 15e, ``ddp_lab.data_parallel.fsdp_production``):
mixed precision, distributed checkpoints (resume, reshard 4 -> 2, async_save), HSDP on a
2 x 2 mesh and gradient clipping of sharded gradients, and the chapter's two pictures
(``ddp_lab.draw.fsdp_production``). One launch of 4 real gloo ranks saves a checkpoint and
runs DDP, FSDP and HSDP; one launch of 2 ranks loads it and trains with and without mixed
precision; the tests read what the ranks returned."""

import os

import matplotlib
import pytest
import torch

import ddp_lab
from ddp_lab.cost.fsdp import hsdp_bytes_per_step
from ddp_lab.cost.ring_bytes import ring_bytes
from ddp_lab.data_parallel.fsdp_production import (
    SIZES,
    checkpoint_contents,
    checkpoint_run,
    clipping_run,
    hsdp_run,
    mixed_precision_run,
    reshard_run,
    shard_model,
)
from ddp_lab.draw.fsdp_production import draw_bytes_per_dimension, draw_checkpoint_files
from ddp_lab.models import mlp, parameter_count

matplotlib.use("Agg")

PSI = parameter_count(mlp(SIZES))  # 1,864 parameters, 7,456 bytes in fp32


def on_four(folder):
    return {"checkpoint": checkpoint_run(folder, save_after=1, steps=3), "hsdp": hsdp_run()}


def on_two(folder, full_at_save):
    return {"mixed": mixed_precision_run(steps=2), "clipping": clipping_run(),
            "reshard": reshard_run(folder, full_at_save)}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    folder = str(tmp_path_factory.mktemp("dcp"))
    four = ddp_lab.launch(on_four, 4, args=(folder,), backend="gloo")
    two = ddp_lab.launch(on_two, 2, args=(folder, four[0]["checkpoint"]["full_at_save"]), backend="gloo")
    return {"folder": folder, "four": four, "two": two}


def test_bf16_all_gathers_carry_half_the_bytes_and_the_reduction_stays_fp32(runs):
    mixed = runs["two"][0]["mixed"]
    fp32, bf16 = mixed["fp32"]["calls"], mixed["bf16"]["calls"]
    assert [n for n, _ in fp32["all_gather"]] == [2176, 4224, 1056, 1056, 4224, 2176]
    assert [2 * n for n, _ in bf16["all_gather"]] == [n for n, _ in fp32["all_gather"]]
    assert {d for _, d in bf16["all_gather"]} == {"bfloat16"} and {d for _, d in fp32["all_gather"]} == {"float32"}
    assert bf16["reduce_scatter"] == fp32["reduce_scatter"] == [(1056, "float32"), (4224, "float32"),
                                                               (2176, "float32")]


def test_the_master_copy_stays_fp32_and_the_loss_follows_fp32s(runs):
    mixed = runs["two"][0]["mixed"]
    for run in mixed.values():
        assert run["parameter_dtypes"] == run["gradient_dtypes"] == ["torch.float32"]
    fp32, bf16 = torch.tensor(mixed["fp32"]["losses"]), torch.tensor(mixed["bf16"]["losses"])
    assert torch.allclose(bf16, fp32, rtol=1e-2, atol=0) and not torch.equal(bf16, fp32)


def test_clip_grad_norm_of_dtensors_is_the_whole_gradients_norm(runs):
    clip = [result["clipping"] for result in runs["two"]]
    for run in clip:
        assert run["total_type"] == "DTensor" and run["calls"] == {"all_reduce": 1}
        assert torch.allclose(run["total"], run["reference"], rtol=1e-5) and run["same_update"]
    local = torch.stack([run["local_only"] for run in clip])
    assert (local < clip[0]["reference"]).all()
    assert torch.allclose(local.square().sum().sqrt(), clip[0]["reference"], rtol=1e-5)


def test_a_resumed_run_equals_the_uninterrupted_one_bit_for_bit(runs):
    for result in runs["four"]:
        run = result["checkpoint"]
        assert run["fresh_differed"] and run["resumed_equal"] == [True]
        slip = run["without_set_state_dict"]
        assert slip["shards_loaded"] and slip["lr"] == 2 * slip["saved_lr"]


def test_every_rank_wrote_its_quarter_and_shared_values_once(runs):
    contents = checkpoint_contents(os.path.join(runs["folder"], "step"))
    assert list(contents["sizes"]) == [".metadata"] + [f"__{r}_0.distcp" for r in range(4)]
    for name, pieces in contents["pieces"].items():
        sharded = [p for p in pieces if p[1]]
        assert sum(p[2] for p in sharded if p[0].startswith("model.")) == PSI // 4
        assert sum(p[2] for p in sharded if p[0].startswith("optimizer.")) == 2 * PSI // 4
        assert ("model.fc2.weight", (8, 32), 256, 1024) in pieces
    single = [p[0] for pieces in contents["pieces"].values() for p in pieces if not p[1]]
    assert len(single) == len(set(single)) and sum(".step" in key for key in single) == 6


def test_the_checkpoint_of_four_ranks_loads_on_two(runs):
    for result in runs["two"]:
        reshard = result["reshard"]
        assert reshard["keys_match"] and len(reshard["equal"]) == 24 and all(reshard["equal"].values())
        assert reshard["shards"]["fc2.weight"] == (16, 32)


def test_async_save_returns_a_future_and_writes_every_file(runs):
    run = runs["four"][0]["checkpoint"]
    assert run["future"] == "Future"
    assert run["async_files"] == [".metadata"] + [f"__{r}_0.distcp" for r in range(4)]


def _sent(result):
    names = {result["world_group"]: ("all ranks", 4)}
    names.update({name: (dim, 2) for dim, name in result["groups"].items()})
    sent = {}
    for layout, calls in result["calls"].items():
        for op, nbytes, group in calls:
            dim, size = names[group]
            key = (layout, op, dim)
            sent[key] = sent.get(key, 0) + ring_bytes(op, nbytes, size)
    return sent


def test_hsdp_traffic_per_mesh_dimension_matches_the_formula(runs):
    results = [result["hsdp"] for result in runs["four"]]
    assert [r["coordinate"] for r in results] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert results[0]["placements"] == "(Replicate(), Shard(dim=0))"
    sent = _sent(results[0])
    assert all(_sent(r) == sent for r in results)
    hsdp = hsdp_bytes_per_step(4 * PSI, 2, 2)
    assert sent[("HSDP", "all_gather", "shard")] == hsdp["shard"]["all_gather"]
    assert sent[("HSDP", "reduce_scatter", "shard")] == hsdp["shard"]["reduce_scatter"]
    assert sent[("HSDP", "all_reduce", "replicate")] == hsdp["replicate"]["all_reduce"]
    assert sent[("FSDP", "all_gather", "all ranks")] == hsdp_bytes_per_step(4 * PSI, 1, 4)["shard"]["all_gather"]
    assert sent[("DDP", "all_reduce", "all ranks")] == hsdp_bytes_per_step(4 * PSI, 4, 1)["replicate"]["all_reduce"]
    assert {key for key in sent if key[0] == "HSDP"} == {("HSDP", "all_gather", "shard"),
                                                         ("HSDP", "reduce_scatter", "shard"),
                                                         ("HSDP", "all_reduce", "replicate")}


def test_hsdp_gradients_match_one_process_and_the_replicas_agree_exactly(runs):
    results = {r["hsdp"]["coordinate"]: r["hsdp"] for r in runs["four"]}
    reference = results[0, 0]["reference_gradients"]
    for result in results.values():
        for name, gradient in result["full_gradients"].items():
            assert torch.allclose(gradient, reference[name], rtol=1e-5, atol=1e-7), name
    for shard in (0, 1):
        first, second = results[0, shard]["local_gradients"], results[1, shard]["local_gradients"]
        assert all(torch.equal(first[name], second[name]) for name in first)
    assert not torch.equal(results[0, 0]["local_gradients"]["fc2.weight"],
                           results[0, 1]["local_gradients"]["fc2.weight"])


def test_shard_model_refuses_what_is_not_a_module():
    with pytest.raises(TypeError, match="model must be a torch.nn.Module, got list"):
        shard_model([torch.nn.Linear(2, 2)], mesh=None)


def test_the_bytes_picture_has_a_bar_per_layout_and_labels_the_dimensions():
    fig = draw_bytes_per_dimension({"DDP": [("all_reduce", "all ranks", 11184)],
                                    "HSDP": [("all_gather", "shard", 7456), ("reduce_scatter", "shard", 3728),
                                             ("all_reduce", "replicate", 3728)]})
    ax = fig.axes[0]
    assert len(ax.patches) == 4 and [p.get_hatch() for p in ax.patches][-1] == "//"
    texts = [t.get_text() for t in ax.texts]
    assert texts == ["11,184 B", "shard", "shard", "replicate", "14,912 B"]
    with pytest.raises(ValueError, match="each row must be .collective, dimension, bytes."):
        draw_bytes_per_dimension({"DDP": [("allreduce", "all ranks", 1)]})
    with pytest.raises(ValueError, match="at least one layout"):
        draw_bytes_per_dimension({})


def test_the_checkpoint_picture_stacks_model_optimizer_and_the_rest(runs):
    contents = checkpoint_contents(os.path.join(runs["folder"], "step"))
    fig = draw_checkpoint_files(contents)
    ax = fig.axes[0]
    assert len(ax.patches) == 3 * 5
    model_bars = ax.patches[:5]
    assert [bar.get_height() for bar in model_bars] == [0] + [4 * PSI // 4] * 4
    assert [t.get_text() for t in ax.texts] == [f"{size:,}" for size in contents["sizes"].values()]
    with pytest.raises(ValueError, match="'sizes' and 'pieces'"):
        draw_checkpoint_files({"sizes": {}})


def test_the_pictures_text_is_legible_at_the_column_width(runs):
    from ddp_lab.draw import MIN_TEXT_PX, smallest_shown_px

    contents = checkpoint_contents(os.path.join(runs["folder"], "step"))
    bars = {"DDP\n(4 ranks)": [("all_reduce", "all ranks", 11184)],
            "HSDP\n(2 × 2 mesh)": [("all_gather", "shard", 7456), ("all_reduce", "replicate", 3728)]}
    for fig in (draw_checkpoint_files(contents), draw_bytes_per_dimension(bars)):
        assert smallest_shown_px(fig) >= MIN_TEXT_PX
