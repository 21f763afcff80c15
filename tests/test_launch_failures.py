"""How a launch fails: fast, naming the rank, and leaving nothing running."""

import linecache
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from plumbing.rank_census import rank_processes, wait_until_no_ranks

import ddp_lab
from ddp_lab.host import process_running


def test_an_exception_names_the_rank_and_carries_its_traceback():
    def work():
        if dist.get_rank() == 2:
            raise ValueError("rank two is unhappy")
        dist.barrier()  # the others wait for rank 2 forever

    with pytest.raises(ddp_lab.RankFailed) as caught:
        ddp_lab.launch(work, 4, timeout=600)
    # Reported at once, not at the timeout the ranks in barrier() would reach: had the
    # launch waited for it, it would raise RanksTimedOut, not RankFailed (about 1 s on an
    # idle machine; a loaded one took over 5, so no bound on the time itself).
    error = caught.value
    assert error.rank == 2 and error.exc_type == "ValueError"
    assert isinstance(error.exception, ValueError)
    assert 'raise ValueError("rank two is unhappy")' in error.remote_traceback
    assert str(error).startswith("rank 2 raised ValueError: rank two is unhappy")
    assert sorted(error.still_running) == [0, 1, 3]
    assert "barrier()" in error.still_running[0]


def test_the_same_bug_on_every_rank_is_reported_as_rank_0_every_time():
    def work():
        raise KeyError(f"missing on {dist.get_rank()}")

    for _ in range(3):
        with pytest.raises(ddp_lab.RankFailed) as caught:
            ddp_lab.launch(work, 4)
        assert caught.value.rank == 0
        assert sorted(caught.value.other_failures) == [1, 2, 3]


def test_sys_exit_in_a_rank_is_a_failure_not_a_silent_exit():
    with pytest.raises(ddp_lab.RankFailed, match="SystemExit") as caught:
        ddp_lab.launch(lambda: exit(3), 2)
    assert caught.value.exit_code == 3
    assert str(caught.value).startswith("rank 0 exited with code 3 (sys.exit(3))")


def test_sys_exit_0_in_a_rank_ends_it_normally_as_under_torchrun():
    assert ddp_lab.launch(sys.exit, 2, args=(0,)) == [None, None]


def fails_on_rank_1():
    if dist.get_rank() == 1:
        raise ValueError("rank one is unhappy")
    dist.barrier()


def exits_with_3():
    os._exit(3)


def shown_in_a_notebook(error):
    """What IPython would show for ``error``: its ``_render_traceback_``, as one text."""
    text = "\n".join(error._render_traceback_())
    for folder in (str(Path(__file__).resolve().parents[1]), tempfile.gettempdir(),
                   os.path.expanduser("~")):
        assert folder not in text, text
    assert not re.search(r"(?<![\w.~<>/-])/\w", text), text  # no absolute path at all
    assert "ddp_lab/launcher" not in text and "worker.py" not in text, text
    return text


def test_a_failed_rank_is_shown_with_the_readers_frames_not_the_launchers():
    with pytest.raises(ddp_lab.RankFailed) as caught:
        ddp_lab.launch(fails_on_rank_1, 2)
    text = shown_in_a_notebook(caught.value)
    line = fails_on_rank_1.__code__.co_firstlineno + 2
    assert ("Traceback from rank 1 (most recent call last):\n"
            f'  File "tests/test_launch_failures.py", line {line}, in fails_on_rank_1\n'
            '    raise ValueError("rank one is unhappy")\n'
            "ValueError: rank one is unhappy") in text
    assert "in test_a_failed_rank_is_shown_with_the_readers_frames_not_the_launchers" in text
    assert "RankFailed: rank 1 raised ValueError: rank one is unhappy\n" in text
    # the last lines: where rank 0 was (wrapped at 80 characters)
    assert text.split("ranks still running were stopped:\n")[-1].startswith(
        "  rank 0: waiting in barrier()"), text
    # the whole text, paths and all, is still there for code that reads it
    assert str(Path(__file__).resolve()) in caught.value.remote_traceback


