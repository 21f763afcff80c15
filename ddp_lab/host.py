"""This machine, as a launch sees it: CPU cores, GPUs, the loopback interface.

Probes, each one call to the operating system (or to torch, for the GPUs,
imported only then). The launcher (``ddp_lab.launcher.config``) shares the
cores between the ranks and picks a backend with them (Chapter 3); the
torchrun helpers keep gloo on loopback with ``loopback_interface`` and give
each rendezvous a ``free_port`` (Chapters 2 and 11); the benchmarks say how
many cores they ran on (Chapter 10), and the stored runs and the roofline
which CPU (``cpu_model``, Chapters 12 and 14b). ``uses_nccl`` reads a process group's
backend string, here because code inside ranks needs it too and must not
import the launcher. ``process_running`` tells a running process from one that
has ended (the launcher about its ranks and their forkserver, Chapter 3; the
stack reader about a rank it watches, Chapter 13b).
"""

from __future__ import annotations

import os
import platform
import socket


def cuda_device_count():
    """How many GPUs there are, asked without initialising CUDA here.

    ``torch.cuda.device_count()`` counts through NVML when it can, and creates
    no CUDA context in the notebook; the ranks create their own.
    """
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def available_cores():
    """The CPU cores this process may run on (its affinity mask, where the OS has one)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def cpu_model() -> str:
    """The CPU's model name ("AMD EPYC 7B13"): Linux's /proc/cpuinfo, else what ``platform`` says."""
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            return next(line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()


def free_port() -> int:
    """A TCP port that is free on loopback now (the OS picks it: bind to port 0).

    Free *now*: another process may take it before the caller binds it, so
    use it at once (a torchrun rendezvous, ``MASTER_PORT`` for ``mp.spawn``).
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def loopback_interface():
    """The name of the loopback network interface ('lo' on Linux, 'lo0' on macOS).

    gloo binds its sockets to the interface named by GLOO_SOCKET_IFNAME; a
    local launch binds to loopback only, so nothing listens on the network.
    """
    names = [name for _, name in socket.if_nameindex()]
    for candidate in ("lo", "lo0"):
        if candidate in names:
            return candidate
    return None


def uses_nccl(backend) -> bool:
    """Does a process group of this backend string reduce CUDA tensors with nccl?
    (``"nccl"`` or ``"cpu:gloo,cuda:nccl"``: ``dist.get_backend()`` returns the whole string.)

    >>> uses_nccl("cpu:gloo,cuda:nccl"), uses_nccl("gloo")
    (True, False)
    """
    return any(part in ("nccl", "cuda:nccl") for part in str(backend).split(","))


def process_running(pid: int) -> bool:
    """Whether ``pid`` is a running process: not gone, and not a zombie (a
    process that has ended and waits for its parent to collect it)."""
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False
