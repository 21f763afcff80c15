"""Shared fixtures: every test leaves no rank process behind.

(The float kernels are pinned for every test and notebook by the conftest.py
at the repository root.)
"""

import pytest
from rank_census import wait_until_no_ranks


@pytest.fixture(autouse=True)
def no_rank_outlives_a_test():
    yield
    left = wait_until_no_ranks()
    assert not left, f"rank processes left running: {left}"