def test_a_function_from_a_notebook_cell_is_shown_without_the_machines_folders():
    cell = os.path.join(tempfile.gettempdir(), "ipykernel_4242", "1234567890.py")
    source = "def work():\n    if dist.get_rank() == 0:\n        raise KeyError('no such key')\n"
    linecache.cache[cell] = (len(source), None, source.splitlines(True), cell)
    namespace = {"dist": dist}
    exec(compile(source, cell, "exec"), namespace)
    with pytest.raises(ddp_lab.RankFailed) as caught:
        ddp_lab.launch(namespace["work"], 2)
    text = shown_in_a_notebook(caught.value)
    assert ('  File "<tmp>/ipykernel_4242/1234567890.py", line 3, in work\n'
            "    raise KeyError('no such key')") in text


def test_a_death_and_a_timeout_are_shown_with_the_readers_frames_only():
    with pytest.raises(ddp_lab.RankDied) as caught:
        ddp_lab.launch(exits_with_3, 1)  # one rank: which of two dies first is a race
    text = shown_in_a_notebook(caught.value)
    assert "in test_a_death_and_a_timeout_are_shown_with_the_readers_frames_only" in text
    assert text.endswith("RankDied: rank 0 exited with code 3 before returning a result")
    with pytest.raises(ddp_lab.RanksTimedOut) as caught:
        ddp_lab.launch(sleeps, 1, timeout=0.5)
    text = shown_in_a_notebook(caught.value)
    assert "RanksTimedOut: rank 0 did not finish within 0.5 s and was stopped\n" in text


def test_a_hung_collective_ends_with_a_timeout_that_says_where():
    def work():
        if dist.get_rank() == 0:
            dist.all_reduce(torch.ones(1))  # rank 1 never joins
        else:
            time.sleep(3600)

    start = time.monotonic()
    with pytest.raises(TimeoutError) as caught:
        ddp_lab.launch(work, 2, timeout=2)
    elapsed = time.monotonic() - start
    assert elapsed >= 2  # the timeout fired no earlier than asked (rank 1 sleeps an hour: it did fire)
    error = caught.value
    assert isinstance(error, ddp_lab.RanksTimedOut)
    assert sorted(error.unfinished) == [0, 1]
    assert "all_reduce()" in error.unfinished[0] and "dist.all_reduce" in error.unfinished[0]
    assert "time.sleep(3600)" in error.unfinished[1]
    assert "ranks 0, 1 did not finish within 2 s" in str(error)


def sleeps():
    time.sleep(3600)


def both_send_first():
    dist.send(torch.ones(1), dst=1 - dist.get_rank())


def both_wait_on_irecv():
    # PyTorch's tutorial's non-blocking example with both ranks receiving: a deadlock in req.wait()
    req = dist.irecv(torch.zeros(1), src=1 - dist.get_rank())
    req.wait()


def one_all_reduces():
    if dist.get_rank() == 0:
        dist.all_reduce(torch.ones(1))
    else:
        time.sleep(3600)


@pytest.mark.parametrize("work, hint", [
    (sleeps, "No rank was waiting for another: they were still running their own code"),
    (both_send_first, "A rank that waits in send() or recv() (or in wait() on an isend or irecv) is waiting"),
    (one_all_reduces, "Rank 0 waits in a collective that rank 1 has not reached: it is still running its own"),
    (both_wait_on_irecv, "A rank that waits in send() or recv() (or in wait() on an isend or irecv)"),
])
def test_the_hint_speaks_of_collectives_only_when_a_collective_is_involved(work, hint):
    with pytest.raises(ddp_lab.RanksTimedOut) as caught:
        ddp_lab.launch(work, 2, timeout=1.5)
    # the hint: the message's last lines, wrapped at 80 characters; one line in .hint
    message = str(caught.value)
    assert caught.value.hint.startswith(hint) and "\n" not in caught.value.hint
    assert " ".join(message.split()).endswith(caught.value.hint), message
    assert ("collective" in caught.value.hint) == (work is one_all_reduces)
    if work is both_wait_on_irecv:
        assert all("wait() on a request" in where for where in caught.value.unfinished.values())


