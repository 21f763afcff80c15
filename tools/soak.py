"""Soak the package: many launches and torchrun jobs, some interrupted, and count what is left.

    python tools/soak.py --rounds 200            # about 15 minutes on 2 cores

Each round picks, with a seeded random generator, one of:

- ``launch``: ``ddp_lab.launch`` of an all-reduce on 2 to 4 ranks, result checked;
- ``launch-interrupted``: the same, interrupted (SIGINT to this process, as a
  notebook's Stop button does) after a random 0-1.5 s; the next round must be right;
- ``torchrun``: ``run_torchrun`` of a script that all-reduces, result checked;
- ``torchrun-interrupted``: the same, interrupted after a random 0.5-3 s;
- ``torchrun-killed-agent``: the agent SIGKILLed mid-run (its workers must not outlive it);
- ``listener-probe``: a torchrun job whose every listening socket is probed through
  this machine's non-loopback address (must be refused).

After every round it checks that no child process is left, and records this
process's open descriptors, listening sockets and resident memory. At the end it
prints the counts of wrong results, interrupts answered, leftover processes and
temporary folders, and the first and last figures of descriptors, listeners and
memory: flat means nothing leaks.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import signal
import socket
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import psutil
import torch
import torch.distributed as dist

import ddp_lab
from ddp_lab.cluster.torchrun import run_torchrun

SCRIPT = '''
import os, torch, torch.distributed as dist
dist.init_process_group("gloo")
t = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(t)
print(f"[rank {dist.get_rank()}] sum {int(t.item())}", flush=True)
dist.destroy_process_group()
'''


def total(x):
    t = torch.tensor([x * (dist.get_rank() + 1)])
    dist.all_reduce(t)
    return t.item()


def interrupt_after(seconds):
    timer = threading.Timer(seconds, os.kill, args=(os.getpid(), signal.SIGINT))
    timer.start()
    return timer


def leftovers():
    """Children still running, but the launcher's forkserver and multiprocessing's resource tracker,
    which live as long as this process by design."""
    rest = []
    for child in psutil.Process().children(recursive=True):
        try:
            line = " ".join(child.cmdline())
            if child.status() != psutil.STATUS_ZOMBIE and "forkserver" not in line and "resource_tracker" not in line:
                rest.append(child)
        except psutil.Error:
            pass
    return rest


def temp_litter(before):
    folder = Path(tempfile.gettempdir())
    now = {p.name for p in folder.iterdir()
           if p.name.startswith(("pymp-", "torchelastic_", "ddp_lab_torchrun_", "ddp_lab-"))}
    return now - before


def listeners():
    return sum(1 for c in psutil.Process().net_connections("tcp") if c.status == psutil.CONN_LISTEN)


def outside_address():
    for addresses in psutil.net_if_addrs().values():
        for a in addresses:
            if a.family == socket.AF_INET and not a.address.startswith("127."):
                return a.address
    return None


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--in-child", action="store_true", help=argparse.SUPPRESS)
    options = parser.parse_args(argv)
    if not options.in_child:  # run the rounds in a child, and look at the temporary folder after it exits
        import shutil
        import subprocess

        own = tempfile.mkdtemp(prefix="soak-tmp-")  # a temporary folder of its own: nothing else writes there
        code = subprocess.call([sys.executable, __file__, "--rounds", str(options.rounds),
                                "--seed", str(options.seed), "--in-child"], env={**os.environ, "TMPDIR": own})
        # torchinductor_<user>: torch's compile cache, kept across runs by design
        litter = sorted(p.name for p in Path(own).iterdir() if not p.name.startswith(("soak-", "torchinductor_")))
        print(f"temporary folders left after the process exited: {litter}")
        shutil.rmtree(own, ignore_errors=True)
        return code or (1 if litter else 0)
    rng = random.Random(options.seed)
    script = Path(tempfile.mkdtemp(prefix="soak-")) / "allreduce.py"
    script.write_text(SCRIPT)
    litter_before = temp_litter(set())
    counts, wrong, answered, left = Counter(), [], 0, 0
    figures = []
    kinds = ["launch", "launch-interrupted", "torchrun", "torchrun-interrupted", "torchrun-killed-agent"]
    weights = [5, 3, 3, 2, 1]
    started = time.monotonic()
    for round_ in range(options.rounds):
        kind = rng.choices(kinds, weights)[0]
        counts[kind] += 1
        world = rng.choice([2, 3, 4])
        expected = world * (world + 1) / 2
        try:
            if kind == "launch":
                got = ddp_lab.launch(total, world, args=(1.0,), backend="gloo", threads=1)
                if got != [expected] * world:
                    wrong.append((round_, kind, got))
            elif kind == "launch-interrupted":
                timer = interrupt_after(rng.uniform(0, 1.5))
                try:
                    ddp_lab.launch(total, world, args=(1.0,), backend="gloo", threads=1)
                except KeyboardInterrupt:
                    answered += 1
                finally:
                    timer.cancel()
            elif kind in ("torchrun", "torchrun-interrupted"):
                timer = interrupt_after(rng.uniform(0.5, 3.0)) if kind.endswith("interrupted") else None
                try:
                    run = run_torchrun(script, nproc_per_node=world, timeout=120)
                    # every rank's line, wherever it is: two ranks' lines may share one line of the
                    # agent's pipe (each print writes its text, then its newline)
                    lines = sorted(re.findall(r"\[rank \d+\] sum \d+", run.stdout))
                    want = [f"[rank {r}] sum {int(expected)}" for r in range(world)]
                    if not run.ok or lines != want:
                        wrong.append((round_, kind, run.returncode, lines, run.tail(5)))
                except KeyboardInterrupt:
                    answered += 1
                finally:
                    if timer:
                        timer.cancel()
            else:  # the agent SIGKILLed
                killer = threading.Timer(rng.uniform(1.0, 3.0), _kill_an_agent)
                killer.start()
                try:
                    run_torchrun(script, nproc_per_node=world, timeout=120)
                finally:
                    killer.cancel()
        except KeyboardInterrupt:  # the interrupt landed between the call and the try
            answered += 1
        time.sleep(0.2)
        rest = leftovers()
        if rest:
            left += 1
            for child in rest:
                child.kill()
        me = psutil.Process()
        figures.append((me.num_fds(), listeners(), me.memory_info().rss // 2**20))
        if round_ % 20 == 0:
            print(f"round {round_}: {dict(counts)}, fds/listeners/RSS MiB {figures[-1]}, "
                  f"{time.monotonic() - started:.0f} s", flush=True)
    litter = {name for name in temp_litter(litter_before) if not name.startswith("pymp-")}  # pymp-*: see main
    print(f"\n{options.rounds} rounds in {time.monotonic() - started:.0f} s: {dict(counts)}")
    print(f"wrong results: {len(wrong)} {wrong[:3]}")
    print(f"interrupts answered: {answered}")
    print(f"rounds that left a process behind: {left}")
    print(f"temporary folders left while it runs (but multiprocessing's own pymp-*): {sorted(litter)}")
    print(f"descriptors, listeners, RSS MiB: first {figures[0]}, last {figures[-1]}, "
          f"max {tuple(max(f[i] for f in figures) for i in range(3))}")
    return 1 if wrong or left or litter else 0


def _kill_an_agent():
    for child in psutil.Process().children():
        try:
            if "torch.distributed.run" in " ".join(child.cmdline()):
                child.kill()
        except psutil.Error:
            pass


if __name__ == "__main__":
    sys.exit(main())
