"""The roofline of Chapter 14b: ddp_lab.cost.roofline (arithmetic), ddp_lab.bench.roofline
(measuring, one process) and ddp_lab.draw.roofline (the figures)."""

import json
import subprocess
import sys

import pytest
import torch

from ddp_lab.cost import roofline as rl


@pytest.mark.parametrize("m,k,n,b", [(64, 64, 64, 4), (4096, 768, 384, 2), (1, 4096, 4096, 2)])
def test_matmul_intensity_is_set_by_the_smallest_side(m, k, n, b):
    assert rl.matmul_flops(m, k, n) == 2 * m * k * n
    assert rl.matmul_bytes(m, k, n, b) == (m * k + k * n + m * n) * b
    assert rl.matmul_intensity(m, k, n, b) == pytest.approx((2 / b) / (1 / m + 1 / k + 1 / n))


def test_ridge_and_roof():
    h100, h200 = rl.ACCELERATORS["h100"], rl.ACCELERATORS["h200"]
    assert h100.peak["bf16"] == 989e12 and h100.bandwidth == 3.35e12 and h200.bandwidth == 4.8e12
    assert round(h100.ridge("bf16")) == 295 and round(h200.ridge("bf16")) == 206
    assert h100.ridge("fp8") == pytest.approx(2 * h100.ridge("bf16"), rel=1e-3)
    assert rl.attainable_flops(1.0, 989e12, 3.35e12) == 3.35e12
    assert rl.attainable_flops(1e4, 989e12, 3.35e12) == 989e12
    assert rl.memory_bound(rl.elementwise_intensity(1, 2, 1, 2), 989e12, 3.35e12)
    with pytest.raises(ValueError, match="number_format must be one of 'bf16', 'fp8'; got 'fp4'"):
        h100.ridge("fp4")


