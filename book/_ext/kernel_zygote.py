"""The build's kernel zygote: one process that imports torch once and forks every kernel.

Run as a script by ``zygote_kernels.KernelZygote``; not imported by anything.

Each notebook the build executes gets a kernel, and a fresh kernel is a fresh
Python: it imports ipykernel, the notebook's first cells import torch, and its
first launch starts a forkserver, another fresh Python that imports torch and
``torch._dynamo`` again (``ddp_lab.launcher.forkserver``). That is three to
five seconds of CPU per notebook before any of its own work, most of a
minute for the book on a two-core machine.

The zygote pays for those imports once. It imports what every kernel and every
forkserver imports (``ddp_lab.launcher.forkserver_preload``, then ipykernel's
kernel application, then matplotlib's pyplot, which most chapters draw with),
starts no thread, and waits. For each kernel the build
asks for, it forks; the child becomes the kernel exactly as
``python -m ipykernel_launcher -f CONNECTION_FILE ...`` would, in the
notebook's folder and environment, in a session of its own (as jupyter_client
starts a kernel). Before the kernel starts its threads, the child forks its
own forkserver too (``start_forkserver_by_fork``), so the ranks of its
launches come from a child of the kernel, as they always do.

Protocol, over the socket pair the build passes as file descriptor
``argv[1]`` (``SOCK_SEQPACKET``: one message per request):

- the build sends a request, JSON ``{"argv": [...], "env": {...}, "cwd": "..."}``,
  with one end of a fresh socket pair attached (``SCM_RIGHTS``);
- the zygote forks, writes the child's pid on that socket as 4 bytes, and,
  when the child has exited, its exit status as ``subprocess.Popen`` reports
  it (negative: the signal that ended it), then closes the socket;
- the build closing its end of the pair ends the zygote.

What a forked kernel inherits from the zygote, and a fresh kernel would not
have: modules already imported (variables torch reads while it is imported
were read with the build's environment, which a kernel's environment
extends), and ``gc.freeze()``'s permanent generation of torch's objects.
"""

from __future__ import annotations

import importlib
import json
import os
import select
import signal
import socket
import struct
import sys
import threading

STATUS = struct.Struct("i")


# What every kernel and its forkserver would import on their own: torch,
# torch._dynamo and the rank's code (then gc.freeze(), see that module), and
# ipykernel's kernel. Then what most chapters import (ddp_lab.draw,
# ddp_lab.widgets): matplotlib's pyplot, half a second of CPU per kernel.
PRELOAD = ("ddp_lab.launcher.forkserver_preload", "ipykernel.kernelapp", "ipykernel.ipkernel")
PRELOAD_WITH_KERNEL_BACKEND = ("matplotlib.pyplot",)
# matplotlib reads one variable a kernel sets when it is imported: MPLBACKEND,
# which ipykernel gives this value unless it is set (IPKernelApp.init_gui_pylab).
# It is imported with that value here, and become_kernel applies the kernel's own.
# (It also reads MPLCONFIGDIR, for its settings and font cache: the build's
# kernels have the build's.)
INLINE_BACKEND = "module://matplotlib_inline.backend_inline"


def preload():
    """Import, once, what every kernel and its forkserver would import on their own."""
    for module in PRELOAD:
        importlib.import_module(module)
    if not os.environ.get("MPLBACKEND"):
        os.environ["MPLBACKEND"] = INLINE_BACKEND  # as the kernel will have it
    for module in PRELOAD_WITH_KERNEL_BACKEND:
        importlib.import_module(module)


def apply_kernel_backend():
    """In the forked kernel, with its environment: the backend matplotlib's import would have set.

    matplotlib's import runs ``rcParams['backend'] = os.environ.get('MPLBACKEND')``
    when the variable is set; ipykernel sets it when it is not.
    """
    import matplotlib

    backend = os.environ.get("MPLBACKEND") or INLINE_BACKEND
    if backend != dict.__getitem__(matplotlib.rcParams, "backend"):  # the raw value: reading resolves it
        matplotlib.rcParams["backend"] = backend


def serve(control):
    """Fork a kernel for each request on ``control``; return the request in the child, never in the zygote."""
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # a handler, so that SIGCHLD writes to the wakeup pipe
    children = {}  # pid -> the socket its exit status goes to
    while True:
        ready, _, _ = select.select([control, wake_read], [], [])
        if wake_read in ready:
            os.read(wake_read, 4096)
            _report_exits(children)
        if control not in ready:
            continue
        message, fds, _, _ = socket.recv_fds(control, 1 << 20, 1)
        if not message:
            raise SystemExit(0)  # the build is done
        status = socket.socket(fileno=fds[0])
        if threading.active_count() != 1:
            status.close()  # the build sees the socket close with no pid: the kernel is started fresh
            continue
        pid = os.fork()
        if pid == 0:
            for fd in (control.fileno(), wake_read, wake_write, status.fileno(),
                       *(s.fileno() for s in children.values())):
                os.close(fd)
            return json.loads(message)
        status.sendall(STATUS.pack(pid))
        children[pid] = status


def _report_exits(children):
    while children:
        pid, status = os.waitpid(-1, os.WNOHANG)
        if pid == 0:
            return
        channel = children.pop(pid, None)
        if channel is not None:
            try:
                channel.sendall(STATUS.pack(os.waitstatus_to_exitcode(status)))
            except OSError:
                pass  # the build stopped listening
            channel.close()


def become_kernel(request):
    """In the forked child: become ``python -m ipykernel_launcher ...`` as ``request`` describes."""
    os.setsid()  # as jupyter_client's start_new_session=True: the kernel's own process group
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)  # jupyter_client gives a kernel a stdin it closed at once
    os.close(null)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    os.environ["JPY_PARENT_PID"] = str(os.getppid())  # the kernel exits when the zygote does
    apply_kernel_backend()
    del sys.path[0]  # this script's folder; ipykernel_launcher removes the kernel's own as well
    import ipykernel_launcher

    sys.argv = [ipykernel_launcher.__file__, *request["argv"][3:]]

    from ddp_lab.launcher import forkserver, shutdown

    forkserver.start_forkserver_by_fork()  # before the kernel has threads
    from ipykernel import kernelapp

    # ipykernel reads JPY_PARENT_PID when it is imported, which was in the zygote: tell it now.
    app = kernelapp.IPKernelApp.instance(parent_handle=int(os.environ["JPY_PARENT_PID"]))
    app.initialize()
    shutdown.stop_helpers_with_the_kernel()  # the forkserver is stopped with the kernel
    app.start()


def main():
    control = socket.socket(fileno=int(sys.argv[1]))
    preload()
    request = serve(control)  # returns in a forked child only
    become_kernel(request)


if __name__ == "__main__":
    main()
