"""The messages between the notebook and its ranks, as named constants (Chapter 3).

The short table is in ``ddp_lab.launcher``'s docstring; the fields are here.

The notebook (``ddp_lab.launcher.worker_group``) and each rank (``ddp_lab.launcher.worker``)
talk over one duplex pipe per rank. Every message is a tuple whose first item
is its kind; every job, query and reply then carries an id, as in Jupyter's
messaging protocol: a reply carries the id of the message it answers
(Jupyter's ``parent_header.msg_id``), so the notebook can tell the reply to
*this* call from a late reply to an earlier one, and drop the latter.

Notebook to rank:

============  ===================================  ================================
kind          fields after the kind                answered by
============  ===================================  ================================
``call``      job id, pickled (fn, args, kwargs),  ``done`` or ``failed``
              notebook cells' source lines
``exec``      job id, source, file name            ``done`` (None) or ``failed``
``pull``      job id, variable names               ``done`` ({name: value}) or
                                                   ``failed``
``push``      job id, pickled {name: value}        ``done`` (None) or ``failed``
``interrupt`` job id                               nothing: the job's own reply
                                                   says KeyboardInterrupt
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
of a launch share an id. A rank runs one job at a time, in the order they
came; ``interrupt`` and ``where`` are answered at once by the rank's reader
thread, even while a job runs.
"""

from __future__ import annotations

# Jobs: the rank's main thread runs them, one at a time, and replies to each.
CALL = "call"
EXEC = "exec"
PULL = "pull"
PUSH = "push"
JOBS = (CALL, EXEC, PULL, PUSH)

# Handled by the rank's reader thread at once, even while a job runs.
INTERRUPT = "interrupt"
WHERE = "where"
EXIT = "exit"

# Replies.
DONE = "done"
FAILED = "failed"
STACK = "stack"
