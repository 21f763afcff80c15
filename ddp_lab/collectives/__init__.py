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
- ``all_to_all``: the pairwise all-to-all, W - 1 exchanges with send/recv (Chapter 5);
- ``recorder``: which collectives a rank issued and what each handed over (Labs 4, 6; 15b-15g);
- ``traced``: the one notebook-side module here: it starts ranks with
  ``ddp_lab.launch``, runs a traced collective (a table entry each) and brings
  the traces back (Chapters 5 and 6).

Everything else imports nothing from ``ddp_lab.launcher``: it runs unchanged under torchrun.
"""
