"""The shard picture: indices per epoch and rank in, a figure out; padding and
dropped samples are marked."""

import io

import matplotlib
import pytest
from matplotlib.patches import Rectangle

from ddp_lab.draw.shards import PADDING_EDGE, draw_shard_runs, draw_shards

matplotlib.use("Agg")

# 10 samples on 4 ranks, as DistributedSampler gives them (two epochs)
PADDED = [[[4, 3, 6], [1, 9, 2], [7, 0, 4], [5, 8, 1]], [[5, 0, 7], [6, 8, 4], [1, 9, 5], [2, 3, 6]]]
DROPPED = [[[4, 3], [1, 9], [7, 0], [5, 8]], [[5, 0], [6, 8], [1, 9], [2, 3]]]


def cells(ax):
    return [p for p in ax.patches if isinstance(p, Rectangle)]


def texts(ax):
    return [t.get_text() for t in ax.texts]


def is_padding(patch):
    return matplotlib.colors.to_hex(patch.get_edgecolor()) == PADDING_EDGE.lower()


def test_one_panel_per_epoch_one_cell_per_index_in_rank_order():
    fig = draw_shards(PADDED, 10)
    first, second = fig.axes
    assert len(cells(first)) == len(cells(second)) == 12
    assert texts(first) == ["4", "3", "6", "1", "9", "2", "7", "0", "4", "5", "8", "1"]
    assert [t.get_text() for t in first.get_yticklabels()] == ["rank 3", "rank 2", "rank 1", "rank 0"]
    assert [first.get_title(), second.get_title()] == ["epoch 0", "epoch 1"]


def test_padding_is_marked_and_only_the_second_copy():
    first = draw_shards(PADDED, 10).axes[0]
    marked = [(round(c.get_x()), round(c.get_y())) for c in cells(first) if is_padding(c)]
    # the repeated 4 (rank 2, position 2) and 1 (rank 3, position 2); rows count up from rank 3
    assert sorted(marked) == [(2, 0), (2, 1)]


def test_same_index_same_colour_everywhere():
    fig = draw_shards(PADDED, 10)
    colours = {}
    for ax in fig.axes:
        for patch, label in zip(cells(ax), texts(ax)):
            colours.setdefault(label, set()).add(matplotlib.colors.to_hex(patch.get_facecolor()))
    assert all(len(c) == 1 for c in colours.values())
    assert len({next(iter(c)) for c in colours.values()}) == 10


def test_dropped_samples_are_listed_and_runs_stack():
    fig = draw_shard_runs({"padding": PADDED, "drop_last=True": DROPPED}, 10)
    axes = fig.axes
    assert len(axes) == 4
    assert [ax.get_xlabel() for ax in axes[2:]] == ["not seen: 2, 6", "not seen: 4, 7"]
    assert all(ax.get_xlabel() == "" for ax in axes[:2])
    assert [sf.get_suptitle() for sf in fig.subfigs] == ["padding", "drop_last=True"]
    assert not any(is_padding(c) for ax in axes[2:] for c in cells(ax))
    png = io.BytesIO()
    fig.savefig(png, format="png")
    assert png.getvalue()[:4] == b"\x89PNG"


@pytest.mark.parametrize("indices, size, message", [
    (PADDED, 0, "dataset_size must be a positive int, got 0"),
    ([], 10, "indices must be a non-empty list"),
    ([[[0, 10]]], 10, "epoch 0, rank 0: index 10 is not in 0..9"),
    ([[]], 10, "epoch 0 has no ranks"),
])
def test_bad_input_is_named(indices, size, message):
    with pytest.raises(ValueError, match=message):
        draw_shards(indices, size)