def test_the_default_timeout_is_finite():
    import inspect

    default = inspect.signature(ddp_lab.launch).parameters["timeout"].default
    assert 0 < default < float("inf")


@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGSEGV])
def test_a_rank_killed_by_a_signal_is_reported_with_the_signal(signum):
    def work():
        if dist.get_rank() == 1:
            os.kill(os.getpid(), signum)
        dist.barrier()

    with pytest.raises(ddp_lab.RankDied) as caught:
        ddp_lab.launch(work, 3)
    assert caught.value.rank == 1
    assert caught.value.signal_name == signal.Signals(signum).name
    assert signal.Signals(signum).name in str(caught.value)


@pytest.mark.parametrize("code", [3, 255])  # 255 too: what multiprocessing reads when a forkserver dies
def test_a_rank_that_exits_early_is_reported_with_its_exit_code(code):
    def work():
        if dist.get_rank() == 0:
            os._exit(code)
        dist.barrier()

    with pytest.raises(ddp_lab.RankDied, match=f"rank 0 exited with code {code} before") as caught:
        ddp_lab.launch(work, 2)
    assert caught.value.exitcode == code


def test_interrupting_stops_every_rank():
    def work():
        time.sleep(3600)

    main = threading.get_ident()
    timer = threading.Timer(1.5, lambda: signal.pthread_kill(main, signal.SIGINT))
    with pytest.raises(KeyboardInterrupt):  # entered first: the signal can only land inside it
        timer.start()
        ddp_lab.launch(work, 4, timeout=60)
    # The ranks sleep an hour: gone within a minute means stopped (about 0.1 s on an idle
    # machine; only the side of the bound that means something, far from it).
    assert not wait_until_no_ranks(60.0)


def test_workers_started_by_a_rank_are_stopped_with_it():
    def work():
        import subprocess

        child = subprocess.Popen(["sleep", "3600"])
        print(child.pid)
        raise RuntimeError("leaving a child behind")

    with pytest.raises(ddp_lab.RankFailed):
        ddp_lab.launch(work, 2)
    assert not rank_processes()


BAD_INPUTS = [
    (dict(world_size=0), ValueError, "world_size must be a positive int, got 0"),
    (dict(world_size=-2), ValueError, "got -2"),
    (dict(world_size=2.0), ValueError, "got 2.0"),
    (dict(world_size=True), ValueError, "got True"),
    (dict(world_size="4"), ValueError, "got '4'"),
    (dict(backend="mpi"), ValueError, "unknown backend 'mpi': use one of 'auto', 'gloo', 'nccl'"),
    (dict(nodes=3), ValueError, "world_size = 4 must be divisible by nodes = 3"),
    (dict(timeout=0), ValueError, "timeout must be a finite number of seconds > 0, got 0"),
    (dict(timeout=float("inf")), ValueError, "got inf"),
    (dict(timeout=-1), ValueError, "timeout must be a finite number of seconds > 0, got -1"),
    (dict(timeout=2.2e6), ValueError, r"timeout must be at most 604800 seconds \(one week\), got 2200000.0"),
    (dict(world_size=10**6), ValueError, r"world_size must be at most 256 \(processes on this one machine\)"),
    (dict(threads=0), ValueError, "threads must be a positive int, got 0"),
    (dict(threads=10**6), ValueError, r"threads must be at most 256 \(threads per rank\), got 1000000"),
    (dict(fn=42), TypeError, "fn must be callable"),
    (dict(args=5), TypeError, "args must be a tuple, got int"),
    (dict(args=(1, threading.Lock())), TypeError, r"args\[1\] \(lock\) cannot be pickled"),
    (dict(kwargs={"lock": threading.Lock()}), TypeError, r"kwargs\['lock'\] \(lock\) cannot be pickled"),
]


