"""PyTorch's flight recorder: the last collectives of every rank, side by side.

With ``TORCH_FR_BUFFER_SIZE=N`` (or its older name
``TORCH_NCCL_TRACE_BUFFER_SIZE``) set before the process group is created,
every rank keeps a ring buffer of its last N collectives: the operation
(``gloo:all_reduce``), its sequence number in the group, the tensor sizes
and dtypes, its state and the Python stack that called it. When a job
hangs, the buffers of all ranks, read side by side, show the first
collective on which the ranks disagree, and who called what.

Measured on PyTorch 2.13 (CPU build), gloo records its collectives too, with
three differences from NCCL's recorder: the state stays ``scheduled`` (gloo
never marks a collective started or completed, and the one that timed out is
retired like the others), nothing is dumped by itself on a timeout (NCCL's
watchdog does that, with ``TORCH_NCCL_DUMP_ON_TIMEOUT``), and the group table
of the dump (``pg_config``) is left with an empty group name, on which the
analyser (``torchfrtrace``, ``python -m torch.distributed.flight_recorder.fr_trace``)
stops with a ``KeyError``.

So here each rank dumps its own buffer when a collective fails
(:func:`dump_flight_record`, through ``torch._C._distributed_c10d._dump_fr_trace``,
the function NCCL's dump uses, a private one), :func:`read_flight_records` and
:func:`records_side_by_side` read the dumps, and :func:`fr_analyser` runs
PyTorch's analyser on copies whose group table is filled in from the
records themselves.

Used in Chapter 13b ("The flight recorder").
"""

from __future__ import annotations

import ast
import os
import pickle
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
import torch.distributed as dist

__all__ = ["dump_flight_record", "read_flight_records", "records_side_by_side", "fr_analyser"]

PREFIX = "rank_"


def dump_flight_record(folder, prefix: str = PREFIX) -> Path:
    """In a rank: write its flight record to ``folder/<prefix><rank>`` (a pickle, as NCCL's dumps).

    Empty (no entries) unless ``TORCH_FR_BUFFER_SIZE`` was set before the
    process group was created.
    """
    from torch._C._distributed_c10d import _dump_fr_trace

    path = Path(folder) / f"{prefix}{dist.get_rank()}"
    path.write_bytes(_dump_fr_trace())
    return path


def read_flight_records(folder, prefix: str = PREFIX) -> dict[int, dict]:
    """{rank: dump} for every ``<prefix><rank>`` file in ``folder``, in rank order."""
    dumps = {}
    for path in Path(folder).glob(f"{prefix}*"):
        suffix = path.name[len(prefix):]
        if suffix.isdigit():
            with open(path, "rb") as file:
                dumps[int(suffix)] = pickle.load(file)
    if not dumps:
        raise FileNotFoundError(f"no flight records named {prefix}<rank> in {folder}")
    return dict(sorted(dumps.items()))


def _describe(entry: dict) -> str:
    op = entry["profiling_name"].split(":", 1)[-1]
    return f"{op} {entry['input_sizes']}"


def records_side_by_side(dumps: dict[int, dict]) -> str:
    """A table: one row per collective sequence number, one column per rank.

    Rows where the ranks' collectives differ (operation or sizes) are marked
    ``<- differ``; a rank with no entry for a number never called it.
    """
    by_rank = {rank: {e["collective_seq_id"]: e for e in dump["entries"] if not e.get("is_p2p")}
               for rank, dump in dumps.items()}
    seqs = sorted({seq for entries in by_rank.values() for seq in entries})
    cells = [[_describe(by_rank[r][s]) if s in by_rank[r] else "(none)" for r in by_rank] for s in seqs]
    width = max([len(c) for row in cells for c in row] + [8])
    lines = ["seq  " + "  ".join(f"rank {r}".ljust(width) for r in by_rank)]
    for seq, row in zip(seqs, cells):
        mark = "  <- differ" if len(set(row)) > 1 else ""
        lines.append(f"{seq:<5}" + "  ".join(c.ljust(width) for c in row).rstrip() + mark)
    return "\n".join(lines)


def _with_group_table(dump: dict) -> dict:
    """The dump with ``pg_config`` keyed by the groups its entries name, as the analyser expects."""
    groups = {tuple(e["process_group"]) for e in dump["entries"]}
    config = dump.get("pg_config", {})
    if all(name in config for name, _ in groups):
        return dump
    known = list(config.values())
    ranks = known[0]["ranks"] if len(known) == 1 else None
    fixed = dict(config)
    for name, desc in groups:
        if name not in fixed:
            if ranks is None:
                raise ValueError(f"cannot tell the ranks of group {name!r} ({desc}) from the dump's pg_config")
            ast.literal_eval(ranks)  # a list of ranks, as the analyser will read it
            fixed[name] = {"name": name, "desc": desc, "ranks": ranks}
    return {**dump, "pg_config": fixed}


def fr_analyser(folder, prefix: str = PREFIX, *args: str) -> str:
    """Run PyTorch's analyser (``torchfrtrace``) on the dumps in ``folder``; return what it printed.

    The dumps are copied, with their group table filled in (see the module's
    docstring), to a temporary folder; ``args`` are passed on (``"-j"``
    prints every entry of every rank instead of the mismatches).
    """
    dumps = read_flight_records(folder, prefix)
    with tempfile.TemporaryDirectory(prefix="ddp_lab_fr_") as tmp:
        for rank, dump in dumps.items():
            with open(os.path.join(tmp, f"{prefix}{rank}"), "wb") as file:
                pickle.dump(_with_group_table(dump), file)
        result = subprocess.run([sys.executable, "-m", "torch.distributed.flight_recorder.fr_trace",
                                 tmp, "-p", prefix, *args], capture_output=True, text=True, timeout=60)
    return without_gloo_refusal((result.stdout + result.stderr).strip())


# What the analyser of torch 2.11 (Colab's) stops with on gloo's dumps:
# flight_recorder/components/types.py, Op.__init__, asserts that the backend
# is "nccl" or "xccl"; torch 2.13's accepts "gloo" among others.
GLOO_REFUSED = "name formatting error? gloo"


def without_gloo_refusal(report: str) -> str:
    """``report``, or one line in place of the traceback of an analyser that reads no gloo dumps."""
    if GLOO_REFUSED not in report:
        return report
    return (f"(the analyser of torch {torch.__version__} reads NCCL's and XCCL's dumps, not gloo's; "
            "torch 2.13's reads gloo's too: run this cell there to see its report)")
