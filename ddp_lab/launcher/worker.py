"""What runs inside each rank process.

The launcher (``ddp_lab.launcher.worker_group``) starts one process per rank with
``rank_main`` as its target. A rank then:

1. becomes the leader of its own process group, so that stopping it also
   stops any process it started (DataLoader workers, say);
2. sends its stdout and stderr into a pipe the notebook reads;
3. takes the torchrun environment (RANK, WORLD_SIZE, ...) and its share of
   the CPU threads;
4. keeps every process group it will create alive until it exits, so that
   freeing a DDP model never deadlocks (``ddp_lab.launcher.keep_groups``);
5. joins the default process group, if asked to;
6. runs the jobs the notebook sends it (a function to call, a cell to
   execute, variables to send back) and replies to each, with the job's id,
   until told to exit (``ddp_lab.launcher.protocol`` lists every message).

A helper thread reads the messages from the notebook. It answers "where are
you?" questions with the main thread's stack, even while the main thread is
stuck in a collective, turns an ``interrupt`` into Ctrl-C for the job it
names, and stops the rank if the notebook goes away.

Chapter 3 shows, in outline, what a rank runs before the reader's function.
"""

from __future__ import annotations

import ast
import ctypes
import linecache
import os
import queue
import signal
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field
from datetime import timedelta

from ddp_lab.launcher import protocol, serialize
from ddp_lab.launcher.keep_groups import keep_every_process_group
from ddp_lab.launcher.where_stuck import main_thread_stack

# How often Ctrl-C is sent again until the job's main thread has seen it.
CTRL_C_AGAIN = 0.05


@dataclass(frozen=True)
class RankSetup:
    """Everything a rank needs to know before it runs anything."""

    rank: int
    env: dict
    threads: int
    backend: str
    init_process_group: bool
    process_group_timeout: float
    # Source lines of notebook cells, so tracebacks in the rank show code.
    source_lines: dict = field(default_factory=dict)


def rank_main(setup, control, output, first_job=None):
    """Entry point of a rank process (the target given to multiprocessing)."""
    _lead_own_process_group()
    _send_stdio_to(output)
    os.environ.clear()  # the notebook's environment now, not the forkserver's
    os.environ.update(setup.env)
    _use_threads(setup.threads)
    _remember_sources(setup.source_lines)

    inbox = Inbox(control)
    if first_job is not None:
        inbox.put(first_job)
    _interrupt_jobs_only(inbox)
    inbox.start()

    keep_every_process_group()
    startup_error = _start_process_group(setup)
    namespace = _cell_namespace(setup)
    while True:
        job = inbox.get()
        if job[0] == protocol.EXIT:
            break
        job_id = job[1]
        if startup_error is not None:
            kind, payload = startup_error
        else:
            kind, payload = inbox.run_job(job_id, lambda: _run(job, namespace))
        inbox.reply(kind, job_id, payload)
    leave_process_group()


class Inbox:
    """The rank's line to the notebook: jobs in, replies and stacks out.

    A reader thread takes every message off the pipe as it comes. Jobs go
    into a queue for the main thread; ``where`` and ``interrupt`` are
    handled by the reader itself, so they work while a job runs (or hangs).
    """

    def __init__(self, control):
        self._control = control
        self._jobs = queue.Queue()
        self._send_lock = threading.Lock()
        # ``running`` and ``_interrupted`` change together: an interrupt that
        # arrives just before its job starts must still stop it.
        self._state_lock = threading.Lock()
        self.running = None  # the id of the job the main thread is running
        self._interrupted = 0  # the highest job id the notebook interrupted
        self.sigints_seen = 0  # how many times the SIGINT handler ran

    def put(self, job):
        self._jobs.put(job)

    def get(self):
        return self._jobs.get()

    def start(self):
        threading.Thread(target=self._read, name="ddp_lab-inbox", daemon=True).start()

    def reply(self, kind, job_id, payload):
        _flush_all_output()
        self._send((kind, job_id, payload))

    def run_job(self, job_id, work):
        """Run one job; Ctrl-C while it runs, or before it started, is its failure."""
        try:
            try:
                with self._state_lock:
                    if job_id <= self._interrupted:
                        raise KeyboardInterrupt("interrupted before it started on this rank")
                    self.running = job_id
                return work()
            finally:
                self.running = None
        except KeyboardInterrupt:
            return _failure_reply(*sys.exc_info())

    def _read(self):
        while True:
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
            elif message[0] == protocol.INTERRUPT:
                self._interrupt(message[1])
            else:
                self._jobs.put(message)

    def _interrupt(self, job_id):
        """Ctrl-C for job ``job_id``: now if it runs, at its start if it waits."""
        with self._state_lock:
            self._interrupted = max(self._interrupted, job_id)
            if self.running != job_id:
                return
        threading.Thread(target=self._ctrl_c_until_seen, args=(job_id,), daemon=True).start()

    def _ctrl_c_until_seen(self, job_id):
        """Ctrl-C for the running job, again until Python's handler has seen one.

        SIGINT goes to the main thread by name (``pthread_kill``): sent to the
        whole process, it could be taken by another thread (a gloo thread,
        this one), and a main thread blocked in ``time.sleep`` or a wait
        would not wake. Even so, one that arrives just before the main thread
        enters such a call is noted but does not wake it, and KeyboardInterrupt
        would come only when the call returns: a terminal user presses Ctrl-C
        again, and so does this.
        """
        seen = self.sigints_seen
        _ctrl_c_children()
        while self.running == job_id and self.sigints_seen == seen:
            signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)
            time.sleep(CTRL_C_AGAIN)

    def _send(self, message):
        with self._send_lock:
            self._control.send(message)


