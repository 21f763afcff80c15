"""A launch from inside a rank cleans up after itself: no forkserver socket is left behind,
whether the rank ends normally or is killed."""

import os
import signal
from multiprocessing import util
from pathlib import Path

import pytest

import ddp_lab
from ddp_lab.launcher.errors import RankDied


def inner():
    return 1


def outer():
    return ddp_lab.launch(inner, 1, init_process_group=False)


def outer_then_killed():
    # The nested launch starts this rank's own forkserver, which runs on after
    # the launch returns; SIGKILL leaves the rank no chance to stop it.
    ddp_lab.launch(inner, 1, init_process_group=False)
    os.kill(os.getpid(), signal.SIGKILL)


def _everything_in(folder):
    return set(folder.rglob("*"))


def test_a_launch_from_inside_a_rank_leaves_no_listener_file():
    # A rank's own launch starts a forkserver in the rank; its socket is a
    # listener-* file in multiprocessing's temporary folder, the notebook's.
    folder = Path(util.get_temp_dir())
    assert ddp_lab.launch(inner, 1, init_process_group=False) == [1]  # the notebook's forkserver, started
    before = _everything_in(folder)
    assert ddp_lab.launch(outer, 2, init_process_group=False) == [[1], [1]]
    assert _everything_in(folder) == before


def test_a_rank_killed_after_a_launch_of_its_own_leaves_no_listener_file():
    folder = Path(util.get_temp_dir())
    assert ddp_lab.launch(inner, 1, init_process_group=False) == [1]
    before = _everything_in(folder)
    with pytest.raises(RankDied, match="SIGKILL"):
        ddp_lab.launch(outer_then_killed, 1, init_process_group=False)
    assert _everything_in(folder) == before
