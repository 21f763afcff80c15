"""saved_for_backward: the activation memory of chapter 1, counted exactly."""

import pytest
import torch
import torch.nn.functional as F

from ddp_lab.activation_memory import saved_for_backward
from ddp_lab.models import mlp

WIDTHS = (16, 32, 24, 5)


def bytes_per_sample(widths):
    """fc1's input, every hidden ReLU output (also the next layer's input, stored
    once), the loss's log-probabilities: float32; plus the int64 label."""
    return 4 * (widths[0] + sum(widths[1:-1]) + widths[-1]) + 8


def mlp_loss(model, batch, tokens=None, seed=0):
    generator = torch.Generator().manual_seed(seed)
    shape = (batch, WIDTHS[0]) if tokens is None else (batch, tokens, WIDTHS[0])
    x = torch.randn(*shape, generator=generator)
    y = torch.randint(0, WIDTHS[-1], (x.numel() // WIDTHS[0],), generator=generator)
    return lambda: F.cross_entropy(model(x).reshape(-1, WIDTHS[-1]), y)


@pytest.mark.parametrize("batch", [1, 2, 3, 8, 64])
def test_mlp_activations_are_exactly_the_saved_inputs_outputs_and_labels(batch):
    model = mlp(WIDTHS, seed=0)
    saved = saved_for_backward(mlp_loss(model, batch), model.parameters())
    # 4 bytes that do not grow with the batch: the loss's float32 count of labels
    assert saved.activation_bytes == batch * bytes_per_sample(WIDTHS) + 4


def test_grows_linearly_with_samples_and_with_tokens_per_sample():
    model = mlp(WIDTHS, seed=0)
    one = saved_for_backward(mlp_loss(model, 1), model.parameters()).activation_bytes
    sequences = saved_for_backward(mlp_loss(model, 3, tokens=7), model.parameters()).activation_bytes
    assert sequences - 4 == 3 * 7 * (one - 4)


def test_parameters_are_counted_apart_and_only_those_autograd_keeps():
    model = mlp(WIDTHS, seed=0)
    saved = saved_for_backward(mlp_loss(model, 4), model.parameters())
    # fc1's weight is not kept: its input x needs no gradient, so its
    # weight is not needed to compute one; fc2 and fc3 keep theirs
    kept = model.fc2.weight.numel() + model.fc3.weight.numel()
    assert saved.parameter_bytes == 4 * kept
    assert [t.is_parameter for t in saved.tensors].count(True) == 2


def test_without_parameters_every_saved_tensor_counts_as_an_activation():
    model = mlp(WIDTHS, seed=0)
    with_params = saved_for_backward(mlp_loss(model, 4), model.parameters())
    without = saved_for_backward(mlp_loss(model, 4))
    assert without.activation_bytes == with_params.activation_bytes + with_params.parameter_bytes


def test_a_tensor_saved_twice_is_counted_once():
    x = torch.ones(10, requires_grad=True)
    y = x * 2  # saves nothing for x * 2 (a constant factor)
    saved = saved_for_backward(lambda: (y * y).sum())  # y is saved twice, once per operand
    assert saved.activation_bytes == 40
    assert len(saved.tensors) == 1


def test_nothing_saved_without_grad():
    model = mlp(WIDTHS, seed=0)
    with torch.no_grad():
        saved = saved_for_backward(mlp_loss(model, 4), model.parameters())
    assert saved.tensors == () and saved.activation_bytes == 0


def test_printout_lists_each_tensor_and_the_total():
    model = mlp(WIDTHS, seed=0)
    text = str(saved_for_backward(mlp_loss(model, 2), model.parameters()))
    assert "activation  float32   [2, 16]" in text
    assert "parameter " in text
    assert text.endswith(f"activations saved for backward: {2 * bytes_per_sample(WIDTHS) + 4:,} bytes")


def test_forward_must_be_a_function():
    with pytest.raises(TypeError, match="forward must be a function that runs the forward pass"):
        saved_for_backward(torch.ones(3))
