"""Layout pictures: the right labels in the right boxes, for many sizes."""

import re

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402
from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: E402
from matplotlib.patches import FancyBboxPatch  # noqa: E402

from ddp_lab.draw.layout import (  # noqa: E402
    _grid,
    draw_nodes,
    draw_reported_layout,
    draw_topology,
)
from ddp_lab.topology import Topology, divisors  # noqa: E402

RANKS = re.compile(r"\$R_g = (\d+)\$\n\$R_l = (\d+)\$")


def rank_labels(fig) -> dict[int, int]:
    """{global rank: local rank} read from the process labels of a figure."""
    found = {}
    for text in fig.axes[0].texts:
        match = RANKS.fullmatch(text.get_text())
        if match:
            global_rank, local_rank = map(int, match.groups())
            assert global_rank not in found, f"two labels for rank {global_rank}"
            assert text.get_gid() == f"ranks {global_rank}"
            found[global_rank] = local_rank
    return found


def process_patches(fig) -> dict[int, FancyBboxPatch]:
    return {
        int(p.get_gid().split()[1]): p
        for p in fig.axes[0].patches
        if p.get_gid() and p.get_gid().startswith("process ")
    }


def texts(fig, pattern: str) -> list[str]:
    return [t.get_text() for t in fig.axes[0].texts if re.fullmatch(pattern, t.get_text())]


GRID = [(n, g, k) for n in (1, 2, 4) for g in (1, 2, 3, 4, 6, 8) for k in divisors(g) if k in (1, 2, 3)]


@pytest.mark.parametrize("nodes, gpus, k", GRID)
def test_one_label_per_process_with_its_ranks(nodes, gpus, k):
    topology = Topology(nodes, gpus, k)
    fig = draw_topology(topology)
    expected = {p.global_rank: p.local_rank for p in topology.processes}
    assert rank_labels(fig) == expected
    assert sorted(process_patches(fig)) == sorted(expected)
    assert texts(fig, r"node \d+") == [f"node {n}" for n in range(nodes)]
    assert texts(fig, r"GPU\n\d+") == [f"GPU\n{g}" for _ in range(nodes) for g in range(gpus)]
    assert fig.axes[0].get_title() == str(topology)


@pytest.mark.parametrize("nodes, gpus, k", [(2, 4, 1), (2, 4, 2), (3, 8, 2)])
def test_colour_is_the_local_rank(nodes, gpus, k):
    topology = Topology(nodes, gpus, k)
    patches = process_patches(draw_topology(topology))
    colour_of = {}
    for process in topology.processes:
        colour = tuple(patches[process.global_rank].get_facecolor())
        assert colour_of.setdefault(process.local_rank, colour) == colour
    assert len(set(colour_of.values())) == topology.processes_per_node  # distinct per local rank


def test_legend_lists_the_local_ranks():
    legend = draw_topology(Topology(2, 4, 2)).axes[0].get_legend()
    assert [t.get_text() for t in legend.get_texts()] == ["0", "1"]
    assert "local rank" in legend.get_title().get_text()


def test_spanning_process_box_covers_its_gpus():
    """Seed scenario 2: the box of each process is twice as wide as with one GPU."""
    one = process_patches(draw_topology(Topology(2, 4, 1)))
    two = process_patches(draw_topology(Topology(2, 4, 2)))
    assert two[1].get_width() == pytest.approx(2 * one[1].get_width() + 2 * 0.06)


def test_many_nodes_are_elided_but_the_last_is_kept():
    topology = Topology(12, 8)
    fig = draw_topology(topology)
    shown_nodes = [*range(6), 11]
    assert texts(fig, r"node \d+") == [f"node {n}" for n in shown_nodes]
    assert "nodes 6 to 10 (not drawn)" in [t.get_text() for t in fig.axes[0].texts]
    expected = {p.global_rank: p.local_rank for n in shown_nodes for p in topology.processes_on(n)}
    assert rank_labels(fig) == expected
    assert max(rank_labels(fig)) == topology.world_size - 1


def test_max_nodes_is_configurable():
    fig = draw_topology(Topology(5, 1), max_nodes=3)
    assert texts(fig, r"node \d+") == ["node 0", "node 4"]
    with pytest.raises(ValueError, match="max_nodes must be at least 3"):
        draw_topology(Topology(5, 1), max_nodes=2)


@pytest.mark.parametrize(
    "count, cell, rows_columns",
    [
        (1, 2.4, (1, 1)),
        (2, 4.4, (1, 2)),  # 2 x 4 GPUs side by side
        (3, 6.4, (3, 1)),  # 3 x 6 GPUs one under the other, not 2 + 1
        (4, 8.4, (4, 1)),
        (6, 2.4, (2, 3)),
        (5, 2.4, (2, 3)),  # balanced: 3 + 2
        (4, 4.4, (2, 2)),
    ],
)
def test_nodes_wrap_into_full_rows(count, cell, rows_columns):
    assert _grid(count, cell) == rows_columns


def test_figure_size_stays_on_a_page():
    for topology in (Topology(1, 1), Topology(4, 8), Topology(6, 2), Topology(3, 6, 3), Topology(100, 8)):
        width, height = draw_topology(topology).get_size_inches()
        assert 4.5 <= width <= 9.5 and height <= 12.5


def overlaps(a, b) -> bool:
    return a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1


def render(fig):
    """Lay the figure out as a PNG would be, and return the renderer that measures it."""
    canvas = FigureCanvasAgg(fig)  # the returned figure is closed in pyplot, so has no canvas of its own
    canvas.draw()
    return canvas.get_renderer()


