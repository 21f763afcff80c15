"""A training script that hangs: Chapter 13b diagnoses it from outside.

    torchrun --standalone --nproc_per_node 2 hang_mismatch.py --timeout 5

Data parallelism by hand on a tiny linear model: each step every rank
computes its gradients and all-reduces them. Every 5 steps the loss is
logged, and the logging has a bug: only rank 0 all-reduces the loss. The
other ranks go on to the end of training and wait in the final barrier,
while rank 0 waits in an all-reduce that no other rank will join.

``--timeout`` is the process group's timeout (init_process_group): the
collectives give up after that many seconds and the job fails, instead of
waiting for gloo's default of 30 minutes.
"""
import argparse
import datetime

import torch
import torch.distributed as dist


def average_gradients(model):
    world_size = dist.get_world_size()
    for parameter in model.parameters():
        dist.all_reduce(parameter.grad)
        parameter.grad /= world_size


def log_progress(step, loss):
    if dist.get_rank() == 0:  # the bug: a collective that rank 0 alone calls
        dist.all_reduce(loss)
        print(f"step {step}: mean loss {loss / dist.get_world_size():.4f}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--timeout", type=float, default=5.0, help="process group timeout, seconds")
    args = parser.parse_args()
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=args.timeout))
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    generator = torch.Generator().manual_seed(rank)
    for step in range(1, args.steps + 1):
        x = torch.randn(16, 8, generator=generator)
        loss = (model(x) - x.sum(dim=1, keepdim=True)).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        average_gradients(model)
        optimizer.step()
        if step % 5 == 0:
            log_progress(step, loss.detach())
    print(f"[rank {rank}] training done, waiting for the others", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
