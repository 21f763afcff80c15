"""What the forkserver imports once, before it forks any rank.

The forkserver (see ``ddp_lab.launcher.forkserver``) imports this module when it starts. Every
rank it forks later gets these modules for free, already in memory.

Two lines around the imports follow the recipe in the documentation of
Python's ``gc`` module for a process that forks without exec:

- ``gc.disable()`` while importing. torch and ``torch._dynamo`` create about
  370,000 objects the cyclic garbage collector tracks, and it would walk them
  again and again while they are made, though none of them is garbage: that
  alone takes about a quarter of the import's time.
- ``gc.freeze()`` once they are all made. It moves every object into a
  permanent generation that collections never walk. The ranks forked later
  inherit that generation, so their own collections skip torch's objects, and
  the memory pages holding them stay shared with the forkserver instead of
  being copied when a collection would touch them.

``torch._dynamo`` is imported too because any rank that builds an optimizer
needs it: torch's optimizers import it when their first parameter group is
added.

Part of the machinery of Chapter 3's ``launch``.
"""

import gc

gc.disable()
try:
    import torch  # noqa: F401
    import torch._dynamo  # noqa: F401
    import torch.distributed  # noqa: F401

    from ddp_lab.launcher import worker  # noqa: F401
finally:
    gc.freeze()
    gc.enable()
