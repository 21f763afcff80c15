"""Topology: the rank arithmetic of the notes, checked exhaustively on small clusters."""

import pytest

from ddp_lab.topology import Process, Topology, divisors

SMALL = [
    (nodes, gpus, k)
    for nodes in range(1, 5)
    for gpus in range(1, 9)
    for k in divisors(gpus)
]


def test_divisors():
    assert divisors(1) == (1,)
    assert divisors(6) == (1, 2, 3, 6)
    assert divisors(8) == (1, 2, 4, 8)


@pytest.mark.parametrize("nodes, gpus", [(n, g) for n in range(1, 5) for g in range(1, 9)])
def test_one_gpu_per_process_follows_the_notes(nodes, gpus):
    """R_g = n x G + g and R_l = g, W = N x G (notes, first scenario)."""
    t = Topology(nodes, gpus)
    assert t.world_size == nodes * gpus
    assert t.processes_per_node == gpus
    for n in range(nodes):
        for g in range(gpus):
            p = t.process_for_gpu(n, g)
            assert p == Process(global_rank=n * gpus + g, local_rank=g, node=n, gpus=(g,))


def test_first_scenario_of_the_notes():
    """2 nodes x 4 GPUs, one process per GPU: node 1 holds ranks 4..7."""
    t = Topology(nodes=2, gpus_per_node=4)
    assert t.world_size == 8
    assert [p.global_rank for p in t.processes_on(1)] == [4, 5, 6, 7]
    assert [p.local_rank for p in t.processes_on(1)] == [0, 1, 2, 3]


def test_second_scenario_of_the_notes():
    """2 nodes x 4 GPUs, each process spans 2 GPUs: P_node = 2, W = 4."""
    t = Topology(nodes=2, gpus_per_node=4, gpus_per_process=2)
    assert t.processes_per_node == 2
    assert t.world_size == 4
    assert t.processes == (
        Process(global_rank=0, local_rank=0, node=0, gpus=(0, 1)),
        Process(global_rank=1, local_rank=1, node=0, gpus=(2, 3)),
        Process(global_rank=2, local_rank=0, node=1, gpus=(0, 1)),
        Process(global_rank=3, local_rank=1, node=1, gpus=(2, 3)),
    )
    # GPUs 2 and 3 of node 1 are driven by one process, global rank 3
    assert t.process_for_gpu(1, 2) == t.process_for_gpu(1, 3) == t.process(3)


@pytest.mark.parametrize("nodes, gpus, k", SMALL)
def test_invariants(nodes, gpus, k):
    t = Topology(nodes, gpus, k)
    p_node = gpus // k
    assert t.processes_per_node == p_node
    assert t.world_size == nodes * p_node
    assert [p.global_rank for p in t.processes] == list(range(t.world_size))

    # every GPU of every node is driven by exactly one process
    driven = [(p.node, g) for p in t.processes for g in p.gpus]
    assert sorted(driven) == [(n, g) for n in range(nodes) for g in range(gpus)]

    for n in range(nodes):
        on_node = t.processes_on(n)
        # local ranks 0..P_node-1; global ranks contiguous, after the earlier nodes
        assert [p.local_rank for p in on_node] == list(range(p_node))
        assert [p.global_rank for p in on_node] == list(range(n * p_node, (n + 1) * p_node))
        for p in on_node:
            assert p.node == n
            assert p.gpus == tuple(range(p.local_rank * k, (p.local_rank + 1) * k))
            assert p.global_rank == n * p_node + p.local_rank
            assert t.global_rank(n, p.local_rank) == p.global_rank
            assert t.node_of(p.global_rank) == n
            assert t.local_rank_of(p.global_rank) == p.local_rank
            assert t.process(p.global_rank) == p
            for g in p.gpus:
                assert t.process_for_gpu(n, g) == p


def test_table_has_one_row_per_process():
    rows = Topology(2, 4, 2).table()
    assert rows == [
        {"node": 0, "gpus": (0, 1), "global_rank": 0, "local_rank": 0},
        {"node": 0, "gpus": (2, 3), "global_rank": 1, "local_rank": 1},
        {"node": 1, "gpus": (0, 1), "global_rank": 2, "local_rank": 0},
        {"node": 1, "gpus": (2, 3), "global_rank": 3, "local_rank": 1},
    ]


