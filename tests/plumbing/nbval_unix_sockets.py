"""nbval, with each notebook's kernel listening on Unix sockets instead of TCP ports.

A pytest plugin the root ``conftest.py`` loads. nbval executes every notebook
under ``book/`` and ``labs/`` and compares each cell's fresh output with the
committed one; this plugin changes two things. How its kernel is started:
``unix_socket_kernels.start_new_kernel``, so no other test can take the
kernel's ports before it binds them (jupyter_client issue #154; the module
says more), and a kernel that dies at start says what it wrote on stderr.
And how it is stopped: asked, not killed (``KernelOnUnixSockets.stop``).

It relies on nbval's classes ``IPyNbFile`` (its ``setup``) and
``RunningKernel`` (listed in ``ddp_lab/private_apis.py``).
"""

from __future__ import annotations

import pytest
from nbval.cover import setup_coverage
from nbval.kernel import CURRENT_ENV_KERNEL_NAME, NbvalKernelspecManager, RunningKernel
from nbval.plugin import IPyNbFile

from plumbing import unix_socket_kernels


@pytest.hookimpl(wrapper=True)
def pytest_collect_file(file_path, parent):
    collected = yield
    return [NotebookOnUnixSockets.from_parent(parent, path=file_path) if type(node) is IPyNbFile else node
            for node in collected]


class NotebookOnUnixSockets(IPyNbFile):
    """nbval's notebook, whose kernel listens on Unix sockets."""

    def setup(self):
        """nbval's own setup, but the kernel comes from ``unix_socket_kernels``."""
        self.kernel = KernelOnUnixSockets(self.kernel_name(), cwd=str(self.path.parent),
                                          startup_timeout=self.config.option.nbval_kernel_startup_timeout)
        if getattr(self.config.option, "cov_source", None):
            setup_coverage(self.config, self.kernel, self.path)
        self.setup_sanitize_files()

    def kernel_name(self):
        """The kernel nbval chooses: its command-line options', or else the notebook's own."""
        option = self.config.option
        if option.nbval_current_env:
            return CURRENT_ENV_KERNEL_NAME
        return option.nbval_kernel_name or self.nb.metadata.get("kernelspec", {}).get("name", "python")


class KernelOnUnixSockets(RunningKernel):
    """nbval's running kernel, started by ``unix_socket_kernels.start_new_kernel``."""

    def __init__(self, kernel_name, cwd=None, startup_timeout=60):
        self.km, self.kc = unix_socket_kernels.start_new_kernel(
            kernel_name, startup_timeout=startup_timeout, cwd=cwd,
            manager_options={"kernel_spec_manager": NbvalKernelspecManager()})
        self._ensure_iopub_up()

    def stop(self):
        """Ask the kernel to shut down, as JupyterLab does, where nbval kills it outright.

        A killed kernel leaves behind what only its own exit removes: the
        ``pymp-*`` folder multiprocessing made in the temporary folder for the
        socket of the chapter's forkserver (one per notebook, every run). Asked,
        the kernel exits at once (``ddp_lab.launcher.shutdown``; about 0.1 s
        more per notebook than killing it); one that has not exited within
        jupyter_client's ``shutdown_wait_time`` (5 s) is stopped with signals.
        """
        self.kc.stop_channels()
        self.km.shutdown_kernel(now=False)
        del self.km
