"""``python -m ddp_lab.gpu_check``: prove the book's GPU paths on a GPU machine.

The book is written and built on CPUs, but it promises labs on GPU machines
and on Colab, and Chapter 14 teaches nccl, ``set_device``, ``device_ids``
and a process spanning two GPUs. This command runs every one of those paths
on the GPUs of the machine it runs on, measures what the chapters discuss
(nccl's all-reduce bandwidth, pinned against pageable copies, a profiled DDP step) and writes a
results file (JSON) naming the machine. Committed to the book's
``book/part4_running/gpu_results/``, such a file is what Chapters 5, 6, 9
and 14 print under "measured on ...".

The pieces, one idea each:

- ``machine``: whether there is a usable GPU (and why not), and what the machine is;
- ``runner``: a check, its outcome (passed, failed, skipped for want of GPUs);
- ``checklist``: the checks, in the order they run;
- ``launches``, ``allreduce``, ``host_copies``, ``chapter14``: the checks themselves;
- ``step_profile``: one DDP step under ``torch.profiler``, reduced to what ran on which stream;
- ``compiled_ddp``: ``torch.compile(DDP(model))`` with inductor, graphs per bucket and step time (Chapter 8c);
- ``mixed_precision``: FSDP2's ``MixedPrecisionPolicy``, peak memory and step time against fp32 (Chapter 15e);
- ``results``: the results file, its JSON Schema, writing and reading it;
- ``report``: what a results file holds, as the pages print it (and a plot).

The pages show the files with ``ddp_lab.gpu_check.report.show_gpu_results``.
"""
