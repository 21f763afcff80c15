"""Lab 5b, script 1 (broken on purpose): a checkpoint every 3 steps.

    torchrun --standalone --nproc_per_node 4 lab5b_checkpoint_order.py

Data parallelism by hand: each rank computes the gradients of its own batch
and the ranks average them with all-reduce. Every 3 steps rank 0 writes a
checkpoint, and the ranks meet at a barrier so that no rank reads it before
it is complete; and every 3 steps the mean loss is logged.
main() returns the trained model.
"""
import argparse
import datetime
import os
import tempfile

import torch
import torch.distributed as dist


def average_gradients(model):
    for parameter in model.parameters():
        dist.all_reduce(parameter.grad)
        parameter.grad /= dist.get_world_size()


def mean_loss(loss):
    total = loss.detach().clone()
    dist.all_reduce(total)
    return total.item() / dist.get_world_size()


def save_checkpoint(model, path):
    torch.save(model.state_dict(), path)
    dist.barrier()  # past this line, every rank may read the checkpoint


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=6)
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
    name = f"lab5b_checkpoint_{os.getpid()}.pt"
    path = os.path.join(tempfile.gettempdir(), name)
    for step in range(1, args.steps + 1):
        x = torch.randn(16, 8, generator=generator)
        loss = (model(x) - x.sum(dim=1, keepdim=True)).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        average_gradients(model)
        optimizer.step()
        if step % 3 == 0:
            if rank == 0:
                save_checkpoint(model, path)
            mean = mean_loss(loss)
            if rank != 0:
                dist.barrier()  # wait until rank 0 wrote the checkpoint
            if rank == 0:
                print(f"[rank 0] step {step}: mean loss {mean:.4f}")
    if rank == 0 and os.path.exists(path):
        os.remove(path)
    return model


if __name__ == "__main__":
    main()
    dist.destroy_process_group()
