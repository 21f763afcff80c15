"""Draw the spirals task, and what a trained classifier makes of the plane.

:func:`draw_spirals` takes a ``TensorDataset`` of 2-D points and labels
(:func:`ddp_lab.data.spirals`) and, optionally, a model: then the plane is
shaded by the class the model predicts, so one picture shows both the data
and what was learned. Nothing here starts a process; the model is evaluated
here, in the notebook, on a grid of points.

Used in Chapters 7 and 10.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure

from ddp_lab.draw.palette import BLUE, GREEN, ORANGE, PURPLE, SKY_BLUE, VERMILLION

__all__ = ["draw_spirals"]

# Okabe & Ito: distinguishable with the common colour-vision deficiencies.
CLASS_COLOURS = (ORANGE, BLUE, GREEN, PURPLE, VERMILLION, SKY_BLUE)


def draw_spirals(dataset, model=None, *, ax=None, title: str | None = None,
                 resolution: int = 200) -> Figure:
    """Scatter the points coloured by class; shade the model's decision regions if given."""
    x, y = (t.detach().cpu() for t in dataset.tensors[:2])
    if x.ndim != 2 or x.shape[1] != 2:
        raise ValueError(f"draw_spirals needs 2-D points (shape [n, 2]), got shape {tuple(x.shape)}")
    classes = int(y.max()) + 1
    if classes > len(CLASS_COLOURS):
        raise ValueError(f"draw_spirals colours at most {len(CLASS_COLOURS)} classes, got {classes}")
    colours = CLASS_COLOURS[:classes]
    if ax is None:
        fig, ax = plt.subplots(figsize=(4.2, 4.2))
        plt.close(fig)  # shown once, as the cell's value
    limit = float(x.abs().max()) * 1.08
    if model is not None:
        _draw_regions(ax, model, limit, resolution, colours)
    for c in range(classes):
        points = x[y == c].numpy()
        ax.scatter(points[:, 0], points[:, 1], s=9, color=colours[c], edgecolor="white",
                   linewidth=0.3, label=f"class {c}", zorder=2)
    ax.set_xlim(-limit, limit)
    ax.set_ylim(-limit, limit)
    ax.set_aspect("equal")
    ax.set_xlabel("$x_1$")
    ax.set_ylabel("$x_2$")
    ax.legend(loc="upper right", fontsize=9, framealpha=0.9, markerscale=1.5)  # 10 px even in a 9.5 in figure
    if title:
        ax.set_title(title, fontsize=11)
    return ax.figure


def _draw_regions(ax, model, limit, resolution, colours):
    grid = np.linspace(-limit, limit, resolution, dtype=np.float32)
    xx, yy = np.meshgrid(grid, grid)
    points = torch.from_numpy(np.stack([xx.ravel(), yy.ravel()], axis=1))
    parameter = next(model.parameters(), None)
    if parameter is not None:
        points = points.to(parameter.device, parameter.dtype)
    was_training = model.training
    model.eval()
    with torch.no_grad():
        predicted = model(points).argmax(1).cpu().numpy().reshape(xx.shape)
    model.train(was_training)
    ax.contourf(xx, yy, predicted, levels=np.arange(len(colours) + 1) - 0.5,
                cmap=ListedColormap(colours), alpha=0.22, zorder=0)
