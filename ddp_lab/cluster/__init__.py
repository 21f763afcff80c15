"""Clusters: the machines a job runs on, and how ranks are placed on them.

``ddp_lab.cluster.namespaces`` builds a small cluster on this one Linux
machine: each node a network namespace with an interface and an address of
its own, the nodes joined by a link whose speed ``tc`` sets (Chapter 12).
"""
