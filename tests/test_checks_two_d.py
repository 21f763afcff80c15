"""Lab 8's checker on right and wrong 2-D layouts (FSDP x tensor parallelism), on 4 real ranks."""

import torch
import torch.distributed as dist
import torch.nn.functional as F

from ddp_lab.checks.two_d import check_two_d_layout


def two_d_step(model, x, y, *, swap=False, shard_first=False, rowwise_up=False, loss_group="dp",
               whole_batch_loss=False):
    """The lab's answer, with one slip switched on by each keyword, written as a reader would."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    dp_name, tp_name = ("tp", "dp") if swap else ("dp", "tp")
    up = RowwiseParallel() if rowwise_up else ColwiseParallel()
    plan = {"block0.up": up, "block0.down": RowwiseParallel(),
            "block1.up": up, "block1.down": RowwiseParallel()}
    if shard_first:
        fully_shard(model, mesh=mesh[dp_name])
    parallelize_module(model, mesh[tp_name], plan)
    if not shard_first:
        for block in model.children():
            fully_shard(block, mesh=mesh[dp_name])
        fully_shard(model, mesh=mesh[dp_name])
    mine = mesh.get_local_rank("dp")
    loss = F.mse_loss(model(x.chunk(2)[mine]), y.chunk(2)[mine])
    loss.backward()
    total = loss.detach().clone()
    dist.all_reduce(total, group=mesh.get_group(loss_group))
    return total / 2


def test_the_right_layout_passes():
    result = check_two_d_layout(two_d_step)
    assert result, str(result)


def test_mesh_dimensions_swapped():
    result = check_two_d_layout(lambda m, x, y: two_d_step(m, x, y, swap=True))
    assert result.mistakes[0].kind == "mesh_swapped"
    assert "ordered ('tp', 'dp')" in result.mistakes[0].message


def test_fully_shard_before_parallelize_module():
    result = check_two_d_layout(lambda m, x, y: two_d_step(m, x, y, shard_first=True))
    assert result.mistakes[0].kind == "fully_shard_first"
    assert "Call parallelize_module first" in result.mistakes[0].message


def test_rowwise_where_colwise_is_needed():
    result = check_two_d_layout(lambda m, x, y: two_d_step(m, x, y, rowwise_up=True))
    assert result.mistakes[0].kind == "wrong_plan"
    assert "ColwiseParallel" in result.mistakes[0].message


def test_the_loss_reduced_over_the_wrong_group():
    result = check_two_d_layout(lambda m, x, y: two_d_step(m, x, y, loss_group="tp"))
    assert result.mistakes[0].kind == "loss_group"
    assert "mesh.get_group('dp')" in result.mistakes[0].message


def test_one_dimension_only_is_not_two_d():
    def fsdp_only(model, x, y):
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        fully_shard(model, mesh=init_device_mesh("cpu", (4,)))
        F.mse_loss(model(x.chunk(4)[dist.get_rank()]), y.chunk(4)[dist.get_rank()]).backward()
        return torch.tensor(0.0)

    result = check_two_d_layout(fsdp_only)
    assert result.mistakes[0].kind == "not_two_d"


def test_a_rank_that_skips_the_loss_all_reduce_hangs():
    def rank_zero_skips(model, x, y):
        total = two_d_step(model, x, y, loss_group="tp") if dist.get_rank() else torch.tensor(0.0)
        dist.all_reduce(total)
        return total

    result = check_two_d_layout(rank_zero_skips, timeout=3)
    assert result.mistakes[0].kind in ("hang", "too_slow")


def test_a_function_of_the_wrong_shape_is_refused_before_any_rank_starts():
    result = check_two_d_layout(lambda model: None)
    assert result.mistakes[0].kind == "signature"
