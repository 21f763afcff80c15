"""What machine a GPU check ran on, and why a machine cannot run it.

A measurement means little without its machine: the results file names the
GPUs, the driver, the CUDA and NCCL versions and the torch build, and the
book's pages print them beside every figure ("measured on ... on <date>",
Chapter 14).

Nothing here needs a GPU, and nothing here except ``describe_devices``
creates a CUDA context: ``python -m ddp_lab.gpu_check`` asks whether there
is a GPU before it starts anything, and describes the GPUs only after its
launches, so that those start from a process with no CUDA context (see
``ddp_lab.gpu_check.launches``).
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
from collections import Counter

import torch
import torch.distributed as dist

from ddp_lab.host import available_cores

__all__ = ["cuda_facts", "why_no_cuda", "describe_machine", "driver_version", "gpu_names"]


def cuda_facts() -> dict:
    """What decides whether the checks can run here, asked without creating a CUDA context."""
    return {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,                   # the CUDA torch was built for; None: CPU-only
        "cuda_available": torch.cuda.is_available(),  # a GPU and a driver torch can use
        "nccl_available": dist.is_nccl_available(),
        "visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
    }


def why_no_cuda(facts: dict | None = None) -> str | None:
    """Why this machine cannot run the GPU checks, in a sentence; None when it can.

    ``facts`` defaults to this machine's (``cuda_facts()``); tests pass
    another machine's to see its answer.
    """
    facts = cuda_facts() if facts is None else facts
    torch_version, cuda = facts["torch"], facts["cuda"]
    if not facts["cuda_available"] and cuda is None:
        return (f"torch {torch_version} is a build without CUDA (torch.version.cuda is None): "
                f"install a CUDA build of PyTorch (python -m pip install torch) on a machine "
                f"with an NVIDIA GPU and its driver")
    if not facts["cuda_available"]:
        visible = facts["visible_devices"]
        hidden = (f"; CUDA_VISIBLE_DEVICES={visible!r} hides every GPU"
                  if visible is not None and not visible.strip() else "")
        return (f"torch {torch_version} is built for CUDA {cuda} but finds no usable GPU "
                f"(torch.cuda.is_available() is False{hidden}): check that `nvidia-smi` lists a GPU "
                f"and that its driver supports CUDA {cuda}")
    if not facts["nccl_available"]:
        return (f"torch {torch_version} sees a GPU but has no nccl backend "
                f"(torch.distributed.is_nccl_available() is False): the checks need nccl, "
                f"which PyTorch's Linux CUDA builds include")
    return None


def describe_machine(gpus: int) -> dict:
    """The ``machine`` part of a results file, for a machine with ``gpus`` GPUs (0 included)."""
    return {
        "gpus": gpus,
        "devices": describe_devices(gpus),
        **driver_version(),
        "cuda": torch.version.cuda,
        "nccl": nccl_version(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu_cores": available_cores(),
    }


def describe_devices(gpus: int) -> list[dict]:
    """Name, memory and compute capability of each GPU (this creates a CUDA context)."""
    devices = []
    for index in range(gpus):
        properties = torch.cuda.get_device_properties(index)
        devices.append({
            "index": index,
            "name": torch.cuda.get_device_name(index),
            "memory_bytes": int(properties.total_memory),
            "capability": f"{properties.major}.{properties.minor}",
        })
    return devices


def gpu_names(devices: list[dict]) -> str:
    """``'8 × NVIDIA H100 80GB HBM3'``, or ``'1 × Tesla T4 and 1 × NVIDIA L4'``."""
    counts = Counter(device["name"] for device in devices)
    return " and ".join(f"{count} × {name}" for name, count in counts.items())


def driver_version() -> dict:
    """``{"driver": version, "driver_source": where it came from}``.

    torch itself reports the CUDA version it was built for, not the driver's:
    the driver is asked through ``torch.cuda.driver_version`` where this torch
    has it, else NVML (the ``pynvml`` module of nvidia-ml-py), else
    ``nvidia-smi``; "unknown" if none answers.
    """
    for source, ask in (("torch.cuda.driver_version", _from_torch), ("pynvml", _from_nvml),
                        ("nvidia-smi", _from_nvidia_smi)):
        try:
            version = ask()
        except Exception:  # a missing module, library, program or GPU: try the next
            version = None
        if version:
            return {"driver": version, "driver_source": source}
    return {"driver": "unknown", "driver_source": "none"}


def _from_torch():
    ask = getattr(torch.cuda, "driver_version", None)
    return str(ask()) if callable(ask) else None


def _from_nvml():
    import pynvml

    pynvml.nvmlInit()
    try:
        version = pynvml.nvmlSystemGetDriverVersion()
    finally:
        pynvml.nvmlShutdown()
    return version.decode() if isinstance(version, bytes) else str(version)


def _from_nvidia_smi():
    program = shutil.which("nvidia-smi")
    if program is None:
        return None
    done = subprocess.run([program, "--query-gpu=driver_version", "--format=csv,noheader"],
                          capture_output=True, text=True, timeout=30)
    lines = done.stdout.strip().splitlines()
    return lines[0].strip() if done.returncode == 0 and lines else None


def nccl_version() -> str | None:
    """NCCL's version in this torch build (``'2.21.5'``), or None without one."""
    try:
        version = torch.cuda.nccl.version()
    except Exception:  # a CPU-only build has no NCCL
        return None
    return ".".join(map(str, version)) if isinstance(version, tuple) else str(version)

