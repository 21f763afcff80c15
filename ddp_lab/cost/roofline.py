"""The roofline: is an operation limited by arithmetic or by memory? (Chapter 14b).

An operation does ``flops`` floating-point operations and moves ``bytes``
between memory and the chip. Its *arithmetic intensity* is their ratio,
FLOPs per byte. A chip that computes at ``peak`` FLOP/s and reads memory at
``bandwidth`` bytes/s finishes it no sooner than ``max(flops / peak,
bytes / bandwidth)``, so the FLOP rate it can reach is

    attainable = min(peak, intensity x bandwidth)

the *roofline*: a slope (memory-bound) that meets a flat roof
(compute-bound) at the *ridge point*, ``peak / bandwidth`` FLOPs per byte.
A matrix product of ``m x k`` by ``k x n`` does ``2 m k n`` FLOPs on
``(m k + k n + m n)`` elements, so its intensity grows with its smallest
dimension; an elementwise operation does a few FLOPs per element it reads
and writes, and stays far below any ridge.

>>> matmul_intensity(4096, 4096, 4096, bytes_per_element=2)
1365.3333333333333
>>> ACCELERATORS["h100"].ridge("bf16") > matmul_intensity(256, 4096, 4096, 2)
True

Arithmetic only: nothing here imports torch. What a reader's own machine
reaches is measured by :mod:`ddp_lab.bench.roofline`, and drawn by
:mod:`ddp_lab.draw.roofline`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ddp_lab.validate import check_choice, check_divisible, check_positive_int, check_positive_number

from .scaling import GPUS

__all__ = ["Accelerator", "ACCELERATORS", "PUBLISHED_MFU", "matmul_flops", "matmul_bytes",
           "matmul_intensity", "elementwise_intensity", "ridge_point", "attainable_flops",
           "memory_bound", "tensor_parallel_mlp", "layer_mfu_bound"]


@dataclass(frozen=True)
class Accelerator:
    """A chip's rated dense peak per number format and its memory bandwidth, with the source."""

    name: str
    peak: dict = field(default_factory=dict)   # number format -> FLOP/s, dense (no sparsity)
    bandwidth: float = 0.0                     # bytes/s, memory to chip
    source: str = ""

    def ridge(self, number_format: str) -> float:
        """FLOPs per byte where the slope meets the roof for ``number_format``."""
        check_choice("number_format", number_format, tuple(self.peak))
        return ridge_point(self.peak[number_format], self.bandwidth)


# NVIDIA quotes Tensor Core rates "with sparsity", twice the dense rate; the
# dense halves are used here (the same 989 TFLOP/s as ddp_lab.cost.scaling.GPUS).
# Checked 2026-06 against NVIDIA's H100 and H200 specification tables as quoted
# by glennklockwood.com/garden/processors/h100 (BF16 989.4 dense, FP8 1978.9 dense
# Tensor Core TFLOP/s) and hpctech.co.jp's copy of the H100 table ("Shown with
# sparsity. Specifications 1/2 lower without sparsity"; 3,350 GB/s), and the
# H200 table (same Tensor Core rates, 141 GB HBM3e at 4.8 TB/s).
ACCELERATORS = {
    "h100": Accelerator("H100 SXM", {"bf16": GPUS["h100"].flops, "fp8": 1979e12}, 3.35e12,
                        "NVIDIA H100 datasheet: BF16 1,979 / FP8 3,958 TFLOP/s with sparsity "
                        "(989 / 1,979 dense); HBM3 3.35 TB/s"),
    "h200": Accelerator("H200 SXM", {"bf16": GPUS["h100"].flops, "fp8": 1979e12}, 4.8e12,
                        "NVIDIA H200 datasheet: Tensor Core rates as H100 SXM; HBM3e 4.8 TB/s"),
}

# Model FLOPs utilisation that published runs reached: model FLOPs (6 x parameters
# x tokens, no recomputation) per second over the dense peak. Each with its source.
PUBLISHED_MFU = {
    "Llama 3 405B, 8,192-16,384 H100 (bf16)": (0.38, 0.43,
        "Grattafiori et al., The Llama 3 Herd of Models (arXiv 2407.21783, July 2024), "
        "Table 4: 380-430 TFLOP/s per GPU, BF16 MFU 38-43%"),
    "torchtitan Llama 3.1 8B, 8-128 H100 at 500 W (bf16)": (0.33, 0.39,
        "pytorch/torchtitan docs/performance.md: 33% to 39% MFU, 1D FSDP, without Float8"),
    "torchtitan Llama 3.1 405B, 128 H100, FSDP + TP (bf16)": (0.29, 0.29,
        "pytorch/torchtitan docs/performance.md: 29.0% MFU"),
    "torchtitan Llama 3 8B, 64 A100 (bf16)": (0.563, 0.582,
        "pytorch/torchtitan docs/performance.md: 56.3% and 58.2% MFU, FSDP2"),
}


def matmul_flops(m: int, k: int, n: int) -> int:
    """``2 m k n``: one multiply and one add per term of an ``(m x k) @ (k x n)`` product."""
    for name, value in (("m", m), ("k", k), ("n", n)):
        check_positive_int(name, value)
    return 2 * m * k * n


def matmul_bytes(m: int, k: int, n: int, bytes_per_element: int) -> int:
    """Least memory traffic of the product: read both operands once, write the result once.

    A real kernel moves at least this much; tiles that do not fit the cache
    make it move more, which lowers the intensity it reaches.
    """
    for name, value in (("m", m), ("k", k), ("n", n)):
        check_positive_int(name, value)
    check_positive_int("bytes_per_element", bytes_per_element)
    return (m * k + k * n + m * n) * bytes_per_element


