"""Lab 7's checker on real gloo ranks: FSDP2 under a memory budget against DDP.
The right answer passes on 2 and 3 ranks; each usual slip fails with a
message that names it."""

import pytest

from ddp_lab.checks.fsdp_budget import BUDGET, check_fsdp_budget


def answers():
    """The reader's possible answers, built inside a function so that they are
    shipped to the ranks by value, as a notebook's functions are."""
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch import nn
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.nn.parallel import DistributedDataParallel as DDP

    from ddp_lab.checks.fsdp_budget import LR, SEED, batch, make_model

    def train(steps, seed=lambda rank: SEED, shard=True, root=True, optimizer_first=False, ddp=False,
              data_rank=lambda rank: rank, layers=(nn.Linear,)):
        rank = dist.get_rank()
        torch.manual_seed(seed(rank))
        model = make_model()
        if optimizer_first:
            optimizer = torch.optim.Adam(model.parameters(), lr=LR)
        if shard:
            mesh = init_device_mesh("cpu", (dist.get_world_size(),))  # as the lab asks, GPU or not
            for layer in model:
                if isinstance(layer, layers):
                    fully_shard(layer, mesh=mesh)
            if root:
                fully_shard(model, mesh=mesh)
        if ddp:
            model = DDP(model)
        if not optimizer_first:
            optimizer = torch.optim.Adam(model.parameters(), lr=LR)
        losses = []
        for step in range(steps):
            x, y = batch(step, data_rank(rank))
            loss = F.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        return model, optimizer, losses

    def right(steps):
        return train(steps)

    def with_ddp(steps):
        return train(steps, shard=False, ddp=True)

    def unsharded(steps):
        return train(steps, shard=False)

    def rank_seed(steps):
        return train(steps, seed=lambda rank: SEED + rank)

    def rank_0_data(steps):
        return train(steps, data_rank=lambda rank: 0)

    def no_root(steps):
        return train(steps, root=False)

    def no_root_every_layer_sharded(steps):
        return train(steps, root=False, layers=(nn.Linear, nn.LayerNorm))

    def optimizer_first(steps):
        return train(steps, optimizer_first=True)

    def raises_on_rank_1(steps):
        if dist.get_rank() == 1:
            raise ValueError("no model yet")
        return train(steps)

    def rank_1_returns_early(steps):
        return train(0 if dist.get_rank() == 1 else steps)

    def losses_only(steps):
        return train(steps)[2]

    def losses_as_iterator(steps):
        model, optimizer, losses = train(steps)
        return model, optimizer, iter(losses)

    def losses_in_a_huge_tensor(steps):
        model, optimizer, _ = train(steps)
        return model, optimizer, torch.zeros(50_000_000)  # 200 MB: a loop over it takes minutes

    return {f.__name__: f for f in (right, with_ddp, unsharded, rank_seed, rank_0_data, no_root,
                                     no_root_every_layer_sharded, optimizer_first, raises_on_rank_1,
                                     rank_1_returns_early, losses_only, losses_as_iterator,
                                     losses_in_a_huge_tensor)}


A = answers()


def kinds(result):
    return [m.kind for m in result.mistakes]


@pytest.mark.parametrize("world_size", [2, 3])
def test_the_reference_solution_passes(world_size):
    result = check_fsdp_budget(A["right"], world_size=world_size)
    assert result and result.correct == result.total == 4, str(result)
    assert str(result) == (f"✓ all 4 checks correct (right vs DDP: {world_size} ranks, 4 steps, budget "
                           f"{BUDGET:,} bytes per rank)")


def test_ddp_is_right_but_over_budget_by_how_much():
    result = check_fsdp_budget(A["with_ddp"])
    assert kinds(result) == ["not_sharded"] and result.correct == 2  # the losses and weights are DDP's
    text = str(result)
    assert ("each rank holds 352,384 bytes of model states (parameters 88,096, gradients 88,096, optimizer state "
            "176,192): 152,384 bytes over the budget of 200,000 (1.76 times it)") in text
    assert "wrapped in DistributedDataParallel, which keeps a full replica on every rank" in text


