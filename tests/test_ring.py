"""The book's ring all-reduce against torch's, on real gloo ranks."""

import math
import time

import pytest
import torch
import torch.distributed as dist

import ddp_lab
from ddp_lab.collectives.all_to_all import pairwise_all_to_all
from ddp_lab.collectives.naive import naive_all_reduce
from ddp_lab.collectives.ring import ring_all_reduce
from ddp_lab.collectives.step_trace import Trace
from ddp_lab.collectives.textbook_ring import textbook_ring_all_reduce
from ddp_lab.collectives.traced import run_traced_all_reduce, run_traced_collective

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]


def compare_with_torch(algorithm, cases, seed):
    """Inside a rank: run every case with ``algorithm`` and with dist.all_reduce."""
    generator = torch.Generator().manual_seed(seed)  # same shapes on every rank
    rank_values = torch.Generator().manual_seed(seed + 1000 * (dist.get_rank() + 1))
    mismatches = []
    for case in range(cases):
        shape = [int(torch.randint(0, 7, (1,), generator=generator)) for _ in range(
            int(torch.randint(0, 4, (1,), generator=generator)))]
        if case % 5 == 0:
            shape = [int(torch.randint(0, 300_000, (1,), generator=generator))]
        dtype = DTYPES[int(torch.randint(0, len(DTYPES), (1,), generator=generator))]
        op = "avg" if case % 3 == 0 else "sum"
        transpose = len(shape) >= 2 and case % 2 == 0
        x = torch.randn(shape, generator=rank_values).to(dtype)
        if transpose:
            x = x.transpose(0, 1)  # not contiguous
        expected = x.double()
        dist.all_reduce(expected)
        if op == "avg":
            expected /= dist.get_world_size()
        result = algorithm(x, op)
        tolerance = 1e-5 if dtype in (torch.float32, torch.float64) else 5e-2
        if result is not x or x.shape != expected.shape or not torch.allclose(
                x.double(), expected, rtol=tolerance, atol=tolerance):
            mismatches.append((tuple(shape), str(dtype), op, transpose))
    return mismatches


ALGORITHMS = [ring_all_reduce, textbook_ring_all_reduce, naive_all_reduce]


def compare_each_with_torch(cases, seed):
    """Inside a rank: ``compare_with_torch`` for each of the book's all-reduces, by name."""
    return {algorithm.__name__: compare_with_torch(algorithm, cases, seed) for algorithm in ALGORITHMS}


@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_matches_torch_all_reduce_on_random_tensors(world_size):
    """The three all-reduces in one launch per world size: a launch costs more than the cases."""
    results = ddp_lab.launch(compare_each_with_torch, world_size, args=(40, world_size), backend="gloo")
    assert results == [{algorithm.__name__: [] for algorithm in ALGORITHMS}] * world_size


def test_small_pieces_pipeline_correctly():
    def work():
        x = torch.arange(10_000, dtype=torch.float32) * (dist.get_rank() + 1)
        ring_all_reduce(x, piece_bytes=64)  # many pieces per chunk
        return torch.equal(x, torch.arange(10_000, dtype=torch.float32) * 10)

    assert ddp_lab.launch(work, 4, backend="gloo") == [True] * 4


def test_bad_arguments_are_refused():
    def work(tensor, op):
        ring_all_reduce(tensor, op)

    with pytest.raises(ddp_lab.RankFailed, match="floating-point tensor, got dtype torch.int64"):
        ddp_lab.launch(work, 2, args=(torch.ones(3, dtype=torch.long), "sum"), backend="gloo")
    with pytest.raises(ddp_lab.RankFailed, match="unknown op 'max'"):
        ddp_lab.launch(work, 2, args=(torch.ones(3), "max"), backend="gloo")


def test_ring_trace_follows_the_textbook_schedule():
    run = run_traced_all_reduce("ring", world_size=4, length=8)
    assert run.correct
    for trace in run.traces:
        r = trace.rank
        assert [s.phase for s in trace.steps] == ["reduce-scatter"] * 3 + ["all-gather"] * 3
        assert [s.sends for s in trace.steps] == [[((r + 1) % 4, (r - s) % 4)] for s in range(6)]
        assert [s.receives for s in trace.steps] == [[((r - 1) % 4, (r - s - 1) % 4)] for s in range(6)]
        # after reduce-scatter, rank r owns the full sum of chunk r+1
        owned = (r + 1) % 4
        assert trace.steps[2].contributions[owned] == 4
        assert torch.equal(trace.steps[2].chunks[owned], run.expected[r].tensor_split(4)[owned])
        assert all(torch.equal(c, e) for c, e in zip(trace.steps[-1].chunks, run.expected[r].tensor_split(4)))
        assert trace.bytes_sent == 2 * 3 * 2 * 4  # 2(W-1) chunks of 2 float32


