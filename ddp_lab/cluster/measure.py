"""What Chapters 12 and 12b measure on the namespace cluster, run inside the ranks.

Each function runs on every rank of a :meth:`Cluster.launch
<ddp_lab.cluster.namespaces.Cluster.launch>` of N nodes x G ranks (nodes
hold consecutive ranks) and returns plain numbers (lists of seconds, one per
repeat, each the slowest rank's), the same on every rank:

* :func:`link_times`: a 2-rank all-reduce inside node 0 (ranks 0 and 1,
  over its loopback) and across the link (rank 0 and the first rank of
  node 1), for several sizes, to fit latency and bandwidth to each;
* :func:`flat_vs_hierarchical`: ``dist.all_reduce`` (gloo's ring over all
  ranks) against :func:`ddp_lab.collectives.hierarchical.hierarchical_all_reduce`;
* :func:`ddp_step_times`: seconds per DDP training step of an MLP, with
  DDP's default buckets, with one bucket, with
  ``no_sync`` over 4 micro-batches, and with no communication at all (the
  compute alone).

Every measurement is repeated and the repeats are kept: the chapter prints
their spread (min, median, max), never a single run.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

import torch
import torch.distributed as dist

from ..collectives.hierarchical import hierarchical_all_reduce, node_groups
from .scripts import stored_runs_folder

__all__ = ["timed", "link_times", "flat_vs_hierarchical", "ddp_step_times", "DDP_SETTINGS"]


def timed(call, group=None, repeats=5, warmup=1):
    """Seconds of ``call()`` per repeat: each the slowest rank's, after a barrier.

    A collective has finished when its last rank has; ranks leave the
    barrier at slightly different moments, so the slowest rank's time can
    overstate by the barrier's skew (microseconds here).
    """
    for _ in range(warmup):
        call()
    times = []
    for _ in range(repeats):
        dist.barrier(group=group)
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    slowest = torch.tensor(times, dtype=torch.float64)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX, group=group)
    return slowest.tolist()


def link_times(sizes, ranks_per_node, repeats=5):
    """All-reduce times of two ranks inside node 0 and of two ranks on different nodes.

    Returns ``{"intra": {nbytes: [s, ...]}, "inter": {...}}``. With two
    ranks, each sends the whole tensor once, so ``time ~ latency + n /
    bandwidth`` with the bandwidth of the path they share.
    """
    rank = dist.get_rank()
    pairs = {"intra": [0, 1], "inter": [0, ranks_per_node]}
    groups = {where: dist.new_group(ranks) for where, ranks in pairs.items()}  # every rank calls both
    results = {where: {} for where in pairs}
    for where, ranks in pairs.items():
        if rank in ranks:
            for nbytes in sizes:
                tensor = torch.ones(nbytes // 4)
                results[where][nbytes] = timed(lambda: dist.all_reduce(tensor, group=groups[where]),
                                               groups[where], repeats)
    dist.barrier()
    return _from_rank0(results)


def flat_vs_hierarchical(sizes, ranks_per_node, repeats=5):
    """Times of the flat ring and of the hierarchical all-reduce, size by size, interleaved.

    Returns ``{"flat": {nbytes: [s, ...]}, "hierarchical": {...}, "equal": bool}``;
    ``equal`` says whether both gave the same sum (integers in float32, so
    exactly) on every rank.
    """
    groups = node_groups(ranks_per_node)
    results = {"flat": {}, "hierarchical": {}}
    equal = True
    for nbytes in sizes:
        values = torch.arange(nbytes // 4, dtype=torch.float32) % 97 + dist.get_rank()
        flat, hierarchical = values.clone(), values.clone()
        dist.all_reduce(flat)
        hierarchical_all_reduce(hierarchical, groups)
        equal &= torch.equal(flat, hierarchical)
        tensor = values.clone()
        results["flat"][nbytes] = timed(lambda: dist.all_reduce(tensor), repeats=repeats)
        results["hierarchical"][nbytes] = timed(lambda: hierarchical_all_reduce(tensor, groups),
                                                repeats=repeats)
    verdict = torch.tensor([int(equal)])
    dist.all_reduce(verdict, op=dist.ReduceOp.MIN)
    results["equal"] = bool(verdict.item())
    return results


# name -> (DDP keyword arguments, micro-batches per optimizer step under no_sync)
# For Chapter 12b's MLP (1.5 MiB of gradients), DDP's default makes two buckets
# after its first iterations (fc3 + fc2, then fc1: _get_ddp_logging_data()
# says 1071144 and 526336 bytes); 25 MiB written out makes one. A smaller cap
# makes no more: a bucket closes only after the tensor that fills it, and
# every weight here is 0.5 MiB or more.
DDP_SETTINGS = {
    "DDP, default buckets": ({}, 1),
    "DDP, one 25 MiB bucket": ({"bucket_cap_mb": 25}, 1),
    "DDP, no_sync x 4": ({}, 4),
}


def ddp_step_times(widths=(256, 512, 512, 10), batch=32, steps=2, settings=None):
    """Seconds per micro-batch of DDP training, per setting; plus the compute alone.

    Returns ``{"parameters": P, "gradient_bytes": 4P, "compute": [s, ...],
    setting: [s, ...], ...}``: for each repeat, the slowest rank's time of
    ``steps`` optimizer steps divided by the micro-batches they ran. The
    compute alone is the same loop on the bare model (no DDP, no
    communication): what a step would cost on an infinitely fast link.
    """
    from torch.nn.parallel import DistributedDataParallel as DDP

    from ..models import mlp, parameter_count

    settings = DDP_SETTINGS if settings is None else settings
    generator = torch.Generator().manual_seed(dist.get_rank())
    inputs = torch.randn(batch, widths[0], generator=generator)
    labels = torch.randint(0, widths[-1], (batch,), generator=generator)
    loss_fn = torch.nn.CrossEntropyLoss()

    def loop(model, micro_batches):
        optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)

        def run():
            for _ in range(steps):
                for micro in range(micro_batches):
                    last = micro == micro_batches - 1
                    with model.no_sync() if not last else contextlib.nullcontext():
                        loss_fn(model(inputs), labels).backward()
                optimizer.step()
                optimizer.zero_grad()
        return run

    bare = mlp(widths, seed=0)
    results = {"parameters": parameter_count(bare), "gradient_bytes": 4 * parameter_count(bare)}
    per_micro = steps
    results["compute"] = [t / per_micro for t in timed(loop(bare, 1), repeats=3)]
    for name, (options, micro_batches) in settings.items():
        model = DDP(mlp(widths, seed=0), **options)
        per_micro = steps * micro_batches
        results[name] = [t / per_micro for t in timed(loop(model, micro_batches), repeats=3)]
    return results


def _from_rank0(value):
    """Rank 0's value on every rank (the others measured only their part)."""
    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]


