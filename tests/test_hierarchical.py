"""The hierarchical all-reduce equals torch's all-reduce, on real gloo ranks."""

import pytest
import torch
import torch.distributed as dist

import ddp_lab
from ddp_lab.cluster import namespaces


def compare(ranks_per_node, numel=1000):
    from ddp_lab.collectives.hierarchical import hierarchical_all_reduce, node_groups

    groups = node_groups(ranks_per_node)
    # integers in float32: every order of addition gives the same sum exactly
    values = torch.arange(numel, dtype=torch.float32) * (dist.get_rank() + 1) % 1013
    flat, hierarchical = values.clone(), values.clone()
    dist.all_reduce(flat)
    hierarchical_all_reduce(hierarchical, groups)
    expected = sum(torch.arange(numel, dtype=torch.float32) * (r + 1) % 1013
                   for r in range(dist.get_world_size()))
    return (torch.equal(flat, hierarchical), torch.equal(hierarchical, expected),
            groups.leader, groups.is_leader)


@pytest.mark.parametrize("ranks_per_node", [1, 2, 4])
def test_equal_to_torch_all_reduce_on_loopback(ranks_per_node):
    results = ddp_lab.launch(compare, 4, args=(ranks_per_node,), backend="gloo", threads=1)
    assert all(same and right for same, right, _, _ in results)
    assert [leader for _, _, leader, _ in results] == [r - r % ranks_per_node for r in range(4)]
    assert sum(is_leader for *_, is_leader in results) == 4 // ranks_per_node


def bad_split():
    from ddp_lab.collectives.hierarchical import node_groups

    node_groups(3)


def test_a_split_that_does_not_divide_the_world_is_named():
    with pytest.raises(ddp_lab.RankFailed, match="ranks_per_node=3 does not divide the world size 4"):
        ddp_lab.launch(bad_split, 4, backend="gloo", threads=1)


@pytest.mark.skipif(bool(namespaces.missing_requirements()),
                    reason=f"needs root and iproute2: {namespaces.missing_requirements()}")
def test_equal_to_torch_all_reduce_across_two_namespace_nodes():
    with namespaces.Cluster(2, rate_mbit=1000) as cluster:
        results = cluster.launch(compare, 2, args=(2, 100_000), threads=1)
    assert all(same and right for same, right, _, _ in results)
