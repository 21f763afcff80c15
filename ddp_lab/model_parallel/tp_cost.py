"""What tensor parallelism costs per layer, against data parallelism, in the book's alpha-beta model.

A layer of a transformer holds, besides small biases and norms, four
h x h matrices in its attention (the query, key, value and output
projections) and an h x 4h and a 4h x h matrix in its MLP block: 12 h²
parameters (Kaplan et al., 2020, "Scaling Laws for Neural Language Models",
section 2.1: N ≈ 2 d_model n_layer (2 d_attn + d_ff) = 12 n_layer d_model²).
Chapter 15d counts two blocks, with ``block``:

* ``"mlp"``: the MLP block alone, 8 h² parameters, whose Megatron split
  all-reduces the activations once forward (g) and once backward (f);
* ``"transformer"``: the whole layer, 12 h² parameters, two such blocks
  (attention and MLP), so 2 all-reduces forward and 2 backward (Shoeybi et
  al., 2019, section 3; Narayanan et al., 2021, section 3.2: "two all-reduce
  operations each in the forward and backward pass").

**Tensor parallelism** (t ranks) all-reduces a tensor of the activations'
shape, T x h for T tokens (``b·s``: micro-batch times sequence), each
time, in *every* micro-batch. **Data parallelism** (d ranks) all-reduces the
layer's gradients, once per step whatever the number of micro-batches (with
the accumulation of Chapter 8b). Per rank, with β bytes per value and the
ring's factor 2(W-1)/W (:func:`ddp_lab.cost.bytes_sent_per_rank`)::

    tensor parallel, per micro-batch:   n · 2(t-1)/t · T·h·β     (n = 4, or 2 for the MLP)
    data parallel, per step:            2(d-1)/d · P·β            (P = 12 h², or 8 h²)

so with equal factors tensor parallelism sends more as soon as n·T·h > P:
T > 3h tokens per micro-batch for a layer (4h for the MLP block alone)
(:func:`crossover_tokens`), and m micro-batches per step multiply its side.

Its *time* is what keeps it inside a node: the layer's arithmetic on each
rank is 6·P·T/t floating-point operations (2 per parameter and token
forward, 4 backward), so the ratio of communication to computation::

    (n · 2(t-1)/t · T·h·β / B) / (6·P·T / (t·F))  =  (t-1)·β·F / (9·h·B)   for a layer

does not depend on T at all: a bigger batch does not hide it, only a wider
model (h) or a faster link (B) does. That is the bandwidth term;
:func:`communication_share` adds the latencies, 2(t-1) per all-reduce,
whose part shrinks as T grows. With NVLink's B the share is a fraction of
the compute; over a network card it is more than the compute itself.

Pure arithmetic, built on :mod:`ddp_lab.cost`. Used in Chapter 15d.
"""

from __future__ import annotations

from ddp_lab.cost.alpha_beta import bytes_sent_per_rank, collective_time
from ddp_lab.cost.links import Link
from ddp_lab.validate import check_choice, check_fraction, check_positive_int, check_positive_number

__all__ = ["BLOCKS", "parameters_per_layer", "all_reduces_per_layer", "tensor_parallel_bytes",
           "data_parallel_bytes", "crossover_tokens", "tensor_parallel_seconds", "compute_seconds",
           "communication_share"]

BLOCKS = ("transformer", "mlp")
_MATRICES = {"transformer": 12, "mlp": 8}  # parameters per layer, in units of h²
_ALL_REDUCES = {"transformer": (2, 2), "mlp": (1, 1)}  # (forward, backward) per micro-batch


def parameters_per_layer(hidden: int, block: str = "transformer") -> int:
    """12 h² for a transformer layer, 8 h² for its MLP block (weights only: no biases, no norms).

    >>> parameters_per_layer(4096)
    201326592
    """
    check_positive_int("hidden", hidden)
    check_choice("block", block, BLOCKS)
    return _MATRICES[block] * hidden * hidden


def all_reduces_per_layer(block: str = "transformer") -> tuple[int, int]:
    """(forward, backward) all-reduces of a tensor-parallel layer per micro-batch: (2, 2), or (1, 1) for the MLP."""
    check_choice("block", block, BLOCKS)
    return _ALL_REDUCES[block]