# -- The experiments of Chapters 12 and 12b, live or stored -----------------------------------

KiB, MiB = 1024, 1024 * 1024
# What Chapters 12 and 12b measure: one entry per experiment, (link rate in
# Mbit/s, function, keyword arguments). A stored run (``python -m
# ddp_lab.cluster.measure --out FILE``) and the chapters' live cells run the
# same entries, so the two are the same experiment.
#
# The link is measured at 400 Mbit/s, not at the cluster's 1 Gbit/s: every
# byte crosses two TCP stacks and the veth pair on the same two cores, and at
# 1 Gbit/s the CPU set the pace. On the book's 2-core machine the fitted
# bandwidth came out at 0.85 to 0.87 of 1 Gbit/s with the machine idle, 0.76
# to 0.86 with one or two busy loops beside it (a book build measured 0.78
# while the hypervisor took CPU time), against 0.92 to 1.08 of 400 Mbit/s in
# all three conditions (two runs of link_times on a 2 x 2 Cluster for each).
CLUSTER_RATE_MBIT = 1000  # the link as Chapter 12 builds the cluster; each experiment sets its own
CHAPTER = {
    "link": (400, link_times, {"sizes": [4 * KiB, 64 * KiB, 512 * KiB, 2 * MiB, 4 * MiB],
                               "ranks_per_node": 2, "repeats": 5}),
    "hierarchical": (200, flat_vs_hierarchical, {"sizes": [16 * KiB, 256 * KiB, 4 * MiB],
                                                 "ranks_per_node": 2, "repeats": 3}),
    # One optimizer step per repeat: the cell takes about 7 s instead of 11
    # with two, and the chapter's claims held in each of three runs of either.
    "ddp_100": (100, ddp_step_times, {"widths": (256, 512, 512, 10), "batch": 32, "steps": 1}),
    "ddp_250": (250, ddp_step_times, {"widths": (256, 512, 512, 10), "batch": 32, "steps": 1}),
    "ddp_1000": (1000, ddp_step_times, {"widths": (256, 512, 512, 10), "batch": 32, "steps": 1}),
}
NODES, RANKS_PER_NODE = 2, 2
TORCHRUN_ARGS = ["--print-ranks", "--epochs", "1", "--samples", "256", "--snapshot", "two_nodes.pt"]


def interfaces_seen():
    """Inside a rank: its interfaces and their IPv4 addresses."""
    import socket

    import psutil

    return {name: [a.address for a in found if a.family == socket.AF_INET]
            for name, found in psutil.net_if_addrs().items()}


def interface_choices(cluster):
    """What each rank sees with ``GLOO_SOCKET_IFNAME=eth0``, and what goes wrong with a wrong name or none.

    Returns ``{"eth0": [interfaces per rank], "ib0": error line, "unset": error line}``.
    """
    import contextlib
    import io

    from ..launcher.errors import LaunchError

    results = {"eth0": cluster.launch(interfaces_seen, RANKS_PER_NODE, threads=1)}
    for name, interface in (("ib0", "ib0"), ("unset", None)):
        with contextlib.redirect_stdout(io.StringIO()):  # gloo's retries, printed by every rank
            try:
                cluster.launch(interfaces_seen, RANKS_PER_NODE, interface=interface, threads=1, timeout=60)
                results[name] = "no error"
            except LaunchError as error:
                results[name] = _error_line(error)
    return results


