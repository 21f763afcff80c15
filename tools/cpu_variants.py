"""Run the notebooks under other float paths of this CPU; compare each run with nbval.

What a notebook prints must hold on any x86-64 CPU: nbval compares a reader's
fresh run with the committed outputs, and nothing in the book pins how the
CPU computes. Float addition is not associative, so a sum taken in another
order can round to another last bit, and a training run that starts from
another last bit ends with other weights, losses and accuracies. A notebook
passes everywhere only if what it prints does not depend on that order
(equalities between ranks, with a recomputation; bounds; the number itself
drawn in a figure, where nbval does not look). This script is the check: it
runs the notebooks again under each setting that changes the order of the
float sums on the machine it runs on, and nbval compares every run with the
committed outputs. Three things choose that order on a CPU:

* **MKL's code branch and its CNR mode.** PyTorch's float matmuls on x86-64
  are MKL's ``sgemm``, which carries one kernel per instruction set (SSE2,
  AVX2, AVX-512 ...) and picks one for the CPU it finds; each blocks the
  matrices its own way and sums the products in its own order. The
  ``MKL_CBWR`` variable (Conditional Numerical Reproducibility, CNR) chooses
  instead: ``AUTO`` keeps MKL's own choice of branch but makes it
  deterministic (fixed cache sizes, deterministic reductions, static
  scheduling), ``AVX2`` takes the AVX2 branch, ``COMPATIBLE`` the SSE2 one
  that is the same on every x86-64 CPU. Unset, MKL runs its fastest branch
  with CNR off.
* **ATen's vector kernels** (reductions, activations, losses, the
  optimizer's element-wise updates). PyTorch compiles them several times,
  for ``default`` (no vector extension asked for), ``avx2`` and ``avx512``, and
  picks one set at start-up: the ``ATEN_CPU_CAPABILITY`` variable, or the
  highest level the CPU has. An AVX2 register holds 8 floats, an AVX-512 one
  16, so a vectorized sum keeps another number of partial sums and adds them
  up in another order. ATen believes the variable without asking the CPU:
  naming a level the CPU lacks kills the process with SIGILL at the first
  kernel that uses it, so the highest level is read from the CPU's flags.
* **The number of threads.** A reduction split between threads sums each
  thread's share apart, then adds the shares: another thread count, another
  split, another order (chapter 10's run gave other weights with 3, 5, 6 or
  7 threads than with 1, 2, 4 or 8). The notebook's own process takes
  ``OMP_NUM_THREADS`` threads, but no more than its cores (MKL, with
  ``MKL_DYNAMIC`` on by default, gives no more threads than cores, and torch
  sizes its OpenMP pool as MKL's), or one per core it may run on; a launch
  from the notebook (``ddp_lab.launch``) gives each rank ``OMP_NUM_THREADS``
  threads if it is set, as torchrun does, with no such cap, else the cores
  shared between the ranks (``ddp_lab.launcher.config.threads_per_rank``).

The variants, each one setting changed from the machine's defaults (the
script removes every float-path variable it knows, ``FLOAT_PATH_VARIABLES``,
from its own environment first, so a setting in the shell does not leak in):

* ``unpinned``: nothing set, what a reader's machine does;
* ``omp-1``, ``omp-2``, ``omp-3``: ``OMP_NUM_THREADS`` = 1, 2, 3 for the
  kernels nbval starts, and through the launcher for their ranks (3 threads
  per rank on a 2-core machine: more threads than cores, still another split;
  the kernel itself stays at 2 there);
* ``mkl-auto``, ``mkl-avx2``, ``mkl-compatible``: ``MKL_CBWR`` = ``AUTO``,
  ``AVX2``, ``COMPATIBLE``;
* ``aten-default``, ``aten-highest``: ``ATEN_CPU_CAPABILITY`` = ``default``,
  and the highest level this CPU runs (:func:`highest_aten_capability`;
  where that is ``default``, the variant is aten-default again and says so);
* ``one-core``: the whole run, kernels and ranks included, may use one core
  only (CPU affinity, as ``taskset -c``), so every default thread count is 1.

Before each variant it runs one small matmul with ``MKL_VERBOSE=1`` under the
variant's settings and prints what ran (:func:`what_runs`): MKL's branch, its
CNR mode and threads, ATen's capability, torch's threads and those the
launcher gives each rank of a 2-rank launch. So the log shows that the
variant reached other kernels, not just other settings, and which variants
are the same float path as ``unpinned`` on this machine (``aten-highest``
where ATen picks the highest level by itself).

The simulated CPUs of earlier versions (MKL told it runs on an Intel CPU
through an ``LD_PRELOAD`` library, a cpuinfo file without AVX2) are gone:
they changed what the old pins chose, and there are no pins any more; the
variants above change the real float path instead. Another CPU's float path
combines these parts (an Intel CPU without AVX-512: MKL's AVX2 branch and
ATen's avx2 kernels; one without AVX2: an SSE branch and ATen's default
kernels); the variants try each part apart, not every combination, and an
AMD CPU's own MKL branch only a run on one shows.

Usage, from the repository root (seconds to minutes per notebook and
variant; the notebooks with numbers take a while under each)::

    python tools/cpu_variants.py                        # every variant, the notebooks that print numbers
    python tools/cpu_variants.py --all                  # every notebook under book/ and labs/
    python tools/cpu_variants.py book/part3_ddp/10_training_loop.ipynb --variants unpinned one-core

Each variant runs ``python -m pytest -p no:cacheprovider -n JOBS NOTEBOOKS``
(the options of ``pyproject.toml``: nbval, its sanitize rules, xdist by file).
At the end a table gives each variant's result, the number of cells that
failed and the seconds it took, then the failing cells. Exits 0 when nbval
passes under every variant, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Every variable that changes the float path, removed from the environment
# before each variant sets its own one.
FLOAT_PATH_VARIABLES = (
    "OMP_NUM_THREADS", "MKL_NUM_THREADS", "MKL_DYNAMIC", "MKL_CBWR", "MKL_ENABLE_INSTRUCTIONS",
    "MKL_DEBUG_CPU_TYPE", "ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA",
    "MKL_VERBOSE",
)


@dataclass
class Variant:
    """One float path: environment variables set, or the cores the run may use."""

    name: str
    env: dict[str, str] = field(default_factory=dict)
    cores: set[int] | None = None  # CPU affinity of pytest, its kernels and their ranks
    note: str = ""

    def environment(self, base=None):
        """``base`` (default ``os.environ``) without the float-path variables, plus this variant's."""
        base = os.environ if base is None else base
        env = {k: v for k, v in base.items() if k not in FLOAT_PATH_VARIABLES}
        env.update(self.env)
        return env

    def preexec(self):
        """A ``preexec_fn`` that confines the child process (and all it starts) to ``cores``."""
        if self.cores is None:
            return None
        cores = set(self.cores)
        return lambda: os.sched_setaffinity(0, cores)


