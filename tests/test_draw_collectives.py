"""The one drawing of collectives: values, colours by origin, ranks holding nothing."""

import matplotlib

matplotlib.use("Agg")

import pytest
import torch
import torch.distributed as dist
from matplotlib.colors import to_hex
from matplotlib.patches import Rectangle

import ddp_lab
from ddp_lab.collectives.before_after import CollectiveRecord, record
from ddp_lab.draw.collectives import (
    COMBINED,
    SHARED,
    cell_origin,
    draw_collective,
    format_value,
    rank_colour,
    value_origins,
)


def all_gather_recorded():
    rank, world_size = dist.get_rank(), dist.get_world_size()
    t = torch.tensor([10.0 * rank + 1, 10.0 * rank + 2])
    out = [torch.zeros(2) for _ in range(world_size)]
    rec = record("all_gather").before(t=t)
    dist.all_gather(out, t)
    return rec.after(tensor_list=out)


def texts(fig):
    return [t.get_text() for ax in fig.axes for t in ax.texts]


def cells(fig):
    """(text, colour) of every value cell, in drawing order."""
    ax = fig.axes[0]
    squares = [p for p in ax.patches if isinstance(p, Rectangle) and p.get_width() > 0.9]
    values = [t for t in ax.texts if t.get_text().lstrip("-").replace(".", "").isdigit()]
    return [(t.get_text(), to_hex(p.get_facecolor())) for p, t in zip(squares, values)]


def test_all_gather_on_real_ranks_colours_each_value_by_its_rank():
    records = ddp_lab.launch(all_gather_recorded, 3, backend="gloo")
    fig = draw_collective(records)
    drawn = cells(fig)
    # 3 ranks x (2 values before + 6 after)
    assert len(drawn) == 3 * 8
    for text, colour in drawn:
        origin = (int(text) - 1) // 10
        assert colour == to_hex(rank_colour(origin)), (text, colour)
    assert {"rank 0", "rank 1", "rank 2", "before", "after", "tensor_list"} <= set(texts(fig))
    assert fig.get_suptitle() == "all_gather"


def hand_record(name, rank, before, after, note=""):
    return CollectiveRecord(name, rank, 2, before, after, note)


def test_reduced_values_are_drawn_as_combined():
    records = [
        hand_record("all_reduce", 0, {"t": torch.tensor([1.0])}, {"t": torch.tensor([12.0])}, "op=SUM"),
        hand_record("all_reduce", 1, {"t": torch.tensor([11.0])}, {"t": torch.tensor([12.0])}, "op=SUM"),
    ]
    fig = draw_collective(records)
    assert [c for _, c in cells(fig)] == [to_hex(rank_colour(0)), to_hex(COMBINED),
                                         to_hex(rank_colour(1)), to_hex(COMBINED)]
    assert "combined from several ranks (reduced)" in texts(fig)
    assert fig.get_suptitle() == "all_reduce (op=SUM)"


def test_ranks_holding_nothing_and_records_in_any_order():
    records = [
        hand_record("scatter", 1, {"scatter_list": None}, {"out": torch.tensor([2.0])}),
        hand_record("scatter", 0, {"scatter_list": (torch.tensor([1.0]), torch.tensor([2.0]))},
                    {"out": torch.tensor([1.0])}),
    ]
    fig = draw_collective(records, title="scatter from rank 0")
    assert texts(fig).index("rank 0") < texts(fig).index("rank 1")
    assert "None" in texts(fig)
    assert fig.get_suptitle() == "scatter from rank 0"
    assert {c for _, c in cells(fig)} == {to_hex(rank_colour(0))}


def test_origins_from_the_data():
    records = [hand_record("x", 0, {"t": torch.tensor([1.0, 5.0])}, {}),
               hand_record("x", 1, {"t": torch.tensor([2.0, 5.0])}, {})]
    origins = value_origins(records)
    assert cell_origin(1.0, origins) == 0 and cell_origin(2.0, origins) == 1
    assert cell_origin(5.0, origins) == "shared" and cell_origin(3.0, origins) == "combined"
    fig = draw_collective(records)
    assert to_hex(SHARED) in {c for _, c in cells(fig)}


def test_two_d_tensors_and_formatting():
    records = [hand_record("x", 0, {"m": torch.arange(6.0).reshape(2, 3)}, {"m": torch.full((2, 3), 0.5)})]
    assert len(cells(draw_collective(records))) == 12
    assert [format_value(v) for v in (3.0, -2.0, 2.5, 1 / 3, 1e6, float("nan"))] == \
        ["3", "-2", "2.5", "0.333", "1e+06", "nan"]


@pytest.mark.parametrize("bad, error, message", [
    ([], ValueError, "needs a non-empty list of records"),
    ("all_reduce", ValueError, "needs a non-empty list of records"),
    ([torch.ones(2)], TypeError, r"records\[0\] is a Tensor, not a CollectiveRecord"),
    ([CollectiveRecord("a", 0, 2, {}, {}), CollectiveRecord("b", 1, 2, {}, {})], ValueError,
     r"different operations \['a', 'b'\]"),
    ([CollectiveRecord("a", 0, 2, {}, {}), CollectiveRecord("a", 0, 2, {}, {})], ValueError,
     "two records have the same rank"),
])
def test_bad_input(bad, error, message):
    with pytest.raises(error, match=message):
        draw_collective(bad)


def all_to_all_recorded():
    rank, world_size = dist.get_rank(), dist.get_world_size()
    t = torch.tensor([10.0 ** rank * (j + 1) for j in range(world_size)])
    out = torch.empty(world_size)
    rec = record("all_to_all").before(input=list(t.chunk(world_size)))
    dist.all_to_all_single(out, t)
    return rec.after(output=list(out.chunk(world_size)))


def test_all_to_all_parts_are_labelled_with_their_rank():
    records = ddp_lab.launch(all_to_all_recorded, 3, backend="gloo")
    fig = draw_collective(records, part_labels={"input": "to {i}", "output": "from {i}"})
    shown = texts(fig)
    assert [shown.count(f"to {i}") for i in range(3)] == [3, 3, 3]
    assert [shown.count(f"from {i}") for i in range(3)] == [3, 3, 3]
    # the second value of every rank, before on its rank and after on rank 1, in its sender's colour
    second = [c for c in cells(fig) if c[0] in ("2", "20", "200")]
    assert sorted(second) == sorted([(f"{2 * 10 ** r}", to_hex(rank_colour(r))) for r in range(3)] * 2)
    with pytest.raises(ValueError, match="part_labels must map a value's name to a label with"):
        draw_collective(records, part_labels={"input": "to"})


def test_chapters_15e_and_15f_draw_each_collective_in_the_books_one_colour():
    # Both chapters put all-gathers, reduce-scatters and all-reduces side by
    # side; before one table in the palette, an all-gather was blue in 15e and
    # sky blue in 15f.
    from ddp_lab.draw.fsdp_production import draw_bytes_per_dimension
    from ddp_lab.draw.palette import COLLECTIVE_COLOURS
    from ddp_lab.draw.two_d import draw_two_d_step

    names = list(COLLECTIVE_COLOURS)
    bars = draw_bytes_per_dimension({"one": [(name, "all ranks", 100) for name in names]})
    boxes = draw_two_d_step([("dp", "forward", name, 100) for name in names])
    bar_colours = [to_hex(p.get_facecolor()) for p in bars.axes[0].patches]
    box_colours = [to_hex(p.get_facecolor()) for p in boxes.axes[0].patches]
    assert bar_colours == box_colours == [COLLECTIVE_COLOURS[name].lower() for name in names]
