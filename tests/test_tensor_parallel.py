"""Chapter 15d: the Megatron MLP split with its f and g operators on real gloo ranks
(ddp_lab.model_parallel.tensor_parallel), the collectives it issues
(ddp_lab.collectives.recorder), torch's own tensor parallelism on gloo, and
the per-layer cost model (ddp_lab.model_parallel.tp_cost)."""

import pytest
import torch

import ddp_lab
from ddp_lab.cost.links import LINKS
from ddp_lab.cost.scaling import GPUS
from ddp_lab.model_parallel import tp_cost
from ddp_lab.model_parallel.tensor_parallel import copy_to_tensor_parallel, mlp_block, shard_mlp

TOKENS, D = 8, 16


def split_and_compare(tokens, d):
    """In a rank: the block split with f and g, against the unsplit block; and without f."""
    import torch.distributed as dist

    from ddp_lab.collectives.recorder import record_collectives
    from ddp_lab.model_parallel.tensor_parallel import megatron_mlp, mlp_block, reduce_from_tensor_parallel, shard_mlp

    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    x, dz = torch.randn(tokens, d), torch.randn(tokens, d)
    a, a_bias = torch.randn(d, 4 * d) / d ** 0.5, torch.randn(4 * d) / 10
    b, b_bias = torch.randn(4 * d, d) / (2 * d ** 0.5), torch.randn(d) / 10
    whole = [t.clone().requires_grad_() for t in (x, a, b, a_bias, b_bias)]
    z_whole = mlp_block(*whole)
    (z_whole * dz).sum().backward()
    a_r, b_r, a_bias_r = shard_mlp(a, b, a_bias, rank, world)
    mine = [t.clone().requires_grad_() for t in (x, a_r, b_r, a_bias_r, b_bias)]
    with record_collectives() as log:
        log.phase = "forward"
        z = megatron_mlp(*mine)
        log.phase = "backward"
        (z * dz).sum().backward()
    cols = slice(rank * 4 * d // world, (rank + 1) * 4 * d // world)
    expected = {"Z": z_whole, "X": whole[0].grad, "A": whole[1].grad[:, cols], "B": whole[2].grad[cols],
                "a": whole[3].grad[cols], "b": whole[4].grad}
    got = {"Z": z, "X": mine[0].grad, "A": mine[1].grad, "B": mine[2].grad, "a": mine[3].grad, "b": mine[4].grad}
    same = {name: torch.allclose(got[name], expected[name], atol=1e-5) for name in expected}
    # without f the backward all-reduce is missing: each rank's gradient of X is a part of it
    x_alone = x.clone().requires_grad_()
    partial = reduce_from_tensor_parallel(torch.nn.functional.gelu(x_alone @ a_r + a_bias_r) @ b_r) + b_bias
    (partial * dz).sum().backward()
    total = x_alone.grad.clone()
    dist.all_reduce(total)
    return same, [(c.name, c.phase, c.numel, c.nbytes) for c in log.calls], \
        torch.allclose(x_alone.grad, whole[0].grad, atol=1e-5), torch.allclose(total, whole[0].grad, atol=1e-5)


def torch_tensor_parallel(tokens, d):
    """In a rank: ColwiseParallel + RowwiseParallel on gloo, against the unsplit block, with its collectives."""
    import torch.nn as nn
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    from ddp_lab.collectives.recorder import record_collectives

    def block():
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    torch.manual_seed(1)
    x, dz = torch.randn(tokens, d), torch.randn(tokens, d)
    whole, x_whole = block(), x.clone().requires_grad_()
    (whole(x_whole) * dz).sum().backward()
    split = parallelize_module(block(), init_device_mesh("cpu", (2,)), {"0": ColwiseParallel(), "2": RowwiseParallel()})
    x_split = x.clone().requires_grad_()
    with record_collectives() as log:
        log.phase = "forward"
        z = split(x_split)
        log.phase = "backward"
        (z * dz).sum().backward()
    same = all(torch.allclose(p.grad.full_tensor(), q.grad, atol=1e-5)
               for p, q in zip(split.parameters(), whole.parameters()))
    return same and torch.allclose(x_split.grad, x_whole.grad, atol=1e-5), \
        [(c.name, c.phase, c.nbytes) for c in log.calls]


def test_f_and_g_give_the_unsplit_blocks_output_and_every_gradient():
    for same, calls, alone, summed in ddp_lab.launch(split_and_compare, 2, args=(TOKENS, D), backend="gloo"):
        assert same == {"Z": True, "X": True, "A": True, "B": True, "a": True, "b": True}
        assert calls == [("all_reduce", "forward", TOKENS * D, 4 * TOKENS * D),
                         ("all_reduce", "backward", TOKENS * D, 4 * TOKENS * D)]
        assert (alone, summed) == (False, True)  # without f: a part of dX on each rank, the sum is right


def test_torchs_colwise_and_rowwise_parallel_run_on_gloo_with_the_same_two_all_reduces():
    for same, calls in ddp_lab.launch(torch_tensor_parallel, 2, args=(TOKENS, D), backend="gloo"):
        assert same
        assert calls == [("all_reduce", "forward", 4 * TOKENS * D), ("all_reduce", "backward", 4 * TOKENS * D)]


def test_bad_arguments_are_refused():
    a, b, bias = torch.zeros(4, 6), torch.zeros(6, 4), torch.zeros(6)
    assert [t.shape for t in shard_mlp(a, b, bias, 1, 2)] == [(4, 3), (3, 4), (3,)]
    with pytest.raises(ValueError, match="hidden width 6 must be divisible"):
        shard_mlp(a, b, bias, 0, 4)
    with pytest.raises(ValueError, match="expected a \\(d x h\\), b \\(h x d\\)"):
        shard_mlp(a, a, bias, 0, 2)
    with pytest.raises(RuntimeError, match="runs inside a rank"):
        copy_to_tensor_parallel(torch.zeros(2))
    assert torch.equal(mlp_block(torch.ones(1, 4), a, b, bias, torch.ones(4)), torch.ones(1, 4))


# ------------------------------------------------------------------ the cost model


def test_bytes_per_layer_follow_the_formulas():
    h = 4096
    assert tp_cost.parameters_per_layer(h) == 12 * h * h and tp_cost.parameters_per_layer(h, "mlp") == 8 * h * h
    assert tp_cost.all_reduces_per_layer() == (2, 2) and tp_cost.all_reduces_per_layer("mlp") == (1, 1)
    # Narayanan et al. 2021: 8·b·s·h·(t-1)/t values per layer, per device and micro-batch
    for t in (2, 4, 8):
        assert tp_cost.tensor_parallel_bytes(4096, h, t, bytes_per_value=1) == pytest.approx(8 * 4096 * h * (t - 1) / t)
    assert tp_cost.crossover_tokens(h) == 3 * h and tp_cost.crossover_tokens(h, "mlp") == 4 * h
    tokens = int(tp_cost.crossover_tokens(h))
    assert tp_cost.tensor_parallel_bytes(tokens, h, 8) == pytest.approx(tp_cost.data_parallel_bytes(h, 8))


def test_more_tokens_do_not_shrink_the_share_of_communication_below_its_bandwidth_term():
    h, flops = 8192, GPUS["h100"].flops
    share = [tp_cost.communication_share(tokens, h, 8, LINKS["nvlink"], flops, utilisation=0.4)
             for tokens in (4096, 16384, 65536, 2 ** 22)]
    bandwidth_only = (8 - 1) * 2 * flops * 0.4 / (9 * h * LINKS["nvlink"].bandwidth)  # (t-1)βF/(9hB)
    assert share == sorted(share, reverse=True)  # only the latencies' part shrinks
    assert share[-1] == pytest.approx(bandwidth_only, rel=1e-3) and share[0] < 1.2 * bandwidth_only
    network = tp_cost.communication_share(65536, h, 8, LINKS["infiniband"], flops, utilisation=0.4)
    assert share[-1] < 0.25 < 1 < network


def test_cost_arguments_are_checked():
    with pytest.raises(ValueError, match="block must be one of 'transformer', 'mlp'; got 'attention'"):
        tp_cost.parameters_per_layer(64, "attention")
    with pytest.raises(ValueError, match="tp must be a positive int, got 0"):
        tp_cost.tensor_parallel_bytes(8, 64, 0)
    with pytest.raises(TypeError, match="link must be a ddp_lab.cost.links.Link"):
        tp_cost.tensor_parallel_seconds(8, 64, 2, 450e9)
    with pytest.raises(ValueError, match="utilisation must be a number in \\(0, 1\\]"):
        tp_cost.compute_seconds(8, 64, 2, 1e12, utilisation=1.5)
