"""Nodes, GPUs, processes and ranks: the arithmetic of a cluster layout.

A distributed job runs on N **nodes** (machines), each with G **GPUs**. Every
**process** of the job drives one GPU, or several GPUs of the same node when
its model is too large for one. The processes are numbered twice:

* the **global rank** ``R_g`` (the ``RANK`` environment variable) numbers all
  processes of the job, 0 to W - 1, where W is the **world size**
  (``WORLD_SIZE``);
* the **local rank** ``R_l`` (``LOCAL_RANK``) numbers the processes of one node,
  0 to P_node - 1, and so tells a process which GPU(s) of its node are its own.

With one GPU per process, P_node = G, W = N x G, ``R_g = n x G + g`` and
``R_l = g`` for GPU g of node n. When each process spans k GPUs, a node holds
P_node = G / k processes, process ``R_l`` uses GPUs ``R_l x k`` to
``R_l x k + k - 1``, and ``R_g = n x P_node + R_l``.

Nothing here starts a process: a :class:`Topology` is plain data that the book
prints, draws and checks lab answers against.

>>> t = Topology(nodes=2, gpus_per_node=4)
>>> t.world_size
8
>>> t.process_for_gpu(node=1, gpu=2)
Process(global_rank=6, local_rank=2, node=1, gpus=(2,))
>>> for process in Topology(nodes=2, gpus_per_node=4, gpus_per_process=2).processes_on(1):
...     print(process)
Process(global_rank=2, local_rank=0, node=1, gpus=(0, 1))
Process(global_rank=3, local_rank=1, node=1, gpus=(2, 3))
"""

from __future__ import annotations

from dataclasses import dataclass

from ddp_lab.validate import check_whole_number, is_int

__all__ = ["Process", "Topology", "divisors", "require_count"]


def divisors(n: int) -> tuple[int, ...]:
    """The numbers that divide ``n`` evenly, smallest first.

    These are the allowed ``gpus_per_process`` for a node with ``n`` GPUs:
    a process never spans GPUs of two nodes, so each node must split evenly
    into processes.

    >>> divisors(6)
    (1, 2, 3, 6)
    """
    return tuple(k for k in range(1, n + 1) if n % k == 0)


