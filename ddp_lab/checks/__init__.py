"""Lab checkers: each takes the reader's answer, runs it (on real ranks where
the answer is code) and returns a CheckResult, which a notebook shows as a
tick or as a list of mistakes, each explained.

- Lab 1: ``check_rank_table`` (ranks of a topology), ``check_devices``
  (devices of a process) and ``check_ranks_in_group`` (ranks inside a sub-group).
- Lab 2: ``check_all_gather`` and ``check_all_reduce``, built from send/recv.
- Lab 3: ``check_ring_all_reduce``, message by message against the textbook ring.
- Lab 4: ``check_ddp``, DDP built from gradient hooks, against torch's DDP.
- Lab 5: ``check_torchrun_script``, a training script run under torchrun with
  an injected failure.
- Lab 5b: ``check_diagnosis`` and ``check_fix`` (five broken scripts: the cause,
  line and ranks of each bug, and a fix run on real ranks).
- Lab 6: ``check_zero1`` (ZeRO-1 built by hand: optimizer state sharded, reduce-scatter
  and all-gather) and ``check_memory_answer`` (bytes per rank under DDP and ZeRO-1/2/3).
"""

from ddp_lab.checks.collectives import check_all_gather, check_all_reduce
from ddp_lab.checks.ddp import check_ddp
from ddp_lab.checks.debugging import check_diagnosis, check_fix
from ddp_lab.checks.devices import check_devices
from ddp_lab.checks.group_ranks import check_ranks_in_group
from ddp_lab.checks.ranks import check_rank_table
from ddp_lab.checks.result import CheckResult, Mistake
from ddp_lab.checks.ring import check_ring_all_reduce
from ddp_lab.checks.torchrun import check_torchrun_script
from ddp_lab.checks.zero import check_memory_answer, check_zero1

__all__ = ["CheckResult", "Mistake", "check_all_gather", "check_all_reduce", "check_ddp",
           "check_devices", "check_diagnosis", "check_fix", "check_memory_answer", "check_rank_table", "check_ranks_in_group",
           "check_ring_all_reduce", "check_torchrun_script", "check_zero1"]
