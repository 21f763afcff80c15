"""The float-path pins of book/_ext/reproducible_numerics.py never name a
level of ATen's vector kernels that the CPU cannot run.

ATen takes ``ATEN_CPU_CAPABILITY`` at its word (PyTorch's
``aten/src/ATen/native/DispatchStub.cpp``): a level above the CPU's kills the
process with SIGILL at the first kernel that uses an instruction the CPU
lacks (on an AMD EPYC without AVX-512, ``avx512`` kills softmax). So the pin
is ``avx2`` only where the CPU has AVX2 and FMA, ATen's own condition for
those kernels, and ``default`` elsewhere.
"""

import os
import signal
import subprocess
import sys

import pytest

from reproducible_numerics import REPRODUCIBLE_NUMERICS, aten_capability, cpu_flags

# A process under the pins, as the build and conftest.py set them, with one ATen level
# changed; softmax (cross-entropy's first step) runs that level's vector kernels.
PROBE = "import torch; torch.softmax(torch.randn(64, 64), 1); print(torch.backends.cpu.get_cpu_capability())"


def run_probe(capability):
    env = {**os.environ, **REPRODUCIBLE_NUMERICS, "ATEN_CPU_CAPABILITY": capability}
    return subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("flags, level", [
    ({"sse2", "avx", "avx2", "fma"}, "avx2"),
    ({"sse2", "avx", "avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512dq"}, "avx2"),
    ({"sse2", "avx", "fma"}, "default"),      # Sandy Bridge to Ivy Bridge, Bulldozer's FMA without AVX2
    ({"sse2", "avx", "avx2"}, "default"),     # AVX2 without FMA: ATen would not take its AVX2 kernels
    ({"sse2"}, "default"),                    # an early x86-64, or a Celeron without AVX
    (set(), "default"),                       # no /proc/cpuinfo: not Linux
])
def test_avx2_only_where_the_cpu_has_avx2_and_fma(flags, level):
    assert aten_capability(flags) == level


def test_flags_are_read_from_cpuinfo(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nmodel name\t: Some CPU\nflags\t\t: fpu sse2 avx fma avx2\n\n"
                       "processor\t: 1\nflags\t\t: fpu sse2\n")
    assert cpu_flags(str(cpuinfo)) == {"fpu", "sse2", "avx", "fma", "avx2"}  # the first CPU's
    assert cpu_flags(str(tmp_path / "missing")) == set()


def test_the_pinned_level_is_the_one_torch_runs_on_this_cpu():
    result = run_probe(REPRODUCIBLE_NUMERICS["ATEN_CPU_CAPABILITY"])
    assert result.returncode == 0, result.stderr
    assert result.stdout.split()[-1] == REPRODUCIBLE_NUMERICS["ATEN_CPU_CAPABILITY"].upper()


@pytest.mark.skipif("avx512f" in cpu_flags(), reason="this CPU runs AVX-512: no level above it to ask for")
@pytest.mark.skipif(not cpu_flags(), reason="no /proc/cpuinfo to tell which levels this CPU lacks")
def test_aten_believes_a_level_the_cpu_lacks_and_dies():
    """Why the pin must ask the CPU: ATen does not."""
    result = run_probe("avx512")
    assert result.returncode == -signal.SIGILL, (result.returncode, result.stderr[-2000:])