def test_no_sharding_and_no_averaging_is_named():
    result = check_fsdp_budget(A["unsharded"])
    assert kinds(result) == ["not_sharded"] and result.correct == 0
    assert "nothing averages the gradients: each rank trained a copy of its own" in str(result)


def test_a_seed_that_depends_on_the_rank_is_named():
    result = check_fsdp_budget(A["rank_seed"])
    assert kinds(result) == ["seed"] and result.mistakes[0].where == "rank 1"
    text = str(result)
    assert "built the model from other initial weights than rank 0's: the random seed depends on the rank" in text
    assert "DistributedDataParallel broadcasts rank 0's parameters" in text and "fully_shard broadcasts nothing" in text


def test_another_ranks_data_is_named():
    result = check_fsdp_budget(A["rank_0_data"])
    assert kinds(result) == ["data"] and result.correct == 2
    assert "rank 1: trained on batch(step, 0), the batches of rank 0" in str(result)


def test_a_forgotten_root_is_named_with_the_parameters_it_leaves_whole():
    result = check_fsdp_budget(A["no_root"])
    assert kinds(result) == ["root_not_sharded"] and result.correct == 1  # within budget, all else wrong
    text = str(result)
    assert "norm.weight, norm.bias are plain tensors, whole on every rank" in text
    assert "Call fully_shard(model) after the layers" in text


def test_a_forgotten_root_is_named_even_when_every_layer_is_sharded():
    result = check_fsdp_budget(A["no_root_every_layer_sharded"])
    assert kinds(result) == ["root_only_children"] and result.correct == 3  # it learns DDP's weights
    assert "at the end of the forward pass every layer was whole on every rank, as under DDP" in str(result)


def test_an_optimizer_built_before_fully_shard_is_named():
    result = check_fsdp_budget(A["optimizer_first"])
    assert kinds(result) == ["optimizer_first"] and result.correct == 1
    text = str(result)
    assert "the optimizer holds 8 tensors that are not the model's parameters (88,096 bytes)" in text
    assert "optimizer.step() did not change the model at all" in text
    assert "must be initialized with the DTensor parameters" in text


def test_a_rank_that_raises_is_named_with_its_line():
    result = check_fsdp_budget(A["raises_on_rank_1"])
    assert kinds(result) == ["error"] and result.mistakes[0].where == "rank 1"
    assert ("your code raised ValueError: no model yet (in raises_on_rank_1: raise ValueError(\"no model yet\"))"
            in str(result))


def test_a_rank_left_waiting_in_a_collective_is_a_hang():
    result = check_fsdp_budget(A["rank_1_returns_early"], timeout=2)
    assert kinds(result) == ["hang"] and result.mistakes[0].where == "rank 0"
    assert "rank 1 had already returned" in str(result) and "leaves the others waiting" in str(result)


def test_misuse_raises_and_wrong_returns_are_reported():
    with pytest.raises(TypeError, match="pass your function itself"):
        check_fsdp_budget("train_sharded")
    with pytest.raises(ValueError, match="world_size must be 2, 3 or 4, got 5"):
        check_fsdp_budget(A["right"], world_size=5)
    with pytest.raises(ValueError, match="budget must be a positive int, got 0"):
        check_fsdp_budget(A["right"], budget=0)
    assert kinds(check_fsdp_budget(lambda: None)) == ["signature"]
    result = check_fsdp_budget(A["losses_only"])
    assert kinds(result) == ["returns"] and "returned list, not (model, optimizer, losses)" in str(result)


def test_losses_given_as_an_iterator_are_read_once():
    """An iterator (or a generator) of the right losses passes: the checker reads it once, in the rank."""
    result = check_fsdp_budget(A["losses_as_iterator"])
    assert result and result.correct == result.total == 4, str(result)


def test_a_huge_tensor_of_losses_is_counted_not_walked():
    """50 million losses are refused by their count, at once: the checker's own reading of them never
    runs into the timeout (a Python loop over them did, and was reported as the reader's hang)."""
    result = check_fsdp_budget(A["losses_in_a_huge_tensor"], timeout=30)
    assert kinds(result) == ["returns"] and result.mistakes[0].where == "every rank", str(result)
    assert "returned a tensor of 50,000,000 losses for 4 steps: append loss.item() once per step" in str(result)
