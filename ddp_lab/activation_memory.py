"""What autograd keeps for the backward pass, counted tensor by tensor.

To compute gradients, the backward pass needs some of the forward pass's
tensors: a ``Linear`` layer needs its input (the gradient of its weight is
``grad_output^T @ input``), a ``ReLU`` needs its output (to know where it
was zero), the loss needs its log-probabilities. Autograd keeps them from
the forward pass until the backward pass has used them. Every one of them
has one row per sample, so this memory grows linearly with the batch size:
it is what caps the batch a GPU can hold.

:func:`saved_for_backward` measures it exactly, with PyTorch's
``torch.autograd.graph.saved_tensors_hooks``: autograd hands every tensor it
saves to a hook, and the hook writes down its size. A tensor saved twice
(a ReLU's output is also the next layer's input) is stored once, so it is
counted once. Parameters that autograd saves (a ``Linear`` keeps a reference
to its weight to compute the gradient of its input) are counted apart: they
are the model's own memory, whatever the batch.

>>> import torch
>>> layer = torch.nn.Linear(3, 2)
>>> x = torch.ones(5, 3)
>>> saved = saved_for_backward(lambda: layer(x).sum(), layer.parameters())
>>> saved.activation_bytes   # the input, 5 x 3 float32, for the weight's gradient
60

What is counted is what the forward pass leaves behind for the backward
pass. The peak memory of a step is a little higher (temporaries of the
forward pass, the gradients being written), and the weights, gradients and
optimizer state come on top.

Used in Chapter 1, to count what training one model holds in memory.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import torch

__all__ = ["SavedTensor", "SavedForBackward", "saved_for_backward"]


@dataclass(frozen=True)
class SavedTensor:
    """One block of memory autograd keeps: its shape as saved, dtype and size.

    ``nbytes`` is the size of the whole storage behind the tensor, which is
    what stays allocated. ``is_parameter`` marks a model parameter.
    """

    shape: tuple[int, ...]
    dtype: str
    nbytes: int
    is_parameter: bool

    def __str__(self) -> str:
        kind = "parameter" if self.is_parameter else "activation"
        return f"{kind:<10}  {self.dtype:<8}  {str(list(self.shape)):<16}  {self.nbytes:>12,} bytes"


@dataclass(frozen=True)
class SavedForBackward:
    """Everything one forward pass saved for its backward pass, in the order saved."""

    tensors: tuple[SavedTensor, ...]

    @property
    def activation_bytes(self) -> int:
        """Bytes of the saved tensors that are not parameters: they grow with the batch."""
        return sum(t.nbytes for t in self.tensors if not t.is_parameter)

    @property
    def parameter_bytes(self) -> int:
        """Bytes of the parameters autograd kept a reference to (no copy is made)."""
        return sum(t.nbytes for t in self.tensors if t.is_parameter)

    def __str__(self) -> str:
        lines = [str(t) for t in self.tensors]
        lines.append(f"activations saved for backward: {self.activation_bytes:,} bytes")
        return "\n".join(lines)

    __repr__ = __str__


def saved_for_backward(forward: Callable[[], torch.Tensor], parameters: Iterable[torch.Tensor] = ()) -> SavedForBackward:
    """Run ``forward()`` and record every tensor autograd saves for the backward pass.

    ``forward`` takes no arguments and runs the forward pass (usually up to
    the loss), e.g. ``lambda: loss_fn(model(x), y)``. ``parameters`` are the
    model's parameters, so that saved references to them are told apart
    from activations. Each storage is counted once, however many times it
    is saved. The backward pass is not run.
    """
    if not callable(forward):
        raise TypeError(
            f"forward must be a function that runs the forward pass, such as "
            f"lambda: loss_fn(model(x), y); got {type(forward).__name__}"
        )
    parameter_storages = {_storage_address(p) for p in parameters}
    seen: dict[int, SavedTensor] = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        address = _storage_address(tensor)
        if address not in seen:
            seen[address] = SavedTensor(
                shape=tuple(tensor.shape),
                dtype=str(tensor.dtype).removeprefix("torch."),
                nbytes=tensor.untyped_storage().nbytes(),
                is_parameter=address in parameter_storages,
            )
        return tensor  # keep the tensor itself: nothing is copied or moved

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        output = forward()
    del output  # frees the graph and what it saved
    return SavedForBackward(tuple(seen.values()))


def _storage_address(tensor: torch.Tensor) -> int:
    """Where a tensor's memory starts: two views of one storage share it."""
    return tensor.untyped_storage().data_ptr()