def test_str_describes_the_layout():
    assert str(Topology(2, 4, 2)) == "2 nodes × 4 GPUs, 2 GPUs per process: W = 4"
    assert str(Topology(1, 1)) == "1 node × 1 GPU, 1 GPU per process: W = 1"


def test_is_frozen_and_hashable():
    t = Topology(2, 4)
    with pytest.raises(AttributeError):
        t.nodes = 3
    assert {t, Topology(2, 4)} == {t}


@pytest.mark.parametrize(
    "args, named",
    [
        ((0, 4), "nodes must be at least 1, got 0"),
        ((-1, 4), "nodes must be at least 1, got -1"),
        ((2, 0), "gpus_per_node must be at least 1, got 0"),
        ((2, 4, 0), "gpus_per_process must be at least 1, got 0"),
        ((2.0, 4), "nodes must be a whole number"),
        ((2, 4.0), "got 4.0 of type float"),
        ((True, 4), "got True of type bool"),
        ((2, 4, True), "gpus_per_process must be a whole number"),
        ((2, "4"), "got '4' of type str"),
        ((2, None), "gpus_per_node must be a whole number"),
    ],
)
def test_invalid_counts_are_named(args, named):
    with pytest.raises(ValueError) as error:
        Topology(*args)
    assert named in str(error.value)


@pytest.mark.parametrize(
    "gpus, k, allowed", [(4, 3, "1, 2, 4"), (6, 4, "1, 2, 3, 6"), (2, 4, "1, 2"), (5, 2, "1, 5")]
)
def test_gpus_per_process_must_divide_gpus_per_node(gpus, k, allowed):
    with pytest.raises(ValueError) as error:
        Topology(2, gpus, k)
    message = str(error.value)
    assert f"gpus_per_process={k} does not divide gpus_per_node={gpus}" in message
    assert f"Allowed values for {gpus} GPUs per node: {allowed}" in message


@pytest.mark.parametrize(
    "call, error, named",
    [
        (lambda t: t.process_for_gpu(2, 0), IndexError, "node=2 is out of range: node indices run from 0 to 1"),
        (lambda t: t.process_for_gpu(0, 4), IndexError, "gpu=4 is out of range: GPU indices on a node run"),
        (lambda t: t.process_for_gpu(-1, 0), IndexError, "node=-1"),
        (lambda t: t.global_rank(0, 2), IndexError, "local_rank=2 is out of range: local ranks run from 0"),
        (lambda t: t.node_of(4), IndexError, "global_rank=4 is out of range: global ranks run from 0 to 3"),
        (lambda t: t.local_rank_of(-1), IndexError, "global_rank=-1"),
        (lambda t: t.process(4), IndexError, "global_rank=4"),
        (lambda t: t.processes_on(2), IndexError, "node=2"),
        (lambda t: t.node_of(1.0), ValueError, "global_rank must be an int, got 1.0"),
        (lambda t: t.process_for_gpu(True, 0), ValueError, "node must be an int, got True"),
    ],
)
def test_bad_lookups_name_the_value_and_the_range(call, error, named):
    t = Topology(2, 4, 2)
    with pytest.raises(error) as raised:
        call(t)
    assert named in str(raised.value)


def test_format_table_of_the_second_scenario():
    """One aligned line per process, GPU pairs listed, ranks under their headers."""
    lines = Topology(nodes=2, gpus_per_node=4, gpus_per_process=2).format_table().splitlines()
    assert lines[0].split("  ")[:2] == ["node", "GPUs"]
    assert "global rank R_g (RANK)" in lines[0] and "local rank R_l (LOCAL_RANK)" in lines[0]
    rows = [line.split() for line in lines[1:]]
    assert rows == [
        ["0", "0,", "1", "0", "0"],
        ["0", "2,", "3", "1", "1"],
        ["1", "0,", "1", "2", "0"],
        ["1", "2,", "3", "3", "1"],
    ]
    # the last digit of each rank sits under the end of its header
    assert len({len(line) for line in lines}) == 1


@pytest.mark.parametrize("nodes, gpus, k", SMALL)
def test_format_table_has_a_line_per_process(nodes, gpus, k):
    t = Topology(nodes, gpus, k)
    lines = t.format_table().splitlines()
    assert len(lines) == 1 + t.world_size
    for line, p in zip(lines[1:], t.processes):
        cells = line.split()
        assert (int(cells[0]), int(cells[-2]), int(cells[-1])) == (p.node, p.global_rank, p.local_rank)
