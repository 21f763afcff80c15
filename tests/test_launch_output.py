"""What the ranks print: bounded, with \\r progress rendered in place, live while they run (issue 19)."""

import contextlib
import io
import os
import subprocess
import sys
import textwrap
import threading
import time

import psutil
import torch.distributed as dist

import ddp_lab
from ddp_lab.launcher import output as output_module
from ddp_lab.launcher.output import KEEP_CHARS, RankOutput, split_lines, status_line

MiB = 2 ** 20


@contextlib.contextmanager
def peak_rss_growth():
    """The most this process's resident memory grew by while the block ran,
    sampled every 5 ms (memory freed by the end would escape a before/after
    comparison)."""
    process = psutil.Process()
    before = process.memory_info().rss
    grown, done = [0], threading.Event()

    def sample():
        while not done.is_set():
            grown[0] = max(grown[0], process.memory_info().rss - before)
            time.sleep(0.005)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        yield grown
    finally:
        done.set()
        sampler.join()


def test_a_rank_printing_200_mb_costs_the_notebook_a_few_mib(capsys):
    def prints(megabytes):
        block = ("x" * 99 + "\n") * 10_000  # 1 MB
        for _ in range(megabytes):
            sys.stdout.write(block)
        print("the end")

    ddp_lab.launch(prints, 1, args=(1,))  # the forkserver and the imports, out of the way
    capsys.readouterr()
    with peak_rss_growth() as grown:
        ddp_lab.launch(prints, 1, args=(200,))
    out = capsys.readouterr().out
    # measured: 2.4 MiB (830 MiB when everything a rank printed was kept)
    assert grown[0] < 32 * MiB, f"the notebook grew by {grown[0] / MiB:.0f} MiB"
    lines = out.splitlines()
    assert lines[0] == "[rank 0] " + "x" * 99 and lines[-1] == "[rank 0] the end"
    elided = [line for line in lines if "not shown" in line]
    assert elided == [f"[rank 0] [... {198_951_600:,} characters ({1_989_516:,} lines) not shown: "
                      f"ddp_lab keeps the first and the last {KEEP_CHARS:,} characters that each "
                      "rank prints ...]"]
    assert len(out) < 3 * KEEP_CHARS


def test_a_progress_bar_drawn_with_carriage_returns_ends_as_one_line(capsys):
    def progress():
        for percent in range(0, 101, 10):
            print(f"\r{dist.get_rank()}: {percent:3d}%", end="", flush=True)
        print()
        print("next line")

    ddp_lab.launch(progress, 2)
    assert capsys.readouterr().out.endswith(
        "[rank 0] 0: 100%\n[rank 0] next line\n[rank 1] 1: 100%\n[rank 1] next line\n")


def test_kept_output_is_the_first_and_last_lines_and_says_what_was_dropped():
    output = RankOutput(keep=20)
    for i in range(100):
        output.feed(f"line {i:02d}\n".encode())  # 8 characters each: 2 whole lines fit in 20
    text = output.take()
    assert text == ("line 00\nline 01\n"
                    "[... 768 characters (96 lines) not shown: ddp_lab keeps the first and the last "
                    "20 characters that each rank prints ...]\n"
                    "line 98\nline 99\n")
    assert output.take() == ""
    output.feed(b"short\n")
    assert output.take() == "short\n"  # nothing dropped, nothing said


def test_a_redrawn_line_longer_than_what_is_kept_shows_its_last_state():
    # A progress line redrawn with \r, longer than the first and last KEEP_CHARS
    # together (about 1 MiB): the middle is dropped, and the line cut in two
    # must still show its last state, not an old (and truncated) one from the head.
    def progress_of(steps):
        return "".join(f"\rstep {i:07d}" for i in range(steps))

    for before, after in (("", "\ndone\n"), ("start\n", "\ndone\n"), ("start\n", "")):
        output = RankOutput()
        data = (before + progress_of(100_000) + after).encode()  # 1.3 MB
        for start in range(0, len(data), 65536):
            output.feed(data[start:start + 65536])
        lines = split_lines(output.take())
        assert "step 0099999" in lines, lines[:2] + lines[-2:]
        shown = [line for line in lines if line.startswith("step")]
        assert shown == ["step 0099999"], shown[:3]
        assert lines[0] == (before.strip() or lines[0]) and "not shown" in lines[1 if before else 0]
        assert lines[-1] == ("done" if after else "step 0099999")

    small = RankOutput(keep=20)
    for piece in ("top\n", *progress_of(30).split("\r")[1:], "\nend\n"):
        small.feed(("\r" + piece if piece.startswith("step") else piece).encode())
    text = small.take()
    assert "not shown" in text and split_lines(text)[0] == "top"
    assert split_lines(text)[2:] == ["step 0000029", "end"]


