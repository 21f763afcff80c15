"""How large the text of every figure of the book is, as a reader sees it.

For each figure the book draws with ``ddp_lab.draw`` (and each control's
static picture, and each frame of the ring all-reduce animation) this draws
it again from representative inputs, the sizes the chapters use, and prints
the smallest text in CSS pixels at the size the figure is shown: its
natural width (the tight bounding box at the figure's dpi), scaled down to
the 725 px text column of a desktop where wider (``ddp_lab.draw.shown_text_px``).
The animation is measured in the 358 px column of a 390 px phone as well.

    python tools/measure_figures.py             # the table
    python tools/measure_figures.py --verbose   # and each figure's smallest texts

A figure is flagged ``SMALL`` below ``ddp_lab.draw.MIN_TEXT_PX`` (10 px).
Figures drawn with plain matplotlib in a notebook's own cells are not here:
``--notebook NB`` executes a copy of a notebook with every figure it shows
measured the same way (slow: the notebook runs in full).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))


def _collective_records():
    import torch

    from ddp_lab.collectives.before_after import CollectiveRecord

    def values(rank, n=2):
        return torch.arange(n, dtype=torch.float32) + 1 + 10 * rank

    broadcast = [CollectiveRecord("broadcast", r, 4, {"t": values(r)}, {"t": values(0)}, "src=0") for r in range(4)]
    gathered = tuple(values(r) for r in range(4))
    all_gather = [CollectiveRecord("all_gather", r, 4, {"t": values(r)}, {"tensor_list": gathered}, "")
                  for r in range(4)]
    total = sum(values(r) for r in range(4))
    all_reduce = [CollectiveRecord("all_reduce", r, 4, {"t": values(r)}, {"t": total}, "op=SUM") for r in range(4)]
    return {"05 broadcast": broadcast, "05 all_gather": all_gather, "05 all_reduce": all_reduce}


def _timeline(buckets):
    from ddp_lab.data_parallel.overlap_timeline import BackwardTimeline, Interval

    names = ["fc3", "fc2", "fc1"]
    layers = tuple(Interval(name, 0.010 * i, 0.010 * (i + 1)) for i, name in enumerate(names))
    if buckets == 1:
        return BackwardTimeline(0, 2, 25.0, layers, (Interval("bucket 0", 0.031, 0.050),),
                                (("fc3.bias", "fc3.weight", "fc2.bias", "fc2.weight", "fc1.bias", "fc1.weight"),),
                                (3000,), 0.051)
    spans = tuple(Interval(f"bucket {i}", 0.0101 + 0.01 * i, 0.016 + 0.01 * i) for i in range(3))
    contents = (("fc3.bias", "fc3.weight"), ("fc2.bias", "fc2.weight"), ("fc1.bias", "fc1.weight"))
    return BackwardTimeline(0, 2, 1.0, layers, spans, contents, (1000, 1000, 1000), 0.037)


def _fsdp_record(prefetch):
    from ddp_lab.data_parallel.fsdp import Span, StepRecord

    spans, t = [], 0.0
    for i, layer in enumerate(["0", "1", "2"]):
        spans.append(Span("all_gather", layer, t, t + 0.002, prefetched=prefetch and i > 0))
        spans.append(Span("gloo", layer, t, t + 0.0018, op="all_gather"))
        spans.append(Span("forward", layer, t + 0.002, t + 0.005))
        t += 0.005
    for layer in ["2", "1", "0"]:
        spans.append(Span("backward", layer, t, t + 0.006))
        spans.append(Span("reduce_scatter", layer, t + 0.006, t + 0.009))
        spans.append(Span("gloo", layer, t + 0.006, t + 0.0085, op="all_reduce"))
        t += 0.009
    phases = {"forward": (0.0, 0.015), "backward": (0.015, t), "step": (t, t + 0.003)}
    return StepRecord(0, 2, spans=tuple(spans), phases=phases)


def book_figures():
    """``[(name, thunk)]``: every ``ddp_lab.draw`` figure of the book, with inputs like the chapters'."""
    from ddp_lab.draw import collectives, fsdp_timeline, layout, memory, parallelism, shards, timeline, timings
    from ddp_lab.model_parallel.pipeline import pipeline_schedule
    from ddp_lab.topology import Topology

    figures = [
        ("02 draw_topology 2x4", lambda: layout.draw_topology(Topology(2, 4))),
        ("02 draw_topology 2x4 k=2", lambda: layout.draw_topology(Topology(2, 4, 2))),
        ("02 draw_topology 1x8", lambda: layout.draw_topology(Topology(1, 8))),
        ("02 draw_topology 2x8 k=4", lambda: layout.draw_topology(Topology(2, 8, 4))),
        ("02 draw_topology 16x8", lambda: layout.draw_topology(Topology(16, 8), max_nodes=4)),
        ("02/12 draw_reported_layout", lambda: layout.draw_reported_layout(
            [{"RANK": r, "LOCAL_RANK": r % 2, "WORLD_SIZE": 4, "GROUP_RANK": r // 2, "host": f"node{r // 2}",
              "pid": 4242 + r, "device": "cpu"} for r in range(4)], title="Reported by 4 processes")),
    ]
    for name, records in _collective_records().items():
        figures.append((name, lambda records=records: collectives.draw_collective(records)))
    from ddp_lab.bench.collectives import Timing

    rows = [Timing(c, 4, n, 2e-4 * k, (1e-4 * k, 2e-4 * k, 5e-4 * k))
            for c in ("send_recv", "broadcast", "all_reduce", "all_gather")
            for k, n in enumerate([2**j for j in range(12, 23, 2)], start=1)]
    epochs = [[list(range(r, 16, 4)) for r in range(4)] for _ in range(3)]
    figures += [
        ("04/05 draw_timings", lambda: timings.draw_timings(
            rows, y="busbw", band=True,
            title="bus bandwidth on 4 gloo ranks, this machine (band: slowest to fastest repeat)")),
        ("08 draw_timelines", lambda: timeline.draw_timelines([_timeline(1), _timeline(3), _timeline(3)])),
        ("09 draw_shard_runs", lambda: shards.draw_shard_runs(
            {"without set_epoch: the same shards in the same order every epoch": epochs,
             "with sampler.set_epoch(epoch) before each epoch": epochs}, 16)),
        ("15 draw_dataparallel_vs_ddp", lambda: parallelism.draw_dataparallel_vs_ddp(4)),
        ("15 draw_memory_cases", lambda: memory.draw_memory_cases([(1.5e9, 8), (7.5e9, 64), (70e9, 512)],
                                                                   capacity_gb=80)),
        ("15 draw_memory_vs_world_size", lambda: memory.draw_memory_vs_world_size(7.5e9, capacity_gb=80)),
        ("15 draw_pipeline_schedules", lambda: parallelism.draw_pipeline_schedules(stages=4, microbatches=8)),
        ("15 draw_tensor_parallel", lambda: parallelism.draw_tensor_parallel()),
        ("15c draw_pipeline_schedule P=2", lambda: parallelism.draw_pipeline_schedule(
            pipeline_schedule(2, 8, "1f1b"), title="1F1B, P = 2, M = 8")),
        ("15c draw_bubble_fractions", lambda: parallelism.draw_bubble_fractions(
            {("gpipe", 2): 0.39, ("gpipe", 4): 0.29, ("gpipe", 8): 0.26, ("gpipe", 16): 0.24,
             ("1f1b", 2): 0.385, ("1f1b", 4): 0.27, ("1f1b", 8): 0.25, ("1f1b", 16): 0.19}, stages=2,
            title="The bubble of each step, measured on 2 ranks, and the formula")),
        ("15b draw_fsdp_timelines", lambda: fsdp_timeline.draw_fsdp_timelines(
            [_fsdp_record(False), _fsdp_record(False), _fsdp_record(True)],
            titles=["FSDP's default", "reshard_after_forward=False", "forward prefetch"])),
    ]
    figures += _optional_figures()
    return figures


