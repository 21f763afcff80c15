"""Published data-parallel scaling results, and what the cost model predicts for them (Chapter 12b).

Chapter 12b's cost model (:mod:`ddp_lab.cost.scaling`) is calibrated twice: on the
namespace cluster, and here, on measurements that others published. Each
:class:`PublishedRun` is one such measurement, written down with everything
the model needs and where each figure is printed:

* the **compute** of one step on one GPU comes from the same authors'
  single-GPU throughput (images per second at the per-GPU batch), not from a
  FLOP count: a CNN's FLOPs per image times a guessed utilisation would add
  a factor nobody measured;
* the **all-reduce** is the model's, fed the gradients' bytes (parameters x
  4: these runs trained in fp32) and the links the authors describe, from
  :data:`ddp_lab.cost.links.LINKS`;
* the **efficiency** is the published one: throughput on W GPUs over W times
  the baseline's throughput per GPU (one GPU, or one server of 8 for
  Goyal et al.).

:func:`predict` returns the model's two bounds for a run, with the
all-reduce after the backward pass (no overlap) and hidden behind it as far
as it can be (overlap). A published efficiency between the two says the
model has the right ingredients; one below the no-overlap bound says the
real system lost time the model does not know about.

The sources, quoted in Chapter 12b:

* Horovod's README, commit ``6bb6a2db^`` of ``horovod/horovod`` (October
  2017): single-GPU baselines (batch size 64) and speed-ups on 16 GPUs
  ("4 servers with 4 Pascal GPUs each connected by RoCE-capable 25 Gbit/s
  network") and on 64 GPUs ("16 servers with 4 Pascal GPUs each connected by
  plain 40 Gbit/s network");
* Horovod's ``docs/benchmarks.md`` before commit ``8318a898`` (32 servers,
  128 GPUs: "90% scaling efficiency for both Inception V3 and ResNet-101,
  and 79% scaling efficiency for VGG-16") and ``docs/benchmarks.rst`` today
  (128 servers, 512 GPUs: 90%, 90% and 68%);
* Goyal et al. 2017, *Accurate, Large Minibatch SGD: Training ImageNet in 1
  Hour* (arXiv:1706.02677): section 4.3 (8 P100 with NVLink per server, a
  50Gbit Ethernet card, ResNet-50's 25 million parameters, "Backprop for
  ResNet-50 on a single NVIDIA Tesla P100 GPU takes 120 ms"), section 5.1
  (32 images per GPU), Figure 8 ("~90% efficiency", 8 to 256 GPUs) and
  section 5.5 ("the time per iteration increases only 12%" from 8 to 352
  GPUs).

Parameter counts of Inception V3, ResNet-101 and VGG-16 are Keras
Applications' (keras.io/api/applications: 23.9M, 44.7M, 138.4M);
tf_cnn_benchmarks, which Horovod's benchmarks ran, builds the same
architectures.

>>> run = RUNS[0]
>>> run.model, run.gpus, f"{run.efficiency:.1%}"
('Inception V3', 16, '93.8%')
>>> [f"{e:.0%}" for e in predict(run)]
['89%', '100%']
"""

from __future__ import annotations

from dataclasses import dataclass

from . import scaling
from .links import LINKS, Link

__all__ = ["PublishedRun", "RUNS", "predict", "all_reduce_seconds"]


@dataclass(frozen=True)
class PublishedRun:
    """One published scaling measurement and the hardware it ran on.

    ``compute`` is one GPU's forward and backward pass of ``samples_per_gpu``
    samples (seconds); ``intra`` is ``None`` where the source does not say how
    the GPUs of a server are connected (a flat ring across servers never
    waits on it: the network is its slowest hop). ``baseline_gpus`` is what
    the efficiency is measured against: 1 GPU, or 8 (one server).
    """

    source: str
    setup: str
    model: str
    parameters: float
    samples_per_gpu: int
    compute: float
    nodes: int
    gpus_per_node: int
    inter: Link
    intra: Link | None
    algorithm: str
    efficiency: float
    baseline_gpus: int = 1
    bytes_per_gradient: int = 4

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node


def all_reduce_seconds(run: PublishedRun, nodes: int | None = None) -> float:
    """The model's all-reduce of ``run``'s gradients, on ``nodes`` of its servers (default: all)."""
    nodes = run.nodes if nodes is None else nodes
    nbytes = run.parameters * run.bytes_per_gradient
    inter = run.inter if nodes > 1 else None
    if run.algorithm == "hierarchical":
        return scaling.hierarchical_all_reduce_seconds(nbytes, nodes, run.gpus_per_node, intra=run.intra, inter=inter)
    # a flat ring across servers runs at the network's pace; intra only matters inside one server
    intra = run.intra if run.intra is not None else run.inter
    return scaling.flat_all_reduce_seconds(nbytes, nodes, run.gpus_per_node, intra=intra, inter=inter)


