"""``python -m ddp_lab.bench launch [--world-size 4] [--repeats 20]``."""

import argparse

from . import launch_speed


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m ddp_lab.bench", description=__doc__)
    commands = parser.add_subparsers(dest="benchmark", required=True)
    launch = commands.add_parser("launch", help="time from call to results of a trivial all_reduce")
    launch.add_argument("--world-size", type=int, default=4)
    launch.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args(argv)
    if args.benchmark == "launch":
        launch_speed.main(world_size=args.world_size, repeats=args.repeats)


if __name__ == "__main__":
    main()
