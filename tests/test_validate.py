"""ddp_lab.validate is the one home of argument checks: one rule per kind of
argument (a count, a size, time or bandwidth, a share, a range), and every
module that takes such an argument uses it.
"""

import ast
import math
from pathlib import Path

import numpy as np
import pytest

from ddp_lab import validate
from ddp_lab.cost import scaling
from ddp_lab.cost.roofline import tensor_parallel_mlp
from ddp_lab.cost.two_d import tp_local_shapes
from ddp_lab.gpu_check.runner import Options
from ddp_lab.launcher.config import make_config
from ddp_lab.model_parallel.choosing import Training
from ddp_lab.topology import Topology
from ddp_lab.validate import (
    check_divisible,
    check_fraction,
    check_non_negative_number,
    check_number_between,
    check_positive_int,
    check_positive_number,
    check_whole_number,
)

PACKAGE = Path(validate.__file__).resolve().parent
INF, NAN = math.inf, math.nan


@pytest.mark.parametrize("check", [check_positive_int, check_whole_number])
@pytest.mark.parametrize("value", [0, -1, True, 2.0, NAN, INF, "2", None])
def test_a_count_is_an_int_of_at_least_one_and_never_a_bool(check, value):
    with pytest.raises(ValueError) as refused:
        check("nodes", value)
    assert str(refused.value).startswith("nodes must be ") and repr(value) in str(refused.value)


@pytest.mark.parametrize("check", [check_positive_int, check_whole_number])
def test_a_count_may_be_a_numpy_int(check):
    assert check("nodes", np.int64(3)) == 3


@pytest.mark.parametrize("check, bad", [
    (check_positive_number, (0, -1.0, True, NAN, INF, -INF, "1", None)),
    (check_non_negative_number, (-1e-9, True, NAN, INF, "0")),
])
def test_a_size_time_or_bandwidth_is_a_finite_number_and_never_a_bool(check, bad):
    for value in bad:
        with pytest.raises(ValueError) as refused:
            check("latency", value, "seconds")
        assert str(refused.value) == \
            f"latency must be a finite number of seconds {'>' if check is check_positive_number else '>='} 0, " \
            f"got {value!r}"
    assert check("latency", 1e-5, "seconds") == 1e-5


def test_a_maximum_says_why():
    with pytest.raises(ValueError, match=r"^timeout must be at most 3600 seconds \(an hour\), got 4000$"):
        check_positive_number("timeout", 4000, "seconds", maximum=3600, what="an hour")
    assert check_positive_number("timeout", 3600, "seconds", maximum=3600) == 3600


@pytest.mark.parametrize("value", [0, 1.5, -0.1, True, NAN, INF])
def test_a_share_is_a_number_in_zero_to_one(value):
    with pytest.raises(ValueError, match=r"^utilisation must be a number in \(0, 1\], got "):
        check_fraction("utilisation", value)


@pytest.mark.parametrize("value", [-0.5, 1001, True, NAN, INF])
def test_a_number_with_a_range_of_its_own(value):
    with pytest.raises(ValueError) as refused:
        check_number_between("delay_ms", value, 0, 1000, "milliseconds")
    assert str(refused.value) == f"delay_ms must be a number of milliseconds from 0 to 1000, got {value!r}"
    assert check_number_between("delay_ms", 0.5, 0, 1000) == 0.5


# --- the modules use it: what once got through ---------------------------------------------


@pytest.mark.parametrize("call, message", [
    (lambda: Options(timeout=INF), "timeout must be a finite number of seconds > 0, got inf"),
    (lambda: scaling.tokens_to_hide(1e9, 0.1, 1e15, utilisation=True),
     "utilisation must be a number in (0, 1], got True"),
    (lambda: scaling.hierarchical_all_reduce_seconds(1e9, 2, True, intra=None),
     "ranks_per_node must be a positive int, got True"),
    (lambda: Topology(2, 4, np.int64(0)), "gpus_per_process must be at least 1, got 0"),
])
def test_what_the_old_checks_let_through_is_refused(call, message):
    with pytest.raises(ValueError) as refused:
        call()
    assert str(refused.value) == message


def test_a_count_another_must_split_names_both_and_why():
    assert check_divisible("ffn", 32, "tp", 4, "each rank holds ffn / tp columns") == 8
    with pytest.raises(ValueError, match="^ffn = 30 must be divisible by tp = 4: each rank holds ffn / tp columns$"):
        check_divisible("ffn", 30, "tp", 4, "each rank holds ffn / tp columns")


@pytest.mark.parametrize("call, message", [
    (lambda: tp_local_shapes(8, 30, 4), "ffn = 30 must be divisible by tp = 4"),
    (lambda: tensor_parallel_mlp(8, 8, 30, 4, 2), "ffn = 30 must be divisible by degree = 4"),
    (lambda: make_config(3, nodes=2, world_size_name="nprocs"), "nprocs = 3 must be divisible by nodes = 2"),
], ids=["two_d", "roofline", "launch"])
def test_the_cost_models_and_the_launch_say_a_split_the_same_way(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_the_choosing_model_refuses_a_utilisation_of_true():
    with pytest.raises(ValueError, match=r"utilisation must be a number in \(0, 1\], got True"):
        Training(sequence=4096, micro_batch=1, global_batch=1024, utilisation=True)


def test_no_module_defines_a_validator_of_its_own():
    """A function named like a check (check_*, _check_*, require_*, _positive*, _non_negative*)
    that only refuses numbers belongs in ddp_lab/validate.py."""
    pattern = ("check_positive", "_positive_int", "_non_negative", "require_count", "_require_int", "_check_rate",
               "_check_delay", "_check_int")
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "validate.py":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef) and node.name.startswith(pattern):
                found.append(f"{path.relative_to(PACKAGE.parent)}: {node.name}")
    assert not found, found
