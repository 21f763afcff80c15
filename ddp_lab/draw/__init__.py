"""Pictures of the book: plain data in, matplotlib figures out.

Nothing here starts a process, and nothing here is imported by ``import
ddp_lab``: import the drawing modules where a picture is wanted, e.g.
``from ddp_lab.draw.layout import draw_topology``. They need matplotlib.
The interactive controls, which also work in the static book, are in
``ddp_lab.widgets``.

Chapters 2, 4 to 10, 12, 13b, 14 and 15 and Lab 1 draw with it; every module names its chapter.
(What the GPU check measured is printed by ``ddp_lab.gpu_check.report``; its
profiled DDP step is drawn by ``gpu_profile``.)

**Sharp on every screen.** A figure is drawn at 100 dots per inch, the
size the reader sees, but a HiDPI ("retina") screen has two device pixels to
each of those, and a 1x picture blurs there and when zoomed. So importing
this package switches the notebook's figure output to IPython's ``retina``
format (:func:`use_retina`): every figure the notebook shows, drawn here or
with plain ``plt.subplots``, becomes a PNG of twice the pixels whose output
metadata give its natural width and height, which JupyterLab, Colab and the
built book (MyST-NB writes the width as the ``<img>``'s style; the
height is left out, so that a figure the column shrinks keeps its shape)
show at the natural size. Nothing else changes: the figure's own
``dpi``, its ``text/plain`` (``<Figure size 720x400 with 1 Axes>``) and the
text outputs that nbval compares stay as they were. A notebook that draws
without importing ``ddp_lab.draw`` gets the same with ``import
ddp_lab.draw``. The static pictures of the controls (``ddp_lab.widgets``)
and the frames of animations (:mod:`ddp_lab.draw.allreduce`) are drawn at
twice their pixels in the same way.

**Type a reader can read.** The book's text column is 725 px wide on a
desktop; a wider figure is scaled down to it. Every text of a figure is at
least :data:`MIN_TEXT_PX` pixels as shown there: :func:`shown_text_px`
measures it, ``tests/test_draw_type_size.py`` holds every drawing to it and
``tools/measure_figures.py`` prints it for each figure of the book.
On a 390 px phone the column is 358 px, where text of 10 px in the desktop
column would shrink to 4.9 px; so there the book shows a figure at least 0.8
as wide as on the desktop (580 px at most), its text then at least
:data:`PHONE_MIN_TEXT_PX`, and one wider than the column scrolls sideways in
its own box (``ddp_lab/widgets/js/wide_pictures.css``; ``tests/test_book_html.py``
measures it on every page).
Figures are drawn on white (``savefig``'s default face colour, never a
transparent background), so they stay legible in the book's dark mode.
"""

from __future__ import annotations

COLUMN_PX = 725     # the book's text column on a desktop (757 px, less its padding)
PHONE_COLUMN_PX = 358  # the same column on a 390 px phone
MIN_TEXT_PX = 10    # the smallest text a figure may show, at the size it is shown
PHONE_MIN_TEXT_PX = 8  # ... on a phone, where wide_pictures.css shows a figure at least 0.8 as wide as in the column
RETINA = 2          # device pixels per CSS pixel the pictures are drawn for

__all__ = ["COLUMN_PX", "PHONE_COLUMN_PX", "MIN_TEXT_PX", "PHONE_MIN_TEXT_PX", "RETINA", "use_retina", "shown_text_px",
           "smallest_shown_px"]


def use_retina() -> bool:
    """Show this notebook's figures as 2x PNGs at their natural size (see the module docstring).

    Sets IPython's ``InlineBackend.figure_formats`` to ``{"retina"}``, the same
    as ``%config InlineBackend.figure_formats = {"retina"}``: the setting
    outlives a later ``%matplotlib inline``, which reads it. Does nothing
    outside IPython or where matplotlib draws with another backend (ipympl's
    widget backend draws at the screen's own resolution). Returns whether it
    took effect.
    """
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    if shell is None or not hasattr(shell, "display_formatter"):
        return False
    import matplotlib
    import matplotlib.pyplot  # noqa: F401  (activates the inline backend first, which resets the formats)

    if "inline" not in matplotlib.get_backend().lower():
        return False
    try:
        from matplotlib_inline.backend_inline import InlineBackend, set_matplotlib_formats
    except ImportError:
        return False
    from matplotlib.figure import Figure

    InlineBackend.instance().figure_formats = {"retina"}
    set_matplotlib_formats("retina")
    shell.display_formatter.formatters["image/png"].for_type(Figure, _retina_png)
    return True


def _retina_png(fig):
    """IPython's ``retina`` PNG, with the natural width in its metadata but not the height.

    Sphinx writes both as the ``<img>``'s inline style; the book's CSS shrinks
    a figure wider than the column (``max-width: 100%``) and a fixed height
    would then stretch it. With the width alone the height follows it.
    """
    from IPython.core.pylabtools import retina_figure
    from matplotlib_inline.backend_inline import InlineBackend

    result = retina_figure(fig, base64=True, **InlineBackend.instance().print_figure_kwargs)
    if result is None:
        return None
    data, metadata = result
    return data, {"width": metadata["width"]}


def _texts(fig):
    from matplotlib.text import Text

    return [t for t in fig.findobj(Text) if t.get_visible() and t.get_text().strip()
            and (t.axes is None or t.axes.get_visible())]


def shown_text_px(fig, *, column_px: int = COLUMN_PX) -> list[tuple[float, str]]:
    """Every text of ``fig`` with its height in CSS pixels as a reader sees it, smallest first.

    The figure is shown as IPython saves it (``bbox_inches="tight"``): its
    natural width is the tight bounding box at ``fig.dpi``; where that is wider
    than ``column_px`` the browser scales the picture down to the column, and
    its text with it. A text whose anchor is outside the picture (a tick label
    that is not drawn) is left out.
    """
    if not hasattr(fig.canvas, "get_renderer"):  # a closed figure may keep a bare canvas
        from matplotlib.backends.backend_agg import FigureCanvasAgg

        FigureCanvasAgg(fig)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    box = fig.get_tightbbox(renderer)  # inches
    width_px = (box.width + 0.2) * fig.dpi  # savefig's pad_inches=0.1 on each side
    scale = min(width_px, column_px) / width_px
    inside = box.transformed(fig.dpi_scale_trans).padded(2)
    sizes = []
    for text in _texts(fig):
        extent = text.get_window_extent(renderer)
        if not inside.overlaps(extent):
            continue
        sizes.append((text.get_fontsize() * fig.dpi / 72 * scale, text.get_text()))
    return sorted(sizes)


def smallest_shown_px(fig, *, column_px: int = COLUMN_PX) -> float:
    """The smallest text of ``fig`` in CSS pixels as shown in a column ``column_px`` wide."""
    sizes = shown_text_px(fig, column_px=column_px)
    return sizes[0][0] if sizes else float("inf")


use_retina()
