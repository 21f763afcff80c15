"""The %ddp magics in a real Jupyter kernel, interrupted as a reader interrupts it (issue 19).

One kernel serves every test here; each test starts its own ranks.
"""

import os
import signal
import time

import pytest
from unix_socket_kernels import start_new_kernel  # book/_ext: no TCP port race


class Kernel:
    def __init__(self):
        self.manager, self.client = start_new_kernel()

    def run(self, code, *, interrupt_at=(), timeout=60, allow_stdin=True, on_stream=None):
        """Run a cell, interrupting the kernel at each time (seconds after it started).

        ``allow_stdin`` is what a person's front end sends (True) or a batch
        runner's (nbclient, nbval: False); ``on_stream`` sees what was printed
        so far each time more comes. Returns (status, what it printed, the
        name of the exception or None).
        """
        msg_id = self.client.execute(code, allow_stdin=allow_stdin)
        start = time.monotonic()
        for at in interrupt_at:
            time.sleep(max(0.0, start + at - time.monotonic()))
            self.manager.interrupt_kernel()
        printed, error = [], None
        while True:
            message = self.client.get_iopub_msg(timeout=timeout)
            if message["parent_header"].get("msg_id") != msg_id:
                continue
            kind, content = message["msg_type"], message["content"]
            if kind == "stream":
                printed.append(content["text"])
                if on_stream is not None:
                    on_stream("".join(printed))
            elif kind == "error":
                error = content["ename"]
                printed.append(content["evalue"])
            elif kind == "status" and content["execution_state"] == "idle":
                break
        return ("error" if error else "ok"), "".join(printed), error

    def ok(self, code):
        status, printed, error = self.run(code)
        assert status == "ok", printed
        return printed

    def close(self):
        self.client.stop_channels()
        self.manager.shutdown_kernel(now=True)


@pytest.fixture(scope="module")
def kernel():
    started = Kernel()
    started.ok("%load_ext ddp_lab")
    yield started
    started.ok("%ddp stop")
    started.close()


EACH_RANK = "[rank 0] {}\n[rank 1] {}\n"


def test_a_typo_in_ddp_start_keeps_the_running_ranks(kernel):
    kernel.ok("%ddp start 2 --backend gloo")
    kernel.ok("%%ddp\nx = rank * 10")
    assert kernel.run("%ddp start 0")[1:] == ("world_size must be a positive int, got 0", "ValueError")
    status, printed, error = kernel.run("%ddp start 2 --backend mpi")
    assert error == "ValueError" and "unknown backend 'mpi'" in printed
    assert kernel.ok("%%ddp\nx") == EACH_RANK.format(0, 10)


def test_ctrl_c_after_one_rank_finished_keeps_the_ranks(kernel):
    kernel.ok("%ddp start 2 --backend gloo")
    status, printed, error = kernel.run(
        "%%ddp\nimport time\ny = rank\ntime.sleep(0.05 if rank == 0 else 3600)", interrupt_at=[1.0])
    assert error == "KeyboardInterrupt" and "stopped" not in printed
    assert kernel.ok("%%ddp\ny") == EACH_RANK.format(0, 1)


def test_a_second_ctrl_c_does_not_shift_the_replies_onto_the_next_cell(kernel):
    kernel.ok("%ddp start 2 --backend gloo")
    slow_to_stop = ("%%ddp\nimport time\ntry:\n    time.sleep(3600)\n"
                    "except KeyboardInterrupt:\n    time.sleep(0.3)\n    raise")
    assert kernel.run(slow_to_stop, interrupt_at=[1.0, 1.05])[2] == "KeyboardInterrupt"
    assert kernel.ok("%%ddp\nrank") == EACH_RANK.format(0, 1)
    assert kernel.ok("%%ddp\nrank + 1") == EACH_RANK.format(1, 2)