def test_naive_trace_puts_all_the_traffic_on_rank_0():
    run = run_traced_all_reduce("naive", world_size=4, length=8)
    assert run.correct
    assert [t.bytes_sent for t in run.traces] == [3 * 32, 32, 32, 32]
    assert len(run.traces[0].steps) == 6


def test_tracing_keeps_only_a_preview_of_big_chunks():
    def work():
        trace = Trace(max_values=3)
        ring_all_reduce(torch.ones(1000), trace=trace)
        return [c.numel() for c in trace.steps[-1].chunks], trace.chunk_sizes

    previews, sizes = ddp_lab.launch(work, 2, backend="gloo")[0]
    assert previews == [3, 3] and sizes == [500, 500]


class SlowOnRank1(Trace):
    """A trace that makes rank 1 fall behind its neighbours at every step."""

    def record(self, *args, **kwargs):
        if dist.get_rank() == 1:
            time.sleep(0.05)
        super().record(*args, **kwargs)


def snapshots_that_disagree_with_their_contributions():
    world_size, rank = dist.get_world_size(), dist.get_rank()
    inputs = [torch.arange(8.0) * 10 ** j for j in range(world_size)]  # every rank's input
    trace = SlowOnRank1()
    ring_all_reduce(inputs[rank].clone(), trace=trace)
    wrong = []
    for step, snapshot in enumerate(trace.steps):
        for chunk, (values, count) in enumerate(zip(snapshot.chunks, snapshot.contributions)):
            # a partial sum holds the inputs of this rank and the `count - 1` ranks to its left
            expected = sum(inputs[(rank - j) % world_size].tensor_split(world_size)[chunk]
                           for j in range(count))
            if not torch.equal(values, expected[: values.numel()]):
                wrong.append((step, chunk))
    return wrong


def test_a_lagging_rank_never_records_data_before_the_step_that_brings_it():
    assert ddp_lab.launch(snapshots_that_disagree_with_their_contributions, 4,
                          backend="gloo") == [[]] * 4


def pairwise_against_torch():
    """Inside a rank: even and uneven splits (zeros included), 1-d and 2-d, against dist.all_to_all_single."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    counts = [[(3 * r + 2 * j) % 4 for j in range(world_size)] for r in range(world_size)]
    send, receive = counts[rank], [row[rank] for row in counts]
    agree = []
    for rows_shape in ((), (3,)):
        x = torch.arange(float(sum(send) * math.prod(rows_shape))).view(sum(send), *rows_shape) + 100 * rank
        expected, got = x.new_empty(sum(receive), *rows_shape), x.new_empty(sum(receive), *rows_shape)
        dist.all_to_all_single(expected, x, receive, send)
        returned = pairwise_all_to_all(got, x, receive, send)
        agree.append(returned is got and torch.equal(got, expected))
    even = torch.arange(2.0 * world_size) + 10 * rank
    expected, got = torch.empty_like(even), torch.empty_like(even)
    dist.all_to_all_single(expected, even)
    pairwise_all_to_all(got, even)
    return agree + [torch.equal(got, expected)]


@pytest.mark.parametrize("world_size", [1, 3, 4])
def test_pairwise_all_to_all_matches_torch(world_size):
    assert ddp_lab.launch(pairwise_against_torch, world_size, backend="gloo") == [[True] * 3] * world_size


def test_pairwise_trace_meets_every_other_rank_once():
    run = run_traced_collective("pairwise", world_size=4, length=8)
    assert run.correct and run.collective == "all_to_all"
    for trace in run.traces:
        r = trace.rank
        assert [s.sends for s in trace.steps] == [[((r + s) % 4, (r + s) % 4)] for s in (1, 2, 3)]
        assert [s.receives for s in trace.steps] == [[((r - s) % 4, (r - s) % 4)] for s in (1, 2, 3)]
        # cell j ends holding rank j's chunk j... for this rank: a transpose
        assert all(torch.equal(c, run.inputs[j].tensor_split(4)[r]) for j, c in enumerate(trace.steps[-1].chunks))
        assert trace.bytes_sent == 3 * 2 * 4  # W-1 chunks of 2 float32


def test_a_traced_collective_is_named_from_the_table():
    with pytest.raises(ValueError, match="algorithm must be one of 'ring', 'naive', 'pairwise'; got 'tree'"):
        run_traced_collective("tree")
    with pytest.raises(ValueError, match="algorithm must be one of 'ring', 'naive'; got 'pairwise'"):
        run_traced_all_reduce("pairwise")
