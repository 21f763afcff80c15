"""FSDP2 as training scripts use it: mixed precision, sharded checkpoints, HSDP, clipping (Chapter 15e).

Chapter 15b measured ``fully_shard`` on its own. A production script adds
four things around it, and this module runs each inside ranks started by
``ddp_lab.launch`` (gloo, CPU), returning small plain values the chapter
prints and draws:

* **mixed precision** (:func:`mixed_precision_run`): the same model with
  ``MixedPrecisionPolicy(param_dtype=torch.bfloat16,
  reduce_dtype=torch.float32)`` and without, each step's collectives
  recorded by ``ddp_lab.collectives.recorder.record_collectives``;
* **gradient clipping** on sharded gradients (:func:`clipping_run`):
  ``torch.nn.utils.clip_grad_norm_`` on FSDP2's DTensor gradients against
  one process's norm of the full gradients, and the norm a rank would get
  from its own shards alone;
* **distributed checkpoints** (:func:`checkpoint_run`, :func:`reshard_run`):
  ``torch.distributed.checkpoint`` saves the sharded model and Adam's state
  from every rank, a fresh model resumes from it bit for bit, the same
  files load on another number of ranks, and ``async_save`` writes from a
  thread of its own;
* **HSDP** (:func:`hsdp_run`): ``fully_shard`` on a 2-D ``DeviceMesh``,
  replicated along one dimension and sharded along the other, its
  collectives counted per mesh dimension, beside DDP and 1-D FSDP on the
  same ranks; the formulas are ``ddp_lab.cost.fsdp.hsdp_bytes_per_step``.

Every run trains the book's MLP (``ddp_lab.models.mlp``, widths
:data:`SIZES`, whose rows 2 and 4 ranks divide: no padding) with Adam on
batches that depend only on the step and the rank (:func:`batch`), so that
one process can compute the same step on all ranks' batches at once
(:func:`reference_step`).
"""

from __future__ import annotations

import os

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from ddp_lab.collectives.recorder import record_collectives
from ddp_lab.models import mlp
from ddp_lab.validate import check_positive_int

__all__ = ["SIZES", "LR", "batch", "shard_model", "train_step", "reference_step", "mixed_precision_run",
           "clipping_run", "checkpoint_run", "reshard_run", "hsdp_run", "checkpoint_contents"]

SIZES = (16, 32, 32, 8)   # 1,864 parameters; every row count divisible by 2 and by 4
LR = 1e-2                 # Adam's learning rate in every run
BATCH = 8                 # samples per rank and step


def batch(step: int, rank: int, size: int = BATCH) -> tuple[torch.Tensor, torch.Tensor]:
    """Rank ``rank``'s batch for step ``step``: inputs and class labels, the same on any machine.

    A function of the two numbers only, so a resumed run and one process
    that stands in for all ranks (:func:`reference_step`) see the same data.
    """
    data = torch.Generator().manual_seed(1000 * step + rank)
    return (torch.randn(size, SIZES[0], generator=data), torch.randint(0, SIZES[-1], (size,), generator=data))


def shard_model(model: nn.Module, mesh, mp_policy=None) -> nn.Module:
    """``fully_shard`` each ``nn.Linear`` of ``model`` then the model, on ``mesh``, with ``mp_policy``.

    A 1-D ``mesh`` shards every parameter over its ranks (FSDP); a 2-D mesh
    replicates along dimension 0 and shards along dimension 1 (HSDP, the
    ``mesh`` argument of ``fully_shard``). ``mp_policy`` is a
    ``MixedPrecisionPolicy`` or None for fp32 throughout.
    """
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    options = {"mesh": mesh, "mp_policy": mp_policy if mp_policy is not None else MixedPrecisionPolicy()}
    for layer in [m for m in model.modules() if isinstance(m, nn.Linear)]:
        fully_shard(layer, **options)
    return fully_shard(model, **options)


def _loss(model, x, y):
    return F.cross_entropy(model(x).float(), y)   # the logits in fp32 whatever the compute dtype


def train_step(model: nn.Module, optimizer: torch.optim.Optimizer, step: int, rank: int) -> float:
    """One step on rank ``rank``'s batch of ``step``; returns the loss (a float)."""
    optimizer.zero_grad(set_to_none=True)
    loss = _loss(model, *batch(step, rank))
    loss.backward()
    optimizer.step()
    return loss.item()


def _all_batches(step, world_size):
    xs, ys = zip(*(batch(step, rank) for rank in range(world_size)))
    return torch.cat(xs), torch.cat(ys)


