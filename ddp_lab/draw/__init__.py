"""Pictures of the book: plain data in, matplotlib figures out.

Nothing here starts a process, and nothing here is imported by ``import
ddp_lab``: import the drawing modules where a picture is wanted, e.g.
``from ddp_lab.draw.layout import draw_topology``. They need matplotlib.
The interactive controls, which also work in the static book, are in
``ddp_lab.widgets``.

Chapters 2, 4 to 10, 12, 14 and 15 and Lab 1 draw with it; every module names its chapter.
(What the GPU check measured is printed by ``ddp_lab.gpu_check.report``; its
profiled DDP step is drawn by ``gpu_profile``.)
"""
