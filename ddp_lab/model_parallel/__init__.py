"""Chapter 15: splitting the model itself over ranks.

- ``tensor_parallel``: one MLP block split column- and row-wise over two ranks;
- ``pipeline``: GPipe and 1F1B schedules, and the bubble, by arithmetic (no torch).
"""