def predict(run: PublishedRun) -> tuple[float, float]:
    """The model's scaling efficiency for ``run``: (no overlap, overlap).

    Against one GPU: ``compute / step``. Against one server (``baseline_gpus
    = gpus_per_node``): the ratio of the two step times, since each GPU's
    batch is the same on one server and on all of them.
    """
    bounds = []
    for overlap in (False, True):
        step = scaling.step_seconds(run.compute, all_reduce_seconds(run), overlap=overlap)
        if run.baseline_gpus == 1:
            bounds.append(scaling.scaling_efficiency(run.compute, step))
        elif run.baseline_gpus == run.gpus_per_node:
            baseline = scaling.step_seconds(run.compute, all_reduce_seconds(run, nodes=1), overlap=overlap)
            bounds.append(baseline / step)
        else:
            raise ValueError(f"baseline_gpus must be 1 or gpus_per_node, got {run.baseline_gpus!r}")
    return bounds[0], bounds[1]


# -- the runs ------------------------------------------------------------------------------

_HOROVOD_README = "Horovod README (horovod/horovod, 6bb6a2db^, Oct 2017)"
_HOROVOD_128 = "Horovod docs/benchmarks.md (horovod/horovod, 8318a898^)"
_HOROVOD_512 = "Horovod docs/benchmarks.rst (horovod/horovod)"
_GOYAL = "Goyal et al. 2017, arXiv:1706.02677"

# Keras Applications' parameter counts (keras.io/api/applications)
_PARAMETERS = {"Inception V3": 23.9e6, "ResNet-101": 44.7e6, "VGG-16": 138.4e6}
# Horovod README: "Baseline single-GPU (batch size=64)", images/s, on the
# 25 Gbit/s servers and on the 40 Gbit/s ones
_BASELINE_25G = {"Inception V3": 134.4, "ResNet-101": 119.4, "VGG-16": 130.9}
_BASELINE_40G = {"Inception V3": 148.8, "ResNet-101": 136.0, "VGG-16": 149.6}
# Horovod README, speed-ups over one GPU: 16 GPUs, "RDMA Horovod (allreduce on
# GPU with NCCL)" and "TCP Horovod (allreduce on GPU with NCCL)"; 64 GPUs,
# "TCP Horovod (allreduce on GPU with NCCL)"
_SPEEDUP_16_RDMA = {"Inception V3": 15.0, "ResNet-101": 14.6, "VGG-16": 13.7}
_SPEEDUP_16_TCP = {"Inception V3": 14.8, "ResNet-101": 14.1, "VGG-16": 10.0}
_SPEEDUP_64_TCP = {"Inception V3": 53.3, "ResNet-101": 56.9, "VGG-16": 40.7}
# Horovod's docs, "N% scaling efficiency", 128 and 512 GPUs
_EFFICIENCY_128 = {"Inception V3": 0.90, "ResNet-101": 0.90, "VGG-16": 0.79}
_EFFICIENCY_512 = {"Inception V3": 0.90, "ResNet-101": 0.90, "VGG-16": 0.68}
_BATCH = 64


def _horovod(source, setup, model, nodes, inter, efficiency, baseline):
    return PublishedRun(source, setup, model, _PARAMETERS[model], _BATCH, _BATCH / baseline[model],
                        nodes, 4, inter, None, "flat", efficiency)


_MODELS = tuple(_PARAMETERS)
RUNS: tuple[PublishedRun, ...] = (
    *(_horovod(_HOROVOD_README, "Horovod, 4 x 4 Pascal, 25 Gb/s RDMA", m, 4, LINKS["ethernet25"],
               _SPEEDUP_16_RDMA[m] / 16, _BASELINE_25G) for m in _MODELS),
    *(_horovod(_HOROVOD_README, "Horovod, 4 x 4 Pascal, 25 Gb/s TCP", m, 4, LINKS["ethernet25"],
               _SPEEDUP_16_TCP[m] / 16, _BASELINE_25G) for m in _MODELS),
    *(_horovod(_HOROVOD_README, "Horovod, 16 x 4 Pascal, 40 Gb/s TCP", m, 16, LINKS["ethernet40"],
               _SPEEDUP_64_TCP[m] / 64, _BASELINE_40G) for m in _MODELS),
    *(_horovod(_HOROVOD_128, "Horovod, 32 x 4 Pascal, 25 Gb/s RoCE", m, 32, LINKS["ethernet25"],
               _EFFICIENCY_128[m], _BASELINE_25G) for m in _MODELS),
    *(_horovod(_HOROVOD_512, "Horovod, 128 x 4 Pascal, 25 Gb/s RoCE", m, 128, LINKS["ethernet25"],
               _EFFICIENCY_512[m], _BASELINE_25G) for m in _MODELS),
    # Goyal et al.: the backward pass of 32 images takes 120 ms (section 4.3); the
    # model's 2:1 split of backward and forward makes the step's compute 180 ms.
    # Efficiency against one server of 8 GPUs.
    *(PublishedRun(_GOYAL, f"Goyal et al., {nodes} x 8 P100 NVLink, 50 Gb/s", "ResNet-50", 25e6, 32,
                   0.120 / scaling.BACKWARD_SHARE, nodes, 8, LINKS["ethernet50"], LINKS["nvlink1"],
                   "hierarchical", efficiency, baseline_gpus=8)
      for nodes, efficiency in ((32, 0.90), (44, 1 / 1.12))),
)
