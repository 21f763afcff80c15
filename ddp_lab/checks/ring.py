"""Lab 3's checker: is the reader's ring all-reduce a correct ring?

The reader writes ``my_ring_all_reduce(tensor)``, called on every rank, that
sums ``tensor`` over all ranks in place using only point-to-point messages.
``check_ring_all_reduce`` runs it on real ranks (world sizes 2 to 4, sizes
that W divides and sizes it does not) and compares:

1. the result, with the sum of the inputs;
2. every message each rank sent, with the textbook schedule: at step s, rank
   r sends chunk (r - s) mod W to rank r + 1, carrying the running sum during
   reduce-scatter and the finished sum during all-gather. The first message
   that differs is named, with a hint at the usual cause.

Inside the ranks, sends are recorded on their way out and collectives are
switched off (the exercise is to build one from sends and receives), so a
call to ``dist.all_reduce`` fails with a message that says so.
"""

from __future__ import annotations

import torch

from ddp_lab.checks.harness import (
    YourCodeExited,
    exit_mistake,
    launch_checked,
    point_to_point_only,
    same_values,
    show_values,
    still_computing,
)
from ddp_lab.checks.result import CheckResult, Mistake, signature_mistake
from ddp_lab.launcher import serialize
from ddp_lab.launcher.errors import RankDied, RankFailed, RanksTimedOut


def check_ring_all_reduce(fn, *, world_sizes=(2, 3, 4), seed=0, timeout=15):
    """Run ``fn`` on real ranks and explain what, if anything, is wrong."""
    mistake = signature_mistake(fn, 1, "my_ring_all_reduce(tensor)")
    if mistake:
        return CheckResult("ring all-reduce", 0, 1, "run", (mistake,))
    mistakes, runs = [], 0
    for world_size in world_sizes:
        for length in case_lengths(world_size):
            runs += 1
            found = _check_one(fn, world_size, length, seed, timeout)
            if found:
                mistakes.append(found)
                break  # one explained mistake per world size is enough
        if mistakes and mistakes[-1].kind in ("deadlock", "too_slow", "exception", "died", "exit"):
            break  # it would fail the same way at every size
    return CheckResult("ring all-reduce against torch's", runs - len(mistakes), runs, "run",
                       tuple(mistakes))


def case_lengths(world_size):
    """Sizes W divides, sizes it does not, and fewer elements than ranks."""
    return [2 * world_size, 3 * world_size + 1, 1]


def make_input(rank, length, seed):
    """Small whole numbers, so sums are exact and messages readable."""
    generator = torch.Generator().manual_seed(seed * 1000 + rank)
    return torch.randint(0, 10, (length,), generator=generator).float()


def textbook_sends(inputs):
    """What each rank of a textbook ring sends: ``{rank: [(chunk, values), ...]}``."""
    world_size = len(inputs)
    chunks = [[c.clone() for c in x.double().tensor_split(world_size)] for x in inputs]
    sends = {rank: [] for rank in range(world_size)}
    for step in range(2 * (world_size - 1)):
        outgoing = [(r, (r - step) % world_size) for r in range(world_size)]
        messages = [(r, c, chunks[r][c].clone()) for r, c in outgoing]
        for rank, chunk, values in messages:
            sends[rank].append((chunk, values))
            right = (rank + 1) % world_size
            if step < world_size - 1:
                chunks[right][chunk] += values
            else:
                chunks[right][chunk] = values
    return sends


def _check_one(fn, world_size, length, seed, timeout):
    where = f"W = {world_size}, {length} elements"
    reports, error = launch_checked(_run_on_rank, world_size, args=(serialize.dumps(fn), length, seed),
                                    timeout=timeout)
    if isinstance(error, YourCodeExited):
        return exit_mistake(where, error)
    if isinstance(error, RanksTimedOut):
        slow = still_computing(where, error, timeout)
        if slow is not None:
            return slow
        places = sorted(set(error.unfinished.values()))
        stuck = "; ".join(places) if len(places) > 1 else f"every rank is {places[0]}"
        return Mistake(where, "deadlock", (
            f"the ranks never finished: {stuck}. Each rank is blocked waiting for a neighbour "
            "that is blocked too: order blocking calls so that one side receives while the "
            "other sends (even ranks send first, odd ranks receive first), or use isend/irecv."))
    if isinstance(error, RankFailed):
        last = error.remote_traceback.strip().splitlines()[-1]
        return Mistake(where, "exception", f"rank {error.rank} raised {last}")
    if isinstance(error, RankDied):
        return Mistake(where, "died", str(error))
    inputs = [make_input(rank, length, seed) for rank in range(world_size)]
    return _compare(where, inputs, reports)