@pytest.mark.parametrize(
    "topology", [Topology(2, 4, 1), Topology(2, 4, 2), Topology(4, 8, 1), Topology(3, 6, 3), Topology(9, 4)]
)
def test_labels_fit_their_boxes_and_do_not_overlap(topology):
    fig = draw_topology(topology)
    renderer = render(fig)
    patches = process_patches(fig)
    labels = [t for t in fig.axes[0].texts if (t.get_gid() or "").startswith("ranks ")]
    for label in labels:
        box = patches[int(label.get_gid().split()[1])].get_window_extent(renderer)
        text = label.get_window_extent(renderer)
        assert box.x0 <= text.x0 and text.x1 <= box.x1 and box.y0 <= text.y0 and text.y1 <= box.y1
    extents = [t.get_window_extent(renderer) for t in fig.axes[0].texts if t.get_text()]
    for i, a in enumerate(extents):
        for b in extents[i + 1 :]:
            assert not overlaps(a, b)


def test_rank_font_stays_readable():
    for topology in (Topology(2, 4), Topology(4, 8), Topology(6, 2)):
        label = next(t for t in draw_topology(topology).axes[0].texts if t.get_gid() == "ranks 0")
        assert label.get_fontsize() >= 7.5


def test_draws_into_a_given_axes():
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3))
    assert draw_topology(Topology(2, 2), ax=left, title="predicted") is fig
    assert left.get_title() == "predicted"
    assert rank_labels(fig) == {0: 0, 1: 1, 2: 0, 3: 1}
    plt.close(fig)


def test_draw_nodes_needs_a_node():
    with pytest.raises(ValueError, match="at least one NodeBox"):
        draw_nodes([])


# ------------------------------------------------------------ reported layout


def cpu_reports(nodes=2, per_node=2, host="laptop"):
    """What ranks report on one machine that simulates several nodes (env values are strings)."""
    return [
        {
            "host": host,
            "pid": 4000 + rank,
            "RANK": str(rank),
            "LOCAL_RANK": str(rank % per_node),
            "WORLD_SIZE": str(nodes * per_node),
            "GROUP_RANK": str(rank // per_node),
            "device": "cpu",
        }
        for rank in range(nodes * per_node)
    ]


def test_simulated_nodes_on_one_host_are_separate_boxes():
    fig = draw_reported_layout(cpu_reports())
    assert texts(fig, r"node \d+") == ["node 0", "node 1"]
    assert texts(fig, "laptop") == ["laptop", "laptop"]
    assert rank_labels(fig) == {0: 0, 1: 1, 2: 0, 3: 1}
    details = {
        t.get_gid(): t.get_text() for t in fig.axes[0].texts if (t.get_gid() or "").startswith("details")
    }
    assert details == {f"details {r}": f"pid {4000 + r}\ncpu" for r in range(4)}
    assert texts(fig, "CPU") == ["CPU"] * 4
    assert "WORLD_SIZE = 4" in fig.axes[0].get_title()


def test_reported_gpus_and_shuffled_order():
    reports = [
        {
            "host": f"gpu{r // 2}",
            "pid": r,
            "RANK": r,
            "LOCAL_RANK": r % 2,
            "WORLD_SIZE": 4,
            "device": f"cuda:{r % 2}",
        }
        for r in (3, 1, 2, 0)  # arrival order is not rank order
    ]
    fig = draw_reported_layout(reports)
    assert texts(fig, r"gpu\d") == ["gpu0", "gpu1"]  # without GROUP_RANK, a node is a host
    assert texts(fig, r"GPU\n\d") == ["GPU\n0", "GPU\n1", "GPU\n0", "GPU\n1"]
    assert rank_labels(fig) == {0: 0, 1: 1, 2: 0, 3: 1}


def test_reported_spanning_process_covers_two_chips():
    reports = [
        {"host": "h", "pid": 7, "RANK": r, "LOCAL_RANK": r, "WORLD_SIZE": 2, "node": 0,
         "device": [f"cuda:{2 * r}", f"cuda:{2 * r + 1}"]}
        for r in range(2)
    ]
    fig = draw_reported_layout(reports)
    assert texts(fig, r"GPU\n\d") == [f"GPU\n{g}" for g in range(4)]
    assert "pid 7\ncuda:2, cuda:3" in [t.get_text() for t in fig.axes[0].texts]
    patches = process_patches(fig)
    assert patches[1].get_x() > patches[0].get_x() + patches[0].get_width()


def test_reported_labels_fit():
    reports = cpu_reports(nodes=2, per_node=2, host="a-rather-long-host-name.example.org")
    for report in reports:
        report["pid"] = 4194304  # the largest pid on Linux
    fig = draw_reported_layout(reports)
    renderer = render(fig)
    patches = process_patches(fig)
    for text in fig.axes[0].texts:
        gid = text.get_gid() or ""
        if gid.startswith(("ranks ", "details ")):
            box = patches[int(gid.split()[1])].get_window_extent(renderer)
            extent = text.get_window_extent(renderer)
            assert box.x0 <= extent.x0 and extent.x1 <= box.x1
    hosts = [t for t in fig.axes[0].texts if t.get_text().startswith("a-rather")]
    assert [t.get_text()[-1] for t in hosts] == ["…", "…"]  # the long host name is cut ...
    node_boxes = [p for p in fig.axes[0].patches if (p.get_gid() or "").startswith("node box")]
    for host, node_box in zip(hosts, node_boxes):  # ... to fit its node box
        assert host.get_window_extent(renderer).x1 <= node_box.get_window_extent(renderer).x1


def test_report_missing_a_key_is_named():
    reports = cpu_reports()
    del reports[1]["LOCAL_RANK"]
    with pytest.raises(ValueError, match="report 1 lacks LOCAL_RANK"):
        draw_reported_layout(reports)
    with pytest.raises(ValueError, match="at least one report"):
        draw_reported_layout([])
