"""Lazy exports: a package names what it offers, and imports each piece only when asked.

``import ddp_lab`` must stay light: a Slurm task that runs ``python -m
ddp_lab.cluster.slurm`` or a notebook that only draws a topology must not
pay a second for importing torch. So ``ddp_lab/__init__.py`` (and
``ddp_lab/launcher/__init__.py``) list their public names with the module
each lives in, and this module's ``__getattr__`` (PEP 562) imports that
module the first time the name is looked up:

>>> import ddp_lab
>>> ddp_lab.Topology.__module__       # ddp_lab.topology, imported just now
'ddp_lab.topology'

It keeps ``import ddp_lab`` light for every chapter, and for the Slurm tasks of Chapter 13.
"""

from __future__ import annotations

import importlib


def lazy_exports(package: str, exports: dict[str, str]):
    """``__getattr__`` and ``__dir__`` for ``package``: ``exports`` maps a name to its module."""

    def __getattr__(name):
        if name not in exports:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(exports[name]), name)
        setattr(importlib.import_module(package), name, value)  # looked up once
        return value

    def __dir__():
        return sorted(set(exports) | set(vars(importlib.import_module(package))))

    return __getattr__, __dir__
