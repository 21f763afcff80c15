"""Lab 1 checkers: right answers pass; each usual wrong answer is named and explained."""

import pytest
import torch

from ddp_lab.checks import CheckResult, check_devices, check_rank_table
from ddp_lab.topology import Topology

# ------------------------------------------------------------ answers to check


def right_ranks(node, gpu, gpus_per_node, gpus_per_process):
    local_rank = gpu // gpus_per_process
    return node * (gpus_per_node // gpus_per_process) + local_rank, local_rank


def swapped(node, gpu, gpus_per_node, gpus_per_process):
    global_rank, local_rank = right_ranks(node, gpu, gpus_per_node, gpus_per_process)
    return local_rank, global_rank


def local_as_global(node, gpu, gpus_per_node, gpus_per_process):
    return gpu, gpu


def one_based(node, gpu, gpus_per_node, gpus_per_process):
    return node * gpus_per_node + gpu + 1, gpu


def counts_gpus(node, gpu, gpus_per_node, gpus_per_process):
    """Ignores the spanning: one rank per GPU."""
    return node * gpus_per_node + gpu, gpu


def counts_first_gpu(node, gpu, gpus_per_node, gpus_per_process):
    """Groups GPUs right, but numbers the process by its first GPU."""
    first = gpu - gpu % gpus_per_process
    return node * gpus_per_node + first, gpu // gpus_per_process


def nodes_as_multiplier(node, gpu, gpus_per_node, gpus_per_process):
    nodes = 3  # the number of nodes, where G belongs
    return node * nodes + gpu, gpu


# ------------------------------------------------------------------ rank table


@pytest.mark.parametrize("nodes, gpus, k", [(1, 1, 1), (2, 4, 1), (2, 4, 2), (3, 6, 3), (4, 8, 4)])
def test_right_function_passes(nodes, gpus, k):
    result = check_rank_table(right_ranks, nodes, gpus, k)
    assert result.passed and result
    assert result.mistakes == ()
    assert result.correct == result.total == nodes * gpus // k
    assert str(result).startswith("✓ all" if result.total > 1 else "✓ the process is correct")


def test_right_tables_pass_in_every_form():
    rows = Topology(2, 4, 2).table()
    assert check_rank_table(rows, 2, 4, 2)
    tuples = [(r["node"], r["gpus"], r["global_rank"], r["local_rank"]) for r in rows]
    assert check_rank_table(tuples, 2, 4, 2)
    one_row_per_gpu = [(n, g, *right_ranks(n, g, 4, 2)) for n in range(2) for g in range(4)]
    assert check_rank_table(one_row_per_gpu, 2, 4, 2)
    mapping = {(n, g): right_ranks(n, g, 4, 1) for n in range(2) for g in range(4)}
    assert check_rank_table(mapping, 2, 4)
    assert check_rank_table([{"node": 0, "gpu": 0, "global_rank": 0, "local_rank": 0}], 1, 1)


def test_the_message_of_the_brief():
    """node 1, GPU 2 of 2 x 4: the local rank given as global rank."""
    result = check_rank_table(local_as_global, 2, 4)
    assert not result
    assert result.correct == 4
    mistake = result.mistakes[2]
    assert mistake.where == "node 1, GPU 2"
    assert mistake.kind == "local_as_global"
    assert "you gave global rank 2, expected 6" in mistake.message
    assert "counts the 4 processes of node 0" in mistake.message
    assert "R_g = n × G + g = 1 × 4 + 2 = 6" in mistake.message


def test_swapped_ranks_are_named():
    result = check_rank_table(swapped, 2, 4)
    assert result.correct == 4  # on node 0 both ranks coincide
    assert {m.kind for m in result.mistakes} == {"swapped"}
    assert len(result.mistakes) == 4  # one per process, not one per rank
    first = result.mistakes[0]
    assert first.where == "node 1, GPU 0"
    assert "you gave global rank 0 and local rank 4: the two are swapped" in first.message
    assert "R_g = n × G + g = 1 × 4 + 0 = 4" in first.message
    assert "R_l = g = 0" in first.message


def test_swapped_ranks_when_spanning():
    result = check_rank_table(swapped, 2, 4, 2)
    assert [m.kind for m in result.mistakes] == ["swapped", "swapped"]
    assert result.mistakes[1].where == "node 1, GPUs 2 and 3"
    assert "R_g = n × P_node + R_l = 1 × 2 + 1 = 3" in result.mistakes[1].message


def test_off_by_one():
    result = check_rank_table(one_based, 2, 2)
    assert result.correct == 0
    assert {m.kind for m in result.mistakes} == {"off_by_one"}
    assert "you gave global rank 1, expected 0, off by one: ranks count from 0" in result.mistakes[0].message


def test_local_off_by_one():
    result = check_rank_table(lambda n, g, G, k: (n * G + g, g + 1), 1, 2)
    assert [m.kind for m in result.mistakes] == ["off_by_one", "off_by_one"]
    assert "local ranks count from 0 on every node" in result.mistakes[0].message


def test_global_rank_as_local_rank():
    result = check_rank_table(lambda n, g, G, k: (n * G + g, n * G + g), 2, 2)
    assert [m.kind for m in result.mistakes] == ["global_as_local", "global_as_local"]
    assert "the local rank restarts at 0 on every node" in result.mistakes[0].message.lower()


def test_splitting_a_spanning_process_is_named():
    """With 2 GPUs per process, GPUs 2 and 3 share one process."""
    result = check_rank_table(counts_gpus, 2, 4, 2)
    assert result.correct == 0
    assert {m.kind for m in result.mistakes} == {"split_process"}
    message = result.mistakes[1].message
    assert result.mistakes[1].where == "node 0, GPUs 2 and 3"
    assert "with 2 GPUs per process, GPUs 2 and 3 share one process" in message
    assert "R_g = 1 and R_l = 1" in message
    assert "Ranks number processes, not GPUs" in message


def test_counting_gpus_instead_of_processes_is_named():
    result = check_rank_table(counts_first_gpu, 2, 4, 2)
    assert result.correct == 1
    assert {m.kind for m in result.mistakes} == {"counted_gpus"}
    message = result.mistakes[0].message
    assert "you gave global rank 2, expected 1: you counted GPUs, but ranks count processes" in message
    assert "P_node = G / 2 = 2 processes per node" in message


def test_gpu_index_as_local_rank_when_spanning():
    result = check_rank_table(lambda n, g, G, k: (n * G // k + g // k, g - g % k), 1, 4, 2)
    assert [m.kind for m in result.mistakes] == ["gpu_index_as_local"]
    assert "R_l = g // 2 = 2 // 2 = 1" in result.mistakes[0].message


def test_nodes_used_as_multiplier():
    result = check_rank_table(nodes_as_multiplier, 3, 4)
    assert {m.kind for m in result.mistakes} == {"nodes_as_multiplier"}
    assert len(result.mistakes) == 8  # nodes 1 and 2
    assert "multiplied the node index by N = 3" in result.mistakes[0].message


def test_table_mistakes():
    rows = [
        (0, (0, 1), 0, 0),
        (0, (2, 3), 1, 1),
        (1, (0, 1), 2, 0),  # node 1, GPUs 2 and 3: no row
        (2, 0, 4, 0),  # there is no node 2
        (0, 0, 5, 5),  # GPU 0 of node 0 again, other ranks
        {"node": 0},  # not a row
        (0, 1.5, 0, 0),  # not a GPU index
    ]
    result = check_rank_table(rows, 2, 4, 2)
    kinds = [m.kind for m in result.mistakes]
    assert kinds == ["bad_row", "duplicate", "bad_row", "bad_row", "missing"]
    text = str(result)
    assert "there is no node 2: the nodes are numbered 0 to 1" in text
    assert "node 0, GPU 0: appears in two rows, with ranks (R_g, R_l) = (0, 0) and (5, 5)" in text
    assert "lacks global_rank, local_rank" in text
    assert "the GPU must be a whole number, got 1.5" in text
    assert "node 1, GPUs 2 and 3: no answer" in text
    assert result.correct == 3


def test_errors_in_the_readers_function_are_reported_once_per_gpu():
    def broken(node, gpu, gpus_per_node, gpus_per_process):
        if gpu == 1:
            raise ZeroDivisionError("division by zero")
        return right_ranks(node, gpu, gpus_per_node, gpus_per_process)

    result = check_rank_table(broken, 2, 2)
    where_and_kind = [(m.where, m.kind) for m in result.mistakes]
    assert where_and_kind == [("node 0, GPU 1", "error"), ("node 1, GPU 1", "error")]
    assert "my_ranks raised ZeroDivisionError: division by zero" in result.mistakes[0].message
    assert result.correct == 2


def test_bad_return_values_and_signature():
    result = check_rank_table(lambda n, g, G, k: 3, 1, 1)
    assert result.mistakes[0].kind == "bad_answer"
    assert "expected a pair (global_rank, local_rank), got 3" in result.mistakes[0].message

    def my_ranks(node, gpu):
        return 0, 0

    result = check_rank_table(my_ranks, 2, 4)
    assert [m.kind for m in result.mistakes] == ["signature"]
    assert "def my_ranks(node, gpu, gpus_per_node, gpus_per_process)" in result.mistakes[0].message
    assert result.correct == 0 and result.total == 8


def test_numpy_and_torch_integers_are_fine():
    assert check_rank_table(lambda n, g, G, k: torch.tensor([n * G + g, g]), 2, 2)


def test_invalid_topology_is_the_authors_error():
    with pytest.raises(ValueError, match="Allowed values for 4 GPUs per node: 1, 2, 4"):
        check_rank_table(right_ranks, 2, 4, 3)


# --------------------------------------------------------------- presentation


def test_result_reads_well_as_text_and_html():
    result = check_rank_table(local_as_global, 2, 4)
    text = str(result)
    headline = "✗ 4 of 8 processes correct (2 nodes × 4 GPUs, 1 GPU per process: W = 8)"
    assert text.splitlines()[0] == headline
    assert text.splitlines()[1].startswith("  • node 1, GPU 0: you gave global rank 0, expected 4")
    assert repr(result) == text
    html = result._repr_html_()
    assert "✗ 4 of 8 processes correct" in html
    assert html.count("<li>") == 4
    assert "<b>node 1, GPU 2</b>" in html


def test_long_lists_are_cut():
    result = check_rank_table(one_based, 4, 8)
    assert len(result.mistakes) == 32
    assert str(result).count("•") == 10
    assert "… and 22 more (all in .mistakes)" in str(result)
    assert result._repr_html_().count("<li>") == 10


def test_single_item_headline():
    result = CheckResult("1 node × 1 GPU", 1, 1, "process")
    assert result.headline() == "✓ the process is correct"


# -------------------------------------------------------------------- devices


def right_devices(local_rank, gpus_per_process):
    first = local_rank * gpus_per_process
    return tuple(torch.device("cuda", first + k) for k in range(gpus_per_process))


@pytest.mark.parametrize(
    "answer",
    [
        right_devices,
        lambda r, k: [f"cuda:{r * k + i}" for i in range(k)],
        lambda r, k: r if k == 1 else tuple(range(r * k, r * k + k)),
    ],
)
def test_right_devices_pass(answer):
    result = check_devices(answer, gpus_per_node=8)
    assert result, str(result)
    assert result.total == 8 + 4 + 2 + 1
    assert str(result) == "✓ all 15 processes correct (a node with 8 GPUs; 1, 2, 4 and 8 GPUs per process)"


def test_devices_for_one_span_only():
    result = check_devices(right_devices, gpus_per_node=6, gpus_per_process=3)
    assert result.total == 2 and result


def test_spanning_ignored_is_named():
    result = check_devices(lambda r, k: torch.device("cuda", r), gpus_per_node=4, gpus_per_process=2)
    assert [(m.where, m.kind) for m in result.mistakes] == [
        ("local rank 0, 2 GPUs per process", "wrong_count"),
        ("local rank 1, 2 GPUs per process", "ignored_span"),
    ]
    message = result.mistakes[1].message
    assert "you gave cuda:1, expected (cuda:2, cuda:3)" in message
    assert "local rank 0 comes first and uses cuda:0 and cuda:1" in message
    assert "cuda:1 × 2 = cuda:2" in message


def test_starting_at_the_local_rank_is_named():
    starts_at_local_rank = lambda r, k: [f"cuda:{r + i}" for i in range(k)]  # noqa: E731
    result = check_devices(starts_at_local_rank, gpus_per_node=8, gpus_per_process=2)
    assert {m.kind for m in result.mistakes} == {"start_at_local_rank"}
    assert "local ranks 0 and 1 come first and use cuda:0 to cuda:3" in result.mistakes[1].message


def test_device_slips_are_named():
    def kinds(answer):
        return {m.kind for m in check_devices(answer, gpus_per_node=4, gpus_per_process=1).mistakes}

    assert kinds(lambda r, k: "cuda") == {"no_index"}
    assert kinds(lambda r, k: "cpu") == {"not_cuda"}
    assert kinds(lambda r, k: f"cuda:{r + 1}") == {"off_by_one"}
    assert kinds(lambda r, k: f"cuda:{3 * r}") - {"no_such_gpu"} == {"wrong_devices"}
    assert kinds(lambda r, k: "gpu:1") == {"bad_answer"}
    assert kinds(lambda r, k: 1 / 0) == {"error"}


def test_bare_cuda_explains_the_current_device():
    message = check_devices(lambda r, k: "cuda", 2, 1).mistakes[1].message
    assert "'cuda' without an index means the current device" in message
    assert "share GPU 0" in message


def test_devices_signature():
    result = check_devices(lambda local_rank: "cuda:0", 4)
    assert [m.kind for m in result.mistakes] == ["signature"]
    assert "def my_devices(local_rank, gpus_per_process)" in result.mistakes[0].message


def test_devices_invalid_span_is_the_authors_error():
    with pytest.raises(ValueError, match="gpus_per_process=3 does not divide gpus_per_node=4"):
        check_devices(right_devices, 4, 3)


def test_a_topology_past_the_size_cap_is_refused_at_once():
    """10**6 nodes were checked GPU by GPU (193 s): past MAX_GPUS the checker says so instead."""
    from ddp_lab.checks.ranks import MAX_GPUS

    def my_ranks(node, gpu, gpus_per_node, gpus_per_process):
        return node * gpus_per_node + gpu, gpu

    with pytest.raises(ValueError) as refused:
        check_rank_table(my_ranks, nodes=10**6, gpus_per_node=8)
    assert str(refused.value) == ("nodes x gpus_per_node must be at most MAX_GPUS = 8,192 GPUs (the checker asks "
                                  "about each one), got 1,000,000 x 8 = 8,000,000")
    assert check_rank_table(my_ranks, nodes=MAX_GPUS // 8, gpus_per_node=8)  # the cap itself is checked
