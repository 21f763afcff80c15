"""Activation checkpointing (ddp_lab.model_parallel.checkpointing): memory saved, compute added, same gradients."""

import pytest
import torch

from ddp_lab.activation_memory import saved_for_backward
from ddp_lab.model_parallel.checkpointing import BlockMLP, count_forward_calls, gradients, step_flops

WIDTH, BATCH, CLASSES = 16, 8, 3


def batch():
    generator = torch.Generator().manual_seed(0)
    return torch.randn(BATCH, WIDTH, generator=generator), torch.randint(0, CLASSES, (BATCH,), generator=generator)


def saved_bytes(model, x, y):
    return saved_for_backward(lambda: torch.nn.functional.cross_entropy(model(x), y),
                              model.parameters()).activation_bytes


@pytest.mark.parametrize("blocks", [1, 3])
def test_checkpointing_keeps_only_the_inputs_of_the_blocks(blocks):
    x, y = batch()
    model = BlockMLP(WIDTH, blocks, CLASSES)
    row, loss = BATCH * WIDTH * 4, BATCH * CLASSES * 4 + BATCH * 8 + 4  # float32 activations; log-probs, labels
    assert saved_bytes(model, x, y) == (2 * blocks + 1) * row + loss  # input, middle ReLU of each block, output
    model.checkpoint_blocks = True
    assert saved_bytes(model, x, y) == (blocks + 1) * row + loss  # each block's input, the head's input


def test_each_checkpointed_block_runs_its_forward_twice_and_the_gradients_agree():
    x, y = batch()
    model = BlockMLP(WIDTH, 3, CLASSES)
    with count_forward_calls(model) as calls:
        plain = gradients(model, x, y)
    assert calls == {"block 0": 1, "block 1": 1, "block 2": 1}
    model.checkpoint_blocks = True
    with count_forward_calls(model) as calls:
        checkpointed = gradients(model, x, y)
    assert calls == {"block 0": 2, "block 1": 2, "block 2": 2}
    assert plain.keys() == checkpointed.keys()
    assert all(torch.allclose(plain[name], checkpointed[name]) for name in plain)
    assert not model.blocks[0][0]._forward_pre_hooks  # the hooks are gone


def test_the_recomputation_adds_one_forward_of_the_blocks():
    x, y = batch()
    model = BlockMLP(WIDTH, 2, CLASSES)
    plain = step_flops(model, x, y)
    linear, head = 2 * BATCH * WIDTH * WIDTH, 2 * BATCH * WIDTH * CLASSES
    assert plain.forward == 4 * linear + head
    assert plain.backward == (2 * 4 - 1) * linear + 2 * head  # no input gradient for the first layer
    model.checkpoint_blocks = True
    checkpointed = step_flops(model, x, y)
    assert checkpointed.forward == plain.forward
    assert checkpointed.backward == plain.backward + 4 * linear
    assert checkpointed.total == plain.total + 4 * linear


def test_the_flag_does_not_change_the_parameters():
    a, b = BlockMLP(WIDTH, 2, CLASSES), BlockMLP(WIDTH, 2, CLASSES, checkpoint_blocks=True)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    assert [n for n, _ in a.named_parameters()] == [n for n, _ in b.named_parameters()]


def test_bad_arguments():
    with pytest.raises(ValueError, match="blocks must be a positive int, got 0"):
        BlockMLP(WIDTH, 0)
    with pytest.raises(TypeError, match="checkpoint_blocks must be True or False, got 'yes'"):
        BlockMLP(WIDTH, 1, checkpoint_blocks="yes")
    with pytest.raises(TypeError, match="count_forward_calls needs a BlockMLP, got Linear"):
        with count_forward_calls(torch.nn.Linear(2, 2)):
            pass
    x, y = batch()
    with pytest.raises(ValueError, match="y must be a 1-D tensor of 8 class indices"):
        step_flops(BlockMLP(WIDTH, 1, CLASSES), x, y[:3])
    with pytest.raises(ValueError, match="x must be a 2-D tensor"):
        gradients(BlockMLP(WIDTH, 1, CLASSES), x[0], y)