# ---------------------------------------------------------------- the variants


def cpu_flags(cpuinfo_text: str) -> set[str]:
    """The instruction-set flags of the first CPU in a ``/proc/cpuinfo`` text.

    >>> sorted(cpu_flags("processor\\t: 0\\nflags\\t\\t: fpu sse2 avx2 fma\\n"))
    ['avx2', 'fma', 'fpu', 'sse2']
    """
    for line in cpuinfo_text.splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


def highest_aten_capability(flags: set[str]) -> str:
    """The highest ``ATEN_CPU_CAPABILITY`` a CPU with these flags runs without SIGILL.

    ``avx512`` needs AVX-512 F, BW, VL and DQ; ``avx2`` needs AVX2 and FMA (ATen's
    own condition for its AVX2 kernels); else ``default``.

    >>> highest_aten_capability({"avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512dq"})
    'avx512'
    >>> highest_aten_capability({"avx2", "fma", "avx512f"})
    'avx2'
    >>> highest_aten_capability({"avx", "avx2"})
    'default'
    """
    if {"avx512f", "avx512bw", "avx512vl", "avx512dq"} <= flags:
        return "avx512"
    if {"avx2", "fma"} <= flags:
        return "avx2"
    return "default"


def read_cpuinfo(path="/proc/cpuinfo") -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def variants(cpuinfo_text: str | None = None, cores: set[int] | None = None) -> dict[str, Variant]:
    """Every variant by name, for the CPU ``cpuinfo_text`` describes (default: this one)
    and the cores this process may use (default: its affinity)."""
    if cpuinfo_text is None:
        cpuinfo_text = read_cpuinfo()
    if cores is None:
        cores = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else {0}
    highest = highest_aten_capability(cpu_flags(cpuinfo_text))
    table = [
        Variant("unpinned", note="the machine's defaults, nothing set"),
        *(Variant(f"omp-{n}", {"OMP_NUM_THREADS": str(n)}) for n in (1, 2, 3)),
        Variant("mkl-auto", {"MKL_CBWR": "AUTO"}),
        Variant("mkl-avx2", {"MKL_CBWR": "AVX2"}),
        Variant("mkl-compatible", {"MKL_CBWR": "COMPATIBLE"}),
        Variant("aten-default", {"ATEN_CPU_CAPABILITY": "default"}),
        Variant("aten-highest", {"ATEN_CPU_CAPABILITY": highest},
                note="" if highest != "default" else
                "this CPU has neither AVX2 with FMA nor AVX-512: the same as aten-default"),
        Variant("one-core", cores={min(cores)}, note=f"CPU affinity to core {min(cores)}"),
    ]
    return {variant.name: variant for variant in table}


