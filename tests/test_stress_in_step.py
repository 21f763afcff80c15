"""A hundred launches and a hundred persistent-rank calls, with failures, Ctrl-C,
deaths and timeouts mixed in: nothing leaks, and no call ever returns the
reply to another (issue 19). Every call that succeeds returns values that
name the call and the rank: ``(i, rank)``.
"""

import contextlib
import gc
import os
import random
import signal
import threading
import time

import psutil
import pytest
import torch.distributed as dist

import ddp_lab
import ddp_lab.launcher.worker_group
from rank_census import rank_processes


@contextlib.contextmanager
def ctrl_c_after(delay):
    main = threading.get_ident()
    timer = threading.Timer(delay, signal.pthread_kill, (main, signal.SIGINT))
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
        timer.join()


def echo(i, *ignored):
    return i, dist.get_rank()


def fail_on_rank_1(i):
    if dist.get_rank() == 1:
        raise ValueError(f"call {i} fails on rank 1")
    return i, 0


def fail_while_rank_1_is_busy(i):
    if dist.get_rank() == 0:
        raise ValueError(f"call {i} fails on rank 0")
    time.sleep(0.05)
    return i, 1


def sleep_for_ever(*ignored):
    time.sleep(3600)


def die_on_rank_1(i):
    if dist.get_rank() == 1:
        os._exit(7)
    return i, 0


def shuffled(rng, counts):
    plan = [kind for kind, n in counts.items() for _ in range(n)]
    rng.shuffle(plan)
    return plan


def resources():
    """What a leak would show: open files, child processes, sockets."""
    gc.collect()  # a socket dropped by an interrupted call closes when collected
    me = psutil.Process()
    return me.num_fds(), {p.pid for p in me.children()}, set(me.net_connections("all"))


def test_a_hundred_launches_with_failures_interrupts_and_timeouts_leak_nothing(tmp_path, monkeypatch):
    ddp_lab.launch(os.getpid, 2)  # the forkserver is up before we count
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    before = resources()  # e.g. other tests' kernels, pipes to helpers
    rng = random.Random(19)
    plan = shuffled(rng, {"ok": 60, "fail": 15, "interrupt": 15, "timeout": 5, "death": 5})
    for i, kind in enumerate(plan):
        if kind == "ok":
            assert ddp_lab.launch(echo, 2, args=(i,)) == [(i, 0), (i, 1)]
        elif kind == "fail":
            with pytest.raises(ddp_lab.RankFailed, match=f"call {i} fails on rank 1"):
                ddp_lab.launch(fail_on_rank_1, 2, args=(i,))
        elif kind == "interrupt":  # anywhere: checking, starting ranks, running, stopping
            with pytest.raises(KeyboardInterrupt), ctrl_c_after(rng.uniform(0.0, 0.2)):
                ddp_lab.launch(sleep_for_ever, 2)
        elif kind == "timeout":
            with pytest.raises(ddp_lab.RanksTimedOut):
                ddp_lab.launch(sleep_for_ever, 2, timeout=0.3)
        else:
            with pytest.raises(ddp_lab.RankDied, match="rank 1 exited with code 7"):
                ddp_lab.launch(die_on_rank_1, 2, args=(i,))
    assert not rank_processes()
    assert resources() == before
    me = psutil.Process()
    assert not me.net_connections("inet")  # no TCP port, listening or connected
    assert list(tmp_path.iterdir()) == []
    for helper in me.children():
        assert not helper.children()
        assert not [c for c in helper.net_connections("inet") if c.status == psutil.CONN_LISTEN]


def test_a_hundred_persistent_calls_never_return_a_stale_reply(monkeypatch):
    rng = random.Random(19)
    plan = shuffled(rng, {"ok": 40, "fail": 15, "busy-fail": 10, "interrupt": 15, "timeout": 4,
                          "notebook-error": 6, "pull": 5, "death": 3, "death-between-calls": 2})
    big = bytes(2_000_000)  # sending it takes a moment: some Ctrl-C land there
    ddp_lab.launch(os.getpid, 2)
    before = resources()
    ranks = ddp_lab.Ranks(2, backend="gloo", timeout=20)
    real_wait = ddp_lab.launcher.worker_group.wait
    try:
        for i, kind in enumerate(plan):
            if kind == "ok":
                assert ranks.run(echo, i, big) == [(i, 0), (i, 1)]
            elif kind == "fail":
                with pytest.raises(ddp_lab.RankFailed, match=f"call {i} fails on rank 1"):
                    ranks.run(fail_on_rank_1, i)
            elif kind == "busy-fail":
                with pytest.raises(ddp_lab.RankFailed, match=f"call {i} fails on rank 0"):
                    ranks.run(fail_while_rank_1_is_busy, i)
                assert ranks.running
            elif kind == "interrupt":
                with pytest.raises(KeyboardInterrupt), ctrl_c_after(rng.uniform(0.0, 0.05)):
                    ranks.run(sleep_for_ever, big)
                assert ranks.running
            elif kind == "timeout":
                with pytest.raises(ddp_lab.RanksTimedOut):
                    ranks.run(sleep_for_ever, timeout=0.3)
                ranks.restart()
            elif kind == "notebook-error":
                failures = iter([RuntimeError(f"injected {i}")])

                def wait_failing_once(*args, **kwargs):
                    for error in failures:
                        raise error
                    return real_wait(*args, **kwargs)

                monkeypatch.setattr(ddp_lab.launcher.worker_group, "wait", wait_failing_once)
                with pytest.raises(RuntimeError, match=f"injected {i}"):
                    ranks.run(sleep_for_ever)
                monkeypatch.setattr(ddp_lab.launcher.worker_group, "wait", real_wait)
                assert ranks.running
            elif kind == "pull":
                ranks.execute(f"v = ({i}, rank)")
                assert ranks.pull("v") == [(i, 0), (i, 1)]
            elif kind == "death":
                with pytest.raises(ddp_lab.RankDied, match="rank 1 exited with code 7"):
                    ranks.run(die_on_rank_1, i)
                ranks.restart()
            else:
                os.kill(ranks.pids[1], signal.SIGKILL)
                while "SIGKILL" not in repr(ranks):
                    time.sleep(0.01)
                with pytest.raises(ddp_lab.RankDied, match="this call ran on no rank"):
                    ranks.run(echo, i)
                ranks.restart()
            # Whatever happened, the next call gets its own reply.
            assert ranks.run(echo, -i) == [(-i, 0), (-i, 1)], (i, kind)
    finally:
        ranks.stop()
    assert not rank_processes()
    assert resources() == before
