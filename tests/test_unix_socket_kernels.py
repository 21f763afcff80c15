"""tests/plumbing/unix_socket_kernels.py: a kernel on Unix sockets in a folder of its own, with no
TCP port for another process to take, gone after shutdown; a kernel that dies at start says why."""

import stat
import tempfile
from pathlib import Path

import psutil
import pytest
from plumbing.unix_socket_kernels import start_new_kernel


@pytest.fixture(autouse=True)
def no_rank_outlives_a_test():
    """No rank is started here (overrides tests/conftest.py's check)."""
    yield


@pytest.fixture
def temp_folder(tmp_path, monkeypatch):
    """Where tempfile makes folders during the test: the socket folder is looked for there."""
    folder = tmp_path / "temp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


def test_the_kernel_listens_on_files_in_its_own_folder_and_on_no_tcp_port(temp_folder):
    said = []
    manager, client = start_new_kernel()
    try:
        info = manager.get_connection_info()
        folder = Path(manager.connection_file).parent
        assert folder.parent == temp_folder
        assert info["transport"] == "ipc" and Path(info["ip"]).parent == folder
        assert sorted(p.name for p in folder.iterdir()) == ["kernel.json"] + [f"socket-{i}" for i in range(1, 6)]
        assert all(stat.S_ISSOCK((folder / f"socket-{i}").stat().st_mode) for i in range(1, 6))
        # On TCP the kernel would listen on the five ports its manager chose for
        # it. Here only ipykernel's own pipe for subprocess output is left, a
        # port the kernel binds itself in one step, leaving the choice to the
        # system (pyzmq's bind_to_random_port binds tcp://127.0.0.1:*):
        # nothing another process can race for.
        listening = [c for c in psutil.Process(manager.provisioner.pid).net_connections(kind="tcp")
                     if c.status == psutil.CONN_LISTEN]
        assert len(listening) <= 1, listening
        reply = client.execute_interactive("print(6 * 7)", timeout=30,
                                           output_hook=lambda msg: said.append(msg["content"].get("text", "")))
        assert reply["content"]["status"] == "ok"
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)
    assert "".join(said) == "42\n"
    assert not folder.exists(), "shutdown left the kernel's socket folder behind"


def test_a_kernel_that_dies_at_start_says_what_it_wrote(tmp_path, temp_folder):
    # `python -m ipykernel_launcher` looks in its working folder first: a
    # broken file of that name there is a kernel that dies at start.
    (tmp_path / "ipykernel_launcher.py").write_text(
        "import sys\nprint('a broken launcher, as a port taken by another process would be', file=sys.stderr)\n"
        "sys.exit(1)\n")
    with pytest.raises(RuntimeError, match="(?s)Kernel died before replying.*a broken launcher, as a port"):
        start_new_kernel(cwd=str(tmp_path), startup_timeout=30)
    assert list(temp_folder.iterdir()) == [], "a dead kernel's socket folder was left behind"