# ---------------------------------------------------------------- what runs under a variant

# One small matrix product with MKL_VERBOSE=1: MKL names the kernel branch it
# chose ("... for Intel(R) 64 architecture <branch>, Lnx ...") and, per call,
# its reproducibility mode (CNR:...) and thread count (NThr:...); then ATen's
# capability, torch's intra-op threads, and the threads the launcher would
# give each rank of a 2-rank launch.
PROBE = """\
import torch
a = torch.randn(64, 64)
a @ a
print("ATEN", torch.backends.cpu.get_cpu_capability(), torch.get_num_threads())
try:
    from ddp_lab.launcher.config import threads_per_rank
    print("RANKS", threads_per_rank(2))
except Exception:
    pass
"""
_MKL_BRANCH = re.compile(r"architecture (.*?), Lnx")
_MKL_CALL = re.compile(r"CNR:(\S+).*NThr:(\d+)")
_ATEN = re.compile(r"^ATEN (\S+) (\d+)$", re.MULTILINE)
_RANKS = re.compile(r"^RANKS (\d+)$", re.MULTILINE)


def what_runs(variant: Variant) -> str:
    """What runs under ``variant``: MKL's branch, CNR mode and threads, ATen's kernels,
    torch's threads and a rank's."""
    env = {**variant.environment(), "MKL_VERBOSE": "1"}
    result = subprocess.run([sys.executable, "-c", PROBE], check=False, cwd=ROOT, env=env,
                            capture_output=True, text=True, preexec_fn=variant.preexec())
    return describe_probe(result.stdout) if result.returncode == 0 else \
        f"the probe failed (exit {result.returncode}): {result.stderr.strip()[-300:]}"


def describe_probe(stdout: str) -> str:
    """One line from the probe's output.

    >>> describe_probe("MKL_VERBOSE oneMKL 2024.0 for Intel(R) 64 architecture Intel(R) Advanced "
    ...                "Vector Extensions 2 (Intel(R) AVX2) enabled processors, Lnx 2.60GHz\\n"
    ...                "MKL_VERBOSE SGEMM(N,N,64) 1ms CNR:AVX2 Dyn:1 TID:0  NThr:2\\n"
    ...                "ATEN AVX512 2\\nRANKS 1\\n")
    'MKL AVX2 branch, CNR:AVX2, 2 thread(s); ATen AVX512; torch 2 thread(s), 1 per rank of 2'
    """
    branch, call, aten = _MKL_BRANCH.search(stdout), _MKL_CALL.search(stdout), _ATEN.search(stdout)
    ranks = _RANKS.search(stdout)
    if branch and call:
        short = re.search(r"\(Intel\(R\) ([^)]+)\)", branch.group(1))  # "... (Intel(R) AVX2) ..."
        # "Intel(R) Architecture processors": the SSE2 branch of MKL_CBWR=COMPATIBLE
        generic = "Architecture processors" in branch.group(1)
        name = (short.group(1) if short else "generic" if generic
                else branch.group(1).replace("Intel(R) ", ""))
        mkl = f"MKL {name} branch, CNR:{call.group(1)}, {call.group(2)} thread(s)"
    else:
        mkl = "MKL said nothing (is this torch built with MKL?)"
    if not aten:
        return mkl
    line = f"{mkl}; ATen {aten.group(1)}; torch {aten.group(2)} thread(s)"
    return line + (f", {ranks.group(1)} per rank of 2" if ranks else "")


