"""Lab 5b, script 5 (broken on purpose): a job that runs, but slowly.

    torchrun --standalone --nproc_per_node 4 lab5b_slow_rank.py

Data parallelism by hand on a small model; the gradients are averaged with
all-reduce after every step, and the loss is sent to a dashboard. It
finishes without an error, and the replicas agree, but every rank takes
much longer per step than its computation needs. main() returns the
trained model.
"""
import argparse
import datetime
import time

import torch
import torch.distributed as dist

DASHBOARD_RANK = 2  # the rank that holds the dashboard's connection


def send_to_dashboard(step, loss):
    time.sleep(0.04)  # stands for a blocking HTTP request: about 40 ms


def average_gradients(model):
    for parameter in model.parameters():
        dist.all_reduce(parameter.grad)
        parameter.grad /= dist.get_world_size()


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--timeout", type=float, default=60.0,
                        help="process group timeout, seconds")
    args = parser.parse_args(argv)
    timeout = datetime.timedelta(seconds=args.timeout)
    dist.init_process_group("gloo", timeout=timeout)
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(),
                                torch.nn.Linear(32, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    generator = torch.Generator().manual_seed(rank)
    for step in range(args.steps):
        x = torch.randn(64, 8, generator=generator)
        loss = (model(x) - x.sum(dim=1, keepdim=True)).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        if rank == DASHBOARD_RANK:
            send_to_dashboard(step, loss.item())
        average_gradients(model)
        optimizer.step()
    return model


if __name__ == "__main__":
    main()
    dist.destroy_process_group()
