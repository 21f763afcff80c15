"""A cluster of two (or more) nodes on this one Linux machine (Chapter 12).

Every rank the book started so far ran on loopback, where bytes move at the
speed of memory. A real cluster has a *link* between its machines, ten to a
hundred times slower than the links inside one. Linux can build that on one
machine:

* a **node** is a *network namespace* (``ip netns``): a network stack of its
  own, with its own interfaces, addresses, routes and ports. Processes in
  it see only ``lo`` and ``eth0``; ranks of one node talk over that node's
  loopback, as on a real machine;
* the **link** is a *veth pair* (two virtual interfaces, a cable between
  them) from each node's ``eth0`` to a port of a bridge (a switch) that
  lives in a namespace of its own;
* the link's **speed** is set with ``tc``: a token-bucket filter (``tbf``)
  on each end of each cable lets bytes out at the given rate, in both
  directions, like a network card of that speed. With ``delay_ms``, ``netem``
  adds a one-way latency too (when the kernel has ``sch_netem``).

    with Cluster(nodes=2, rate_mbit=1000) as cluster:      # 1 Gbit/s
        cluster.launch(fn, ranks_per_node=2)               # 4 ranks, 2 per node
        cluster.torchrun("train.py", nproc_per_node=2)     # one agent per node

The addresses come from 198.18.0.0/15, the range set aside for network
benchmarks (RFC 2544, RFC 6890), never from the private ranges a real
network may use. Nothing routes between the namespaces and the machine's
own interfaces: a node has no default route, and the bridge no address.

It needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN) and the ``ip`` and ``tc``
commands (Debian's ``iproute2``); :func:`missing_requirements` says what
is missing. Nothing outlives the cluster: :meth:`Cluster.stop` (the end of
the ``with`` block, an exception in it, Ctrl-C, SIGTERM or SIGHUP of this
process, or its normal exit) kills the processes inside its namespaces and
deletes the namespaces, and with them every interface and ``tc`` setting.
A cluster left behind by a process that was killed outright (SIGKILL) is
removed by the next one that starts (:func:`remove_stale`).
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import ipaddress
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass
from datetime import timedelta

from ddp_lab.validate import check_int_between, check_number_between

__all__ = ["Cluster", "ClusterError", "Node", "ADDRESS_RANGE", "PREFIX", "INTERFACE",
           "missing_requirements", "namespaces", "remove_stale", "enter_namespace"]

# RFC 2544 reserved 198.18.0.0/15 for benchmarking network devices (RFC 6890
# lists it as "Benchmarking"): no real network uses it, so our nodes can
# never shadow an address the machine needs.
ADDRESS_RANGE = ipaddress.ip_network("198.18.0.0/15")
PREFIX = "ddplab"            # every namespace we create is named ddplab-<pid>-<hex>-...
INTERFACE = "eth0"           # each node's network interface, as on a real machine
RENDEZVOUS_PORT = 29400      # torchrun's c10d convention; free, since each node has its own ports
CAP_NET_ADMIN, CAP_SYS_ADMIN = 12, 21
CLONE_NEWNET = 0x40000000
MAX_NODES = 16
MAX_RATE_MBIT = 100_000      # 100 Gbit/s: far above what a veth reaches on a CPU
MAX_DELAY_MS = 1000          # a second: beyond any network the book models
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


class ClusterError(RuntimeError):
    """The cluster cannot start here, or a command that builds it failed."""


@dataclass(frozen=True)
class Node:
    """One node: its namespace, its interface, its address on the link."""

    index: int
    namespace: str
    interface: str
    address: str


def missing_requirements() -> list[str]:
    """What this machine lacks to build a cluster (empty when nothing is missing)."""
    if not sys.platform.startswith("linux"):
        return [f"network namespaces are a Linux feature; this is {sys.platform}"]
    missing = [f"the `{tool}` command (install iproute2: apt-get install -y iproute2)"
               for tool in ("ip", "tc") if shutil.which(tool) is None]
    capabilities = _effective_capabilities()
    for bit, name in ((CAP_NET_ADMIN, "CAP_NET_ADMIN"), (CAP_SYS_ADMIN, "CAP_SYS_ADMIN")):
        if not capabilities >> bit & 1:
            missing.append(f"{name} (run as root: sudo, or a container started with "
                           "--cap-add NET_ADMIN --cap-add SYS_ADMIN)")
    return missing


def _effective_capabilities() -> int:
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("CapEff:"):
                    return int(line.split()[1], 16)
    except OSError:
        pass
    return 0


class Cluster:
    """``nodes`` network namespaces joined through a switch by links of ``rate_mbit``.

    Args:
        nodes: how many nodes (2 to 16).
        rate_mbit: the speed of each node's link, Mbit/s, each direction.
        delay_ms: one-way latency added between two nodes (needs ``sch_netem``);
            0 adds none, and the link keeps the few tens of microseconds of
            the kernel's own path.
        mtu: the link's MTU. 9000 ("jumbo frames", as on cluster networks)
            leaves more of the rate for data than 1500: each packet carries
            66 bytes of Ethernet, IP and TCP headers.
        subnet: the nodes' addresses, inside 198.18.0.0/15; node ``i``
            gets the subnet's address ``i + 1``.
    """

    def __init__(self, nodes=2, *, rate_mbit=1000, delay_ms=0.0, mtu=9000, subnet="198.18.0.0/24"):
        check_int_between("nodes", nodes, 2, MAX_NODES)
        check_number_between("rate_mbit", rate_mbit, 1, MAX_RATE_MBIT, "Mbit/s")
        check_number_between("delay_ms", delay_ms, 0, MAX_DELAY_MS, "milliseconds")
        check_int_between("mtu", mtu, 1280, 65535)
        self.subnet = _check_subnet(subnet, nodes)
        self.rate_mbit, self.delay_ms, self.mtu = float(rate_mbit), float(delay_ms), mtu
        self.name = f"{PREFIX}-{os.getpid()}-{secrets.token_hex(3)}"
        hosts = list(self.subnet.hosts())
        self.nodes = tuple(Node(i, f"{self.name}-n{i}", INTERFACE, str(hosts[i])) for i in range(nodes))
        self.switch = f"{self.name}-sw"
        self.running = False

    # -- building and removing -------------------------------------------------

    def start(self) -> "Cluster":
        """Create the namespaces, links and ``tc`` settings; on any error, remove them."""
        if self.running:
            return self
        missing = missing_requirements()
        if missing:
            raise ClusterError("cannot build a cluster of network namespaces here; missing: "
                               + "; ".join(missing))
        remove_stale()
        _live.add(self)
        _install_stop_handlers()
        with _signals_held():
            try:
                self._build()
            except BaseException:
                self.stop()
                raise
            self.running = True
        return self

    def _build(self):
        _ip("netns", "add", self.switch)
        _ip("-n", self.switch, "link", "add", "br0", "type", "bridge")
        _ip("-n", self.switch, "link", "set", "br0", "up")
        for node in self.nodes:
            port = f"p{node.index}"
            _ip("netns", "add", node.namespace)
            # Created directly inside the namespaces: no end ever appears among
            # the machine's own interfaces.
            _ip("link", "add", node.interface, "netns", node.namespace, "mtu", str(self.mtu),
                "type", "veth", "peer", "name", port, "netns", self.switch, "mtu", str(self.mtu))
            _ip("-n", self.switch, "link", "set", port, "master", "br0", "up")
            _ip("-n", node.namespace, "addr", "add", f"{node.address}/{self.subnet.prefixlen}",
                "dev", node.interface)
            _ip("-n", node.namespace, "link", "set", node.interface, "up")
            _ip("-n", node.namespace, "link", "set", "lo", "up")
        self._shape("add")

    def stop(self):
        """Kill what runs in the namespaces, delete them (their links and ``tc`` go with them)."""
        with _signals_held():
            _remove([node.namespace for node in self.nodes] + [self.switch])
        self.running = False
        _live.discard(self)
        if not _live:
            _restore_stop_handlers()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
        return False

    def __repr__(self):
        state = "running" if self.running else "stopped"
        return (f"Cluster({len(self.nodes)} nodes, {self.rate_mbit:g} Mbit/s, "
                f"delay {self.delay_ms:g} ms, {self.name}, {state})")

    # -- the link ------------------------------------------------------------------

    def set_link(self, rate_mbit=None, delay_ms=None):
        """Change the link's speed (and latency) while the cluster runs.

        Where ``tc`` refuses the new values (``ClusterError``), the link and
        ``rate_mbit``/``delay_ms`` keep the ones it had.
        """
        self._check_running()
        if rate_mbit is not None:
            check_number_between("rate_mbit", rate_mbit, 1, MAX_RATE_MBIT, "Mbit/s")
        if delay_ms is not None:
            check_number_between("delay_ms", delay_ms, 0, MAX_DELAY_MS, "milliseconds")
        before = self.rate_mbit, self.delay_ms
        self.rate_mbit = float(self.rate_mbit if rate_mbit is None else rate_mbit)
        self.delay_ms = float(self.delay_ms if delay_ms is None else delay_ms)
        try:
            self._shape("replace")
        except BaseException:
            # tc refused (a kernel without netem, say): the link keeps what it had, and so
            # does the record of it; the ends already changed are put back as they were.
            self.rate_mbit, self.delay_ms = before
            with contextlib.suppress(Exception):
                self._shape("replace")
            raise

    def _shape(self, verb):
        """One qdisc on each end of each cable: the node's eth0 and its switch port."""
        for node in self.nodes:
            for namespace, device in ((node.namespace, node.interface), (self.switch, f"p{node.index}")):
                _tc(namespace, verb, device, self._qdisc())

    def _qdisc(self) -> list[str]:
        rate = f"{self.rate_mbit:g}mbit"
        if self.delay_ms:
            # Half the delay on each end: node -> switch -> node crosses two.
            return ["netem", "delay", f"{self.delay_ms / 2:g}ms", "rate", rate, "limit", "10000"]
        # The bucket: what may leave at once, above the rate. At least two
        # packets (tbf drops a packet larger than its bucket), else 100 us of
        # traffic; a larger bucket lets the first bytes of every message
        # through at memory speed and the link looks faster than its rate.
        burst = max(2 * (self.mtu + 14), int(self.rate_mbit * 1e6 / 8 * 100e-6))
        return ["tbf", "rate", rate, "burst", str(burst), "latency", "50ms"]

    def qdiscs(self) -> dict[str, str]:
        """``tc qdisc show`` of each node's interface: what shapes its link."""
        self._check_running()
        return {node.namespace: _run(["tc", "-n", node.namespace, "qdisc", "show", "dev",
                                      node.interface]).stdout.strip() for node in self.nodes}

    # -- running things in the nodes -----------------------------------------------

    def exec_argv(self, node, argv) -> list[str]:
        """``argv`` as a command that runs inside node ``node`` (an index)."""
        self._check_running()
        check_int_between("node", node, 0, len(self.nodes) - 1)
        return ["ip", "netns", "exec", self.nodes[node].namespace, *map(str, argv)]

    def run(self, node, argv, timeout=30.0) -> subprocess.CompletedProcess:
        """Run a command in node ``node`` and wait for it (stdout and stderr as text)."""
        return _run(self.exec_argv(node, argv), timeout=timeout, check=False)

    def launch(self, fn, ranks_per_node, *, args=(), kwargs=None, interface=INTERFACE,
               timeout=60.0, threads=None):
        """``ddp_lab.launch`` with each rank placed in its node: results in rank order.

        Ranks ``0 .. ranks_per_node-1`` go to node 0, and so on. Each rank
        connects to the launch's rendezvous store first (it listens on the
        machine's loopback, outside the nodes, like a cluster's management
        network), then moves into its node's namespace and joins the
        default gloo group there: gloo's connections, the data, run inside
        the cluster, over the node's loopback or across the link.
        ``interface`` is what the ranks get as ``GLOO_SOCKET_IFNAME``; None
        leaves it unset, so gloo picks an address from the host name.
        """
        import ddp_lab

        self._check_running()
        check_int_between("ranks_per_node", ranks_per_node, 1, 64)
        if interface is not None and not isinstance(interface, str):
            raise TypeError(f"interface must be a str or None, got {interface!r}")
        placement = (tuple(node.namespace for node in self.nodes), interface, float(timeout))
        return ddp_lab.launch(run_in_node, ranks_per_node * len(self.nodes),
                              args=(placement, fn, tuple(args), dict(kwargs or {})),
                              nodes=len(self.nodes), backend="gloo", init_process_group=False,
                              timeout=timeout, threads=threads)

    def torchrun(self, script, args=(), *, nproc_per_node=2, interface=INTERFACE, cwd=None,
                 env=None, timeout=120.0):
        """One ``torchrun`` agent per node, meeting at node 0's address: their runs, node 0 first.

        Every agent runs ``--nnodes N --rdzv-backend c10d`` with the
        endpoint ``<node 0's address>:29400`` and announces its own node's
        address (``--local-addr``). torchrun decides that the agent whose
        address is the endpoint's hosts the store by matching it against
        the machine's host name; our nodes share the machine's host name, so
        node 0 is told so (``--rdzv-conf is_host=1``).
        """
        from .torchrun import run_together, torchrun_command

        self._check_running()
        endpoint = f"{self.nodes[0].address}:{RENDEZVOUS_PORT}"
        commands, envs = [], []
        for node in self.nodes:
            agent = torchrun_command(script, args, nproc_per_node=nproc_per_node,
                                     nnodes=len(self.nodes), rdzv_endpoint=endpoint,
                                     rdzv_id=self.name, local_addr=node.address,
                                     extra=("--rdzv-conf", f"is_host={int(node.index == 0)}"))
            commands.append(self.exec_argv(node.index, agent))
            envs.append({} if interface is None else {"GLOO_SOCKET_IFNAME": interface})
        if interface is None:
            env = {**(env or {}), "GLOO_SOCKET_IFNAME": ""}
        # The nodes' namespaces are the network: no private one around them.
        return run_together(commands, env=env, envs=envs, cwd=cwd, timeout=timeout, private_network=False)

    def _check_running(self):
        if not self.running:
            raise ClusterError(f"{self!r} is not running: use it inside `with Cluster(...) as cluster:` "
                               "or call start() first")


