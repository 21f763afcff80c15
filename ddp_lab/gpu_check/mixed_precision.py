"""FSDP2's ``MixedPrecisionPolicy`` on a GPU (Chapter 15e): memory held and step time against fp32.

Chapter 15e shows on CPU ranks what the policy casts and what it halves on
the wire. What it buys on a GPU is memory and time, which only a GPU can
show: this check trains the same model with FSDP2 (``fully_shard`` per
layer, as ``ddp_lab.data_parallel.fsdp_production.shard_model`` does) on one
GPU rank, once in fp32 and once with ``MixedPrecisionPolicy(param_dtype=
torch.bfloat16, reduce_dtype=torch.float32)``, and reports for each:

- the peak of the memory the rank's tensors held during the steps
  (``torch.cuda.max_memory_allocated`` after ``reset_peak_memory_stats``),
  and the memory still held after them (parameters, gradients, Adam's state;
  each step's batch is drawn on the device when the step needs it);
- the time of a step (``ddp_lab.bench.timing.elapsed_seconds``: CUDA events);
- the losses, which bf16 changes a little and must not change much.

The model is wide and the batch large (:data:`WIDTHS`, :data:`BATCH`), so
that activations, which bf16 halves, are a large part of the peak.
``on_rank_mixed_precision`` runs in a rank on any device, so the test suite
runs it on a CPU rank with a small model (no memory figures there).
"""

from __future__ import annotations

import os

import torch
import torch.distributed as dist
import torch.nn.functional as F

import ddp_lab
from ddp_lab.bench.timing import elapsed_seconds
from ddp_lab.data_parallel.fsdp_production import shard_model
from ddp_lab.devices import device_for
from ddp_lab.gpu_check.runner import Finding, expect
from ddp_lab.models import mlp

__all__ = ["WIDTHS", "BATCH", "on_rank_mixed_precision", "fsdp2_mixed_precision"]

WIDTHS = (1024,) * 9 + (10,)  # eight 1024 x 1024 layers and a head: 8.4 M parameters
BATCH = 8192                  # samples per step


def _policies():
    from torch.distributed.fsdp import MixedPrecisionPolicy

    return {"fp32": None, "bf16": MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)}


def _run(policy, device, widths, batch, steps, warmup):
    from torch.distributed.device_mesh import init_device_mesh

    on_gpu = device.type == "cuda"
    if on_gpu:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    mesh = init_device_mesh(device.type, (dist.get_world_size(),))
    model = shard_model(mlp(widths, seed=0).to(device), mesh, policy)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    data = torch.Generator(device=device).manual_seed(dist.get_rank())  # the same batches in both runs
    losses = []

    def train(count):
        for _ in range(count):  # each batch drawn on the device when its step needs it
            x = torch.randn(batch, widths[0], generator=data, device=device)
            y = torch.randint(0, widths[-1], (batch,), generator=data, device=device)
            optimizer.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(x).float(), y)
            loss.backward()
            optimizer.step()
            losses.append(loss.detach())

    train(warmup)
    seconds = elapsed_seconds(lambda: train(steps), device)
    result = {"losses": [loss.item() for loss in losses], "seconds_per_step": seconds / steps,
              "peak_bytes": torch.cuda.max_memory_allocated(device) if on_gpu else None,
              "held_bytes": torch.cuda.memory_allocated(device) if on_gpu else None}
    return result


def on_rank_mixed_precision(steps: int = 10, warmup: int = 2, *, widths=WIDTHS, batch: int = BATCH) -> dict:
    """In a rank: the same FSDP2 training in fp32 and with bf16 parameters (see the module docstring)."""
    device = device_for(int(os.environ["LOCAL_RANK"]))  # cuda:LOCAL_RANK, or the CPU
    runs = {name: _run(policy, device, widths, batch, steps, warmup) for name, policy in _policies().items()}
    return {"rank": dist.get_rank(), "device": str(device), "widths": list(widths), "batch": batch, **runs}


def _mib(count):
    return f"{count / 2**20:,.0f} MiB"


def fsdp2_mixed_precision(gpus, options, steps=10):
    """FSDP2 with and without ``MixedPrecisionPolicy`` on one GPU: peak memory, step time, losses."""
    [report] = ddp_lab.launch(on_rank_mixed_precision, 1, args=(steps,), backend="nccl", timeout=options.timeout)
    fp32, bf16 = report["fp32"], report["bf16"]
    gap = max(abs(a - b) / max(abs(a), 1e-12) for a, b in zip(fp32["losses"], bf16["losses"]))
    expect(gap <= 0.05, f"bf16 training drifts from fp32: largest relative loss gap {gap:.2e} over "
                        f"{len(fp32['losses'])} steps", report)
    fp32_ms, bf16_ms = (1e3 * run["seconds_per_step"] for run in (fp32, bf16))
    return Finding(f"fully_shard on {report['device']}, {steps} steps of {report['batch']} samples: peak "
                   f"{_mib(bf16['peak_bytes'])} with bf16 parameters against {_mib(fp32['peak_bytes'])} in fp32 "
                   f"(held after: {_mib(bf16['held_bytes'])} and {_mib(fp32['held_bytes'])}); a step "
                   f"{bf16_ms:.2f} ms against {fp32_ms:.2f} ms (x{fp32_ms / bf16_ms:.2f}); losses within "
                   f"{gap:.1e} of fp32's", {**report, "largest_relative_loss_gap": gap})
