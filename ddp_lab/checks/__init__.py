"""Lab checkers: each takes the reader's answer and returns a CheckResult,
which a notebook shows as a tick or as a list of mistakes, each explained.

Lab 1: ``check_rank_table`` (ranks of a topology, in ``ranks``) and
``check_devices`` (devices of a process, in ``devices``).
"""

from ddp_lab.checks.devices import check_devices
from ddp_lab.checks.ranks import check_rank_table
from ddp_lab.checks.result import CheckResult, Mistake

__all__ = ["CheckResult", "Mistake", "check_devices", "check_rank_table"]
