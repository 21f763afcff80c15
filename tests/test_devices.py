"""devices_for: every case, on a CPU-only machine, by injecting cuda_available."""

import pytest
import torch

from ddp_lab.devices import device_for, devices_for

cuda = torch.device


@pytest.mark.parametrize("local_rank", range(8))
def test_one_gpu_per_process_uses_cuda_local_rank(local_rank):
    assert devices_for(local_rank, cuda_available=True) == (cuda("cuda", local_rank),)
    assert device_for(local_rank, cuda_available=True) == cuda("cuda", local_rank)


def test_spanning_two_gpus_gives_pairs():
    """The second scenario of the notes: local rank 1 drives GPUs 2 and 3."""
    assert devices_for(0, 2, cuda_available=True) == (cuda("cuda:0"), cuda("cuda:1"))
    assert devices_for(1, 2, cuda_available=True) == (cuda("cuda:2"), cuda("cuda:3"))


@pytest.mark.parametrize("k", [1, 2, 3, 4, 8])
@pytest.mark.parametrize("local_rank", range(4))
def test_general_rule(local_rank, k):
    expected = tuple(cuda("cuda", local_rank * k + i) for i in range(k))
    assert devices_for(local_rank, k, cuda_available=True) == expected


@pytest.mark.parametrize("k", [1, 2, 4])
def test_without_cuda_every_device_is_the_cpu(k):
    assert devices_for(3, k, cuda_available=False) == (cuda("cpu"),) * k
    assert device_for(3, cuda_available=False) == cuda("cpu")


def test_default_asks_torch(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert devices_for(1) == (cuda("cpu"),)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    assert devices_for(1, 2) == (cuda("cuda:2"), cuda("cuda:3"))
    with pytest.raises(ValueError, match="sees only 4 GPU"):
        devices_for(4)


def test_injected_cuda_skips_the_gpu_count_unless_given():
    # pretending on a CPU-only machine: no count to check against
    assert devices_for(9, cuda_available=True) == (cuda("cuda:9"),)
    with pytest.raises(ValueError) as error:
        devices_for(2, 2, cuda_available=True, gpu_count=4)
    message = str(error.value)
    assert "local_rank=2 with gpus_per_process=2 needs cuda:4, cuda:5" in message
    assert "sees only 4 GPU(s): room for 2 process(es) per node" in message
    assert "--nproc_per_node" in message


def test_the_last_gpu_is_allowed():
    assert devices_for(3, cuda_available=True, gpu_count=4) == (cuda("cuda:3"),)
    assert devices_for(1, 2, cuda_available=True, gpu_count=4)[-1] == cuda("cuda:3")


@pytest.mark.parametrize(
    "args, named",
    [
        ((-1,), "local_rank must be at least 0, got -1"),
        ((1.0,), "local_rank must be a whole number (an int such as 0, 1, 2), got 1.0 of type float"),
        ((True,), "local_rank must be a whole number (an int such as 0, 1, 2), got True of type bool"),
        (("0",), "local_rank must be a whole number (an int such as 0, 1, 2), got '0' of type str"),
        ((0, 0), "gpus_per_process must be at least 1, got 0"),
        ((0, 2.0), "gpus_per_process must be a whole number (an int such as 1, 2, 4), got 2.0"),
    ],
)
@pytest.mark.parametrize("cuda_available", [True, False])
def test_invalid_inputs_are_named(args, named, cuda_available):
    with pytest.raises(ValueError) as error:
        devices_for(*args, cuda_available=cuda_available)
    assert named in str(error.value)


def test_device_for_validates_too():
    with pytest.raises(ValueError, match="local_rank must be at least 0, got -2"):
        device_for(-2, cuda_available=True)
