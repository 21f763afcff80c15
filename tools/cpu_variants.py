"""Run the notebooks that print numbers under several simulated CPUs; compare with nbval.

The numbers a notebook prints (losses, accuracies, sums) must come out the same
on any x86-64 machine, or nbval fails on a reader's computer although nothing
is wrong. ``book/_ext/reproducible_numerics.py`` pins what chooses the float
path; this script checks, on one machine, that the pins hold when the things
that differ between machines change:

* ``pinned``: the pins alone (this machine, as CI runs it);
* ``mkl-thinks-intel``: MKL believes it runs on an Intel CPU, and picks its
  Intel kernels (AVX-512 on a CPU that has it). MKL asks
  ``mkl_serv_intel_cpu_true()``; a two-line library loaded with
  ``LD_PRELOAD`` answers yes. (On an Intel machine, the variant changes
  nothing.)
* ``avx2-only``: an Intel CPU without AVX-512: MKL told it is on Intel (as
  above) and limited to AVX2 (``MKL_ENABLE_INSTRUCTIONS=AVX2``), oneDNN too
  (``ONEDNN_MAX_CPU_ISA=AVX2``). Without the shim MKL ignores the limit on
  an AMD CPU, whose generic branch has no AVX-512 kernels to give up;
* ``one-core``: a machine with one core (``taskset``-style CPU affinity), so
  the default threads per rank change;
* ``other-shell``: the reader's shell sets ``OMP_NUM_THREADS=3`` and
  ``MKL_CBWR=AUTO``; the tests must override both;
* ``early-forkserver``: every kernel starts the rank forkserver in its first
  instant (an IPython startup file), so processes start in another order and
  memory is laid out differently.

and, only when named with ``--variants``, outside what the pins promise:

* ``no-avx2``: a CPU without AVX2 and FMA (Intel before Haswell, a Celeron
  or Pentium without AVX): the pins read a cpuinfo file that lists neither
  (``DDP_BOOK_SIMULATED_CPUINFO``), so every process runs ATen's ``default``
  kernels, as it would on such a CPU, where ``avx2`` would die of SIGILL.
  MKL's COMPATIBLE branch is the same on every x86-64 CPU, but ATen's
  default kernels sum in another order than its AVX2 ones: the notebooks
  run, and four cells print other numbers (chapter 7 cell 2, chapter 8
  cells 1 and 11, chapter 9 cell 10, as nbval numbers cells).

Usage, from the repository root (a few minutes per variant)::

    python tools/cpu_variants.py                      # every variant, the notebooks with numbers
    python tools/cpu_variants.py book/part3_ddp/10_training_loop.ipynb --variants pinned one-core

Before each variant's nbval run it prints what MKL runs under it, unpinned
and with the book's pins (``what_mkl_runs``): the kernel branch MKL names
with ``MKL_VERBOSE=1``, its reproducibility mode and its thread count; so the
log shows that the variant reached other kernels, not just other settings.
Exits 0 when nbval passes under every variant, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "book" / "_ext"))
from reproducible_numerics import (  # noqa: E402  (imports only os)
    REPRODUCIBLE_NUMERICS, SIMULATED_CPUINFO, cpu_flags, reproducible_numerics)

FAKE_INTEL_MKL = """
int mkl_serv_intel_cpu_true(void) { return 1; }
int mkl_serv_intel_cpu(void) { return 1; }
"""

EARLY_FORKSERVER = "import ddp_lab\nddp_lab.start_forkserver()\n"

# Variants run only when named: CPUs whose numbers the pins do not promise.
BEYOND_THE_PROMISE = ("no-avx2",)

# One small matrix product with MKL_VERBOSE=1: MKL names the kernel branch it
# chose ("... for Intel(R) 64 architecture <branch>, Lnx ...") and, per call,
# its reproducibility mode (CNR:...) and thread count (NThr:...).
MKL_PROBE = "import torch; a = torch.randn(64, 64); a @ a"
_MKL_BRANCH = re.compile(r"architecture (.*?), Lnx")
_MKL_CALL = re.compile(r"CNR:(\S+).*NThr:(\d+)")

# A number with two or more decimals in an output nbval compares.
_NUMBER = re.compile(r"\b\d+\.\d{2,}\b")


def notebooks_with_numbers():
    """Every notebook with a float printed in an output that nbval checks."""
    found = []
    for path in sorted([*ROOT.glob("book/*/*.ipynb"), *ROOT.glob("labs/*.ipynb")]):
        cells = json.loads(path.read_text())["cells"]
        if any(_checked_numbers(cell) for cell in cells if cell["cell_type"] == "code"):
            found.append(path.relative_to(ROOT).as_posix())
    return found


def _checked_numbers(cell):
    if "NBVAL_IGNORE_OUTPUT" in "".join(cell["source"]):
        return False
    for output in cell.get("outputs", []):
        text = "".join(output.get("text", "")) + "".join(output.get("data", {}).get("text/plain", ""))
        if _NUMBER.search(text):
            return True
    return False


def variants(workdir):
    """{name: (environment changes, CPU affinity or None)}."""
    table = {
        "pinned": ({}, None),
        "avx2-only": ({"MKL_ENABLE_INSTRUCTIONS": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2"}, None),
        "one-core": ({}, {0}),
        "other-shell": ({"OMP_NUM_THREADS": "3", "MKL_CBWR": "AUTO"}, None),
        "early-forkserver": ({"IPYTHONDIR": str(_ipython_dir_starting_the_forkserver(workdir))}, None),
        "no-avx2": ({SIMULATED_CPUINFO: str(_cpuinfo_without_avx2(workdir))}, None),
    }
    shim = _fake_intel_mkl(workdir)
    if shim is not None:
        table["mkl-thinks-intel"] = ({"LD_PRELOAD": str(shim)}, None)
        table["avx2-only"][0]["LD_PRELOAD"] = str(shim)
    return table


def _fake_intel_mkl(workdir):
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        print("mkl-thinks-intel: skipped, no C compiler (cc) to build the LD_PRELOAD library")
        return None
    source, library = workdir / "fake_intel.c", workdir / "libfake_intel.so"
    source.write_text(FAKE_INTEL_MKL)
    subprocess.run([compiler, "-shared", "-fPIC", "-O2", "-o", str(library), str(source)], check=True)
    return library


def _cpuinfo_without_avx2(workdir):
    """A cpuinfo file with this CPU's flags less those of AVX2, FMA and AVX-512
    (the one line ``reproducible_numerics.cpu_flags`` reads)."""
    kept = sorted(f for f in cpu_flags() if f not in ("avx2", "fma") and not f.startswith("avx512"))
    path = workdir / "cpuinfo-without-avx2"
    path.write_text(f"flags\t\t: {' '.join(kept)}\n")
    return path


def _ipython_dir_starting_the_forkserver(workdir):
    startup = workdir / "ipython" / "profile_default" / "startup"
    startup.mkdir(parents=True)
    (startup / "00-forkserver.py").write_text(EARLY_FORKSERVER)
    return workdir / "ipython"


def what_mkl_runs(env_changes, cores, pinned):
    """The branch, reproducibility mode and threads MKL uses under a variant.

    ``pinned``: with the book's settings on top, as conftest.py applies them
    in the tests; otherwise the variant's environment alone (what MKL would
    pick by itself). Shows that a variant reaches other kernels: on an AMD
    CPU MKL runs its generic branch, told it is on Intel its SSE2 branch
    under MKL_CBWR=COMPATIBLE and AVX-512 without it.
    """
    env = {**os.environ, **env_changes, "MKL_VERBOSE": "1"}
    if pinned:
        env.update(pins_under(env_changes))
    else:
        for name in REPRODUCIBLE_NUMERICS:
            if name not in env_changes:
                env.pop(name, None)
    result = subprocess.run([sys.executable, "-c", MKL_PROBE], env=env, capture_output=True, text=True,
                            preexec_fn=(lambda: os.sched_setaffinity(0, cores)) if cores else None)
    branch, call = _MKL_BRANCH.search(result.stdout), _MKL_CALL.search(result.stdout)
    if not (branch and call):
        return "MKL said nothing (is this torch built with MKL?)"
    return f"{branch.group(1)}, CNR:{call.group(1)}, {call.group(2)} thread(s)"


def pins_under(env_changes):
    """The pins conftest.py sets under a variant (a simulated CPU has its own)."""
    if SIMULATED_CPUINFO in env_changes:
        return reproducible_numerics(env_changes[SIMULATED_CPUINFO])
    return REPRODUCIBLE_NUMERICS


def run_variant(name, env_changes, cores, notebooks):
    env = {**os.environ, **env_changes}
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--no-header",
               "-o", "addopts=", "--nbval", "--nbval-current-env",
               "--nbval-sanitize-with", "tests/nbval_sanitize.cfg", "--nbval-cell-timeout", "300",
               "-n", "2", "--dist", "loadfile",
               "--execute-notebooks",  # never the build's executions: each variant runs its own
               *notebooks]
    started = time.monotonic()
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True,
                            preexec_fn=(lambda: os.sched_setaffinity(0, cores)) if cores else None)
    seconds = time.monotonic() - started
    last = (result.stdout.strip().splitlines() or ["(no output)"])[-1]
    if result.returncode != 0:
        print(result.stdout[-6000:], result.stderr[-2000:], sep="\n")
    return result.returncode == 0, last, seconds


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("notebooks", nargs="*", help="default: every notebook with numbers in its outputs")
    parser.add_argument("--variants", nargs="+", metavar="NAME",
                        help="default: every CPU the pins promise the same numbers on (pinned, "
                             "mkl-thinks-intel, avx2-only, one-core, other-shell, early-forkserver); "
                             f"also {', '.join(BEYOND_THE_PROMISE)}")
    args = parser.parse_args(argv)
    notebooks = args.notebooks or notebooks_with_numbers()
    with tempfile.TemporaryDirectory(prefix="cpu-variants-") as tmp:
        table = variants(Path(tmp))
        names = args.variants or [name for name in table if name not in BEYOND_THE_PROMISE]
        unknown = [n for n in names if n not in table]
        if unknown:
            parser.error(f"unknown variant(s) {', '.join(unknown)}; choose from {', '.join(table)}")
        print(f"{len(notebooks)} notebooks: {' '.join(notebooks)}", flush=True)
        outcomes = {}
        for name in names:
            env_changes, cores = table[name]
            print(f"{name:>17}: MKL unpinned: {what_mkl_runs(env_changes, cores, pinned=False)}\n"
                  f"{'':>17}  MKL in the tests: {what_mkl_runs(env_changes, cores, pinned=True)}\n"
                  f"{'':>17}  ATen in the tests: {pins_under(env_changes)['ATEN_CPU_CAPABILITY']}", flush=True)
            ok, last, seconds = run_variant(name, env_changes, cores, notebooks)
            outcomes[name] = ok
            print(f"{'':>17}  nbval: {'passed' if ok else 'FAILED'}  ({last}; {seconds:.0f} s)", flush=True)
    return 0 if all(outcomes.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
