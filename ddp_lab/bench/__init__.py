"""Benchmarks that print figures: ``python -m ddp_lab.bench <name>``.

Every benchmark measures its baselines in the same run, on the same machine,
and prints ratios against them: a number alone says little, a number beside
what it is compared with says a lot.

Chapters 1, 4, 5, 6, 9, 10 and 14b and Labs 2 and 3 run these benchmarks in their cells
(14b: ``roofline``, matmul FLOP/s and copy bandwidth of this machine);
Chapters 5, 6 and 10 also show the command.
"""
