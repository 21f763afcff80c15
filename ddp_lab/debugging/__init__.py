"""Tools for a job that hangs, diverges or crawls: the in-rank and
from-outside helpers of the debugging chapter (Chapter 13b, "When it hangs,
diverges or crashes") and its lab (Lab 5b, "Find the bug").

- :mod:`~ddp_lab.debugging.stacks`: the Python stack of every worker of a
  running torchrun job, read from outside with ``py-spy dump``.
- :mod:`~ddp_lab.debugging.replicas`: are the replicas still identical?
  Parameter and buffer checksums compared across ranks with one collective.
- :mod:`~ddp_lab.debugging.stragglers`: time spent computing vs waiting in
  collectives, per rank, and the straggler it points to.
- :mod:`~ddp_lab.debugging.flight_recorder`: PyTorch's flight recorder,
  dumped by every rank and read side by side.

Everything that runs inside a rank depends on torch only; nothing here is
imported by ``import ddp_lab``.
"""

from ddp_lab.debugging.flight_recorder import dump_flight_record, fr_analyser, read_flight_records, records_side_by_side
from ddp_lab.debugging.replicas import ReplicaReport, compare_replicas, tensor_checksum
from ddp_lab.debugging.stacks import Frame, HungJob, dump_stack, stack_lines, stacks_of_hung_job
from ddp_lab.debugging.stragglers import RankTimes, StragglerVerdict, WaitComputeTimer, find_straggler

__all__ = ["Frame", "HungJob", "RankTimes", "ReplicaReport", "StragglerVerdict", "WaitComputeTimer",
           "compare_replicas", "dump_flight_record", "dump_stack", "find_straggler", "fr_analyser",
           "read_flight_records", "records_side_by_side", "stack_lines", "stacks_of_hung_job",
           "tensor_checksum"]
