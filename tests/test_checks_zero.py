"""Lab 6's checkers: the memory answer (no ranks) and ZeRO-1 by hand on real
gloo ranks. The right answers pass; each usual wrong one fails with a message
that names the mistake."""

import pytest
import torch
import torch.distributed as dist

from ddp_lab.checks.memory_answer import check_memory_answer
from ddp_lab.checks.zero1 import check_zero1
from ddp_lab.memory import memory_table

PSI, N = 1.5e9, 8


def optimizers():
    """The reader's possible answers, built inside a function so that they are
    shipped to the ranks by value, as a notebook's classes are."""
    reduce_scatter_single = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
    all_gather_single = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor

    class ZeRO1:
        """The reference solution, with switches that make the usual mistakes."""

        def __init__(self, params, lr, average=True, gather=True, shard_state=True, pad=True):
            self.params = list(params)
            self.rank, self.world_size = dist.get_rank(), dist.get_world_size()
            self.numel = sum(p.numel() for p in self.params)
            self.shard_size = -(-self.numel // self.world_size)
            self.average, self.gather, self.pad = average, gather, pad
            flat = self._flatten([p.detach() for p in self.params])
            self.start = self.rank * self.shard_size
            self.shard = flat[self.start:self.start + self.shard_size].clone().requires_grad_()
            # with shard_state=False: Adam over a full copy, as DDP would keep it
            self.full = None if shard_state else flat.clone().requires_grad_()
            self.optimizer = torch.optim.Adam([self.shard if shard_state else self.full], lr=lr)

        def _flatten(self, tensors):
            flat = torch.cat([t.reshape(-1) for t in tensors])
            padding = self.world_size * self.shard_size - self.numel if self.pad else 0
            return torch.cat([flat, flat.new_zeros(padding)])

        @torch.no_grad()
        def step(self):
            gradient = torch.empty(self.shard_size)
            reduce_scatter_single(gradient, self._flatten([p.grad for p in self.params]),
                                  op=dist.ReduceOp.AVG if self.average else dist.ReduceOp.SUM)
            if self.full is None:
                self.shard.grad = gradient
                self.optimizer.step()
                updated = self.shard.detach()
            else:
                self.full.grad = torch.empty(self.world_size * self.shard_size)
                all_gather_single(self.full.grad, gradient)
                self.optimizer.step()
                updated = self.full.detach()[self.start:self.start + self.shard_size].clone()
            flat = self._flatten([p.detach() for p in self.params])
            if self.gather:
                all_gather_single(flat, updated)
            else:
                flat[self.start:self.start + self.shard_size] = updated
            offset = 0
            for p in self.params:
                p.copy_(flat[offset:offset + p.numel()].view_as(p))
                offset += p.numel()

    class Skeleton:
        """The lab's skeleton, unfilled."""

        def __init__(self, params, lr):
            self.params = list(params)

        def step(self):
            pass

    def variant(**switches):
        def make(params, lr):
            return ZeRO1(params, lr, **switches)
        return make

    return {
        "right": ZeRO1,
        "sum": variant(average=False),
        "no_gather": variant(gather=False),
        "full_state": variant(shard_state=False),
        "no_padding": variant(pad=False),
        "skeleton": Skeleton,
    }


Z = optimizers()


def kinds(result):
    return [m.kind for m in result.mistakes]


@pytest.mark.parametrize("world_size", [2, 3])
def test_the_reference_solution_passes(world_size):
    result = check_zero1(Z["right"], world_size=world_size)
    assert result and result.correct == result.total == 7, str(result)
    assert str(result) == f"✓ all 7 checks correct (ZeRO1 vs DDP + Adam: {world_size} ranks, 3 steps)"


def test_summed_gradients_are_named_although_adam_hides_them_in_the_weights():
    result = check_zero1(Z["sum"], world_size=3)
    assert kinds(result) == ["sum"]
    assert result.mistakes[0].where == "steps 1-3, every rank"
    assert "Adam's first moment is W = 3 times DDP's: the gradient shards were summed, not averaged" in str(result)


def test_shards_never_all_gathered_are_named():
    result = check_zero1(Z["no_gather"])
    assert kinds(result) == ["weights"]  # the state that follows from stale weights is not blamed again
    assert "each rank's parameters were right on its own shard only (rank 0: elements 0 to 146)" in str(result)
    assert "all-gather the updated shards" in str(result)


def test_full_optimizer_state_is_named():
    result = check_zero1(Z["full_state"], world_size=3)
    assert kinds(result) == ["full"]
    assert "keeps Adam's state for all 293 parameters, as DDP does" in str(result)
    assert "shard_size = ceil(293 / 3) = 98 elements" in str(result)


def test_missing_padding_is_explained_without_gloo_timestamps():
    result = check_zero1(Z["no_padding"], world_size=3)
    assert kinds(result) == ["error"] and result.correct == 0
    text = str(result)
    assert "your code raised while step 1: your step(): RuntimeError: Check failed" in text
    assert "not a multiple of W = 3: pad it with zeros to W × ceil(293 / 3) = 294 elements" in text
    assert "[F" not in text  # gloo's log prefix, with the time in it, is cut


def test_the_unfilled_skeleton_gets_three_explained_mistakes():
    result = check_zero1(Z["skeleton"])
    assert kinds(result) == ["weights", "no_optimizer", "no_collective"] and result.correct == 0
    assert "the parameters had not changed on any rank" in str(result)


def test_misuse_raises_and_a_wrong_signature_is_reported():
    with pytest.raises(TypeError, match="pass your class itself"):
        check_zero1(3)
    with pytest.raises(ValueError, match="world_size must be 2, 3 or 4"):
        check_zero1(Z["right"], world_size=5)
    result = check_zero1(lambda params: None)
    assert kinds(result) == ["signature"]


# ---------------------------------------------------------------- Exercise 1: memory


def test_the_right_memory_answer_passes():
    answer = {row.stage: row.total for row in memory_table(PSI, N)}
    assert answer == {"DDP": 24e9, "ZeRO-1": 8.25e9, "ZeRO-2": 5.625e9, "ZeRO-3": 3e9}
    assert check_memory_answer(answer, PSI, N)


def test_each_wrong_term_is_named():
    answer = {
        "DDP": 24e9,
        "ZeRO-1": 4 * PSI + 8 * PSI / N,       # master weights forgotten
        "ZeRO-2": 2 * PSI + 2 * PSI + 12 * PSI / N,  # gradients not sharded: 8.25e9
        "ZeRO-3": 2 * PSI + 2 * PSI / N + 12 * PSI / N,  # ZeRO-2's formula: 5.625e9
    }
    result = check_memory_answer(answer, PSI, N)
    assert result.correct == 1 and [m.where for m in result.mistakes] == ["ZeRO-1", "ZeRO-2", "ZeRO-3"]
    text = str(result)
    assert "K = 8 bytes per parameter: mixed precision also keeps an fp32 master copy" in text
    assert "ZeRO-2: 8.25e+09 bytes (8.25 GB): the gradients counted in full, but this stage shards them" in text
    assert "ZeRO-3: 5.625e+09 bytes (5.625 GB): the parameters counted in full, but this stage shards them" in text


def test_units_missing_answers_and_unknown_keys():
    result = check_memory_answer({"DDP": 24, "ZeRO-1": None, "ZeRO-2": "5.6 GB", "ZeRO-3": 3e9, "ZeRO-4": 1})
    assert kinds(result) == ["units", "missing", "not_a_number", "unknown_key"]
    assert "24 looks like a number of GB (10⁹ bytes): give bytes" in str(result)
    with pytest.raises(TypeError, match="answer must be a dict"):
        check_memory_answer([24e9])