# gloo's words for a connection that the *other* end dropped: the rank that
# says it failed because another rank failed first (its process exited).
_CONSEQUENCE = "Connection closed by peer"


def _error_line(error):
    """The root cause of a failed launch, on one line, without the ranks' port numbers.

    Several ranks fail when the mesh cannot form: the one whose connection was
    refused, and the ranks it was already connected to, which then read
    "Connection closed by peer" once it has given up and closed its
    connections (seen in a CI build of Chapter 12). Which of them has
    the lowest rank (the one ``RankFailed`` names first) depends on the ports
    the OS picked, so the line is the lowest rank's error among those that are
    not such consequences.
    """
    import re

    from ..launcher.errors import RankFailed

    if isinstance(error, RankFailed):
        failures = {error.rank: f"{error.exc_type}: {error.exc_message}", **error.other_failures}
        causes = [message for _, message in sorted(failures.items()) if _CONSEQUENCE not in message]
        line = (causes or [failures[error.rank]])[0].splitlines()[0]
    else:
        line = str(error).splitlines()[0]
    line = re.sub(r"\[enforce fail at [^\]]*\] ", "", line)
    return re.sub(r"\]:\d+(\$\d+)?", "]:<port>", line)


def torchrun_run(cluster, script, args):
    """One torchrun agent per node: the commands (as typed), exit codes and the rank table."""
    import tempfile

    with tempfile.TemporaryDirectory() as workdir:  # the snapshot goes there, and away
        agents = cluster.torchrun(script, args, nproc_per_node=RANKS_PER_NODE, cwd=workdir, timeout=120)
    commands = []
    for node, agent in zip(cluster.nodes, agents):
        words = list(agent.command[4:])  # after `ip netns exec NAME`
        words[:3] = ["torchrun"]         # python -m torch.distributed.run
        words = [Path(word).name if word == str(script) else word for word in words]
        commands.append(f"ip netns exec <node {node.index}> " + " ".join(words))
    table = sorted((row for agent in agents for row in agent.rank_table()), key=lambda row: int(row["RANK"]))
    lines = [line for agent in agents for line in agent.rank_lines() if "epoch" in line or "done" in line]
    return {"commands": commands, "returncodes": [agent.returncode for agent in agents],
            "table": table, "training": lines, "tail": [agent.tail(10) for agent in agents]}


def describe(cluster):
    """One line per node: its namespace, interface, address and the qdisc shaping its link."""
    return [f"node {node.index}: namespace {node.namespace}, {node.interface} {node.address}, "
            f"link: {cluster.qdiscs()[node.namespace]}" for node in cluster.nodes]


def run_experiment(cluster, name):
    """Run one of :data:`CHAPTER`'s experiments on ``cluster`` (its link set first)."""
    if name not in CHAPTER:
        raise ValueError(f"unknown experiment {name!r}; expected one of {', '.join(CHAPTER)}")
    rate, function, kwargs = CHAPTER[name]
    cluster.set_link(rate_mbit=rate)
    result = cluster.launch(function, RANKS_PER_NODE, kwargs=kwargs, threads=1, timeout=120)[0]
    return _json_keys(result)


def record(path):
    """Run every experiment on a fresh 2 x 2 cluster and write them, with the machine, to ``path``."""
    import datetime
    import json
    import platform

    from .namespaces import Cluster

    results = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
               "machine": _machine(), "torch": torch.__version__, "kernel": platform.release(),
               "nodes": NODES, "ranks_per_node": RANKS_PER_NODE, "experiments": {}}
    with Cluster(NODES, rate_mbit=CLUSTER_RATE_MBIT) as cluster:
        results["cluster"] = describe(cluster)
        from .scripts import book_script

        results["experiments"]["torchrun"] = torchrun_run(cluster, book_script("train.py"), TORCHRUN_ARGS)
        results["experiments"]["interfaces"] = interface_choices(cluster)
        for name in CHAPTER:
            results["experiments"][name] = run_experiment(cluster, name)
    with open(path, "w") as file:
        json.dump(results, file, indent=1)
    return results


def _machine():
    import os

    from ddp_lab.host import cpu_model

    return f"{cpu_model()}, {os.cpu_count()} cores"


def _json_keys(value):
    """Sizes as dictionary keys become strings in JSON: make live results look the same."""
    if isinstance(value, dict):
        return {str(key): _json_keys(item) for key, item in value.items()}
    return value


STORED = stored_runs_folder("cluster_results") / "namespace_cluster.json"


def stored_results(path=STORED):
    """The committed run of :func:`record` (Chapters 12 and 12b show it where the cluster cannot be built)."""
    import json

    try:
        with open(path) as file:
            return json.load(file)
    except FileNotFoundError:
        return None


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description="Run the measurements of Chapters 12 and 12b on a namespace cluster "
                                     "(needs root) and store them as JSON.")
    parser.add_argument("--out", required=True, help="the JSON file to write")
    print(record(parser.parse_args().out)["date"])
