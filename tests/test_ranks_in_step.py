"""Persistent ranks never answer the wrong call, whichever way a call ends (issue 19).

Each call is a job with an id its replies carry; a call left by an
exception, a Ctrl-C (one or two, while sending or collecting) leaves the
ranks in step, or stopped with a message that says why.
"""

import contextlib
import os
import signal
import threading
import time

import pytest

import ddp_lab
import ddp_lab.launcher.worker_group


@pytest.fixture
def ranks():
    with ddp_lab.Ranks(2, backend="gloo", timeout=20) as running:
        yield running


@contextlib.contextmanager
def ctrl_c_after(*delays):
    """Send Ctrl-C (SIGINT) to this thread after each delay, as a notebook's interrupt does."""
    main = threading.get_ident()
    timers = [threading.Timer(d, signal.pthread_kill, (main, signal.SIGINT)) for d in delays]
    for timer in timers:
        timer.start()
    try:
        yield
    finally:
        for timer in timers:
            timer.cancel()
            timer.join()


def test_a_stale_reply_is_dropped_by_its_job_id(ranks):
    def reply_to_an_old_job_first():
        import gc

        from ddp_lab.launcher import protocol, serialize
        from ddp_lab.launcher.worker import Inbox

        inbox = next(o for o in gc.get_objects() if isinstance(o, Inbox))
        inbox.reply(protocol.DONE, 1, serialize.dumps("A"))  # job 1 was the start-up job
        return "B"

    assert ranks.run(reply_to_an_old_job_first) == ["B", "B"]
    assert ranks._processes.stale_replies == 2
    assert ranks.run(lambda: "C") == ["C", "C"]


def test_a_bad_timeout_is_refused_before_anything_is_sent(ranks):
    # It used to raise OverflowError after sending, and every later call got the previous reply.
    with pytest.raises(ValueError, match="timeout must be at most 604800 seconds .one week., got 10000000.0"):
        ranks.run(lambda: "A", timeout=1e7)
    for bad in (0, -1, float("nan")):
        with pytest.raises(ValueError, match=f"timeout must be a finite number of seconds > 0, got {bad}"):
            ranks.execute("x = 1", timeout=bad)
    assert ranks.running
    assert ranks.run(lambda: "B") == ["B", "B"]


def test_an_exception_in_the_notebook_during_a_call_leaves_the_ranks_in_step(ranks, monkeypatch, capsys):
    real_wait = ddp_lab.launcher.worker_group.wait
    calls = []

    def wait_failing_once(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("injected")
        return real_wait(*args, **kwargs)

    ranks.execute("y = 1")
    monkeypatch.setattr(ddp_lab.launcher.worker_group, "wait", wait_failing_once)
    with pytest.raises(RuntimeError, match="injected"):
        ranks.execute("import time\ntime.sleep(3600)\ny = 2")
    assert "RuntimeError in the notebook ended the call" in capsys.readouterr().out
    assert ranks.running
    assert ranks.run(lambda: "B") == ["B", "B"]
    assert ranks.pull("y") == [1, 1]  # the job was interrupted on every rank


def test_a_second_ctrl_c_while_the_ranks_answer_the_first_leaves_them_in_step(ranks):
    slow_to_stop = ("import time\ny = 1\ntry:\n    time.sleep(3600)\n"
                    "except KeyboardInterrupt:\n    time.sleep(0.3)\n    raise")
    with pytest.raises(KeyboardInterrupt), ctrl_c_after(0.5, 0.55):
        ranks.execute(slow_to_stop)
    assert ranks.running
    assert ranks.run(lambda: "B") == ["B", "B"]
    assert ranks.pull("y") == [1, 1]


def test_ctrl_c_while_a_large_argument_is_being_sent_leaves_the_ranks_in_step(ranks):
    # Rank 1 is paused, so sending it the argument blocks half-way: the
    # Ctrl-C lands there. A message cut in two would leave its pipe out of step.
    paused = ranks.pids[1]
    os.kill(paused, signal.SIGSTOP)
    resume = threading.Timer(1.0, os.kill, (paused, signal.SIGCONT))
    resume.start()
    try:
        with pytest.raises(KeyboardInterrupt), ctrl_c_after(0.5):
            ranks.run(len, bytes(50_000_000))
    finally:
        resume.join()
        os.kill(paused, signal.SIGCONT)
    assert ranks.running
    assert ranks.run(lambda: "B") == ["B", "B"]


def test_ctrl_c_after_some_ranks_finished_keeps_the_ranks_and_their_variables(ranks, capsys):
    with pytest.raises(KeyboardInterrupt), ctrl_c_after(1.0):
        ranks.execute("import time\ny = rank\ntime.sleep(0.05 if rank == 0 else 3600)")
    assert ranks.running and "stopped" not in capsys.readouterr().out
    assert ranks.pull("y") == [0, 1]


def test_a_failure_while_the_other_rank_is_merely_busy_keeps_the_ranks(ranks):
    start = time.monotonic()
    with pytest.raises(ddp_lab.RankFailed) as caught:
        ranks.execute("y = rank\nif rank == 0:\n    raise ValueError('only rank 0')\n"
                      "import time\ntime.sleep(1)\nz = 2")
    assert caught.value.rank == 0 and not caught.value.still_running
    assert time.monotonic() - start >= 1  # rank 1 was waited for, not stopped
    assert ranks.running
    assert ranks.pull("y") == [0, 1]


def test_a_busy_rank_that_then_waits_for_the_failed_one_is_stopped_saying_why(ranks, capsys):
    start = time.monotonic()
    with pytest.raises(ddp_lab.RankFailed) as caught:
        ranks.execute("if rank == 0:\n    raise ValueError('no')\nimport time\ntime.sleep(0.5)\ndist.barrier()")
    assert time.monotonic() - start < 5  # not the 20 s timeout
    assert sorted(caught.value.still_running) == [1]
    assert "barrier()" in caught.value.still_running[1]
    assert not ranks.running
    out = capsys.readouterr().out
    assert "rank 1 waited in torch.distributed for rank 0, which had failed and will never join" in out
    assert "ranks.restart()" in out


def test_a_rank_that_died_between_calls_is_named_and_nothing_runs(ranks, tmp_path):
    os.kill(ranks.pids[1], signal.SIGKILL)
    deadline = time.monotonic() + 5
    while "SIGKILL" not in repr(ranks) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert "running; rank 1 was killed by signal SIGKILL (9)" in repr(ranks)
    assert "%ddp restart" in repr(ranks)
    with pytest.raises(ddp_lab.RankDied) as caught:
        ranks.execute(f"open(r'{tmp_path}' + f'/ran-on-{{rank}}', 'w').close()")
    error = caught.value
    assert error.rank == 1 and error.signal_name == "SIGKILL" and error.between_calls
    assert "after the last call: this call ran on no rank" in str(error)
    assert "%ddp restart" in str(error)
    assert list(tmp_path.iterdir()) == []  # rank 0 did not run it either
    assert not ranks.running and "stopped (rank 1 was killed by signal SIGKILL" in repr(ranks)
    ranks.restart()
    assert ranks.run(lambda: "B") == ["B", "B"]


def test_calls_from_two_threads_take_turns(ranks):
    def worker(name, answers):
        for i in range(20):
            answers.append((ranks.run(lambda n=name, i=i: (n, i)), (name, i)))

    answers = {"a": [], "b": []}
    threads = [threading.Thread(target=worker, args=(n, answers[n])) for n in answers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    for name in answers:
        assert len(answers[name]) == 20
        assert all(got == [expected] * 2 for got, expected in answers[name])
