"""Two dimensions on a DeviceMesh: tensor parallelism inside each row, FSDP down each column (Chapter 15f).

Four ranks form a 2 x 2 mesh, ``init_device_mesh("cpu", (dp, tp),
mesh_dim_names=("dp", "tp"))``: rank ``r`` sits at row ``r // tp``, column
``r % tp``. The ranks of one row share a data-parallel replica and split
every MLP block between them (Chapter 15d's Megatron plan:
``ColwiseParallel`` on the first ``Linear``, ``RowwiseParallel`` on the
second, :func:`megatron_plan`); the ranks of one column hold the same
tensor-parallel shard and shard it again with FSDP2 (:func:`build_two_d`).

The order matters: ``parallelize_module`` first, then ``fully_shard``.
``fully_shard`` accepts parameters that are already DTensors on another
mesh and folds that mesh in: ``FSDPParam._init_sharding_spec_tp`` (torch's
``distributed/fsdp/_fully_shard/_fsdp_param.py``) concatenates the dp mesh
with the parameter's tp mesh (``DeviceMesh._concatenate``) and gives it the
placements ``(Shard(0) or _StridedShard, tp's placement)``. The other way
round, ``ColwiseParallel._partition_linear_fn``
(``distributed/tensor/parallel/style.py``) calls ``distribute_tensor`` on
a parameter FSDP already made a DTensor on the dp mesh, which refuses it:
"Cannot distribute a DTensor with device mesh ... to a different device
mesh" (``distribute_tensor`` in ``distributed/tensor/_api.py``).

:func:`mlp_blocks` builds the model, :func:`build_two_d` splits it, and
:func:`layout_recipe` turns a layout chosen by
``ddp_lab.model_parallel.choosing.choose_layout`` into the mesh and the
calls. :func:`run_two_d_step` is what each rank of Chapter 15f runs.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import torch
from torch import nn

from ddp_lab.validate import check_positive_int

__all__ = ["mlp_blocks", "megatron_plan", "build_two_d", "Recipe", "layout_recipe", "run_two_d_step"]


def mlp_blocks(hidden: int, ffn: int, blocks: int, *, seed: int = 0) -> nn.Sequential:
    """``blocks`` MLP blocks, ``block0`` ... : each ``up = Linear(h, f)``, ``act = GELU``, ``down = Linear(f, h)``.

    The same weights in every process for one ``seed``.

    >>> [name for name, _ in mlp_blocks(4, 8, 2).named_parameters()][:3]
    ['block0.up.weight', 'block0.up.bias', 'block0.down.weight']
    """
    check_positive_int("hidden", hidden)
    check_positive_int("ffn", ffn)
    check_positive_int("blocks", blocks)
    torch.manual_seed(seed)
    return nn.Sequential(OrderedDict(
        (f"block{b}", nn.Sequential(OrderedDict(up=nn.Linear(hidden, ffn), act=nn.GELU(),
                                                down=nn.Linear(ffn, hidden))))
        for b in range(blocks)))


def megatron_plan(model: nn.Sequential) -> dict:
    """Chapter 15d's split for every block: ``{"block0.up": ColwiseParallel(), "block0.down": RowwiseParallel(), ...}``."""
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    plan = {}
    for name, _ in model.named_children():
        plan[f"{name}.up"], plan[f"{name}.down"] = ColwiseParallel(), RowwiseParallel()
    return plan


def build_two_d(model: nn.Sequential, mesh, *, reshard_after_forward: bool = True) -> nn.Sequential:
    """Split ``model`` over ``mesh["tp"]``, then shard it over ``mesh["dp"]``: one FSDP group per block, then the root."""
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor.parallel import parallelize_module

    parallelize_module(model, mesh["tp"], megatron_plan(model))  # first: the parameters become tp DTensors
    for block in model.children():
        fully_shard(block, mesh=mesh["dp"], reshard_after_forward=reshard_after_forward)
    fully_shard(model, mesh=mesh["dp"], reshard_after_forward=reshard_after_forward)
    return model


@dataclass(frozen=True)
class Recipe:
    """A layout as code: the mesh's shape and names, and the calls that split the model."""

    mesh_shape: tuple[int, int]
    mesh_dim_names: tuple[str, str]
    calls: tuple[str, ...]

    def __str__(self) -> str:
        head = (f'mesh = init_device_mesh("cuda", {self.mesh_shape}, '
                f'mesh_dim_names={self.mesh_dim_names})')
        return "\n".join((head, *self.calls))


_DATA_PARALLEL = {
    "ZeRO-3": ('fully_shard(block, mesh=mesh["dp"])  # each block, then the model',),
    "ZeRO-2": ('# each block, then the model:',
               'fully_shard(block, mesh=mesh["dp"], reshard_after_forward=False)'),
    "ZeRO-1": ('# each block, then the model:',
               'fully_shard(block, mesh=mesh["dp"], reshard_after_forward=False)',
               "model.set_requires_gradient_sync(False)  # all micro-batches but the last"),
    "DDP": ('model = DistributedDataParallel(model, device_mesh=mesh["dp"])',),
}


