"""A launch from inside a rank cleans up after itself: no forkserver socket is left behind."""

from multiprocessing import util
from pathlib import Path

import ddp_lab


def inner():
    return 1


def outer():
    return ddp_lab.launch(inner, 1, init_process_group=False)


def test_a_launch_from_inside_a_rank_leaves_no_listener_file():
    # A rank's own launch starts a forkserver in the rank; its socket is a
    # listener-* file in multiprocessing's temporary folder, the notebook's.
    folder = Path(util.get_temp_dir())
    assert ddp_lab.launch(inner, 1, init_process_group=False) == [1]  # the notebook's forkserver, started
    before = set(folder.glob("listener-*"))
    assert ddp_lab.launch(outer, 2, init_process_group=False) == [[1], [1]]
    assert set(folder.glob("listener-*")) == before
