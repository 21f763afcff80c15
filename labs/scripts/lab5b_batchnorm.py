"""Lab 5b, script 3 (broken on purpose): a DDP model with batch normalisation.

    torchrun --standalone --nproc_per_node 4 lab5b_batchnorm.py

A small classifier with a BatchNorm layer, wrapped in DistributedDataParallel;
each rank trains on batches of its own. It runs to the end without an error.
main() returns the trained model (the DDP wrapper).
"""
import argparse
import datetime

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def make_model():
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.BatchNorm1d(16), torch.nn.ReLU(),
                               torch.nn.Linear(16, 2))


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--timeout", type=float, default=60.0, help="process group timeout, seconds")
    args = parser.parse_args(argv)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=args.timeout))
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(make_model(), broadcast_buffers=False)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    generator = torch.Generator().manual_seed(rank)
    for _ in range(args.steps):
        x = torch.randn(32, 8, generator=generator) + rank  # each rank's data has its own mean
        labels = (x.sum(dim=1) > 4 * rank).long()
        loss = torch.nn.functional.cross_entropy(model(x), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model


if __name__ == "__main__":
    main()
    dist.destroy_process_group()
