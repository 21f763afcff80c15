"""The launcher: how a notebook cell runs a function on W real ranks (Chapter 3).

Machinery, not a lesson: a chapter calls ``ddp_lab.launch`` (or
``ddp_lab.spawn``) and reads the algorithms in
``ddp_lab.collectives``, ``ddp_lab.data_parallel`` and
``ddp_lab.model_parallel``, which never import anything from here, so what
a chapter shows runs unchanged under torchrun. The names follow torch
elastic's (``torch.distributed.elastic``), whose agent does the same job
for torchrun:

- ``api``: ``launch(fn, world_size)``, the function every chapter calls, and
  ``spawn(fn, args, nprocs)``, for code written for ``torch.multiprocessing.spawn``;
- ``config``: the ``LaunchConfig``, and the checks made before anything starts;
- ``worker_group``: the ``WorkerGroup``, W rank processes started, watched and stopped;
- ``worker``: what runs inside each rank (``worker_main``, from its ``WorkerSpec``);
  ``worker_env``: the environment it sees, torchrun's variables;
- ``keep_groups``: why a rank keeps every process group until it exits (a DDP deadlock);
- ``protocol``: the messages between the notebook and its ranks (below);
  ``jobs``: what a job carries; ``serialize``: pickling by value;
- ``run_result``: the ``RunResult``, what came back; ``errors``: the exception a
  launch ends with, and which; ``user_traceback``: how a notebook shows it;
- ``output``: the ranks' prints, live while they run, then rank by rank;
  ``where_stuck``: where a hung rank waits, and what that means;
- ``forkserver`` (and ``forkserver_preload``): the process every rank is forked from;
- ``shutdown``: nothing outlives the notebook (exit, kernel shutdown).

The protocol, one duplex pipe per rank (constants in ``protocol``; every
message carries an id, and a reply the id of what it answers):

=============  ===============================  ======================================
kind           from -> to                       answered by
=============  ===============================  ======================================
``call``       notebook -> rank (its one job)   ``done`` (the value) or ``failed``
``where``      notebook -> rank                 ``stack``: the main thread's stack
``exit``       notebook -> rank                 nothing: the rank leaves and exits
=============  ===============================  ======================================

No ranks stay alive between cells: each cell of the book starts its ranks
and stops them, so that it runs again alone and its saved output shows
everything the ranks ran (the README says why, and where to look instead).
"""

from ddp_lab.lazy import lazy_exports

EXPORTS = {  # also what ddp_lab itself exports from here
    "launch": "ddp_lab.launcher.api",
    "spawn": "ddp_lab.launcher.api",
    "start_forkserver": "ddp_lab.launcher.forkserver",
    "forkserver_context": "ddp_lab.launcher.forkserver", "choose_backend": "ddp_lab.launcher.config",  # Chs. 3, 14
    "LaunchError": "ddp_lab.launcher.errors",
    "RankFailed": "ddp_lab.launcher.errors",
    "RankDied": "ddp_lab.launcher.errors",
    "RanksTimedOut": "ddp_lab.launcher.errors",
}
__all__ = list(EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, EXPORTS)
