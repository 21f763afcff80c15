"""The messages between the notebook and its ranks, as named constants (Chapter 3).

The short table is in ``ddp_lab.launcher``'s docstring; the fields are here.

The notebook (``ddp_lab.launcher.worker_group``) and each rank (``ddp_lab.launcher.worker``)
talk over one duplex pipe per rank. Every message is a tuple whose first item
is its kind; the job, each question and each reply then carries an id, as in
Jupyter's messaging protocol: a reply carries the id of the message it
answers (Jupyter's ``parent_header.msg_id``), so the notebook can tell the
answer to *this* question from a late answer to an earlier one, and drop the
latter.

Notebook to rank:

============  ===================================  ================================
kind          fields after the kind                answered by
============  ===================================  ================================
``call``      job id, pickled (fn, args, kwargs)   ``done`` or ``failed``
              (the rank's one job: it travels with
              the process's arguments, not the pipe)
``where``     query id                             ``stack``
``exit``      (none)                               nothing: the rank leaves its
                                                   group and exits
============  ===================================  ================================

Rank to notebook:

============  ===================================================
kind          fields after the kind
============  ===================================================
``done``      job id, the pickled result
``failed``    job id, what was raised (see ``worker._failure_reply``)
``stack``     query id, the main thread's stack as (file, line, function, code,
              rendezvous arguments): see ``where_stuck.main_thread_stack``
============  ===================================================

Job ids and query ids come from one counter per launch, so no two messages
of a launch share an id. ``where`` is answered at once by the rank's reader
thread, even while the job runs; ``exit`` comes once the notebook has every
reply.
"""

from __future__ import annotations

# The job: the rank's main thread runs it and replies.
CALL = "call"

# Handled by the rank's reader thread at once, even while the job runs.
WHERE = "where"
EXIT = "exit"

# Replies.
DONE = "done"
FAILED = "failed"
STACK = "stack"
