"""ddp_lab: real torch.distributed process groups from a notebook cell.

The companion package of the book. The pieces a chapter uses:

- ``launch(fn, world_size)``: run a function on W fresh ranks, get their results;
  ``start_forkserver()`` makes even the first launch fast.
- ``spawn(fn, args, nprocs)``: code written for ``torch.multiprocessing.spawn``
  (``fn(rank, *args)``, its own ``init_process_group``), run from a cell (Chapter 3).
- ``RankFailed``, ``RankDied``, ``RanksTimedOut``: what a launch can raise.
- ``choose_backend`` and ``forkserver_context``: the backend a launch picks
  and the processes its ranks are forked from (Chapters 3 and 14).
- ``Topology`` and ``devices_for``: ranks and devices of a cluster, by arithmetic.
- ``ring_all_reduce`` and ``naive_all_reduce``: the book's own all-reduces,
  built from send/recv, and ``run_traced_all_reduce`` to watch them work.

The package, folder by folder, in the book's order (the same map as the
README's; ``tests/test_package_map.py`` checks that both name every folder
and module):

- ``launcher/``: the machinery behind ``launch`` and ``spawn`` (read it to
  see how, skip it to learn DDP);
- ``topology``, ``devices``, ``memory``, ``host``, ``units``, ``validate``:
  arithmetic and small helpers, no process started;
  ``models``, ``data``, ``activation_memory``: the model, the data set and
  the memory of one process (Part I, Part III);
- ``cost/``: what communication costs, by arithmetic: the alpha-beta model
  (Chapters 4 to 6 and 8), the links of a cluster and when data
  parallelism stops scaling (Chapters 1 and 12);
- ``collectives/``: Part II's algorithms, run inside each rank;
- ``data_parallel/``: Part III (DDP by hand, hooks, overlap, a trainer) and
  ZeRO/FSDP (Part V);
- ``model_parallel/``: tensor and pipeline parallelism, activation checkpointing,
  and choosing a layout (Part V);
- ``cluster/``: torchrun, Slurm and the network (Part IV);
- ``debugging/``: a job that hangs, diverges or crawls: stacks, replicas,
  stragglers, the flight recorder (Chapter 13b, Lab 5b);
- ``draw/``: the pictures; ``widgets/``: the interactive controls
  (Chapters 2, 6, 8, 12 and 15, Lab 6);
- ``checks/``: the labs' checkers; ``bench/``: benchmarks;
  ``gpu_check/``: ``python -m ddp_lab.gpu_check``, every GPU path of the
  book, run and measured on a GPU machine, and the report the pages print;
- ``lazy``: how ``import ddp_lab`` stays light (below); ``private_apis``:
  the private APIs of torch and of the tools the package relies on, in one
  table, each tested (``tests/test_private_apis.py``); ``__main__``:
  ``python -m ddp_lab``, the version and the book's commands.

``import ddp_lab`` stays light: each name below is imported the first time
it is used (torch comes with the first launch, matplotlib with the first
drawing), so a pure module such as ``ddp_lab.topology`` or the Slurm helper
costs no torch.
"""

from ddp_lab.launcher import EXPORTS as _LAUNCHER_EXPORTS  # light: names, no imports
from ddp_lab.lazy import lazy_exports

_EXPORTS = {
    **_LAUNCHER_EXPORTS,  # launch, spawn, start_forkserver, the errors, choose_backend, ...
    "Topology": "ddp_lab.topology",
    "Process": "ddp_lab.topology",
    "devices_for": "ddp_lab.devices",
    "device_for": "ddp_lab.devices",
    "ring_all_reduce": "ddp_lab.collectives.ring",
    "naive_all_reduce": "ddp_lab.collectives.naive",
    "Trace": "ddp_lab.collectives.step_trace",
    "run_traced_all_reduce": "ddp_lab.collectives.traced",
    "run_traced_collective": "ddp_lab.collectives.traced",
    "TracedRun": "ddp_lab.collectives.traced",
}
__all__ = list(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

