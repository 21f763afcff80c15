"""Chapter 13b's pictures: each rank's last collectives in a hang, and computing vs waiting per rank.

Plain data in, a figure out: flight records shaped as PyTorch's dumps (the
keys ``read_flight_records`` returns) and ``RankTimes`` as
``WaitComputeTimer.gather()`` returns them. No process is started.
"""

import matplotlib

matplotlib.use("Agg")

import pytest
from matplotlib.patches import FancyBboxPatch, Rectangle
from matplotlib.text import Text

from ddp_lab.debugging.stragglers import RankTimes
from ddp_lab.draw.hangs import draw_last_collectives, draw_wait_compute
from ddp_lab.draw.palette import ERROR_RED

COLUMN_PX = 725  # the book's text column on a desktop
MIN_PX = 10


def entry(seq, op, sizes):
    return {"collective_seq_id": seq, "profiling_name": f"gloo:{op}", "input_sizes": sizes, "is_p2p": False}


def hung_dumps():
    """Chapter 13b's recorded hang: four gradient all-reduces, then rank 0's all_reduce against rank 1's barrier."""
    common = [entry(1, "all_reduce", [[16, 8]]), entry(2, "all_reduce", [[16]]),
              entry(3, "all_reduce", [[16, 8]]), entry(4, "all_reduce", [[16]])]
    return {0: {"entries": common + [entry(5, "all_reduce", [[]])]},
            1: {"entries": common + [entry(5, "barrier", [])]}}


def texts(fig):
    return [t for t in fig.findobj(Text) if t.get_text().strip() and t.get_visible()]


def smallest_shown_px(fig):
    """The smallest text, in pixels as the browser shows it: scaled down when the figure is wider than the column."""
    width_px = fig.get_figwidth() * fig.dpi
    scale = min(width_px, COLUMN_PX) / width_px
    return min(t.get_fontsize() * fig.dpi / 72 * scale for t in texts(fig))


def red_boxes(fig):
    return [p for p in fig.axes[0].patches
            if isinstance(p, FancyBboxPatch) and matplotlib.colors.same_color(p.get_edgecolor(), ERROR_RED)]


def test_the_first_mismatch_is_red_on_every_rank_and_nothing_else_is():
    fig = draw_last_collectives(hung_dumps())
    boxes = [p for p in fig.axes[0].patches if isinstance(p, FancyBboxPatch)]
    assert len(boxes) == 2 * 5
    red = red_boxes(fig)
    assert len(red) == 2
    assert {round(p.get_x() + p.get_width() / 2) for p in red} == {4}  # the fifth column: sequence number 5
    words = [t.get_text() for t in texts(fig)]
    assert "barrier" in words and "scalar" in words
    assert words.count("waits here") == 2
    assert "agree up to number 4" in fig.axes[0].get_title(loc="left")


def test_a_rank_that_never_called_a_collective_gets_an_empty_box():
    dumps = hung_dumps()
    dumps[1]["entries"] = dumps[1]["entries"][:4]  # rank 1 stopped before number 5
    fig = draw_last_collectives(dumps)
    assert [t.get_text() for t in texts(fig)].count("not called") == 1
    assert len(red_boxes(fig)) == 2


def test_agreeing_ranks_have_no_red_and_last_limits_the_columns():
    dumps = {r: {"entries": [entry(s, "all_reduce", [[4]]) for s in range(1, 11)]} for r in range(3)}
    fig = draw_last_collectives(dumps, last=3)
    assert red_boxes(fig) == []
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == ["8", "9", "10"]
    assert fig.axes[0].get_title(loc="left") == "every rank agrees"


@pytest.mark.parametrize("dumps, last, match", [
    ({}, 6, "at least one rank"),
    ({0: {"entries": []}}, 6, "TORCH_FR_BUFFER_SIZE"),
    ({0: [1, 2]}, 6, "expected a flight record"),
    (hung_dumps(), 0, "last must be a positive number"),
])
def test_bad_flight_records_are_refused(dumps, last, match):
    with pytest.raises((ValueError, TypeError), match=match):
        draw_last_collectives(dumps, last=last)


def times(slow):
    """Four ranks over 10 steps; rank ``slow`` computes 100 ms a step and the others wait for it."""
    return [RankTimes(r, 1.0 if r == slow else 0.01, 0.1 if r == slow else 1.09, 10) for r in range(4)]


def test_each_bar_is_the_mean_step_split_into_computing_and_waiting():
    fig = draw_wait_compute({"slow disk": times(2), "none": times(None)}, stragglers={"slow disk": 2})
    top = fig.axes[0]
    bars = [p for p in top.patches if isinstance(p, Rectangle)]
    assert len(bars) == 8  # computing and waiting, for each of 4 ranks
    compute = sorted(p.get_width() for p in bars[0::2])
    wait = sorted(p.get_width() for p in bars[1::2])
    assert compute == pytest.approx([1.0, 1.0, 1.0, 100.0])  # milliseconds per step
    assert wait == pytest.approx([10.0, 109.0, 109.0, 109.0])
    labels = {t.get_text(): t.get_color() for t in top.get_yticklabels()}
    assert matplotlib.colors.same_color(labels["rank 2 (straggler)"], ERROR_RED)
    assert not any("straggler" in t.get_text() for t in fig.axes[1].get_yticklabels())
    assert fig.axes[0].get_xlim() == fig.axes[1].get_xlim()  # one time axis for both runs


@pytest.mark.parametrize("runs, stragglers, match", [
    ({}, None, "at least one run"),
    ({"a": []}, None, "at least one run"),
    ({"a": [(0, 1.0, 2.0)]}, None, "expected RankTimes"),
    ({"a": times(None)}, {"b": 1}, r"stragglers names runs \['b'\]"),
])
def test_bad_times_are_refused(runs, stragglers, match):
    with pytest.raises((ValueError, TypeError), match=match):
        draw_wait_compute(runs, stragglers=stragglers)


@pytest.mark.parametrize("draw", [lambda: draw_last_collectives(hung_dumps()),
                                  lambda: draw_wait_compute(times(2)),
                                  lambda: draw_wait_compute({"slow": times(2), "none": times(None)})])
def test_text_is_at_least_10_px_in_the_column(draw):
    assert smallest_shown_px(draw()) >= MIN_PX
