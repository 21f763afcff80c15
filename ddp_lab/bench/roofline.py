"""This machine's roofline, measured: matmul FLOP/s across sizes, and memory bandwidth (Chapter 14b).

One process, no ranks. For each number format and each size ``n`` it
times three matrix products of the same ``2 n^3`` FLOPs, ``n x n @ n x n``,
``2n x n @ n x n/2`` and ``n/2 x 2n @ 2n x n``, several times each, and keeps
the best rate: the roof is what the machine *can* reach, and a slower
repeat only says that something else was running. The memory slope is a
copy of ``copy_bytes`` bytes from one buffer to another, which reads and
writes each byte once: ``2 x copy_bytes / seconds``.

On a GPU each timing covers ``calls`` products queued back to back between
two CUDA events, so that the launch of each kernel (a few microseconds) is
hidden behind the one before it, as in a training step; the copy is 1 GiB,
well past the GPU's L2 cache. The formats there are fp32 (TF32 switched
off), ``tf32`` (fp32 tensors, the tensor cores' TF32 products switched on
with ``torch.backends.cuda.matmul.allow_tf32``), bf16 and fp16. TF32 is a
mode of NVIDIA's tensor cores: a CPU record leaves it out.

The result is a small JSON-able record, the same for a CPU and a GPU, so
that a GPU run (``python -m ddp_lab.bench roofline --device cuda --out
gpu_roofline.json``) is one more file for :func:`ddp_lab.draw.roofline.roofline_figure`:

    {"device": "...", "kind": "cpu" | "cuda", "torch": "2.x", "threads": 2,
     "bandwidth": bytes/s, "copy_bytes": N,
     "formats": {"float32": {"sizes": [...], "flops": [...]}, "bfloat16": {...}}}

    python -m ddp_lab.bench roofline [--sizes 64 128 256 512 1024] [--repeats 3]
                                     [--threads N] [--device cpu|cuda] [--out FILE]

(on ``--device cuda`` the sizes default to 256 to 8192 and the formats to
all four of ``GPU_FORMATS``)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os

import torch

from ddp_lab.bench.timing import elapsed_seconds
from ddp_lab.host import cpu_model
from ddp_lab.validate import check_choice, check_positive_int

__all__ = ["measure_roofline", "shapes_of_size", "save_record", "load_record", "main"]

FORMATS = ("float32", "bfloat16")  # what a CPU record holds (Chapter 14b's page)
SIZES = (64, 128, 256, 512, 1024)
GPU_FORMATS = ("float32", "tf32", "bfloat16", "float16")
GPU_SIZES = (256, 512, 1024, 2048, 4096, 8192)
GPU_COPY_BYTES = 2**30
GPU_CALLS = 10  # products queued back to back per timing on a GPU
RECORD_KEYS = ("device", "kind", "torch", "threads", "bandwidth", "copy_bytes", "formats")


def shapes_of_size(n: int) -> list[tuple[int, int, int]]:
    """Three ``(m, k, n)`` products of ``2 n^3`` FLOPs each, square and two oblong.

    >>> shapes_of_size(64)
    [(64, 64, 64), (128, 64, 32), (32, 128, 64)]
    """
    check_positive_int("n", n)
    if n % 2:
        raise ValueError(f"n={n} must be even: the oblong shapes halve it")
    return [(n, n, n), (2 * n, n, n // 2), (n // 2, 2 * n, n)]


def _device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return cpu_model()


def _best_seconds(run, device, repeats, calls=None):
    """The best of ``repeats`` timings of ``calls`` runs back to back, per run.

    ``calls`` defaults to ``GPU_CALLS`` on a GPU (launches queued behind each
    other) and to 1 on a CPU, where a call runs before the next one starts.
    """
    calls = calls or (GPU_CALLS if device.type == "cuda" else 1)
    run()  # warm-up: first calls allocate and choose kernels

    def runs():
        for _ in range(calls):
            run()

    return min(elapsed_seconds(runs, device) for _ in range(repeats)) / calls


@contextlib.contextmanager
def _tensor_cores_in_tf32(allowed: bool):
    """fp32 products on a GPU with TF32 allowed (``tf32``) or not (``float32``), as before after."""
    before = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = allowed
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before


def _matmul_rate(n, name, device, repeats, generator):
    dtype = torch.float32 if name == "tf32" else getattr(torch, name)
    best = 0.0
    for m, k, p in shapes_of_size(n):
        a = torch.randn(m, k, generator=generator).to(device=device, dtype=dtype)
        b = torch.randn(k, p, generator=generator).to(device=device, dtype=dtype)
        out = torch.empty(m, p, device=device, dtype=dtype)
        with _tensor_cores_in_tf32(name == "tf32"):
            seconds = _best_seconds(lambda: torch.mm(a, b, out=out), device, repeats)
        best = max(best, 2 * m * k * p / seconds)
    return best


def measure_roofline(sizes=SIZES, formats=FORMATS, repeats: int = 3,
                     copy_bytes: int = 64 * 2**20, device: str = "cpu") -> dict:
    """Measure this machine's roofline: the record described in the module's docstring.

    ``formats`` the number formats to time, of ``GPU_FORMATS`` (a format
    the device cannot multiply in, TF32 on a CPU for one, is left out of
    the record); ``repeats`` timings per shape, after one untimed call; ``copy_bytes`` the size of the copy that
    measures the memory bandwidth (larger than the caches, or the caches
    are what it measures). On a CPU the threads are torch's current
    setting (``torch.set_num_threads``), written into the record.
    """
    sizes = [check_positive_int("size", size) for size in sizes]
    for name in formats:
        check_choice("format", name, GPU_FORMATS)
    check_positive_int("repeats", repeats)
    check_positive_int("copy_bytes", copy_bytes)
    check_choice("device", device, ("cpu", "cuda"))
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("device='cuda' needs a CUDA GPU, and torch.cuda.is_available() is False here: "
                         "measure with device='cpu'")
    place = torch.device("cuda", torch.cuda.current_device()) if device == "cuda" else torch.device("cpu")
    generator = torch.Generator().manual_seed(0)
    record = {"device": _device_name(place), "kind": place.type, "torch": torch.__version__,
              "threads": torch.get_num_threads(), "copy_bytes": copy_bytes, "formats": {}}
    for name in formats:
        if name == "tf32" and place.type != "cuda":
            continue  # a mode of NVIDIA's tensor cores
        try:
            rates = [_matmul_rate(n, name, place, repeats, generator) for n in sizes]
        except RuntimeError:  # no matmul kernel for this format here
            continue
        record["formats"][name] = {"sizes": sizes, "flops": rates}
    source = torch.empty(copy_bytes, dtype=torch.uint8, device=place).fill_(1)
    target = torch.empty_like(source)
    record["bandwidth"] = 2 * copy_bytes / _best_seconds(lambda: target.copy_(source), place, repeats)
    return record


def save_record(record: dict, path) -> None:
    """Write a record as JSON (a GPU's for issue 43's results, a CPU's for comparison)."""
    missing = [key for key in RECORD_KEYS if key not in record]
    if missing:
        raise ValueError(f"not a roofline record: it lacks {', '.join(missing)}")
    with open(path, "w") as file:
        json.dump(record, file, indent=1)


def load_record(path) -> dict:
    """Read a record written by :func:`save_record`, refusing a file that is not one."""
    with open(path) as file:
        record = json.load(file)
    missing = [key for key in RECORD_KEYS if key not in record]
    if missing:
        raise ValueError(f"{os.fspath(path)} is not a roofline record: it lacks {', '.join(missing)}")
    return record


def main(argv=None):
    """``python -m ddp_lab.bench roofline``: measure, print, and optionally save the record."""
    parser = argparse.ArgumentParser(prog="python -m ddp_lab.bench roofline",
                                     description="matmul FLOP/s across sizes and memory bandwidth")
    parser.add_argument("--sizes", type=int, nargs="+", default=None,
                        help="matrix sizes n (default 64 to 1024; on cuda 256 to 8192)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (CPU)")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--out", default=None, help="write the record to this JSON file")
    args = parser.parse_args(argv)
    if args.threads is not None:
        torch.set_num_threads(check_positive_int("threads", args.threads))
    try:
        if args.device == "cuda":
            record = measure_roofline(args.sizes or GPU_SIZES, GPU_FORMATS, repeats=args.repeats,
                                      copy_bytes=GPU_COPY_BYTES, device="cuda")
        else:
            record = measure_roofline(args.sizes or SIZES, repeats=args.repeats)
    except ValueError as error:  # a bad size or repeat count, or no GPU: said before anything runs
        parser.error(str(error))
    print(f"{record['device']} ({record['kind']}, {record['threads']} threads, torch {record['torch']})")
    print(f"memory: {record['bandwidth'] / 1e9:.1f} GB/s (copy of {record['copy_bytes']:,} bytes)")
    for name, rows in record["formats"].items():
        for n, rate in zip(rows["sizes"], rows["flops"]):
            print(f"{name:>9} n={n:<6} {rate / 1e9:10.1f} GFLOP/s")
    if args.out:
        save_record(record, args.out)
        print(f"wrote {args.out}")
    return record