# -- inside a rank ---------------------------------------------------------------


def run_in_node(placement, fn, args, kwargs):
    """Rank side of :meth:`Cluster.launch`: join the group from inside the node, run ``fn``.

    A ``fn`` that initialises the default group itself is told that this
    one exists, and how to use it (``ddp_lab.launcher.worker.group_made_by``),
    rather than getting torch's bare "initialize the default process group twice".
    """
    import torch.distributed as dist

    from ddp_lab.launcher.worker import group_made_by

    namespace_of_node, interface, timeout = placement
    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    limit = timedelta(seconds=timeout)
    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world_size,
                          is_master=False, timeout=limit)
    enter_namespace(namespace_of_node[int(os.environ["GROUP_RANK"])])
    if interface is None:
        os.environ.pop("GLOO_SOCKET_IFNAME", None)
    else:
        os.environ["GLOO_SOCKET_IFNAME"] = interface
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world_size, timeout=limit)
    group_made_by("Cluster.launch", "Cluster.launch always does: each rank joins from inside its "
                  "node, where its connections cross the cluster's link.")
    try:
        return fn(*args, **kwargs)
    finally:
        dist.destroy_process_group()


def enter_namespace(name):
    """Move the calling *thread* into network namespace ``name`` (``setns(2)``).

    Sockets it opens from now on, and threads it starts, belong to that
    namespace; sockets already open stay where they were. That is why a
    rank connects to its rendezvous store before it moves.
    """
    fd = os.open(f"/run/netns/{name}", os.O_RDONLY)
    try:
        if hasattr(os, "setns"):  # Python 3.12+
            os.setns(fd, CLONE_NEWNET)
        else:
            libc = ctypes.CDLL(None, use_errno=True)
            if libc.setns(fd, CLONE_NEWNET) != 0:
                errno = ctypes.get_errno()
                raise OSError(errno, f"setns into network namespace {name}: {os.strerror(errno)}")
    finally:
        os.close(fd)


