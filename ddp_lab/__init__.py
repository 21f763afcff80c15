"""ddp_lab: real torch.distributed process groups from a notebook cell.

The companion package of the book. The pieces a chapter uses:

- ``launch(fn, world_size)``: run a function on W fresh ranks, get their results;
  ``start_forkserver()`` makes even the first launch fast.
- ``spawn(fn, args, nprocs)``: code written for ``torch.multiprocessing.spawn``
  (``fn(rank, *args)``, its own ``init_process_group``), run from a cell (Chapter 3).
- ``Ranks(world_size)`` and the ``%%ddp`` cell magic (``%load_ext ddp_lab``):
  ranks that stay alive between cells, for interactive work.
- ``RankFailed``, ``RankDied``, ``RanksTimedOut``: what a launch can raise.
- ``Topology`` and ``devices_for``: ranks and devices of a cluster, by arithmetic.
- ``ring_all_reduce`` and ``naive_all_reduce``: the book's own all-reduces,
  built from send/recv, and ``run_traced_all_reduce`` to watch them work.

The folders follow the book:

- ``launcher/``: the machinery behind ``launch`` and ``Ranks`` (read it to
  see how, skip it to learn DDP);
- ``topology``, ``devices``, ``cost``, ``memory``, ``host``, ``units``,
  ``validate``: arithmetic and small helpers, no process started;
  ``models``, ``data``, ``activation_memory``: the model, the data set and
  the memory of one process (Part I, Part III);
- ``collectives/``: Part II's algorithms, run inside each rank;
- ``data_parallel/``: Part III (DDP by hand, hooks, overlap, a trainer) and
  ZeRO/FSDP (Part V);
- ``model_parallel/``: tensor and pipeline parallelism (Part V);
- ``cluster/``: torchrun, Slurm and the network (Part IV);
- ``draw/``: the pictures; ``checks/``: the labs' checkers; ``bench/``:
  benchmarks; ``gpu_check/``: ``python -m ddp_lab.gpu_check``, every GPU
  path of the book, run and measured on a GPU machine.

``import ddp_lab`` stays light: each name below is imported the first time
it is used (torch comes with the first launch, matplotlib with the first
drawing), so a pure module such as ``ddp_lab.topology`` or the Slurm helper
costs no torch.
"""

from ddp_lab.launcher import EXPORTS as _LAUNCHER_EXPORTS  # light: names, no imports
from ddp_lab.lazy import lazy_exports

_EXPORTS = {
    **_LAUNCHER_EXPORTS,  # launch, spawn, start_forkserver, Ranks and the errors
    "Topology": "ddp_lab.topology",
    "Process": "ddp_lab.topology",
    "devices_for": "ddp_lab.devices",
    "device_for": "ddp_lab.devices",
    "ring_all_reduce": "ddp_lab.collectives.ring",
    "naive_all_reduce": "ddp_lab.collectives.naive",
    "Trace": "ddp_lab.collectives.step_trace",
    "run_traced_all_reduce": "ddp_lab.collectives.traced_all_reduce",
    "AllReduceRun": "ddp_lab.collectives.traced_all_reduce",
}
__all__ = list(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)


def load_ipython_extension(ipython):
    """``%load_ext ddp_lab``: register the ``%ddp`` and ``%%ddp`` magics."""
    from ddp_lab.launcher.magic import DDPMagics

    ipython.register_magics(DDPMagics(ipython))
