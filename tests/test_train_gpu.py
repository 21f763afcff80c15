"""train.py on GPUs: nccl with one GPU per process, and a process spanning two GPUs.

Each test skips, saying why, where the machine has too few GPUs; on a GPU
machine they run (Chapter 14's quick start: ``pytest tests/test_train_gpu.py``).
"""

from pathlib import Path

import pytest
import torch

from ddp_lab.cluster.torchrun import run_torchrun

TRAIN = Path(__file__).resolve().parents[1] / "labs" / "scripts" / "train.py"
GPUS = torch.cuda.device_count()
SHORT = ["--epochs", "1", "--samples", "256"]


@pytest.mark.skipif(GPUS < 1, reason=f"needs a CUDA GPU; this machine has {GPUS}")
def test_one_gpu_per_process_with_nccl(tmp_path):
    nproc = min(GPUS, 2)
    run = run_torchrun(TRAIN, [*SHORT, "--snapshot", tmp_path / "s.pt", "--final", tmp_path / "f.pt"],
                       nproc_per_node=nproc, timeout=300)
    assert run.ok, run.tail()
    assert run.rank_lines(0)[0] == f"[rank 0] restart 0: WORLD_SIZE={nproc}, backend nccl, devices cuda:0"
    weights = torch.load(tmp_path / "f.pt", map_location="cpu", weights_only=True)
    assert set(weights) == {"stage1.0.weight", "stage1.0.bias", "stage2.0.weight", "stage2.0.bias",
                            "stage2.2.weight", "stage2.2.bias"}


@pytest.mark.skipif(GPUS < 2, reason=f"a process spanning two GPUs needs 2 GPUs; this machine has {GPUS}")
def test_process_spanning_two_gpus(tmp_path):
    nproc = GPUS // 2
    run = run_torchrun(TRAIN, [*SHORT, "--gpus-per-process", "2", "--snapshot", tmp_path / "s.pt"],
                       nproc_per_node=nproc, timeout=300)
    assert run.ok, run.tail()
    assert run.rank_lines(0)[0] == (f"[rank 0] restart 0: WORLD_SIZE={nproc}, backend nccl, "
                                    f"devices cuda:0,cuda:1")
    assert run.rank_lines(0)[-1] == "[rank 0] done: {} steps".format(-(-256 // (16 * nproc)))


@pytest.mark.skipif(GPUS >= 4, reason=f"this machine has {GPUS} GPUs: every process gets its pair")
def test_nccl_without_enough_gpus_stops_with_a_clear_message(tmp_path):
    # 2 processes x 2 GPUs need 4 GPUs: with fewer (none included), --backend nccl must say so.
    run = run_torchrun(TRAIN, [*SHORT, "--gpus-per-process", "2", "--backend", "nccl",
                               "--snapshot", tmp_path / "s.pt"], nproc_per_node=2, timeout=300)
    assert not run.ok
    assert "--backend nccl needs 4 GPU(s) on this node" in run.stderr
