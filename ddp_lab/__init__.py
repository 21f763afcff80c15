"""ddp_lab: real torch.distributed process groups from a notebook cell.

The companion package of the book. The pieces a chapter uses:

- ``launch(fn, world_size)``: run a function on W fresh ranks, get their results.
- ``Ranks(world_size)`` and the ``%%ddp`` cell magic (``%load_ext ddp_lab``):
  ranks that stay alive between cells, for interactive work.
- ``RankFailed``, ``RankDied``, ``RanksTimedOut``: what a launch can raise.

``import ddp_lab`` stays light: drawings (matplotlib, ipywidgets) live in
``ddp_lab.draw`` and are imported only when asked for.
"""

from .errors import LaunchError, RankDied, RankFailed, RanksTimedOut
from .launcher import launch
from .persistent import Ranks

__all__ = [
    "launch",
    "Ranks",
    "LaunchError",
    "RankFailed",
    "RankDied",
    "RanksTimedOut",
]


def load_ipython_extension(ipython):
    """``%load_ext ddp_lab``: register the ``%ddp`` and ``%%ddp`` magics."""
    from .magic import DDPMagics

    ipython.register_magics(DDPMagics(ipython))