def test_a_rank_killed_between_cells_is_named_and_the_cell_runs_nowhere(kernel, tmp_path):
    kernel.ok("%ddp start 2 --backend gloo")
    pids = [int(line.split()[-1]) for line in kernel.ok("%%ddp\nimport os\nos.getpid()").splitlines()]
    os.kill(pids[1], signal.SIGKILL)
    deadline = time.monotonic() + 5
    while "SIGKILL" not in (status := kernel.ok("%ddp status")) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert "rank 1 was killed by signal SIGKILL (9)" in status and "%ddp restart" in status
    status, printed, error = kernel.run(f"%%ddp\nopen(r'{tmp_path}/ran-on-' + str(rank), 'w').close()")
    assert error == "RankDied"
    assert "rank 1 was killed by signal SIGKILL (9) after the last call: this call ran on no rank" in printed
    assert "%ddp restart" in printed
    assert list(tmp_path.iterdir()) == []
    assert "stopped (rank 1 was killed by signal SIGKILL" in kernel.ok("%ddp status")
    kernel.ok("%ddp restart")
    assert kernel.ok("%%ddp\nrank") == EACH_RANK.format(0, 1)


WAITS = """
import os, time
import torch.distributed as dist
import ddp_lab

def waits(go, linger):
    print(f"rank {{dist.get_rank()}} waiting", flush=True)
    while not os.path.exists(go):
        time.sleep(0.05)
    time.sleep(linger)
    print(f"rank {{dist.get_rank()}} went")

ddp_lab.launch(waits, 2, args=({go!r}, {linger}), backend="gloo", timeout=20)
"""
WAITS_OUTPUT = ("[rank 0] rank 0 waiting\n[rank 0] rank 0 went\n"
                "[rank 1] rank 1 waiting\n[rank 1] rank 1 went\n")
LIVE = "\r[rank 0] rank 0 waiting | [rank 1] rank 1 waiting"


def as_saved(text):
    """What nbval compares (and a front end keeps): its coalescing drops what a \\r overwrote."""
    from nbformat import NotebookNode
    from nbval.plugin import coalesce_streams

    return coalesce_streams([NotebookNode(output_type="stream", name="stdout", text=text)])[0].text


def test_a_person_sees_the_ranks_lines_while_they_run_and_the_saved_output_is_unchanged(
        kernel, tmp_path):
    go = tmp_path / "go"
    seen = []

    def go_once_the_line_shows(printed):
        if LIVE in printed and not seen:
            seen.append(printed)
            go.touch()  # the ranks wait for this file: the launch has not ended

    status, printed, _ = kernel.run(WAITS.format(go=str(go), linger=0),
                                    on_stream=go_once_the_line_shows)
    assert status == "ok" and seen, printed
    assert "went" not in seen[0]
    assert printed.startswith(LIVE) and printed.endswith("\r" + WAITS_OUTPUT)
    assert as_saved(printed) == WAITS_OUTPUT


def test_no_live_line_for_a_batch_runner(kernel, tmp_path):
    go = tmp_path / "go"
    go.touch()  # the ranks print, then run 1.5 s more: long enough for a live line
    status, printed, _ = kernel.run(WAITS.format(go=str(go), linger=1.5), allow_stdin=False)
    assert status == "ok" and printed == WAITS_OUTPUT  # no \r: nbclient and nbval save it as before


def test_push_sends_notebook_code_to_the_ranks_of_ddp_start(kernel):
    kernel.ok("%ddp start 2 --backend gloo")
    kernel.ok("def shout(text):\n    return text.upper() + '!'\nword = 'hi'")
    status, printed, error = kernel.run("%%ddp\nshout(word)")
    # a %%ddp cell sees the ranks' variables, not the notebook's
    assert error == "RankFailed" and "NameError: name 'shout' is not defined" in printed
    kernel.ok("%ddp push shout word")
    assert kernel.ok("%%ddp\nshout(word) + str(rank)") == EACH_RANK.format("'HI!0'", "'HI!1'")
    status, printed, error = kernel.run("%ddp push nowhere")
    assert error == "NameError" and "no variable named nowhere in the notebook" in printed


def test_a_cell_past_its_timeout_says_the_variables_are_gone(kernel):
    kernel.ok("%ddp start 2 --backend gloo")
    kernel.ok("%%ddp\nz = rank")
    status, printed, error = kernel.run("%%ddp --timeout 1\nimport time\ntime.sleep(3600)")
    assert error == "RanksTimedOut"
    assert "their variables are gone; %ddp restart (or ranks.restart()) starts fresh ones" in printed
    assert "the variables they held are gone: %ddp restart" in printed
    assert "collective" not in printed  # they were sleeping, not waiting for each other
    kernel.ok("%ddp restart")
    status, printed, error = kernel.run("%%ddp\nz")
    assert error == "RankFailed" and "NameError: name 'z' is not defined" in printed
