"""``launch``: run a function on W real ranks from a notebook cell.

    >>> import ddp_lab, torch, torch.distributed as dist
    >>> def total(x):
    ...     t = torch.tensor([x * (dist.get_rank() + 1)])
    ...     dist.all_reduce(t)            # sum over the ranks
    ...     return t.item()
    >>> ddp_lab.launch(total, 4, args=(1.0,))
    [10.0, 10.0, 10.0, 10.0]

The function may be defined in the notebook itself (closures, lambdas,
classes and modules from earlier cells included): it is sent to the ranks
*by value* with cloudpickle (see ``ddp_lab.serialize``). Each rank gets the
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

import linecache
import sys

from . import protocol, serialize
from .errors import LaunchError, RankDied, RankFailed, RanksTimedOut
from .output import render_by_rank
from .plan import DEFAULT_TIMEOUT, make_plan
from .processes import RankProcesses, interrupts_deferred


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


def unpickle_results(outcome, world_size):
    """The ranks' values, rank by rank; one that cannot be unpickled is named."""
    values = []
    for rank in range(world_size):
        try:
            values.append(serialize.loads(outcome.results[rank]))
        except Exception as error:
            raise LaunchError(
                f"the value rank {rank} sent back cannot be unpickled in the notebook: "
                f"{type(error).__name__}: {error}. Send back plain values (numbers, "
                "lists, dicts, tensors), or import here the module its class comes "
                "from") from error
    return values


def pickle_call(fn, args=(), kwargs=None):
    """Pickle ``(fn, args, kwargs)`` by value, naming the part that cannot be."""
    if not callable(fn):
        raise TypeError(f"fn must be callable (a function), got {type(fn).__name__}: {fn!r}")
    if not isinstance(args, (tuple, list)):
        raise TypeError(f"args must be a tuple, got {type(args).__name__}: {args!r}")
    kwargs = {} if kwargs is None else kwargs
    if not isinstance(kwargs, dict):
        raise TypeError(f"kwargs must be a dict, got {type(kwargs).__name__}: {kwargs!r}")
    try:
        return serialize.dumps((fn, tuple(args), kwargs))
    except Exception as error:
        raise _unpicklable_part(fn, args, kwargs) from error


def _unpicklable_part(fn, args, kwargs):
    parts = [("fn", fn)]
    parts += [(f"args[{i}]", value) for i, value in enumerate(args)]
    parts += [(f"kwargs[{key!r}]", value) for key, value in kwargs.items()]
    for label, value in parts:
        try:
            serialize.dumps(value)
        except Exception as error:
            return TypeError(
                f"{label} ({type(value).__name__}) cannot be pickled, so it cannot be "
                f"sent to the ranks: {error}. Create it inside the function instead.")
    return TypeError("(fn, args, kwargs) cannot be pickled")


def interactive_sources():
    """Source lines of code typed into notebook cells, for remote tracebacks.

    IPython keeps each executed cell in ``linecache`` with no modification
    time (it is not a file). Sending those lines along lets a traceback from
    a rank show the cell's code, not just a line number.
    """
    return {
        name: entry[2]
        for name, entry in list(linecache.cache.items())
        if len(entry) == 4 and entry[1] is None and entry[2]
    }


def show(texts):
    """Print the ranks' output, rank by rank, into the cell."""
    text = render_by_rank(texts)
    if text:
        sys.stdout.write(text)
        sys.stdout.flush()


def raise_for(outcome, timeout):
    """Turn what went wrong in ``outcome`` into the right exception."""
    if outcome.ok:
        return
    if outcome.died:
        rank = min(outcome.died)
        raise RankDied(rank, outcome.died[rank])
    if outcome.failures:
        rank = min(outcome.failures)
        info = outcome.failures[rank]
        others = {r: f"{f['exc_type']}: {f['message']}"
                  for r, f in outcome.failures.items() if r != rank}
        exception = _unpickle_or_none(info["exception"])
        raise RankFailed(rank, info["exc_type"], info["message"], info["traceback"],
                         exception=exception, other_failures=others,
                         still_running=outcome.unfinished)
    raise RanksTimedOut(timeout, outcome.unfinished)


def _unpickle_or_none(data):
    try:
        return serialize.loads(data) if data else None
    except Exception:  # e.g. an exception class the notebook cannot import
        return None