def _run(job, namespace):
    """Run one job; return the reply's kind and payload (exceptions: 'failed')."""
    kind, _job_id, *fields = job
    try:
        if kind == protocol.CALL:
            pickled_call, source_lines = fields
            _remember_sources(source_lines)
            fn, args, kwargs = serialize.loads(pickled_call)
            result = fn(*args, **kwargs)
        elif kind == protocol.EXEC:
            source, filename = fields
            result = _execute_cell(source, filename, namespace)
        elif kind == protocol.PULL:
            (names,) = fields
            result = {name: namespace[name] for name in names}
        elif kind == protocol.PUSH:
            (pickled_values,) = fields
            namespace.update(serialize.loads(pickled_values))
            result = None
        else:
            raise ValueError(f"unknown job kind {kind!r}")
    except BaseException:  # SystemExit and KeyboardInterrupt are reported too
        return _failure_reply(*sys.exc_info())
    try:
        return protocol.DONE, serialize.dumps(result)
    except Exception as error:
        what = "the return value" if kind == protocol.CALL else "the value"
        return _failure_reply(TypeError, TypeError(
            f"{what} ({type(result).__name__}) cannot be pickled back to the "
            f"notebook: {_safe_str(error)}"), None)


def _remember_sources(source_lines):
    """Put notebook cells' lines where ``traceback`` and ``where`` look them up."""
    for filename, lines in source_lines.items():
        linecache.cache[filename] = (sum(map(len, lines)), None, lines, filename)


def _execute_cell(source, filename, namespace):
    """Run a notebook cell's code; print its last expression like a REPL."""
    lines = source.splitlines(True)
    linecache.cache[filename] = (len(source), None, lines, filename)
    tree = ast.parse(source, filename)
    last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
    exec(compile(tree, filename, "exec"), namespace)
    if last is not None:
        value = eval(compile(ast.Expression(last.value), filename, "eval"), namespace)
        if value is not None:
            print(repr(value))
    return None


def _failure_reply(exc_type, exc, tb):
    """Describe an exception for the notebook, without this module's frames."""
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
    }


def _safe_str(exc):
    """``str(exc)``, even for an exception whose ``__str__`` itself raises."""
    try:
        return str(exc)
    except BaseException as error:
        return f"<str() of this exception raised {type(error).__name__}>"


def _cell_namespace(setup):
    """The variables every ``%%ddp`` cell starts with."""
    import torch
    import torch.distributed as dist

    return {
        "__name__": "__ddp_cell__",
        "torch": torch,
        "dist": dist,
        "rank": setup.rank,
        "world_size": int(setup.env["WORLD_SIZE"]),
        "local_rank": int(setup.env["LOCAL_RANK"]),
    }


def _start_process_group(setup):
    """Join the default group as torchrun's workers do (``env://``).

    Returns a 'failed' reply (kind, payload) if that goes wrong, so the error
    reaches the notebook as the answer to every job instead of killing the rank.
    """
    if not setup.init_process_group:
        return None
    import torch
    import torch.distributed as dist

    try:
        if setup.backend == "nccl":
            torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
        dist.init_process_group(
            setup.backend, timeout=timedelta(seconds=setup.process_group_timeout))
    except Exception:
        return _failure_reply(*sys.exc_info())
    return None


# Gloo's teardown of a process group is slow: it waits for its network event
# loop, which wakes every 10 ms, once per connection (measured at 4 ranks:
# 20-40 ms per rank, a third of a whole launch). A rank about to exit need not
# wait for it. It still calls destroy_process_group(), so torch.distributed is
# left clean, but keeps gloo's half of the group alive here: when the process
# exits, the operating system closes its sockets at once.
_GLOO_GROUPS_LEFT_TO_EXIT = []


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


def _interrupt_jobs_only(inbox):
    """Ctrl-C (SIGINT) stops a running job, nothing else: not the rank's own
    loop, which must go on to reply and take the next job."""

    def on_sigint(signum, frame):
        inbox.sigints_seen += 1
        if inbox.running is not None:
            raise KeyboardInterrupt

    signal.signal(signal.SIGINT, on_sigint)


def _ctrl_c_children():
    """Ctrl-C for the processes the rank started that are still in its process
    group (a ``subprocess.run`` child, say), as a terminal's Ctrl-C reaches its
    whole foreground group."""
    import psutil

    group = os.getpgrp()
    for child in psutil.Process().children(recursive=True):
        try:
            if os.getpgid(child.pid) == group:
                child.send_signal(signal.SIGINT)
        except (OSError, psutil.Error):  # it just exited
            pass


_libc = ctypes.CDLL(None)


def _flush_all_output():
    sys.stdout.flush()
    sys.stderr.flush()
    _libc.fflush(None)  # C and C++ stdio buffers too


def _stop_everything_here():
    os.killpg(os.getpgrp(), signal.SIGKILL)
