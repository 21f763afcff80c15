"""The collectives of one training step on a 2-D mesh, FSDP x tensor parallelism, counted exactly (Chapter 15f).

The model is a stack of Megatron MLP blocks (Chapter 15d), each
``Linear(h, f)``, GeLU, ``Linear(f, h)``, split over the ``tp`` ranks of a
row of the mesh (``ColwiseParallel`` then ``RowwiseParallel``), then sharded
over the ``dp`` ranks of a column with ``fully_shard``, one FSDP group per
block. Each rank holds its tensor-parallel shard of every block
(:func:`tp_local_shapes`), and FSDP cuts that shard again in ``dp`` rows,
padding the first dimension of each tensor up to a multiple of ``dp``
(``FSDPParam._init_sharded_param`` in torch's
``distributed/fsdp/_fully_shard/_fsdp_param.py``).

One step, forward then backward, on ``tokens`` rows of the global batch
(each data-parallel replica takes ``tokens / dp`` of them):

* **dp** (a column of the mesh): an all-gather of each block's shard before
  its forward, again before its backward (the block was resharded after the
  forward), and a reduce-scatter of its gradients;
* **tp** (a row): the all-reduce of g after each block's forward, of
  ``tokens/dp x h`` values; the all-reduce of f in the backward of each
  block whose input needs a gradient: every block but the first.

:func:`two_d_collectives` lists them as the collective recorder
(``ddp_lab.collectives.recorder``) writes them down: the bytes handed over
(an all-gather's output, a reduce-scatter's input); :func:`bytes_by_dimension`
adds them up per mesh dimension and phase, handed over and sent by the
ring (:func:`ddp_lab.cost.ring_bytes.ring_bytes`).

No torch here: Chapter 15f compares these counts with the ranks' records.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from ddp_lab.cost.ring_bytes import ring_bytes
from ddp_lab.validate import check_divisible, check_positive_int

__all__ = ["Planned", "tp_local_shapes", "fsdp_padded_numel", "two_d_collectives", "bytes_by_dimension"]


@dataclass(frozen=True)
class Planned:
    """One collective of the step: on mesh dimension ``dim``, in ``phase``, ``nbytes`` handed over."""

    dim: str
    phase: str
    name: str
    nbytes: int
    group_size: int


def _checked(hidden, ffn, tp):
    check_positive_int("hidden", hidden)
    check_positive_int("ffn", ffn)
    check_positive_int("tp", tp)
    check_divisible("ffn", ffn, "tp", tp, "each rank holds ffn / tp of the hidden layer's columns")


def tp_local_shapes(hidden: int, ffn: int, tp: int) -> list[tuple[int, ...]]:
    """The shapes one rank holds of a block after ``parallelize_module``.

    ``Linear(h, f)``, column-wise: weight ``(f/t, h)``, bias ``(f/t,)``;
    ``Linear(f, h)``, row-wise: weight ``(h, f/t)``, bias ``(h,)`` whole.

    >>> tp_local_shapes(8, 32, 2)
    [(16, 8), (16,), (8, 16), (8,)]
    """
    _checked(hidden, ffn, tp)
    return [(ffn // tp, hidden), (ffn // tp,), (hidden, ffn // tp), (hidden,)]


def fsdp_padded_numel(shapes, dp: int) -> int:
    """Values in one FSDP group's all-gather: each tensor's first dimension padded up to a multiple of ``dp``.

    >>> fsdp_padded_numel([(16, 8), (16,), (8, 16), (8,)], 2)
    280
    >>> fsdp_padded_numel([(3, 4)], 2)   # 3 rows padded to 4
    16
    """
    check_positive_int("dp", dp)
    total = 0
    for shape in shapes:
        if not shape or not all(isinstance(n, int) and n > 0 for n in shape):
            raise ValueError(f"each shape must be a tuple of positive ints, got {shape!r}")
        rows = -(-shape[0] // dp) * dp
        rest = 1
        for n in shape[1:]:
            rest *= n
        total += rows * rest
    return total


def two_d_collectives(*, blocks: int, hidden: int, ffn: int, tokens: int, dp: int, tp: int,
                      bytes_per_value: int = 4) -> list[Planned]:
    """Every collective one rank issues in a step (with 2 blocks, in the order the recorder sees them).

    >>> plan = two_d_collectives(blocks=2, hidden=8, ffn=32, tokens=16, dp=2, tp=2)
    >>> [(p.dim, p.phase, p.name, p.nbytes) for p in plan[:2]]
    [('dp', 'forward', 'all_gather', 1120), ('tp', 'forward', 'all_reduce', 256)]
    >>> len(plan)
    9
    """
    check_positive_int("blocks", blocks)
    check_positive_int("tokens", tokens)
    check_positive_int("dp", dp)
    check_positive_int("bytes_per_value", bytes_per_value)
    check_divisible("tokens", tokens, "dp", dp, "each replica takes tokens / dp rows")
    gather = fsdp_padded_numel(tp_local_shapes(hidden, ffn, tp), dp) * bytes_per_value
    activations = tokens // dp * hidden * bytes_per_value
    forward = []
    for _ in range(blocks):
        forward += [Planned("dp", "forward", "all_gather", gather, dp),
                    Planned("tp", "forward", "all_reduce", activations, tp)]
    # backward: FSDP gathers each block again (prefetching the next), f all-reduces the input's
    # gradient of every block but the first, then each block's gradients are reduce-scattered
    backward = [Planned("dp", "backward", "all_gather", gather, dp) for _ in range(blocks)]
    backward += [Planned("tp", "backward", "all_reduce", activations, tp) for _ in range(blocks - 1)]
    backward += [Planned("dp", "backward", "reduce_scatter", gather, dp) for _ in range(blocks)]
    return forward + backward


def bytes_by_dimension(collectives) -> dict[tuple[str, str], tuple[int, Fraction]]:
    """``{(dim, phase): (bytes handed over, bytes each rank sends by the ring)}``.

    >>> plan = two_d_collectives(blocks=2, hidden=8, ffn=32, tokens=16, dp=2, tp=2)
    >>> bytes_by_dimension(plan)[("tp", "forward")]
    (512, Fraction(512, 1))
    """
    totals: dict[tuple[str, str], tuple[int, Fraction]] = {}
    for c in collectives:
        handed, sent = totals.get((c.dim, c.phase), (0, Fraction(0)))
        totals[c.dim, c.phase] = (handed + c.nbytes, sent + ring_bytes(c.name, c.nbytes, c.group_size))
    return totals