# -- namespaces on this machine, and removing them -------------------------------------

_NAME = re.compile(rf"^{PREFIX}-(\d+)-[0-9a-f]+-(n\d+|sw)$")


def namespaces() -> list[str]:
    """The names of every cluster namespace on this machine (``ip netns list``), ours or not."""
    if shutil.which("ip") is None:
        return []
    listed = _run(["ip", "netns", "list"], check=False).stdout.split("\n")
    return sorted(name for name in (line.split(" ")[0] for line in listed) if _NAME.match(name))


def remove_stale() -> list[str]:
    """Remove the namespaces of clusters whose process is gone (killed with SIGKILL, say)."""
    stale = [name for name in namespaces() if not _alive(int(_NAME.match(name).group(1)))]
    _remove(stale)
    return stale


def _alive(pid) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


def _remove(names):
    """Kill every process inside ``names``, then delete the namespaces; raise if any stays."""
    present = set(namespaces())
    for name in names:
        if name not in present:
            continue
        pids = _run(["ip", "netns", "pids", name], check=False).stdout.split()
        for pid in map(int, pids):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)  # started inside our namespace, so by us
        _run(["ip", "netns", "delete", name], check=False)
    left = sorted(set(names) & set(namespaces()))
    if left:
        raise ClusterError(f"could not delete the network namespaces {left}: "
                           f"delete them with `ip netns delete NAME`")


