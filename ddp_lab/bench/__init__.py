"""Benchmarks that print figures: ``python -m ddp_lab.bench <name>``.

Every benchmark measures its baselines in the same run, on the same machine,
and prints ratios against them: a number alone says little, a number beside
what it is compared with says a lot.
"""
