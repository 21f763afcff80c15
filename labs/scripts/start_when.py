"""Start a command once a file exists: a second agent that joins late (Chapter 12).

    python start_when.py READY_FILE -- torchrun --nnodes 1:2 ... elastic_join.py ...

What a person does by hand, watching the first agent's output and typing the
second command in another terminal, done by waiting for a file the first
job creates once it runs (``elastic_join.py --ready-file``). The wait is on
an event, not a fixed sleep, so it holds on a busy machine. Then the command
replaces this process (``os.execvp``): it keeps its process id, its
environment and its output.
"""

import argparse
import os
import sys
import time
from pathlib import Path


def parse_args(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = argparse.ArgumentParser(usage="start_when.py [--limit SECONDS] FILE -- COMMAND ...",
                                     description="Wait until FILE exists, then run COMMAND in place of this process.")
    parser.add_argument("file", type=Path, metavar="FILE", help="the file to wait for")
    parser.add_argument("--limit", type=float, default=300.0, metavar="SECONDS",
                        help="give up (exit code 1) after this many seconds (default 300)")
    if "--" not in argv:
        parser.error("no command given: put it after --, e.g. start_when.py ready -- torchrun ...")
    split = argv.index("--")
    args = parser.parse_args(argv[:split])
    args.command = argv[split + 1:]
    if not args.command:
        parser.error("no command given: put it after --, e.g. start_when.py ready -- torchrun ...")
    if not args.limit > 0:
        parser.error(f"--limit must be a positive number of seconds, not {args.limit}")
    return args


def main(argv=None):
    args = parse_args(argv)
    deadline = time.monotonic() + args.limit
    while not args.file.exists():
        if time.monotonic() > deadline:
            sys.exit(f"start_when.py: {args.file} did not appear within {args.limit:g} s; "
                     f"{args.command[0]} was not started")
        time.sleep(0.05)
    os.execvp(args.command[0], args.command)


if __name__ == "__main__":
    main()
