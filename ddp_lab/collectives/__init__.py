"""Collectives built from other collectives, run inside a rank.

``ddp_lab.collectives.hierarchical``: an all-reduce that knows which ranks
share a node (reduce in the node, all-reduce between one leader per node,
broadcast in the node), built from ``new_group`` (Chapter 12).
"""