def matmul_intensity(m: int, k: int, n: int, bytes_per_element: int) -> float:
    """FLOPs per byte of an ``(m x k) @ (k x n)`` product at its least traffic.

    Equal to ``(2 / bytes_per_element) / (1/m + 1/k + 1/n)``: the smallest
    dimension sets it.

    >>> matmul_intensity(1024, 1024, 1024, bytes_per_element=4)
    170.66666666666666
    """
    return matmul_flops(m, k, n) / matmul_bytes(m, k, n, bytes_per_element)


def elementwise_intensity(flops_per_element: float, tensors_read: int, tensors_written: int,
                          bytes_per_element: int) -> float:
    """FLOPs per byte of an elementwise operation (an add, an activation, a copy).

    ``y = a + b`` in fp32 is one FLOP per 12 bytes:

    >>> elementwise_intensity(1, tensors_read=2, tensors_written=1, bytes_per_element=4)
    0.08333333333333333
    """
    if flops_per_element != 0:
        check_positive_number("flops_per_element", flops_per_element)
    check_positive_int("tensors_read", tensors_read)
    check_positive_int("tensors_written", tensors_written)
    check_positive_int("bytes_per_element", bytes_per_element)
    return flops_per_element / ((tensors_read + tensors_written) * bytes_per_element)


def ridge_point(peak: float, bandwidth: float) -> float:
    """``peak / bandwidth``: the intensity above which an operation is compute-bound.

    >>> round(ridge_point(989e12, 3.35e12))
    295
    """
    check_positive_number("peak", peak, "FLOP/s")
    check_positive_number("bandwidth", bandwidth, "bytes/s")
    return peak / bandwidth


def attainable_flops(intensity: float, peak: float, bandwidth: float) -> float:
    """The roofline: ``min(peak, intensity x bandwidth)`` FLOP/s."""
    check_positive_number("intensity", intensity, "FLOPs/byte")
    check_positive_number("peak", peak, "FLOP/s")
    check_positive_number("bandwidth", bandwidth, "bytes/s")
    return min(peak, intensity * bandwidth)


def memory_bound(intensity: float, peak: float, bandwidth: float) -> bool:
    """True when the intensity lies left of the ridge: memory, not arithmetic, sets the time."""
    return attainable_flops(intensity, peak, bandwidth) < peak


def tensor_parallel_mlp(tokens: int, hidden: int, ffn: int, degree: int,
                        bytes_per_element: int) -> dict:
    """Each rank's two MLP matmuls under Megatron tensor parallelism of ``degree`` (Chapter 15d).

    The up projection is split by columns, ``(tokens x hidden) @ (hidden x
    ffn/degree)``; the down projection by rows, ``(tokens x ffn/degree) @
    (ffn/degree x hidden)``. Both keep ``tokens`` and ``hidden`` and divide
    ``ffn`` by the degree: the FLOPs fall by ``degree``, the bytes less, and
    the intensity falls towards the ridge.

    >>> tensor_parallel_mlp(8192, 768, 3072, 8, 2)["up"]["n"]
    384
    """
    check_positive_int("tokens", tokens)
    check_positive_int("hidden", hidden)
    check_positive_int("ffn", ffn)
    check_positive_int("degree", degree)
    shard = check_divisible("ffn", ffn, "degree", degree,
                            "each rank holds ffn / degree of the columns; choose a degree that divides it")
    shapes = {"up": (tokens, hidden, shard), "down": (tokens, shard, hidden)}
    return {name: {"m": m, "k": k, "n": n, "flops": matmul_flops(m, k, n),
                   "bytes": matmul_bytes(m, k, n, bytes_per_element),
                   "intensity": matmul_intensity(m, k, n, bytes_per_element)}
            for name, (m, k, n) in shapes.items()}


def layer_mfu_bound(tokens: int, hidden: int, ffn: int, bytes_per_element: int, peak: float,
                    bandwidth: float) -> float:
    """Highest MFU the roofline allows one transformer layer's forward pass.

    Every operation runs at its roof, none overlaps another: the four weight
    matmuls (query/key/value, attention output, MLP up and down), and the
    memory-bound rest, two layer norms (read and write ``tokens x hidden``),
    the activation (``tokens x ffn``) and two residual adds (two reads, one
    write of ``tokens x hidden``). MFU counts only the matmuls' FLOPs (the
    attention scores are left out, as ``6 x parameters x tokens`` leaves them
    out). Real runs sit well below this bound: their matmuls do not reach the
    roof, and communication and pipeline bubbles add time the roofline does
    not see.

    >>> round(layer_mfu_bound(4096, 4096, 14336, 2, 989e12, 3.35e12), 2)
    0.9
    """
    check_positive_number("peak", peak, "FLOP/s")
    check_positive_number("bandwidth", bandwidth, "bytes/s")
    matmuls = [(tokens, hidden, 3 * hidden), (tokens, hidden, hidden),
               (tokens, hidden, ffn), (tokens, ffn, hidden)]
    flops = sum(matmul_flops(*shape) for shape in matmuls)
    seconds = sum(max(matmul_flops(*shape) / peak, matmul_bytes(*shape, bytes_per_element) / bandwidth)
                  for shape in matmuls)
    elementwise_bytes = bytes_per_element * (2 * 2 * tokens * hidden   # layer norms
                                             + 2 * tokens * ffn        # activation
                                             + 2 * 3 * tokens * hidden)  # residual adds
    seconds += elementwise_bytes / bandwidth
    return flops / (seconds * peak)
