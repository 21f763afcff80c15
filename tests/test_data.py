"""The spirals task: deterministic from a seed, balanced, learnable in seconds."""

import pytest
import torch
import torch.nn.functional as F

from ddp_lab.data import global_batches, spirals, split
from ddp_lab.models import flat_parameters, mlp, parameter_count


def test_same_seed_same_data_and_the_global_random_state_is_untouched():
    torch.manual_seed(123)
    before = torch.rand(1)
    torch.manual_seed(123)
    a = spirals(100, seed=4)
    assert torch.rand(1) == before  # spirals used its own generator
    b = spirals(100, seed=4)
    c = spirals(100, seed=5)
    assert torch.equal(a.tensors[0], b.tensors[0]) and torch.equal(a.tensors[1], b.tensors[1])
    assert not torch.equal(a.tensors[0], c.tensors[0])


def test_shapes_types_and_balanced_interleaved_classes():
    data = spirals(90, classes=3)
    x, y = data.tensors
    assert x.shape == (90, 2) and x.dtype == torch.float32
    assert y.dtype == torch.int64 and y[:6].tolist() == [0, 1, 2, 0, 1, 2]
    assert torch.bincount(y).tolist() == [30, 30, 30]
    assert x.abs().max() < 1.6


def test_a_small_mlp_learns_it_but_a_linear_model_cannot():
    train, validation = split(spirals(1200, seed=0), 300)

    def accuracy(widths, epochs):
        model = mlp(widths, seed=0)
        optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
        for x, y in global_batches(train, 32, epochs * len(train) // 32, seed=1):
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()
            optimizer.step()
        x, y = validation.tensors
        return (model(x).argmax(1) == y).float().mean().item()

    assert accuracy((2, 64, 64, 3), 10) > 0.9
    assert accuracy((2, 3), 5) < 0.7


def test_split_and_global_batches():
    train, validation = split(spirals(100), 20)
    assert len(train) == 80 and len(validation) == 20
    batches = global_batches(train, 32, 5, seed=0)
    assert [len(x) for x, _ in batches] == [32] * 5
    again = global_batches(train, 32, 5, seed=0)
    assert all(torch.equal(a[0], b[0]) for a, b in zip(batches, again))
    # the first two batches of an epoch never repeat a sample
    first = torch.cat([batches[0][0], batches[1][0]])
    assert len(torch.unique(first, dim=0)) == 64


def test_mlp_names_its_layers_and_seeds_reproducibly():
    model = mlp((2, 8, 8, 3), seed=0)
    assert [name for name, _ in model.named_children()] == ["fc1", "relu1", "fc2", "relu2", "fc3"]
    assert parameter_count(model) == 2 * 8 + 8 + 8 * 8 + 8 + 8 * 3 + 3
    assert torch.equal(flat_parameters(model), flat_parameters(mlp((2, 8, 8, 3), seed=0)))
    assert not torch.equal(flat_parameters(model), flat_parameters(mlp((2, 8, 8, 3), seed=1)))


@pytest.mark.parametrize("call, message", [
    (lambda: spirals(0), "samples must be a positive int, got 0"),
    (lambda: spirals(10, classes=1), "classes must be at least 2"),
    (lambda: spirals(10, noise=-1), "noise must be a finite number >= 0, got -1"),
    (lambda: spirals(10, noise=float("inf")), "noise must be a finite number >= 0, got inf"),
    (lambda: split(spirals(10), 10), "leaves no training sample"),
    (lambda: global_batches(spirals(10), 11, 1), "larger than the dataset"),
    (lambda: mlp((2,)), "widths must be at least two positive ints"),
])
def test_bad_input_is_named(call, message):
    with pytest.raises(ValueError, match=message):
        call()
