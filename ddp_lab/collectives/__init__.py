"""Part II's algorithms, run inside each rank: collectives built from messages.

- ``textbook_ring``: the ring all-reduce as the textbook draws it, in about 30 lines
  (Chapter 6 and Lab 3 show it first);
- ``ring``: the same ring, pipelined in pieces with receives posted early, fast enough
  to keep up with gloo's own all-reduce (Chapter 6, read in Lab 3);
- ``naive``: gather to one rank, sum, send back: what the ring improves on;
- ``parameter_server``: one rank averages for all, and its traffic (Chapters 1 and 5);
- ``step_trace``: what each rank sent, received and held, step by step;
- ``before_after``: what a rank held before and after a collective (Chapter 5's pictures);
- ``hierarchical``: an all-reduce that knows which ranks share a node (reduce in the
  node, all-reduce between node leaders, broadcast in the node), from ``new_group`` (Chapter 12b);
- ``traced_all_reduce``: the one notebook-side module here: it starts ranks
  with ``ddp_lab.launch`` and brings their traces back (Chapter 6).

Everything else imports nothing from ``ddp_lab.launcher``: it runs unchanged under torchrun.
"""
