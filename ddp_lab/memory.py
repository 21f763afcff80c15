"""Memory per rank for the model states: DDP against ZeRO stages 1, 2 and 3.

Training keeps three *model states* in memory for every parameter: the
parameter itself, its gradient, and the optimizer's state. With Ψ parameters
and bytes per parameter p (parameters), g (gradients) and K (optimizer
state), one replica needs (p + g + K)·Ψ bytes. Activations, temporary
buffers and fragmentation come on top and are not counted here: they depend
on the batch and the model's shape, not only on Ψ.

**Mixed precision with Adam**, the case of the ZeRO paper (Rajbhandari et al.,
2020): parameters and gradients in 16 bits (p = g = 2), and for the optimizer
an fp32 copy of the parameters (the *master weights*) plus Adam's two fp32
moments, K = 4 + 4 + 4 = 12. In all, 2 + 2 + 12 = 16 bytes per parameter.

**DDP** keeps all of it on every one of the N ranks:

    DDP:     (p + g + K)·Ψ

**ZeRO** (Zero Redundancy Optimizer) shards the states over the N ranks of
the data-parallel group, in three stages, each sharding one more state:

    ZeRO-1:  (p + g)·Ψ + K·Ψ/N        optimizer state sharded
    ZeRO-2:  p·Ψ + (g + K)·Ψ/N        ... and gradients
    ZeRO-3:  (p + g + K)·Ψ/N          ... and parameters (FSDP)

For Ψ = 7.5·10⁹ and N = 64 (the paper's example): DDP 120 GB, ZeRO-1 31.4 GB,
ZeRO-2 16.6 GB, ZeRO-3 1.9 GB per GPU. The price is communication: stages 1
and 2 move as many bytes as DDP's all-reduce (a reduce-scatter of the
gradients and an all-gather of the updated parameters), stage 3 about 1.5
times as many (the parameters are all-gathered again in the backward pass).

Sizes are in bytes; GB here means 10⁹ bytes, as in the paper.

Used in Chapter 15 and Lab 6.
"""

from __future__ import annotations

from dataclasses import dataclass

from ddp_lab.units import format_gb
from ddp_lab.validate import check_choice, check_positive_int, check_positive_number

__all__ = [
    "STAGES",
    "PRECISIONS",
    "OPTIMIZERS",
    "BytesPerParameter",
    "MemoryPerRank",
    "bytes_per_parameter",
    "memory_per_rank",
    "memory_table",
    "max_parameters",
]

STAGES = ("DDP", "ZeRO-1", "ZeRO-2", "ZeRO-3")
PRECISIONS = ("mixed", "fp32")
OPTIMIZERS = ("adam", "sgd-momentum", "sgd")

# Optimizer state per parameter, in fp32 values: Adam keeps two moments,
# SGD with momentum one buffer, plain SGD nothing.
_OPTIMIZER_VALUES = {"adam": 2, "sgd-momentum": 1, "sgd": 0}


@dataclass(frozen=True)
class BytesPerParameter:
    """p, g and K: bytes per parameter of the parameters, the gradients and the optimizer state."""

    parameters: int
    gradients: int
    optimizer: int

    @property
    def total(self) -> int:
        return self.parameters + self.gradients + self.optimizer


@dataclass(frozen=True)
class MemoryPerRank:
    """Bytes of model states on one rank, by kind, for one ZeRO stage (or DDP)."""

    stage: str
    parameters: float
    gradients: float
    optimizer: float

    @property
    def total(self) -> float:
        return self.parameters + self.gradients + self.optimizer

    def __str__(self) -> str:
        return (f"{self.stage:>6}: {format_gb(self.total)} per rank (parameters {format_gb(self.parameters)}, "
                f"gradients {format_gb(self.gradients)}, optimizer {format_gb(self.optimizer)})")


def bytes_per_parameter(precision: str = "mixed", optimizer: str = "adam") -> BytesPerParameter:
    """p, g, K for a precision and an optimizer.

    * ``"mixed"``: 16-bit parameters and gradients (fp16 or bf16: 2 bytes
      each); the optimizer holds fp32 master weights (4 bytes) and its own
      state in fp32 (4 bytes per value). Adam: K = 4 + 2·4 = 12.
    * ``"fp32"``: everything in 32 bits, no master copy needed.
      Adam: p = g = 4, K = 2·4 = 8.

    >>> bytes_per_parameter("mixed", "adam")
    BytesPerParameter(parameters=2, gradients=2, optimizer=12)
    """
    check_choice("precision", precision, PRECISIONS)
    check_choice("optimizer", optimizer, OPTIMIZERS)
    values = 4 * _OPTIMIZER_VALUES[optimizer]
    if precision == "mixed":
        return BytesPerParameter(2, 2, 4 + values)
    return BytesPerParameter(4, 4, values)


def memory_per_rank(num_parameters: float, world_size: int, stage: str = "DDP", *,
                    precision: str = "mixed", optimizer: str = "adam") -> MemoryPerRank:
    """Bytes of parameters, gradients and optimizer state on each of ``world_size`` ranks.

    >>> str(memory_per_rank(7.5e9, 64, "ZeRO-1"))
    'ZeRO-1: 31.4 GB per rank (parameters 15 GB, gradients 15 GB, optimizer 1.41 GB)'
    """
    check_positive_number("num_parameters", num_parameters)
    check_positive_int('world_size', world_size)
    check_choice("stage", stage, STAGES)
    b = bytes_per_parameter(precision, optimizer)
    level = STAGES.index(stage)  # 0 for DDP; ZeRO-k shards the first k of: optimizer, gradients, parameters

    def share(bytes_each: int, sharded_from: int) -> float:
        full = bytes_each * num_parameters
        return full / world_size if level >= sharded_from else full

    return MemoryPerRank(stage, parameters=share(b.parameters, 3), gradients=share(b.gradients, 2),
                         optimizer=share(b.optimizer, 1))


def memory_table(num_parameters: float, world_size: int, *, precision: str = "mixed",
                 optimizer: str = "adam") -> list[MemoryPerRank]:
    """:func:`memory_per_rank` for DDP and each ZeRO stage, in that order."""
    return [memory_per_rank(num_parameters, world_size, stage, precision=precision, optimizer=optimizer)
            for stage in STAGES]


def max_parameters(memory_bytes: float, world_size: int, stage: str = "DDP", *,
                   precision: str = "mixed", optimizer: str = "adam") -> float:
    """The largest Ψ whose model states fit in ``memory_bytes`` per rank.

    Every formula is linear in Ψ, so this is memory / (bytes per rank for one
    parameter). An upper bound: activations need room too.

    >>> round(max_parameters(80e9, 1) / 1e9, 1)   # one 80 GB GPU, mixed-precision Adam
    5.0
    """
    check_positive_number("memory_bytes", memory_bytes)
    one = memory_per_rank(1, world_size, stage, precision=precision, optimizer=optimizer)
    return memory_bytes / one.total
