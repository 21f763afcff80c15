"""``python -m ddp_lab``: what the package is, its version, and the book's commands.

The package itself runs nothing from the command line: a reader uses it from
the book's notebooks (``ddp_lab.launch`` from Chapter 3 on). This prints
where to go instead: the commands the README gives, for the GPU check, the
benchmarks, the two-node cluster's measurement, building the book and
running its tests. ``--version`` prints the version alone.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

DESCRIPTION = ("ddp_lab: real torch.distributed process groups from a notebook cell, the companion "
               "package of the book \"Distributed Data Parallel, Hands-On\". Use it from the book's "
               "notebooks (import ddp_lab; ddp_lab.launch(fn, world_size), Chapter 3 on).")

# (what it does, the command), as README.md gives them; tests/test_launch_misuse.py checks
# that each command is still written there.
COMMANDS = (
    ("check every GPU path of the book on this machine's GPUs, and record it",
     "python -m ddp_lab.gpu_check --out book/part4_running/gpu_results/"),
    ("benchmarks: launch time vs plain fork and mp.spawn", "python -m ddp_lab.bench launch"),
    ("gloo's all-reduce vs the book's ring, 1 KiB..64 MiB", "python -m ddp_lab.bench allreduce --trace"),
    ("time, algbw and busbw of every collective", "python -m ddp_lab.bench collectives"),
    ("samples/s at 1, 2, 4 ranks, threads set or not", "python -m ddp_lab.bench training"),
    ("re-record the two-node cluster run of Chapters 12 and 12b (root, iproute2)",
     "python -m ddp_lab.cluster.measure --out book/part4_running/cluster_results/namespace_cluster.json"),
    ("build the book (from the repository root; HTML in _build/html)", "jupyter-book build -W -n --keep-going ."),
    ("run the whole test suite (from the repository root)", "python -m pytest"),
    ("re-run one notebook, record what it ran on, and check it",
     "python tools/execute_notebook.py <notebook> && python -m pytest <notebook>"),
)


def version() -> str:
    """The installed package's version; from ``pyproject.toml`` when run from a checkout without installing."""
    from importlib import metadata

    try:
        return metadata.version("ddp_lab")
    except metadata.PackageNotFoundError:
        pyproject = Path(__file__).resolve().parents[1] / "pyproject.toml"
        try:
            found = re.search(r'^version\s*=\s*"([^"]+)"', pyproject.read_text(), re.M)
        except OSError:
            found = None
        return found.group(1) if found else "unknown (not installed)"


def usage() -> str:
    """What ``python -m ddp_lab`` prints."""
    lines = [DESCRIPTION, "", f"version {version()}", "", "The book's commands (README.md says more):"]
    for what, command in COMMANDS:
        lines += ["", f"  {command}", f"      {what}"]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ddp_lab", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"ddp_lab {version()}")
    parser.parse_args(argv)
    print(usage())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
