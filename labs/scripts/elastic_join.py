"""A job that grows while it runs: torchrun's elastic membership (Chapter 12).

    torchrun --nnodes 1:2 --nproc_per_node 2 --rdzv_backend c10d \\
        --rdzv_endpoint HOST:29400 --rdzv_id job elastic_join.py --until-world-size 4

Started by one agent, the job runs with that agent's workers alone, and
"trains" (an all-reduce every few hundredths of a second) until the agent
stops them: when a second agent joins the rendezvous, the first one's
elastic agent sees it waiting and restarts its workers in a new round,
with both agents' workers and a larger WORLD_SIZE. Once the job has the
size given by ``--until-world-size``, every rank checks that all ranks
take part (an all-reduce of ones) and the job ends.

Every rank prints one line per round, prefixed with ``[rank N]``: its place
in the job as torchrun told it (WORLD_SIZE, GROUP_RANK, LOCAL_RANK,
TORCHELASTIC_RESTART_COUNT). Nothing printed depends on timing, so a run
prints the same lines every time (sorted by round and rank: the ranks of
one round print at the same moment).

``--ready-file PATH``: rank 0 of a round smaller than the final size creates
this file once its group has formed, so that whoever starts the second
agent can wait for the job to be running (Chapter 12 waits on it with
``start_when.py``).
"""

import argparse
import os
import time
from pathlib import Path

import torch
import torch.distributed as dist


def build_parser():
    parser = argparse.ArgumentParser(
        description="Run until the job has grown to a given WORLD_SIZE (start it with torchrun --nnodes MIN:MAX).")
    parser.add_argument("--until-world-size", type=int, required=True, metavar="N",
                        help="the WORLD_SIZE at which the job checks its ranks and ends")
    parser.add_argument("--ready-file", type=Path, default=None, metavar="PATH",
                        help="created by rank 0 once a smaller job is running (a signal to start another agent)")
    parser.add_argument("--wait-limit", type=float, default=300.0, metavar="SECONDS",
                        help="how long a smaller job waits for more agents before it fails (default 300)")
    return parser


def parse_args(argv=None):
    args = build_parser().parse_args(argv)
    if args.until_world_size < 1:
        raise SystemExit(f"--until-world-size must be 1 or more, not {args.until_world_size}")
    if not args.wait_limit > 0:
        raise SystemExit(f"--wait-limit must be a positive number of seconds, not {args.wait_limit}")
    return args


def place():
    """This worker's place in the job, from the variables torchrun sets."""
    names = ("WORLD_SIZE", "GROUP_RANK", "LOCAL_RANK", "TORCHELASTIC_RESTART_COUNT")
    return "  ".join(f"{name}={os.environ.get(name, '(not set)')}" for name in names)


def main(argv=None):
    args = parse_args(argv)
    dist.init_process_group("gloo")  # env://: the MASTER_ADDR and MASTER_PORT of this round
    rank, world_size = dist.get_rank(), dist.get_world_size()
    print(f"[rank {rank}] {place()}")
    if world_size > args.until_world_size:
        raise SystemExit(f"[rank {rank}] WORLD_SIZE={world_size} is larger than --until-world-size "
                         f"{args.until_world_size}: give torchrun --nnodes MIN:MAX and --nproc_per_node that fit")
    if world_size < args.until_world_size:
        if rank == 0 and args.ready_file is not None:
            args.ready_file.touch()
        # Work until the agent stops us for the next round (SIGTERM ends this process).
        deadline = time.monotonic() + args.wait_limit
        ones = torch.ones(1)
        while time.monotonic() < deadline:
            dist.all_reduce(ones)
            ones.fill_(1)
            time.sleep(0.05)
        raise SystemExit(f"[rank {rank}] no agent joined within {args.wait_limit:g} s "
                         f"(the job still has WORLD_SIZE={world_size})")
    ones = torch.ones(1)
    dist.all_reduce(ones)
    print(f"[rank {rank}] WORLD_SIZE={world_size}  all-reduce of ones: {int(ones.item())}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
