"""The Gantt drawing of a backward timeline: plain data in, a figure out."""

import io

import matplotlib
import pytest
from matplotlib.patches import Rectangle

from ddp_lab.data_parallel.overlap_timeline import BackwardTimeline, Interval
from ddp_lab.draw.timeline import BUCKET_COLOURS, draw_timeline, draw_timelines

matplotlib.use("Agg")


def timeline(buckets):
    """Three layers of 10 ms each (fc3 first); one bucket, or one per layer."""
    layers = tuple(Interval(name, 0.010 * i, 0.010 * (i + 1)) for i, name in enumerate(["fc3", "fc2", "fc1"]))
    if buckets == 1:
        return BackwardTimeline(0, 2, 25.0, layers, (Interval("bucket 0", 0.031, 0.050),),
                                (("fc3.bias", "fc3.weight", "fc2.bias", "fc2.weight", "fc1.bias", "fc1.weight"),),
                                (3000,), 0.051)
    spans = (Interval("bucket 0", 0.0101, 0.016), Interval("bucket 1", 0.0201, 0.026),
             Interval("bucket 2", 0.0301, 0.036))
    contents = (("fc3.bias", "fc3.weight"), ("fc2.bias", "fc2.weight"), ("fc1.bias", "fc1.weight"))
    return BackwardTimeline(0, 2, 1.0, layers, spans, contents, (1000, 1000, 1000), 0.037)


def bars(ax):
    """{row: [bars]}, rows counted from the bottom: 0 is the last bucket, the top row the backward pass."""
    rows = {}
    for p in ax.patches:
        if isinstance(p, Rectangle) and p.get_width() > 0 and 0.5 < p.get_height() < 1:
            rows.setdefault(round(p.get_y() + p.get_height() / 2), []).append(p)
    return rows


def test_one_bar_per_layer_and_per_bucket_coloured_by_bucket():
    fig = draw_timeline(timeline(3))
    ax = fig.axes[0]
    drawn = bars(ax)
    assert sorted(drawn) == [0, 1, 2, 3]  # bucket 2, bucket 1, bucket 0, backward
    layer_bars = drawn[3]
    bucket_bars = [drawn[2][0], drawn[1][0], drawn[0][0]]  # bucket 0, 1, 2: one bar each
    assert all(len(drawn[row]) == 1 for row in range(3))
    assert [round(b.get_x(), 3) for b in layer_bars] == [0.0, 10.0, 20.0]  # milliseconds
    assert [round(b.get_width(), 3) for b in bucket_bars] == [5.9, 5.9, 5.9]
    for layer_bar, bucket_bar, colour in zip(layer_bars, bucket_bars, BUCKET_COLOURS):
        assert matplotlib.colors.to_hex(layer_bar.get_facecolor()) == colour.lower()
        assert matplotlib.colors.to_hex(bucket_bar.get_facecolor()) == colour.lower()
    assert [t.get_text() for t in ax.get_yticklabels()] == [
        "bucket 2: fc1", "bucket 1: fc2", "bucket 0: fc3", "backward"]
    assert "bucket_cap_mb = 1: 3 buckets" in ax.get_title(loc="left")
    labels = {t.get_text() for t in ax.texts}
    assert {"fc3", "fc2", "fc1"} <= labels


def test_two_bucket_sizes_share_one_time_axis_and_render():
    fig = draw_timelines([timeline(1), timeline(3)], titles=["one bucket", "three buckets"])
    top, bottom = fig.axes
    assert top.get_xlim() == bottom.get_xlim()
    assert top.get_xlim()[1] == pytest.approx(51 * 1.04)
    assert [top.get_title(loc="left"), bottom.get_title(loc="left")] == ["one bucket", "three buckets"]
    assert {row: len(b) for row, b in bars(top).items()} == {1: 3, 0: 1}
    assert {row: len(b) for row, b in bars(bottom).items()} == {3: 3, 2: 1, 1: 1, 0: 1}
    assert [t.get_text() for t in top.get_yticklabels()] == ["bucket 0: fc3, fc2, fc1", "backward"]
    png = io.BytesIO()
    fig.savefig(png, format="png")
    assert png.getvalue()[:8] == b"\x89PNG\r\n\x1a\n"


def test_labels_that_do_not_fit_are_left_out():
    narrow = timeline(3)
    narrow = BackwardTimeline(0, 2, 1.0, narrow.layers, narrow.buckets, narrow.bucket_contents,
                              narrow.bucket_bytes, 5.0)  # a long axis: the 10 ms bars are slivers
    ax = draw_timeline(narrow).axes[0]
    assert [t.get_text() for t in ax.texts] == []


def test_bad_input_is_refused_with_a_clear_message():
    with pytest.raises(TypeError, match="expected a BackwardTimeline"):
        draw_timeline({"layers": []})
    with pytest.raises(ValueError, match="at least one timeline"):
        draw_timelines([])
    with pytest.raises(ValueError, match="got 1 titles for 2 timelines"):
        draw_timelines([timeline(1), timeline(3)], titles=["one"])
