"""Lab 1 checker: the device(s) each process of a node uses.

The reader writes ``my_devices(local_rank, gpus_per_process)``, the mapping
that :func:`ddp_lab.devices.devices_for` implements, and checks it:

>>> def my_devices(local_rank, gpus_per_process):
...     first = local_rank * gpus_per_process
...     return [f"cuda:{first + k}" for k in range(gpus_per_process)]
>>> check_devices(my_devices, gpus_per_node=4)
✓ all 7 processes correct (a node with 4 GPUs; 1, 2 and 4 GPUs per process)

The usual slips are named: ``cuda`` without an index, a spanning process
given only ``cuda:local_rank``, the first GPU taken as ``cuda:local_rank``
instead of ``cuda:local_rank × gpus_per_process``, an off-by-one.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ddp_lab.checks.result import CheckResult, Mistake, signature_mistake
from ddp_lab.devices import devices_for
from ddp_lab.topology import Topology, divisors

__all__ = ["check_devices"]

DEVICES_SIGNATURE = "def my_devices(local_rank, gpus_per_process), returning a device or a tuple of devices"


def check_devices(
    answer: Callable, gpus_per_node: int = 4, gpus_per_process: int | None = None
) -> CheckResult:
    """Check ``my_devices(local_rank, gpus_per_process)``: the device(s) that
    each process of a node with ``gpus_per_node`` GPUs should use.

    The answer may be a ``torch.device``, a string such as ``"cuda:1"``, an
    int (the GPU index) or a tuple of them, one per GPU the process spans.
    Without ``gpus_per_process`` every allowed value (each divisor of
    ``gpus_per_node``) is tried. The node is assumed to have its GPUs, even
    when this machine has none.
    """
    spans = divisors(gpus_per_node) if gpus_per_process is None else (gpus_per_process,)
    for k in spans:
        Topology(1, gpus_per_node, k)  # raises a ValueError that names what is allowed
    counts = ", ".join(map(str, spans[:-1])) + (" and " if len(spans) > 1 else "") + str(spans[-1])
    subject = f"a node with {gpus_per_node} GPUs; {counts} GPU{'s' if spans != (1,) else ''} per process"
    wrong_signature = signature_mistake(answer, 2, DEVICES_SIGNATURE)
    total = sum(gpus_per_node // k for k in spans)
    if wrong_signature:
        return CheckResult(subject, 0, total, "process", (wrong_signature,))
    mistakes, correct = [], 0
    for k in spans:
        for local_rank in range(gpus_per_node // k):
            found = _check_devices_of(answer, local_rank, k, gpus_per_node)
            mistakes += found
            correct += not found
    return CheckResult(subject, correct, total, "process", tuple(mistakes))


def _check_devices_of(my_devices: Callable, local_rank: int, k: int, gpus_per_node: int) -> list[Mistake]:
    where = f"local rank {local_rank}, {k} GPU{'s' if k > 1 else ''} per process"
    try:
        result = my_devices(local_rank, k)
    except Exception as error:  # the reader's code: report it, never crash the check
        return [Mistake(where, "error", f"my_devices raised {type(error).__name__}: {error}")]
    try:
        given = _as_devices(result)
    except ValueError as error:
        return [Mistake(where, "bad_answer", str(error))]
    expected = devices_for(local_rank, k, cuda_available=True, gpu_count=gpus_per_node)
    if given == expected:
        return []
    return [Mistake(where, *_explain_devices(local_rank, k, given, expected, gpus_per_node))]


def _as_devices(value) -> tuple[torch.device, ...]:
    """A tuple of torch.device from a device, a string, a GPU index or a sequence of them."""
    items = value if isinstance(value, (tuple, list)) else (value,)
    devices = []
    for item in items:
        if isinstance(item, bool):
            raise ValueError(f"{item!r} is not a device")
        if isinstance(item, int):
            item = torch.device("cuda", item)
        try:
            devices.append(torch.device(item))
        except (RuntimeError, TypeError):
            raise ValueError(
                f"{item!r} is not a device: give a torch.device, a string such as 'cuda:1', "
                f"a GPU index, or a tuple of them"
            ) from None
    return tuple(devices)


def _explain_devices(local_rank, k, given, expected, gpus_per_node) -> tuple[str, str]:
    """(kind, message) for a wrong device answer."""
    first = local_rank * k
    gave = f"you gave {_show(given)}, expected {_show(expected)}"
    indices = [d.index for d in given]
    if any(d.type != "cuda" for d in given):
        return "not_cuda", (
            f"{gave}: the check asks which GPUs the process drives on a node with "
            f"{gpus_per_node} GPUs, so answer with cuda devices even on a machine without CUDA."
        )
    if None in indices:
        return "no_index", (
            f"{gave}: 'cuda' without an index means the current device, cuda:0 until "
            f"torch.cuda.set_device is called, so every process of the node would share GPU 0."
        )
    if k > 1 and local_rank > 0 and indices == [local_rank]:
        return "ignored_span", (
            f"{gave}: with {k} GPUs per process, local rank {local_rank} drives {k} GPUs; "
            f"{_gpus_before(local_rank, k)}, so local rank {local_rank} starts at "
            f"cuda:{local_rank} × {k} = cuda:{first}."
        )
    if len(given) != k:
        gpus = f"{k} GPU{'s' if k > 1 else ''}"
        return "wrong_count", f"{gave}: a process that spans {gpus} uses one device per GPU."
    if k > 1 and indices == list(range(local_rank, local_rank + k)):
        return "start_at_local_rank", (
            f"{gave}: {_gpus_before(local_rank, k)}, so local rank {local_rank} starts at "
            f"cuda:{local_rank} × {k} = cuda:{first}."
        )
    offsets = {i - e.index for i, e in zip(indices, expected)}
    if offsets in ({1}, {-1}):
        return "off_by_one", f"{gave}, off by one: GPUs are numbered from cuda:0 on every node."
    if any(i >= gpus_per_node for i in indices):
        return "no_such_gpu", (
            f"{gave}: a node with {gpus_per_node} GPUs has cuda:0 to cuda:{gpus_per_node - 1} only."
        )
    return "wrong_devices", (
        f"{gave}: local rank r drives cuda:r × k to cuda:r × k + k - 1, "
        f"here cuda:{first} to cuda:{first + k - 1}."
    )


def _gpus_before(local_rank: int, k: int) -> str:
    """``local rank 0 comes first and uses cuda:0 and cuda:1``, for local_rank 1 and k 2."""
    last = local_rank * k - 1
    used = "cuda:0 and cuda:1" if last == 1 else f"cuda:0 to cuda:{last}"
    if local_rank == 1:
        return f"local rank 0 comes first and uses {used}"
    ranks = "0 and 1" if local_rank == 2 else f"0 to {local_rank - 1}"
    return f"local ranks {ranks} come first and use {used}"


def _show(devices: tuple[torch.device, ...]) -> str:
    return str(devices[0]) if len(devices) == 1 else "(" + ", ".join(map(str, devices)) + ")"
