"""Lab 1's last check: the reader's two functions inside a real running group.

A launcher (torchrun, or ``ddp_lab.launch``) tells every process who it is
through environment variables: its node ``GROUP_RANK``, its ``LOCAL_RANK``
and its global ``RANK``. The process then picks its GPUs from its local
rank, which is the reader's ``my_devices``. The reader's ``my_ranks`` goes
the other way, from a GPU of a node to the ranks of the process that drives
it. In a right answer the round trip closes for every process::

    LOCAL_RANK --my_devices--> its GPUs --my_ranks(GROUP_RANK, gpu)--> (RANK, LOCAL_RANK)

:func:`check_ranks_in_group` starts a real group, with the nodes simulated
on this machine, so the environment is the launcher's own: strings in
``os.environ``, local ranks that restart at 0 on the second node. Every rank
calls both functions and reports what they returned; the checker compares
them with what the launcher set and explains each difference with the same
messages as :func:`~ddp_lab.checks.check_rank_table` and
:func:`~ddp_lab.checks.check_devices`.

The ranks never touch a GPU: the devices are compared as names
(``cuda:2``), so the check runs the same on a laptop and on a GPU node.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from ddp_lab.checks.devices import DEVICES_SIGNATURE, _as_devices, _explain_devices
from ddp_lab.checks.ranks import RANKS_SIGNATURE, _explain_ranks, _rank_pair, _split_process
from ddp_lab.checks.result import CheckResult, Mistake, signature_mistake
from ddp_lab.launcher.api import launch
from ddp_lab.launcher.errors import RankDied, RankFailed, RanksTimedOut
from ddp_lab.topology import Topology

__all__ = ["check_ranks_in_group"]

MAX_RANKS = 8  # a real group on the reader's machine: keep it small


def check_ranks_in_group(
    my_ranks: Callable,
    my_devices: Callable,
    *,
    nodes: int = 2,
    gpus_per_node: int = 4,
    gpus_per_process: int = 2,
    timeout: float = 60,
) -> CheckResult:
    """Run ``my_devices`` and ``my_ranks`` in every rank of a real group; explain what differs.

    The group has one process per ``gpus_per_process`` GPUs of ``nodes``
    simulated nodes of ``gpus_per_node`` GPUs: W = nodes x gpus_per_node /
    gpus_per_process ranks, at most 8. Each rank calls
    ``my_devices(LOCAL_RANK, gpus_per_process)`` and then, for each GPU it
    got, ``my_ranks(GROUP_RANK, gpu, gpus_per_node, gpus_per_process)``,
    which must return the ``(RANK, LOCAL_RANK)`` the launcher gave it.
    """
    topology = Topology(nodes, gpus_per_node, gpus_per_process)
    if topology.world_size > MAX_RANKS:
        raise ValueError(
            f"{topology} needs {topology.world_size} processes; this check starts them on "
            f"this machine, so it allows at most {MAX_RANKS}: use fewer nodes or more GPUs per process"
        )
    subject = f"real group: {topology}"
    wrong = [m for m in (signature_mistake(my_ranks, 4, RANKS_SIGNATURE),
                         signature_mistake(my_devices, 2, DEVICES_SIGNATURE)) if m]
    if wrong:
        return CheckResult(subject, 0, topology.world_size, "rank", tuple(wrong))
    try:
        reports = launch(_report_from_rank, topology.world_size, nodes=nodes, backend="gloo",
                         args=(my_ranks, my_devices, gpus_per_node, gpus_per_process),
                         timeout=timeout)
    except (RankFailed, RankDied, RanksTimedOut) as error:
        headline = str(error).splitlines()[0]
        mistake = Mistake("the group", "launch", f"the ranks did not all report back: {headline}")
        return CheckResult(subject, 0, topology.world_size, "rank", (mistake,))
    mistakes = []
    for report in reports:
        mistakes += _check_report(report, topology)
    correct = topology.world_size - len({m.where for m in mistakes})
    return CheckResult(subject, correct, topology.world_size, "rank", tuple(mistakes))


def _report_from_rank(my_ranks, my_devices, gpus_per_node, gpus_per_process) -> dict:
    """Inside a rank: who the launcher says I am, and what the reader's functions say.

    Returns plain data (ints and strings); the reader's errors are caught and
    reported as text, so that one wrong answer does not stop the group.
    """
    import os

    report = {name: int(os.environ[name]) for name in ("RANK", "LOCAL_RANK", "GROUP_RANK")}
    report.update(devices=None, ranks={}, error=None)
    local_rank, node = report["LOCAL_RANK"], report["GROUP_RANK"]
    call = f"my_devices({local_rank}, {gpus_per_process})"
    try:
        devices = _as_devices(my_devices(local_rank, gpus_per_process))
    except ValueError as error:
        report["error"] = f"{call} returned something that is not a device: {error}"
        return report
    except Exception as error:  # the reader's code: report it, never crash the rank
        report["error"] = f"{call} raised {type(error).__name__}: {error}"
        return report
    report["devices"] = [str(device) for device in devices]
    for device in devices:
        if device.type != "cuda" or device.index is None or not 0 <= device.index < gpus_per_node:
            continue  # a device that names no GPU of the node: reported by the device check
        try:
            report["ranks"][device.index] = _rank_pair(
                my_ranks(node, device.index, gpus_per_node, gpus_per_process))
        except Exception as error:  # includes a result that is not a pair of ints
            call = f"my_ranks({node}, {device.index}, {gpus_per_node}, {gpus_per_process})"
            report["ranks"][device.index] = f"{call} raised {type(error).__name__}: {error}"
    return report


def _check_report(report: dict, topology: Topology) -> list[Mistake]:
    """The mistakes in one rank's report: first its devices, then its ranks."""
    rank, local_rank, node = report["RANK"], report["LOCAL_RANK"], report["GROUP_RANK"]
    where = f"RANK={rank} (node {node}, LOCAL_RANK={local_rank})"
    if report["error"]:
        return [Mistake(where, "error", report["error"])]
    k, gpus_per_node = topology.gpus_per_process, topology.gpus_per_node
    given = _as_devices(report["devices"])
    process = topology.process(rank)
    expected = tuple(_as_devices([f"cuda:{gpu}" for gpu in process.gpus]))
    if given != expected:
        kind, message = _explain_devices(local_rank, k, given, expected, gpus_per_node)
        return [Mistake(where, kind, f"my_devices: {message} (fix my_devices first: "
                                      f"my_ranks is asked about the GPUs it returns)")]
    answers = {gpu: report["ranks"][gpu] for gpu in process.gpus}
    failures = [answer for answer in answers.values() if isinstance(answer, str)]
    if failures:
        return [Mistake(where, "error", failures[0])]
    if len(set(answers.values())) > 1:  # the GPUs of one process got different ranks
        return [replace(_split_process(process, answers), where=where)]
    calls = " and ".join(f"my_ranks({node}, {gpu}, {gpus_per_node}, {k})" for gpu in process.gpus)
    return [
        Mistake(where, mistake.kind, f"{calls}: {mistake.message}")
        for mistake in _explain_ranks(process, *answers[process.gpus[0]], topology)
    ]
