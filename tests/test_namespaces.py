"""The namespace cluster of Chapter 12: real namespaces, a real shaped link, nothing left behind.

Everything but the argument checks needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN)
and iproute2; without them those tests are skipped with the reason.
"""

import ipaddress
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from ddp_lab.cluster import namespaces
from ddp_lab.cluster.namespaces import ADDRESS_RANGE, Cluster, ClusterError

MISSING = namespaces.missing_requirements()
needs_root = pytest.mark.skipif(bool(MISSING), reason=f"needs root and iproute2: {MISSING}")
ROOT = Path(__file__).resolve().parents[1]


def host_links():
    return subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout


def link_names(listing):
    return sorted(line.split(":")[1].strip().split("@")[0] for line in listing.splitlines())


def ours():
    """This process's cluster namespaces: other pytest workers and notebooks build clusters meanwhile."""
    return [name for name in namespaces.namespaces() if name.startswith(f"{namespaces.PREFIX}-{os.getpid()}-")]


@pytest.mark.parametrize("kwargs, message", [
    ({"nodes": 1}, "nodes must be an int from 2 to 16, got 1"),
    ({"rate_mbit": 0}, "rate_mbit must be a number of Mbit/s from 1 to 100000, got 0"),
    ({"delay_ms": -1}, "delay_ms must be a number of milliseconds from 0 to 1000, got -1"),
    ({"mtu": 100}, "mtu must be an int from 1280 to 65535, got 100"),
    ({"subnet": "10.0.0.0/24"}, "subnet '10.0.0.0/24' is outside 198.18.0.0/15"),
    ({"subnet": "192.168.1.0/24"}, "subnet '192.168.1.0/24' is outside 198.18.0.0/15"),
    ({"subnet": "198.18.0.0/30", "nodes": 3}, "has 2 host addresses for 3 nodes"),
    ({"subnet": "not a net"}, "subnet must be an IPv4 network"),
])
def test_bad_arguments_are_named_before_anything_is_built(kwargs, message):
    before = ours()
    with pytest.raises(ValueError) as error:
        Cluster(**kwargs)
    assert message in str(error.value)
    assert ours() == before


def test_addresses_come_from_the_benchmarking_range_and_names_are_unique():
    first, second = Cluster(4, subnet="198.19.7.0/24"), Cluster(2)
    for node in first.nodes + second.nodes:
        assert ipaddress.ip_address(node.address) in ADDRESS_RANGE
    assert [node.address for node in first.nodes] == ["198.19.7.1", "198.19.7.2", "198.19.7.3", "198.19.7.4"]
    assert first.name != second.name and first.name.startswith(f"ddplab-{os.getpid()}-")


def test_a_stopped_cluster_refuses_work():
    with pytest.raises(ClusterError, match="is not running"):
        Cluster(2).launch(print, 1)


def test_set_link_keeps_the_old_rate_and_delay_when_tc_refuses_the_new_ones(monkeypatch):
    # No root needed: tc is a stand-in that refuses netem (a kernel without sch_netem).
    calls = []

    def tc(argv, timeout=30.0, check=True):
        calls.append(argv)
        refused = "netem" in argv
        return subprocess.CompletedProcess(argv, 2 if refused else 0, "",
                                           "Error: Specified qdisc kind is unknown." if refused else "")

    monkeypatch.setattr(namespaces, "_run", tc)
    cluster = Cluster(2, rate_mbit=1000)
    cluster.running = True  # as if started; nothing was built, so nothing to stop
    try:
        with pytest.raises(ClusterError, match="no `netem` queueing discipline"):
            cluster.set_link(rate_mbit=100, delay_ms=5)
        assert (cluster.rate_mbit, cluster.delay_ms) == (1000.0, 0.0)
        assert "tbf" in calls[-1] and "1000mbit" in calls[-1]  # the old shape, put back
        cluster.set_link(rate_mbit=200)  # accepted: recorded
        assert (cluster.rate_mbit, cluster.delay_ms) == (200.0, 0.0) and "200mbit" in calls[-1]
    finally:
        cluster.running = False


