"""Chapter 8b's checker on real gloo ranks: the right accumulation loop passes;
each usual slip fails with a message that names it."""

import pytest

from ddp_lab.checks.accumulation import check_accumulation


def answers():
    """The reader's possible answers, built inside a function so that they are
    shipped to the ranks by value, as a notebook's functions are."""
    import contextlib

    import torch.nn.functional as F

    def right(model, optimizer, micro_batches):
        k = len(micro_batches)
        for i, (x, y) in enumerate(micro_batches):
            context = model.no_sync() if i < k - 1 else contextlib.nullcontext()
            with context:
                loss = F.cross_entropy(model(x), y) / k
                loss.backward()
        optimizer.step()

    def no_no_sync(model, optimizer, micro_batches):
        for x, y in micro_batches:
            (F.cross_entropy(model(x), y) / len(micro_batches)).backward()
        optimizer.step()

    def backward_only_inside(model, optimizer, micro_batches):
        k = len(micro_batches)
        for i, (x, y) in enumerate(micro_batches):
            loss = F.cross_entropy(model(x), y) / k      # forward outside no_sync
            if i < k - 1:
                with model.no_sync():
                    loss.backward()
            else:
                loss.backward()
        optimizer.step()

    def all_inside(model, optimizer, micro_batches):
        with model.no_sync():
            for x, y in micro_batches:
                (F.cross_entropy(model(x), y) / len(micro_batches)).backward()
        optimizer.step()

    def forward_inside_backward_outside(model, optimizer, micro_batches):
        for x, y in micro_batches:
            with model.no_sync():
                loss = F.cross_entropy(model(x), y) / len(micro_batches)
            loss.backward()
        optimizer.step()

    def not_divided(model, optimizer, micro_batches):
        k = len(micro_batches)
        for i, (x, y) in enumerate(micro_batches):
            with model.no_sync() if i < k - 1 else contextlib.nullcontext():
                F.cross_entropy(model(x), y).backward()
        optimizer.step()

    def divided_by_world_size_too(model, optimizer, micro_batches):
        import torch.distributed as dist

        k, world_size = len(micro_batches), dist.get_world_size()
        for i, (x, y) in enumerate(micro_batches):
            with model.no_sync() if i < k - 1 else contextlib.nullcontext():
                (F.cross_entropy(model(x), y) / k / world_size).backward()
        optimizer.step()

    def step_per_micro_batch(model, optimizer, micro_batches):
        k = len(micro_batches)
        for i, (x, y) in enumerate(micro_batches):
            with model.no_sync() if i < k - 1 else contextlib.nullcontext():
                (F.cross_entropy(model(x), y) / k).backward()
            optimizer.step()

    def zeroes_each_time(model, optimizer, micro_batches):
        k = len(micro_batches)
        for i, (x, y) in enumerate(micro_batches):
            optimizer.zero_grad()
            with model.no_sync() if i < k - 1 else contextlib.nullcontext():
                (F.cross_entropy(model(x), y) / k).backward()
        optimizer.step()

    def bypasses_ddp(model, optimizer, micro_batches):
        for x, y in micro_batches:
            (F.cross_entropy(model.module(x), y) / len(micro_batches)).backward()
        optimizer.step()

    def crashes(model, optimizer, micro_batches):
        raise ValueError("not written yet")

    def never_ends(model, optimizer, micro_batches):
        import time

        while True:  # computes for ever, and never waits for another rank
            time.sleep(0.01)

    def slow_on_rank_0(model, optimizer, micro_batches):
        import time

        import torch.distributed as dist

        if dist.get_rank() == 0:
            time.sleep(60)  # the other ranks wait for it in DDP's all-reduce
        right(model, optimizer, micro_batches)

    return {f.__name__: f for f in (right, no_no_sync, backward_only_inside, all_inside,
                                     forward_inside_backward_outside, not_divided, divided_by_world_size_too,
                                     step_per_micro_batch, zeroes_each_time, bypasses_ddp, crashes,
                                     never_ends, slow_on_rank_0)}


A = answers()


def kinds(result):
    return [m.kind for m in result.mistakes]


def test_the_right_loop_passes():
    result = check_accumulation(A["right"])
    assert result and result.correct == result.total == 8, str(result)
    assert str(result) == ("✓ all 8 checks correct (right: 4 micro-batches per optimizer step vs one big-batch "
                           "step, 2 ranks, 2 steps)")


def test_the_right_loop_passes_with_other_counts():
    assert check_accumulation(A["right"], world_size=3, micro_batches=2, steps=1)


