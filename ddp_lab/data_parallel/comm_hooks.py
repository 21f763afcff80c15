"""DDP communication hooks that count what DDP sends.

DDP hands each bucket of gradients, once all its gradients are ready, to a
*communication hook*: a function ``hook(state, bucket) -> Future`` that must
start reducing ``bucket.buffer()`` (a flat tensor holding the bucket's
gradients) and return a future of the averaged result. The default hook is
an all-reduce followed by a division by W (torch's ``allreduce_hook``).

:class:`CommLog` is the state of :func:`counting_allreduce_hook`, which does
exactly what the default does and also writes down every call: which
bucket, how many elements, of which dtype, hence how many bytes. Wrapped in
torch's ``fp16_compress_wrapper`` it sees the float16 buffer that is really
sent, so the bytes it counts are the bytes on the wire::

    log = CommLog()
    ddp_model.register_comm_hook(log, counting_allreduce_hook)
    # or, compressed:
    ddp_model.register_comm_hook(log, fp16_compress_wrapper(counting_allreduce_hook))

Runs inside a rank; the log is plain data and can be returned to the notebook.

Used in Chapter 8.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

__all__ = ["AllReduceCall", "CommLog", "counting_allreduce_hook"]


@dataclass(frozen=True)
class AllReduceCall:
    """One all-reduce DDP asked for: bucket ``bucket``, ``numel`` elements of ``dtype``."""

    bucket: int
    numel: int
    dtype: str
    nbytes: int


@dataclass
class CommLog:
    """Every all-reduce a :func:`counting_allreduce_hook` launched, in order.

    ``process_group`` is the group to reduce over (None: the default group).
    """

    calls: list = field(default_factory=list)
    process_group: object = None

    @property
    def count(self) -> int:
        return len(self.calls)

    @property
    def nbytes(self) -> int:
        """Bytes handed to all-reduce, summed over the calls (each rank's input)."""
        return sum(call.nbytes for call in self.calls)

    def clear(self) -> None:
        self.calls.clear()

    def __getstate__(self):
        # A process group cannot leave its process: send the calls only.
        return {"calls": list(self.calls), "process_group": None}


def counting_allreduce_hook(log, bucket):
    """Torch's default all-reduce hook, writing each call into ``log`` (a :class:`CommLog`) first.

    (No type annotations: DDP checks them, and this module's postponed
    annotations would be strings it does not accept.)
    """
    buffer = bucket.buffer()
    log.calls.append(AllReduceCall(
        bucket=bucket.index(),
        numel=buffer.numel(),
        dtype=str(buffer.dtype).replace("torch.", ""),
        nbytes=buffer.numel() * buffer.element_size(),
    ))
    return allreduce_hook(log.process_group, bucket)