@pytest.mark.parametrize("bad, error, message", BAD_INPUTS)
def test_bad_input_is_refused_before_anything_starts(bad, error, message):
    call = dict(fn=os.getpid, world_size=4)
    call.update(bad)
    before = rank_processes()
    with pytest.raises(error, match=message):
        ddp_lab.launch(call.pop("fn"), call.pop("world_size"), **call)
    assert rank_processes() == before == []


def test_unpicklable_fn_is_named():
    lock = threading.Lock()

    def uses_a_lock():
        with lock:
            return 1

    with pytest.raises(TypeError, match=r"fn \(function\) cannot be pickled"):
        ddp_lab.launch(uses_a_lock, 2)


@pytest.mark.skipif(torch.cuda.device_count() >= 4, reason="this machine has 4+ GPUs")
def test_nccl_without_enough_gpus_says_how_many_there_are():
    count = torch.cuda.device_count()
    with pytest.raises(ValueError) as caught:
        ddp_lab.launch(os.getpid, 4, backend="nccl")
    message = str(caught.value)
    assert f"world_size=4 but this machine has {count}." in " ".join(message.split())
    assert max(map(len, message.splitlines())) <= 80, message  # the width of the book's pages


def test_code_piped_into_python_gets_a_clear_error_instead_of_dead_ranks():
    import subprocess
    import sys

    run = subprocess.run([sys.executable, "-"], input="import ddp_lab\nddp_lab.launch(abs, 2, args=(1,))\n",
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 1
    assert "cannot start ranks from code whose __main__ is '<stdin>'" in run.stderr


def still_running(pids):
    deadline = time.monotonic() + 5
    while any(map(process_running, pids)) and time.monotonic() < deadline:
        time.sleep(0.02)
    return [pid for pid in pids if process_running(pid)]


def start_two_children():
    """A subprocess and a fork of this process, both left running."""
    import subprocess

    child = subprocess.Popen(["sleep", "300"])
    forked = os.fork()
    if forked == 0:
        time.sleep(300)
        os._exit(0)
    return [child.pid, forked]


def test_processes_a_rank_started_do_not_outlive_a_successful_launch():
    pids = [pid for pair in ddp_lab.launch(start_two_children, 2) for pid in pair]
    assert still_running(pids) == []


def test_a_script_without_the_main_guard_is_told_so_before_any_rank_starts(tmp_path):
    import subprocess
    import sys

    script = tmp_path / "no_guard.py"
    script.write_text("import os, ddp_lab\nprint(ddp_lab.launch(os.getpid, 2))\n")
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 1
    assert (f"{script} starts ranks from its top-level code, line 2, without the "
            '`if __name__ == "__main__":` guard') in run.stderr
    assert "RankDied" not in run.stderr


class StrFails(Exception):
    def __str__(self):
        raise RuntimeError("no words")


def test_an_exception_whose_str_raises_is_reported_as_a_failure_of_the_users_code():
    def work():
        raise StrFails()

    with pytest.raises(ddp_lab.RankFailed) as caught:
        ddp_lab.launch(work, 2)
    assert caught.value.exc_type == "StrFails"
    assert "str() of this exception raised RuntimeError" in caught.value.exc_message
    assert "in work" in caught.value.remote_traceback
    assert "worker.py" not in caught.value.remote_traceback


def only_in_a_rank():
    if "RANK" not in os.environ:
        raise ValueError("made only for the ranks")
    return "fine"


class ReadOnlyInRanks:
    def __reduce__(self):
        return only_in_a_rank, ()


def test_a_value_the_notebook_cannot_unpickle_names_its_rank():
    def work():
        return ReadOnlyInRanks() if dist.get_rank() == 1 else 0

    with pytest.raises(ddp_lab.LaunchError, match="the value rank 1 sent back cannot be unpickled "
                                                  "in the notebook: ValueError: made only for the ranks"):
        ddp_lab.launch(work, 2)


def test_the_hang_report_fits_the_books_pages():
    # lines of up to 237 characters came out of Lab 5b; a page shows 80
    where = {0: "waiting in barrier() (torch.distributed), called from save_checkpoint() "
                "line 34: dist.barrier()  # every rank may read the checkpoint past this line",
             1: "waiting in all_reduce() (torch.distributed), called from mean_loss() line 28: "
                "dist.all_reduce(total)"}
    hint = ("A rank that waits in send() or recv() (or in wait() on an isend or irecv) is "
            "waiting for its partner to post the matching recv() or send(): check that every "
            "send has a receive on the other rank, and that two ranks do not both send first.")
    for error in (ddp_lab.RanksTimedOut(4.0, where, hint),
                  ddp_lab.RankFailed(2, "ValueError", "bad", "Traceback ...", still_running=where)):
        message = str(error)
        assert max(map(len, message.splitlines())) <= 80, message
        # every word is kept, and a rank's line goes on indented by 4
        words = " ".join(message.split())
        assert all(" ".join(f"rank {r}: {w}".split()) in words for r, w in where.items()), message
        assert ("\n    save_checkpoint() line 34: dist.barrier()  # every rank may read the\n"
                "    checkpoint past this line\n") in message, message
        assert error.still_running == where if isinstance(error, ddp_lab.RankFailed) else (
            error.unfinished == where and error.hint == hint)  # the attributes stay one line each
    assert str(ddp_lab.RanksTimedOut(4.0, where, hint)).endswith(
        "\nA rank that waits in send() or recv() (or in wait() on an isend or irecv) is\n"
        "waiting for its partner to post the matching recv() or send(): check that every\n"
        "send has a receive on the other rank, and that two ranks do not both send first.")


def test_the_errors_can_be_pickled():
    import pickle

    errors = [ddp_lab.RankFailed(1, "ValueError", "bad", "Traceback ...", other_failures={2: "ValueError: bad"},
                                 still_running={0: "waiting in barrier()"}),
              ddp_lab.RankFailed(0, "SystemExit", "3", "Traceback ...", exit_code=3),
              ddp_lab.RankDied(1, -9), ddp_lab.RankDied(0, 3),
              ddp_lab.RanksTimedOut(2.0, {0: "waiting in all_reduce()"}, "A hint.")]
    for error in errors:
        copy = pickle.loads(pickle.dumps(error))
        assert type(copy) is type(error) and str(copy) == str(error) and vars(copy) == vars(error)


# A forkserver exits when a request to it breaks off: here another process of
# this user connects to its socket and closes it. A launch in the fraction of a
# second it takes to die fails in one of two ways (forkserver.start_process),
# and each way of BROKEN_OFF brings one about on purpose, not by chance (issue
# 35, item 5; and a CI run of 2026-11-28, which met the second by chance).
BROKEN_OFF = """
import os, signal, socket, sys
import ddp_lab
from ddp_lab.launcher.forkserver import add_forkserver_preload
from multiprocessing import forkserver


def pid():
    return os.getpid()


def break_a_request_off():
    with socket.socket(socket.AF_UNIX) as other:
        other.connect(forkserver._forkserver._forkserver_address)


def refused():
    # The forkserver closes its socket, then takes a second to exit (SLOW_EXIT).
    del os.environ["DDP_LAB_TEST_SLOW_EXIT"]  # its successor exits at once
    break_a_request_off()
    while True:
        try:
            break_a_request_off()  # queued behind the first: it dies of that one anyway
        except ConnectionRefusedError:
            return  # closed, not dead: the next launch's connection is refused


def queued():
    # The launch's request waits in the socket's queue behind the broken one.
    server = forkserver._forkserver._forkserver_pid
    os.kill(server, signal.SIGSTOP)
    break_a_request_off()
    reading = forkserver.read_signed

    def read_after_resuming(fd):  # the launch has sent its request: let the forkserver go on
        forkserver.read_signed = reading
        os.kill(server, signal.SIGCONT)
        return reading(fd)

    forkserver.read_signed = read_after_resuming


if __name__ == "__main__":
    add_forkserver_preload("slow_exit")
    ddp_lab.launch(pid, 2)
    {"refused": refused, "queued": queued}[sys.argv[1]]()
    print("after:", len(ddp_lab.launch(pid, 2)), len(ddp_lab.launch(pid, 2)))
"""

SLOW_EXIT = """
import atexit, os, time

if os.environ.get("DDP_LAB_TEST_SLOW_EXIT"):
    atexit.register(time.sleep, 1.0)  # in the forkserver alone: its ranks leave by os._exit
"""


@pytest.fixture(scope="module")
def broken_off(tmp_path_factory):
    """BROKEN_OFF run once each way, for the tests below: {way: CompletedProcess}."""
    folder = tmp_path_factory.mktemp("broken_off")
    (folder / "broken_off.py").write_text(BROKEN_OFF)
    (folder / "slow_exit.py").write_text(SLOW_EXIT)
    runs = {}
    for way, slow_exit in [("refused", "1"), ("queued", "")]:
        env = {**os.environ, "DDP_LAB_TEST_SLOW_EXIT": slow_exit}
        runs[way] = subprocess.run([sys.executable, str(folder / "broken_off.py"), way], env=env,
                                   capture_output=True, text=True, timeout=120)
    return runs


@pytest.mark.parametrize("way, error", [("refused", "ConnectionRefusedError: [Errno 111] Connection refused"),
                                        ("queued", "EOFError: unexpected EOF")])
def test_a_launch_right_after_the_forkserver_died_starts_a_new_one(broken_off, way, error):
    # Refused: the dying forkserver has closed its socket but is not dead yet,
    # so multiprocessing does not restart it. Queued: it died holding the
    # launch's request. Each failed with a bare error before.
    done = broken_off[way]
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"ddp_lab: the forkserver had stopped ({error}); started a new one" in done.stdout, done.stdout
    assert "after: 2 2" in done.stdout


@pytest.mark.parametrize("way", ["refused", "queued"])
def test_a_forkserver_whose_request_broke_off_stops_without_a_traceback(broken_off, way):
    # Issue 44: the dying forkserver printed its own EOFError traceback (from
    # multiprocessing.reduction.recvfds) before the package's one-line notice.
    done = broken_off[way]
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Traceback" not in done.stderr and "EOFError" not in done.stderr, done.stderr


def run_script(folder, name, text, timeout=120):
    """Write ``text`` to ``folder/name``, run it with this Python and return it, ended."""
    script = folder / name
    script.write_text(text)
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=timeout)


