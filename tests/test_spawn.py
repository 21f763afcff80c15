"""ddp_lab.spawn: code written for torch.multiprocessing.spawn, run unchanged (issue 19).

Real ranks, real gloo groups, each meeting where its own code says: the
tutorial's MASTER_ADDR/MASTER_PORT set inside the function, a tcp:// and a
file:// init_method. Ports are picked at test time on 127.0.0.1.
"""

import os
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.distributed as dist

import ddp_lab
from ddp_lab.host import free_port


# PyTorch's "Writing Distributed Applications" tutorial, as written there,
# except that the port is an argument (two tests must not share 29500).
def run(rank, size):
    """Distributed function to be implemented later."""
    tensor = torch.ones(1) * (rank + 1)
    dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    print("Rank ", rank, " has data ", tensor[0].item())


def init_process(rank, size, fn, port, backend="gloo"):
    """Initialize the distributed environment."""
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group(backend, rank=rank, world_size=size)
    fn(rank, size)
    dist.destroy_process_group()


def test_the_tutorials_code_runs_unchanged(capsys):
    size = 3
    assert ddp_lab.spawn(init_process, args=(size, run, free_port()), nprocs=size, join=True) is None
    assert capsys.readouterr().out == "".join(
        f"[rank {r}] Rank  {r}  has data  6.0\n" for r in range(size))


def with_init_method(rank, size, url):
    dist.init_process_group("gloo", init_method=url, rank=rank, world_size=size)
    t = torch.tensor([rank + 1])
    dist.all_reduce(t)
    print(f"{dist.get_rank()} of {dist.get_world_size()}: {t.item()}")
    dist.destroy_process_group()


@pytest.mark.parametrize("scheme", ["tcp", "file"])
def test_an_init_method_of_the_ranks_own_is_honoured(scheme, tmp_path, capsys):
    url = (f"tcp://127.0.0.1:{free_port()}" if scheme == "tcp"
           else f"file://{tmp_path / 'rendezvous'}")
    ddp_lab.spawn(with_init_method, args=(2, url), nprocs=2)
    assert capsys.readouterr().out == "[rank 0] 0 of 2: 3\n[rank 1] 1 of 2: 3\n"


