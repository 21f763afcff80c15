"""Lab 4's checker on real gloo ranks: right wrappers pass; each usual wrong
one fails with a message that names the mistake."""

import pytest
import torch
import torch.distributed as dist
from torch import nn

from ddp_lab.checks.ddp import _order_case, check_ddp


def wrappers():
    """The reader's possible answers, built inside a function so that they are
    shipped to the ranks by value, as a notebook's classes are."""

    class NaiveDDP(nn.Module):
        def __init__(self, module, broadcast=True, divide=True):
            super().__init__()
            self.module = module
            if broadcast:
                for p in module.parameters():
                    dist.broadcast(p.data, src=0)
            for p in module.parameters():
                p.register_post_accumulate_grad_hook(self._all_reduce)
            self.divide = divide

        def _all_reduce(self, p):
            dist.all_reduce(p.grad)
            if self.divide:
                p.grad /= dist.get_world_size()

        def forward(self, x):
            return self.module(x)

    class BucketedDDP(nn.Module):
        """Launches bucket i only after buckets 0 to i-1, as torch's DDP does; with
        completion_order=True, each bucket the moment it is complete."""

        def __init__(self, module, bucket_cap_mb=25, too_early=False, keep_state=False, completion_order=False):
            super().__init__()
            self.module, self.too_early, self.keep_state = module, too_early, keep_state
            self.completion_order = completion_order
            for p in module.parameters():
                dist.broadcast(p.data, src=0)
            self.buckets, bucket, size = [], [], 0
            for p in reversed(list(module.parameters())):  # gradients arrive last layer first
                bucket.append(p)
                size += p.numel() * p.element_size()
                if size >= bucket_cap_mb * 2**20:
                    self.buckets.append(bucket)
                    bucket, size = [], 0
            if bucket:
                self.buckets.append(bucket)
            self.bucket_of = {p: i for i, b in enumerate(self.buckets) for p in b}
            self.ready = [0] * len(self.buckets)
            self.pending, self.next_bucket = [], 0
            for p in module.parameters():
                p.register_post_accumulate_grad_hook(self._on_gradient)

        def _complete(self, i):
            return self.ready[i] >= (1 if self.too_early else len(self.buckets[i]))

        def _launch(self, i):
            grads = [q.grad if q.grad is not None else torch.zeros_like(q) for q in self.buckets[i]]
            flat = torch.cat([g.reshape(-1) for g in grads])
            self.pending.append((dist.all_reduce(flat, async_op=True), flat, self.buckets[i]))

        def _on_gradient(self, p):
            i = self.bucket_of[p]
            self.ready[i] += 1
            if self.completion_order:
                if self.ready[i] == (1 if self.too_early else len(self.buckets[i])):
                    self._launch(i)
                return
            while self.next_bucket < len(self.buckets) and self._complete(self.next_bucket):
                self._launch(self.next_bucket)
                self.next_bucket += 1

        def finish_gradient_synchronization(self):
            for handle, flat, params in self.pending:
                handle.wait()
                flat /= dist.get_world_size()
                offset = 0
                for q in params:
                    q.grad = flat[offset:offset + q.numel()].view_as(q).clone()
                    offset += q.numel()
            if not self.keep_state:
                self.pending, self.ready, self.next_bucket = [], [0] * len(self.buckets), 0

        def forward(self, x):
            return self.module(x)

    class SilentDDP(nn.Module):
        """Broadcasts, registers no hook: never synchronises."""

        def __init__(self, module):
            super().__init__()
            self.module = module
            for p in module.parameters():
                dist.broadcast(p.data, src=0)

        def forward(self, x):
            return self.module(x)

    class AfterBackwardDDP(NaiveDDP):
        """Right gradients, but all-reduced after backward, in one flat tensor."""

        def __init__(self, module, bucket_cap_mb=25):
            nn.Module.__init__(self)
            self.module = module
            for p in module.parameters():
                dist.broadcast(p.data, src=0)

        def finish_gradient_synchronization(self):
            grads = [p.grad for p in self.module.parameters()]
            flat = torch.cat([g.reshape(-1) for g in grads])
            dist.all_reduce(flat)
            flat /= dist.get_world_size()
            offset = 0
            for g in grads:
                g.copy_(flat[offset:offset + g.numel()].view_as(g))
                offset += g.numel()

    class Crashes(NaiveDDP):
        def forward(self, x):
            raise ValueError("forward is not written yet")

    return {
        "naive": NaiveDDP,
        "bucketed": BucketedDDP,
        "sum": lambda m: NaiveDDP(m, divide=False),
        "no_broadcast": lambda m: NaiveDDP(m, broadcast=False),
        "silent": SilentDDP,
        "too_early": lambda m, bucket_cap_mb: BucketedDDP(m, bucket_cap_mb, too_early=True),
        "keeps_state": lambda m, bucket_cap_mb: BucketedDDP(m, bucket_cap_mb, keep_state=True),
        "completion_order": lambda m, bucket_cap_mb: BucketedDDP(m, bucket_cap_mb, completion_order=True),
        "naive_as_bucketed": lambda m, bucket_cap_mb: NaiveDDP(m),
        "after_backward": AfterBackwardDDP,
        "crashes": Crashes,
    }


W = wrappers()
CAP = 0.01  # MB: 3 buckets for the checker's MLP under torch's rule


def kinds(result):
    return [m.kind for m in result.mistakes]


def test_right_naive_and_bucketed_versions_pass():
    naive = check_ddp(W["naive"])
    assert naive and naive.correct == naive.total == 8
    assert str(naive).startswith("✓ all 8 checks correct (NaiveDDP (naive) vs torch DDP: 2 ranks, 3 SGD steps)")
    bucketed = check_ddp(W["bucketed"], bucket_cap_mb=CAP)
    assert bucketed, str(bucketed)
    assert bucketed.correct == bucketed.total == 9  # the 9th: the rank-dependent order of TwoBranches


