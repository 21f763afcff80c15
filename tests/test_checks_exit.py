"""A reader's answer that calls ``sys.exit()``, ``exit()`` or ``raise SystemExit`` gets a verdict, not a crash.

``launch`` counts ``sys.exit(0)`` in a rank as a normal end whose value is
None (as torchrun does); a checker would then crash on the None. Each lab
checker that launches answers instead with a failing ``CheckResult`` that
names the exit, its code and the rank, on real gloo ranks: one launch per
checker, on the fewest ranks it allows. Where only one rank exits and the
other waits for it in a collective or a receive, the verdict still names the
exit, not a hang at the timeout.
"""

import sys

import pytest
import torch.distributed as dist

from ddp_lab.checks import (
    check_accumulation,
    check_all_gather,
    check_all_reduce,
    check_ddp,
    check_fsdp_budget,
    check_ring_all_reduce,
    check_zero1,
)

TIMEOUT = 30  # a hang would show as a timeout verdict, which the assertions refuse


def step_exits_on_rank_1(model, optimizer, micro_batches):
    if dist.get_rank() == 1:
        sys.exit(0)
    for x, y in micro_batches:
        model(x).sum().backward()
    optimizer.step()


def train_exits_on_rank_0(steps):
    if dist.get_rank() == 0:
        sys.exit()
    dist.barrier()  # rank 1 waits for rank 0, which never comes


def all_reduce_raises_system_exit(tensor):
    raise SystemExit


def all_gather_exits_3_on_rank_1(tensor):
    if dist.get_rank() == 1:
        sys.exit(3)
    return [tensor, tensor]


def ring_exits_on_rank_0(tensor):
    if dist.get_rank() == 0:
        exit()  # noqa: PLR1722 -- the builtin a reader types, on purpose
    dist.recv(tensor.clone(), 0)  # waits for rank 0


def ddp_exits(module):
    sys.exit(0)


class ZeroExitsOnRank1:
    def __init__(self, params, lr):
        if dist.get_rank() == 1:
            sys.exit("no data")
        self.params = list(params)

    def zero_grad(self):
        pass

    def step(self):
        pass


CASES = {
    "accumulation": (lambda: check_accumulation(step_exits_on_rank_1, steps=1, timeout=TIMEOUT),
                     "sys.exit(0) on rank 1"),
    "fsdp_budget": (lambda: check_fsdp_budget(train_exits_on_rank_0, steps=1, timeout=TIMEOUT),
                    "sys.exit() on rank 0"),
    "all_reduce": (lambda: check_all_reduce(all_reduce_raises_system_exit, world_sizes=(2, 3), cases=1,
                                            timeout=TIMEOUT), "sys.exit() on rank"),
    "all_gather": (lambda: check_all_gather(all_gather_exits_3_on_rank_1, world_sizes=(2,), cases=1,
                                            timeout=TIMEOUT), "sys.exit(3) on rank 1"),
    "ring": (lambda: check_ring_all_reduce(ring_exits_on_rank_0, world_sizes=(2,), timeout=TIMEOUT),
             "sys.exit() on rank 0"),
    "ddp": (lambda: check_ddp(ddp_exits, steps=1, timeout=TIMEOUT), "sys.exit(0) on rank"),
    "zero1": (lambda: check_zero1(ZeroExitsOnRank1, steps=1, timeout=TIMEOUT),
              "sys.exit('no data') on rank 1"),
}


@pytest.mark.parametrize("checker", list(CASES))
def test_an_exit_in_the_readers_code_is_a_verdict_naming_it(checker):
    run, named = CASES[checker]
    result = run()
    assert not result
    assert len(result.mistakes) == 1, result.mistakes  # one launch, one verdict: no more world sizes
    mistake = result.mistakes[0]
    assert mistake.kind == "exit", mistake
    assert mistake.message.startswith("your code called " + named), mistake.message
    assert "Return from your function instead of exiting" in mistake.message
