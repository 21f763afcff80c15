"""Lab checkers: each takes the reader's answer, runs it (on real ranks where
the answer is code) and returns a CheckResult, which a notebook shows as a
tick or as a list of mistakes, each explained.

- Lab 1: ``check_rank_table`` (ranks of a topology), ``check_devices``
  (devices of a process) and ``check_ranks_in_group`` (ranks inside a sub-group).
- Lab 2: ``check_all_gather`` and ``check_all_reduce``, built from send/recv, and
  ``check_all_to_all`` (an expert dispatch with ``all_to_all_single``).
- Lab 3: ``check_ring_all_reduce``, message by message against the textbook ring.
- Lab 4: ``check_ddp``, DDP built from gradient hooks, against torch's DDP.
- Chapter 8b: ``check_accumulation``, one optimizer step of gradient accumulation
  under ``no_sync``, against a big-batch step (all-reduces counted, replicas compared).
- Lab 5: ``check_torchrun_script``, a training script run under torchrun with
  an injected failure.
- Lab 5b: ``check_diagnosis`` and ``check_fix`` (five broken scripts: the cause,
  line and ranks of each bug, and a fix run on real ranks).
- Lab 6: ``check_zero1`` (ZeRO-1 built by hand: optimizer state sharded, reduce-scatter
  and all-gather) and ``check_memory_answer`` (bytes per rank under DDP and ZeRO-1/2/3).
- Lab 7: ``check_fsdp_budget``, a model sharded with FSDP2 under a memory budget, its
  loss curve and weights against DDP's.
- Lab 8: ``check_two_d_layout``, FSDP x tensor parallelism on a 2x2 mesh, against
  one process (mesh dimensions, the order of the two calls, the plan, the loss's group).
- Chapter 15g: ``check_ring_attention``, ring attention from send/recv, against full
  attention (the running maximum, the log-sum-exp correction, the ring's direction).
"""

from ddp_lab.lazy import lazy_exports

# Imported when first used: the memory and rank-table checkers need no torch.
_EXPORTS = {
    "CheckResult": "ddp_lab.checks.result",
    "Mistake": "ddp_lab.checks.result",
    "check_rank_table": "ddp_lab.checks.ranks",
    "check_devices": "ddp_lab.checks.devices",
    "check_ranks_in_group": "ddp_lab.checks.group_ranks",
    "check_all_gather": "ddp_lab.checks.collectives",
    "check_all_to_all": "ddp_lab.checks.collectives",
    "check_ring_attention": "ddp_lab.checks.ring_attention",
    "check_two_d_layout": "ddp_lab.checks.two_d",
    "check_all_reduce": "ddp_lab.checks.collectives",
    "check_ring_all_reduce": "ddp_lab.checks.ring",
    "check_ddp": "ddp_lab.checks.ddp",
    "check_accumulation": "ddp_lab.checks.accumulation",
    "check_torchrun_script": "ddp_lab.checks.torchrun",
    "check_memory_answer": "ddp_lab.checks.memory_answer",
    "check_zero1": "ddp_lab.checks.zero1",
    "check_diagnosis": "ddp_lab.checks.debugging",
    "check_fix": "ddp_lab.checks.debugging",
    "check_fsdp_budget": "ddp_lab.checks.fsdp_budget",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
