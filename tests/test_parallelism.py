"""Pipeline schedules (ddp_lab.model_parallel.pipeline), a tensor-parallel MLP on real ranks
(ddp_lab.model_parallel.tensor_parallel), and the pictures of Part V (ddp_lab.draw)."""

import pytest
import torch

import ddp_lab
from ddp_lab.model_parallel.pipeline import bubble_fraction, pipeline_schedule
from ddp_lab.model_parallel.tensor_parallel import mlp_block, tensor_parallel_mlp


def in_flight(slots, stage):
    """Most micro-batches whose activations a stage holds at once (forward done, backward not)."""
    events = sorted([(s.start, 1) if s.phase == "F" else (s.end, -1) for s in slots if s.stage == stage])
    held = most = 0
    for _, change in events:
        held += change
        most = max(most, held)
    return most


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
@pytest.mark.parametrize("stages, microbatches", [(4, 8), (2, 1), (3, 5), (1, 4)])
def test_schedules_respect_dependencies_and_have_the_textbook_bubble(schedule, stages, microbatches):
    slots = pipeline_schedule(stages, microbatches, schedule)
    assert len(slots) == 2 * stages * microbatches
    end = {(s.stage, s.phase, s.microbatch): s.end for s in slots}
    for s in slots:
        if s.phase == "F" and s.stage > 0:
            assert s.start >= end[s.stage - 1, "F", s.microbatch]
        if s.phase == "B":
            before = (s.stage + 1, "B", s.microbatch) if s.stage < stages - 1 else (s.stage, "F", s.microbatch)
            assert s.start >= end[before]
    for stage in range(stages):  # one thing at a time
        mine = sorted((s for s in slots if s.stage == stage), key=lambda s: s.start)
        assert all(a.end <= b.start for a, b in zip(mine, mine[1:]))
    total = max(s.end for s in slots)
    assert total == (microbatches + stages - 1) * 3  # forward 1 + backward 2
    busy = sum(s.end - s.start for s in slots) / stages
    assert 1 - busy / total == pytest.approx(bubble_fraction(stages, microbatches))


def test_1f1b_holds_fewer_activations_than_gpipe():
    gpipe, one_f_one_b = pipeline_schedule(4, 8, "gpipe"), pipeline_schedule(4, 8, "1f1b")
    assert [in_flight(gpipe, s) for s in range(4)] == [8, 8, 8, 8]
    assert [in_flight(one_f_one_b, s) for s in range(4)] == [4, 3, 2, 1]


def test_bad_schedule_arguments():
    with pytest.raises(ValueError, match="schedule must be one of 'gpipe', '1f1b'"):
        pipeline_schedule(4, 8, "interleaved")
    with pytest.raises(ValueError, match="stages must be a positive int, got 0"):
        pipeline_schedule(0, 8)


@pytest.mark.parametrize("stages, microbatches, says", [
    (0, 8, "stages must be a positive int, got 0"),
    (4, 0, "microbatches must be a positive int, got 0"),
    (True, 8, "stages must be a positive int, got True"),
    (4, 2.5, "microbatches must be a positive int, got 2.5"),
])
def test_the_bubble_fraction_refuses_what_is_not_a_count(stages, microbatches, says):
    with pytest.raises(ValueError, match=says):
        bubble_fraction(stages, microbatches)  # (0, 8) was -1/7: a negative idle time


@pytest.mark.parametrize("arguments, says", [
    ((10**6, 1), "stages must be at most 128 (MAX_STAGES: each slot is simulated in Python), got 1000000"),
    ((4, 10**6), "microbatches must be at most 1024 (MAX_MICROBATCHES: each slot is simulated in Python), "
                 "got 1000000"),
])
def test_the_schedule_simulation_has_a_size_cap(arguments, says):
    with pytest.raises(ValueError) as refused:  # before: minutes of simulation, then the slots
        pipeline_schedule(*arguments)
    assert str(refused.value) == says
    assert len(pipeline_schedule(128, 4)) == 2 * 128 * 4  # the caps themselves are simulated


@pytest.mark.parametrize("duration", [float("inf"), float("nan"), True, 0])
def test_the_schedule_refuses_durations_that_are_not_finite_positive_numbers(duration):
    with pytest.raises(ValueError, match=r"forward must be a finite number of time units > 0, got "):
        pipeline_schedule(2, 2, forward=duration)


def split_mlp():
    torch.manual_seed(0)
    x, a, b = torch.randn(4, 8), torch.randn(8, 16), torch.randn(16, 8)
    z, shapes = tensor_parallel_mlp(x, a, b)
    return z, shapes, mlp_block(x, a, b)


def test_tensor_parallel_mlp_on_two_ranks_matches_the_whole_block():
    results = ddp_lab.launch(split_mlp, 2, backend="gloo")
    for z, shapes, whole in results:
        assert shapes == {"A_r": (8, 8), "Y_r": (4, 8), "B_r": (8, 8), "Z": (4, 8)}
        assert torch.allclose(z, whole, atol=1e-5)
    assert torch.equal(results[0][0], results[1][0])  # the all-reduce gave both ranks the same Z


def test_pictures_draw():
    pytest.importorskip("matplotlib")
    from ddp_lab.draw.memory import draw_memory_cases, draw_memory_per_rank, draw_memory_vs_world_size
    from ddp_lab.draw.parallelism import draw_dataparallel_vs_ddp, draw_pipeline_schedules, draw_tensor_parallel
    from ddp_lab.memory import memory_table

    fig = draw_memory_per_rank(memory_table(7.5e9, 64), capacity_gb=80)
    labels = [t.get_text() for t in fig.axes[0].texts]
    assert "  120 GB" in labels and "  31.4 GB" in labels and "  1.88 GB" in labels
    assert len(draw_memory_cases([(1.5e9, 8), (7.5e9, 64)]).axes) == 2
    assert draw_memory_vs_world_size(7.5e9).axes[0].get_xscale() == "log"
    assert len(draw_dataparallel_vs_ddp(4).axes) == 2
    assert "27%" in draw_pipeline_schedules(4, 8).get_suptitle()
    assert any(t.get_text() == "all-reduce\n(sum)" for t in draw_tensor_parallel().axes[0].texts)
    with pytest.raises(ValueError, match="gpus must be an int from 2 to 8"):
        draw_dataparallel_vs_ddp(1)
