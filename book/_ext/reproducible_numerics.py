"""The settings under which a notebook prints the same numbers on any x86-64 CPU.

Training runs print losses and accuracies to three decimals, and those depend
on the order in which float sums are taken. Three things choose that order
on a CPU, each measured on chapter 10's training run (final weights hashed,
``tools/cpu_variants.py`` runs the notebooks under each):

* **MKL's code branch.** PyTorch's float matmuls on x86 are MKL's ``sgemm``.
  By default MKL picks a kernel for the CPU it finds: AVX-512 or AVX2 on an
  Intel CPU, a generic one on an AMD CPU, and each sums in its own order
  (three different sets of weights, two different printed accuracies,
  0.873 and 0.880, after 4 epochs). ``MKL_CBWR=COMPATIBLE`` makes MKL take
  the branch it keeps identical on every x86-64 CPU (Intel's "conditional
  numerical reproducibility"; its strict mode exists only for the AVX2 and
  AVX-512 branches, which an AMD CPU does not get). ``MKL_VERBOSE=1`` names
  the branch: under COMPATIBLE, on this AMD CPU, MKL runs its generic one, and
  told it is on an Intel CPU (``tools/cpu_variants.py``) its SSE2 one; the
  two gave bit-identical weights.
* **The number of threads.** MKL's reproducible mode holds only for a fixed
  thread count, and a launch gives each rank the machine's cores shared
  between the ranks: 3, 5, 6 or 7 threads per rank gave other weights than
  1, 2, 4 or 8. ``OMP_NUM_THREADS=1`` fixes it: ``ddp_lab.launch`` then gives
  each rank one thread, as torchrun does with this variable set, and the
  notebook's own process uses one thread too.
* **ATen's vector kernels** (reductions, activations, the optimizer's
  element-wise updates), compiled for several instruction sets and chosen at
  run time: ``ATEN_CPU_CAPABILITY=avx2`` takes the AVX2 ones everywhere.
  ATen believes the variable without asking the CPU (``compute_cpu_capability``
  in PyTorch's ``aten/src/ATen/native/DispatchStub.cpp`` returns the named
  level as it is; only without the variable does it check for AVX2 *and*
  FMA), so on a CPU without them a process dies of SIGILL at the first
  kernel that uses an instruction the CPU lacks, as chapter 10's ranks do
  under ``ATEN_CPU_CAPABILITY=avx512`` on an AMD EPYC without AVX-512 (rank 0
  "killed by signal SIGILL"; ``torch.softmax`` alone dies the same way).
  Such a CPU gets ``default`` instead, the kernels ATen itself picks there
  (:func:`aten_capability`). Those sum in another order: chapter 10's run
  ended with other weights than with ``avx2``, though it printed the same
  losses and accuracies, and four cells of chapters 7 to 9 print other
  numbers (``tools/cpu_variants.py --variants no-avx2``). So the numbers
  are the same on every CPU with AVX2 and FMA, not on older ones.

oneDNN, whose own ISA choice ``ONEDNN_MAX_CPU_ISA`` would pin, runs none of
the book's float32 training (``ONEDNN_VERBOSE=1`` prints nothing for it).

Each variable must be set before torch is imported (libgomp reads
``OMP_NUM_THREADS`` when it loads; MKL reads ``MKL_CBWR`` at its first call),
so this module imports nothing but ``os``: ``conftest.py`` and the book build
(``book_html.py``) put them into the environment first.
"""

import os


def cpu_flags(cpuinfo: str = "/proc/cpuinfo") -> set[str]:
    """The instruction-set flags Linux lists for the first CPU (empty where there is no such file)."""
    try:
        with open(cpuinfo) as lines:
            for line in lines:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def aten_capability(flags: set[str]) -> str:
    """``avx2`` where the CPU has AVX2 and FMA (ATen's own condition for its AVX2
    kernels), else ``default``: never a level the CPU cannot run."""
    return "avx2" if {"avx2", "fma"} <= flags else "default"


def reproducible_numerics(cpuinfo: str = "/proc/cpuinfo") -> dict[str, str]:
    """The pins for the CPU that ``cpuinfo`` describes."""
    return {
        "MKL_CBWR": "COMPATIBLE",
        "ATEN_CPU_CAPABILITY": aten_capability(cpu_flags(cpuinfo)),
        "OMP_NUM_THREADS": "1",
    }


# tools/cpu_variants.py simulates a CPU without AVX2 by naming another cpuinfo file here.
SIMULATED_CPUINFO = "DDP_BOOK_SIMULATED_CPUINFO"
REPRODUCIBLE_NUMERICS = reproducible_numerics(os.environ.get(SIMULATED_CPUINFO, "/proc/cpuinfo"))
