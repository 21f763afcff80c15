"""A network of one's own: the book's torchrun jobs listen on loopback only (Chapters 11 to 13b).

torchrun opens servers that anyone who can reach the machine may talk to.
Its agent hosts the rendezvous store (a ``TCPStore``), and rank 0's agent,
or with ``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1`` rank 0 itself, hosts the
store the workers meet at. A ``TCPStore`` server binds the wildcard address
(every interface of the machine), whatever host name it was given, and asks
no password: from another machine one can list the keys of a running job
and the addresses its ranks published. On a cluster that is what lets the
nodes meet; on a reader's laptop it is a door left open.

So every job that ``ddp_lab.cluster.torchrun`` starts runs in a *network
namespace* of its own (network_namespaces(7)) whose only interface is
``lo``: the wildcard address there means 127.0.0.1 of that namespace, and
nothing outside it, this machine's own programs included, can reach the
job's ports. The agents of one run (two nodes of ``run_two_nodes``, the
tasks of a Slurm step) share one namespace, so they meet as before.

Making a namespace takes ``CAP_SYS_ADMIN``: as root (CI, Colab, a
container) the process unshares its network directly; as another user it
first enters a user namespace of its own (user_namespaces(7)), where it
holds that capability, mapped to its own user id. Where neither is
allowed (a container without the capability, a kernel that forbids
unprivileged user namespaces), :func:`private_network_available` is False
and the job runs on the machine's network as a terminal's ``torchrun``
would, with a one-line notice saying so. How ``ddp_lab.cluster.torchrun``
uses it::

    network = PrivateNetwork()
    first = subprocess.Popen(cmd, preexec_fn=network.enter)   # makes the namespace
    network.hold(first.pid)                                   # the next ones join it
    second = subprocess.Popen(cmd2, preexec_fn=network.enter)
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import functools
import os
import socket
import struct
import sys

__all__ = ["PrivateNetwork", "private_network_available", "NOTICE"]

CLONE_NEWUSER = 0x10000000  # <linux/sched.h>
CLONE_NEWNET = 0x40000000
SIOCGIFFLAGS, SIOCSIFFLAGS = 0x8913, 0x8914  # <linux/sockios.h>
IFF_UP = 0x1  # <net/if.h>

NOTICE = ("ddp_lab: this system allows no private network namespace here, so this torchrun job's "
          "stores listen on every interface of the machine while it runs, as a torchrun started "
          "in a terminal does")


# Loaded here, once: the functions below run in a child between fork and exec, where a
# process that had other threads must not take the dynamic loader's lock (dlopen).
_LIBC = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None


def _libc():
    return _LIBC


def _check(result: int, what: str):
    if result != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"{what}: {os.strerror(code)}")


def _write(path: str, text: str):
    with open(path, "w") as file:
        file.write(text)


def _unshare_network() -> bool:
    """In this (single-threaded) process: a new network namespace, in a new user
    namespace when we are not root. Returns whether a user namespace was made."""
    libc = _libc()
    if os.geteuid() == 0 and libc.unshare(CLONE_NEWNET) == 0:
        return False
    uid, gid = os.geteuid(), os.getegid()
    _check(libc.unshare(CLONE_NEWUSER | CLONE_NEWNET), "unshare(CLONE_NEWUSER | CLONE_NEWNET)")
    # Map our own ids into the user namespace (and give up setgroups, which
    # an unprivileged gid_map requires): files we create keep our owner.
    _write("/proc/self/setgroups", "deny")
    _write("/proc/self/uid_map", f"{uid} {uid} 1")
    _write("/proc/self/gid_map", f"{gid} {gid} 1")
    return True


def _loopback_up():
    """A new namespace's ``lo`` starts down: bring it up (ioctl SIOCSIFFLAGS, netdevice(7))."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sH", b"lo", 0)
        flags = struct.unpack("16sH", fcntl.ioctl(sock, SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(sock, SIOCSIFFLAGS, struct.pack("16sH", b"lo", flags | IFF_UP))


@functools.lru_cache(maxsize=None)
def private_network_available() -> bool:
    """Can this process give a child a network namespace with only ``lo``? (tried once, in a fork)"""
    if not sys.platform.startswith("linux") or os.environ.get("DDP_LAB_NO_PRIVATE_NETWORK"):
        return False
    pid = os.fork()
    if pid == 0:  # the child tries, and says by its exit code
        code = 1
        try:
            _unshare_network()
            _loopback_up()
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status) == 0


class PrivateNetwork:
    """One loopback-only network namespace, shared by the processes of one run.

    The first process started with ``preexec_fn=network.enter`` makes it;
    :meth:`hold` then keeps it open by file descriptors, and every later
    process started with ``preexec_fn=network.enter`` joins it (setns(2)).
    :meth:`close` lets it go: the namespace itself ends with its last process.
    """

    def __init__(self):
        self.fds: dict[str, int] = {}  # "user", "net" -> open /proc/PID/ns/... of the first process

    def enter(self):
        """In the child, before exec: make the namespace, or join the one held."""
        if not self.fds:
            _unshare_network()
            _loopback_up()
            return
        libc = _libc()
        if "user" in self.fds:
            _check(libc.setns(self.fds["user"], CLONE_NEWUSER), "setns(user)")
        _check(libc.setns(self.fds["net"], CLONE_NEWNET), "setns(net)")

    def hold(self, pid: int):
        """Keep the namespace of process ``pid`` (the first one started) for the others to join."""
        if self.fds:
            return
        own_user = os.readlink("/proc/self/ns/user")
        if os.readlink(f"/proc/{pid}/ns/user") != own_user:
            self.fds["user"] = os.open(f"/proc/{pid}/ns/user", os.O_RDONLY | os.O_CLOEXEC)
        try:
            self.fds["net"] = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        except OSError as error:
            self.close()
            if error.errno == errno.ENOENT:  # the first process is already gone
                raise RuntimeError(f"process {pid} exited before its network could be shared") from None
            raise

    @property
    def pass_fds(self) -> tuple[int, ...]:
        return tuple(self.fds.values())

    def close(self):
        for fd in self.fds.values():
            os.close(fd)
        self.fds.clear()