def _plural(count: int, noun: str) -> str:
    """``1 node``, ``2 nodes``."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


# The check of every count here, in Chapter 2's words (ddp_lab.validate.check_whole_number); the name
# the layout explorer (ddp_lab/widgets/layout.py) imports it by.
require_count = check_whole_number


def _require_index(name: str, value: object, size: int, what: str) -> None:
    """Raise unless ``value`` is an int in ``range(size)``; ``what`` names the range."""
    if not is_int(value):
        raise ValueError(f"{name} must be an int, got {value!r} of type {type(value).__name__}")
    if not 0 <= value < size:
        raise IndexError(f"{name}={value} is out of range: {what} run from 0 to {size - 1}")


@dataclass(frozen=True)
class Process:
    """One process of the job and the GPUs of its node that it drives.

    ``gpus`` holds local GPU indices (``cuda:i`` as seen on that node): one
    index with one GPU per process, e.g. ``(2, 3)`` for a process spanning two.
    """

    global_rank: int
    local_rank: int
    node: int
    gpus: tuple[int, ...]


@dataclass(frozen=True)
class Topology:
    """A cluster layout: ``nodes`` machines with ``gpus_per_node`` GPUs each,
    split into processes that drive ``gpus_per_process`` GPUs each.

    Processes fill node 0 first, then node 1, and so on, which is what
    ``torchrun`` does: node n starts its processes at global rank
    ``n x processes_per_node``. Invalid layouts raise ``ValueError`` saying what
    is allowed; look-ups outside the layout (node 2 of a 2-node cluster) raise
    ``IndexError`` naming the allowed range.
    """

    nodes: int
    gpus_per_node: int
    gpus_per_process: int = 1

    def __post_init__(self) -> None:
        check_whole_number("nodes", self.nodes)
        check_whole_number("gpus_per_node", self.gpus_per_node)
        check_whole_number("gpus_per_process", self.gpus_per_process)
        if self.gpus_per_node % self.gpus_per_process != 0:
            allowed = ", ".join(str(k) for k in divisors(self.gpus_per_node))
            raise ValueError(
                f"gpus_per_process={self.gpus_per_process} does not divide "
                f"gpus_per_node={self.gpus_per_node}: a process cannot span GPUs "
                f"of two nodes, so each node must split evenly into processes. "
                f"Allowed values for {self.gpus_per_node} GPUs per node: {allowed}"
            )

    def __str__(self) -> str:
        """A one-line description for titles and messages, e.g.
        ``2 nodes × 4 GPUs, 2 GPUs per process: W = 4``."""
        return (
            f"{_plural(self.nodes, 'node')} × {_plural(self.gpus_per_node, 'GPU')}, "
            f"{_plural(self.gpus_per_process, 'GPU')} per process: W = {self.world_size}"
        )

    @property
    def processes_per_node(self) -> int:
        """P_node = G / gpus_per_process: how many processes each node runs
        (``torchrun --nproc_per_node``)."""
        return self.gpus_per_node // self.gpus_per_process

    @property
    def world_size(self) -> int:
        """W = N x P_node: the number of processes in the whole job."""
        return self.nodes * self.processes_per_node

    @property
    def processes(self) -> tuple[Process, ...]:
        """Every process, in global-rank order."""
        return tuple(self.process(rank) for rank in range(self.world_size))

    def process(self, global_rank: int) -> Process:
        """The process with this global rank."""
        node = self.node_of(global_rank)
        local_rank = self.local_rank_of(global_rank)
        first_gpu = local_rank * self.gpus_per_process
        gpus = tuple(range(first_gpu, first_gpu + self.gpus_per_process))
        return Process(global_rank, local_rank, node, gpus)

    def global_rank(self, node: int, local_rank: int) -> int:
        """R_g = n x P_node + R_l: the processes of all earlier nodes come first."""
        _require_index("node", node, self.nodes, "node indices")
        _require_index("local_rank", local_rank, self.processes_per_node, "local ranks")
        return node * self.processes_per_node + local_rank

    def node_of(self, global_rank: int) -> int:
        """The node that runs this process: R_g // P_node."""
        _require_index("global_rank", global_rank, self.world_size, "global ranks")
        return global_rank // self.processes_per_node

    def local_rank_of(self, global_rank: int) -> int:
        """The local rank of this process on its node: R_g % P_node."""
        _require_index("global_rank", global_rank, self.world_size, "global ranks")
        return global_rank % self.processes_per_node

    def process_for_gpu(self, node: int, gpu: int) -> Process:
        """The process that drives GPU ``gpu`` of node ``node``.

        Its local rank is ``gpu // gpus_per_process``: with two GPUs per
        process, GPUs 2 and 3 both belong to local rank 1.
        """
        _require_index("node", node, self.nodes, "node indices")
        _require_index("gpu", gpu, self.gpus_per_node, "GPU indices on a node")
        local_rank = gpu // self.gpus_per_process
        return self.process(self.global_rank(node, local_rank))

    def processes_on(self, node: int) -> tuple[Process, ...]:
        """The processes of one node, in local-rank order."""
        _require_index("node", node, self.nodes, "node indices")
        first = node * self.processes_per_node
        return tuple(self.process(rank) for rank in range(first, first + self.processes_per_node))

    def table(self) -> list[dict]:
        """One row per process (node, gpus, global_rank, local_rank), in
        global-rank order: ready for printing or for ``pandas.DataFrame``."""
        return [
            {"node": p.node, "gpus": p.gpus, "global_rank": p.global_rank, "local_rank": p.local_rank}
            for p in self.processes
        ]

    def format_table(self) -> str:
        """:meth:`table` as aligned plain text, one line per process, for printing.

        The rank columns also name the environment variables in which a
        launcher such as torchrun hands each process its ranks.

        >>> print(Topology(nodes=2, gpus_per_node=2, gpus_per_process=2).format_table())
        node  GPUs  global rank R_g (RANK)  local rank R_l (LOCAL_RANK)
           0  0, 1                       0                            0
           1  0, 1                       1                            0
        """
        header = ("node", "GPUs", "global rank R_g (RANK)", "local rank R_l (LOCAL_RANK)")
        rows = [
            (str(p.node), ", ".join(map(str, p.gpus)), str(p.global_rank), str(p.local_rank))
            for p in self.processes
        ]
        widths = [max(len(row[column]) for row in (header, *rows)) for column in range(len(header))]

        def line(cells, numbers_right=True):
            aligned = [
                cell.ljust(width) if column == 1 or not numbers_right else cell.rjust(width)
                for column, (cell, width) in enumerate(zip(cells, widths))
            ]
            return "  ".join(aligned).rstrip()

        return "\n".join([line(header, numbers_right=False), *(line(row) for row in rows)])
