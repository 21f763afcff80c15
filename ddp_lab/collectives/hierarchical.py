"""Hierarchical all-reduce: talk across the slow link as little as possible (Chapter 12b).

A flat ring all-reduce (gloo's, and NCCL's ring) sends every rank's data to
its neighbour in rank order. On N nodes of G ranks, the ring crosses from
one node to the next N times, and each crossing carries what every hop of
the ring carries, ``2(W-1)/W x n`` bytes for a tensor of ``n`` bytes
(``W = N x G``). Since the link between nodes is the slowest, it sets the
pace of the whole ring (``ddp_lab.cost.links.allreduce_seconds``).

The hierarchical all-reduce uses the fast links inside a node first:

1. **reduce** inside each node, to the node's *leader* (its local rank 0):
   over the node's own links;
2. **all-reduce** between the N leaders, one per node: the only step that
   crosses the link, carrying ``2(N-1)/N x n`` bytes per leader;
3. **broadcast** inside each node, from the leader.

With 2 nodes of 2 ranks, the link carries ``n`` bytes each way instead of
``1.5 n``; with 2 nodes of 8 ranks, ``n`` instead of ``1.875 n``. The price:
three collectives in a row, so three latencies, and the intra-node bytes
twice. It pays for large tensors on a slow link; for small ones the flat
ring's single call is faster. (NCCL's own answer uses every GPU's network
card at once: a reduce-scatter inside the node, N-way all-reduces of the
shards across nodes, an all-gather inside the node.)

The three groups come from ``dist.new_group``, which every rank of the
world must call, in the same order, for every group, even for groups it
is not part of (its documentation says so): :func:`node_groups` does that
once, and :func:`hierarchical_all_reduce` uses the result on every call.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist

from ddp_lab.validate import check_positive_int

__all__ = ["NodeGroups", "node_groups", "hierarchical_all_reduce"]


@dataclass(frozen=True)
class NodeGroups:
    """This rank's groups: the ranks of its node, and the leaders of all nodes."""

    node: object           # ProcessGroup of this rank's node
    leaders: object        # ProcessGroup of the node leaders (GroupMember.NON_GROUP_MEMBER elsewhere)
    leader: int            # global rank of this node's leader
    is_leader: bool
    nodes: int
    ranks_per_node: int


def node_groups(ranks_per_node: int) -> NodeGroups:
    """Build the groups of a hierarchical all-reduce; call it on every rank, once.

    Nodes hold consecutive ranks, as torchrun numbers them (node ``k`` holds
    ``k*G .. k*G+G-1``); each node's leader is its first rank.
    """
    world_size, rank = dist.get_world_size(), dist.get_rank()
    check_positive_int("ranks_per_node", ranks_per_node)
    if world_size % ranks_per_node:
        raise ValueError(f"ranks_per_node={ranks_per_node} does not divide the world size "
                         f"{world_size}: every node must hold the same number of ranks")
    nodes = world_size // ranks_per_node
    mine = None
    for node in range(nodes):
        members = list(range(node * ranks_per_node, (node + 1) * ranks_per_node))
        group = dist.new_group(members)  # every rank calls it, members or not
        if rank in members:
            mine = group
    leaders = dist.new_group([node * ranks_per_node for node in range(nodes)])
    leader = rank - rank % ranks_per_node
    return NodeGroups(mine, leaders, leader, rank == leader, nodes, ranks_per_node)


def hierarchical_all_reduce(tensor: torch.Tensor,
                            groups: NodeGroups) -> torch.Tensor:
    """Sum ``tensor`` over all ranks, in place: reduce in node, all-reduce
    leaders, broadcast.

    Gives what ``dist.all_reduce(tensor)`` gives, up to the order of the
    float additions.
    """
    if groups.ranks_per_node > 1:
        dist.reduce(tensor, dst=groups.leader, group=groups.node)
    if groups.is_leader and groups.nodes > 1:
        dist.all_reduce(tensor, group=groups.leaders)
    if groups.ranks_per_node > 1:
        dist.broadcast(tensor, src=groups.leader, group=groups.node)
    return tensor
