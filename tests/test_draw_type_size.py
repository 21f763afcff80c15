"""Every figure of the book has text a reader can read at the size it is shown.

``ddp_lab.draw`` promises at least ``MIN_TEXT_PX`` (10) CSS pixels for every
text of a figure in the book's 725 px desktop column, where a wider figure
is scaled down. The figures are those ``tools/measure_figures.py`` draws:
each drawing function of the book with inputs like its chapter's, and each
control's static picture. No ranks are started (the animation, which needs
them, is held to the same minimum on a phone in test_draw_allreduce.py).
"""

import os
import sys

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from ddp_lab.draw import COLUMN_PX, MIN_TEXT_PX, shown_text_px  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tools"))
import measure_figures  # noqa: E402

FIGURES = measure_figures.book_figures() + measure_figures.widget_figures()


@pytest.mark.parametrize("draw", [thunk for _, thunk in FIGURES], ids=[name for name, _ in FIGURES])
def test_no_text_under_the_minimum_in_the_desktop_column(draw):
    fig = draw()
    sizes = shown_text_px(fig, column_px=COLUMN_PX)
    plt.close(fig)
    small = [(round(px, 1), text) for px, text in sizes if px < MIN_TEXT_PX]
    assert sizes and not small, f"text under {MIN_TEXT_PX} px as shown: {small[:5]}"


def test_the_measure_counts_the_column_scaling():
    """A 10 pt label is 13.9 px at 100 dpi; in a figure twice the column's width, half that."""
    narrow, ax = plt.subplots(figsize=(5, 2), dpi=100)
    ax.axis("off")
    ax.text(0.5, 0.5, "label", fontsize=10)
    wide = plt.figure(figsize=(2 * COLUMN_PX / 100, 2), dpi=100)
    ax = wide.add_axes((0, 0, 1, 1))
    ax.axis("off")
    ax.text(0, 0.5, "left", fontsize=10, ha="left")
    ax.text(1, 0.5, "right", fontsize=10, ha="right")
    assert shown_text_px(narrow)[0][0] == pytest.approx(10 * 100 / 72)
    assert shown_text_px(wide)[0][0] == pytest.approx(10 * 100 / 72 / 2, rel=0.05)
    plt.close(narrow)
    plt.close(wide)
