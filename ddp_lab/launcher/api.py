"""``launch`` and ``spawn``: run a function on W real ranks from a notebook cell (Chapter 3 on).

    >>> import ddp_lab, torch, torch.distributed as dist
    >>> def total(x):
    ...     t = torch.tensor([x * (dist.get_rank() + 1)])
    ...     dist.all_reduce(t)            # sum over the ranks
    ...     return t.item()
    >>> ddp_lab.launch(total, 4, args=(1.0,), backend="gloo")
    [10.0, 10.0, 10.0, 10.0]

The function may be defined in the notebook itself (closures, lambdas,
classes and modules from earlier cells included): it is sent to the ranks
*by value* with cloudpickle (see ``ddp_lab.launcher.serialize``). Each rank gets the
environment torchrun gives (RANK, LOCAL_RANK, WORLD_SIZE, ...) and, unless ``init_process_group=False``,
an initialised default process group. What the ranks print appears in the
cell, rank by rank; what they return comes back as a list indexed by rank.

``spawn(fn, args, nprocs)`` is ``torch.multiprocessing.spawn`` for code
written for it: ``fn(rank, *args)``, no group initialised, and the ranks
meet where that code says (its own ``MASTER_PORT`` or ``init_method``).
Code written for torchrun (``init_process_group()`` reading ``RANK``,
``MASTER_PORT``, ... from the environment) runs with
``launch(fn, W, init_process_group=False)``.

Nothing outlives a launch: when it returns or raises, every rank process has
exited and the rendezvous port is closed. So has every process a rank started
(``subprocess.Popen``, ``os.fork``, DataLoader workers), even one it left
running when it returned: each rank leads a process group, and the group is
killed. A process started in a session of its own (``start_new_session=True``,
``os.setsid()``) has left that group and is out of reach: stop it yourself.
"""

from __future__ import annotations

from ddp_lab.launcher import protocol
from ddp_lab.launcher.config import DEFAULT_TIMEOUT, check_main_module, check_working_directory, make_config
from ddp_lab.launcher.errors import error_for
from ddp_lab.launcher.jobs import check_arguments, interactive_sources, pickle_call
from ddp_lab.launcher.output import show
from ddp_lab.launcher.worker_group import WorkerGroup, interrupts_deferred


def launch(fn, world_size, *, args=(), kwargs=None, backend="auto", nodes=1,
           threads=None, timeout=DEFAULT_TIMEOUT, init_process_group=True):
    """Run ``fn(*args, **kwargs)`` on ``world_size`` ranks; return their results.

    Args:
        fn: the function every rank runs.
        world_size: how many rank processes to start (W).
        args, kwargs: what ``fn`` is called with, the same on every rank.
        backend: ``"gloo"`` (CPU), ``"nccl"`` (one GPU per rank) or ``"auto"``:
            ``"cpu:gloo,cuda:nccl"`` when there are at least ``world_size``
            GPUs (nccl for CUDA tensors, gloo for CPU tensors), else gloo.
        nodes: simulate this many nodes on this machine: ``LOCAL_RANK``
            and ``GROUP_RANK`` are set as on ``nodes`` machines of
            ``world_size // nodes`` ranks each.
        threads: intra-op CPU threads per rank; default: the cores shared
            evenly between the ranks (at least 1), so they do not fight.
        timeout: seconds before unfinished ranks are stopped and
            ``RanksTimedOut`` (a ``TimeoutError``) is raised.
        init_process_group: initialise the default group before ``fn`` runs
            (and destroy it after); with False, ``fn`` calls
            ``dist.init_process_group()`` itself, as a torchrun script does.

    Returns:
        ``[result of rank 0, result of rank 1, ...]``; None for a rank whose
        ``fn`` ended with ``sys.exit()`` or ``sys.exit(0)``, as a torchrun
        worker that exits with status 0 has succeeded.

    Raises:
        RankFailed: a rank raised (a nonzero ``sys.exit(code)`` included);
            the message carries its traceback.
        RankDied: a rank was killed by a signal or exited early.
        RanksTimedOut: ranks were still running after ``timeout`` seconds.
        ValueError, TypeError: bad arguments, before anything starts (a
            TypeError too for an ``fn`` that needs more positional arguments
            than ``args`` gives: a tutorial's ``run(rank, size)`` written for
            ``spawn``, say, ``jobs.check_arguments``);
            RuntimeError: a script launching without the
            ``if __name__ == "__main__":`` guard (``config.check_main_module``).
        FileNotFoundError: the working directory was deleted (the ranks
            would start in it); before anything starts.
    """
    check_working_directory()  # first: even importing torch can fail in a deleted folder
    config = make_config(world_size, backend=backend, nodes=nodes, threads=threads,
                         timeout=timeout, init_process_group=init_process_group)
    job = (protocol.CALL, pickle_call(fn, args, kwargs))
    check_arguments(fn, args, kwargs)  # a tutorial's run(rank, size), say
    return run_worker_group(config, job)