# -- signals: nothing outlives this process ----------------------------------------------

_live: set = set()
_previous_handlers: dict = {}


def _stop_all():
    for cluster in list(_live):
        with contextlib.suppress(Exception):
            cluster.stop()


def _on_stop_signal(signum, frame):
    """SIGTERM or SIGHUP: remove every cluster, then let the signal do what it did before."""
    previous = _previous_handlers.get(signum, signal.SIG_DFL)
    _stop_all()
    _restore_stop_handlers()
    if callable(previous):
        previous(signum, frame)
    elif previous != signal.SIG_IGN:
        signal.raise_signal(signum)  # the default action: end the process


def _install_stop_handlers():
    if threading.current_thread() is not threading.main_thread() or _previous_handlers:
        return  # only the main thread may set handlers; atexit still holds
    for signum in STOP_SIGNALS:
        previous = signal.getsignal(signum)
        if previous is None:  # set outside Python: leave it alone
            continue
        _previous_handlers[signum] = previous
        signal.signal(signum, _on_stop_signal)


def _restore_stop_handlers():
    if threading.current_thread() is not threading.main_thread():
        return
    for signum, previous in list(_previous_handlers.items()):
        if signal.getsignal(signum) is _on_stop_signal:
            signal.signal(signum, previous)
        del _previous_handlers[signum]


