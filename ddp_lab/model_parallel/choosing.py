"""Choosing a layout: how many ranks split each layer (tensor parallelism), how many replicas, which ZeRO stage.

:func:`choose_layout` decides, for a transformer on a cluster of nodes, in
the order an engineer would: **memory first, then communication**.

1. **Memory.** For each tensor-parallel degree t that divides the GPUs of
   a node (t = 1, 2, 4, 8: tensor parallelism stays inside a node,
   Chapter 15d), the N GPUs form N/t data-parallel replicas of the model's
   1/t. Each GPU holds the model states of its 1/t under DDP or a ZeRO stage
   over the N/t replicas (:func:`ddp_lab.memory.memory_per_rank`), and on top
   the activations of one micro-batch (:func:`activation_bytes`). The least
   sharded stage that fits is kept for each t: sharding more only costs
   communication.
2. **Communication.** For each layout that fits, the alpha-beta model of
   Chapter 6 (:mod:`ddp_lab.cost`) prices one training step of
   ``global_batch`` sequences:

   * tensor parallelism: 4 all-reduces of s·b·h values per layer and
     micro-batch, over the node's link (:mod:`ddp_lab.model_parallel.tp_cost`);
   * data parallelism, over the network as soon as the replicas span
     nodes: DDP and ZeRO-1 all-reduce the gradients once per step (the
     micro-batches accumulate in the full gradients they hold); ZeRO-2
     holds only its shard of the gradients, so it reduce-scatters them in
     every micro-batch's backward pass, and all-gathers the parameters once
     per step; ZeRO-3 (FSDP) all-gathers the parameters for every
     micro-batch's forward and again for its backward, and reduce-scatters
     the gradients: 1.5 times an all-reduce, per micro-batch.

   Nothing is assumed hidden behind the computation: the sum is an upper
   bound on what the step adds to its compute. Data parallelism's share can
   partly overlap the backward pass (Chapter 8); tensor parallelism's
   cannot, its all-reduces sit between two matrix products.
3. **Choice.** The layout that fits with the least communication per step.
   If none fits, the answer is pipeline parallelism across nodes (Narayanan
   et al., 2021, Takeaway #1: tensor parallelism up to the GPUs of a node,
   then pipeline stages across nodes) or more GPUs: the function says so.

The activations are Korthikanti et al.'s count (2022, "Reducing Activation
Recomputation in Large Transformer Models", Table 2), 34·s·b·h bytes per
layer in 16 bits, divided by t with tensor and sequence parallelism: the
count without the attention scores (5·a·s²·b bytes), which selective
recomputation recomputes and FlashAttention never stores. The embeddings
and the logits of the first and last layers are left out.

Pure arithmetic: no torch. Used in Chapter 15d.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass, field

from ddp_lab.cost.alpha_beta import collective_time
from ddp_lab.cost.links import Link
from ddp_lab.memory import STAGES, bytes_per_parameter, memory_per_rank
from ddp_lab.model_parallel.tp_cost import tensor_parallel_seconds
from ddp_lab.units import format_gb
from ddp_lab.validate import check_fraction, check_positive_int, check_positive_number

__all__ = ["Transformer", "Cluster", "Training", "Layout", "Decision", "activation_bytes",
           "tensor_parallel_degrees", "fitting_layouts", "price", "choose_layout"]


@dataclass(frozen=True)
class Transformer:
    """A model's size: ``parameters`` (Ψ), width ``hidden`` (h) and ``layers`` (L)."""

    name: str
    parameters: float
    hidden: int
    layers: int

    def __post_init__(self):
        check_positive_number("parameters", self.parameters)
        check_positive_int("hidden", self.hidden)
        check_positive_int("layers", self.layers)


@dataclass(frozen=True)
class Cluster:
    """``nodes`` x ``gpus_per_node`` GPUs of ``memory`` bytes and ``flops`` (dense 16-bit peak), and their links."""

    nodes: int
    gpus_per_node: int
    memory: float
    flops: float
    intra: Link
    inter: Link

    def __post_init__(self):
        check_positive_int("nodes", self.nodes)
        check_positive_int("gpus_per_node", self.gpus_per_node)
        check_positive_number("memory", self.memory, "bytes")
        check_positive_number("flops", self.flops)
        for name in ("intra", "inter"):
            if not isinstance(getattr(self, name), Link):
                raise TypeError(f"{name} must be a ddp_lab.cost.links.Link, got {getattr(self, name)!r}")

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node


