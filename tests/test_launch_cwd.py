"""A launch from a working directory that was deleted is refused, clearly, before anything starts."""

import os
import shutil

import pytest
import torch  # noqa: F401  (imported, as in a notebook: loading it in a deleted folder fails in MKL)

import ddp_lab
from ddp_lab.launcher import api, forkserver


def _started(*args, **kwargs):
    raise AssertionError("ranks were started from a deleted working directory")


@pytest.fixture
def deleted_cwd(tmp_path, monkeypatch):
    gone = tmp_path / "gone"
    gone.mkdir()
    monkeypatch.chdir(gone)  # monkeypatch changes back to the test's folder afterwards
    shutil.rmtree(gone)
    with pytest.raises(FileNotFoundError):
        os.getcwd()
    return gone


def test_launch_and_spawn_from_a_deleted_working_directory_say_so(deleted_cwd, monkeypatch):
    monkeypatch.setattr(api, "WorkerGroup", _started)
    for run in (lambda: ddp_lab.launch(abs, 2, args=(1,)), lambda: ddp_lab.spawn(print, nprocs=2)):
        with pytest.raises(FileNotFoundError, match="current working directory .*no longer exists") as caught:
            run()
        message = str(caught.value)
        assert "os.chdir to an existing folder" in message and str(deleted_cwd) in message, message


def test_start_forkserver_from_a_deleted_working_directory_says_so(deleted_cwd, monkeypatch):
    from multiprocessing import forkserver as mp_forkserver

    monkeypatch.setattr(mp_forkserver, "ensure_running", _started)
    with pytest.raises(FileNotFoundError, match="no longer exists: .*os.chdir to an existing folder"):
        forkserver.start_forkserver()
