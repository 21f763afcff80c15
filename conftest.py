"""Loaded by pytest first, whatever it runs: unit tests, or notebooks alone.

Before anything imports torch, pin the CPU's float kernels, as the book build
does (book/_ext/reproducible_numerics.py explains why): the kernels nbval
starts inherit them, so the training numbers the notebooks print come out the
same on any x86-64 machine, whatever its CPU and its number of cores.
"""

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "book" / "_ext"))
from reproducible_numerics import REPRODUCIBLE_NUMERICS  # noqa: E402  (imports nothing)

# Set, not defaulted: an OMP_NUM_THREADS=8 left in the shell would change the
# float path, and every notebook would differ from its committed outputs.
os.environ.update(REPRODUCIBLE_NUMERICS)

# --doctest-modules imports every module to find its examples; these run
# code when imported (the forkserver's preload freezes the garbage
# collector), or are scripts, or need Sphinx: they have no examples.
collect_ignore_glob = ["ddp_lab/launcher/forkserver_preload.py", "ddp_lab/*/__main__.py",
                       "ddp_lab/checks/torchrun_probe.py", "book/_ext/*.py", "labs/scripts/*.py"]
