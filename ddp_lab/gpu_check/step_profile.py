"""One DDP training step under ``torch.profiler``: what ran on which GPU stream, and when.

Chapter 8 draws DDP's overlap from a model (buckets become ready during
``backward()`` and are all-reduced while it goes on); this check records it
on a real GPU. Each rank runs a few warm-up steps of an MLP wrapped in
``DistributedDataParallel``, then one step inside ``torch.profiler.profile``
with CPU and CUDA activities. The trace is exported in the Chrome trace
format (the profiler's documented export, ``export_chrome_trace``) and
reduced to a small summary that the results file keeps:

* ``phases``: the step's forward, backward and optimizer step, as the CPU
  saw them (``record_function`` markers placed here);
* ``collectives``: the all-reduces DDP issued (the backend's own
  ``nccl:all_reduce`` / ``gloo:all_reduce`` markers), on the CPU;
* ``streams``: every GPU kernel, copy and memset, by CUDA stream, each
  classed as ``compute``, ``nccl`` (an NCCL kernel) or ``copy``;
* ``overlap_us``: how long communication work on the GPU (NCCL kernels and
  copies off the compute stream) ran while backward's compute kernels were
  still running.

All times are microseconds from the start of the step's forward. Two
layouts fit one GPU: nccl with one rank per GPU, and gloo with two ranks
sharing ``cuda:0`` (Colab's case: gloo stages CUDA tensors through host
memory on a stream of its own). Used by ``python -m ddp_lab.gpu_check``
(check ``ddp_step_profile``); Chapter 14 draws the summary. On a CPU the
same code runs with CPU activities only, which is how the tests check it.
"""

from __future__ import annotations

import json
import os
import tempfile

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

from ddp_lab.host import uses_nccl

__all__ = ["MODEL", "on_rank_profile_step", "summarise_trace", "compute_stream", "is_communication",
           "with_communication_marked", "overlap_us",
           "short_kernel_name", "ddp_step_profile"]

# 8 square layers of 2048: 16 MiB of float32 weights each, 128 MiB in all,
# so that DDP's 25 MiB buckets make several all-reduces per step.
MODEL = {"layers": 8, "width": 2048, "batch": 1024}
PHASES = ("forward", "backward", "optimizer.step")
GPU_CATEGORIES = {"kernel": "compute", "gpu_memcpy": "copy", "gpu_memset": "copy"}
MAX_EVENTS = 600  # per summary: enough for one step of MODEL, small enough for the results file


def build_model(layers, width):
    blocks = []
    for _ in range(layers):
        blocks += [nn.Linear(width, width), nn.ReLU()]
    return nn.Sequential(*blocks[:-1])


def on_rank_profile_step(layers=MODEL["layers"], width=MODEL["width"], batch=MODEL["batch"], warmup=3,
                         device=None):
    """Inside each rank: warm up, profile one DDP step, return this rank's summary.

    ``device``: ``"cuda:0"`` to share one GPU between the ranks (gloo);
    None for ``cuda:LOCAL_RANK`` under nccl, else the CPU.
    """
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.profiler import ProfilerActivity, profile, record_function

    rank, local_rank = dist.get_rank(), int(os.environ.get("LOCAL_RANK", 0))
    if device is None:
        device = f"cuda:{local_rank}" if uses_nccl(dist.get_backend()) else "cpu"
    device = torch.device(device)
    torch.manual_seed(0)
    model = build_model(layers, width).to(device)
    ddp = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=1e-3)
    data = torch.Generator().manual_seed(1 + rank)
    x = torch.randn(batch, width, generator=data).to(device)
    y = torch.randn(batch, width, generator=data).to(device)

    def step():
        with record_function("forward"):
            loss = F.mse_loss(ddp(x), y)
        with record_function("backward"):
            loss.backward()  # DDP's hooks all-reduce each bucket as it becomes ready
        with record_function("optimizer.step"):
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

    for _ in range(warmup):
        step()
    synchronize(device)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    # one cycle only; acc_events=True keeps torch 2.11 with CUDA from warning that a
    # second cycle would clear the first one's events (torch/profiler/profiler.py)
    with profile(activities=activities, acc_events=True) as prof:
        step()
        synchronize(device)
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "trace.json")
        prof.export_chrome_trace(path)
        with open(path) as file:
            trace = json.load(file)
    summary = summarise_trace(trace)
    parameters = sum(p.numel() * p.element_size() for p in model.parameters())
    return {"rank": rank, "backend": dist.get_backend(), "world_size": dist.get_world_size(),
            "device": str(device), "model": {"layers": layers, "width": width, "batch": batch,
                                             "parameter_bytes": parameters},
            "torch": torch.__version__, **summary}