@dataclass(frozen=True)
class Training:
    """Sequences of ``sequence`` tokens, ``micro_batch`` per forward pass, ``global_batch`` per step.

    ``utilisation`` is the share of the peak FLOP rate the model reaches
    (MFU: 0.3 to 0.5 in large runs, :func:`ddp_lab.cost.scaling.compute_seconds`);
    ``precision`` and ``optimizer`` as in :func:`ddp_lab.memory.bytes_per_parameter`.
    """

    sequence: int
    micro_batch: int
    global_batch: int
    utilisation: float
    precision: str = "mixed"
    optimizer: str = "adam"

    def __post_init__(self):
        for name in ("sequence", "micro_batch", "global_batch"):
            check_positive_int(name, getattr(self, name))
        check_fraction("utilisation", self.utilisation)
        bytes_per_parameter(self.precision, self.optimizer)  # refuses unknown names


@dataclass(frozen=True)
class Layout:
    """tp x dp GPUs with a ZeRO ``stage`` (or DDP): bytes per GPU, and seconds per step."""

    tp: int
    dp: int
    stage: str
    states: float
    activations: float
    compute: float = 0.0
    tensor_parallel: float = 0.0
    data_parallel: float = 0.0

    @property
    def memory(self) -> float:
        return self.states + self.activations

    @property
    def communication(self) -> float:
        return self.tensor_parallel + self.data_parallel

    def __str__(self) -> str:
        return f"TP {self.tp} x DP {self.dp}, {self.stage}"


@dataclass
class Decision:
    """The layout chosen (None if nothing fits), the layouts priced, and the reasoning, line by line."""

    layout: Layout | None
    candidates: list = field(default_factory=list)
    steps: list = field(default_factory=list)

    def __str__(self) -> str:
        """The steps, each wrapped to the book's 80 columns, continued 3 spaces further in."""
        return "\n".join(_wrap(step) for step in self.steps)

    __repr__ = __str__


WIDTH = 80  # characters: the book's text column (Chapter 15d prints the reasoning)


def _wrap(step: str) -> str:
    indent = " " * (len(step) - len(step.lstrip(" ")) + 3)
    return textwrap.fill(step, WIDTH, subsequent_indent=indent, break_long_words=False,
                         break_on_hyphens=False)


def activation_bytes(model: Transformer, training: Training, tp: int = 1) -> float:
    """Activations one GPU keeps for one micro-batch: 34·s·b·h bytes per layer, x L, / t.

    >>> m = Transformer("7B", 7e9, 4096, 32)
    >>> activation_bytes(m, Training(4096, 1, 1024, 0.4)) / 1e9
    18.253611008
    """
    check_positive_int("tp", tp)
    return 34 * training.sequence * training.micro_batch * model.hidden * model.layers / tp


def tensor_parallel_degrees(gpus_per_node: int) -> list[int]:
    """1, 2, 4, ... up to ``gpus_per_node``: the powers of two that divide it."""
    check_positive_int("gpus_per_node", gpus_per_node)
    degrees, t = [], 1
    while t <= gpus_per_node and gpus_per_node % t == 0:
        degrees.append(t)
        t *= 2
    return degrees


def _states(model, cluster, training, tp, stage):
    return memory_per_rank(model.parameters / tp, cluster.gpus // tp, stage, precision=training.precision,
                           optimizer=training.optimizer).total


def fitting_layouts(model: Transformer, cluster: Cluster, training: Training) -> tuple[list, list]:
    """Step 1, memory: (the least sharded fitting layout for each t, one reason line per t)."""
    layouts, lines = [], []
    for tp in tensor_parallel_degrees(cluster.gpus_per_node):
        dp = cluster.gpus // tp
        activations = activation_bytes(model, training, tp)
        tried = []
        for stage in STAGES:
            states = _states(model, cluster, training, tp, stage)
            fits = states + activations <= cluster.memory
            tried.append(f"{stage} {format_gb(states + activations)} {'fits' if fits else 'no'}")
            if fits:
                layouts.append(Layout(tp, dp, stage, states, activations))
                break
        lines.append(f"   TP {tp} x DP {dp} (activations {format_gb(activations)}): " + ", ".join(tried))
    return layouts, lines


