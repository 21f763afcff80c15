"""What expert parallelism sends, and what an uneven router does to it (Chapter 15g).

A mixture-of-experts layer with one expert per rank moves every token to
the rank of the expert its router chose, and the expert's output back: two
all-to-alls of tokens per forward pass (dispatch and combine), and one
small all-to-all before them that tells each rank how many tokens to
expect (the counts). The backward pass runs the two token all-to-alls
again, in the other direction.

Everything follows from one table, ``routes[s][e]``: how many tokens rank
``s`` sends to expert ``e`` (on rank ``e``). Row ``s`` is what rank ``s``
cuts its tokens into (its ``input_split_sizes`` for the dispatch), column
``e`` what expert ``e`` receives (its ``output_split_sizes``). A balanced
router gives every entry about the same; a skewed one piles a column up,
and the rank of that expert receives, and computes, more than the others.

No torch here: the run in Chapter 15g counts the same bytes with
``ddp_lab.collectives.recorder.record_collectives``, and this module says
what they must be. The recorder writes an all-to-all's size as that of its
first tensor argument, the *output*: what the rank receives, its own rows
included. What crosses the wire, without them, is
``ddp_lab.cost.ring_bytes.all_to_all_bytes``.

The capacity of an expert is Switch Transformer's (Fedus et al., 2021,
arXiv 2101.03961, section 2.2): tokens per batch divided by the number of
experts, times a capacity factor; tokens routed to a full expert are
dropped (they skip the layer through the residual connection).
"""

from __future__ import annotations

import math

from ddp_lab.cost.ring_bytes import all_to_all_bytes
from ddp_lab.validate import check_positive_int, check_positive_number, is_int

__all__ = ["check_routes", "tokens_per_expert", "moe_step_bytes", "moe_wire_bytes", "expert_capacity",
           "dropped_tokens"]

COUNT_BYTES = 8  # the counts travel as int64


def check_routes(routes) -> list[list[int]]:
    """``routes`` as a square list of lists of ints >= 0 (one row and one column per rank), else ValueError.

    >>> check_routes([[3, 1], [2, 2]])
    [[3, 1], [2, 2]]
    """
    rows = [list(row) for row in routes]
    if not rows or any(len(row) != len(rows) for row in rows):
        raise ValueError(f"routes must be a W x W table (row s: tokens rank s sends to each of the W "
                         f"experts), got {routes!r}")
    if not all(is_int(n) and n >= 0 for row in rows for n in row):
        raise ValueError(f"every entry of routes must be a whole number of tokens >= 0, got {routes!r}")
    return [[int(n) for n in row] for row in rows]


def tokens_per_expert(routes) -> list[int]:
    """Tokens each expert receives from all ranks: the column sums.

    >>> tokens_per_expert([[3, 1], [2, 2]])
    [5, 3]
    """
    rows = check_routes(routes)
    return [sum(row[e] for row in rows) for e in range(len(rows))]


def moe_step_bytes(routes, rank: int, hidden: int, value_bytes: int = 4) -> dict[str, int]:
    """Bytes ``rank`` hands to each all-to-all of one training step, as the recorder counts them.

    The recorder counts an all-to-all's output, what the rank receives:

    * ``counts``: W counts of 8 bytes (int64), forward only;
    * ``dispatch``: the tokens the rank's expert receives, ``sum_s routes[s][rank]``
      rows of ``hidden`` values;
    * ``combine``: the rank's own tokens coming back, ``sum_e routes[rank][e]`` rows;
    * backward, the gradients retrace the two: the combine's backward
      receives what the dispatch did, the dispatch's backward what the
      combine did.

    >>> moe_step_bytes([[3, 1], [2, 2]], rank=0, hidden=8)
    {'counts': 16, 'dispatch': 160, 'combine': 128, 'backward': 288}
    """
    rows = check_routes(routes)
    if not is_int(rank) or not 0 <= rank < len(rows):
        raise ValueError(f"rank must be an int from 0 to {len(rows) - 1}, got {rank!r}")
    check_positive_int("hidden", hidden)
    check_positive_int("value_bytes", value_bytes)
    row = hidden * value_bytes
    received = tokens_per_expert(rows)[rank] * row
    returned = sum(rows[rank]) * row
    return {"counts": len(rows) * COUNT_BYTES, "dispatch": received, "combine": returned,
            "backward": received + returned}


def moe_wire_bytes(routes, rank: int, hidden: int, value_bytes: int = 4) -> dict[str, int]:
    """Bytes ``rank`` receives from *other* ranks in the forward pass (its own rows never leave it).

    ``dispatch``: the tokens other ranks sent to this rank's expert;
    ``combine``: this rank's tokens that other experts computed, coming
    back. By the transpose of an all-to-all, what a rank receives in the
    dispatch is what the others send it: ``all_to_all_bytes`` of the column.

    >>> moe_wire_bytes([[3, 1], [2, 2]], rank=0, hidden=8)
    {'dispatch': 64, 'combine': 32}
    """
    rows = check_routes(routes)
    check_positive_int("hidden", hidden)
    check_positive_int("value_bytes", value_bytes)
    if not is_int(rank) or not 0 <= rank < len(rows):
        raise ValueError(f"rank must be an int from 0 to {len(rows) - 1}, got {rank!r}")
    row = hidden * value_bytes
    column = [rows[s][rank] * row for s in range(len(rows))]
    return {"dispatch": all_to_all_bytes(column, rank),
            "combine": all_to_all_bytes([n * row for n in rows[rank]], rank)}


def expert_capacity(tokens: int, experts: int, capacity_factor: float) -> int:
    """Switch Transformer's expert capacity, ``tokens / experts x capacity_factor``, rounded up.

    >>> expert_capacity(64, 4, 1.0), expert_capacity(64, 4, 1.25)
    (16, 20)
    """
    check_positive_int("tokens", tokens)
    check_positive_int("experts", experts)
    check_positive_number("capacity_factor", capacity_factor)
    return math.ceil(tokens * capacity_factor / experts - 1e-9)


def dropped_tokens(per_expert, capacity: int) -> list[int]:
    """Tokens each expert would drop at ``capacity``: what it receives beyond it.

    >>> dropped_tokens([30, 10, 12, 12], 20)
    [10, 0, 0, 0]
    """
    counts = list(per_expert)
    if not all(is_int(n) and n >= 0 for n in counts):
        raise ValueError(f"per_expert must be whole numbers of tokens >= 0, got {per_expert!r}")
    if not is_int(capacity) or capacity < 0:
        raise ValueError(f"capacity must be an int >= 0, got {capacity!r}")
    return [max(0, n - capacity) for n in counts]
