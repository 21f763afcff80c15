"""The book's interactive controls: sliders that redraw a picture as they move,
in JupyterLab, in Colab and in the static HTML of the book, with no kernel.

One module per control, each named after what it shows:

- :class:`~ddp_lab.widgets.layout.LayoutExplorer` (Chapter 2): nodes, GPUs
  and processes, and the ranks of every process;
- :class:`~ddp_lab.widgets.memory.MemoryCalculator` (Chapter 15, Lab 6):
  memory per rank under DDP and ZeRO-1/2/3;
- :class:`~ddp_lab.widgets.allreduce_cost.AllReduceCost` (Chapter 6): ring
  against naive all-reduce time as the world and the message grow;
- :class:`~ddp_lab.widgets.buckets.BucketTradeoff` (Chapter 8): DDP's
  bucket size against the time a backward pass waits for its gradients;
- :class:`~ddp_lab.widgets.scaling.ScalingModel` (Chapter 12b): the cost
  of a DDP step on a cluster, and when data parallelism stops scaling.

:mod:`ddp_lab.widgets.control` says how a control is built (an anywidget
whose JavaScript lives in ``ddp_lab/widgets/js/``) and how the book shows
it. Needs ``anywidget`` and matplotlib; ``import ddp_lab`` does not import
this package.
"""

__all__ = ["LayoutExplorer", "MemoryCalculator", "AllReduceCost", "BucketTradeoff", "ScalingModel"]

_MODULES = {
    "LayoutExplorer": "layout",
    "MemoryCalculator": "memory",
    "AllReduceCost": "allreduce_cost",
    "BucketTradeoff": "buckets",
    "ScalingModel": "scaling",
}


def __getattr__(name):
    """Import a control's module only when it is asked for."""
    if name in _MODULES:
        from importlib import import_module

        return getattr(import_module(f"{__name__}.{_MODULES[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