def price(layout: Layout, model: Transformer, cluster: Cluster, training: Training) -> Layout:
    """Step 2, communication: ``layout`` with its compute, tensor- and data-parallel seconds per step."""
    per_replica = training.global_batch / layout.dp  # sequences
    if per_replica != int(per_replica) or per_replica % training.micro_batch:
        raise ValueError(f"global_batch {training.global_batch} does not split into micro-batches of "
                         f"{training.micro_batch} over {layout.dp} replicas")
    micro_batches = int(per_replica) // training.micro_batch
    b = bytes_per_parameter(training.precision, training.optimizer)
    tokens = training.sequence * training.micro_batch
    tp_seconds = 0.0
    if layout.tp > 1:
        one = tensor_parallel_seconds(tokens, model.hidden, layout.tp, cluster.intra, bytes_per_value=b.parameters)
        tp_seconds = micro_batches * model.layers * one
    link = cluster.inter if cluster.nodes > 1 else cluster.intra
    shard_bytes = model.parameters / layout.tp * b.gradients

    def collective(name):
        return collective_time(name, shard_bytes, layout.dp, link.latency, link.bandwidth)

    if layout.dp == 1:
        dp_seconds = 0.0
    elif layout.stage in ("DDP", "ZeRO-1"):
        dp_seconds = collective("all_reduce")
    elif layout.stage == "ZeRO-2":
        dp_seconds = micro_batches * collective("reduce_scatter") + collective("all_gather")
    else:
        dp_seconds = micro_batches * (2 * collective("all_gather") + collective("reduce_scatter"))
    compute = 6 * model.parameters * training.global_batch * tokens / training.micro_batch / (
        cluster.gpus * cluster.flops * training.utilisation)
    return Layout(layout.tp, layout.dp, layout.stage, layout.states, layout.activations, compute,
                  tp_seconds, dp_seconds)


def _seconds(value: float) -> str:
    return f"{value:.3g} s"


def choose_layout(model: Transformer, cluster: Cluster, training: Training) -> Decision:
    """Memory first, then communication: the layout with the least communication among those that fit."""
    for name, kind in (("model", Transformer), ("cluster", Cluster), ("training", Training)):
        value = {"model": model, "cluster": cluster, "training": training}[name]
        if not isinstance(value, kind):
            raise TypeError(f"{name} must be a ddp_lab.model_parallel.choosing.{kind.__name__}, got {value!r}")
    steps = [f"{model.name}: {model.parameters / 1e9:g} billion parameters, h = {model.hidden}, {model.layers} layers; "
             f"{cluster.nodes} x {cluster.gpus_per_node} GPUs of {format_gb(cluster.memory)}; "
             f"{training.global_batch} sequences of {training.sequence} tokens per step, "
             f"{training.micro_batch} per micro-batch",
             "1. Memory per GPU, model states + activations, each stage in turn until one fits:"]
    fitting, lines = fitting_layouts(model, cluster, training)
    steps += lines
    if not fitting:
        steps.append("   Nothing fits, not even tensor parallelism over a whole node with ZeRO-3: more GPUs are "
                     "needed, with the layers cut into pipeline stages across nodes (Chapter 15).")
        return Decision(None, [], steps)
    priced = [price(layout, model, cluster, training) for layout in fitting]
    steps.append(f"2. Communication per step, none of it hidden, against {_seconds(priced[0].compute)} of "
                 f"compute per GPU:")
    for layout in priced:
        steps.append(f"   {layout}: tensor parallel {_seconds(layout.tensor_parallel)} + data parallel "
                     f"{_seconds(layout.data_parallel)} = {_seconds(layout.communication)}")
    best = min(priced, key=lambda layout: (layout.communication, layout.tp))
    steps.append(f"3. Choice: {best}, {format_gb(best.memory)} per GPU: the least communication "
                 f"({best.communication / best.compute:.0%} of the compute) of the layouts that fit.")
    return Decision(best, priced, steps)
