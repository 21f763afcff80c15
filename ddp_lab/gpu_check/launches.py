"""The GPU launches the book promises, each run on real ranks and checked.

Chapter 14 and the README say that ``ddp_lab.launch`` works on a GPU machine:

* ``backend="auto"`` picks nccl when there is a GPU for every rank, and each
  rank is pinned to ``cuda:LOCAL_RANK`` (``torch.cuda.set_device``, called in
  ``ddp_lab.launcher.worker`` before the group is made);
* ``backend="nccl"``, asked for, does the same;
* the book's CPU examples (functions that all-reduce CPU tensors) run
  unchanged under the default backend, on a machine with a GPU per rank;
* gloo all-reduces CUDA tensors when several ranks share one GPU, Colab's
  case (one GPU, several ranks; nccl refuses two ranks on one GPU);
* a launch from a process that has already made a CUDA context works: the
  ranks are forked from the forkserver, which never touches CUDA, not from
  the notebook (``ddp_lab.launcher.worker_group``);
* ``DDP(model, device_ids=[local_rank])`` trains on each rank's GPU and keeps
  the replicas equal.

The functions named ``on_rank_...`` run inside the ranks; each check
compares what they report with the promise and says what it saw. Used by
``python -m ddp_lab.gpu_check`` (see ``ddp_lab.gpu_check.checklist``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

import ddp_lab
from ddp_lab.gpu_check.runner import CheckFailed, Finding, expect
from ddp_lab.launcher.config import GPU_AND_CPU, TIMEOUT_MARGIN, choose_backend

__all__ = ["launch_auto", "launch_nccl", "cpu_examples_on_gpus", "gloo_shared_gpu", "nccl_shared_gpu",
           "launch_after_cuda_init", "ddp_device_ids"]


# --- inside the ranks -----------------------------------------------------------------


def on_rank_report(elements=1024):
    """This rank's backend, the GPU it is pinned to, and a GPU tensor all-reduced over the ranks.

    Rank r contributes r + 1 everywhere, so every element of the sum is
    W(W+1)/2 on every rank.
    """
    rank = dist.get_rank()
    device = torch.device("cuda", torch.cuda.current_device())
    tensor = torch.full((elements,), float(rank + 1), device=device)
    dist.all_reduce(tensor)
    return {"rank": rank, "local_rank": int(os.environ["LOCAL_RANK"]), "backend": dist.get_backend(),
            "device": str(tensor.device), "sum": tensor[0].item(),
            "all_equal": bool((tensor == tensor[0]).all().item())}


def on_rank_sum_cpu_tensor():
    """The book's CPU examples in one line: all-reduce a CPU tensor, whatever the backend."""
    rank = dist.get_rank()
    tensor = torch.tensor([float(rank + 1)])
    dist.all_reduce(tensor)
    return {"rank": rank, "backend": dist.get_backend(), "sum": tensor.item()}


def on_rank_reduce_on_gpu_0(elements):
    """gloo, every rank on cuda:0: all-reduce a GPU tensor (gloo stages it through the CPU)."""
    rank = dist.get_rank()
    tensor = torch.full((elements,), float(rank + 1), device=torch.device("cuda", 0))
    dist.all_reduce(tensor)
    return {"rank": rank, "local_rank": int(os.environ["LOCAL_RANK"]), "backend": dist.get_backend(),
            "device": str(tensor.device), "sum": tensor[0].item(),
            "all_equal": bool((tensor == tensor[0]).all().item())}


def on_rank_nccl_on_gpu_0():
    """Two ranks, both on cuda:0, make an nccl group themselves and all-reduce: what NCCL says."""
    torch.cuda.set_device(0)
    dist.init_process_group("nccl")
    tensor = torch.ones(4, device="cuda:0")
    try:
        dist.all_reduce(tensor)  # the communicator is made here, at the first collective
        torch.cuda.synchronize()
        return {"rank": dist.get_rank(), "refused": False, "sum": tensor[0].item()}
    except Exception as error:  # what a reader would see: the error's type and its lines
        return {"rank": dist.get_rank(), "refused": True, "error": type(error).__name__,
                "message": [line for line in str(error).splitlines() if line.strip()][:6]}
    finally:
        dist.destroy_process_group()