def reference_step(model: nn.Module, step: int, world_size: int) -> None:
    """One process's forward and backward on all ``world_size`` ranks' batches of ``step`` together.

    The mean loss over the concatenated batch has the gradient that data
    parallelism's average of the ranks' gradients gives (equal batches).
    """
    check_positive_int("world_size", world_size)
    model.zero_grad(set_to_none=True)
    _loss(model, *_all_batches(step, world_size)).backward()


def _mesh(shape, names=None):
    from torch.distributed.device_mesh import init_device_mesh

    return init_device_mesh("cpu", shape, mesh_dim_names=names)


def _local(tensor):
    return tensor.to_local() if hasattr(tensor, "to_local") else tensor


def _full(tensor):
    return tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor


# ------------------------------------------------------------------ mixed precision


def _recorded_step(model, optimizer, step, rank):
    with record_collectives() as log:
        log.phase = "step"
        loss = train_step(model, optimizer, step, rank)
    return loss, log


def mixed_precision_run(steps: int = 4) -> dict:
    """Train the same model fp32 and with bf16 parameters / fp32 reduction; record each step (in a rank).

    Returns, per setting (``"fp32"``, ``"bf16"``): the losses of every step,
    the all-gathers' and reduce-scatters' bytes and dtypes in the last step,
    the dtype of the sharded parameters and of their gradients after it, and
    rank 0's final full parameters.
    """
    from torch.distributed.fsdp import MixedPrecisionPolicy

    check_positive_int("steps", steps)
    rank, world = dist.get_rank(), dist.get_world_size()
    policies = {"fp32": None,
                "bf16": MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)}
    runs = {}
    for name, policy in policies.items():
        model = shard_model(mlp(SIZES, seed=0), _mesh((world,)), policy)
        optimizer = torch.optim.Adam(model.parameters(), lr=LR)
        losses = []
        for step in range(steps):
            loss, log = _recorded_step(model, optimizer, step, rank)
            losses.append(loss)
        calls = {op: [(c.nbytes, c.dtype) for c in log.calls if c.name == op]
                 for op in ("all_gather", "reduce_scatter", "all_reduce")}
        runs[name] = {
            "losses": losses, "calls": calls,
            "parameter_dtypes": sorted({str(_local(p).dtype) for p in model.parameters()}),
            "gradient_dtypes": sorted({str(_local(p.grad).dtype) for p in model.parameters()}),
            "parameters": {n: _full(p) for n, p in model.named_parameters()},
        }
    return runs


# ------------------------------------------------------------------ gradient clipping


def clipping_run(max_norm: float = 0.1) -> dict:
    """Clip FSDP2's sharded gradients with ``clip_grad_norm_``; compare with one process (in a rank).

    Returns the norm ``clip_grad_norm_`` returned (its full value, a float
    tensor, and its type), the norm of this rank's shards alone, the
    reference model's norm of its full gradients, whether after the clipped
    step (SGD, learning rate 1) every full parameter is ``allclose`` to the
    reference's clipped step (rtol 1e-5, atol 1e-6), and the collectives
    ``clip_grad_norm_`` issued, by name, as ``record_collectives`` counts
    them (DTensor issues the all-reduce while it runs an operator,
    ``torch.stack``; the recorder lets it run first, and sees it).
    """
    from collections import Counter

    from ddp_lab.collectives.recorder import record_collectives

    rank, world = dist.get_rank(), dist.get_world_size()
    model = shard_model(mlp(SIZES, seed=0), _mesh((world,)))
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    optimizer.zero_grad(set_to_none=True)
    _loss(model, *batch(0, rank)).backward()
    gradients = [p.grad for p in model.parameters()]
    local_only = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(_local(g)) for g in gradients]))
    with record_collectives() as log:
        total = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()

    reference = mlp(SIZES, seed=0)
    reference_step(reference, 0, world)
    reference_norm = torch.nn.utils.clip_grad_norm_(reference.parameters(), max_norm)
    torch.optim.SGD(reference.parameters(), lr=1.0).step()
    same_update = all(torch.allclose(_full(p), q, rtol=1e-5, atol=1e-6)
                      for p, q in zip(model.parameters(), reference.parameters()))
    return {"total": _full(total).detach(), "total_type": type(total).__name__,
            "local_only": local_only.detach(), "reference": reference_norm.detach(), "same_update": same_update,
            "calls": dict(Counter(call.name for call in log.calls))}


# ------------------------------------------------------------------ distributed checkpoints


def _sharded_training(world, seed=0):
    model = shard_model(mlp(SIZES, seed=seed), _mesh((world,)))
    return model, torch.optim.Adam(model.parameters(), lr=LR)