def test_launching_buckets_in_completion_order_fails_when_ranks_differ_in_order():
    # On the checker's MLP the order is the same on every rank, so this wrapper
    # passes everything else; on TwoBranches, rank 1 completes the buckets
    # [right] and [left] in the other order, and its all-reduces meet the wrong ones.
    result = check_ddp(W["completion_order"], bucket_cap_mb=CAP)
    assert not result and kinds(result) == ["order"]
    assert result.correct == result.total - 1 == 8
    text = str(result)
    assert "rank-dependent order: on a model whose gradients become ready in a different order" in text
    assert "the gradients of " in text and "came out wrong" in text
    assert "head, right, left on even ranks and head, left, right on odd ranks" in text  # measured on the ranks
    assert "DDP launches bucket i only once buckets 0 to i-1 have been launched" in text


def test_completion_order_with_buckets_of_unequal_sizes_is_explained_too():
    # With twice the cap, TwoBranches makes the buckets [head, right] and [left]: the
    # crossed all-reduces then differ in size, and gloo aborts the rank that receives
    # more bytes than it expects. The order case alone, as check_ddp runs it.
    wrapper = W["completion_order"]
    mistake = _order_case(lambda m, bucket_cap_mb: wrapper(m, 2 * bucket_cap_mb), 2, 1, 60)
    assert mistake is not None and mistake.kind == "order"
    assert "a rank died (rank " in mistake.message and "SIGABRT" in mistake.message
    assert "DDP launches bucket i only once buckets 0 to i-1 have been launched" in mistake.message
    in_order = W["bucketed"]
    assert _order_case(lambda m, bucket_cap_mb: in_order(m, 2 * bucket_cap_mb), 2, 1, 60) is None


def test_sum_instead_of_mean_is_named():
    result = check_ddp(W["sum"])
    assert not result and kinds(result) == ["gradients"]
    assert result.mistakes[0].where == "steps 1-3"
    assert "summed but not averaged: they are W = 2 times torch's" in str(result)


def test_missing_broadcast_is_named_and_the_rest_still_checked():
    result = check_ddp(W["no_broadcast"])
    assert kinds(result) == ["no_broadcast"]
    assert "parameters not broadcast from rank 0 at start" in str(result)
    assert "still differ from rank 0's on rank 1" in str(result)
    assert result.correct == result.total - 1


def test_missing_broadcast_says_how_far_apart_the_replicas_are():
    # Without the broadcast, rank 1 keeps the MLP it built from its own seed
    # (the checker's: 100 + rank): the message gives the largest difference of
    # one weight from rank 0's, a subtraction and a maximum, the same everywhere.
    from ddp_lab.checks.ddp import WIDTHS
    from ddp_lab.models import mlp

    rank_0, rank_1 = mlp(WIDTHS, seed=100), mlp(WIDTHS, seed=101)
    largest = max(float((p.detach() - q.detach()).abs().max()) for p, q in zip(rank_0.parameters(), rank_1.parameters()))
    assert largest > 0.1  # the replicas are far apart: nothing below is a rounding
    result = check_ddp(W["no_broadcast"], steps=1)
    assert kinds(result) == ["no_broadcast"]
    assert (f"still differ from rank 0's on rank 1, by up to {largest:.2g} (the largest difference of one "
            f"weight between the replicas)") in str(result)


def test_no_synchronisation_is_named():
    result = check_ddp(W["silent"])
    assert kinds(result) == ["gradients", "no_all_reduce"]
    assert "gradients not synchronised at all" in str(result)


def test_bucket_reduced_before_its_gradients_were_ready_is_named():
    result = check_ddp(W["too_early"], bucket_cap_mb=CAP)
    assert "gradients" in kinds(result)
    assert "some gradients right, others not (zero: " in str(result)
    assert "bucket all-reduced before all its gradients were ready" in str(result)


def test_state_left_over_between_steps_is_named():
    result = check_ddp(W["keeps_state"], bucket_cap_mb=CAP)
    assert "step 1 was right but later steps were not" in str(result)
    assert "Is state left over from the previous step?" in str(result)
    assert result.mistakes[0].where == "steps 2-3"


def test_naive_counts_are_not_buckets_and_after_backward_is_not_overlap():
    result = check_ddp(W["naive_as_bucketed"], bucket_cap_mb=CAP)
    assert kinds(result) == ["not_bucketed"]
    assert "8 all-reduces per step for 8 parameter tensors: that is one per parameter" in str(result)
    assert "torch's rule would give 3" in str(result)
    late = check_ddp(W["after_backward"], bucket_cap_mb=1)
    assert kinds(late) == ["after_backward"]
    assert "every all-reduce ran after the backward pass" in str(late)


def test_an_exception_in_the_reader_code_is_reported_not_raised():
    result = check_ddp(W["crashes"])
    assert kinds(result) == ["error"] and result.correct == 0
    assert "every rank: your code raised while step 1: forward through your wrapper: " \
           "ValueError: forward is not written yet" in str(result)


@pytest.mark.parametrize("kwargs, error, message", [
    ({"make_ddp": 3}, TypeError, "make_ddp must be a class or function"),
    ({"make_ddp": W["naive"], "world_size": 1}, ValueError, "world_size must be 2, 3 or 4"),
    ({"make_ddp": W["naive"], "steps": 0}, ValueError, "steps must be a positive int"),
    ({"make_ddp": W["naive"], "bucket_cap_mb": -1}, ValueError, "bucket_cap_mb must be a number"),
])
def test_misuse_raises(kwargs, error, message):
    with pytest.raises(error, match=message):
        check_ddp(**kwargs)
