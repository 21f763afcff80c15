"""Pictures of the book: plain data in, matplotlib figures out.

Nothing here starts a process, and nothing here is imported by ``import
ddp_lab``: import the drawing modules where a picture is wanted, e.g.
``from ddp_lab.draw.layout import draw_topology``. They need matplotlib
(and ipywidgets for the interactive explorers).
"""