def _states(model, optimizer):
    from torch.distributed.checkpoint.state_dict import get_state_dict

    model_state, optimizer_state = get_state_dict(model, optimizer)
    return {"model": model_state, "optimizer": optimizer_state}


def _load(model, optimizer, folder):
    """Read ``folder`` into ``model`` and ``optimizer``: the resume every restarted rank runs."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import set_state_dict

    states = _states(model, optimizer)   # the shapes and shards to fill, on this mesh
    dcp.load(states, checkpoint_id=folder)
    set_state_dict(model, optimizer, model_state_dict=states["model"], optim_state_dict=states["optimizer"])


def _full_state(model, optimizer):
    """Every parameter and every tensor of Adam's state, whole (a collective: every rank calls it)."""
    states = _states(model, optimizer)
    return {f"{part}.{key}": _full(value).detach().clone()
            for part in ("model", "optimizer") for key, value in _flat(states[part]).items()
            if torch.is_tensor(value)}


def _flat(tree, prefix=""):
    if isinstance(tree, dict):
        out = {}
        for key, value in tree.items():
            out.update(_flat(value, f"{prefix}{key}."))
        return out
    return {prefix.rstrip("."): tree}


def checkpoint_run(folder: str, save_after: int = 2, steps: int = 5) -> dict:
    """Save after step ``save_after``, train on to ``steps``; resume a fresh model and compare (in a rank).

    The uninterrupted run halves its learning rate after step ``save_after``
    (as a schedule would), saves its model and optimizer with ``dcp.save``
    into ``folder/step``, then trains on. A fresh model (other weights:
    seed 1) and a fresh Adam load the checkpoint (``get_state_dict``,
    ``dcp.load``, ``set_state_dict``) and train the same steps. Returns, per
    step after the save, whether this rank's shards of both runs are
    ``torch.equal``; what a load without ``set_state_dict`` leaves (the
    shards loaded? the learning rate); the full states at the save (for
    :func:`reshard_run`); and what ``async_save`` returned and left in
    ``folder/async``.
    """
    import torch.distributed.checkpoint as dcp

    rank, world = dist.get_rank(), dist.get_world_size()
    saved = os.path.join(folder, "step")
    model, optimizer = _sharded_training(world)
    for step in range(save_after + 1):
        train_step(model, optimizer, step, rank)
    for group in optimizer.param_groups:
        group["lr"] = LR / 2
    dcp.save(_states(model, optimizer), checkpoint_id=saved)
    full_at_save = _full_state(model, optimizer)
    at_save = [_local(p).clone() for p in model.parameters()]
    uninterrupted = []
    for step in range(save_after + 1, steps):
        train_step(model, optimizer, step, rank)
        uninterrupted.append([_local(p).clone() for p in model.parameters()])

    fresh, fresh_optimizer = _sharded_training(world, seed=1)
    differs_before = any(not torch.equal(_local(p), q) for p, q in zip(fresh.parameters(), at_save))
    _load(fresh, fresh_optimizer, saved)
    equal = []
    for step, expected in zip(range(save_after + 1, steps), uninterrupted):
        train_step(fresh, fresh_optimizer, step, rank)
        equal.append(all(torch.equal(_local(p), q) for p, q in zip(fresh.parameters(), expected)))

    # the slip: dcp.load without set_state_dict
    partial, partial_optimizer = _sharded_training(world, seed=1)
    dcp.load(_states(partial, partial_optimizer), checkpoint_id=saved)
    without_set = {"shards_loaded": all(torch.equal(_local(p), q) for p, q in zip(partial.parameters(), at_save)),
                   "lr": partial_optimizer.param_groups[0]["lr"], "saved_lr": LR / 2}

    # async_save: its collectives on a group of their own, so that they never
    # interleave with the training's on the default group
    group = dist.new_group(backend="gloo")
    future = dcp.async_save(_states(model, optimizer), checkpoint_id=os.path.join(folder, "async"),
                            process_group=group)
    future_type = type(future).__name__
    future.result()
    dist.barrier()
    return {"fresh_differed": differs_before, "resumed_equal": equal, "without_set_state_dict": without_set,
            "full_at_save": full_at_save, "future": future_type,
            "async_files": sorted(os.listdir(os.path.join(folder, "async")))}


