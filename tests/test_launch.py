"""ddp_lab.launch on real gloo process groups: results, output, environment."""

import os
import socket
import subprocess
import sys
import textwrap
import time

import psutil
import pytest
import torch
import torch.distributed as dist

import ddp_lab
from ddp_lab.host import available_cores
from ddp_lab.launcher import forkserver
from ddp_lab.launcher.forkserver import add_forkserver_preload


def test_results_come_back_indexed_by_rank():
    def total(x):
        t = torch.tensor([x * (dist.get_rank() + 1)])
        dist.all_reduce(t)
        return dist.get_rank(), t.item()

    assert ddp_lab.launch(total, 4, args=(1.0,)) == [(r, 10.0) for r in range(4)]


def test_output_is_shown_in_rank_order_whatever_order_ranks_print(capsys):
    def shout():
        rank = dist.get_rank()
        time.sleep(0.05 * (3 - rank))  # rank 3 prints first, rank 0 last
        print(f"hello from {rank}")
        print(f"bye from {rank}", file=sys.stderr)
        os.system(f"echo C-level output from {rank}")

    ddp_lab.launch(shout, 4)
    out = capsys.readouterr().out
    expected = "".join(
        f"[rank {r}] hello from {r}\n[rank {r}] bye from {r}\n[rank {r}] C-level output from {r}\n"
        for r in range(4))
    assert out.endswith(expected)


def test_functions_classes_and_modules_defined_locally_are_shipped_by_value():
    scale = 3.0

    class Doubler(torch.nn.Module):
        def forward(self, x):
            return 2 * x

    model = torch.nn.Linear(2, 1)
    torch.nn.init.constant_(model.weight, 1.0)
    torch.nn.init.constant_(model.bias, 0.0)

    def work(module, callback):
        return callback(Doubler()(module(torch.ones(1, 2)))).item()

    results = ddp_lab.launch(work, 2, args=(model,), kwargs={"callback": lambda t: t * scale})
    assert results == [12.0, 12.0]


def test_each_rank_sees_the_torchrun_environment():
    names = ["RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK",
             "MASTER_ADDR", "MASTER_PORT"]

    def environment():
        return {name: os.environ[name] for name in names}

    envs = ddp_lab.launch(environment, 4, nodes=2)
    assert [e["RANK"] for e in envs] == ["0", "1", "2", "3"]
    assert [e["LOCAL_RANK"] for e in envs] == ["0", "1", "0", "1"]
    assert [e["GROUP_RANK"] for e in envs] == ["0", "0", "1", "1"]
    assert {e["WORLD_SIZE"] for e in envs} == {"4"}
    assert {e["LOCAL_WORLD_SIZE"] for e in envs} == {"2"}
    assert {e["MASTER_ADDR"] for e in envs} == {"127.0.0.1"}
    assert len({e["MASTER_PORT"] for e in envs}) == 1


def test_the_notebooks_environment_reaches_the_ranks(monkeypatch):
    monkeypatch.setenv("DDP_LAB_TEST_SETTING", "set after the forkserver started")
    assert ddp_lab.launch(lambda: os.environ["DDP_LAB_TEST_SETTING"], 2) == [
        "set after the forkserver started"] * 2


def test_default_group_is_ready_before_fn_runs():
    def state():
        return dist.is_initialized(), dist.get_backend(), dist.get_world_size()

    assert ddp_lab.launch(state, 2, backend="gloo") == [(True, "gloo", 2)] * 2


def test_fn_can_initialise_the_group_itself_as_under_torchrun():
    def script_style():
        assert not dist.is_initialized()
        dist.init_process_group("gloo")  # env:// from the torchrun variables
        t = torch.ones(1)
        dist.all_reduce(t)
        dist.destroy_process_group()
        return t.item()

    assert ddp_lab.launch(script_style, 3, init_process_group=False) == [3.0] * 3


