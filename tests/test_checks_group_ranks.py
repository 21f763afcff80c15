"""Lab 1's live check: the reader's functions inside real ranks, two simulated nodes."""

import time

import pytest

from ddp_lab.checks.group_ranks import check_ranks_in_group


def right_ranks(node, gpu, gpus_per_node, gpus_per_process):
    local_rank = gpu // gpus_per_process
    return node * (gpus_per_node // gpus_per_process) + local_rank, local_rank


def right_devices(local_rank, gpus_per_process):
    first = local_rank * gpus_per_process
    return tuple(f"cuda:{first + k}" for k in range(gpus_per_process))


def one_rank_per_gpu(node, gpu, gpus_per_node, gpus_per_process):
    return node * gpus_per_node + gpu, gpu


def swapped(node, gpu, gpus_per_node, gpus_per_process):
    global_rank, local_rank = right_ranks(node, gpu, gpus_per_node, gpus_per_process)
    return local_rank, global_rank


def local_rank_only(local_rank, gpus_per_process):
    return f"cuda:{local_rank}"


@pytest.mark.parametrize("nodes, gpus, k", [(2, 4, 2), (2, 2, 1), (1, 4, 1), (2, 8, 4)])
def test_right_functions_pass(nodes, gpus, k):
    result = check_ranks_in_group(right_ranks, right_devices, nodes=nodes, gpus_per_node=gpus,
                                  gpus_per_process=k)
    assert result, str(result)
    assert result.correct == result.total == nodes * gpus // k
    assert result.subject.startswith(f"real group: {nodes} node")


def test_counting_gpus_when_processes_span_two_is_named_on_every_rank():
    result = check_ranks_in_group(one_rank_per_gpu, right_devices)
    assert not result and result.correct == 0
    assert [m.kind for m in result.mistakes] == ["split_process"] * 4
    third = result.mistakes[2]
    assert third.where == "RANK=2 (node 1, LOCAL_RANK=0)"
    assert "GPU 0: (R_g, R_l) = (4, 0); GPU 1: (R_g, R_l) = (5, 1)" in third.message


def test_one_rank_per_gpu_is_right_when_each_process_drives_one_gpu():
    assert check_ranks_in_group(one_rank_per_gpu, right_devices, gpus_per_node=2, gpus_per_process=1)


def test_swapped_ranks_are_named_where_they_differ():
    result = check_ranks_in_group(swapped, right_devices, gpus_per_node=2, gpus_per_process=1)
    # on node 0 the global and local ranks are equal, so swapping them changes nothing
    assert result.correct == 2
    assert {m.kind for m in result.mistakes} == {"swapped"}
    assert [m.where for m in result.mistakes] == [
        "RANK=2 (node 1, LOCAL_RANK=0)", "RANK=3 (node 1, LOCAL_RANK=1)"]
    assert result.mistakes[0].message.startswith("my_ranks(1, 0, 2, 1): you gave global rank 0 and local rank 2")


def test_wrong_devices_are_explained_before_the_ranks():
    result = check_ranks_in_group(one_rank_per_gpu, local_rank_only)
    kinds = [m.kind for m in result.mistakes]
    # local rank 0 gets cuda:0 alone: one device short; local rank 1 gets cuda:1 alone
    assert kinds == ["wrong_count", "ignored_span", "wrong_count", "ignored_span"]
    assert all("fix my_devices first" in m.message for m in result.mistakes)


def test_errors_in_the_readers_functions_are_reported_per_rank():
    def not_written(local_rank, gpus_per_process):
        raise NotImplementedError("write my_devices")

    def not_a_pair(node, gpu, gpus_per_node, gpus_per_process):
        return node

    result = check_ranks_in_group(right_ranks, not_written)
    assert [m.kind for m in result.mistakes] == ["error"] * 4
    assert result.mistakes[1].message == "my_devices(1, 2) raised NotImplementedError: write my_devices"

    result = check_ranks_in_group(not_a_pair, right_devices)
    assert "my_ranks(1, 0, 4, 2) raised ValueError: expected a pair (global_rank, local_rank)" in (
        result.mistakes[2].message)


def test_signatures_are_checked_before_starting_anything():
    result = check_ranks_in_group(lambda node, gpu: (0, 0), right_devices)
    assert [m.kind for m in result.mistakes] == ["signature"]
    assert "my_ranks(node, gpu, gpus_per_node, gpus_per_process)" in result.mistakes[0].message


def test_a_hanging_answer_is_stopped_and_reported():
    def hangs(local_rank, gpus_per_process):
        time.sleep(60)

    result = check_ranks_in_group(right_ranks, hangs, timeout=2)
    assert [m.kind for m in result.mistakes] == ["launch"]
    assert "did not all report back" in result.mistakes[0].message


def test_too_many_ranks_for_one_machine_is_refused():
    with pytest.raises(ValueError, match="at most 8"):
        check_ranks_in_group(right_ranks, right_devices, nodes=4, gpus_per_node=4, gpus_per_process=1)
    with pytest.raises(ValueError, match="does not divide"):
        check_ranks_in_group(right_ranks, right_devices, gpus_per_process=3)
