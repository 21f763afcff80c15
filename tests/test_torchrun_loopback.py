"""Nothing a torchrun job of the book opens is reachable from another machine (issue 44, item 1).

torchrun's stores bind the wildcard address (every interface). A job that
``ddp_lab.cluster.torchrun`` starts runs in a network namespace whose only
interface is ``lo`` (``ddp_lab.cluster.private_network``). The test runs a
real job, lists every listening socket its processes hold (read from
``/proc/PID/net/tcp*``, the job's own view of its network), and connects to
each port through this machine's non-loopback address: every attempt must be
refused. The same job on the machine's own network (``network=False``) is
the control: there its rendezvous store answers on that address, which
shows the probe can see an open door when there is one.

Connections go only to this machine's own address (never to another host).
"""

import socket
import subprocess
import sys
import threading
from pathlib import Path

import psutil
import pytest

from ddp_lab.cluster import private_network
from ddp_lab.cluster.torchrun import (
    RUN_TAG,
    loopback_environment,
    processes_tagged,
    run_torchrun,
    start_command,
    stop_agent,
    torchrun_command,
)

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="network namespaces are Linux's")

JOB = '''
import os, sys, time
import torch.distributed as dist
dist.init_process_group("gloo")
dist.barrier()
print(f"[rank {dist.get_rank()}] ready", flush=True)
while not os.path.exists(sys.argv[1]):
    time.sleep(0.05)
dist.barrier()
dist.destroy_process_group()
'''
LISTEN = "0A"  # TCP_LISTEN in /proc/net/tcp's st column


def outside_address():
    """This machine's first IPv4 address that is not loopback (None if it has none)."""
    for name, addresses in psutil.net_if_addrs().items():
        for address in addresses:
            if address.family == socket.AF_INET and not address.address.startswith("127."):
                return address.address
    return None


def socket_inodes(pid):
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = fd.readlink().as_posix()
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    return inodes


def listening_ports(pids):
    """{port: (address, pid)} of every TCP socket the processes listen on, as their network sees it."""
    ports = {}
    for pid in pids:
        try:
            own = socket_inodes(pid)
            tables = [Path(f"/proc/{pid}/net/{name}").read_text() for name in ("tcp", "tcp6")]
        except OSError:  # the process just exited
            continue
        for table in tables:
            for line in table.splitlines()[1:]:
                fields = line.split()
                local, state, inode = fields[1], fields[3], fields[9]
                if state == LISTEN and inode in own:
                    address, port = local.rsplit(":", 1)
                    ports[int(port, 16)] = (address, pid)
    return ports


def readable(address: str) -> str:
    """/proc/net/tcp's hex address as text: 0100007F -> 127.0.0.1, all zeros -> the wildcard."""
    raw = bytes.fromhex(address)
    if len(raw) == 4:
        return socket.inet_ntop(socket.AF_INET, raw[::-1])
    words = b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4))  # four host-order 32-bit words
    return socket.inet_ntop(socket.AF_INET6, words)


def refused(address, port) -> bool:
    try:
        with socket.create_connection((address, port), timeout=5):
            return False
    except ConnectionRefusedError:
        return True


def run_job(tmp_path, network):
    """Start the job (2 ranks), wait until both are ready; return (agent, tag, stop file, lines)."""
    script = tmp_path / "job.py"
    script.write_text(JOB)
    stop = tmp_path / "stop"
    tag = f"loopback-test-{network is not False}"
    agent = start_command(torchrun_command(script, [stop], nproc_per_node=2),
                          env={**loopback_environment(), RUN_TAG: tag}, network=network)
    lines, ready = [], threading.Event()

    def read():
        for line in agent.stdout:
            lines.append(line)
            if "".join(lines).count("ready") == 2:  # two ranks' lines may share one line of the pipe
                ready.set()

    threading.Thread(target=read, daemon=True).start()
    if not ready.wait(120):
        stop_agent(agent, tag)
        pytest.fail(f"the job did not start: {lines} {agent.stderr.read() if agent.poll() is not None else ''}")
    return agent, tag, stop


def listeners_of(tag):
    return listening_ports([p.pid for p in processes_tagged(tag)])


def finish(agent, tag, stop):
    stop.write_text("")
    try:
        agent.wait(60)
    except subprocess.TimeoutExpired:
        pass
    stop_agent(agent, tag)
    return agent.returncode


