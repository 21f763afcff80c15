"""The profiled DDP step of ``python -m ddp_lab.gpu_check`` (check ``ddp_step_profile``) and its picture.

On a CPU the same rank function runs with CPU activities only: the summary
has the step's phases and gloo's all-reduce calls, and no GPU stream. The
reduction of a GPU trace (streams, kinds, phases, overlap) is checked on a
small trace written here in the profiler's Chrome format, with the fields
torch's export gives a kernel (``args.stream``, ``args.correlation``) and
its launch (``cat: cuda_runtime``).
"""

import pytest

import ddp_lab
from ddp_lab.draw.gpu_profile import draw_step_profile
from ddp_lab.gpu_check.step_profile import (
    on_rank_profile_step,
    overlap_us,
    short_kernel_name,
    summarise_trace,
    with_communication_marked,
)


def test_a_profiled_step_on_cpu_ranks_has_its_phases_and_all_reduces():
    reports = ddp_lab.launch(on_rank_profile_step, 2, kwargs={"layers": 2, "width": 64, "batch": 8},
                             backend="gloo", timeout=120)
    for report in reports:
        assert [p["name"] for p in report["phases"]] == ["forward", "backward", "optimizer.step"]
        starts = [p["start_us"] for p in report["phases"]]
        assert starts[0] == 0.0 and starts == sorted(starts)
        assert report["collectives"] and {c["name"] for c in report["collectives"]} == {"gloo:all_reduce"}
        assert report["streams"] == [] and report["compute_stream"] is None and report["overlap_us"] == 0.0
        assert report["model"]["parameter_bytes"] == 4 * 2 * (64 * 64 + 64)


def kernel(name, stream, ts, dur, correlation, cat="kernel"):
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur,
            "args": {"stream": stream, "correlation": correlation}}


def launch_call(ts, correlation):
    return {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": ts, "dur": 2,
            "args": {"correlation": correlation}}


def marker(name, ts, dur):
    return {"ph": "X", "cat": "user_annotation", "name": name, "ts": ts, "dur": dur}


def gpu_trace():
    """A step at t = 1000 µs: forward 100 µs, backward 200, optimizer 50; compute on stream 7,
    an NCCL kernel on stream 20 that runs beside the last 30 µs of a backward kernel."""
    return {"traceEvents": [
        marker("forward", 1000, 100), marker("backward", 1100, 200), marker("optimizer.step", 1300, 50),
        marker("nccl:all_reduce", 1200, 10),
        launch_call(1010, 1), kernel("void gemm<float, 128>(float*, int)", 7, 1050, 40, 1),
        launch_call(1110, 2), kernel("void gemm<float, 128>(float*, int)", 7, 1150, 80, 2),
        launch_call(1205, 3), kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgs)", 20, 1200, 100, 3),
        launch_call(1210, 4), kernel("Memcpy DtoD (Device -> Device)", 7, 1240, 5, 4, cat="gpu_memcpy"),
        launch_call(1310, 5), kernel("multi_tensor_apply_kernel<...>", 7, 1320, 20, 5),
        {"ph": "i", "name": "an instant event, no duration", "ts": 1000},
    ]}


def test_a_gpu_trace_is_reduced_to_streams_kinds_and_phases():
    summary = summarise_trace(gpu_trace())
    assert summary["phases"] == [{"name": "forward", "start_us": 0.0, "dur_us": 100.0},
                                 {"name": "backward", "start_us": 100.0, "dur_us": 200.0},
                                 {"name": "optimizer.step", "start_us": 300.0, "dur_us": 50.0}]
    assert summary["collectives"] == [{"name": "nccl:all_reduce", "start_us": 200.0, "dur_us": 10.0}]
    assert summary["compute_stream"] == 7
    lanes = {lane["stream"]: lane["events"] for lane in summary["streams"]}
    assert [(e["kind"], e["phase"]) for e in lanes[7]] == [
        ("compute", "forward"), ("compute", "backward"), ("copy", "backward"), ("compute", "optimizer.step")]
    assert [(e["kind"], e["name"]) for e in lanes[20]] == [("nccl", "ncclDevKernel_AllReduce_Sum_f32_RING_LL")]
    # backward's kernel runs 150-230 µs, the NCCL kernel 200-300 µs: 30 µs side by side
    assert summary["overlap_us"] == 30.0


def test_overlap_counts_merged_intervals_once_and_ignores_copies_on_the_compute_stream():
    def event(kind, start, dur, phase="backward"):
        return {"kind": kind, "phase": phase, "start_us": start, "dur_us": dur}

    lanes = [{"stream": 7, "events": [event("compute", 0, 100), event("compute", 50, 100), event("copy", 0, 500)]},
             {"stream": 9, "events": [event("copy", 120, 100), event("copy", 130, 10)]}]
    assert overlap_us(lanes, 7) == 30.0  # compute 0-150 merged, copies 120-220 merged: 120-150
    assert overlap_us(lanes, None) == 0.0 and overlap_us([], None) == 0.0


def test_a_trace_without_the_step_markers_is_refused():
    with pytest.raises(ValueError, match="no 'forward' marker"):
        summarise_trace({"traceEvents": [kernel("k", 7, 0, 1, 1)]})


@pytest.mark.parametrize("name, short", [
    ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>(int, float*)",
     "at::native::vectorized_elementwise_kernel"),
    ("Memcpy DtoH (Device -> Pinned)", "Memcpy DtoH"),
    ("x" * 80, "x" * 59 + "…"),
])
def test_kernel_names_lose_their_templates_and_parameters(name, short):
    assert short_kernel_name(name) == short


def test_the_picture_has_a_row_per_stream_below_the_cpu_rows():
    marked = with_communication_marked(summarise_trace(gpu_trace()))
    assert [e["communication"] for lane in marked["streams"] for e in lane["events"]] == [
        False, False, False, False, True]  # the NCCL kernel alone; the copy is on the compute stream
    figure = draw_step_profile([marked], titles=["test trace"])
    ax = figure.axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["CPU", "all-reduce calls", "stream 7", "stream 20"]
    assert ax.get_title(loc="left") == "test trace"
    with pytest.raises(ValueError, match="1 titles for 2 summaries"):
        draw_step_profile([marked] * 2, titles=["one"])
