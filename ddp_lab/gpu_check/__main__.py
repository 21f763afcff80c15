"""``python -m ddp_lab.gpu_check``: run every GPU path of the book, write a results file.

    python -m ddp_lab.gpu_check --out book/part4_running/gpu_results/
    python -m ddp_lab.gpu_check --only all_reduce_bandwidth --out /tmp/allreduce.json
    python -m ddp_lab.gpu_check --allow-no-gpu --out /tmp/dry.json   # no GPU: every check skipped
    python -m ddp_lab.gpu_check --schema                              # the results file's JSON Schema

It needs a CUDA GPU, and refuses, saying what is missing, before it starts
anything where there is none. Each check prints a line as it ends; then the
report the book's pages show, then the file's path. ``--out`` is checked
before anything starts (a folder to write in, or that can be made; no
symbolic link), and the file is written whole or not at all. Exit status: 0
when every check passed or was skipped for want of GPUs, 1 when one failed
(the file is written all the same, with the error), 2 for bad options, a bad
``--out`` included, 3 when there is no usable CUDA GPU (nothing was run,
nothing written), 4 when the file could not be written after all (the
results are printed as JSON instead, after the report).

The file records the command line that made it (``command``), with an
``--out`` that names a place outside the current folder written as ``OUT``
(an absolute path inside it is made relative): the file is committed, and
carries no path of the machine that wrote it.

Chapter 14 tells how to run it on a GPU machine.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time

from ddp_lab.gpu_check.checklist import CHECKS, check_named
from ddp_lab.gpu_check.machine import describe_machine, why_no_cuda
from ddp_lab.gpu_check.results import RESULTS_FOLDER, SCHEMA, assemble, out_problem, write
from ddp_lab.gpu_check.runner import Options, run_checks
from ddp_lab.host import cuda_device_count
from ddp_lab.validate import check_positive_number

__all__ = ["main", "recorded_command", "NO_CUDA", "NOT_WRITTEN"]

NO_CUDA = 3  # the exit status when there is no GPU to check
NOT_WRITTEN = 4  # the checks ran but their file could not be written: they are printed instead
OUT_PLACEHOLDER = "OUT"  # what the recorded command says for an --out outside the current folder
OUT_TAKES = ("--out takes a .json file, or a folder (created if need be), that you can write to and that is "
             "not a symbolic link")


def parse_args(argv):
    parser = argparse.ArgumentParser(prog="python -m ddp_lab.gpu_check", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=".",
                        help="a .json file, or a folder where the file is named after the GPUs and the date "
                             f"(default: the current folder; the book's is {RESULTS_FOLDER})")
    parser.add_argument("--allow-no-gpu", action="store_true",
                        help="on a machine without a GPU, write a file in which every GPU check is skipped "
                             "(to try the command and the pages out) instead of refusing")
    parser.add_argument("--only", nargs="+", metavar="CHECK", choices=[c.name for c in CHECKS],
                        help="run only these checks: " + ", ".join(c.name for c in CHECKS))
    parser.add_argument("--repeats", type=int, default=Options.repeats,
                        help=f"timed repeats per size (default {Options.repeats})")
    parser.add_argument("--iterations", type=int, default=Options.iterations,
                        help=f"all-reduce calls per timed repeat (default {Options.iterations})")
    parser.add_argument("--max-bytes", type=int, default=Options.all_reduce_sizes[-1],
                        help=f"largest all-reduce, in bytes (default {Options.all_reduce_sizes[-1]}: 256 MiB)")
    parser.add_argument("--timeout", type=_seconds, default=Options.timeout,
                        help=f"seconds each launch may take (default {Options.timeout:g})")
    parser.add_argument("--schema", action="store_true", help="print the results file's JSON Schema and stop")
    args = parser.parse_args(argv)
    sizes = tuple(s for s in Options.all_reduce_sizes if s <= args.max_bytes)
    try:
        args.options = Options(repeats=args.repeats, iterations=args.iterations, timeout=args.timeout,
                               all_reduce_sizes=sizes or (args.max_bytes,))
    except ValueError as error:
        parser.error(str(error))
    problem = None if args.schema else out_problem(args.out)
    if problem:  # now, not after an hour of checks whose results would have nowhere to go
        parser.error(f"argument --out: cannot write the results to {args.out!r}: {problem}. {OUT_TAKES}")
    return args


def _seconds(text):
    """``--timeout``'s type: a finite number of seconds > 0 (``inf``, ``nan``, ``0`` refused by argparse)."""
    try:
        return check_positive_number("--timeout", float(text), "seconds")
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a finite number of seconds > 0, got {text!r}") from None


def recorded_command(argv, cwd=None) -> str:
    """The command line as the results file records it: no absolute path of this machine in it.

    ``--out`` (or ``--out=...``, or argparse's abbreviation ``--ou``) is kept
    as typed when it is relative; an absolute one inside ``cwd`` (the current
    folder by default) becomes relative to it, keeping a final ``/``; any
    other becomes ``OUT``, argparse's name for the argument. The results
    folder is committed with the book (Chapter 14), and a path such as
    ``/root/out/`` would only say where one machine kept its files.
    """
    cwd = os.path.abspath(os.getcwd() if cwd is None else cwd)

    def relative(out):
        if not os.path.isabs(out):
            return out
        inside = os.path.commonpath([cwd, os.path.abspath(out)]) == cwd
        if not inside:
            return OUT_PLACEHOLDER
        path = os.path.relpath(out, cwd)
        return path + "/" if out.endswith(("/", os.sep)) and path != "." else path

    words, out_next = [], False
    for word in argv:
        option, equals, value = word.partition("=")
        if out_next:
            words.append(relative(word))
        elif option in ("--out", "--ou") and equals:
            words.append(f"{option}={relative(value)}")
        else:
            words.append(word)
        out_next = not out_next and word in ("--out", "--ou")
    return shlex.join(["python", "-m", "ddp_lab.gpu_check", *words])


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse_args(argv)
    if args.schema:
        print(json.dumps(SCHEMA, indent=1))
        return 0
    missing = why_no_cuda()
    if missing and not args.allow_no_gpu:
        print(f"python -m ddp_lab.gpu_check needs a CUDA GPU, and this machine has none it can use: {missing}. "
              f"Nothing was run. (--allow-no-gpu writes a results file in which every GPU check is skipped.)",
              file=sys.stderr)
        return NO_CUDA
    date = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    gpus = 0 if missing else cuda_device_count()
    checks = [check_named(name) for name in args.only] if args.only else list(CHECKS)
    print(f"ddp_lab.gpu_check: {gpus} CUDA GPU(s)" + (f" ({missing})" if missing else "")
          + f"; {len(checks)} checks", flush=True)
    records = run_checks(checks, gpus, args.options, progress=lambda line: print(line, flush=True))
    document = assemble(describe_machine(gpus), records, args.options.as_dict(), date=date,
                        command=recorded_command(argv),
                        allow_no_gpu=args.allow_no_gpu)
    try:
        path, failure = write(document, args.out), None
    except (OSError, ValueError) as error:  # checked before the run, but a folder can change meanwhile
        path, failure = None, error

    from ddp_lab.gpu_check.report import report  # text only: needs no matplotlib

    print()
    print(report([document]))
    if failure is not None:
        print("\nthe results, as JSON (the file could not be written):")
        print(json.dumps(document, indent=1), flush=True)
        print(f"python -m ddp_lab.gpu_check: the results file could not be written: {failure}", file=sys.stderr)
        return NOT_WRITTEN
    print(f"\nresults written to {path}")
    return 1 if document["summary"]["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
