"""A checker's timeout: a deadlock only when the ranks wait for each other, "too slow" when one still computes."""

import pytest

from ddp_lab.checks import collectives, ddp, harness, ring, zero1
from ddp_lab.launcher.errors import RanksTimedOut

BUSY = {0: "running my_fn() line 4: total = slow_sum(tensor)",
        1: "running my_fn() line 4: total = slow_sum(tensor)"}
MIXED = {0: "running my_fn() line 4: total = slow_sum(tensor)",
         1: "waiting in recv() (torch.distributed), called from my_fn() line 6: dist.recv(t, src=0)"}
STUCK = {0: "waiting in send() (torch.distributed), called from my_fn() line 5: dist.send(t, dst=1)",
         1: "waiting in send() (torch.distributed), called from my_fn() line 5: dist.send(t, dst=0)"}


def test_still_computing_tells_a_busy_rank_from_a_wait():
    assert harness.still_computing("W = 2", RanksTimedOut(2, STUCK), 2) is None
    busy = harness.still_computing("W = 2", RanksTimedOut(2, BUSY), 2)
    assert busy.kind == "too_slow" and "deadlock" not in busy.message.replace("no deadlock", "")
    assert "no rank was waiting for another" in busy.message and "timeout=4" in busy.message
    assert "rank 1: running my_fn() line 4" in busy.message
    mixed = harness.still_computing("W = 2", RanksTimedOut(2, MIXED), 2)
    assert mixed.kind == "too_slow"
    assert "rank 1 was waiting for rank 0, which was still running your code" in mixed.message


def _timed_out(unfinished):
    def fake(*args, **kwargs):
        return None, RanksTimedOut(kwargs.get("timeout", 2), unfinished)
    return fake


def my_all_reduce(tensor):
    return tensor


def my_ring_all_reduce(tensor):
    return tensor


class MyZeRO1:
    def __init__(self, params, lr):
        pass


def _runs(monkeypatch):
    """Each checker, with its launch answering a timeout: (name, run it, its deadlock kind)."""
    yield "collectives", collectives, lambda: collectives.check_all_reduce(my_all_reduce, world_sizes=(2,),
                                                                          timeout=2), "deadlock"
    yield "ring", ring, lambda: ring.check_ring_all_reduce(my_ring_all_reduce, world_sizes=(2,), timeout=2), \
        "deadlock"
    yield "ddp", ddp, lambda: ddp.check_ddp(lambda module: module, timeout=2), "hang"
    yield "zero1", zero1, lambda: zero1.check_zero1(MyZeRO1, timeout=2), "hang"


@pytest.mark.parametrize("unfinished", [BUSY, MIXED], ids=["all busy", "one busy"])
def test_no_checker_calls_a_busy_rank_a_deadlock(monkeypatch, unfinished):
    for name, module, run, _ in _runs(monkeypatch):
        monkeypatch.setattr(module, "launch_checked", _timed_out(unfinished))
        result = run()
        assert not result, name
        kinds = [m.kind for m in result.mistakes]
        assert kinds == ["too_slow"], (name, result.mistakes)
        message = result.mistakes[0].message
        assert "still running your code" in message and "rank 0: running my_fn() line 4" in message, name


def test_ranks_waiting_for_each_other_are_still_a_deadlock(monkeypatch):
    for name, module, run, kind in _runs(monkeypatch):
        monkeypatch.setattr(module, "launch_checked", _timed_out(STUCK))
        assert [m.kind for m in run().mistakes] == [kind], name


def test_a_real_rank_that_only_computes_is_too_slow_not_deadlocked():
    def my_ring_all_reduce(tensor):
        import time

        while True:  # never waits for a neighbour: a slow (endless) computation
            time.sleep(0.01)

    result = ring.check_ring_all_reduce(my_ring_all_reduce, world_sizes=(2,), timeout=3)
    assert [m.kind for m in result.mistakes] == ["too_slow"], result.mistakes
    assert "no rank was waiting for another" in result.mistakes[0].message
    assert "my_ring_all_reduce() line" in result.mistakes[0].message
