"""tools/cpu_variants.py: the variants, the highest ATen level a CPU runs, the report (no notebook runs)."""

import doctest
import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("cpu_variants", ROOT / "tools" / "cpu_variants.py")
cpu_variants = importlib.util.module_from_spec(_spec)
sys.modules["cpu_variants"] = cpu_variants  # dataclasses look their module up there
_spec.loader.exec_module(cpu_variants)

AVX512 = "avx512f avx512bw avx512vl avx512dq"


def cpuinfo(flags):
    """A /proc/cpuinfo text of two CPUs; only the first one's flags count."""
    return (f"processor\t: 0\nmodel name\t: Test CPU\nflags\t\t: fpu sse2 {flags}\n\n"
            "processor\t: 1\nflags\t\t: fpu sse2 avx2 fma avx512f avx512bw avx512vl avx512dq\n")


def test_the_docstring_examples():
    assert doctest.testmod(cpu_variants).failed == 0


@pytest.mark.parametrize("flags, level", [
    (f"avx avx2 fma {AVX512} avx512cd", "avx512"),
    ("avx avx2 fma avx512f avx512bw avx512vl", "avx2"),  # no DQ: not ATen's AVX-512
    ("avx avx2 fma", "avx2"),
    ("avx avx2", "default"),  # AVX2 without FMA: ATen's default kernels
    ("avx", "default"),
])
def test_highest_aten_level_from_the_first_cpus_flags(flags, level):
    assert cpu_variants.highest_aten_capability(cpu_variants.cpu_flags(cpuinfo(flags))) == level


def test_no_flags_line_is_default():
    assert cpu_variants.cpu_flags("processor\t: 0\n") == set()
    assert cpu_variants.highest_aten_capability(set()) == "default"


def test_the_variant_table():
    table = cpu_variants.variants(cpuinfo(f"avx2 fma {AVX512}"), cores={2, 3})
    assert list(table) == ["unpinned", "omp-1", "omp-2", "omp-3", "mkl-auto", "mkl-avx2",
                           "mkl-compatible", "aten-default", "aten-highest", "one-core"]
    settings = {name: (variant.env, variant.cores) for name, variant in table.items()}
    assert settings == {
        "unpinned": ({}, None),
        "omp-1": ({"OMP_NUM_THREADS": "1"}, None),
        "omp-2": ({"OMP_NUM_THREADS": "2"}, None),
        "omp-3": ({"OMP_NUM_THREADS": "3"}, None),
        "mkl-auto": ({"MKL_CBWR": "AUTO"}, None),
        "mkl-avx2": ({"MKL_CBWR": "AVX2"}, None),
        "mkl-compatible": ({"MKL_CBWR": "COMPATIBLE"}, None),
        "aten-default": ({"ATEN_CPU_CAPABILITY": "default"}, None),
        "aten-highest": ({"ATEN_CPU_CAPABILITY": "avx512"}, None),
        "one-core": ({}, {2}),  # the first core this process may use
    }
    assert table["aten-highest"].note == ""


def test_aten_highest_says_when_it_is_aten_default():
    variant = cpu_variants.variants(cpuinfo("avx"), cores={0})["aten-highest"]
    assert variant.env == {"ATEN_CPU_CAPABILITY": "default"}
    assert "same as aten-default" in variant.note


def test_each_variant_sets_its_own_setting_and_no_inherited_one():
    shell = {"PATH": "/bin", "OMP_NUM_THREADS": "7", "MKL_CBWR": "AUTO", "ATEN_CPU_CAPABILITY": "avx2"}
    table = cpu_variants.variants(cpuinfo("avx2 fma"), cores={0})
    assert table["unpinned"].environment(shell) == {"PATH": "/bin"}
    assert table["mkl-compatible"].environment(shell) == {"PATH": "/bin", "MKL_CBWR": "COMPATIBLE"}
    assert table["unpinned"].preexec() is None
    assert callable(table["one-core"].preexec())


def test_failing_cells_and_the_table():
    output = ("FAILED book/part3_ddp/10_training_loop.ipynb::Cell 4 - Notebook cell execution failed\n"
              "FAILED book/part3_ddp/10_training_loop.ipynb::Cell 4 - again\n"
              "ERROR labs/lab6_memory.ipynb::Cell 2\n")
    cells = cpu_variants.failed_cells(output)
    assert cells == ["book/part3_ddp/10_training_loop.ipynb::Cell 4", "labs/lab6_memory.ipynb::Cell 2"]
    outcomes = {"unpinned": cpu_variants.Outcome(True, [], 12.3, "3 passed"),
                "omp-3": cpu_variants.Outcome(False, cells, 20.0, "2 failed", 1),
                "one-core": cpu_variants.Outcome(False, [], 1.0, "no tests ran", 5)}
    lines = cpu_variants.table(outcomes).splitlines()
    assert lines[0].split() == ["variant", "result", "cells", "failed", "seconds"]
    assert lines[1].split() == ["unpinned", "passed", "0", "12"]
    assert lines[2].split() == ["omp-3", "FAILED", "2", "20"]
    assert lines[3].split() == ["one-core", "ERROR", "(exit", "5)", "0", "1"]
    assert lines[-1] == f"omp-3: {', '.join(cells)}"


def test_notebooks_with_numbers_are_notebooks_of_the_book():
    found = cpu_variants.notebooks_with_numbers()
    assert found and set(found) <= set(cpu_variants.all_notebooks())
