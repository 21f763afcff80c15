"""Part IV: running the same code on real clusters, or on this machine as if it were one.

- ``torchrun``: torchrun's agents started from Python, one node or two (Chapters 2, 11, 12);
- ``private_network``: the network namespace, loopback only, that each torchrun job runs in
  (Chapters 11 to 13b), so that torchrun's stores are reachable from nowhere else;
- ``scripts``: the book's scripts (``labs/scripts/``, in the wheel ``ddp_lab.book_scripts``)
  (Chapters 11 to 14);
- ``network``: interfaces and the sockets of a rank (Chapter 12; what links cost is ``ddp_lab.cost.links``);
- ``slurm``: Slurm's variables translated into torchrun's (Chapter 13; no torch imported);
- ``slurm_sandbox``: an sbatch script and srun's tasks run here, without Slurm (Chapter 13);
- ``namespaces``: a cluster on this one Linux machine, each node a network namespace
  with its own interface and address, joined by a link whose speed ``tc`` sets (Chapter 12);
- ``measure``: the experiments of Chapters 12 and 12b on that cluster, and the stored run.
"""
