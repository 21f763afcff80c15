"""Ring all-reduce, built only from point-to-point sends and receives.

Each of the W ranks cuts its tensor into W chunks. The ranks stand in a
ring: each sends to its right neighbour and receives from its left one.

- **Reduce-scatter** (W-1 steps): at step s, rank r sends chunk (r-s) mod W
  and receives chunk (r-s-1) mod W, which it adds to its own copy. After
  W-1 steps, rank r holds the full sum of chunk (r+1) mod W.
- **All-gather** (W-1 more steps): the same pattern, but a received chunk
  replaces the local one: the finished sums travel around the ring.

In both phases, what a rank sends at step s+1 is exactly what it received
(and reduced) at step s. Every rank sends 2(W-1) chunks of N/W elements,
2(W-1)/W x N in all: almost independent of W. That is why the ring scales
where "send everything to rank 0" does not (see ``ddp_lab.collectives.naive``).

Two engineering details make this Python ring keep up with gloo's C++ one:

- Each chunk travels as a few *pieces*, and a received piece is reduced and
  forwarded at once: a piece travels on while the next one is still being
  added. The ring becomes a pipeline.
- Every receive is posted as early as it can be: those of the
  reduce-scatter all at the start, each into its own scratch buffer, and
  each all-gather receive as soon as the chunk it overwrites has been sent.
  gloo hands a message over at once when its receive is already posted;
  otherwise sender and receiver first trade "ready" notes through gloo's
  network thread, which, with more ranks than cores, waits for a core each
  time. At 1 MiB and 4 ranks on 2 cores, posting early cut the ring's time
  per call by about a quarter.

Used in Chapter 1 and Chapter 6, and read in Lab 3.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

OPS = ("sum", "avg")
# Pieces are at least this big, and a chunk is cut into at most MAX_PIECES:
# enough pieces to overlap adding with receiving, few enough that the fixed
# cost of a message (a handshake with the receiver, a wake-up of the waiting
# process) stays small. Measured with 4 ranks on 2 cores, where every
# microsecond of CPU counts: 256 KiB pieces cost ~10% more CPU than 2 MiB ones.
PIECE_BYTES = 2 * 1024 * 1024
MAX_PIECES = 4


def ring_all_reduce(tensor, op="sum", *, trace=None, piece_bytes=PIECE_BYTES):
    """All-reduce ``tensor`` in place over the default group; return it.

    Call it on every rank, like ``dist.all_reduce``. Works for any world size
    (1 included), shape and size (empty, one element, sizes W does not divide)
    and floating dtype. ``op`` is ``"sum"`` or ``"avg"``. Pass a
    ``ddp_lab.collectives.step_trace.Trace`` as ``trace`` to record every step.
    """
    check_all_reduce_arguments(tensor, op)
    world_size, rank = dist.get_world_size(), dist.get_rank()
    flat = tensor.view(-1) if tensor.is_contiguous() else tensor.contiguous().view(-1)
    chunks = list(flat.tensor_split(world_size))
    if trace is not None:
        trace.start("ring", rank, chunks)
    if world_size > 1:  # with one rank, the sum and the average are the tensor itself
        _Ring(chunks, rank, op, piece_bytes, trace).run()
    if not tensor.is_contiguous():  # we worked on a contiguous copy
        tensor.copy_(flat.view_as(tensor))
    return tensor


class _Ring:
    """One ring all-reduce, as seen by one rank."""

    def __init__(self, chunks, rank, op, piece_bytes, trace):
        self.chunks, self.rank, self.op, self.trace = chunks, rank, op, trace
        self.world_size = len(chunks)
        self.right = (rank + 1) % self.world_size
        self.left = (rank - 1) % self.world_size
        self.steps = 2 * (self.world_size - 1)
        largest = max(c.numel() for c in chunks)
        self.pieces = max(1, min(MAX_PIECES, largest * chunks[0].element_size() // piece_bytes))
        # Each reduce-scatter step receives into a buffer of its own.
        self.scratch = scratch_buffers(chunks[0], largest, self.world_size - 1)
        self.sends = {}  # chunk index -> sends of it still in flight
        self.contributions = [1] * self.world_size
        # dist.isend/irecv wrap these calls in argument checks and logging
        # that cost a few hundred microseconds per message; the ring sends
        # many messages, so it talks to the default process group directly.
        self.group = dist.group.WORLD

    def sent_chunk(self, step):
        return (self.rank - step) % self.world_size

    def received_chunk(self, step):
        return (self.rank - step - 1) % self.world_size

    def reducing(self, step):
        return step < self.world_size - 1

    def run(self):
        receives = {step: self._post_receives(step) for step in range(self.world_size - 1)}
        first = self.sent_chunk(0)
        for piece in self._pieces(self.chunks[first]):
            self._send(piece, first, step=0)
        for step in range(self.steps):
            if self.reducing(step) and self.trace is None:
                # The chunk sent at this step comes back, fully summed, at this
                # all-gather step: post that receive now (once the send is done).
                gather_step = step + self.world_size - 1
                receives[gather_step] = self._post_receives(gather_step)
            if step not in receives:
                # Tracing: an all-gather receive writes straight into a chunk,
                # so post it only now, after the trace has recorded every
                # earlier step; otherwise a fast neighbour's data could show
                # up in a snapshot before the step that brings it.
                receives[step] = self._post_receives(step)
            self._finish(step, receives.pop(step))
        self._wait_for_sends()

    def _post_receives(self, step):
        """Receive into scratch while reducing, straight into the chunk after."""
        index = self.received_chunk(step)
        if self.reducing(step):
            target = self.scratch[step][: self.chunks[index].numel()]
        else:
            self._wait_for_sends(index)  # it is overwritten: its old value must be gone
            target = self.chunks[index]
        return [(piece, self.group.recv([piece], self.left, step)) for piece in self._pieces(target)]

    def _finish(self, step, receives):
        """Take each received piece, reduce it, and pass it on to the right."""
        index = self.received_chunk(step)
        last_reduction = step == self.world_size - 2
        for own, (received, work) in zip(self._pieces(self.chunks[index]), receives):
            work.wait()
            if self.reducing(step):
                own.add_(received)
                if last_reduction and self.op == "avg":
                    own.div_(self.world_size)  # this chunk's sum is complete
            if step + 1 < self.steps:
                self._send(own, index, step=step + 1)
        # The incoming partial sum carries step + 1 inputs; ours makes step + 2.
        self.contributions[index] = step + 2 if self.reducing(step) else self.world_size
        if self.trace is not None:
            self.trace.record(
                "reduce-scatter" if self.reducing(step) else "all-gather",
                sends=[(self.right, self.sent_chunk(step))],
                receives=[(self.left, index)],
                chunks=self.chunks, contributions=self.contributions)

    def _pieces(self, tensor):
        return tensor.tensor_split(self.pieces)

    def _send(self, piece, index, step):
        self.sends.setdefault(index, []).append(self.group.send([piece], self.right, step))
        if self.trace is not None:
            self.trace.count_bytes(piece)

    def _wait_for_sends(self, index=None):
        """Wait until the sends of chunk ``index`` (of every chunk: None) are done."""
        for chunk in list(self.sends) if index is None else [index]:
            for work in self.sends.pop(chunk, []):
                work.wait()


# Scratch buffers, kept from one call to the next: a fresh 16 MiB buffer is
# fresh memory from the operating system, which zeroes every page on first
# touch, and that costs as much CPU as a few messages. Keyed by dtype and
# device; they only grow, to the largest chunk and world size seen: W-1
# chunks, (W-1)/W of the tensor.
_SCRATCH = {}


def scratch_buffers(like, numel, count):
    """``count`` reusable buffers of at least ``numel`` elements, like ``like``."""
    key = (like.dtype, like.device)
    buffers = _SCRATCH.get(key, [])
    if len(buffers) < count or buffers[0].numel() < numel:
        size = max(numel, buffers[0].numel() if buffers else 0)
        buffers = _SCRATCH[key] = [like.new_empty(size) for _ in range(max(count, len(buffers)))]
    return buffers


def check_all_reduce_arguments(tensor, op):
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"all-reduce needs a torch.Tensor, got {type(tensor).__name__}")
    if not tensor.is_floating_point():
        raise TypeError(f"all-reduce needs a floating-point tensor, got dtype {tensor.dtype}")
    if op not in OPS:
        raise ValueError(f"unknown op {op!r}: use 'sum' or 'avg'")
