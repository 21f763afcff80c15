"""What came back from the ranks of one launch: a ``RunResult`` (Chapter 3).

The worker group (``ddp_lab.launcher.worker_group``) fills one in as the
replies come: the pickled values of the ranks that returned, the failures,
the deaths, and where the unfinished ranks were when they were stopped
(torch elastic's agent keeps the same record under the same name,
``RunResult``). ``values()`` gives what the notebook gets back when every
rank returned; ``ddp_lab.launcher.errors.error_for`` gives the one exception
a launch ends with otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ddp_lab.launcher import serialize
from ddp_lab.launcher.errors import LaunchError


@dataclass
class RunResult:
    """What came back from the ranks for the job with id ``job_id``."""

    job_id: int
    pending: set = field(default_factory=set)      # ranks whose reply is awaited
    results: dict = field(default_factory=dict)    # rank -> pickled value
    failures: dict = field(default_factory=dict)   # rank -> failure info (worker._failure_reply)
    died: dict = field(default_factory=dict)       # rank -> exit code
    unfinished: dict = field(default_factory=dict)  # rank -> where it was
    hint: str = ""  # what their waits mean (where_stuck.timeout_hint)

    @property
    def ok(self):
        return not (self.failures or self.died or self.unfinished or self.pending)

    def values(self):
        """The ranks' values, rank by rank; one that cannot be unpickled is named."""
        return [self._value(rank) for rank in sorted(self.results)]

    def _value(self, rank):
        try:
            return serialize.loads(self.results[rank])
        except Exception as error:
            raise LaunchError(
                f"the value rank {rank} sent back cannot be unpickled in the notebook: "
                f"{type(error).__name__}: {error}. Send back plain values (numbers, "
                "lists, dicts, tensors), or import here the module its class comes "
                "from") from error
