"""Lab 5b, script 2 (broken on purpose): each rank trains on its own shard.

    torchrun --standalone --nproc_per_node 4 lab5b_uneven_shards.py

Data parallelism by hand: the data set (22 samples) is split into shards,
one per rank, and each rank walks through its shard in batches of 2,
leaving out a last batch that would be incomplete. The ranks average
their gradients after every batch, and wait for each other at the end.
main() returns the trained model.
"""
import argparse
import datetime

import torch
import torch.distributed as dist


def make_dataset(samples=22):
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(samples, 8, generator=generator)
    return x, x.sum(dim=1, keepdim=True)


def average_gradients(model):
    for parameter in model.parameters():
        dist.all_reduce(parameter.grad)
        parameter.grad /= dist.get_world_size()


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch-size", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=60.0,
                        help="process group timeout, seconds")
    args = parser.parse_args(argv)
    timeout = datetime.timedelta(seconds=args.timeout)
    dist.init_process_group("gloo", timeout=timeout)
    rank, world_size = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    x, y = make_dataset()
    shard_x, shard_y = x[rank::world_size], y[rank::world_size]
    for start in range(0, len(shard_x) - args.batch_size + 1,
                       args.batch_size):
        end = start + args.batch_size
        batch_x, batch_y = shard_x[start:end], shard_y[start:end]
        loss = (model(batch_x) - batch_y).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        average_gradients(model)
        optimizer.step()
    dist.barrier()  # every rank has finished training
    return model


if __name__ == "__main__":
    main()
    dist.destroy_process_group()
