"""Kernels for the build, forked from one process that has imported torch (``kernel_zygote.py``).

``execute_ahead`` starts a :class:`KernelZygote` for the notebooks it executes
and hands nbclient :meth:`KernelZygote.kernel_manager_class`: a jupyter_client
kernel manager whose provisioner asks the zygote to fork each kernel instead
of starting ``python -m ipykernel_launcher`` fresh. The kernel that comes out
is the same program, started with the same command line, folder and
environment; jupyter_client drives it as it drives any local kernel: by its
connection file, by signals to its process group, and by a
:class:`ForkedKernel` standing in for the ``Popen`` it would have had.

Only this interpreter's ``-m ipykernel_launcher`` is forked; any other
kernel command, or a zygote that is gone, is started fresh as before.
Readers' own kernels never come from here: this is the build's, to save the
CPU that a fresh kernel and its forkserver spend importing torch.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
from jupyter_client.provisioning import LocalProvisioner

from kernel_zygote import STATUS
from unix_socket_kernels import AsyncUnixSocketKernelManager

ZYGOTE_SCRIPT = Path(__file__).with_name("kernel_zygote.py")
KERNEL_MODULE = ("-m", "ipykernel_launcher")


class KernelZygote:
    """The zygote process (``kernel_zygote.py``) and the socket requests go to."""

    def __init__(self):
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        with theirs:
            self.process = subprocess.Popen([sys.executable, str(ZYGOTE_SCRIPT), str(theirs.fileno())],
                                            pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL)
        self._control = ours
        self._lock = threading.Lock()  # notebooks start their kernels from several threads

    def can_fork(self, command) -> bool:
        """True for ``python -m ipykernel_launcher ...`` with this very interpreter, while the zygote runs."""
        words = list(command)
        return (len(words) >= 3 and words[0] == sys.executable and tuple(words[1:3]) == KERNEL_MODULE
                and self.process.poll() is None)

    def fork_kernel(self, command, *, env, cwd):
        """Have the zygote fork the kernel ``command`` describes; a :class:`ForkedKernel`, or None if it could not."""
        ours, theirs = socket.socketpair()
        request = json.dumps({"argv": list(command), "env": dict(env), "cwd": os.fspath(cwd)}).encode()
        try:
            with self._lock, theirs:
                socket.send_fds(self._control, [request], [theirs.fileno()])
            pid = _read_status(ours)
        except OSError:
            pid = None
        if pid is None:
            ours.close()
            return None
        return ForkedKernel(command, pid, ours)

    def kernel_manager_class(self):
        """A kernel manager class for nbclient (``kernel_manager_class=``) whose kernels this zygote forks."""
        return type("ZygoteKernelManager", (ZygoteKernelManager,), {"zygote": self})

    def stop(self, timeout=10):
        """End the zygote: it exits when its request socket closes."""
        self._control.close()
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def _read_status(channel, timeout=None):
    """One number from the zygote on ``channel`` (a pid, then an exit code), or None if it closed."""
    channel.settimeout(timeout)
    data = b""
    while len(data) < STATUS.size:
        chunk = channel.recv(STATUS.size - len(data))
        if not chunk:
            return None
        data += chunk
    return STATUS.unpack(data)[0]


class ForkedKernel:
    """A kernel the zygote forked, driven like the ``subprocess.Popen`` jupyter_client would hold.

    ``pid``, ``returncode``, ``poll()``, ``wait(timeout)``, ``send_signal``,
    ``terminate()`` and ``kill()`` behave as Popen's; the exit status comes
    from the zygote, the kernel's parent, over ``channel``.
    """

    stdin = stdout = stderr = None

    def __init__(self, args, pid, channel):
        self.args = list(args)
        self.pid = pid
        self.returncode = None
        self._channel = channel
        self._orphan = False
        self._lock = threading.Lock()

    def poll(self):
        return self._wait_for_status(timeout=0)

    def wait(self, timeout=None):
        deadline = None if timeout is None else time.monotonic() + timeout
        while self._wait_for_status(timeout=0.1 if deadline is None else max(0, deadline - time.monotonic())) is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(self.args, timeout)
        return self.returncode

    def _wait_for_status(self, timeout):
        with self._lock:
            if self.returncode is None and not self._orphan:
                try:
                    code = _read_status(self._channel, timeout)
                except (socket.timeout, BlockingIOError):
                    return None
                except OSError:
                    code = None
                self._channel.close()
                if code is None:
                    self._orphan = True  # the zygote died; the kernel follows within a second (parent_handle)
                else:
                    self.returncode = code
            if self._orphan and self.returncode is None and not _running(self.pid):
                self.returncode = -signal.SIGKILL  # its exit status died with the zygote
            return self.returncode

    def send_signal(self, signum):
        if self.poll() is None:
            try:
                os.kill(self.pid, signum)
            except ProcessLookupError:
                pass

    def terminate(self):
        self.send_signal(signal.SIGTERM)

    def kill(self):
        self.send_signal(signal.SIGKILL)


def _running(pid):
    """True while ``pid`` runs (not a zombie): for a kernel whose zygote, its parent, is gone."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


class ZygoteProvisioner(LocalProvisioner):
    """jupyter_client's local provisioner, with the kernel forked by the zygote where it can be."""

    zygote: KernelZygote | None = None

    async def launch_kernel(self, cmd, **kwargs):
        kernel = None
        if self.zygote is not None and self.zygote.can_fork(cmd):
            cwd = kwargs.get("cwd") or os.getcwd()
            kernel = self.zygote.fork_kernel(cmd, env=kwargs.get("env", os.environ), cwd=cwd)
        if kernel is None:
            return await super().launch_kernel(cmd, **kwargs)
        self.process = kernel
        self.pid = self.pgid = kernel.pid  # the kernel leads a session, so a group, of its own
        self.cwd = cwd
        return self.connection_info


class ZygoteKernelManager(AsyncUnixSocketKernelManager):
    """nbclient's kernel manager, with :class:`ZygoteProvisioner` (see :meth:`KernelZygote.kernel_manager_class`).

    Its kernels listen on Unix sockets, not TCP ports (``unix_socket_kernels``):
    the ranks of the notebooks beside them take ephemeral ports all the time.
    """

    zygote: KernelZygote | None = None

    async def _async_pre_start_kernel(self, **kw):
        if self.provisioner is None:
            self.provisioner = ZygoteProvisioner(kernel_id=self.kernel_id, kernel_spec=self.kernel_spec, parent=self)
            self.provisioner.zygote = self.zygote
        return await super()._async_pre_start_kernel(**kw)
