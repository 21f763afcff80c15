"""A hundred launches, with failures, Ctrl-C, deaths and timeouts mixed in:
nothing leaks, and no launch ever returns the reply to another (issue 19).
Every launch that succeeds returns values that name the call and the rank:
``(i, rank)``.
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
from plumbing.rank_census import rank_processes

import ddp_lab


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