def test_forward_outside_no_sync_is_too_many_all_reduces():
    result = check_accumulation(A["no_no_sync"])
    assert kinds(result) == ["forward_outside"] and result.correct == result.total - 2
    text = str(result)
    assert "steps 1-2: 4 all-reduces per optimizer step, expected 1 (one per bucket)" in text
    assert "the forward pass of micro-batches 1-3 ran outside no_sync()" in text
    assert "The weights are still right, but 3 all-reduces per step are wasted" in text


def test_backward_inside_no_sync_is_not_enough_either():
    # the forward decides: a backward inside no_sync still all-reduces
    result = check_accumulation(A["backward_only_inside"])
    assert kinds(result) == ["forward_outside"]
    assert "4 all-reduces per optimizer step, expected 1" in str(result)


def test_last_micro_batch_inside_no_sync_never_all_reduces():
    result = check_accumulation(A["all_inside"])
    assert kinds(result) == ["last_inside"] and result.correct == 2  # only optimizer.step counted right
    text = str(result)
    assert "no all-reduce ran: the last micro-batch too ran inside no_sync()" in text
    assert "the replicas differ" in text


def test_forward_inside_backward_outside_never_all_reduces():
    result = check_accumulation(A["forward_inside_backward_outside"])
    assert kinds(result) == ["forward_inside_backward_outside"]
    text = str(result)
    assert "the forward passes ran inside no_sync() and the backward passes outside it" in text
    assert "Leaving the context before backward() is too late" in text


def test_loss_not_divided_by_the_micro_batches_is_a_factor_k():
    result = check_accumulation(A["not_divided"])
    assert kinds(result) == ["factor"] and result.correct == result.total - 2
    assert "was not divided by the number of micro-batches (4): the 4 gradients add up to 4 times" in str(result)


def test_dividing_by_the_world_size_too_is_named():
    result = check_accumulation(A["divided_by_world_size_too"])
    assert kinds(result) == ["factor"]
    assert "divided by the world size as well: the step is 1/2 of the big batch's" in str(result)
    assert "DDP already averages the gradients over the ranks" in str(result)


def test_a_step_per_micro_batch_is_named():
    result = check_accumulation(A["step_per_micro_batch"])
    assert kinds(result) == ["step_count"]
    assert "optimizer.step() was called 4 times in one step" in str(result)


def test_zeroing_between_micro_batches_is_named():
    result = check_accumulation(A["zeroes_each_time"])
    assert kinds(result) == ["zeroed"]
    assert "the gradients were zeroed after micro-batches 1-3" in str(result)


def test_bypassing_ddp_is_named():
    result = check_accumulation(A["bypasses_ddp"])
    assert kinds(result) == ["bypassed"]
    assert "no forward pass went through the DDP model" in str(result)


def test_an_exception_in_the_reader_code_is_reported_not_raised():
    result = check_accumulation(A["crashes"])
    assert kinds(result) == ["error"] and result.correct == 0
    assert "step 1: your code raised: ValueError: not written yet" in str(result)


def test_ranks_still_computing_at_the_timeout_are_too_slow_not_a_hang():
    # No rank waits for another: no deadlock, whatever the timeout says.
    result = check_accumulation(A["never_ends"], timeout=3)
    assert kinds(result) == ["too_slow"] and result.correct == 0, str(result)
    text = str(result)
    assert "no rank was waiting for another" in text and "so this is no deadlock" in text
    assert "rank 0: running never_ends() line" in text and "give it more time (e.g. timeout=6)" in text


def test_ranks_waiting_for_a_rank_still_computing_are_too_slow_not_a_hang():
    result = check_accumulation(A["slow_on_rank_0"], timeout=3)
    assert kinds(result) == ["too_slow"], str(result)
    text = str(result)
    assert "rank 1 was waiting for rank 0, which was still running your code" in text
    assert "rank 0: running slow_on_rank_0() line" in text and "rank 1: waiting in " in text


def test_a_wrong_signature_is_named_before_any_rank_starts():
    result = check_accumulation(lambda model, optimizer: None)
    assert kinds(result) == ["signature"]
    assert "def step(model, optimizer, micro_batches)" in str(result)


@pytest.mark.parametrize("kwargs, error, message", [
    ({"step": 3}, TypeError, "step must be a function"),
    ({"step": A["right"], "world_size": 1}, ValueError, "world_size must be 2, 3 or 4"),
    ({"step": A["right"], "micro_batches": 1}, ValueError, "micro_batches must be at least 2"),
    ({"step": A["right"], "steps": 0}, ValueError, "steps must be a positive int"),
])
def test_misuse_raises(kwargs, error, message):
    with pytest.raises(error, match=message):
        check_accumulation(**kwargs)