def test_tensor_parallelism_slides_the_mlp_towards_the_ridge():
    ridge = rl.ACCELERATORS["h100"].ridge("bf16")
    rows = [rl.tensor_parallel_mlp(8192, 768, 3072, t, 2) for t in (1, 2, 4, 8)]
    assert [r["up"]["flops"] for r in rows] == [rows[0]["up"]["flops"] // t for t in (1, 2, 4, 8)]
    assert all(r["up"]["intensity"] == r["down"]["intensity"] for r in rows)
    intensities = [r["up"]["intensity"] for r in rows]
    assert intensities == sorted(intensities, reverse=True)
    assert [x < ridge for x in intensities] == [False, False, False, True]
    with pytest.raises(ValueError, match="ffn = 3072 must be divisible by degree = 5"):
        rl.tensor_parallel_mlp(8192, 768, 3072, 5, 2)


def test_the_roofline_bounds_mfu_below_one_and_published_runs_sit_far_below_it():
    bound = rl.layer_mfu_bound(4096, 8192, 28672, 2, 989e12, 3.35e12)
    assert 0.9 < bound < 1
    assert rl.layer_mfu_bound(4096, 768, 3072, 2, 989e12, 3.35e12) < bound
    assert all(0 < low <= high < bound and source for low, high, source in rl.PUBLISHED_MFU.values())


@pytest.fixture(scope="module")
def record():
    from ddp_lab.bench.roofline import measure_roofline

    return measure_roofline(sizes=(8, 16), repeats=1, copy_bytes=2**20)


def test_a_measured_record_is_small_and_json_able(record, tmp_path):
    from ddp_lab.bench.roofline import RECORD_KEYS, load_record, save_record

    assert set(record) == set(RECORD_KEYS) and record["kind"] == "cpu"
    assert sorted(record["formats"]) == ["bfloat16", "float32"]
    for rows in record["formats"].values():
        assert rows["sizes"] == [8, 16] and all(rate > 0 for rate in rows["flops"])
    assert record["bandwidth"] > 0 and record["copy_bytes"] == 2**20
    save_record(record, tmp_path / "cpu.json")
    assert load_record(tmp_path / "cpu.json") == json.loads(json.dumps(record))
    (tmp_path / "other.json").write_text('{"device": "x"}')
    with pytest.raises(ValueError, match="is not a roofline record: it lacks kind"):
        load_record(tmp_path / "other.json")


def test_shapes_of_one_size_do_the_same_work():
    from ddp_lab.bench.roofline import measure_roofline, shapes_of_size

    assert {rl.matmul_flops(*shape) for shape in shapes_of_size(96)} == {2 * 96**3}
    with pytest.raises(ValueError, match="n=7 must be even"):
        shapes_of_size(7)
    with pytest.raises(ValueError, match="format must be one of 'float32', 'tf32', 'bfloat16', 'float16'; "
                                         "got 'int8'"):
        measure_roofline(sizes=(8,), formats=("int8",))


def test_tf32_is_left_out_of_a_cpu_record_and_float16_measured():
    from ddp_lab.bench.roofline import measure_roofline

    record = measure_roofline(sizes=(8,), formats=("float32", "tf32", "float16"), repeats=1, copy_bytes=2**16)
    assert sorted(record["formats"]) == ["float16", "float32"]  # TF32 is a mode of NVIDIA's tensor cores
    from ddp_lab.draw.roofline import roofline_figure

    legend = [text.get_text() for text in roofline_figure(record).axes[0].get_legend().get_texts()]
    assert legend == ["CPU, float32: best matmul and copy", "CPU, float16: best matmul and copy"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without a GPU")
def test_cuda_without_a_gpu_is_refused_before_anything_is_measured():
    from ddp_lab.bench.roofline import measure_roofline

    with pytest.raises(ValueError, match="device='cuda' needs a CUDA GPU"):
        measure_roofline(sizes=(8,), device="cuda")
    command = subprocess.run([sys.executable, "-m", "ddp_lab.bench", "roofline", "--device", "cuda"],
                             capture_output=True, text=True, timeout=120)
    assert command.returncode == 2 and "Traceback" not in command.stderr, command.stderr
    assert "error: device='cuda' needs a CUDA GPU" in command.stderr


def test_a_timing_covers_calls_back_to_back_and_gives_the_time_of_one():
    from ddp_lab.bench.roofline import _best_seconds

    runs = []
    seconds = _best_seconds(lambda: runs.append(1), torch.device("cpu"), repeats=2, calls=5)
    assert len(runs) == 1 + 2 * 5 and seconds >= 0  # one warm-up, then two timings of five


def test_the_tf32_switch_is_set_for_the_products_and_restored_after():
    from ddp_lab.bench.roofline import _tensor_cores_in_tf32

    before = torch.backends.cuda.matmul.allow_tf32
    for allowed in (True, False):
        with _tensor_cores_in_tf32(allowed):
            assert torch.backends.cuda.matmul.allow_tf32 is allowed
        assert torch.backends.cuda.matmul.allow_tf32 == before


def test_the_figure_takes_a_gpu_record_beside_the_cpu_one(record):
    from ddp_lab.draw import smallest_shown_px
    from ddp_lab.draw.roofline import datasheet_figure, roofline_figure

    gpu = dict(record, kind="cuda", device="NVIDIA H100 80GB HBM3")
    fig = roofline_figure([record, gpu], marks=[("a + b", 1 / 12)])
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert len(labels) == 4 and any(label.startswith("NVIDIA H100") for label in labels)
    assert smallest_shown_px(fig) >= 10
    fig = datasheet_figure(rl.ACCELERATORS.values(), [("t = 8", 248.2)])
    assert smallest_shown_px(fig) >= 10


def test_the_bench_command_lists_and_runs_the_roofline(capsys):
    from ddp_lab.bench.__main__ import main

    record = main(["roofline", "--sizes", "8", "--repeats", "1"])
    out = capsys.readouterr().out
    assert "memory:" in out and "GFLOP/s" in out and record["formats"]["float32"]["sizes"] == [8]