def test_ranks_share_the_cores_instead_of_oversubscribing(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)  # as in a shell that sets none
    expected = max(1, available_cores() // 4)
    assert ddp_lab.launch(torch.get_num_threads, 4) == [expected] * 4
    assert ddp_lab.launch(torch.get_num_threads, 2, threads=3) == [3, 3]


def test_omp_num_threads_sets_the_threads_per_rank_as_under_torchrun(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert ddp_lab.launch(torch.get_num_threads, 2) == [3, 3]
    monkeypatch.setenv("OMP_NUM_THREADS", "2,1")  # nested OpenMP levels: the first counts
    assert ddp_lab.launch(torch.get_num_threads, 1) == [2]


@pytest.mark.parametrize("bad", ["0", "four", "-2"])
def test_a_bad_omp_num_threads_is_named_before_anything_starts(monkeypatch, bad):
    monkeypatch.setenv("OMP_NUM_THREADS", bad)
    with pytest.raises(ValueError, match=f"OMP_NUM_THREADS='{bad}' in the environment"):
        ddp_lab.launch(torch.get_num_threads, 2)


def test_ranks_are_not_forked_from_the_caller():
    # Forking the caller breaks once it has initialised CUDA; ranks come from
    # the forkserver instead, whose parent is this process.
    parents = ddp_lab.launch(os.getppid, 2)
    assert os.getpid() not in parents
    assert psutil.Process(parents[0]).ppid() == os.getpid()


def garbage_collector_state():
    import gc

    return gc.isenabled(), gc.get_freeze_count()


def test_ranks_inherit_torch_frozen_out_of_the_garbage_collectors_walks():
    # ddp_lab.launcher.forkserver_preload imports torch with the collector off, then
    # freezes what it made; ranks collect their own garbage as usual.
    for enabled, frozen in ddp_lab.launch(garbage_collector_state, 2):
        assert enabled
        assert frozen > 100_000, f"only {frozen} objects frozen: torch was not preloaded frozen"


def test_start_forkserver_gets_the_first_launch_ready_in_the_background_with_what_was_added_to_preload(tmp_path):
    # In a fresh Python, so that no forkserver runs yet.
    script = tmp_path / "warm.py"
    script.write_text(textwrap.dedent("""
        import os, sys, time, psutil, ddp_lab
        from multiprocessing import forkserver
        from ddp_lab.launcher.forkserver import add_forkserver_preload

        def helpers(wait=0.0):
            # A child shows the forkserver's command line only once it has
            # exec'd, which multiprocessing does not wait for: poll a little.
            deadline = time.monotonic() + wait
            while True:
                found = [p for p in psutil.Process().children() if "forkserver" in " ".join(p.cmdline())]
                if found or time.monotonic() > deadline:
                    return found
                time.sleep(0.02)

        def preloaded():
            return "xml.dom.minidom" in sys.modules  # imported by nothing but the forkserver

        if __name__ == "__main__":
            assert helpers() == []
            add_forkserver_preload("xml.dom.minidom")
            ddp_lab.start_forkserver()
            server = helpers(wait=10.0)
            ddp_lab.start_forkserver()  # already running: nothing new
            assert len(server) == 1 and helpers() == server
            assert forkserver._forkserver._forkserver_pid == server[0].pid
            parents = ddp_lab.launch(os.getppid, 2)
            assert parents == [server[0].pid] * 2  # the ranks came from it
            assert ddp_lab.launch(preloaded, 2) == [True, True]
            assert "xml.dom.minidom" not in sys.modules
            print("ok")
    """))
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0 and run.stdout.endswith("ok\n"), run.stdout + run.stderr


@pytest.mark.parametrize("name", ["no_such_module_here", "ddp_lab.no_such_module", "no_such.package", "", 3])
def test_preloading_a_module_that_does_not_exist_is_refused_by_name(name):
    with pytest.raises(ValueError, match=f"no module named {name!r} can be imported"):
        add_forkserver_preload("json", name)
    assert "json" not in forkserver._added_preloads  # all or nothing


def test_preloading_once_the_forkserver_runs_is_refused():
    ddp_lab.launch(os.getpid, 2)  # the forkserver runs
    with pytest.raises(RuntimeError, match="cannot preload json: the forkserver already runs"):
        add_forkserver_preload("json")


def test_the_ranks_of_this_test_suite_start_with_pytest_imported():
    # tests/conftest.py preloads it. Made by eval, in no module, the probe travels
    # by value: the rank imports no test file (and so no pytest) to run it.
    probe = eval("lambda: 'pytest' in __import__('sys').modules", {"__name__": "made_by_eval"})
    assert ddp_lab.launch(probe, 2) == [True, True]


def test_launch_listens_on_loopback_only():
    def listening_addresses():
        me = psutil.Process()
        mine = {c.laddr.ip for c in me.net_connections("tcp") if c.status == psutil.CONN_LISTEN}
        port = int(os.environ["MASTER_PORT"])
        store = {c.laddr.ip for c in psutil.net_connections("tcp")
                 if c.status == psutil.CONN_LISTEN and c.laddr.port == port}
        return mine, store

    for mine, store in ddp_lab.launch(listening_addresses, 2):
        assert mine and mine <= {"127.0.0.1"}
        assert store == {"127.0.0.1"}


def test_two_launches_at_once_do_not_collide(tmp_path):
    script = tmp_path / "two.py"
    script.write_text(textwrap.dedent("""
        import os, torch, torch.distributed as dist, ddp_lab
        def work():
            t = torch.ones(1); dist.all_reduce(t); return t.item(), os.environ["MASTER_PORT"]
        if __name__ == "__main__":
            results = [ddp_lab.launch(work, 2) for _ in range(5)]
            assert all(r[0][0] == 2.0 for r in results), results
            print("ports", sorted({r[0][1] for r in results}))
    """))
    runs = [subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
            for _ in range(2)]
    outputs = [run.communicate(timeout=120)[0] for run in runs]
    assert [run.returncode for run in runs] == [0, 0], outputs
    assert all("ports" in out for out in outputs)


def test_works_from_a_script_with_a_main_guard(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent("""
        import torch, torch.distributed as dist
        import ddp_lab

        def work(n):
            t = torch.full((n,), float(dist.get_rank()))
            dist.all_reduce(t)
            print("sum", t.tolist())
            return t.sum().item()

        if __name__ == "__main__":
            print(ddp_lab.launch(work, 3, args=(2,), backend="gloo"))
    """))
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == [
        "[rank 0] sum [3.0, 3.0]", "[rank 1] sum [3.0, 3.0]", "[rank 2] sum [3.0, 3.0]",
        "[6.0, 6.0, 6.0]"]


# A hundred launches leaking nothing: tests/test_stress_in_step.py, with
# failures, interrupts, deaths and timeouts mixed in.


def test_results_and_failures_carry_real_objects():
    def unpicklable_result():
        return socket.socket()

    with pytest.raises(ddp_lab.RankFailed, match="cannot be pickled back"):
        ddp_lab.launch(unpicklable_result, 2)


def test_backend_auto_says_what_it_chose(capsys):
    import ddp_lab.launcher.config as plan

    plan._said.clear()
    ddp_lab.launch(os.getpid, 2)
    ddp_lab.launch(os.getpid, 2)
    out = capsys.readouterr().out
    assert out.count("ddp_lab: backend 'auto' chose 'gloo'") == 1


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="nccl needs 2 CUDA devices; this machine has "
                    f"{torch.cuda.device_count()}")
def test_nccl_all_reduce_on_two_gpus():
    def on_gpu():
        t = torch.ones(1, device="cuda") * (dist.get_rank() + 1)
        dist.all_reduce(t)
        return dist.get_backend(), str(t.device), t.item()

    assert ddp_lab.launch(on_gpu, 2, backend="nccl") == [("nccl", "cuda:0", 3.0), ("nccl", "cuda:1", 3.0)]


def _socket_interface():
    return os.environ.get("GLOO_SOCKET_IFNAME")


def test_ranks_stay_on_loopback_whatever_the_shell_set(monkeypatch, capsys):
    # Issue 35, item 2: an inherited GLOO_SOCKET_IFNAME (meant for a cluster's
    # network card) made the ranks listen there. The name here exists nowhere,
    # so the old code failed to start the group; no traffic leaves loopback.
    from ddp_lab.host import loopback_interface

    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "ddp-no-such-if")
    assert ddp_lab.launch(_socket_interface, 2) == [loopback_interface()] * 2
    out = capsys.readouterr().out
    assert "GLOO_SOCKET_IFNAME='ddp-no-such-if' in the environment is not used" in out