# ---------------------------------------------------------------- the notebooks

# A number with two or more decimals in an output nbval compares.
_NUMBER = re.compile(r"\b\d+\.\d{2,}\b")
_UNCHECKED_TAGS = {"nbval-ignore-output", "nbval-skip", "raises-exception"}


def all_notebooks():
    """Every notebook under book/ and labs/."""
    return sorted(path.relative_to(ROOT).as_posix()
                  for folder in ("book", "labs") for path in (ROOT / folder).rglob("*.ipynb")
                  if ".ipynb_checkpoints" not in path.parts and "_build" not in path.parts)


def notebooks_with_numbers():
    """Every notebook with a float printed in an output that nbval checks."""
    found = []
    for notebook in all_notebooks():
        cells = json.loads((ROOT / notebook).read_text())["cells"]
        if any(_checked_numbers(cell) for cell in cells if cell["cell_type"] == "code"):
            found.append(notebook)
    return found


def _checked_numbers(cell):
    source = "".join(cell["source"])
    if "NBVAL_IGNORE_OUTPUT" in source or "NBVAL_SKIP" in source:
        return False
    if _UNCHECKED_TAGS & set(cell.get("metadata", {}).get("tags", [])):
        return False
    for output in cell.get("outputs", []):
        text = "".join(output.get("text", "")) + "".join(output.get("data", {}).get("text/plain", ""))
        if _NUMBER.search(text):
            return True
    return False


# ---------------------------------------------------------------- one run

# pytest's short summary (-rfE): "FAILED book/x.ipynb::Cell 3 - ..." (nbval
# names a notebook's cells "Cell N").
_FAILED = re.compile(r"^(?:FAILED|ERROR) (\S+?::(?:Cell \d+|\S+))", re.MULTILINE)
_ANSI = re.compile(r"\x1b\[[0-9;]*m")  # nbval colours its reports


@dataclass
class Outcome:
    passed: bool
    failed_cells: list[str]
    seconds: float
    summary: str  # pytest's last line
    returncode: int = 0

    @property
    def result(self):
        if self.passed:
            return "passed"
        return "FAILED" if self.failed_cells else f"ERROR (exit {self.returncode})"


def failed_cells(pytest_output: str) -> list[str]:
    """The failing tests named in pytest's short summary, in order, once each.

    >>> failed_cells("x\\nFAILED book/a.ipynb::Cell 3 - nbval mismatch\\nERROR book/a.ipynb::Cell 5\\n")
    ['book/a.ipynb::Cell 3', 'book/a.ipynb::Cell 5']
    """
    return list(dict.fromkeys(_FAILED.findall(pytest_output)))


def run_variant(variant: Variant, notebooks, jobs) -> Outcome:
    """nbval over ``notebooks`` under ``variant`` (pyproject.toml's options, ``-n jobs``)."""
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", str(jobs),
               "-rfE", "--no-header", *notebooks]
    started = time.monotonic()
    result = subprocess.run(command, check=False, cwd=ROOT, env=variant.environment(), capture_output=True,
                            text=True, preexec_fn=variant.preexec())
    seconds = time.monotonic() - started
    output = _ANSI.sub("", result.stdout + result.stderr)
    last = (output.strip().splitlines() or ["no output"])[-1].strip("= ")
    passed = result.returncode == 0
    if not passed:
        print(_ANSI.sub("", result.stdout)[-6000:], _ANSI.sub("", result.stderr)[-2000:], sep="\n",
              flush=True)
    return Outcome(passed, failed_cells(output) if not passed else [], seconds, last, result.returncode)


