"""DDP under ``torch.compile`` on a GPU (Chapter 8c): graphs per bucket, and step time against eager.

Chapter 8c counts, on CPU ranks, the graphs Dynamo captures from
``torch.compile(DDP(Net))``: with DDPOptimizer (Dynamo's default,
``torch._dynamo.config.optimize_ddp``) one graph per DDP bucket, so that
each bucket's all-reduce can start while the backward pass goes on. On a
GPU the compiled graphs are compiled for real, by inductor. This check runs
Chapter 8c's model on one GPU rank (nccl):

1. the chapter's count: a backend that only records the graphs it is
   given, beside the bucket count DDP settled on;
2. the same DDP model trained eagerly and under ``torch.compile`` (inductor),
   from the same weights on the same batches: the losses of every step, and
   the time of a step after the compiled one's first steps have compiled it
   (``ddp_lab.bench.timing.elapsed_seconds``: CUDA events on a GPU).

``on_rank_compiled_ddp`` runs in a rank on any device and backend, so the
test suite runs it on a CPU rank with a compiler backend that compiles
nothing (``"eager"``).
"""

from __future__ import annotations

import os

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

import ddp_lab
from ddp_lab.bench.timing import elapsed_seconds
from ddp_lab.devices import device_for
from ddp_lab.gpu_check.runner import Finding, expect
from ddp_lab.models import mlp

__all__ = ["WIDTHS", "BUCKET_CAP_MB", "Net", "on_rank_compiled_ddp", "ddp_compiled"]

WIDTHS = (2, 512, 512, 512, 512, 3)  # Chapter 8c's model
BUCKET_CAP_MB = 1                    # Chapter 8c's cap: four buckets
BATCH = 4096                         # samples per step: enough work for a GPU to time


class Net(nn.Module):
    """Chapter 8c's model class: a class of one's own, which Dynamo compiles (a bare Sequential it skips)."""

    def __init__(self, widths=WIDTHS):
        super().__init__()
        self.layers = mlp(widths, seed=0)

    def forward(self, x):
        return self.layers(x)


def _ddp(device, widths, bucket_cap_mb):
    model = Net(widths).to(device)
    ids = [device.index] if device.type == "cuda" else None
    return DDP(model, device_ids=ids, bucket_cap_mb=bucket_cap_mb)


def _batches(steps, widths, batch, device):
    data = torch.Generator().manual_seed(0)
    return [(torch.randn(batch, widths[0], generator=data).to(device),
             torch.randint(0, widths[-1], (batch,), generator=data).to(device)) for _ in range(steps)]


def _train(step_fn, batches):
    return [step_fn(x, y) for x, y in batches]


def _stepper(model, forward):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)

    def step(x, y):
        optimizer.zero_grad(set_to_none=True)
        loss = F.cross_entropy(forward(x), y)
        loss.backward()
        optimizer.step()
        return loss.detach()

    return step


def _graphs_and_buckets(device, widths, bucket_cap_mb, batch):
    graphs = []

    def counting_backend(graph_module, example_inputs):
        graphs.append(graph_module)
        return graph_module.forward  # run the graph as captured: no compiling

    model = _ddp(device, widths, bucket_cap_mb)
    step = _stepper(model, torch.compile(model, backend=counting_backend))
    _train(step, _batches(3, widths, batch, device))
    sizes = model._get_ddp_logging_data()["rebuilt_bucket_sizes"]
    return len(graphs), len(sizes.split(","))


def on_rank_compiled_ddp(steps: int = 20, warmup: int = 3, *, backend: str = "inductor", widths=WIDTHS,
                         bucket_cap_mb: float = BUCKET_CAP_MB, batch: int = BATCH) -> dict:
    """In a rank: Chapter 8c's graph count, then eager against compiled training (see the module docstring)."""
    device = device_for(int(os.environ["LOCAL_RANK"]))  # cuda:LOCAL_RANK, or the CPU
    graphs, buckets = _graphs_and_buckets(device, widths, bucket_cap_mb, batch)
    batches = _batches(warmup + steps, widths, batch, device)
    eager_model, compiled_model = _ddp(device, widths, bucket_cap_mb), _ddp(device, widths, bucket_cap_mb)
    eager = _stepper(eager_model, eager_model)
    compiled = _stepper(compiled_model, torch.compile(compiled_model, backend=backend))
    report = {"rank": dist.get_rank(), "device": str(device), "backend": backend, "graphs": graphs,
              "buckets": buckets, "steps": steps}
    for name, step in (("eager", eager), ("compiled", compiled)):
        losses = _train(step, batches[:warmup])  # the compiled model compiles here
        seconds = elapsed_seconds(lambda: losses.extend(_train(step, batches[warmup:])), device)
        report[name] = {"losses": [loss.item() for loss in losses], "seconds_per_step": seconds / steps}
    return report


def ddp_compiled(gpus, options, steps=20):
    """``torch.compile(DDP(Net))`` with inductor on one GPU: graphs per bucket, losses and step time."""
    [report] = ddp_lab.launch(on_rank_compiled_ddp, 1, args=(steps,), backend="nccl", timeout=options.timeout)
    graphs, buckets = report["graphs"], report["buckets"]
    expect(graphs == buckets, f"DDPOptimizer captured {graphs} graphs for {buckets} DDP buckets, not one "
                              "graph per bucket as Chapter 8c says", report)
    eager, compiled = report["eager"]["losses"], report["compiled"]["losses"]
    gap = max(abs(a - b) / max(abs(a), 1e-12) for a, b in zip(eager, compiled))
    expect(gap <= 1e-3, f"compiled and eager training drift apart: largest relative loss gap {gap:.2e} over "
                        f"{len(eager)} steps", report)
    eager_ms, compiled_ms = (1e3 * report[name]["seconds_per_step"] for name in ("eager", "compiled"))
    return Finding(f"torch.compile(DDP(Net)) with inductor on {report['device']}: {graphs} graphs for {buckets} "
                   f"buckets; losses as eager's (largest relative gap {gap:.1e}); a step {compiled_ms:.2f} ms "
                   f"compiled against {eager_ms:.2f} ms eager (x{eager_ms / compiled_ms:.2f})",
                   {**report, "largest_relative_loss_gap": gap})
