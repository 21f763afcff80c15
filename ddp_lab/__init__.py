"""ddp_lab: real torch.distributed process groups from a notebook cell.

The companion package of the book. The pieces a chapter uses:

- ``launch(fn, world_size)``: run a function on W fresh ranks, get their results;
  ``start_forkserver()`` makes even the first launch fast.
- ``Ranks(world_size)`` and the ``%%ddp`` cell magic (``%load_ext ddp_lab``):
  ranks that stay alive between cells, for interactive work.
- ``RankFailed``, ``RankDied``, ``RanksTimedOut``: what a launch can raise.
- ``Topology`` and ``devices_for``: ranks and devices of a cluster, by arithmetic.
- ``ring_all_reduce`` and ``naive_all_reduce``: the book's own all-reduces,
  built from send/recv, and ``run_traced_all_reduce`` to watch them work.
- ``ddp_lab.checks``: the labs' checkers; ``ddp_lab.bench``: benchmarks;
  ``python -m ddp_lab.gpu_check``: every GPU path of the book, run and measured
  on a GPU machine (``ddp_lab.gpu_check``).

``import ddp_lab`` stays light: drawings (matplotlib, ipywidgets) live in
``ddp_lab.draw`` and are imported only when asked for.
"""

from .allreduce_runs import AllReduceRun, run_traced_all_reduce
from .devices import device_for, devices_for
from .errors import LaunchError, RankDied, RankFailed, RanksTimedOut
from .launcher import launch
from .naive import naive_all_reduce
from .persistent import Ranks
from .processes import start_forkserver
from .ring import ring_all_reduce
from .topology import Process, Topology
from .trace import Trace

__all__ = [
    "launch",
    "start_forkserver",
    "Ranks",
    "LaunchError",
    "RankFailed",
    "RankDied",
    "RanksTimedOut",
    "Topology",
    "Process",
    "devices_for",
    "device_for",
    "ring_all_reduce",
    "naive_all_reduce",
    "Trace",
    "run_traced_all_reduce",
    "AllReduceRun",
]


def load_ipython_extension(ipython):
    """``%load_ext ddp_lab``: register the ``%ddp`` and ``%%ddp`` magics."""
    from .magic import DDPMagics

    ipython.register_magics(DDPMagics(ipython))
