"""Jupyter kernels that listen on Unix sockets in a private folder, not on TCP ports.

Used by every kernel the tests start: nbval's (``nbval_unix_sockets.py``) and
the tests' own.

jupyter_client's default transport is TCP, and it picks a kernel's five ports
in a way that cannot be made safe: it binds each to port 0, notes the port the
system gave, closes it, writes the numbers into the connection file, and then
starts the kernel, which binds them again a second or so later. Any process
that takes an ephemeral port in between (a rank's TCPStore, one of gloo's
connections, another kernel) can take one of them, and the kernel exits at
start with ``ZMQError: Address already in use``; its manager only reports
"Kernel died before replying to kernel_info" (jupyter_client issue #154). The
test suite does exactly that, thousands of times, beside the notebooks it
executes, and lost a CI run to it. With the ``ipc`` transport the sockets are
files: in a folder of the kernel's own, no other process can take them.
"""

from __future__ import annotations

import os
import shutil
import tempfile

from jupyter_client import AsyncKernelManager, KernelManager


class UnixSockets:
    """Mixin for a jupyter_client kernel manager: the kernel's sockets are files in a folder of its own.

    The folder is made when the kernel is first started and removed when it
    is shut down (a restart keeps it: the new kernel binds the same files).
    """

    _socket_folder: str | None = None

    async def _async_pre_start_kernel(self, **kw):
        if self._socket_folder is None:
            self._socket_folder = tempfile.mkdtemp(prefix="kernel-")
            self.transport = "ipc"
            self.connection_file = os.path.join(self._socket_folder, "kernel.json")
            self.ip = os.path.join(self._socket_folder, "socket")  # the files are socket-1 ... socket-5
        return await super()._async_pre_start_kernel(**kw)

    async def _async_cleanup_resources(self, restart: bool = False) -> None:
        await super()._async_cleanup_resources(restart=restart)
        if not restart and self._socket_folder is not None:
            shutil.rmtree(self._socket_folder, ignore_errors=True)
            self._socket_folder = None


class UnixSocketKernelManager(UnixSockets, KernelManager):
    """jupyter_client's ``KernelManager`` on Unix sockets (nbval, the tests)."""


class AsyncUnixSocketKernelManager(UnixSockets, AsyncKernelManager):
    """jupyter_client's ``AsyncKernelManager`` on Unix sockets (nbclient: ``kernel_manager_class=``)."""


def start_new_kernel(kernel_name="python3", *, startup_timeout=60, manager_class=UnixSocketKernelManager,
                     manager_options=None, stderr_path=None, **start_kwargs):
    """Start a kernel and wait until it answers; its (manager, client), as jupyter_client's function of that name.

    ``manager_options`` go to the manager class, ``start_kwargs`` to its
    ``start_kernel`` (``cwd=``, for one). The kernel's standard error goes
    to a temporary file (to ``stderr_path``, kept, if given), and if the
    kernel dies before it answers, the error says what it wrote there.
    """
    manager = manager_class(kernel_name=kernel_name, **(manager_options or {}))
    with (open(stderr_path, "w+b") if stderr_path else tempfile.TemporaryFile()) as stderr:
        manager.start_kernel(stderr=stderr, **start_kwargs)
        client = manager.client()
        client.start_channels()
        try:
            client.wait_for_ready(timeout=startup_timeout)
        except RuntimeError as error:
            client.stop_channels()
            manager.shutdown_kernel(now=True)
            stderr.seek(0)
            said = stderr.read().decode(errors="replace")[-3000:]
            raise RuntimeError(f"{error}; kernel {kernel_name!r} wrote on its standard error:\n{said}") from None
    return manager, client