def _optional_figures():
    """Figures whose modules or inputs may be absent (a stored GPU run, Chapter 13b's module)."""
    found = []
    try:
        from ddp_lab.data import spirals
        from ddp_lab.draw.spirals import draw_spirals
        from ddp_lab.models import mlp

        found.append(("10 draw_spirals", lambda: draw_spirals(spirals(400, seed=0), mlp(), title="the model")))
    except ImportError:
        pass
    try:
        from ddp_lab.draw.gpu_profile import draw_step_profile
        from ddp_lab.gpu_check.report import _stored, layout_title, step_profiles
        from ddp_lab.gpu_check.step_profile import with_communication_marked

        for _, summaries in step_profiles(_stored(None))[:1]:
            found.append(("14 draw_step_profile", lambda summaries=summaries: draw_step_profile(
                [with_communication_marked(s) for s in summaries], titles=[layout_title(s) for s in summaries])))
    except ImportError:
        pass
    try:
        from ddp_lab.debugging.stragglers import RankTimes
        from ddp_lab.draw.hangs import draw_last_collectives, draw_wait_compute

        def entry(seq, op, sizes):
            return {"collective_seq_id": seq, "profiling_name": f"gloo:{op}", "input_sizes": sizes, "is_p2p": False}

        common = [entry(i, "all_reduce", [[16, 8]] if i % 2 else [[16]]) for i in range(1, 5)]
        dumps = {0: {"entries": common + [entry(5, "all_reduce", [[]])]},
                 1: {"entries": common + [entry(5, "barrier", [])]}}
        slow = [RankTimes(r, 1.0 if r == 2 else 0.01, 0.1 if r == 2 else 1.09, 10) for r in range(4)]
        found.append(("13b draw_last_collectives", lambda: draw_last_collectives(dumps)))
        found.append(("13b draw_wait_compute", lambda: draw_wait_compute({"slow rank 2": slow},
                                                                        stragglers={"slow rank 2": 2})))
    except ImportError:
        pass
    return found