def synchronize(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def short_kernel_name(name, limit=60):
    """A kernel's name without its template arguments and parameter list, at most ``limit`` characters."""
    for opener in ("<", "("):
        if opener in name:
            name = name.split(opener, 1)[0]
    name = name.removeprefix("void ").strip()
    return name if len(name) <= limit else name[: limit - 1] + "…"


def summarise_trace(trace):
    """The summary of one profiled step from a Chrome trace (a dict, as ``export_chrome_trace`` writes it)."""
    events = [e for e in trace.get("traceEvents", []) if e.get("ph") == "X" and "ts" in e]
    phases = {e["name"]: e for e in events if e.get("name") in PHASES and e.get("cat") == "user_annotation"}
    if "forward" not in phases:
        raise ValueError("the trace holds no 'forward' marker: it is not a trace of on_rank_profile_step")
    origin = float(phases["forward"]["ts"])

    def span(event):
        return {"start_us": round(float(event["ts"]) - origin, 1), "dur_us": round(float(event.get("dur", 0)), 1)}

    collectives = [{"name": e["name"], **span(e)} for e in events
                   if e.get("cat") == "user_annotation" and e["name"].endswith(":all_reduce")]
    launched_at = {(e.get("args") or {}).get("correlation"): float(e["ts"]) for e in events
                   if e.get("cat") in ("cuda_runtime", "cuda_driver")}
    streams = {}
    for e in events:
        kind = GPU_CATEGORIES.get(e.get("cat"))
        if kind is None:
            continue
        if kind == "compute" and e["name"].lower().startswith("nccl"):
            kind = "nccl"
        args = e.get("args") or {}
        launch = launched_at.get(args.get("correlation"))
        streams.setdefault(args.get("stream", e.get("tid")), []).append(
            {"kind": kind, "name": short_kernel_name(e["name"]), "phase": phase_at(launch, phases), **span(e)})
    lanes = [{"stream": s, "events": sorted(v, key=lambda ev: ev["start_us"])} for s, v in sorted(streams.items())]
    kept = sum(len(lane["events"]) for lane in lanes)
    if kept > MAX_EVENTS:
        raise ValueError(f"the step ran {kept} GPU events, more than the {MAX_EVENTS} a summary keeps")
    compute = compute_stream(lanes)
    return {"phases": [{"name": n, **span(phases[n])} for n in PHASES if n in phases],
            "collectives": sorted(collectives, key=lambda c: c["start_us"]),
            "streams": lanes, "compute_stream": compute, "overlap_us": overlap_us(lanes, compute)}


def phase_at(ts, phases):
    """The phase whose CPU span holds ``ts`` (a kernel's launch), or None."""
    if ts is None:
        return None
    for name, event in phases.items():
        if float(event["ts"]) <= ts <= float(event["ts"]) + float(event.get("dur", 0)):
            return name
    return None


def compute_stream(lanes):
    """The stream that ran the most compute kernels (the default stream, in a DDP step), or None."""
    if not lanes:
        return None
    return max(lanes, key=lambda lane: sum(e["kind"] == "compute" for e in lane["events"]))["stream"]


def is_communication(event, stream, compute):
    """An NCCL kernel, or a copy on a stream other than the compute stream (gloo's staging copies)."""
    return event["kind"] == "nccl" or (event["kind"] == "copy" and stream != compute)


def with_communication_marked(summary):
    """A copy of ``summary`` in which every GPU event says whether it is communication
    (``is_communication``), as ``ddp_lab.draw.gpu_profile`` colours it."""
    lanes = [{**lane, "events": [{**e, "communication": is_communication(e, lane["stream"], summary["compute_stream"])}
                                  for e in lane["events"]]} for lane in summary["streams"]]
    return {**summary, "streams": lanes}


def overlap_us(lanes, compute):
    """Microseconds during which communication ran on the GPU (``is_communication``)
    while backward's compute kernels ran on the compute stream.

    Backward's kernels are those launched (``cudaLaunchKernel``, matched to the
    kernel by the trace's correlation id) inside the CPU's backward marker.
    Intervals are merged first, so nothing is counted twice.
    """
    busy = merge([(e["start_us"], e["start_us"] + e["dur_us"]) for lane in lanes if lane["stream"] == compute
                  for e in lane["events"] if e["kind"] == "compute" and e["phase"] == "backward"])
    talking = merge([(e["start_us"], e["start_us"] + e["dur_us"]) for lane in lanes for e in lane["events"]
                     if is_communication(e, lane["stream"], compute)])
    total = 0.0
    for a, b in busy:
        for c, d in talking:
            total += max(0.0, min(b, d) - max(a, c))
    return round(total, 1)


def merge(intervals):
    merged = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


# --- the check ------------------------------------------------------------------------


def ddp_step_profile(gpus, options):
    """The check: profile a DDP step with nccl (one rank per GPU) and with gloo (two ranks on cuda:0)."""
    import ddp_lab
    from ddp_lab.gpu_check.runner import Finding, expect

    layouts = {"nccl": ddp_lab.launch(on_rank_profile_step, gpus, backend="nccl", timeout=options.timeout),
               "gloo_shared_gpu": ddp_lab.launch(on_rank_profile_step, 2, kwargs={"device": "cuda:0"},
                                                 backend="gloo", timeout=options.timeout)}
    said = []
    for name, reports in layouts.items():
        first = reports[0]
        kinds = [e["kind"] for lane in first["streams"] for e in lane["events"]]
        expect("compute" in kinds, f"{name}: the profiler recorded no GPU kernel on rank 0")
        backward = next(p for p in first["phases"] if p["name"] == "backward")
        said.append(f"{name} ({first['world_size']} rank(s)): {kinds.count('compute')} compute kernels, "
                    f"{kinds.count('nccl')} NCCL kernels, {kinds.count('copy')} copies on "
                    f"{len(first['streams'])} stream(s); {len(first['collectives'])} all-reduces; backward "
                    f"{backward['dur_us'] / 1e3:.2f} ms on the CPU; {first['overlap_us'] / 1e3:.2f} ms of "
                    f"communication beside backward's kernels")
    return Finding("; ".join(said), {name: reports[0] for name, reports in layouts.items()})