def where_am_i():
    import socket

    import psutil

    total = torch.tensor([float(dist.get_rank())])
    dist.all_reduce(total)
    addresses = {name: [a.address for a in found if a.family == socket.AF_INET]
                 for name, found in psutil.net_if_addrs().items()}
    return total.item(), addresses


@needs_root
def test_ranks_run_in_their_nodes_and_the_nodes_reach_nothing_else():
    before = host_links()
    with Cluster(2, rate_mbit=500) as cluster:
        assert set(namespaces.namespaces()) >= {node.namespace for node in cluster.nodes}
        results = cluster.launch(where_am_i, 2, threads=1)
        for node in cluster.nodes:
            routes = subprocess.run(["ip", "-n", node.namespace, "route"], capture_output=True,
                                    text=True).stdout
            assert "default" not in routes  # no way out of the cluster
            assert routes.split()[0] == "198.18.0.0/24"
        assert "tbf" in cluster.qdiscs()[cluster.nodes[0].namespace]
        assert "rate 500Mbit" in cluster.qdiscs()[cluster.nodes[1].namespace]
    assert [total for total, _ in results] == [6.0] * 4
    assert [addresses for _, addresses in results] == (
        [{"lo": ["127.0.0.1"], "eth0": ["198.18.0.1"]}] * 2 + [{"lo": ["127.0.0.1"], "eth0": ["198.18.0.2"]}] * 2)
    assert link_names(host_links()) == link_names(before)


@needs_root
def test_measured_bandwidth_across_the_link_is_within_20_percent_of_the_tc_setting():
    from ddp_lab.cluster.measure import link_times
    from ddp_lab.cost import fit_latency_bandwidth

    sizes = [16 * 1024, 256 * 1024, 2 << 20, 8 << 20]
    with Cluster(2, rate_mbit=400) as cluster:
        times = cluster.launch(link_times, 2, args=(sizes, 2, 3), threads=1)[0]["inter"]
    _, bandwidth = fit_latency_bandwidth(sizes, [min(times[n]) for n in sizes])
    assert bandwidth == pytest.approx(400e6 / 8, rel=0.2)


@needs_root
def test_a_wrong_interface_name_fails_in_init_process_group():
    import ddp_lab

    with Cluster(2) as cluster:
        with pytest.raises(ddp_lab.RankFailed, match="Unable to find address for: ib0"):
            cluster.launch(where_am_i, 2, interface="ib0", timeout=30, threads=1)


@needs_root
def test_without_an_interface_name_the_refused_connection_is_reported():
    from ddp_lab.cluster import measure

    with Cluster(2) as cluster:
        choices = measure.interface_choices(cluster)
    assert "Unable to find address for: ib0" in choices["ib0"]
    assert "Connection refused, remote=[127.0.0.1]:<port>" in choices["unset"]


def test_the_reported_error_is_the_root_cause_whichever_rank_is_lowest():
    # What a CI build of Chapter 12 got: rank 0 failed only because rank 2 gave up first.
    from ddp_lab import RankFailed
    from ddp_lab.cluster.measure import _error_line

    refused = ("Gloo connectFullMesh failed with [.../gloo/transport/tcp/pair.cc:152] timed out "
               "connecting: SO_ERROR: Connection refused, remote=[127.0.0.1]:41234")
    closed = ("Gloo connectFullMesh failed with [.../gloo/transport/tcp/pair.cc:553] Connection closed "
              "by peer [127.0.0.1]:39876. This is typically caused by a remote worker crashing.")
    error = RankFailed(0, "RuntimeError", closed, "Traceback ...", other_failures={2: f"RuntimeError: {refused}"})
    assert _error_line(error) == ("RuntimeError: Gloo connectFullMesh failed with [.../gloo/transport/tcp/"
                                  "pair.cc:152] timed out connecting: SO_ERROR: Connection refused, "
                                  "remote=[127.0.0.1]:<port>")
    only_consequences = RankFailed(1, "RuntimeError", closed, "Traceback ...")
    assert _error_line(only_consequences).endswith("Connection closed by peer [127.0.0.1]:<port>. "
                                                   "This is typically caused by a remote worker crashing.")