def table(outcomes: dict[str, Outcome]) -> str:
    """The closing table: variant, result, cells failed, seconds; then the failing cells.

    >>> print(table({"unpinned": Outcome(True, [], 31.4, "3 passed"),
    ...              "one-core": Outcome(False, ["b/a.ipynb::Cell 3"], 40.0, "1 failed")}))
    variant   result  cells failed  seconds
    unpinned  passed             0       31
    one-core  FAILED             1       40
    <BLANKLINE>
    one-core: b/a.ipynb::Cell 3
    """
    rows = [("variant", "result", "cells failed", "seconds")]
    rows += [(name, o.result, str(len(o.failed_cells)), f"{o.seconds:.0f}") for name, o in outcomes.items()]
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    lines = ["  ".join(row[i].ljust(widths[i]) if i < 2 else row[i].rjust(widths[i]) for i in range(4))
             for row in rows]
    failing = [f"{name}: {', '.join(o.failed_cells)}" for name, o in outcomes.items() if o.failed_cells]
    return "\n".join([line.rstrip() for line in lines] + ([""] + failing if failing else []))


def in_repository(path, parser):
    """``path`` (from the current folder) relative to the repository root, where pytest runs:
    a notebook elsewhere gets neither the root's nbval options nor its sanitize rules."""
    resolved = Path(path).resolve()
    if not resolved.is_file():
        parser.error(f"no such notebook: {path}")
    if not resolved.is_relative_to(ROOT):
        parser.error(f"{path} is outside the repository ({ROOT}): pytest would not check it with nbval")
    return resolved.relative_to(ROOT).as_posix()


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="Variants: unpinned, omp-1, omp-2, omp-3, mkl-auto, mkl-avx2, mkl-compatible, "
               "aten-default, aten-highest, one-core (the module docstring says what each changes).")
    parser.add_argument("notebooks", nargs="*",
                        help="default: every notebook whose checked outputs print a float with 2+ decimals")
    parser.add_argument("--all", action="store_true", help="every notebook under book/ and labs/")
    parser.add_argument("--variants", nargs="+", metavar="NAME", help="default: every variant")
    parser.add_argument("--jobs", "-n", type=int, default=2, metavar="N",
                        help="pytest-xdist workers per variant, each running whole notebooks (default 2)")
    args = parser.parse_args(argv)
    if args.all and args.notebooks:
        parser.error("give notebooks or --all, not both")
    known = variants()
    names = args.variants or list(known)
    unknown = [name for name in names if name not in known]
    if unknown:
        parser.error(f"unknown variant(s) {', '.join(unknown)}; choose from {', '.join(known)}")
    notebooks = [in_repository(path, parser) for path in args.notebooks] or \
        (all_notebooks() if args.all else notebooks_with_numbers())
    if not notebooks:
        parser.error("no notebooks to run")

    inherited = sorted(name for name in FLOAT_PATH_VARIABLES if name in os.environ)
    if inherited:
        print(f"removed from every variant's environment: {', '.join(inherited)}")
    print(f"{len(notebooks)} notebook(s): {' '.join(notebooks)}", flush=True)
    baseline = what_runs(known["unpinned"])
    width = max(map(len, names))
    outcomes = {}
    for name in names:
        variant = known[name]
        settings = " ".join(f"{k}={v}" for k, v in variant.env.items()) or variant.note
        probe = baseline if name == "unpinned" else what_runs(variant)
        same = " (the same as unpinned on this machine)" if name != "unpinned" and probe == baseline else ""
        if variant.env and variant.note:
            settings += f"; {variant.note}"
        print(f"\n{name:>{width}}: {settings}", f"{'':>{width}}  {probe}{same}", sep="\n", flush=True)
        outcome = outcomes[name] = run_variant(variant, notebooks, args.jobs)
        print(f"{'':>{width}}  nbval: {outcome.result} ({outcome.summary}; {outcome.seconds:.0f} s)"
              + "".join(f"\n{'':>{width}}    {cell}" for cell in outcome.failed_cells), flush=True)
    print("\n" + table(outcomes))
    return 0 if all(outcome.passed for outcome in outcomes.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