def test_lines_are_split_as_a_terminal_shows_them():
    assert split_lines("a\nb\r\nc") == ["a", "b", "c"]  # as str.splitlines
    assert split_lines(" 10%\r 60%\r100%\ndone\n") == ["100%", "done"]
    assert split_lines("typed\r") == ["typed"]  # a \r with nothing after it overwrote nothing
    assert split_lines("\n\n") == ["", ""]


def test_the_live_line_shows_each_ranks_latest_line_within_the_width():
    output = RankOutput()
    output.feed(b"epoch 1\nepoch 2\n 50%\r 70%\r")
    assert output.latest_line() == " 70%"
    assert status_line(["a" * 100, "", "b"], 40) == "[rank 0] aaaaaa... | [rank 2] b"
    assert status_line(["", ""], 40) == ""


def test_a_shorter_live_line_covers_the_longer_one_and_the_end_blanks_it(monkeypatch):
    """In a notebook a \\r overwrites character by character (JupyterLab, VS Code):
    each line is padded to the longest drawn, and the end covers it with spaces."""
    monkeypatch.setenv("DDP_LAB_LIVE_OUTPUT", "always")
    monkeypatch.setattr(output_module, "LIVE_AFTER", 0.0)
    monkeypatch.setattr(output_module, "LIVE_INTERVAL", 0.0)
    written = io.StringIO()  # not a terminal
    monkeypatch.setattr(sys, "stdout", written)
    rank = RankOutput()
    line = output_module.LiveLine()
    line.begin()
    rank.feed(b"a long first line\n")
    line.draw([rank])
    rank.feed(b"short\n")
    line.draw([rank])
    line.end()
    assert written.getvalue() == ("\r[rank 0] a long first line" + "\r[rank 0] short" + " " * 12
                                  + "\r" + " " * 26 + "\r")


SCRIPT = """
    import os, sys, time
    import torch.distributed as dist
    import ddp_lab

    def waits(go):
        print(f"rank {dist.get_rank()} waiting", flush=True)
        while not os.path.exists(go):
            time.sleep(0.05)
        print(f"rank {dist.get_rank()} went")

    if __name__ == "__main__":
        ddp_lab.launch(waits, 2, args=(sys.argv[1],), backend="gloo", timeout=60)
        print("after")
"""
FINAL = ("[rank 0] rank 0 waiting\n[rank 0] rank 0 went\n"
         "[rank 1] rank 1 waiting\n[rank 1] rank 1 went\nafter\n")


def run_script(tmp_path, live):
    """Run SCRIPT; create its go-file once the live line shows both ranks waiting
    (at once when ``live`` is "never"). Returns what it printed, and when it saw the line."""
    script, go = tmp_path / "waits.py", tmp_path / "go"
    script.write_text(textwrap.dedent(SCRIPT))
    env = {**os.environ, "DDP_LAB_LIVE_OUTPUT": live}
    run = subprocess.Popen([sys.executable, str(script), str(go)], stdout=subprocess.PIPE, env=env)
    printed = bytearray()

    def read():
        for chunk in iter(lambda: run.stdout.read1(1 << 16), b""):
            printed.extend(chunk)

    reader = threading.Thread(target=read)
    reader.start()
    deadline, seen = time.monotonic() + 60, None
    while live == "always" and seen is None and time.monotonic() < deadline:
        if b"\r[rank 0] rank 0 waiting | [rank 1] rank 1 waiting" in printed:
            seen = printed.decode()
        time.sleep(0.05)
    go.touch()
    reader.join(60)
    assert run.wait(60) == 0
    return printed.decode(), seen


def test_lines_are_shown_while_the_ranks_run_then_replaced_by_the_rank_ordered_output(tmp_path):
    printed, seen = run_script(tmp_path, "always")
    assert seen is not None, printed  # the ranks were waiting for the file: the launch had not ended
    assert "went" not in seen
    live, final = printed.rsplit("\r", 1)
    assert live.startswith("\r[rank 0] rank 0 waiting | [rank 1] rank 1 waiting")
    assert final == FINAL  # what a terminal or a notebook then shows


def test_no_live_line_where_nobody_watches(tmp_path):
    printed, _ = run_script(tmp_path, "auto")  # stdout is a pipe
    assert printed == FINAL