# The forkserver dies while the ranks it started run (a request to it broke
# off): multiprocessing then reads each rank's exit code as 255, and the launch
# reported "rank 0 exited with code 255" for ranks that went on to return.
FORKSERVER_DIES_MID_LAUNCH = """
import os, socket, time
import ddp_lab
from ddp_lab.host import process_running as running
from multiprocessing import forkserver


def break_it_off_and_return(address, forkserver_pid):
    import torch.distributed as dist

    if dist.get_rank() == 0:
        with socket.socket(socket.AF_UNIX) as other:
            other.connect(address)
    while running(forkserver_pid):
        time.sleep(0.01)
    return os.getpid()


if __name__ == "__main__":
    ddp_lab.launch(os.getpid, 2)
    server = forkserver._forkserver
    pids = ddp_lab.launch(break_it_off_and_return, 2,
                          args=(server._forkserver_address, server._forkserver_pid))
    print("returned:", len(pids), flush=True)
    deadline = time.monotonic() + 60
    while any(map(running, pids)) and time.monotonic() < deadline:
        time.sleep(0.05)
    print("ranks left:", [p for p in pids if running(p)])
    print("next:", len(ddp_lab.launch(os.getpid, 2)))
"""


def test_ranks_whose_forkserver_died_under_them_are_not_reported_dead(tmp_path):
    done = run_script(tmp_path, "mid_launch.py", FORKSERVER_DIES_MID_LAUNCH)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "returned: 2\nranks left: []\nnext: 2\n" in done.stdout, done.stdout + done.stderr


