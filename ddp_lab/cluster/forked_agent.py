"""A torchrun agent forked from the forkserver instead of started fresh (Chapters 2, 11, 12, Lab 5).

``torchrun`` is a Python program. Started fresh, its agent first imports
torch, which costs 1.5 to 2 seconds of CPU on the book's 2-core test machine,
and only then starts its workers. The book runs about 60 agents between its
build and its tests, so those imports alone add up to minutes of CPU.

Chapter 3 already pays for a process that has imported torch: the forkserver
every rank of ``launch`` is forked from (``ddp_lab.launcher.forkserver``).
:class:`ForkedAgent` forks the agent from it too. The child then does what the
``torchrun`` command does: it calls ``torch.distributed.run.main``, the entry
point of the ``torchrun`` console script (torch's ``entry_points.txt``), with
the command's arguments, in a session of its own, in the run's working
directory and environment, with its stdout and stderr on pipes.

What the agent does from there is unchanged, and so is everything a chapter
shows: torchrun parses the same command line, hosts the same rendezvous,
starts each worker as a fresh Python with ``subprocess`` (the only way it
starts a script), watches and restarts them. Two things differ from a fresh
interpreter, both harmless for the book's runs:

- variables torch reads while it is imported (``TORCH_LOGS``, say) were read
  once, by the forkserver; variables read later (``LOGLEVEL``, read when
  torchrun's own modules are imported, ``OMP_NUM_THREADS``, the rendezvous
  settings) are the run's. The workers, fresh Pythons, read everything anew;
- an error the agent does not catch is printed and exits with code 1, as
  Python prints it, and Ctrl-C ends it by SIGINT, as Python does; ``atexit``
  functions do not run (the child leaves by ``os._exit``, as every
  multiprocessing child does).

:class:`ForkedAgent` offers the part of ``subprocess.Popen``'s interface that
``ddp_lab.cluster.torchrun.run_together`` uses, so a forked agent and a
started command are watched, drained and stopped by the same code.
"""

from __future__ import annotations

import locale
import multiprocessing
import os
import selectors
import signal
import subprocess
import sys
import threading
import time
from multiprocessing.connection import wait as wait_for_any

__all__ = ["ForkedAgent", "can_fork_agent", "start_command", "TORCHRUN_MODULE"]

TORCHRUN_MODULE = ("-m", "torch.distributed.run")


def can_fork_agent(command) -> bool:
    """True for ``python -m torch.distributed.run ...`` with this very interpreter, where forking works.

    Anything else (a command run in a network namespace with ``ip netns exec``,
    another Python, Windows, which has no forkserver) is started as a fresh process.
    """
    words = list(command)
    return (len(words) >= 3 and words[0] == sys.executable and tuple(words[1:3]) == TORCHRUN_MODULE
            and "forkserver" in multiprocessing.get_all_start_methods())


def start_command(command, *, env, cwd=None):
    """Start one command of a run: a :class:`ForkedAgent` for a torchrun agent, else a ``Popen``."""
    if can_fork_agent(command):
        return ForkedAgent(command, env=env, cwd=cwd)
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, cwd=cwd, start_new_session=True)


class ForkedAgent:
    """A torchrun agent forked from the forkserver, driven like a ``subprocess.Popen``.

    ``args``, ``pid``, ``returncode``, ``poll()``, ``wait(timeout)``,
    ``terminate()`` and ``communicate()`` behave as Popen's do for a command
    started with ``stdout=PIPE, stderr=PIPE, text=True, start_new_session=True``.
    """

    def __init__(self, command, *, env, cwd=None):
        from ddp_lab.launcher.forkserver import forkserver_context

        self.args = list(command)
        self.returncode = None
        self._lock = threading.Lock()  # multiprocessing's poll() is not safe from two threads
        context = forkserver_context()
        (out_read, out_write), (err_read, err_write) = (context.Pipe(duplex=False) for _ in range(2))
        self._process = context.Process(
            target=agent_main, args=(self.args[3:], dict(env), os.fspath(cwd or os.getcwd()), out_write, err_write),
            name="ddp_lab-torchrun-agent")
        try:
            self._process.start()
        except BaseException:
            out_read.close()
            err_read.close()
            raise
        finally:
            out_write.close()  # the agent and its workers hold the write ends now
            err_write.close()
        self._outputs = (out_read, err_read)
        self.pid = self._process.pid

    def poll(self):
        """The exit code if the agent has exited (negative: the signal that ended it), else None."""
        with self._lock:
            if self.returncode is None:
                self.returncode = self._process.exitcode
            return self.returncode

    def wait(self, timeout=None):
        """Wait for the agent to exit; ``subprocess.TimeoutExpired`` past ``timeout`` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            remaining = 0.1 if deadline is None else min(0.1, deadline - time.monotonic())
            if remaining <= 0:
                raise subprocess.TimeoutExpired(self.args, timeout)
            wait_for_any([self._process.sentinel], remaining)  # wakes when it exits; reads nothing
        return self.returncode

    def terminate(self):
        """SIGTERM to the agent, as ``Popen.terminate``: torchrun then stops its workers itself."""
        if self.poll() is None:
            try:
                os.kill(self.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass

    def communicate(self):
        """Read stdout and stderr to their end, wait for the agent, return both as text.

        The output ends when every process holding the pipes has closed them:
        the agent and the workers it started.
        """
        chunks = {reader.fileno(): [] for reader in self._outputs}
        with selectors.DefaultSelector() as selector:
            for reader in self._outputs:
                selector.register(reader.fileno(), selectors.EVENT_READ)
            while selector.get_map():
                for key, _ in selector.select():
                    data = os.read(key.fd, 65536)
                    if data:
                        chunks[key.fd].append(data)
                    else:
                        selector.unregister(key.fd)
        texts = tuple(_text(b"".join(chunks[reader.fileno()])) for reader in self._outputs)
        for reader in self._outputs:
            reader.close()
        self.wait()
        return texts


def _text(data: bytes) -> str:
    """Bytes as ``Popen(text=True)`` decodes them: the locale's encoding, universal newlines."""
    text = data.decode(locale.getpreferredencoding(False), errors="replace")
    return text.replace("\r\n", "\n").replace("\r", "\n")


def agent_main(arguments, env, cwd, stdout, stderr):
    """The forked child: become ``python -m torch.distributed.run *arguments``.

    Runs in the forkserver's child, which has torch imported already.
    """
    os.setsid()  # a session of its own, as start_new_session=True gives a started command
    for connection, fd in ((stdout, 1), (stderr, 2)):
        os.dup2(connection.fileno(), fd)
        connection.close()
    for stream in (sys.stdout, sys.stderr):
        stream.reconfigure(write_through=True)  # what PYTHONUNBUFFERED=1 gives a fresh agent
    os.chdir(cwd)
    os.environ.clear()  # the run's environment, not the forkserver's
    os.environ.update(env)

    from torch.distributed import run

    sys.argv = [run.__file__, *arguments]  # what `python -m torch.distributed.run` sees
    try:
        run.main()
    except SystemExit:
        raise  # multiprocessing turns its code into the exit code, as Python would
    except KeyboardInterrupt:
        _die_by(signal.SIGINT)  # Python's own exit on an uncaught Ctrl-C
    except BaseException:
        kind, error, trace = sys.exc_info()
        error.with_traceback(trace.tb_next)  # from torchrun's frames on, without this function's
        sys.excepthook(kind, error, trace.tb_next)  # Python's report of an uncaught error
        sys.exit(1)


def _die_by(signum):
    sys.stdout.flush()
    sys.stderr.flush()
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)