def on_rank_train_ddp(steps):
    """A few DDP steps on this rank's GPU, each rank with its own data; then compare
    the weights with rank 0's (DDP averages the gradients, so they must be equal)."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    rank, local_rank = dist.get_rank(), int(os.environ["LOCAL_RANK"])
    device = torch.device("cuda", local_rank)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4)).to(device)
    ddp = DDP(model, device_ids=[local_rank])
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.1)
    data = torch.Generator().manual_seed(1 + rank)  # each rank its own batches
    losses = []
    for _ in range(steps):
        x = torch.randn(64, 32, generator=data).to(device, non_blocking=True)
        y = torch.randint(0, 4, (64,), generator=data).to(device, non_blocking=True)
        loss = F.cross_entropy(ddp(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()  # DDP all-reduces the gradients here, on the GPU, with nccl
        optimizer.step()
        losses.append(loss.item())
    weights = torch.cat([p.detach().flatten() for p in model.parameters()])
    rank_0 = weights.clone()
    dist.broadcast(rank_0, src=0)
    return {"rank": rank, "local_rank": local_rank, "device_ids": [int(i) for i in ddp.device_ids],
            "parameters_on": sorted({str(p.device) for p in model.parameters()}),
            "max_difference_from_rank_0": (weights - rank_0).abs().max().item(),
            "first_loss": losses[0], "last_loss": losses[-1]}


# --- the checks -----------------------------------------------------------------------


def expect_one_rank_per_gpu(reports, world_size, backend="nccl"):
    """Every rank runs ``backend`` on cuda:LOCAL_RANK and got the right sum."""
    expected = world_size * (world_size + 1) / 2
    expect(len(reports) == world_size, f"{len(reports)} ranks answered, {world_size} were launched")
    for r in reports:
        expect(r["backend"] == backend, f"rank {r['rank']} runs backend {r['backend']!r}, not {backend!r}")
        expect(r["device"] == f"cuda:{r['local_rank']}",
               f"rank {r['rank']} (LOCAL_RANK={r['local_rank']}) is on {r['device']}, not "
               f"cuda:{r['local_rank']}: it was not pinned with torch.cuda.set_device")
        expect(r["sum"] == expected and r["all_equal"],
               f"rank {r['rank']} got the sum {r['sum']:g} (all elements equal: {r['all_equal']}), "
               f"expected {expected:g} everywhere")
    return expected


def launch_auto(gpus, options):
    """``launch(fn, W, backend="auto")`` with a GPU for every rank: nccl, rank r on cuda:r."""
    parent_has_cuda = torch.cuda.is_initialized()
    reports = ddp_lab.launch(on_rank_report, gpus, backend="auto", timeout=options.timeout)
    total = expect_one_rank_per_gpu(reports, gpus, backend=GPU_AND_CPU)  # nccl for CUDA, gloo for CPU tensors
    return Finding(f"{gpus} rank(s): 'auto' chose {GPU_AND_CPU!r}; rank r on cuda:r; all-reduced sum {total:g} on every "
                   f"rank (launched from a process {'with' if parent_has_cuda else 'without'} a CUDA context)",
                   {"ranks": reports, "parent_cuda_initialised": parent_has_cuda})


def launch_nccl(gpus, options):
    """``launch(fn, W, backend="nccl")``: the same, asked for by name."""
    reports = ddp_lab.launch(on_rank_report, gpus, backend="nccl", timeout=options.timeout)
    total = expect_one_rank_per_gpu(reports, gpus)
    return Finding(f"{gpus} rank(s) on nccl, rank r on cuda:r; all-reduced sum {total:g} on every rank",
                   {"ranks": reports})


def cpu_examples_on_gpus(gpus, options):
    """The README's promise that the book's CPU examples run unchanged on a GPU machine:
    ``launch(fn, W)`` with the default backend ("auto") on a function that all-reduces
    CPU tensors, as the chapters' functions do, with a GPU for every rank (``"cpu:gloo,cuda:nccl"``)
    and with one rank more than there are GPUs (gloo)."""
    said, details = [], {}
    for world_size in (gpus, gpus + 1):
        reports = ddp_lab.launch(on_rank_sum_cpu_tensor, world_size, timeout=options.timeout)
        expected = world_size * (world_size + 1) / 2
        for r in reports:
            expect(r["sum"] == expected, f"{world_size} ranks: rank {r['rank']} got the sum {r['sum']:g}, "
                                         f"expected {expected:g}")
        said.append(f"{world_size} rank(s), backend {reports[0]['backend']!r}: sum {expected:g} on every rank")
        details[f"ranks_{world_size}"] = reports
    return Finding("a CPU tensor all-reduced: " + "; ".join(said), details)


def gloo_shared_gpu(gpus, options, world_size=2, elements=1 << 20):
    """Colab's case: two gloo ranks on one GPU, all-reducing CUDA tensors (4 MiB)."""
    auto = choose_backend("auto", gpus + 1)
    expect(auto == "gloo", f"backend 'auto' chose {auto!r} for {gpus + 1} ranks on {gpus} GPU(s), not 'gloo'")
    reports = ddp_lab.launch(on_rank_reduce_on_gpu_0, world_size, args=(elements,), backend="gloo",
                             timeout=options.timeout)
    expected = world_size * (world_size + 1) / 2
    for r in reports:
        expect(r["backend"] == "gloo" and r["device"] == "cuda:0",
               f"rank {r['rank']} ran {r['backend']!r} on {r['device']}, not gloo on cuda:0")
        expect(r["sum"] == expected and r["all_equal"],
               f"rank {r['rank']} got the sum {r['sum']:g}, expected {expected:g} everywhere")
    return Finding(f"{world_size} gloo ranks sharing cuda:0 all-reduced a 4 MiB CUDA tensor: sum {expected:g} "
                   f"on every rank; 'auto' picks gloo for {gpus + 1} ranks on {gpus} GPU(s)",
                   {"ranks": reports, "auto_for_more_ranks_than_gpus": auto})