def widget_figures():
    """Each control's static picture (its default state), captured where it is drawn."""
    import inspect

    from ddp_lab import widgets
    from ddp_lab.widgets import control

    captured = []
    original = control.figure_html
    default_dpi = inspect.signature(original).parameters["dpi"].default

    def capture(figure, **kwargs):
        result = original(figure, **kwargs)
        figure.set_dpi(kwargs.get("dpi", default_dpi))  # the picture's natural size: figure_html's dpi
        captured.append(figure)
        return result

    found = []
    for name in widgets.__all__:
        cls = getattr(widgets, name)
        if not (isinstance(cls, type) and issubclass(cls, control.Control)):
            continue

        def thunk(cls=cls):
            captured.clear()
            control.figure_html = capture
            for module in list(sys.modules.values()):
                if getattr(module, "figure_html", None) is original:
                    module.figure_html = capture
            try:
                cls().static_html()
            finally:
                for module in list(sys.modules.values()):
                    if getattr(module, "figure_html", None) is capture:
                        module.figure_html = original
            return captured[-1] if captured else None

        found.append((f"widget {name}", thunk))
    return found


def animation_frames():
    """The ring and naive all-reduce animations of Chapter 6, one frame at a time (needs 4 ranks)."""
    from ddp_lab.collectives.traced import run_traced_all_reduce
    from ddp_lab.draw import allreduce

    found = []
    for algorithm in ("naive", "ring"):
        run = run_traced_all_reduce(algorithm, world_size=4, length=8)
        for frame in range(len(run.traces[0].steps) + 1):
            def thunk(run=run, frame=frame):
                fig, ax = allreduce.new_axes()
                allreduce.draw_frame(run, frame, ax)
                return fig
            found.append((f"06 {algorithm} frame {frame}", thunk))
    return found


def measure(fig, column_px):
    from ddp_lab.draw import shown_text_px

    sizes = shown_text_px(fig, column_px=column_px)  # draws the figure, on an Agg canvas
    box = fig.get_tightbbox(fig.canvas.get_renderer())
    return (box.width + 0.2) * fig.dpi, sizes


def run_notebook(path, verbose):
    """Execute a copy of ``path`` with every displayed figure measured."""
    import nbformat
    from nbclient import NotebookClient

    out = tempfile.NamedTemporaryFile(suffix=".jsonl", delete=False).name
    hook = f"""
import json, matplotlib.backend_bases as _bb
from ddp_lab.draw import shown_text_px as _shown
_print = _bb.FigureCanvasBase.print_figure
def _measured(self, *args, **kwargs):
    sizes = _shown(self.figure)
    with open({out!r}, "a") as _f:
        _f.write(json.dumps({{"width": self.figure.get_figwidth() * self.figure.dpi, "sizes": sizes[:3]}}) + "\\n")
    return _print(self, *args, **kwargs)
_bb.FigureCanvasBase.print_figure = _measured
"""
    nb = nbformat.read(path, as_version=4)
    nb.cells.insert(0, nbformat.v4.new_code_cell(hook))
    NotebookClient(nb, timeout=600, resources={"metadata": {"path": os.path.dirname(os.path.abspath(path))}}).execute()
    with open(out) as lines:
        for index, line in enumerate(lines):
            row = json.loads(line)
            smallest = row["sizes"][0][0] if row["sizes"] else float("inf")
            print(f"{os.path.basename(path)} figure {index + 1}: {smallest:5.1f} px"
                  + (f"  {row['sizes']}" if verbose else ""))


def main(argv=None):
    from ddp_lab.draw import COLUMN_PX, MIN_TEXT_PX, PHONE_COLUMN_PX

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--verbose", action="store_true", help="list each figure's three smallest texts")
    parser.add_argument("--no-ranks", action="store_true", help="leave out the animation (it starts 4 ranks)")
    parser.add_argument("--notebook", nargs="*", default=[], help="execute these notebooks and measure their figures")
    args = parser.parse_args(argv)
    if args.notebook:
        for path in args.notebook:
            run_notebook(path, args.verbose)
        return 0
    entries = [(name, thunk, False) for name, thunk in book_figures() + widget_figures()]
    if not args.no_ranks:
        entries += [(name, thunk, True) for name, thunk in animation_frames()]
    print(f"{'figure':42} {'width':>6}  {'desktop':>7}  {'phone':>6}")
    small = 0
    for name, thunk, phone in entries:
        fig = thunk()
        if fig is None:
            continue
        width, sizes = measure(fig, COLUMN_PX)
        smallest = sizes[0][0] if sizes else float("inf")
        on_phone = measure(fig, PHONE_COLUMN_PX)[1][0][0] if phone and sizes else None
        worst = on_phone if phone else smallest
        flag = "  SMALL" if worst < MIN_TEXT_PX else ""
        small += bool(flag)
        phone_text = f"{on_phone:6.1f}" if on_phone is not None else ""
        print(f"{name:42} {width:6.0f}  {smallest:7.1f}  {phone_text:>6}{flag}")
        if args.verbose:
            print("    ", [(round(px, 1), text[:30]) for px, text in sizes[:3]])
        plt.close(fig)
    print(f"{small} of {len(entries)} figures have text under {MIN_TEXT_PX} px at the size shown")
    return 0


if __name__ == "__main__":
    sys.exit(main())