@pytest.fixture(scope="module")
def address():
    found = outside_address()
    if found is None:
        pytest.skip("this machine has no non-loopback IPv4 address to probe from")
    return found


needs_namespaces = pytest.mark.skipif(not private_network.private_network_available(),
                                      reason="this system allows no network namespace to this user")


@needs_namespaces
def test_every_listener_of_a_running_job_is_refused_through_the_machines_address(tmp_path, address, capsys):
    agent, tag, stop = run_job(tmp_path, network=None)
    try:
        ports = listeners_of(tag)
        answers = {port: refused(address, port) for port in ports}
        loopback = {port: refused("127.0.0.1", port) for port in ports}
    finally:
        code = finish(agent, tag, stop)
    with capsys.disabled():  # the figures the note asks for
        print(f"\n  {len(ports)} listeners of the job (agent's store, rank 0's store, gloo's pairs): "
              + ", ".join(f"{readable(a)} port {p} (pid {pid})" for p, (a, pid) in sorted(ports.items())))
        print(f"  through {address}: " + ", ".join(f"{p} {'refused' if r else 'ACCEPTED'}"
                                                 for p, r in sorted(answers.items())))
    # The agent's rendezvous store and rank 0's store (TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1) at least.
    assert len(ports) >= 2, ports
    assert all(answers.values()), f"reachable through {address}: {[p for p, r in answers.items() if not r]}"
    assert all(loopback.values()), "reachable through this machine's own loopback"
    assert code == 0


def test_the_probe_finds_the_open_store_of_a_job_on_the_machines_network(tmp_path, address):
    """The control: without the private network, torchrun's stores answer on every interface."""
    agent, tag, stop = run_job(tmp_path, network=False)
    try:
        ports = listeners_of(tag)
        open_ports = [port for port in ports if not refused(address, port)]
    finally:
        finish(agent, tag, stop)
    assert open_ports, f"no listener of the job answered through {address}: {ports}"
    wildcard = [port for port, (where, _) in ports.items() if where.strip("0") == ""]
    assert wildcard, ports


@needs_namespaces
def test_two_agents_of_one_run_share_one_private_network(tmp_path):
    from ddp_lab.cluster.scripts import book_script
    from ddp_lab.cluster.torchrun import run_two_nodes

    nodes = run_two_nodes(book_script("print_env.py"), nproc_per_node=1, timeout=120)
    assert [node.ok for node in nodes] == [True, True], nodes[0].tail() + nodes[1].tail()
    assert "socket.cpp" not in nodes[0].stderr + nodes[1].stderr  # the name-lookup lines are gone


def test_each_agent_gets_a_temporary_folder_of_its_own_and_it_is_removed(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)  # gettempdir() reads TMPDIR again
    script = tmp_path / "where.py"
    script.write_text("import tempfile, os\nprint(f\"[rank {os.environ['RANK']}] {tempfile.gettempdir()}\")\n")
    run = run_torchrun(script, nproc_per_node=1, timeout=120)
    assert run.ok, run.tail()
    [line] = run.rank_lines()
    folder = Path(line.split()[-1])
    assert folder.parent == tmp_path and folder.name.startswith("ddp_lab_torchrun_"), line
    assert list(tmp_path.iterdir()) == [script], list(tmp_path.iterdir())  # torchelastic_* went with it


def test_without_namespaces_the_job_runs_and_says_its_stores_are_open(tmp_path, monkeypatch):
    monkeypatch.setenv("DDP_LAB_NO_PRIVATE_NETWORK", "1")
    private_network.private_network_available.cache_clear()
    import ddp_lab.cluster.torchrun as torchrun

    monkeypatch.setattr(torchrun, "_noticed", False)
    script = tmp_path / "one.py"
    script.write_text("print('[rank 0] ran')\n")
    try:
        completed = subprocess.run(
            [sys.executable, "-c", "import sys; from ddp_lab.cluster.torchrun import run_torchrun; "
             f"r = run_torchrun({str(script)!r}, nproc_per_node=1); print(r.rank_lines()); sys.exit(r.returncode)"],
            capture_output=True, text=True, timeout=120)
    finally:
        private_network.private_network_available.cache_clear()
    assert completed.returncode == 0, completed.stderr
    assert "['[rank 0] ran']" in completed.stdout
    assert private_network.NOTICE in completed.stderr