# The other order: the rank ends while its forkserver cannot take in its exit
# code (stopped), and the forkserver then dies. The code was never written down
# for the launcher to read; multiprocessing reads the end of the pipe as 255.
RANK_ENDS_AS_ITS_FORKSERVER_DIES = """
import os, signal, subprocess
import ddp_lab


def end_as_the_forkserver_dies():
    forkserver = os.getppid()
    os.kill(forkserver, signal.SIGSTOP)  # it cannot collect this rank's exit code now
    subprocess.Popen(["sh", "-c", f"sleep 0.5; kill -KILL {forkserver}"], start_new_session=True)
    os._exit(3)


if __name__ == "__main__":
    ddp_lab.launch(os.getpid, 1)
    try:
        ddp_lab.launch(end_as_the_forkserver_dies, 1)
    except ddp_lab.RankDied as died:
        print("died:", died.exitcode, "|", died, flush=True)
    print("next:", len(ddp_lab.launch(os.getpid, 2)))
"""


def test_a_rank_that_ended_as_its_forkserver_died_is_not_given_a_code(tmp_path):
    done = run_script(tmp_path, "ends_as_it_dies.py", RANK_ENDS_AS_ITS_FORKSERVER_DIES)
    assert done.returncode == 0, done.stdout + done.stderr
    assert ("died: None | rank 0 ended, with an exit code no one could read (the forkserver that started it "
            "had died) before returning a result\nnext: 2\n") in done.stdout, done.stdout + done.stderr


