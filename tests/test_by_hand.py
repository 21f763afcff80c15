"""Data parallelism by hand on real gloo ranks: with the all-reduce, W ranks
train exactly like one process on the global batch; without it they drift."""

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F

import ddp_lab
from ddp_lab.data import global_batches, spirals
from ddp_lab.data_parallel.by_hand import (
    average_gradients,
    broadcast_parameters,
    data_parallel_step,
    replica_spread,
    sgd_step,
    shard,
)
from ddp_lab.models import flat_parameters, mlp

STEPS, BATCH, LR = 8, 48, 0.2


def single_process(batches):
    model = mlp(seed=0)
    for x, y in batches:
        F.cross_entropy(model(x), y).backward()
        sgd_step(model, LR)
    return flat_parameters(model)


def on_ranks(batches, sync):
    rank = dist.get_rank()
    model = mlp(seed=0 if rank == 0 else 100 + rank)  # different replicas until the broadcast
    broadcast_parameters(model)
    spreads = []
    for x, y in batches:
        data_parallel_step(model, x, y, lr=LR, sync=sync)
        spreads.append(replica_spread(model))
    return flat_parameters(model), spreads


@pytest.fixture(scope="module")
def batches():
    return global_batches(spirals(240, seed=1), BATCH, STEPS, seed=2)


@pytest.mark.parametrize("world_size", [2, 4])
def test_with_sync_w_ranks_equal_one_process_on_the_global_batch(batches, world_size):
    expected = single_process(batches)
    results = ddp_lab.launch(on_ranks, world_size, args=(batches, True), backend="gloo")
    for weights, spreads in results:
        assert torch.allclose(weights, expected, rtol=0, atol=1e-5)
        assert spreads == [0.0] * STEPS  # replicas bitwise identical after every step


def test_without_sync_the_replicas_drift_apart(batches):
    expected = single_process(batches)
    results = ddp_lab.launch(on_ranks, 2, args=(batches, False), backend="gloo")
    spreads = results[0][1]
    assert all(spread > 1e-3 for spread in spreads)  # apart after every step, never back together
    for weights, _ in results:
        assert (weights - expected).abs().max() > 1e-3  # vs < 1e-5 with sync
    assert (results[0][0] - results[1][0]).abs().max() > 1e-3


def test_broadcast_makes_different_replicas_equal():
    def work():
        model = mlp(seed=10 + dist.get_rank())
        before = replica_spread(model)
        broadcast_parameters(model)
        return before, replica_spread(model), flat_parameters(model)

    results = ddp_lab.launch(work, 3, backend="gloo")
    assert all(before > 0 for before, _, _ in results)
    assert all(after == 0.0 for _, after, _ in results)
    assert torch.equal(results[2][2], flat_parameters(mlp(seed=10)))


def test_average_gradients_counts_one_all_reduce_per_parameter():
    def work():
        model = mlp(seed=0)
        model(torch.full((4, 2), float(dist.get_rank()))).sum().backward()
        return average_gradients(model), [p.grad.clone() for p in model.parameters()]

    results = ddp_lab.launch(work, 2, backend="gloo")
    assert results[0][0] == len(list(mlp().parameters())) == 6
    for mine, other in zip(results[0][1], results[1][1]):
        assert torch.equal(mine, other)


def test_shard_splits_the_global_batch_in_order_and_refuses_uneven_batches():
    batch = torch.arange(12)
    assert [shard(batch, r, 3).tolist() for r in range(3)] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]
    with pytest.raises(ValueError, match="multiple of 5"):
        shard(batch, 0, 5)
    with pytest.raises(ValueError, match=r"rank must be an int from 0 to 2 \(a rank of the group\)"):
        shard(batch, 3, 3)
