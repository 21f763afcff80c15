"""Every GPU path the book claims, in the order ``python -m ddp_lab.gpu_check`` runs them.

The order matters once: the checks that launch ranks come first, while
this process has no CUDA context of its own (the common case: a notebook
that has not touched the GPU), and ``host_to_device_copy``, which makes one
here, comes last. ``launch_after_cuda_init`` covers the other case in a
fresh process. The machine is described (GPU names, which makes a CUDA
context too) after all of them.

The checks of ``python -m ddp_lab.gpu_check`` (Chapter 14), in the order they run.
"""

from __future__ import annotations

from ddp_lab.gpu_check import allreduce, chapter14, compiled_ddp, host_copies, launches, mixed_precision, step_profile
from ddp_lab.gpu_check.runner import Check

__all__ = ["CHECKS", "check_named"]

CHECKS = (
    Check("launch_auto", "launch(fn, W) with backend 'auto' and a GPU for every rank", (3, 14), 1,
          launches.launch_auto),
    Check("launch_nccl", "launch(fn, W, backend='nccl'): rank r pinned to cuda:r", (14,), 1,
          launches.launch_nccl),
    Check("cpu_examples_on_gpus", "the book's CPU examples unchanged: CPU tensors under backend 'auto'",
          (3, 4, 5), 1, launches.cpu_examples_on_gpus),
    Check("gloo_shared_gpu", "gloo all-reducing CUDA tensors, two ranks sharing one GPU (Colab)", (14,), 1,
          launches.gloo_shared_gpu),
    Check("nccl_shared_gpu", "nccl with two ranks on one GPU: refused, as the book says", (14,), 1,
          launches.nccl_shared_gpu),
    Check("ddp_device_ids", "DDP(model, device_ids=[local_rank]) on each rank's GPU", (8, 14), 1,
          launches.ddp_device_ids),
    Check("ddp_step_profile", "one DDP step under torch.profiler: kernels, copies and all-reduces by stream",
          (8, 14), 1, step_profile.ddp_step_profile),
    Check("all_reduce_bandwidth", "nccl all-reduce: time, algbw and busbw against size", (5, 6), 1,
          allreduce.all_reduce_bandwidth),
    Check("ring_all_reduce_nccl", "the book's ring all-reduce on nccl, against dist.all_reduce", (6,), 2,
          allreduce.ring_all_reduce_nccl),
    Check("train_one_gpu_per_process", "train.py under torchrun, one process per GPU", (14,), 1,
          chapter14.one_gpu_per_process),
    Check("train_spanning_two_gpus", "train.py under torchrun, each process spanning two GPUs", (14,), 2,
          chapter14.spanning_two_gpus),
    Check("ddp_compiled", "torch.compile(DDP(model)) with inductor: graphs per bucket, step time against eager",
          (8,), 1, compiled_ddp.ddp_compiled),
    Check("fsdp2_mixed_precision", "FSDP2 with MixedPrecisionPolicy (bf16): peak memory and step time against fp32",
          (15,), 1, mixed_precision.fsdp2_mixed_precision),
    Check("launch_after_cuda_init", "launch from a process that already holds a CUDA context", (14,), 1,
          launches.launch_after_cuda_init),
    Check("host_to_device_copy", "host-to-GPU copies from pinned and from pageable memory", (9,), 1,
          host_copies.host_to_device_copy),
)


def check_named(name: str) -> Check:
    """The check called ``name``; ValueError listing the names otherwise."""
    for check in CHECKS:
        if check.name == name:
            return check
    raise ValueError(f"no GPU check named {name!r}: the checks are {', '.join(c.name for c in CHECKS)}")
