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
* ``avx2-only``: the CPU has no AVX-512 as far as MKL and oneDNN are
  concerned (``MKL_ENABLE_INSTRUCTIONS=AVX2``, ``ONEDNN_MAX_CPU_ISA=AVX2``);
* ``one-core``: a machine with one core (``taskset``-style CPU affinity), so
  the default threads per rank change;
* ``other-shell``: the reader's shell sets ``OMP_NUM_THREADS=3`` and
  ``MKL_CBWR=AUTO``; the tests must override both;
* ``early-forkserver``: every kernel starts the rank forkserver in its first
  instant (an IPython startup file), so processes start in another order and
  memory is laid out differently.

Usage, from the repository root (a few minutes per variant)::

    python tools/cpu_variants.py                      # every variant, the notebooks with numbers
    python tools/cpu_variants.py --variants pinned one-core book/part3_ddp/10_training_loop.ipynb

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

FAKE_INTEL_MKL = """
int mkl_serv_intel_cpu_true(void) { return 1; }
int mkl_serv_intel_cpu(void) { return 1; }
"""

EARLY_FORKSERVER = "import ddp_lab\nddp_lab.start_forkserver()\n"

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
    }
    shim = _fake_intel_mkl(workdir)
    if shim is not None:
        table["mkl-thinks-intel"] = ({"LD_PRELOAD": str(shim)}, None)
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


def _ipython_dir_starting_the_forkserver(workdir):
    startup = workdir / "ipython" / "profile_default" / "startup"
    startup.mkdir(parents=True)
    (startup / "00-forkserver.py").write_text(EARLY_FORKSERVER)
    return workdir / "ipython"


def run_variant(name, env_changes, cores, notebooks):
    env = {**os.environ, **env_changes}
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--no-header",
               "-o", "addopts=", "--nbval", "--nbval-current-env",
               "--nbval-sanitize-with", "tests/nbval_sanitize.cfg", "--nbval-cell-timeout", "300",
               "-n", "2", "--dist", "loadfile", *notebooks]
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
                        help="default: all (pinned, mkl-thinks-intel, avx2-only, one-core, "
                             "other-shell, early-forkserver)")
    args = parser.parse_args(argv)
    notebooks = args.notebooks or notebooks_with_numbers()
    with tempfile.TemporaryDirectory(prefix="cpu-variants-") as tmp:
        table = variants(Path(tmp))
        names = args.variants or list(table)
        unknown = [n for n in names if n not in table]
        if unknown:
            parser.error(f"unknown variant(s) {', '.join(unknown)}; choose from {', '.join(table)}")
        print(f"{len(notebooks)} notebooks: {' '.join(notebooks)}", flush=True)
        outcomes = {}
        for name in names:
            env_changes, cores = table[name]
            ok, last, seconds = run_variant(name, env_changes, cores, notebooks)
            outcomes[name] = ok
            print(f"{name:>17}: {'passed' if ok else 'FAILED'}  ({last}; {seconds:.0f} s)", flush=True)
    return 0 if all(outcomes.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
