"""Why a rank keeps every process group until it exits (Chapter 3's launch; DDP from Chapter 8; Chapter 11).

A rank runs the reader's function, and this is a common way to end one::

    def train():
        dist.init_process_group("gloo")
        model = DDP(net)
        ...                          # forward, backward, step
        dist.destroy_process_group()
        # returning frees `model`, the last thing that uses the group

Launched a hundred times, with two ranks on a busy two-core machine, it
hung about one launch in three (30 and 34 times in two tries): a rank stopped
without a word (the launcher reported "no answer (stuck outside Python?)"),
and its native stack (``py-spy dump --native --pid``) showed two threads,
each waiting for the other:

* the main thread, holding the GIL, frees the DDP model. That frees its
  C++ ``Reducer``, which holds the last reference to the process group
  (``destroy_process_group`` only dropped torch's own references), so the
  group's destructor runs: ``~ProcessGroupGloo`` joins gloo's worker
  threads, and waits for them with the GIL still held.
* one gloo worker thread is just finishing the last all-reduce of the
  backward pass. A collective remembers the thread-local state of the
  code that started it, and that state holds a Python object: the
  ``contextvars`` context that ``torch.autograd.graph._engine_run_backward``
  stashes for the duration of every ``backward()``. Freeing a Python object
  needs the GIL, so the worker thread waits for the main thread.

Neither can go on: a deadlock. (The Python object is that context: with
``backward()`` kept from stashing it, as an experiment, the same launches
never hung, 0 times in 100.) It is a race, not a certainty: it happens
only when the worker thread is slower to let go of its last all-reduce than
the main thread is to reach the end of the function, which on a busy
machine is often.

The process group's own Python object does not have this problem: torch
frees it with the GIL released (its holder type in ``libtorch_python.so``
is ``IntrusivePtrNoGilDestructor<c10d::ProcessGroup>``), so gloo's threads
can take the GIL and finish. The Reducer is freed with the GIL held
(``dealloc_without_manipulating_gil``). So a rank keeps a Python reference
to every process group created in it, for as long as it lives. Freeing a
DDP model then never destroys its group; nothing in the reader's code has
to change. The groups go with the process: a rank exits with ``os._exit``
(multiprocessing's forkserver ends every child that way), which runs no
destructor, and the operating system closes their sockets at once.

With that, the same hundred launches hang 0 times (and 0 in 300).

In a script of your own (under ``torchrun``, say), free the model before
the group: ``del model`` before ``dist.destroy_process_group()``. The
Reducer then lets go of a group that torch still holds, and the group is
destroyed later, from its Python object, with the GIL released (0 hangs in
100 launches of the pattern so changed, without this module's help).
"""

from __future__ import annotations

# Every process group this process created, in order: never emptied.
KEPT = []


class _KeepingMap(dict):
    """torch's map of live process groups, which also keeps each group in ``KEPT``."""

    def __setitem__(self, group, value):
        KEPT.append(group)
        super().__setitem__(group, value)


def keep_every_process_group():
    """From now on, keep a reference to every process group this process creates.

    torch registers every group it creates (``init_process_group``,
    ``new_group``, a device mesh's groups...) in one dict,
    ``torch.distributed.distributed_c10d._pg_map``; ``_World.pg_map`` looks
    it up by name each time. It is replaced by a ``_KeepingMap`` holding the
    same entries. Calling this again changes nothing.
    """
    import torch.distributed as dist

    if not dist.is_available():
        return
    from torch.distributed import distributed_c10d as c10d

    if not isinstance(getattr(c10d, "_pg_map", None), dict):
        return  # a torch that keeps its groups elsewhere: there, ``del model`` first is the remedy
    if isinstance(c10d._pg_map, _KeepingMap):
        return
    KEPT.extend(c10d._pg_map)
    c10d._pg_map = _KeepingMap(c10d._pg_map)