@contextlib.contextmanager
def _signals_held():
    """Hold Ctrl-C, SIGTERM and SIGHUP until the block ends: a half-built or
    half-removed cluster is never left behind; the signal acts right after."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held, previous = [], {}
    for signum in (signal.SIGINT, *STOP_SIGNALS):
        handler = signal.getsignal(signum)
        if handler is not None:
            previous[signum] = handler
            signal.signal(signum, lambda s, f: held.append(s))
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        for signum in dict.fromkeys(held):
            signal.raise_signal(signum)


atexit.register(_stop_all)


# -- commands and checks -------------------------------------------------------------


def _run(argv, timeout=30.0, check=True) -> subprocess.CompletedProcess:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    if check and done.returncode:
        raise ClusterError(f"`{' '.join(argv)}` failed: {done.stderr.strip()}")
    return done


def _ip(*args):
    _run(["ip", *args])


def _tc(namespace, verb, device, qdisc):
    done = _run(["tc", "-n", namespace, "qdisc", verb, "dev", device, "root", *qdisc], check=False)
    if done.returncode:
        hint = ""
        if "unknown" in done.stderr:
            hint = (f" This kernel has no `{qdisc[0]}` queueing discipline (module sch_{qdisc[0]}, "
                    f"CONFIG_NET_SCH_{qdisc[0].upper()})"
                    + ("; leave delay_ms=0 to shape the rate only with tbf." if qdisc[0] == "netem" else "."))
        raise ClusterError(f"`tc qdisc {verb} dev {device} root {' '.join(qdisc)}` failed in "
                           f"{namespace}: {done.stderr.strip()}.{hint}")


def _check_subnet(subnet, nodes):
    try:
        network = ipaddress.ip_network(subnet)
    except (ValueError, TypeError) as error:
        raise ValueError(f"subnet must be an IPv4 network such as '198.18.0.0/24', got {subnet!r} "
                         f"({error})") from None
    if network.version != 4 or not network.subnet_of(ADDRESS_RANGE):
        raise ValueError(f"subnet {subnet!r} is outside {ADDRESS_RANGE}, the range set aside for "
                         "benchmarks (RFC 2544): use e.g. '198.18.0.0/24', never a range a real "
                         "network may use (10.x, 172.16-31.x, 192.168.x)")
    if network.num_addresses - 2 < nodes:
        raise ValueError(f"subnet {subnet!r} has {max(network.num_addresses - 2, 0)} host addresses "
                         f"for {nodes} nodes: use a larger one (a /24 holds 254)")
    return network