def tensor_parallel_bytes(tokens: int, hidden: int, tp: int, *, block: str = "transformer",
                          bytes_per_value: int = 2) -> float:
    """Bytes each rank sends per layer and micro-batch: n all-reduces of tokens x hidden values, ring.

    >>> tensor_parallel_bytes(4096, 4096, 2)   # 4 x 2(2-1)/2 x 4096 x 4096 x 2 bytes
    134217728.0
    """
    check_positive_int("tokens", tokens)
    check_positive_int("hidden", hidden)
    check_positive_int("tp", tp)
    check_positive_int("bytes_per_value", bytes_per_value)
    count = sum(all_reduces_per_layer(block))
    return count * bytes_sent_per_rank("all_reduce", tokens * hidden * bytes_per_value, tp)


def data_parallel_bytes(hidden: int, dp: int, *, block: str = "transformer", bytes_per_value: int = 2,
                        tp: int = 1) -> float:
    """Bytes each rank sends per layer and step: one all-reduce of the layer's gradients (its 1/tp of them).

    >>> data_parallel_bytes(4096, 2)   # 2(2-1)/2 x 12 x 4096² x 2 bytes
    402653184.0
    """
    check_positive_int("dp", dp)
    check_positive_int("tp", tp)
    check_positive_int("bytes_per_value", bytes_per_value)
    gradients = parameters_per_layer(hidden, block) / tp
    return bytes_sent_per_rank("all_reduce", gradients * bytes_per_value, dp)


def crossover_tokens(hidden: int, block: str = "transformer") -> float:
    """Tokens per micro-batch above which one micro-batch of tensor parallelism sends more than a DP step.

    With the same group size on both sides (the ring's factor cancels): the
    layer's parameters over (all-reduces per micro-batch x hidden): 3h for a
    transformer layer, 4h for the MLP block.

    >>> crossover_tokens(4096)
    12288.0
    """
    return parameters_per_layer(hidden, block) / (sum(all_reduces_per_layer(block)) * hidden)


def tensor_parallel_seconds(tokens: int, hidden: int, tp: int, link: Link, *, block: str = "transformer",
                            bytes_per_value: int = 2) -> float:
    """The all-reduces of one layer and micro-batch, in the alpha-beta model (:func:`ddp_lab.cost.collective_time`)."""
    check_positive_int("tokens", tokens)
    check_positive_int("hidden", hidden)
    check_positive_int("tp", tp)
    if not isinstance(link, Link):
        raise TypeError(f"link must be a ddp_lab.cost.links.Link (e.g. LINKS['nvlink']), got {link!r}")
    one = collective_time("all_reduce", tokens * hidden * bytes_per_value, tp, link.latency, link.bandwidth)
    return sum(all_reduces_per_layer(block)) * one


def compute_seconds(tokens: int, hidden: int, tp: int, flops: float, *, utilisation: float = 1.0,
                    block: str = "transformer") -> float:
    """One rank's forward and backward of one layer: 6 x parameters x tokens / tp, at ``flops`` x ``utilisation``.

    The matrix products only: attention's scores (which grow with the
    sequence squared) are left out, so this is a lower bound on the compute.
    """
    check_positive_int("tokens", tokens)
    check_positive_int("tp", tp)
    check_positive_number("flops", flops)
    check_fraction("utilisation", utilisation)
    return 6 * parameters_per_layer(hidden, block) * tokens / tp / (flops * utilisation)


def communication_share(tokens: int, hidden: int, tp: int, link: Link, flops: float, *,
                        utilisation: float = 1.0, block: str = "transformer", bytes_per_value: int = 2) -> float:
    """Tensor parallelism's all-reduces over the layer's compute, per micro-batch: (t-1)βF/(9hB) plus latencies."""
    return (tensor_parallel_seconds(tokens, hidden, tp, link, block=block, bytes_per_value=bytes_per_value)
            / compute_seconds(tokens, hidden, tp, flops, utilisation=utilisation, block=block))