def spawn(fn, args=(), nprocs=1, join=True, daemon=False, start_method="spawn", *,
          timeout=DEFAULT_TIMEOUT, threads=None):
    """``torch.multiprocessing.spawn``, from a notebook cell: ``fn(rank, *args)`` on ``nprocs`` ranks.

    For code written for ``mp.spawn`` (PyTorch's "Writing Distributed
    Applications" tutorial, say), unchanged: ``fn`` gets its rank as first
    argument, no process group is initialised for it, and it meets the
    others where it says, as under ``mp.spawn``: its own ``MASTER_ADDR`` and
    ``MASTER_PORT`` (set in ``fn`` or inherited from the notebook) with
    ``init_process_group(backend, rank=rank, world_size=size)``, or an
    ``init_method`` such as ``"tcp://127.0.0.1:29500"`` or ``"file:///..."``.
    Rank 0 hosts the store there (``ddp_lab.launcher.worker_env.spawn_environment``
    says why ``launch`` cannot). Chapter 3 runs the tutorial's code this way.

    What ``mp.spawn`` cannot do from a notebook, this does as ``launch``
    does: ``fn`` may be defined in a cell, what the ranks print is shown
    under the cell rank by rank, a rank that raises raises ``RankFailed``
    here, and ranks still running after ``timeout`` seconds are stopped
    with ``RanksTimedOut``, which says where each one waited: a rank
    waiting in ``init_process_group`` for ranks that never come (a
    ``world_size`` that is not ``nprocs``, two ranks choosing different
    ports) is named with the values it passed.

    Args:
        fn: called as ``fn(rank, *args)`` on every rank, rank from 0 to ``nprocs - 1``.
        args: a tuple (or list), the same on every rank.
        nprocs: how many rank processes to start.
        join: must be True: ``spawn`` waits for the ranks, so that their
            output and errors reach the cell (``mp.spawn(join=False)``
            returns a handle instead).
        daemon, start_method: accepted as ``mp.spawn`` accepts them, and
            change nothing: the ranks are forked from ``ddp_lab``'s
            forkserver (a fresh interpreter would not find a function
            defined in a cell), and none outlives the call.
        timeout, threads: as for ``launch``.

    Returns:
        None, as ``mp.spawn(join=True)``; what ``fn`` returns is dropped.

    Raises:
        RankFailed: a rank raised, or ended with a nonzero ``sys.exit(code)``
            (``exit_code`` says which); ``sys.exit()``, ``sys.exit(0)`` and
            ``sys.exit(None)`` end a rank normally, as under ``mp.spawn``.
        RankDied, RanksTimedOut, ValueError, TypeError: as for ``launch``.
    """
    check_working_directory()
    _check_spawn_options(args, join, daemon, start_method)
    config = make_config(nprocs, backend="gloo", threads=threads, timeout=timeout,
                         init_process_group=False, style="spawn", world_size_name="nprocs")
    jobs = [(protocol.CALL, pickle_call(fn, (rank, *args))) for rank in range(nprocs)]
    check_arguments(fn, (0, *args), launcher="spawn")
    run_worker_group(config, jobs)


START_METHODS = ("spawn", "fork", "forkserver")


def _check_spawn_options(args, join, daemon, start_method):
    if not isinstance(args, (tuple, list)):
        raise TypeError(f"args must be a tuple, got {type(args).__name__}: {args!r}")
    if join is not True:
        raise ValueError(
            f"join={join!r}: ddp_lab.spawn always waits for its ranks (join=True), so that "
            "what they print and raise reaches the cell, and every cell shows what its ranks ran")
    if not isinstance(daemon, bool):
        raise TypeError(f"daemon must be True or False, got {daemon!r}")
    if start_method not in START_METHODS:
        raise ValueError(f"unknown start_method {start_method!r}: use one of "
                         f"{', '.join(map(repr, START_METHODS))} (each runs the same here)")


def run_worker_group(config, job):
    """Start the ranks with their job, collect the replies, stop the ranks.

    ``job`` is one job for every rank, or a list of one per rank. Shows what
    the ranks printed, then returns the results by rank or raises the error
    ``errors.error_for`` names.
    """
    check_working_directory()
    check_main_module()
    group = None
    try:
        # Ctrl-C while the ranks start waits until they have (a second at most):
        # a rank started but not yet known here could not be stopped.
        with interrupts_deferred():
            group = WorkerGroup(config, job, source_lines=interactive_sources())
        result = group.collect()
        if result.ok:
            group.close()
        else:
            group.kill()
    except BaseException:  # KeyboardInterrupt: stop everything right away
        if group is not None:
            group.kill()
            show(group.take_output())
        raise
    show(group.take_output())
    error = error_for(result, config.timeout)
    if error is not None:
        raise error
    return result.values()
