"""What runs inside each rank process.

The launcher (``ddp_lab.launcher.worker_group``) starts one process per rank
with ``worker_main`` as its target and a ``WorkerSpec``: what the rank is and
where it runs (torch elastic's ``WorkerSpec`` describes a whole group of
identical workers; here each rank gets one of its own, with its environment).
A rank then:

1. becomes the leader of its own process group, so that stopping it also
   stops any process it started (DataLoader workers, say);
2. sends its stdout and stderr into a pipe the notebook reads;
3. takes the torchrun environment (RANK, WORLD_SIZE, ...) and its share of
   the CPU threads;
4. keeps every process group it will create alive until it exits, so that
   freeing a DDP model never deadlocks (``ddp_lab.launcher.keep_groups``);
5. joins the default process group, if asked to;
6. runs its job, the reader's function, and replies with the job's id: the
   value it returned, or what it raised. ``sys.exit()``, ``sys.exit(0)`` or
   ``sys.exit(None)`` in the function ends it normally (its value is None),
   as a worker of ``torch.multiprocessing.spawn`` or torchrun that exits
   with status 0 does; any other exit code is a failure;
7. waits for the notebook's ``exit``, leaves the process group and exits
   (``ddp_lab.launcher.protocol`` lists every message).

A helper thread reads the messages from the notebook meanwhile. It answers
"where are you?" questions with the main thread's stack, even while the main
thread is stuck in a collective, and stops the rank if the notebook goes away.

Chapter 3 shows, in outline, what a rank runs before the reader's function.
"""

from __future__ import annotations

import ctypes
import linecache
import os
import signal
import sys
import threading
import traceback
from dataclasses import dataclass, field
from datetime import timedelta

from ddp_lab.host import uses_nccl
from ddp_lab.launcher import protocol, serialize
from ddp_lab.launcher.keep_groups import keep_every_process_group
from ddp_lab.launcher.where_stuck import main_thread_stack


@dataclass(frozen=True)
class WorkerSpec:
    """Everything a rank needs to know before it runs anything."""

    rank: int
    env: dict
    threads: int
    backend: str
    init_process_group: bool
    process_group_timeout: float
    # Source lines of notebook cells, so tracebacks in the rank show code.
    source_lines: dict = field(default_factory=dict)


def worker_main(spec, control, output, job):
    """Entry point of a rank process (the target given to multiprocessing).

    ``job`` is ``(protocol.CALL, job id, pickled (fn, args, kwargs))``: it
    travels with the process's arguments, so the rank needs no round trip.
    """
    _lead_own_process_group()
    _send_stdio_to(output)
    os.environ.clear()  # the notebook's environment now, not the forkserver's
    os.environ.update(spec.env)
    _use_threads(spec.threads)
    _remember_sources(spec.source_lines)

    inbox = Inbox(control)
    inbox.start()
    keep_every_process_group()
    kind, payload = _start_process_group(spec) or run_job(job)
    _stop_own_forkserver()
    inbox.reply(kind, job[1], payload)
    inbox.exit_asked.wait()
    leave_process_group()


class Inbox:
    """The rank's line to the notebook: its reply and its stacks out, questions in.

    A reader thread takes every message off the pipe as it comes, so that
    ``where`` is answered while the job runs (or hangs), and ``exit`` sets
    ``exit_asked``. If the notebook goes away, the rank stops itself.
    """

    def __init__(self, control):
        self._control = control
        self._send_lock = threading.Lock()
        self.exit_asked = threading.Event()

    def start(self):
        threading.Thread(target=self._read, name="ddp_lab-inbox", daemon=True).start()

    def reply(self, kind, job_id, payload):
        _flush_all_output()
        self._send((kind, job_id, payload))

    def _read(self):
        while not self.exit_asked.is_set():
            try:
                message = self._control.recv()
            except (EOFError, OSError):
                _stop_everything_here()  # the notebook is gone
            except BaseException:  # unreadable: this pipe is out of step for good
                traceback.print_exc()
                _flush_all_output()
                _stop_everything_here()
            if message[0] == protocol.WHERE:
                self._send((protocol.STACK, message[1], main_thread_stack()))
            elif message[0] == protocol.EXIT:
                self.exit_asked.set()
            else:
                print(f"ddp_lab: a rank got a message it does not know: {message[0]!r}",
                      file=sys.stderr)

    def _send(self, message):
        with self._send_lock:
            self._control.send(message)


