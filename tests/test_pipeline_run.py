"""Pipelines run on real ranks (ddp_lab.model_parallel.pipeline_run) and read from their slots
(ddp_lab.model_parallel.pipeline_timeline)."""

import pytest
import torch
import torch.nn.functional as F

import ddp_lab
from ddp_lab.model_parallel.pipeline import Slot, bubble_fraction, pipeline_schedule
from ddp_lab.model_parallel.pipeline_run import run_pipeline, split_stages
from ddp_lab.model_parallel.pipeline_timeline import (
    activations_held,
    aligned,
    mean_duration,
    measured_bubble,
    order,
    respects_dependencies,
)
from ddp_lab.models import mlp

WIDTHS, MICROBATCHES = (8,) * 8 + (3,), 4  # 8 Linear layers: 2 per stage on 4 ranks


def batch():
    generator = torch.Generator().manual_seed(1)
    return torch.randn(4 * MICROBATCHES, 8, generator=generator), torch.randint(0, 3, (4 * MICROBATCHES,),
                                                                               generator=generator)


def both_schedules():
    model, (x, y) = mlp(WIDTHS, seed=0), batch()
    return {schedule: run_pipeline(model, x, y, schedule=schedule, microbatches=MICROBATCHES)
            for schedule in ("gpipe", "1f1b")}


@pytest.fixture(scope="module")
def runs():
    return ddp_lab.launch(both_schedules, 4, backend="gloo", timeout=120)


def test_both_schedules_compute_the_single_process_step(runs):
    model, (x, y) = mlp(WIDTHS, seed=0), batch()
    F.cross_entropy(model(x), y).backward()
    reference = dict(model.named_parameters())
    expected_losses = [F.cross_entropy(model(a), b).item() for a, b in zip(x.chunk(MICROBATCHES),
                                                                           y.chunk(MICROBATCHES))]
    for schedule in ("gpipe", "1f1b"):
        names = []
        for rank in runs:
            for step in rank[schedule]:  # two steps, from zero gradients each time
                for name, grad in step.gradients.items():
                    assert torch.allclose(grad, reference[name].grad, atol=1e-6), (schedule, name)
            names += list(rank[schedule][-1].gradients)
        assert sorted(names) == sorted(reference)  # every parameter, on exactly one stage
        assert runs[3][schedule][-1].losses == pytest.approx(expected_losses, abs=1e-6)
        assert all(not rank[schedule][-1].losses for rank in runs[:3])


def test_the_measured_order_is_the_simulated_one(runs):
    for schedule, held in (("gpipe", [4, 4, 4, 4]), ("1f1b", [4, 3, 2, 1])):
        slots = [slot for rank in runs for slot in rank[schedule][-1].slots]
        simulated = pipeline_schedule(4, MICROBATCHES, schedule)
        assert [order(slots, s) for s in range(4)] == [order(simulated, s) for s in range(4)]
        assert activations_held(slots) == held
        assert respects_dependencies(slots)  # the ranks share one clock
        assert all(rank[schedule][-1].stage == r for r, rank in enumerate(runs))
    assert order([s for rank in runs for s in rank["1f1b"][-1].slots], 0) == "F0 F1 F2 F3 B0 B1 B2 B3"


def test_split_stages_keeps_names_and_parameters():
    model = mlp((4, 8, 8, 8, 2), seed=0)
    stages = split_stages(model, 3)
    assert [list(dict(s.named_children())) for s in stages] == [["fc1", "relu1"], ["fc2", "relu2"],
                                                                 ["fc3", "relu3", "fc4"]]
    assert stages[1].fc2.weight is model.fc2.weight
    with pytest.raises(ValueError, match=r"stages must be at most 4 \(the model has 4 Linear layers\), got 5"):
        split_stages(model, 5)
    with pytest.raises(TypeError, match="model must be an nn.Sequential of named layers, got Linear"):
        split_stages(torch.nn.Linear(2, 2), 1)


def test_run_pipeline_refuses_bad_arguments_before_starting():
    model, (x, y) = mlp(WIDTHS, seed=0), batch()
    with pytest.raises(ValueError, match="schedule must be one of 'gpipe', '1f1b'; got 'zb'"):
        run_pipeline(model, x, y, schedule="zb", microbatches=4)
    with pytest.raises(ValueError, match="does not split into 3 equal micro-batches"):
        run_pipeline(model, x, y, schedule="gpipe", microbatches=3)
    with pytest.raises(ValueError, match="y one label per sample"):
        run_pipeline(model, x, y[:2], schedule="gpipe", microbatches=4)
    with pytest.raises(TypeError, match="keep_gradients must be True or False"):
        run_pipeline(model, x, y, schedule="gpipe", microbatches=4, keep_gradients=None)
    with pytest.raises(RuntimeError, match="runs inside ranks"):
        run_pipeline(model, x, y, schedule="gpipe", microbatches=4)


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
@pytest.mark.parametrize("stages, microbatches", [(2, 2), (4, 8), (3, 5)])
def test_the_simulated_schedules_measure_the_textbook_bubble(schedule, stages, microbatches):
    slots = pipeline_schedule(stages, microbatches, schedule)
    assert measured_bubble(slots) == pytest.approx(bubble_fraction(stages, microbatches))
    assert respects_dependencies(slots)
    assert mean_duration(slots, "F") == 1.0 and mean_duration(slots, "B") == 2.0


def test_reading_slots():
    late = [Slot(0, "F", 0, 10.0, 12.0), Slot(1, "F", 0, 12.5, 14.5), Slot(1, "B", 0, 15.0, 19.0),
            Slot(0, "B", 0, 19.5, 23.5)]
    assert [(s.start, s.end) for s in aligned(late)] == [(0.0, 1.0), (1.25, 2.25), (2.5, 4.5), (4.75, 6.75)]
    assert [s.end for s in aligned(late, unit=0.5)] == [4.0, 9.0, 18.0, 27.0]
    assert measured_bubble(late) == pytest.approx(1 - 12 / (2 * 13.5))
    assert respects_dependencies(late)
    assert not respects_dependencies([Slot(0, "F", 0, 10.0, 12.0), Slot(1, "F", 0, 11.0, 13.0)])
    assert activations_held(late) == [1, 1]
    with pytest.raises(ValueError, match="no slots"):
        measured_bubble([])
    with pytest.raises(TypeError, match="slots must be Slot records, got tuple"):
        order([(0, "F", 0, 0.0, 1.0)], 0)
    with pytest.raises(ValueError, match=r"stage 2 has no slots; the stages are \[0, 1\]"):
        order(late, 2)
    with pytest.raises(ValueError, match="unit must be a finite number of seconds > 0"):
        aligned(late, unit=0)
    with pytest.raises(ValueError, match="phase must be 'F' or 'B', got 'W'"):
        mean_duration(late, "W")
