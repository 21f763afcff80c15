"""The launch config: what a launch will do, and refusing bad input before it starts.

Everything here is checked in the notebook, before any process exists: a
mistake in the arguments gets a clear message naming the bad value and what
is allowed, instead of a crash in four processes at once.

Chapter 3 shows how ``backend="auto"`` decides; Chapter 14 asks it on a GPU machine.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from ddp_lab.host import available_cores, cuda_device_count
from ddp_lab.validate import check_positive_int, is_number

BACKENDS = ("auto", "gloo", "nccl")
# How the ranks meet (``Plan.style``): "torchrun", the launcher hosts the
# store and sets torchrun's variables (``launch``, ``Ranks``); "spawn", as
# under ``torch.multiprocessing.spawn``, the ranks' own code chooses where to
# meet (``ddp_lab.spawn``).
STYLES = ("torchrun", "spawn")
DEFAULT_TIMEOUT = 60.0
# Every timeout (a launch's, a Ranks call's, a %%ddp cell's) is at most a
# week. Waiting on the ranks' pipes counts in milliseconds held in a C int,
# which overflows past 24.8 days; a week is far beyond any lesson's need.
MAX_TIMEOUT = 7 * 24 * 3600.0
# All ranks run on this one machine, one process each.
MAX_WORLD_SIZE = 256
MAX_THREADS = 256


@dataclass(frozen=True)
class Plan:
    """A validated launch: how many ranks, which backend, how long to wait."""

    world_size: int
    nodes: int
    backend: str
    threads: int
    timeout: float
    init_process_group: bool
    style: str = "torchrun"

    @property
    def ranks_per_node(self):
        return self.world_size // self.nodes


def make_plan(world_size, *, backend="auto", nodes=1, threads=None,
              timeout=DEFAULT_TIMEOUT, init_process_group=True, style="torchrun",
              world_size_name="world_size"):
    """Check the arguments of a launch and resolve ``backend="auto"``.

    ``world_size_name`` is what the caller calls the number of ranks
    (``spawn`` says ``nprocs``, as ``torch.multiprocessing.spawn`` does).
    """
    check_positive_int(world_size_name, world_size, MAX_WORLD_SIZE,
                       "processes on this one machine")
    if style not in STYLES:
        raise ValueError(f"unknown style {style!r}: use one of {', '.join(map(repr, STYLES))}")
    check_positive_int("nodes", nodes)
    if world_size % nodes:
        raise ValueError(
            f"world_size={world_size} cannot be split evenly over nodes={nodes}: "
            f"use a nodes value that divides {world_size}")
    if threads is not None:
        check_positive_int("threads", threads, MAX_THREADS, "threads per rank")
    timeout = check_timeout(timeout)
    return Plan(
        world_size=world_size,
        nodes=nodes,
        backend=choose_backend(backend, world_size),
        threads=threads or threads_per_rank(world_size),
        timeout=timeout,
        init_process_group=bool(init_process_group),
        style=style,
    )


def check_timeout(timeout, name="timeout"):
    """The one rule for every timeout: seconds, more than 0, at most ``MAX_TIMEOUT``.

    Checked before anything starts or is sent, so a bad value never leaves
    ranks running (or stopped) behind a confusing error. Returns it as a float.
    """
    if (not is_number(timeout)
            or not timeout > 0 or timeout == float("inf")):
        raise ValueError(f"{name} must be a finite number of seconds > 0, got {timeout!r} "
                         f"(and at most {MAX_TIMEOUT:g}, one week)")
    if timeout > MAX_TIMEOUT:
        raise ValueError(f"{name} must be at most {MAX_TIMEOUT:g} seconds (one week), "
                         f"got {timeout!r}")
    return float(timeout)


def choose_backend(backend, world_size):
    """nccl when every rank can have a GPU of its own, gloo otherwise.

    ``"auto"`` says once, in the output, which one it picked and why.
    """
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}: use one of {', '.join(map(repr, BACKENDS))}")
    gpus = cuda_device_count()
    if backend == "nccl" and gpus < world_size:
        raise ValueError(
            f"backend 'nccl' needs one CUDA device per rank: world_size={world_size} "
            f"but this machine has {gpus}. Use backend='gloo' (CPU) or fewer ranks.")
    if backend != "auto":
        return backend
    if gpus >= world_size:
        choice, why = "nccl", f"{gpus} CUDA devices for {world_size} ranks"
    elif gpus:
        choice, why = "gloo", f"only {gpus} CUDA devices for {world_size} ranks"
    else:
        choice, why = "gloo", "no CUDA device"
    _say_once(f"ddp_lab: backend 'auto' chose {choice!r} ({why})")
    return choice


def threads_per_rank(world_size):
    """Intra-op threads for each rank when the launch does not say.

    ``OMP_NUM_THREADS`` if it is set, as torchrun does (it passes the
    variable on to every worker, and sets it to 1 only when it is missing);
    otherwise the CPU cores this process may use, shared evenly, at least one
    each. The book's build and tests set ``OMP_NUM_THREADS=1``, so a rank's
    float sums take the same order on every machine (chapter 10).
    """
    configured = os.environ.get("OMP_NUM_THREADS", "").split(",")[0].strip()
    if configured:  # "4,2" (nested OpenMP levels): the first is the intra-op count
        if not configured.isdigit() or not 1 <= int(configured) <= MAX_THREADS:
            raise ValueError(
                f"OMP_NUM_THREADS={configured!r} in the environment is not a whole number "
                f"of threads from 1 to {MAX_THREADS}: set it to e.g. 1, or unset it to "
                "share the cores")
        return int(configured)
    return max(1, available_cores() // world_size)


_said = set()


def _say_once(message):
    if message not in _said:
        _said.add(message)
        print(message)