def run_job(job):
    """Call the job's function; return the reply's kind and payload (exceptions: 'failed')."""
    _kind, _job_id, pickled_call = job
    try:
        fn, args, kwargs = serialize.loads(pickled_call)
        result = fn(*args, **kwargs)
    except SystemExit as stop:
        if exit_code(stop) != 0:
            return _failure_reply(*sys.exc_info())
        result = None  # a normal end, as under mp.spawn and torchrun
    except BaseException:  # KeyboardInterrupt is reported too
        return _failure_reply(*_group_made_twice(*sys.exc_info()))
    try:
        return protocol.DONE, serialize.dumps(result)
    except Exception as error:
        return _failure_reply(TypeError, TypeError(
            f"the return value ({type(result).__name__}) cannot be pickled back to the "
            f"notebook: {_safe_str(error)}"), None)


# Who initialised this rank's default process group before the reader's
# function ran, and what to do instead of initialising it again: set by
# _start_process_group (ddp_lab.launch) and by Cluster.launch's rank
# (ddp_lab.cluster.namespaces.run_in_node), through group_made_by.
_GROUP_MADE_BY = None
TWICE = "trying to initialize the default process group twice"  # torch's ValueError


def group_made_by(launcher, instead):
    """Note that ``launcher`` initialised this rank's default group before the function runs.

    ``instead`` says how to run code that initialises a group itself. A
    function that calls ``dist.init_process_group()`` anyway then fails with
    a message saying so (``_group_made_twice``), instead of torch's bare
    "trying to initialize the default process group twice".
    """
    global _GROUP_MADE_BY
    _GROUP_MADE_BY = (launcher, instead)


def _group_made_twice(exc_type, exc, tb):
    """torch's "initialize the default process group twice", said in the launcher's words.

    ``torch.distributed.init_process_group`` raises that ``ValueError`` when
    the default group exists (``torch/distributed/distributed_c10d.py``,
    ``init_process_group``: ``if GroupMember.WORLD is not None``). Under
    ``launch`` (and ``Cluster.launch``) the launcher made it, and the
    reader's code, often a torchrun script's ``main()`` or a tutorial's
    ``init_process``, need not: say so, and what to use. The traceback is
    kept (it shows the reader's call); any other exception is left as it is.
    """
    if _GROUP_MADE_BY is None or not (isinstance(exc, ValueError) and TWICE in _safe_str(exc)):
        return exc_type, exc, tb
    launcher, instead = _GROUP_MADE_BY
    explained = ValueError(
        f"{TWICE}: {launcher} initialised it on every rank before calling your function. "
        "Use that group as it is (dist.get_rank(), dist.get_world_size(), and dist.group.WORLD "
        "where a group is asked for) and leave out dist.init_process_group() and "
        f"dist.destroy_process_group(). {instead}")
    return ValueError, explained.with_traceback(tb), tb


def exit_code(stop):
    """The status a process ending with this ``SystemExit`` exits with, as Python decides it.

    >>> [exit_code(SystemExit(*code)) for code in [(), (None,), (0,), (3,), ("no data",)]]
    [0, 0, 0, 3, 1]
    """
    if stop.code is None:
        return 0
    if isinstance(stop.code, int):
        return int(stop.code)
    return 1  # Python prints the message to stderr and exits with 1


def _remember_sources(source_lines):
    """Put notebook cells' lines where ``traceback`` and ``where`` look them up."""
    for filename, lines in source_lines.items():
        linecache.cache[filename] = (sum(map(len, lines)), None, lines, filename)


