"""How long it takes to get W ranks to run one all_reduce, by launcher.

Measured from the call to having every rank's result back:

- ``torch.multiprocessing.spawn``: starts W fresh Pythons, each imports torch.
- a plain fork of W processes that init gloo: fast, but unsafe once the
  caller has initialised CUDA (what Accelerate's notebook_launcher does);
  once as usual, once with gloo's teardown left to the process exit, as
  ddp_lab's ranks do, so that the two are compared like for like.
- ``ddp_lab.launch``: first call (starts the forkserver) and repeated calls.

No chapter runs it: ``python -m ddp_lab.bench launch_speed`` measures what
starting the ranks of Chapter 3's ``launch`` costs, against the plain ways.
"""

from __future__ import annotations

import multiprocessing
import os
import statistics

import torch
import torch.distributed as dist
import torch.multiprocessing

import ddp_lab
from ddp_lab.bench.timing import elapsed_seconds
from ddp_lab.host import available_cores, free_port
from ddp_lab.launcher.worker import leave_process_group
from ddp_lab.units import format_seconds

CPU = torch.device("cpu")


def trivial_all_reduce():
    t = torch.ones(1)
    dist.all_reduce(t)
    return t.item()


def _spawned_rank(rank, world_size, port):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    trivial_all_reduce()
    dist.destroy_process_group()


def time_mp_spawn(world_size):
    return elapsed_seconds(lambda: torch.multiprocessing.spawn(
        _spawned_rank, args=(world_size, free_port()), nprocs=world_size), CPU)


def _forked_rank(rank, world_size, port, results, skip_gloo_teardown):
    torch.set_num_threads(1)
    store = dist.TCPStore("127.0.0.1", port, world_size, rank == 0)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world_size)
    results.send(trivial_all_reduce())
    if skip_gloo_teardown:
        leave_process_group()  # as ddp_lab's ranks leave it
    else:
        dist.destroy_process_group()


def time_plain_fork(world_size, skip_gloo_teardown=False):
    """A plain fork launcher. With ``skip_gloo_teardown`` its ranks leave gloo's
    slow teardown to the process exit, as ddp_lab's ranks do (launcher/worker.py)."""
    context = multiprocessing.get_context("fork")

    def start_and_join():
        port = free_port()
        pipes = [context.Pipe(duplex=False) for _ in range(world_size)]
        processes = [context.Process(target=_forked_rank,
                                     args=(r, world_size, port, pipes[r][1], skip_gloo_teardown))
                     for r in range(world_size)]
        for p in processes:
            p.start()
        [reader.recv() for reader, _ in pipes]
        for p in processes:
            p.join()

    return elapsed_seconds(start_and_join, CPU)


def time_launch(world_size):
    return elapsed_seconds(lambda: ddp_lab.launch(trivial_all_reduce, world_size, backend="gloo"), CPU)


def main(world_size=4, repeats=20):
    rows = [("ddp_lab.launch, first call (starts the forkserver)", time_launch(world_size))]
    launches = [time_launch(world_size) for _ in range(repeats)]
    rows.append((f"ddp_lab.launch, repeated (median of {repeats})", statistics.median(launches)))
    forks = [time_plain_fork(world_size) for _ in range(max(3, repeats // 4))]
    baseline = statistics.median(forks)
    rows.append((f"plain fork + gloo init (median of {len(forks)})", baseline))
    quick_exits = [time_plain_fork(world_size, skip_gloo_teardown=True) for _ in forks]
    rows.append(("  the same, gloo teardown left to the exit", statistics.median(quick_exits)))
    rows.append(("torch.multiprocessing.spawn", time_mp_spawn(world_size)))

    print(f"\nCall to results of a trivial all_reduce: world_size {world_size}, gloo, "
          f"{available_cores()} cores, torch {torch.__version__}\n")
    print(f"{'launcher':<56}{'time':>10}{'vs plain fork':>16}")
    for name, seconds in rows:
        print(f"{name:<56}{format_seconds(seconds):>10}{seconds / baseline:>15.2f}x")
