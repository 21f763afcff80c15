"""Print what torchrun told each process: the environment of every rank.

    torchrun --standalone --nproc_per_node 2 print_env.py

torchrun describes the job to each process it starts through environment
variables. Every rank reads its own, joins the process group, and sends them
to rank 0, which prints first the variables that every rank shares, then one
line per rank for those that differ: a table in rank order, the same on every
run (a process printing for itself would interleave with the others).
"""

import argparse
import os
import socket

import torch.distributed as dist

VARIABLES = [
    "RANK", "LOCAL_RANK", "GROUP_RANK", "ROLE_RANK",
    "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_WORLD_SIZE", "ROLE_WORLD_SIZE", "ROLE_NAME",
    "MASTER_ADDR", "MASTER_PORT",
    "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_RUN_ID",
    "TORCHELASTIC_USE_AGENT_STORE",
]


def build_parser():
    parser = argparse.ArgumentParser(
        description="Print the environment torchrun sets for every rank "
        "(run it with torchrun, e.g. torchrun --standalone --nproc_per_node 2 print_env.py).")
    parser.add_argument("--names", nargs="+", default=VARIABLES, metavar="NAME",
                        help="the environment variables to print (default: those torchrun sets)")
    parser.add_argument("--backend", default="gloo", choices=["gloo", "nccl"],
                        help="backend of the process group used to gather the table on rank 0")
    return parser


def parse_args(argv=None):
    return build_parser().parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    # env://: reads RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT
    dist.init_process_group(args.backend)
    mine = {name: os.environ.get(name, "(not set)") for name in args.names}
    mine["host"], mine["pid"] = socket.gethostname(), str(os.getpid())
    table = [None] * dist.get_world_size()
    dist.all_gather_object(table, mine)
    if dist.get_rank() == 0:
        shared = [name for name in mine
                  if all(row[name] == table[0][name] for row in table)]
        print("[rank 0] the same on every rank:")
        for name in shared:
            print(f"[rank 0]   {name}={table[0][name]}")
        print("[rank 0] different on each rank:")
        for row in table:
            own = [f"{name}={row[name]}" for name in row if name not in shared]
            print("[rank 0]   " + "  ".join(own))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
