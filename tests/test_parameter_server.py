"""The parameter-server average on real ranks: right values, bytes counted exactly."""

import pytest
import torch
import torch.distributed as dist

import ddp_lab
from ddp_lab import cost
from ddp_lab.collectives.parameter_server import (
    RankTraffic,
    all_reduce_average,
    parameter_server_average,
    parameter_server_traffic,
)


def both_averages(numel, root):
    rank = dist.get_rank()
    x = torch.arange(numel, dtype=torch.float32) + 100 * rank
    y = x.clone()
    traffic = parameter_server_average(x, root=root)
    all_reduce_average(y)
    return x, y, traffic


@pytest.mark.parametrize("world_size, root", [(2, 0), (4, 0), (3, 2)])
def test_same_average_as_all_reduce(world_size, root):
    results = ddp_lab.launch(both_averages, world_size, args=(5, root), backend="gloo")
    expected = torch.arange(5, dtype=torch.float32) + 100 * (world_size - 1) / 2
    for rank, (x, y, traffic) in enumerate(results):
        assert torch.allclose(x, expected) and torch.allclose(y, expected)
        assert traffic == parameter_server_traffic(20, world_size, root)[rank]


def test_the_server_carries_w_minus_1_times_the_traffic():
    traffic = parameter_server_traffic(1000, 4)
    assert traffic[0] == RankTraffic(0, sent=3000, received=3000)
    assert traffic[1:] == [RankTraffic(r, 1000, 1000) for r in (1, 2, 3)]
    # a ring all-reduce sends 2(W-1)/W of the tensor from every rank
    assert cost.bytes_sent_per_rank("all_reduce", 1000, 4) == 1500
    assert max(t.sent for t in traffic) / cost.bytes_sent_per_rank("all_reduce", 1000, 4) == 2


def test_bad_root():
    with pytest.raises(ValueError, match="root must be a rank from 0 to 3, got 4"):
        parameter_server_traffic(10, 4, root=4)