def layout_recipe(layout) -> Recipe:
    """The mesh and calls for a ``choosing.Layout`` (``TP t x DP d, stage``).

    ZeRO-3 is ``fully_shard``; ZeRO-2 keeps the gathered parameters from the
    forward to the backward (``reshard_after_forward=False``); FSDP2 has no
    ZeRO-1, the nearest is ZeRO-2 that reduce-scatters only on the last
    micro-batch (``set_requires_gradient_sync``), so the gradients are whole
    while they accumulate; DDP takes the dp mesh (``device_mesh=``).

    >>> from ddp_lab.model_parallel.choosing import Layout
    >>> print(layout_recipe(Layout(8, 8, "ZeRO-3", 0.0, 0.0)))
    mesh = init_device_mesh("cuda", (8, 8), mesh_dim_names=('dp', 'tp'))
    parallelize_module(model, mesh["tp"], plan)  # first
    fully_shard(block, mesh=mesh["dp"])  # each block, then the model
    """
    from ddp_lab.model_parallel.choosing import Layout

    if not isinstance(layout, Layout):
        raise TypeError(f"layout must be a ddp_lab.model_parallel.choosing.Layout "
                        f"(choose_layout(...).layout), got {layout!r}")
    if layout.stage not in _DATA_PARALLEL:
        raise ValueError(f"layout.stage must be one of {', '.join(map(repr, _DATA_PARALLEL))}, got {layout.stage!r}")
    calls = _DATA_PARALLEL[layout.stage]
    if layout.tp > 1:
        calls = ('parallelize_module(model, mesh["tp"], plan)  # first',) + calls
    return Recipe((layout.dp, layout.tp), ("dp", "tp"), calls)


def _quiet():
    """Silence two notices that do not concern the step: a view returned by the root, and
    ``full_tensor``'s two all-gathers of a ``_StridedShard`` parameter (used only to compare)."""
    import logging
    import warnings

    warnings.filterwarnings("ignore", message="FSDP2-wrapped module")
    logging.getLogger("torch.distributed.tensor._redistribute").setLevel(logging.ERROR)


def run_two_d_step(*, hidden: int, ffn: int, blocks: int, tokens: int, dp: int = 2, tp: int = 2, seed: int = 0):
    """In each rank of a ``dp x tp`` mesh: one step of :func:`build_two_d`'s model, recorded, against one process.

    Every rank builds the whole model and batch (one seed), computes the
    step on the whole batch alone, then the 2-D step on its replica's rows
    (``tokens / dp`` of them). Returns a dict: ``loss_equal`` (the mean of
    the replicas' losses, all-reduced over ``dp``, against the whole batch's,
    ``allclose`` at ``atol=1e-6``), ``gradients_equal`` (every parameter's
    gradient put together with ``full_tensor``, same tolerance), ``layout``
    (``{name: (placements, local shape, full shape)}``), ``calls`` (the
    recorder's ``Collective`` records, their ``dim`` named by ``group_name``)
    and ``coordinate`` (this rank's ``(dp, tp)`` place).
    """
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    from ddp_lab.collectives.recorder import record_collectives

    _quiet()
    mesh = init_device_mesh("cpu", (dp, tp), mesh_dim_names=("dp", "tp"))
    generator = torch.Generator().manual_seed(seed + 1)
    x, y = torch.randn(tokens, hidden, generator=generator), torch.randn(tokens, hidden, generator=generator)
    whole = mlp_blocks(hidden, ffn, blocks, seed=seed)
    whole_loss = nn.functional.mse_loss(whole(x), y)
    whole_loss.backward()

    model = build_two_d(mlp_blocks(hidden, ffn, blocks, seed=seed), mesh)
    row = mesh.get_local_rank("dp")
    mine = slice(row * tokens // dp, (row + 1) * tokens // dp)
    with record_collectives() as log:
        log.phase = "forward"
        loss = nn.functional.mse_loss(model(x[mine]), y[mine])
        log.phase = "backward"
        loss.backward()
    mean = loss.detach().clone()
    dist.all_reduce(mean, group=mesh.get_group("dp"))
    mean /= dp
    names = {mesh.get_group(d).group_name: d for d in ("dp", "tp")}
    grads = {n: p.grad.full_tensor() for n, p in model.named_parameters()}
    return {
        "loss_equal": torch.allclose(mean, whole_loss, atol=1e-6),
        "gradients_equal": all(torch.allclose(grads[n], p.grad, atol=1e-6) for n, p in whole.named_parameters()),
        "layout": {n: (tuple(p.placements), tuple(p.to_local().shape), tuple(p.shape))
                   for n, p in model.named_parameters()},
        "calls": [(names.get(c.group_name, "?"), c.phase, c.name, c.nbytes) for c in log.calls],
        "coordinate": (row, mesh.get_local_rank("tp")),
        "mesh_names": tuple(p.device_mesh.mesh_dim_names for p in model.parameters())[0],
    }