def test_a_rank_whose_exit_code_no_one_could_read_says_so():
    message = str(ddp_lab.RankDied(1, None))
    assert message == ("rank 1 ended, with an exit code no one could read (the forkserver that started it "
                       "had died) before returning a result"), message


def test_one_other_failure_is_named_in_the_singular():
    one = ddp_lab.RankFailed(0, "ValueError", "odd", "", None, {1: "ValueError"}, {}, None)
    two = ddp_lab.RankFailed(0, "ValueError", "odd", "", None, {1: "ValueError", 2: "ValueError"}, {}, None)
    assert "(rank 1 failed too)" in str(one) and "(ranks 1, 2 failed too)" in str(two)


LAUNCH_FROM_A_FORKED_CHILD = """
import os, traceback
import ddp_lab


def pid():
    return os.getpid()


if __name__ == "__main__":
    print("parent:", len(ddp_lab.launch(pid, 2)), flush=True)
    child = os.fork()
    if child == 0:  # a copy of a process that has launched, forkserver record and all
        code = 1
        try:
            print("child:", len(ddp_lab.launch(pid, 2)), len(ddp_lab.launch(pid, 2)), flush=True)
            code = 0
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(code)
    print("child exited with", os.waitstatus_to_exitcode(os.waitpid(child, 0)[1]), flush=True)
    print("parent again:", len(ddp_lab.launch(pid, 2)), flush=True)
"""


def test_a_child_forked_after_a_launch_launches_from_a_forkserver_of_its_own(tmp_path):
    # Issue 44: the child inherited its parent's forkserver record, and its
    # launch failed with a bare ChildProcessError (waitpid on the parent's child).
    done = run_script(tmp_path, "forked.py", LAUNCH_FROM_A_FORKED_CHILD, timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ChildProcessError" not in done.stderr, done.stderr
    assert done.stdout.splitlines()[-3:] == ["child: 2 2", "child exited with 0", "parent again: 2"], done.stdout
