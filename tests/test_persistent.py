"""Persistent ranks: variables kept between cells, failures handled."""

import signal
import threading
import time

import pytest
import torch

import ddp_lab
from rank_census import rank_processes


@pytest.fixture
def ranks():
    with ddp_lab.Ranks(3, backend="gloo", timeout=20) as running:
        yield running


def test_cells_share_variables_and_print_in_rank_order(ranks, capsys):
    capsys.readouterr()
    ranks.execute("t = torch.ones(2) * rank")
    ranks.execute("import time\ntime.sleep(0.03 * (world_size - rank))\ndist.all_reduce(t)\nt")
    assert capsys.readouterr().out == "".join(f"[rank {r}] tensor([3., 3.])\n" for r in range(3))
    assert [v.tolist() for v in ranks.pull("t")] == [[3.0, 3.0]] * 3
    assert ranks.pull("rank", "world_size") == [(0, 3), (1, 3), (2, 3)]


def test_run_calls_a_function_on_every_rank(ranks):
    def add(x, y=0):
        import torch.distributed as dist

        return dist.get_rank() + x + y

    assert ranks.run(add, 10, y=1) == [11, 12, 13]


def test_a_failure_on_one_rank_leaves_the_ranks_usable(ranks):
    ranks.execute("x = 1")
    with pytest.raises(ddp_lab.RankFailed) as caught:
        ranks.execute("if rank == 1:\n    x = 1 / 0")
    assert caught.value.rank == 1 and "1 / 0" in caught.value.remote_traceback
    assert ranks.running
    assert ranks.pull("x") == [1, 1, 1]


def test_ranks_stuck_behind_a_failure_are_stopped_and_restart_cleanly(ranks, capsys):
    pids = ranks.pids
    with pytest.raises(ddp_lab.RankFailed) as caught:
        ranks.execute("if rank == 1:\n    raise RuntimeError('no')\ndist.barrier()")
    assert sorted(caught.value.still_running) == [0, 2]
    assert not ranks.running
    assert "ranks.restart()" in capsys.readouterr().out
    with pytest.raises(RuntimeError, match="not running"):
        ranks.execute("1")
    ranks.restart()
    assert ranks.pids != pids and ranks.run(lambda: 5) == [5, 5, 5]


def test_a_hung_cell_times_out_and_says_where(ranks, capsys):
    with pytest.raises(TimeoutError) as caught:
        ranks.execute("if rank == 0:\n    dist.all_reduce(torch.ones(1))", timeout=1.5)
    assert sorted(caught.value.unfinished) == [0]
    assert "all_reduce()" in caught.value.unfinished[0]
    assert not ranks.running and not rank_processes()
    # what was lost, and what to do, in the error and in the cell's output
    assert str(caught.value).endswith(
        "The ranks were stopped, and the variables they held are gone: %ddp restart "
        "(or ranks.restart()) starts fresh ones; then run again the cells that made "
        "the variables you need.")
    assert "and their variables are gone; %ddp restart" in capsys.readouterr().out


def test_push_gives_every_rank_the_notebooks_values(ranks, capsys):
    offset = 10

    def shifted(x):
        return x + offset

    ranks.push(shifted=shifted, base=torch.tensor([1.0]))
    capsys.readouterr()
    ranks.execute("print(shifted(rank), base + rank)")
    assert capsys.readouterr().out == "".join(
        f"[rank {r}] {10 + r} tensor([{1 + r}.])\n" for r in range(3))
    with pytest.raises(TypeError, match="lock \\(lock\\) cannot be pickled"):
        ranks.push(lock=threading.Lock())
    with pytest.raises(ValueError, match="'no name' cannot be a variable name"):
        ranks.push(**{"no name": 1})
    assert ranks.pull("base")[2].item() == 1.0


def test_interrupting_a_cell_keeps_the_ranks(ranks, tmp_path):
    # Ctrl-C once every rank has set y (each touches a file then), not after a
    # fixed delay that a loaded machine could outrun.
    main, ready, sent = threading.get_ident(), [tmp_path / f"rank{r}" for r in range(3)], []

    def interrupt_when_ready():
        deadline = time.monotonic() + 30
        while not all(path.exists() for path in ready) and time.monotonic() < deadline:
            time.sleep(0.02)
        sent.append(time.monotonic())
        signal.pthread_kill(main, signal.SIGINT)

    interrupter = threading.Thread(target=interrupt_when_ready, daemon=True)
    with pytest.raises(KeyboardInterrupt):
        interrupter.start()
        ranks.execute(f"import time\ny = 1\nopen(f'{tmp_path}/rank{{rank}}', 'w').close()\ntime.sleep(3600)")
    assert time.monotonic() - sent[0] < 2  # the cell gave the kernel back at once
    assert all(path.exists() for path in ready)
    assert ranks.running and ranks.pull("y") == [1, 1, 1]


def test_interrupting_ranks_stuck_in_a_collective_stops_them(ranks):
    main = threading.get_ident()
    timer = threading.Timer(0.7, lambda: signal.pthread_kill(main, signal.SIGINT))
    start = time.monotonic()
    with pytest.raises(KeyboardInterrupt):  # entered first: the signal can only land inside it
        timer.start()
        ranks.execute("if rank == 0:\n    dist.all_reduce(torch.ones(1))\nelse:\n    import time; time.sleep(3600)")
    assert time.monotonic() - start < 0.7 + 2
    assert not ranks.running


def test_stop_ends_every_rank_and_the_store():
    ranks = ddp_lab.Ranks(2)
    port = ranks._processes.port
    ranks.stop()
    assert not rank_processes()
    import socket

    with socket.socket() as probe:
        assert probe.connect_ex(("127.0.0.1", port)) != 0
