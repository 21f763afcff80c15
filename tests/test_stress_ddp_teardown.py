"""A DDP model still alive when its process group is destroyed: no launch may hang (issue 19).

The pattern: a rank's function joins a group itself (``init_process_group=False``),
trains a DDP model, calls ``destroy_process_group()`` and returns, which frees
the model. Freeing it ran the group's C++ destructor with the GIL held while a
gloo thread waited for the GIL: a deadlock in about 30% of launches on a
busy 2-core machine, reported as "rank 1: no answer (stuck outside
Python?)". ``ddp_lab.launcher.keep_groups`` explains it; a rank now keeps
every group until it exits.

How many launches. Each launch is one chance for the race, which before the
fix was lost about 30% of the time (30 and 34 launches of 100): 40 launches
all pass with probability 0.7**40, below 1e-6. The second test runs the
pattern 25 times inside each of 2 launches (a new group each round, in a
helper function, so the model is freed when the helper returns): before the
fix every one of 8 such launches of 10 rounds hung. Together they take 5 to
15 s, depending on how busy the machine is; a hang fails the test at its
first occurrence, after ``TIMEOUT`` seconds.
"""

import os
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import ddp_lab

LAUNCHES = 40
ROUNDS = 25
# Far above a launch's usual second, even on a busy machine: only a hang reaches it.
TIMEOUT = 30


def train_and_destroy_with_the_model_alive(store=None, steps=3):
    """Join a group, train a DDP model, destroy the group; return, freeing the model."""
    if store is None:
        dist.init_process_group("gloo")  # env://, as a torchrun script does
    else:
        dist.init_process_group("gloo", store=store, rank=int(os.environ["RANK"]),
                                world_size=int(os.environ["WORLD_SIZE"]))
    model = DDP(torch.nn.Linear(8, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(steps):
        optimizer.zero_grad()
        model(torch.randn(4, 8)).sum().backward()
        optimizer.step()
    rank = dist.get_rank()
    dist.destroy_process_group()  # `model` still holds the group
    return rank


def rounds_of_the_pattern(rounds):
    """The pattern ``rounds`` times in one rank, each round in a group of its own."""
    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]),
                          is_master=False, timeout=timedelta(seconds=TIMEOUT))
    for k in range(rounds):
        # a prefix per round: the keys of one round's group never meet the next one's
        train_and_destroy_with_the_model_alive(dist.PrefixStore(f"round{k}", store))
    return rounds


def groups_created_are_kept():
    from ddp_lab.launcher.keep_groups import KEPT

    dist.init_process_group("gloo")
    world, pair = dist.group.WORLD, dist.new_group([0, 1])
    dist.destroy_process_group()
    return [any(kept is group for kept in KEPT) for group in (world, pair)]


def test_launches_whose_function_destroys_the_group_under_a_live_ddp_model_never_hang():
    for i in range(LAUNCHES):
        results = ddp_lab.launch(train_and_destroy_with_the_model_alive, 2,
                                 init_process_group=False, timeout=TIMEOUT)
        assert results == [0, 1], f"launch {i}"


def test_the_pattern_many_times_in_one_launch_never_hangs():
    for i in range(2):
        results = ddp_lab.launch(rounds_of_the_pattern, 2, args=(ROUNDS,),
                                 init_process_group=False, timeout=TIMEOUT)
        assert results == [ROUNDS, ROUNDS], f"launch {i}"


def test_a_rank_keeps_every_process_group_it_creates():
    assert ddp_lab.launch(groups_created_are_kept, 2, init_process_group=False) == [[True, True]] * 2
