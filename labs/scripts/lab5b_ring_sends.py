"""Lab 5b, script 4 (broken on purpose): an all-reduce from send and recv.

    torchrun --standalone --nproc_per_node 4 lab5b_ring_sends.py

Data parallelism by hand, with the gradients averaged by a hand-made
all-reduce: each rank sends its gradient to every other rank, then receives
theirs and adds them up. main() returns the trained model.
"""
import argparse
import datetime

import torch
import torch.distributed as dist


def all_reduce_by_hand(tensor):
    rank, world_size = dist.get_rank(), dist.get_world_size()
    total = tensor.clone()
    for peer in range(world_size):
        if peer != rank:
            dist.send(tensor, dst=peer)
    for peer in range(world_size):
        if peer != rank:
            received = torch.empty_like(tensor)
            dist.recv(received, src=peer)
            total += received
    tensor.copy_(total)


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=60.0,
                        help="process group timeout, seconds")
    args = parser.parse_args(argv)
    timeout = datetime.timedelta(seconds=args.timeout)
    dist.init_process_group("gloo", timeout=timeout)
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    generator = torch.Generator().manual_seed(rank)
    for _ in range(args.steps):
        x = torch.randn(16, 8, generator=generator)
        loss = (model(x) - x.sum(dim=1, keepdim=True)).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        for parameter in model.parameters():
            all_reduce_by_hand(parameter.grad)
            parameter.grad /= dist.get_world_size()
        optimizer.step()
    return model


if __name__ == "__main__":
    main()
    dist.destroy_process_group()
