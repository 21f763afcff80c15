"""When FSDP becomes communication-bound, in the alpha-beta model (Chapter 15b).

FSDP all-gathers each layer's parameters just before the layer runs, and
hides that all-gather behind the compute of the layer before it. With equal
layers of ``P_l`` parameters it keeps up while one layer's all-gather takes
no longer than one layer's forward pass: :func:`layer_all_gather_seconds`
against :func:`layer_forward_seconds`. :func:`fsdp_tokens_to_hide` solves for
the tokens per rank at which the two are equal, beside Chapter 12b's
``ddp_lab.cost.scaling.tokens_to_hide`` for DDP.

:func:`hsdp_bytes_per_step` counts the bytes each rank sends in one step of
hybrid sharding (HSDP, Chapter 15e), per dimension of its 2-D mesh: FSDP's
all-gathers and reduce-scatter inside a shard group, an all-reduce of the
reduced shard across replicas. One replica is FSDP, shards of one rank DDP.

Arithmetic only, no torch: the all-gather's time is
``ddp_lab.cost.collective_time``. What FSDP really issues in a step is
measured by ``ddp_lab.data_parallel.fsdp``.
"""

from __future__ import annotations

from fractions import Fraction

from ddp_lab.cost.alpha_beta import collective_time
from ddp_lab.cost.ring_bytes import ring_bytes
from ddp_lab.validate import check_fraction, check_non_negative_number, check_positive_int, check_positive_number

__all__ = ["layer_all_gather_seconds", "layer_forward_seconds", "fsdp_tokens_to_hide", "hsdp_bytes_per_step"]


def layer_all_gather_seconds(layer_bytes: float, world_size: int, latency: float, bandwidth: float) -> float:
    """One layer's all-gather in the alpha-beta model: ``(W-1) latency + (W-1)/W x bytes / bandwidth``.

    ``latency`` in seconds (finite, 0 or more), ``bandwidth`` in bytes/s
    (finite, above 0); a bool, nan or inf is refused.
    """
    check_positive_number("layer_bytes", layer_bytes, "bytes")
    check_positive_int("world_size", world_size)
    check_non_negative_number("latency", latency, "seconds")
    check_positive_number("bandwidth", bandwidth, "bytes/s")
    return collective_time("all_gather", layer_bytes, world_size, latency, bandwidth)


def layer_forward_seconds(layer_parameters: float, tokens: float, flops: float, utilisation: float = 1.0) -> float:
    """One layer's forward pass on ``tokens`` tokens: ``2 x parameters x tokens / (flops x utilisation)``."""
    check_positive_number("layer_parameters", layer_parameters)
    check_positive_number("tokens", tokens)
    check_positive_number("flops", flops, "FLOP/s")
    check_fraction("utilisation", utilisation)
    return 2 * layer_parameters * tokens / (flops * utilisation)


def fsdp_tokens_to_hide(layer_parameters: float, bytes_per_parameter: float, world_size: int, latency: float,
                        bandwidth: float, flops: float, utilisation: float = 1.0) -> float:
    """Tokens per rank below which FSDP is communication-bound: the next all-gather outlasts this layer's forward.

    FSDP hides the all-gather of layer l+1 behind the forward compute of
    layer l, so with equal layers of ``P_l`` parameters it keeps up while
    ``t_all_gather(P_l b) <= 2 P_l T / F``; equality gives
    ``T* = t_all_gather x F / (2 P_l)``, that is
    ``(W-1)/W x F b / (2 beta) + (W-1) alpha F / (2 P_l)``. In backward the
    all-gather and the reduce-scatter (the same bytes) share a compute
    twice as long, so the condition is the same.
    """
    check_positive_number("layer_parameters", layer_parameters)
    check_positive_number("bytes_per_parameter", bytes_per_parameter, "bytes")
    check_fraction("utilisation", utilisation)
    check_positive_number("flops", flops, "FLOP/s")
    all_gather = layer_all_gather_seconds(layer_parameters * bytes_per_parameter, world_size, latency, bandwidth)
    return all_gather * flops * utilisation / (2 * layer_parameters)



def hsdp_bytes_per_step(parameter_bytes: int, replicate: int, shard: int, *,
                        reshard_after_forward: bool = True) -> dict[str, dict[str, Fraction]]:
    """Bytes each rank sends in one HSDP step, by the ring's count: per mesh dimension, per collective.

    HSDP lays ``replicate x shard`` ranks on a 2-D mesh. Along the shard
    dimension it is FSDP: the parameters (``parameter_bytes`` in all, their
    padded size where ``shard`` does not divide the rows) are all-gathered
    before the forward pass and again before the backward pass (once with
    ``reshard_after_forward=False``), and the gradients, as many bytes,
    reduce-scattered. Along the replicate dimension each rank then
    all-reduces its reduced shard, ``parameter_bytes / shard``, with the
    ranks that hold the same shard (``foreach_reduce`` in torch's
    ``_fsdp_collectives.py``). Each collective is priced by
    :func:`ddp_lab.cost.ring_bytes.ring_bytes` over its own group, exactly.

    With the 7,456 bytes of Chapter 15e's model on a 2 x 2 mesh:

    >>> hsdp_bytes_per_step(7456, 2, 2)
    {'shard': {'all_gather': Fraction(7456, 1), 'reduce_scatter': Fraction(3728, 1)}, 'replicate': {'all_reduce': Fraction(3728, 1)}}

    One replica is FSDP (ZeRO-3: three times (W-1)/W of the bytes), one
    rank per shard is DDP (an all-reduce of everything):

    >>> fsdp = hsdp_bytes_per_step(7456, 1, 4)
    >>> sum(fsdp["shard"].values()), sum(fsdp["replicate"].values())
    (Fraction(16776, 1), Fraction(0, 1))
    >>> ddp = hsdp_bytes_per_step(7456, 4, 1)
    >>> sum(ddp["shard"].values()), ddp["replicate"]["all_reduce"]
    (Fraction(0, 1), Fraction(11184, 1))
    """
    check_positive_int("parameter_bytes", parameter_bytes)
    check_positive_int("replicate", replicate)
    check_positive_int("shard", shard)
    if not isinstance(reshard_after_forward, bool):
        raise TypeError(f"reshard_after_forward must be True or False, got {reshard_after_forward!r}")
    if parameter_bytes % shard:
        raise ValueError(f"parameter_bytes ({parameter_bytes}) must be a multiple of shard ({shard}): "
                         f"FSDP pads every parameter to rows that {shard} ranks divide; pass the padded bytes")
    gathers = 2 if reshard_after_forward else 1
    return {"shard": {"all_gather": gathers * ring_bytes("all_gather", parameter_bytes, shard),
                      "reduce_scatter": ring_bytes("reduce_scatter", parameter_bytes, shard)},
            "replicate": {"all_reduce": ring_bytes("all_reduce", parameter_bytes // shard, replicate)}}