def _failure_reply(exc_type, exc, tb):
    """Describe an exception for the notebook, without this module's frames.

    ``exit_code`` is set for a ``SystemExit``: the status the rank asked for.
    """
    while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
        tb = tb.tb_next
    text = "".join(traceback.format_exception(exc_type, exc, tb))
    try:
        pickled = serialize.dumps(exc)
    except Exception:
        pickled = None
    return protocol.FAILED, {
        "exc_type": exc_type.__name__,
        "message": _safe_str(exc),
        "traceback": text,
        "exception": pickled,
        "exit_code": exit_code(exc) if isinstance(exc, SystemExit) else None,
    }


def _safe_str(exc):
    """``str(exc)``, even for an exception whose ``__str__`` itself raises."""
    try:
        return str(exc)
    except BaseException as error:
        return f"<str() of this exception raised {type(error).__name__}>"


def _start_process_group(spec):
    """Join the default group as torchrun's workers do (``env://``).

    Returns a 'failed' reply (kind, payload) if that goes wrong, so the error
    reaches the notebook as the answer to the job instead of killing the rank.
    """
    if not spec.init_process_group:
        return None
    import torch
    import torch.distributed as dist

    try:
        if uses_nccl(spec.backend):
            torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
        dist.init_process_group(
            spec.backend, timeout=timedelta(seconds=spec.process_group_timeout))
    except Exception:
        return _failure_reply(*sys.exc_info())
    group_made_by("ddp_lab.launch", "To run code that initialises its own group (a torchrun "
                  "script's main(), say), launch it with init_process_group=False.")
    return None


# Gloo's teardown of a process group is slow: it waits for its network event
# loop, which wakes every 10 ms, once per connection (measured at 4 ranks:
# 20-40 ms per rank, a third of a whole launch). A rank about to exit need not
# wait for it. It still calls destroy_process_group(), so torch.distributed is
# left clean, but keeps gloo's half of the group alive here: when the process
# exits, the operating system closes its sockets at once.
_GLOO_GROUPS_LEFT_TO_EXIT = []


def _stop_own_forkserver():
    """Stop the forkserver that a launch from inside this rank started, if one did.

    Its socket is a ``listener-*`` file in the temporary folder the launcher
    gave this launch's ranks; stopping the forkserver removes the file, and
    ends a process that holds a copy of torch, before the rank replies. (A
    rank killed before it gets here cannot stop it: the launcher then kills
    it with the rank's process group and removes the whole folder, see
    ``worker_group``.)
    """
    forkserver = sys.modules.get("multiprocessing.forkserver")
    server = getattr(forkserver, "_forkserver", None)
    if getattr(server, "_forkserver_pid", None) is not None:
        from ddp_lab.launcher.shutdown import _end_forkserver

        _end_forkserver(server)


def leave_process_group():
    """Leave the default process group before the rank exits (see above)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        if dist.get_backend() == "gloo":
            _GLOO_GROUPS_LEFT_TO_EXIT.append(dist.group.WORLD)
        dist.destroy_process_group()
    _flush_all_output()


def _lead_own_process_group():
    # A rank and everything it starts share one process group id, so the
    # launcher can stop them all with one killpg.
    os.setpgrp()


def _send_stdio_to(output):
    # Point file descriptors 1 and 2 at the pipe: this catches prints from
    # Python and from C++ (gloo's warnings) alike.
    os.dup2(output.fileno(), 1)
    os.dup2(output.fileno(), 2)
    output.close()
    sys.stdout.reconfigure(line_buffering=True)
    sys.stderr.reconfigure(line_buffering=True)


def _use_threads(threads):
    """Give this rank ``threads`` intra-op threads, so ranks share the cores."""
    import torch

    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[name] = str(threads)
    torch.set_num_threads(threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass  # already set, e.g. by the code that preloaded torch


_libc = ctypes.CDLL(None)


def _flush_all_output():
    sys.stdout.flush()
    sys.stderr.flush()
    _libc.fflush(None)  # C and C++ stdio buffers too


def _stop_everything_here():
    os.killpg(os.getpgrp(), signal.SIGKILL)
