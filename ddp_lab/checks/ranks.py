"""Lab 1 checker: the global and local rank of every GPU of a topology.

The reader answers in one of two ways, a function or a table:

>>> def my_ranks(node, gpu, gpus_per_node, gpus_per_process):
...     local_rank = gpu // gpus_per_process
...     return node * (gpus_per_node // gpus_per_process) + local_rank, local_rank
>>> check_rank_table(my_ranks, nodes=2, gpus_per_node=4, gpus_per_process=2)
✓ all 4 processes correct (2 nodes × 4 GPUs, 2 GPUs per process: W = 4)

or with a table, one row ``(node, gpus, global_rank, local_rank)`` per process
(dicts with those keys work too, and so does ``{(node, gpu): (global_rank,
local_rank)}``):

>>> check_rank_table([(0, 0, 0, 0), (0, 1, 1, 1), (1, 0, 2, 0), (1, 1, 3, 1)], nodes=2, gpus_per_node=2)
✓ all 4 processes correct (2 nodes × 2 GPUs, 1 GPU per process: W = 4)

Each mistake comes back with the formula that gives the right answer, and the
usual slips are named: global and local rank swapped, the local rank used as
global rank, an off-by-one, GPUs counted instead of processes when a process
spans several GPUs.

A topology has at most ``MAX_GPUS`` GPUs (``nodes x gpus_per_node``): the
checker asks about every GPU in turn, which at that size takes about a
second, and a million nodes would take minutes.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping

from ddp_lab.checks.result import CheckResult, Mistake, signature_mistake
from ddp_lab.topology import Process, Topology
from ddp_lab.validate import is_int

__all__ = ["check_rank_table", "MAX_GPUS"]

MAX_GPUS = 8192

RANKS_SIGNATURE = (
    "def my_ranks(node, gpu, gpus_per_node, gpus_per_process), returning (global_rank, local_rank)"
)


def check_rank_table(answer, nodes: int, gpus_per_node: int, gpus_per_process: int = 1) -> CheckResult:
    """Check the reader's global and local ranks for every GPU of a topology.

    ``answer`` is either a function ``my_ranks(node, gpu, gpus_per_node,
    gpus_per_process) -> (global_rank, local_rank)``, asked once per GPU, or a
    table: rows ``(node, gpus, global_rank, local_rank)`` (``gpus`` one index
    or a tuple of the GPUs the process spans), dicts with those keys, or a
    mapping ``{(node, gpu): (global_rank, local_rank)}``.
    """
    if is_int(nodes) and is_int(gpus_per_node) and nodes > 0 and gpus_per_node > 0 \
            and nodes * gpus_per_node > MAX_GPUS:
        raise ValueError(f"nodes x gpus_per_node must be at most MAX_GPUS = {MAX_GPUS:,} GPUs (the checker asks "
                         f"about each one), got {nodes:,} x {gpus_per_node:,} = {nodes * gpus_per_node:,}")
    topology = Topology(nodes, gpus_per_node, gpus_per_process)
    subject = str(topology)
    if callable(answer):
        wrong_signature = signature_mistake(answer, 4, RANKS_SIGNATURE)
        if wrong_signature:
            return CheckResult(subject, 0, topology.world_size, "process", (wrong_signature,))
        given, mistakes = _ask_rank_function(answer, topology)
    else:
        given, mistakes = _read_rank_table(answer, topology)
    for process in topology.processes:
        mistakes += _check_process(process, given, topology)
    correct = sum(
        all(given.get((p.node, gpu)) == (p.global_rank, p.local_rank) for gpu in p.gpus)
        for p in topology.processes
    )
    return CheckResult(subject, correct, topology.world_size, "process", tuple(mistakes))


def _ask_rank_function(my_ranks: Callable, topology: Topology):
    """Call ``my_ranks`` for every GPU: ({(node, gpu): (R_g, R_l)}, mistakes).

    Where the call fails, the GPU maps to None and the failure is a mistake.
    """
    given, mistakes = {}, []
    for node in range(topology.nodes):
        for gpu in range(topology.gpus_per_node):
            where = f"node {node}, GPU {gpu}"
            try:
                result = my_ranks(node, gpu, topology.gpus_per_node, topology.gpus_per_process)
            except Exception as error:  # the reader's code: report it, never crash the check
                given[node, gpu] = None
                mistakes.append(Mistake(where, "error", f"my_ranks raised {type(error).__name__}: {error}"))
                continue
            try:
                given[node, gpu] = _rank_pair(result)
            except ValueError as error:
                given[node, gpu] = None
                message = f"{error}; my_ranks must return (global_rank, local_rank)"
                mistakes.append(Mistake(where, "bad_answer", message))
    return given, mistakes


def _read_rank_table(table, topology: Topology):
    """Spread a table of rows over the GPUs: ({(node, gpu): (R_g, R_l)}, mistakes)."""
    if isinstance(table, Mapping):
        table = [(node, gpu, *ranks) for (node, gpu), ranks in table.items()]
    given, mistakes = {}, []
    for index, row in enumerate(table):
        try:
            node, gpus, ranks = _parse_row(row, topology)
        except (ValueError, TypeError) as error:
            mistakes.append(Mistake(f"row {index}", "bad_row", str(error)))
            continue
        for gpu in gpus:
            earlier = given.setdefault((node, gpu), ranks)
            if earlier != ranks:
                mistakes.append(Mistake(
                    f"node {node}, GPU {gpu}", "duplicate",
                    f"appears in two rows, with ranks (R_g, R_l) = {earlier} and {ranks}: "
                    f"a GPU is driven by exactly one process",
                ))
    return given, mistakes


def _parse_row(row, topology: Topology) -> tuple[int, tuple[int, ...], tuple[int, int]]:
    """(node, gpus, (R_g, R_l)) from a row, or ValueError saying what is wrong."""
    if isinstance(row, Mapping):
        missing = [k for k in ("node", "global_rank", "local_rank") if k not in row]
        if missing or not ("gpus" in row or "gpu" in row):
            raise ValueError(
                f"{dict(row)} lacks {', '.join(missing) or 'gpus'}: a row needs the keys "
                f"node, gpus (or gpu), global_rank and local_rank"
            )
        row = (row["node"], row.get("gpus", row.get("gpu")), row["global_rank"], row["local_rank"])
    if isinstance(row, (str, bytes)) or len(row) != 4:
        raise ValueError(f"{row!r} is not a row (node, gpus, global_rank, local_rank)")
    node, gpus, global_rank, local_rank = row
    node = _index(node, topology.nodes, "node", "nodes")
    gpus = gpus if isinstance(gpus, (tuple, list, range)) else (gpus,)
    gpus = tuple(_index(g, topology.gpus_per_node, "GPU", "GPUs of a node") for g in gpus)
    return node, gpus, _rank_pair((global_rank, local_rank))


def _index(value, size: int, name: str, counted: str) -> int:
    """``value`` as an int in range(size), or ValueError: "there is no node 2: ..."."""
    value = _as_int(value, name)
    if not 0 <= value < size:
        raise ValueError(f"there is no {name} {value}: the {counted} are numbered 0 to {size - 1}")
    return value


def _rank_pair(value) -> tuple[int, int]:
    """(R_g, R_l) as two ints, or ValueError saying what came instead."""
    if isinstance(value, (str, bytes)) or not hasattr(value, "__len__") or len(value) != 2:
        raise ValueError(f"expected a pair (global_rank, local_rank), got {value!r}")
    return _as_int(value[0], "global rank"), _as_int(value[1], "local rank")


def _as_int(value, name: str) -> int:
    """Any whole number (int, numpy or torch integer) as an int; not a bool or a float."""
    if isinstance(value, bool):
        raise ValueError(f"the {name} must be a whole number, got {value!r}")
    try:
        return operator.index(value)
    except TypeError:
        raise ValueError(f"the {name} must be a whole number, got {value!r}") from None


def _check_process(process: Process, given: dict, topology: Topology) -> list[Mistake]:
    """The mistakes in the answers for the GPUs of one process."""
    if any(given.get((process.node, gpu), ()) is None for gpu in process.gpus):
        return []  # the reader's function failed here, and that is reported already
    missing = [gpu for gpu in process.gpus if (process.node, gpu) not in given]
    if missing:
        message = "no answer: every GPU needs a global and a local rank"
        return [Mistake(_where(process.node, missing), "missing", message)]
    answers = {gpu: given[process.node, gpu] for gpu in process.gpus}
    if len(set(answers.values())) > 1:
        return [_split_process(process, answers)]
    global_rank, local_rank = answers[process.gpus[0]]
    return _explain_ranks(process, global_rank, local_rank, topology)


def _where(node: int, gpus) -> str:
    """``node 1, GPU 2``, ``node 0, GPUs 2 and 3``."""
    return f"node {node}, {_gpu_list(gpus)}"


def _gpu_list(gpus) -> str:
    """``GPU 2``, ``GPUs 2 and 3``, ``GPUs 0, 1 and 2``, ``GPUs 0 to 7``."""
    gpus = sorted(gpus)
    if len(gpus) == 1:
        return f"GPU {gpus[0]}"
    if len(gpus) > 3 and gpus == list(range(gpus[0], gpus[-1] + 1)):
        return f"GPUs {gpus[0]} to {gpus[-1]}"
    return f"GPUs {', '.join(map(str, gpus[:-1]))} and {gpus[-1]}"


def _split_process(process: Process, answers: dict) -> Mistake:
    shown = "; ".join(f"GPU {gpu}: (R_g, R_l) = {ranks}" for gpu, ranks in answers.items())
    k = len(process.gpus)
    return Mistake(
        _where(process.node, process.gpus), "split_process",
        f"with {k} GPUs per process, {_gpu_list(process.gpus)} share one "
        f"process, so they have the same ranks, R_g = {process.global_rank} and "
        f"R_l = {process.local_rank}; you gave {shown}. Ranks number processes, not GPUs.",
    )


def _global_formula(process: Process, topology: Topology) -> str:
    n, p = process.node, topology.processes_per_node
    if topology.gpus_per_process == 1:
        return f"R_g = n × G + g = {n} × {p} + {process.gpus[0]} = {process.global_rank}"
    return (
        f"R_g = n × P_node + R_l = {n} × {p} + {process.local_rank} = {process.global_rank}, "
        f"where P_node = G / {topology.gpus_per_process} = {p} processes per node"
    )


def _local_formula(process: Process, topology: Topology) -> str:
    k = topology.gpus_per_process
    if k == 1:
        return f"R_l = g = {process.local_rank}"
    return f"R_l = g // {k} = {process.gpus[0]} // {k} = {process.local_rank}"


def _explain_ranks(process: Process, global_rank: int, local_rank: int, topology: Topology) -> list[Mistake]:
    expected = (process.global_rank, process.local_rank)
    where = _where(process.node, process.gpus)
    if (global_rank, local_rank) == expected:
        return []
    if (local_rank, global_rank) == expected:
        return [Mistake(
            where, "swapped",
            f"you gave global rank {global_rank} and local rank {local_rank}: the two are swapped. "
            f"The global rank numbers the processes of the whole job "
            f"({_global_formula(process, topology)}); the local rank numbers them within node "
            f"{process.node} only, from 0 ({_local_formula(process, topology)}).",
        )]
    mistakes = []
    if global_rank != process.global_rank:
        mistakes.append(Mistake(where, *_explain_global(process, global_rank, topology)))
    if local_rank != process.local_rank:
        mistakes.append(Mistake(where, *_explain_local(process, local_rank, topology)))
    return mistakes


def _explain_global(process: Process, given: int, topology: Topology) -> tuple[str, str]:
    """(kind, message) for a wrong global rank."""
    n, p, k = process.node, topology.processes_per_node, topology.gpus_per_process
    expected, formula = process.global_rank, _global_formula(process, topology)
    gave = f"you gave global rank {given}, expected {expected}"
    if given == process.local_rank:
        earlier = {1: "node 0", 2: "nodes 0 and 1"}.get(n, f"nodes 0 to {n - 1}")
        return "local_as_global", (
            f"{gave}: {given} is its local rank. The global rank also counts the "
            f"{n * p} processes of {earlier}: {formula}."
        )
    if k > 1 and given in (n * topology.gpus_per_node + process.local_rank,
                           n * topology.gpus_per_node + process.gpus[0]):
        return "counted_gpus", (
            f"{gave}: you counted GPUs, but ranks count processes. With {k} GPUs per "
            f"process each node runs only {p} processes: {formula}."
        )
    if n > 0 and topology.nodes != p and given == n * topology.nodes + process.local_rank:
        return "nodes_as_multiplier", (
            f"{gave}: it looks as if you multiplied the node index by N = {topology.nodes}, the "
            f"number of nodes; multiply it by the number of processes per node, {p}: {formula}."
        )
    if abs(given - expected) == 1:
        return "off_by_one", (
            f"{gave}, off by one: ranks count from 0, so node 0's first process has rank 0: {formula}."
        )
    return "wrong_global", (
        f"{gave}: the global rank counts the processes on all earlier nodes, then adds the "
        f"local rank: {formula}."
    )


def _explain_local(process: Process, given: int, topology: Topology) -> tuple[str, str]:
    """(kind, message) for a wrong local rank."""
    n, k = process.node, topology.gpus_per_process
    expected, formula = process.local_rank, _local_formula(process, topology)
    gave = f"you gave local rank {given}, expected {expected}"
    if given == process.global_rank:
        return "global_as_local", (
            f"{gave}: {given} is its global rank. The local rank restarts at 0 on every node: {formula}."
        )
    if k > 1 and given in process.gpus:
        return "gpu_index_as_local", (
            f"{gave}: {given} is the index of one of its GPUs. With {k} GPUs per process the local "
            f"rank numbers the processes of node {n}, not its GPUs: {formula}."
        )
    if abs(given - expected) == 1:
        return "off_by_one", f"{gave}, off by one: local ranks count from 0 on every node: {formula}."
    return "wrong_local", f"{gave}: the local rank numbers the processes of node {n}, from 0: {formula}."
