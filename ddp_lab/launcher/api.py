"""``launch``: run a function on W real ranks from a notebook cell (Chapter 3 on).

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

Nothing outlives a launch: when it returns or raises, every rank process has
exited and the rendezvous port is closed. So has every process a rank started
(``subprocess.Popen``, ``os.fork``, DataLoader workers), even one it left
running when it returned: each rank leads a process group, and the group is
killed. A process started in a session of its own (``start_new_session=True``,
``os.setsid()``) has left that group and is out of reach: stop it yourself.
"""

from __future__ import annotations

from ddp_lab.launcher import protocol
from ddp_lab.launcher.config import DEFAULT_TIMEOUT, make_plan
from ddp_lab.launcher.jobs import interactive_sources, pickle_call
from ddp_lab.launcher.output import show
from ddp_lab.launcher.run_result import raise_for, unpickle_results
from ddp_lab.launcher.worker_group import RankProcesses, interrupts_deferred


def launch(fn, world_size, *, args=(), kwargs=None, backend="auto", nodes=1,
           threads=None, timeout=DEFAULT_TIMEOUT, init_process_group=True):
    """Run ``fn(*args, **kwargs)`` on ``world_size`` ranks; return their results.

    Args:
        fn: the function every rank runs.
        world_size: how many rank processes to start (W).
        args, kwargs: what ``fn`` is called with, the same on every rank.
        backend: ``"gloo"`` (CPU), ``"nccl"`` (one GPU per rank) or ``"auto"``:
            nccl when there are at least ``world_size`` GPUs, else gloo.
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
        ``[result of rank 0, result of rank 1, ...]``.

    Raises:
        RankFailed: a rank raised; the message carries its traceback.
        RankDied: a rank was killed by a signal or exited early.
        RanksTimedOut: ranks were still running after ``timeout`` seconds.
        ValueError, TypeError: bad arguments, before anything starts.
    """
    plan = make_plan(world_size, backend=backend, nodes=nodes, threads=threads,
                     timeout=timeout, init_process_group=init_process_group)
    job = (protocol.CALL, pickle_call(fn, args, kwargs), {})  # cells' lines go in the setup
    ranks = None
    try:
        # Ctrl-C while the ranks start waits until they have (a second at most):
        # a rank started but not yet known here could not be stopped.
        with interrupts_deferred():
            ranks = RankProcesses(plan, first_job=job, source_lines=interactive_sources())
        outcome = ranks.collect(plan.timeout)
        if outcome.ok:
            ranks.close()
        else:
            ranks.kill()
    except BaseException:  # KeyboardInterrupt: stop everything right away
        if ranks is not None:
            ranks.kill()
            show(ranks.take_output())
        raise
    show(ranks.take_output())
    raise_for(outcome, plan.timeout)
    return unpickle_results(outcome, plan.world_size)
