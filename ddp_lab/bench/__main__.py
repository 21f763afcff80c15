"""Benchmarks that print figures.

    python -m ddp_lab.bench launch     [--world-size 4] [--repeats 20]
    python -m ddp_lab.bench allreduce  [--world-size 4] [--min 1KiB] [--max 64MiB] [--trace]
    python -m ddp_lab.bench collectives [--world-size 4] [--repeats 5] [--max-bytes N]
    python -m ddp_lab.bench training   [--world-sizes 1 2 4] ...  (see --help)
    python -m ddp_lab.bench roofline   [--sizes 64 ... 1024] [--device cpu|cuda] [--out FILE]

The command Chapters 5, 6, 10 and 14b show; each benchmark is described in its module.
"""

import argparse
import sys

from ddp_lab.bench import allreduce, collectives, launch_speed, roofline, training

# These take their own options, --help included.
FORWARDED = {"collectives": collectives.main, "training": training.main, "roofline": roofline.main}


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] in FORWARDED:
        return FORWARDED[argv[0]](argv[1:])
    parser = argparse.ArgumentParser(prog="python -m ddp_lab.bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="benchmark", required=True)

    launch = commands.add_parser("launch", help="time from call to results of a trivial all_reduce")
    launch.add_argument("--world-size", type=int, default=4)
    launch.add_argument("--repeats", type=int, default=20)

    reduce = commands.add_parser("allreduce", help="built-in vs the book's ring all-reduce")
    reduce.add_argument("--world-size", type=int, default=4)
    reduce.add_argument("--min", default="1KiB", help="smallest message (default 1KiB)")
    reduce.add_argument("--max", default="64MiB", help="largest message (default 64MiB)")
    reduce.add_argument("--trace", action="store_true", help="also time the ring with tracing on")
    reduce.add_argument("--backend", default="auto", choices=["auto", "gloo", "nccl"])

    every = commands.add_parser("collectives", help="time, algbw and busbw of every collective")
    every.add_argument("rest", nargs=argparse.REMAINDER, help="options of ddp_lab.bench.collectives")

    train = commands.add_parser("training", help="samples/s at 1, 2, 4 ranks, threads set or not")
    train.add_argument("rest", nargs=argparse.REMAINDER, help="options of ddp_lab.bench.training")

    commands.add_parser("roofline", help="matmul FLOP/s across sizes and memory bandwidth (one process)")

    args = parser.parse_args(argv)
    if args.benchmark == "launch":
        launch_speed.main(world_size=args.world_size, repeats=args.repeats)
    elif args.benchmark == "allreduce":
        implementations = ("builtin", "textbook", "ring") + (("ring+trace",) if args.trace else ())
        allreduce.main(args.world_size, args.min, args.max, implementations, backend=args.backend)
    elif args.benchmark == "collectives":
        collectives.main(args.rest)
    elif args.benchmark == "training":
        training.main(args.rest)


if __name__ == "__main__":
    main()