def reshard_run(folder: str, full_at_save: dict) -> dict:
    """Load the checkpoint ``checkpoint_run`` wrote on other ranks into a model sharded on these (in a rank).

    Returns whether every whole parameter and optimizer tensor equals the
    one the saving ranks held (``torch.equal``), and this rank's shard shape
    of each parameter.
    """
    world = dist.get_world_size()
    model, optimizer = _sharded_training(world, seed=1)
    _load(model, optimizer, os.path.join(folder, "step"))
    loaded = _full_state(model, optimizer)
    return {"keys_match": sorted(loaded) == sorted(full_at_save),
            "equal": {key: torch.equal(value, full_at_save[key]) for key, value in loaded.items()
                      if key in full_at_save},
            "shards": {name: tuple(_local(p).shape) for name, p in model.named_parameters()}}


def checkpoint_contents(folder: str) -> dict:
    """What a DCP checkpoint folder holds: each file's size, and the tensor pieces each file stores.

    Read from the folder's ``.metadata`` (``FileSystemReader.read_metadata``):
    ``state_dict_metadata`` names every entry (a tensor's full size and its
    chunks, or a pickled value), ``storage_data`` which file holds each piece.
    Returns ``{"sizes": {file: bytes}, "pieces": {file: [(key, shape, numel,
    nbytes), ...]}}``; a pickled value has shape None and numel 0. Runs
    anywhere, no process group needed.
    """
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    metadata = FileSystemReader(folder).read_metadata()
    sizes = {name: os.path.getsize(os.path.join(folder, name)) for name in sorted(os.listdir(folder))}
    pieces = {}
    for index, info in metadata.storage_data.items():
        entry = metadata.state_dict_metadata[index.fqn]
        if isinstance(entry, TensorStorageMetadata):
            chunk = next(c for c in entry.chunks if tuple(c.offsets) == tuple(index.offset or ()))
            shape = tuple(chunk.sizes)
            numel = int(torch.Size(shape).numel())
            nbytes = numel * torch.empty((), dtype=entry.properties.dtype).element_size()
        else:
            shape, numel, nbytes = None, 0, 0
        pieces.setdefault(info.relative_path, []).append((index.fqn, shape, numel, nbytes))
    return {"sizes": sizes, "pieces": {name: sorted(items) for name, items in sorted(pieces.items())}}


# ------------------------------------------------------------------ HSDP


def _groups(mesh):
    return {name: mesh.get_group(name).group_name for name in mesh.mesh_dim_names}


def _recorded(model, optimizer, rank, steps=3):
    """Train ``steps`` steps, the last one recorded; its collectives as (name, nbytes, group_name) rows."""
    for step in range(steps - 1):
        train_step(model, optimizer, step, rank)
    _, log = _recorded_step(model, optimizer, steps - 1, rank)
    return [(c.name, c.nbytes, c.group_name) for c in log.calls]


def hsdp_run() -> dict:
    """HSDP on a 2 x 2 mesh beside DDP and FSDP on the same 4 ranks: collectives and gradients (in a rank).

    Returns, for ``"DDP"``, ``"FSDP"`` and ``"HSDP"``, the collectives of
    one recorded step (name, bytes, group name); the names of the world
    group and of HSDP's two mesh dimensions; this rank's coordinates on
    the mesh; HSDP's gradients after a backward (this rank's shards, and
    the full ones); and the gradients one process computes on all four
    batches.
    """
    from torch.nn.parallel import DistributedDataParallel as DDP

    rank, world = dist.get_rank(), dist.get_world_size()
    if world != 4:
        raise ValueError(f"hsdp_run needs 4 ranks (a 2 x 2 mesh), got {world}")
    calls = {}
    ddp = DDP(mlp(SIZES, seed=0))
    calls["DDP"] = _recorded(ddp, torch.optim.Adam(ddp.parameters(), lr=LR), rank)
    fsdp, optimizer = _sharded_training(world)
    calls["FSDP"] = _recorded(fsdp, optimizer, rank)

    mesh = _mesh((2, 2), ("replicate", "shard"))
    hsdp = shard_model(mlp(SIZES, seed=0), mesh)
    calls["HSDP"] = _recorded(hsdp, torch.optim.Adam(hsdp.parameters(), lr=LR), rank)

    fresh = shard_model(mlp(SIZES, seed=0), mesh)   # one backward from the start, to compare gradients
    _loss(fresh, *batch(0, rank)).backward()
    reference = mlp(SIZES, seed=0)
    reference_step(reference, 0, world)
    return {"calls": calls, "world_group": dist.group.WORLD.group_name, "groups": _groups(mesh),
            "coordinate": tuple(mesh.get_coordinate()),
            "placements": str(next(fresh.parameters()).placements),
            "local_gradients": {n: _local(p.grad).clone() for n, p in fresh.named_parameters()},
            "full_gradients": {n: _full(p.grad) for n, p in fresh.named_parameters()},
            "reference_gradients": {n: p.grad.clone() for n, p in reference.named_parameters()}}
