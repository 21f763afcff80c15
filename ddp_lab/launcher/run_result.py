"""What a job's replies add up to: the values by rank, or the right exception.

The worker group (``ddp_lab.launcher.worker_group``) collects, for one job,
an ``Outcome``: the pickled results of the ranks that replied, the failures,
the deaths and where the unfinished ranks were (torch elastic calls the same
thing an agent's ``RunResult``). Here it becomes what the notebook sees: the
values in rank order (``unpickle_results``), or one exception that names the
rank and what to do (``raise_for``: ``RankFailed``, ``RankDied``,
``RanksTimedOut``, Chapter 3).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ddp_lab.launcher import serialize
from ddp_lab.launcher.errors import LaunchError, RankDied, RankFailed, RanksTimedOut


@dataclass
class Outcome:
    """What came back from the ranks for one job, the job with id ``job_id``."""

    job_id: int
    pending: set = field(default_factory=set)      # ranks whose reply is awaited
    results: dict = field(default_factory=dict)    # rank -> pickled value
    failures: dict = field(default_factory=dict)   # rank -> failure info
    died: dict = field(default_factory=dict)       # rank -> exit code
    unfinished: dict = field(default_factory=dict)  # rank -> where it was
    in_collective: set = field(default_factory=set)  # unfinished ranks waiting in torch.distributed
    hint: str = ""  # what their waits mean (where_stuck.timeout_hint)
    timed_out: bool = False

    @property
    def ok(self):
        return not (self.failures or self.died or self.unfinished or self.pending)


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
    raise RanksTimedOut(timeout, outcome.unfinished, outcome.hint)


def _unpickle_or_none(data):
    try:
        return serialize.loads(data) if data else None
    except Exception:  # e.g. an exception class the notebook cannot import
        return None