@needs_root
def test_torchrun_agents_meet_across_the_namespaces():
    with Cluster(2) as cluster:
        agents = cluster.torchrun(ROOT / "labs" / "scripts" / "train.py", ["--print-ranks", "--epochs", "0"],
                                  nproc_per_node=2, cwd=ROOT, timeout=120)
    assert [agent.returncode for agent in agents] == [0, 0], agents[0].tail() + agents[1].tail()
    table = [row for agent in agents for row in agent.rank_table()]
    assert sorted((row["RANK"], row["GROUP_RANK"], row["LOCAL_RANK"]) for row in table) == [
        ("0", "0", "0"), ("1", "0", "1"), ("2", "1", "0"), ("3", "1", "1")]
    assert "198.18.0.1:29400" in " ".join(agents[1].command)  # node 1 knew only node 0's address


@needs_root
def test_an_exception_in_the_with_block_removes_everything():
    before = host_links()
    with pytest.raises(ZeroDivisionError):
        with Cluster(3) as cluster:
            names = [node.namespace for node in cluster.nodes] + [cluster.switch]
            assert set(names) <= set(namespaces.namespaces())
            1 / 0
    assert not set(names) & set(namespaces.namespaces())
    assert link_names(host_links()) == link_names(before)


@needs_root
def test_a_delay_needs_netem_or_says_so():
    probe = Cluster(2)
    with probe:  # does this kernel take a netem qdisc?
        netem = subprocess.run(["tc", "-n", probe.switch, "qdisc", "add", "dev", "br0", "root", "netem",
                                "delay", "1ms"], capture_output=True).returncode == 0
    if netem:
        with Cluster(2, delay_ms=1) as cluster:
            assert "netem" in cluster.qdiscs()[cluster.nodes[0].namespace]
    else:
        before = ours()
        with pytest.raises(ClusterError, match="no `netem` queueing discipline"):
            Cluster(2, delay_ms=1).start()
        assert ours() == before


CHILD = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, {root!r})
    from ddp_lab.cluster.namespaces import Cluster
    cluster = Cluster(2).start()
    print(" ".join([n.namespace for n in cluster.nodes] + [cluster.switch]), flush=True)
    try:
        time.sleep(60)
    except KeyboardInterrupt:
        cluster.stop()
        raise
""")


def start_child():
    child = subprocess.Popen([sys.executable, "-c", CHILD.format(root=str(ROOT))], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    names = child.stdout.readline().split()
    assert len(names) == 3, child.stderr.read()
    assert set(names) <= set(namespaces.namespaces())
    return child, names


@needs_root
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_a_signal_to_the_process_removes_its_cluster(signum):
    before = host_links()
    child, names = start_child()
    child.send_signal(signum)
    assert child.wait(20) != 0  # it still ends, killed by the signal (or by KeyboardInterrupt)
    assert not set(names) & set(namespaces.namespaces())
    assert link_names(host_links()) == link_names(before)


@needs_root
def test_a_cluster_of_a_killed_process_is_removed_by_the_next_one():
    child, names = start_child()
    child.send_signal(signal.SIGKILL)  # no handler runs: the namespaces stay
    child.wait(20)
    assert set(names) <= set(namespaces.namespaces())
    removed = namespaces.remove_stale()
    assert set(names) <= set(removed)
    assert not set(names) & set(namespaces.namespaces())


def starts_its_own_group():
    """Code written for torchrun: it initialises the default group itself."""
    dist.init_process_group("gloo")
    return dist.get_rank()


@needs_root
def test_code_that_initialises_its_own_group_is_told_cluster_launch_made_it():
    # Issue 44: it got torch's bare "trying to initialize the default process group twice!".
    import ddp_lab

    with Cluster(2) as cluster:
        with pytest.raises(ddp_lab.RankFailed) as caught:
            cluster.launch(starts_its_own_group, 1, timeout=60, threads=1)
    message = caught.value.exc_message
    assert message.startswith("trying to initialize the default process group twice: Cluster.launch "
                              "initialised it on every rank before calling your function. Use that group "
                              "as it is (dist.get_rank(), dist.get_world_size(), and dist.group.WORLD")
    assert "Cluster.launch always does" in message
