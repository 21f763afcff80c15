"""Lab 5b, script 3 (broken on purpose): a model with batch normalisation.

    torchrun --standalone --nproc_per_node 4 lab5b_batchnorm.py

Data parallelism by hand on a small classifier with a BatchNorm layer: each
rank trains on batches of its own, and the ranks average their gradients
after every backward pass, so every rank applies the same update. It runs
to the end without an error. main() returns the trained model.
"""
import argparse
import datetime

import torch
import torch.distributed as dist


def make_model():
    return torch.nn.Sequential(
        torch.nn.Linear(8, 16), torch.nn.BatchNorm1d(16), torch.nn.ReLU(),
        torch.nn.Linear(16, 2))


def average_gradients(model):
    for parameter in model.parameters():
        dist.all_reduce(parameter.grad)
        parameter.grad /= dist.get_world_size()


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--timeout", type=float, default=60.0,
                        help="process group timeout, seconds")
    args = parser.parse_args(argv)
    timeout = datetime.timedelta(seconds=args.timeout)
    dist.init_process_group("gloo", timeout=timeout)
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    generator = torch.Generator().manual_seed(rank)
    for _ in range(args.steps):
        # each rank's data has its own mean
        x = torch.randn(32, 8, generator=generator) + rank
        labels = (x.sum(dim=1) > 8 * rank).long()
        loss = torch.nn.functional.cross_entropy(model(x), labels)
        optimizer.zero_grad()
        loss.backward()
        average_gradients(model)
        optimizer.step()
    return model


if __name__ == "__main__":
    main()
    dist.destroy_process_group()
