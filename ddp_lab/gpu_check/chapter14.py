"""Chapter 14's GPU runs of ``train.py``: the page's live cells and the command's checks.

Chapter 14 runs the book's training script under torchrun in the two GPU
layouts it teaches, and so does ``python -m ddp_lab.gpu_check``, through
the same two functions:

* one process per GPU: ``torchrun --nproc_per_node <GPUs> train.py``, nccl,
  local rank r on ``cuda:r`` (``set_device``, ``DDP(device_ids=[r])``);
* a process spanning two GPUs: ``--gpus-per-process 2``, half as many
  processes, each with its model split over ``cuda:2r`` and ``cuda:2r+1``,
  and ``DDP(device_ids=None)``.

Both run in a folder holding a copy of ``train.py`` (the page's ``workdir``),
so the command line they print is the one a reader types.
"""

from __future__ import annotations

import shutil
import tempfile

from ddp_lab.cluster.scripts import book_script
from ddp_lab.cluster.torchrun import run_torchrun
from ddp_lab.gpu_check.runner import CheckFailed, Finding, expect

__all__ = ["train_one_gpu_per_process", "train_spanning_two_gpus", "one_gpu_per_process", "spanning_two_gpus"]

SHORT_RUN = ["--epochs", "1", "--samples", "256"]


def train_one_gpu_per_process(workdir, gpus, timeout=300.0):
    """``torchrun --nproc_per_node <gpus> train.py``: one process per GPU, nccl."""
    return run_torchrun("train.py", [*SHORT_RUN, "--snapshot", "nccl.pt"], nproc_per_node=gpus,
                        cwd=workdir, timeout=timeout)


def train_spanning_two_gpus(workdir, gpus, timeout=300.0):
    """``torchrun --nproc_per_node <gpus // 2> train.py --gpus-per-process 2``."""
    return run_torchrun("train.py", ["--gpus-per-process", "2", *SHORT_RUN, "--snapshot", "gpus.pt"],
                        nproc_per_node=gpus // 2, cwd=workdir, timeout=timeout)


def _run_in_a_copy(train, gpus, timeout):
    with tempfile.TemporaryDirectory() as workdir:
        shutil.copy(book_script("train.py"), workdir)
        return train(workdir, gpus, timeout)


def _expect_trained(run, processes, devices):
    if not run.ok:
        raise CheckFailed(f"torchrun exited with status {run.returncode}", {"command": run.command_line,
                                                                           "output": run.tail()})
    lines = run.rank_lines(0)
    first = f"[rank 0] restart 0: WORLD_SIZE={processes}, backend nccl, devices {devices}"
    expect(lines and lines[0] == first, f"rank 0 began with {lines[0] if lines else 'nothing'!r}, not {first!r}",
           {"command": run.command_line, "rank_lines": run.rank_lines()})
    expect(lines[-1].startswith("[rank 0] done:"), f"rank 0 did not finish: its last line is {lines[-1]!r}")
    return Finding(f"$ {run.command_line}: {lines[0][len('[rank 0] '):]}; {lines[-1][len('[rank 0] '):]}",
                   {"command": run.command_line, "rank_lines": run.rank_lines()})


def one_gpu_per_process(gpus, options):
    """The check: Chapter 14's first layout trains with nccl, rank 0 on cuda:0."""
    run = _run_in_a_copy(train_one_gpu_per_process, gpus, options.timeout)
    return _expect_trained(run, gpus, "cuda:0")


def spanning_two_gpus(gpus, options):
    """The check: Chapter 14's second layout, rank 0 on cuda:0 and cuda:1."""
    run = _run_in_a_copy(train_spanning_two_gpus, gpus, options.timeout)
    return _expect_trained(run, gpus // 2, "cuda:0,cuda:1")
