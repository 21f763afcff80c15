"""Part III and ZeRO/FSDP, run inside each rank: one model, many replicas.

- ``by_hand``: data parallelism with broadcast and all-reduce, before DDP (Chapters 7 and 8);
- ``comm_hooks``: DDP's communication hook, counting its all-reduces (Chapter 8);
- ``overlap_timeline``: when each bucket's all-reduce runs during the backward pass (Chapter 8);
- ``trainer``: a complete DDP training loop: sampler, checkpoints, metrics (Chapter 10);
- ``zero_fsdp``: DDP, ZeRO-1 and FSDP trained side by side, their memory measured (Chapter 15);
- ``fsdp``: FSDP2's ``fully_shard`` per layer, what each rank holds, the bytes each step sends (Chapter 15b);
- ``fsdp_production``: FSDP2 as production scripts use it: mixed precision, sharded checkpoints
  saved, resumed and loaded on another world size, HSDP on a 2-D mesh, gradient clipping
  on DTensors (Chapter 15e).

None of it imports ``ddp_lab.launcher``: it runs unchanged under torchrun.
"""