def environment(rank):
    return {name: os.environ.get(name) for name in
            ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_PORT", "TORCHELASTIC_USE_AGENT_STORE")}


def print_environment(rank):
    print(sorted(environment(rank).items()))


def test_a_spawned_rank_inherits_the_notebooks_environment_without_the_agent_store(
        monkeypatch, capsys):
    monkeypatch.setenv("MASTER_PORT", "12345")
    monkeypatch.setenv("TORCHELASTIC_USE_AGENT_STORE", "True")
    ddp_lab.spawn(print_environment, nprocs=2)
    out = capsys.readouterr().out.splitlines()
    assert out == [f"[rank {r}] [('LOCAL_RANK', '{r}'), ('MASTER_PORT', '12345'), ('RANK', '{r}'), "
                   f"('TORCHELASTIC_USE_AGENT_STORE', None), ('WORLD_SIZE', '2')]" for r in range(2)]
    # launch, torchrun's way, tells its ranks to use the store it hosts
    launched = ddp_lab.launch(environment, 1, args=(0,), init_process_group=False)[0]
    assert launched["TORCHELASTIC_USE_AGENT_STORE"] == "True"


def test_a_world_size_that_is_not_nprocs_is_named_when_the_ranks_are_stopped():
    with pytest.raises(ddp_lab.RanksTimedOut) as caught:
        ddp_lab.spawn(init_process, args=(4, run, free_port()), nprocs=2, timeout=3)
    message = " ".join(str(caught.value).split())  # as one line: it is wrapped at 80 characters
    assert "waiting in init_process_group() (torch.distributed), called from init_process()" in message
    assert ("called init_process_group with world_size=4, but ddp_lab.spawn started 2 processes: "
            "it waits for ranks that will never come. Every rank must pass world_size=2") in message
    assert "collective" not in message


def own_port(port):
    os.environ["MASTER_PORT"] = str(port)  # what an mp.spawn tutorial does
    dist.init_process_group("gloo")


def test_launch_says_that_a_port_of_the_ranks_own_belongs_with_spawn():
    port = free_port()
    with pytest.raises(ddp_lab.RanksTimedOut) as caught:
        ddp_lab.launch(own_port, 2, args=(port,), init_process_group=False, timeout=3)
    message = " ".join(str(caught.value).split())  # as one line: it is wrapped at 80 characters
    assert f"Rank 0 looks for the rendezvous store at 127.0.0.1:{port}, but ddp_lab.launch hosts it" \
           in message
    assert "TORCHELASTIC_USE_AGENT_STORE=True" in message
    assert "ddp_lab.spawn(fn, args, nprocs)" in message


def fails(rank):
    if rank == 1:
        raise ValueError(f"rank {rank} is unhappy")


def test_a_rank_that_raises_is_named_with_its_traceback():
    with pytest.raises(ddp_lab.RankFailed, match="rank 1 raised ValueError: rank 1 is unhappy") as caught:
        ddp_lab.spawn(fails, nprocs=2)
    assert "in fails" in caught.value.remote_traceback


def tutorial_that_exits(rank, size, port, how):
    """The tutorial's run, ended with sys.exit as some scripts end: status 0 is success."""
    init_process(rank, size, run, port)
    if how == "sys.exit()":
        sys.exit()
    sys.exit(how)


@pytest.mark.parametrize("how", ["sys.exit()", 0, None])
def test_sys_exit_0_ends_a_rank_normally_as_under_mp_spawn(how, capsys):
    # torch.multiprocessing.spawn: a process that exits with status 0 has succeeded
    assert ddp_lab.spawn(tutorial_that_exits, args=(2, free_port(), how), nprocs=2) is None
    assert capsys.readouterr().out == "".join(
        f"[rank {r}] Rank  {r}  has data  3.0\n" for r in range(2))


def exits_on_rank_1(rank, code):
    if rank == 1:
        sys.exit(code)


@pytest.mark.parametrize("code, status, call", [(3, 3, "sys.exit(3)"),
                                               ("no data", 1, "sys.exit('no data')")])
def test_a_nonzero_exit_is_a_failure_naming_the_rank_and_the_code(code, status, call):
    with pytest.raises(ddp_lab.RankFailed) as caught:
        ddp_lab.spawn(exits_on_rank_1, args=(code,), nprocs=2)
    error = caught.value
    assert error.rank == 1 and error.exit_code == status and error.exc_type == "SystemExit"
    assert str(error).startswith(f"rank 1 exited with code {status} ({call}): only sys.exit(), "
                                 "sys.exit(0) and sys.exit(None) end a rank normally")
    assert "in exits_on_rank_1" in error.remote_traceback


@pytest.mark.parametrize("call, message", [
    (lambda: ddp_lab.spawn(run, args=(2,), nprocs=0), "nprocs must be a positive int, got 0"),
    (lambda: ddp_lab.spawn(run, args=2, nprocs=2), "args must be a tuple, got int: 2"),
    (lambda: ddp_lab.spawn(run, nprocs=2, join=False), "join=False: ddp_lab.spawn always waits"),
    (lambda: ddp_lab.spawn(run, nprocs=2, start_method="thread"),
     "unknown start_method 'thread': use one of 'spawn', 'fork', 'forkserver'"),
    (lambda: ddp_lab.spawn(run, nprocs=2, daemon="yes"), "daemon must be True or False, got 'yes'"),
    (lambda: ddp_lab.spawn(run, nprocs=2, timeout=0), "timeout must be a finite number of seconds > 0"),
    (lambda: ddp_lab.spawn(42, nprocs=2), "fn must be callable"),
])
def test_bad_input_is_refused_before_anything_starts(call, message):
    with pytest.raises((ValueError, TypeError)) as caught:
        call()
    assert message in str(caught.value)


def test_a_script_spawning_without_the_main_guard_is_told_so(tmp_path):
    script = tmp_path / "tutorial.py"
    script.write_text(textwrap.dedent("""
        import ddp_lab

        def run(rank, size):
            print(rank, size)

        ddp_lab.spawn(run, args=(2,), nprocs=2)
    """))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert (f"{script} starts ranks from its top-level code, line 7, without the "
            '`if __name__ == "__main__":` guard') in done.stderr


def test_a_function_missing_its_other_arguments_is_refused_before_anything_starts():
    # Issue 44: spawn calls fn(rank, *args); the tutorial's run(rank, size) needs size in args.
    with pytest.raises(TypeError) as caught:  # not RankFailed: no rank started
        ddp_lab.spawn(run, nprocs=2)
    assert str(caught.value).startswith("run(rank, size) needs 2 positional arguments (rank, size), but "
                                        "spawn calls run(rank): size is missing. ddp_lab.spawn, like "
                                        "torch.multiprocessing.spawn, calls fn(rank, *args) on each rank")
