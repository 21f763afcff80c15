"""Chapter 15f on real ranks: the 2-D step against its formula, and deeper pipelines against their counts."""

from collections import Counter
from fractions import Fraction

import pytest
import torch
import torch.nn.functional as F

import ddp_lab
from ddp_lab.cost.two_d import bytes_by_dimension, fsdp_padded_numel, two_d_collectives
from ddp_lab.model_parallel.deep_pipelines import run_virtual_pipeline, stage_indices
from ddp_lab.model_parallel.pipeline import idle_fraction, pipeline_schedule, simulate_actions
from ddp_lab.model_parallel.two_d import run_two_d_step
from ddp_lab.models import mlp

WIDTHS = (8,) * 8 + (3,)


def test_the_2d_step_matches_one_process_and_the_formula():
    runs = ddp_lab.launch(run_two_d_step, 4, backend="gloo",
                          kwargs=dict(hidden=8, ffn=32, blocks=3, tokens=16))
    plan = Counter((p.dim, p.phase, p.name, p.nbytes)
                   for p in two_d_collectives(blocks=3, hidden=8, ffn=32, tokens=16, dp=2, tp=2))
    for run in runs:
        assert run["loss_equal"] and run["gradients_equal"]
        assert run["mesh_names"] == ("dp", "tp")
        assert Counter(run["calls"]) == plan
    assert bytes_by_dimension(two_d_collectives(blocks=3, hidden=8, ffn=32, tokens=16, dp=2, tp=2))[
        "dp", "backward"] == (6720, Fraction(3360))


def test_formula_arguments_are_checked():
    assert fsdp_padded_numel([(3, 4)], 2) == 16
    with pytest.raises(ValueError, match="ffn = 30 must be divisible by tp = 4"):
        two_d_collectives(blocks=1, hidden=8, ffn=30, tokens=8, dp=2, tp=4)
    with pytest.raises(ValueError, match="tokens = 7 must be divisible by dp = 2"):
        two_d_collectives(blocks=1, hidden=8, ffn=32, tokens=7, dp=2, tp=2)


def _virtual():
    model = mlp(WIDTHS, seed=0)
    generator = torch.Generator().manual_seed(1)
    x, y = torch.randn(16, 8, generator=generator), torch.randint(0, 3, (16,), generator=generator)
    return {name: run_virtual_pipeline(model, x, y, schedule=name, microbatches=4, steps=1)[-1]
            for name in ("interleaved_1f1b", "interleaved_zero_bubble", "zbv")}


def test_virtual_stage_schedules_compute_one_process_step_and_their_bubble():
    runs = ddp_lab.launch(_virtual, 2, backend="gloo")
    whole = mlp(WIDTHS, seed=0)
    generator = torch.Generator().manual_seed(1)
    x, y = torch.randn(16, 8, generator=generator), torch.randint(0, 3, (16,), generator=generator)
    F.cross_entropy(whole(x), y).backward()
    reference = dict(whole.named_parameters())
    idle = {"interleaved_1f1b": Fraction(1, 9), "interleaved_zero_bubble": Fraction(1, 25), "zbv": Fraction(1, 25)}
    for name, expected in idle.items():
        grads = {n: g for rank in runs for n, g in rank[name]["gradients"].items()}
        assert sorted(grads) == sorted(reference)
        assert all(torch.allclose(g, reference[n].grad, atol=1e-6) for n, g in grads.items())
        assert idle_fraction(simulate_actions(runs[0][name]["orders"])) == expected
        assert {s.phase for s in runs[0][name]["slots"]} == ({"F", "B"} if name == "interleaved_1f1b"
                                                             else {"F", "I", "W"})
    assert idle_fraction(pipeline_schedule(2, 4, "1f1b", forward=2, backward=4)) == Fraction(1, 5)


def test_stage_layouts():
    assert stage_indices(1, 2, 2, "loop") == [1, 3] and stage_indices(1, 2, 2, "v") == [1, 2]
    with pytest.raises(ValueError, match="a V holds exactly 2 stages per rank"):
        stage_indices(0, 2, 3, "v")