def _compare(where, inputs, reports):
    expected = sum(x.double() for x in inputs)
    wrong = [r for r, (result, _) in enumerate(reports) if not same_values(result, expected)]
    schedule = _schedule_mistake(inputs, [sends for _, sends in reports])
    if wrong:
        rank = wrong[0]
        message = (f"rank {rank} ended with {show_values(reports[rank][0], digits=6)}, "
                   f"but the sum of the inputs is {show_values(expected, digits=6)}")
        if schedule:
            message += f". The first message that went wrong: {schedule}"
        return Mistake(where, "wrong_result", message)
    if schedule:
        return Mistake(where, "not_a_ring", f"the result is right, but this is not a ring: {schedule}")
    return None


def _schedule_mistake(inputs, sent):
    """Compare every rank's sends with the textbook ring; describe the first difference."""
    world_size = len(inputs)
    expected = textbook_sends(inputs)
    steps = 2 * (world_size - 1)
    for rank, messages in enumerate(sent):
        peers = {peer for peer, _ in messages}
        right = (rank + 1) % world_size
        if peers - {right}:
            others = ", ".join(str(p) for p in sorted(peers - {right}))
            return (f"rank {rank} sent to rank(s) {others}; in a ring each rank only sends to "
                    f"its right neighbour, rank {right}")
        if len(messages) != steps:
            return (f"rank {rank} sent {len(messages)} messages; a ring of {world_size} sends "
                    f"2(W-1) = {steps}, one chunk per step")
    for step in range(steps):
        for rank in range(world_size):
            chunk, values = expected[rank][step]
            got = sent[rank][step][1]
            if same_values(got, values):
                continue
            return _describe_wrong_message(rank, step, chunk, values, sent, inputs)
    return None


def _describe_wrong_message(rank, step, chunk, values, sent, inputs):
    world_size = len(inputs)
    phase = "reduce-scatter" if step < world_size - 1 else "all-gather"
    got = sent[rank][step][1]
    head = (f"at step {step} ({phase}) rank {rank} sent {show_values(got, digits=6)}; it should send chunk "
            f"{chunk} = (r - s) mod W, holding {show_values(values, digits=6)}")
    return head + _hint(rank, step, chunk, got, values, sent, inputs)


def _hint(rank, step, chunk, got, values, sent, inputs):
    """The usual cause of a wrong message, when it can be recognised."""
    world_size = len(inputs)
    own = inputs[rank].double().tensor_split(world_size)
    left = (rank - 1) % world_size
    if got.numel() != values.numel():
        return (f". The sizes differ ({got.numel()} vs {values.numel()} values): "
                "check how the tensor is cut into W chunks")
    if step > 0 and same_values(got, sent[left][step - 1][1]) and step < world_size:
        return (f". That is exactly what rank {left} sent it: it passed the chunk on "
                "without adding its own values to it")
    if step > 0 and same_values(got, own[chunk]):
        return ". That is the rank's own input: add what arrives before passing it on"
    for other in range(world_size):
        if other != chunk and same_values(got, own[other]):
            return f". That is its input's chunk {other}: check the chunk index (r - s) mod W"
    return ""


def _run_on_rank(fn_bytes, length, seed):
    """Inside a rank: run the reader's function, recording every send."""
    import torch.distributed as dist

    tensor = make_input(dist.get_rank(), length, seed)
    with point_to_point_only(_refusal, record_sends=True) as sends:
        fn = serialize.loads(fn_bytes)  # after patching: `from dist import send` sees ours
        fn(tensor)
    return tensor, sends


def _refusal(name):
    """What a switched-off collective says in Lab 3."""
    return f"dist.{name} is off in this lab: build the all-reduce from send/recv (or isend/irecv) only"