def nccl_shared_gpu(gpus, options, world_size=2):
    """Chapter 14 says that NCCL refuses two ranks on one GPU: two ranks on cuda:0 try.

    ``launch`` itself refuses ``backend="nccl"`` with fewer GPUs than ranks,
    so the ranks make their group themselves (``init_process_group=False``),
    as a script that calls ``set_device(0)`` on every rank would.
    """
    reports = ddp_lab.launch(on_rank_nccl_on_gpu_0, world_size, backend="gloo", init_process_group=False,
                             timeout=min(options.timeout, 120.0))
    expect(all(r["refused"] for r in reports),
           f"NCCL all-reduced with {world_size} ranks on cuda:0 (sums {[r.get('sum') for r in reports]}): "
           "the book says it refuses", {"ranks": reports})
    said = next((line for line in reports[0]["message"] if "Duplicate GPU" in line), reports[0]["message"][0])
    return Finding(f"{world_size} ranks on cuda:0 with nccl: {reports[0]['error']}: {said.strip()}",
                   {"ranks": reports})


def initialise_cuda_then_launch(world_size, timeout):
    """In a fresh process: make a CUDA context (as a notebook cell running
    ``model.cuda()`` would), and only then launch, which starts the forkserver."""
    torch.zeros(1, device="cuda")
    initialised = torch.cuda.is_initialized()
    reports = ddp_lab.launch(on_rank_report, world_size, backend="nccl", timeout=timeout)
    return {"parent_cuda_initialised": initialised, "ranks": reports}


def launch_after_cuda_init(gpus, options):
    """A launch from a process that already holds a CUDA context.

    It runs in a fresh Python, so that its first launch (and the forkserver)
    comes after the context: the order that breaks with plain ``fork``.
    """
    code = ("import json, ddp_lab.gpu_check.launches as launches; print(json.dumps("
            f"launches.initialise_cuda_then_launch({gpus}, {options.timeout!r})))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=options.timeout + TIMEOUT_MARGIN, env=dict(os.environ))
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
        raise CheckFailed(f"the launch after CUDA was initialised exited with status {done.returncode}",
                          {"output": tail})
    result = json.loads(done.stdout.strip().splitlines()[-1])
    expect(result["parent_cuda_initialised"], "the process did not hold a CUDA context before launching")
    total = expect_one_rank_per_gpu(result["ranks"], gpus)
    return Finding(f"a process holding a CUDA context launched {gpus} nccl rank(s): rank r on cuda:r, "
                   f"sum {total:g} on every rank", result)


def ddp_device_ids(gpus, options, steps=5):
    """``DDP(model, device_ids=[local_rank])`` on one GPU per rank, with nccl."""
    reports = ddp_lab.launch(on_rank_train_ddp, gpus, args=(steps,), backend="nccl", timeout=options.timeout)
    for r in reports:
        local = r["local_rank"]
        expect(r["device_ids"] == [local], f"rank {r['rank']}: DDP's device_ids is {r['device_ids']}, not [{local}]")
        expect(r["parameters_on"] == [f"cuda:{local}"],
               f"rank {r['rank']}: the replica's parameters are on {r['parameters_on']}, not cuda:{local}")
        expect(r["max_difference_from_rank_0"] <= 1e-6,
               f"rank {r['rank']}'s weights differ from rank 0's by {r['max_difference_from_rank_0']:g} after "
               f"{steps} steps: the gradients were not averaged")
    worst = max(r["max_difference_from_rank_0"] for r in reports)
    return Finding(f"{gpus} rank(s), DDP(model, device_ids=[r]) on cuda:r: {steps} steps on different data; "
                   f"weights equal on every rank (largest difference from rank 0: {worst:g})",
                   {"ranks": reports, "steps": steps})
