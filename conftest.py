"""Loaded by pytest first, whatever it runs: unit tests, or notebooks alone.

Before anything imports torch, pin the CPU's float kernels, as the book build
does (``REPRODUCIBLE_NUMERICS`` in book/_ext/book_html.py explains why): the
kernels nbval starts inherit them, so the training numbers the notebooks
print come out the same on any x86 machine with AVX2.
"""

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "book" / "_ext"))
from book_html import REPRODUCIBLE_NUMERICS  # noqa: E402  (imports sphinx, not torch)

for _name, _value in REPRODUCIBLE_NUMERICS.items():
    os.environ.setdefault(_name, _value)
