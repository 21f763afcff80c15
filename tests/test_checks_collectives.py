"""Lab 2's checker on real ranks: right answers pass, each usual wrong one is named.

Every wrong implementation below is a mistake readers make; the checker must
return a failing result whose message says what went wrong, never raise.
"""

import pytest
import torch
import torch.distributed as dist

from ddp_lab.checks.collectives import check_all_gather, check_all_reduce, make_case

FAST = dict(world_sizes=(2, 3), cases=2)

# --------------------------------------------------------------- right answers


def all_gather_isend(tensor):
    rank, world_size = dist.get_rank(), dist.get_world_size()
    out = [torch.empty_like(tensor) for _ in range(world_size)]
    out[rank] = tensor.clone()
    sends = [dist.isend(tensor, peer) for peer in range(world_size) if peer != rank]
    for peer in range(world_size):
        if peer != rank:
            dist.recv(out[peer], peer)
    for request in sends:
        request.wait()
    return out


def all_gather_ordered(tensor):
    """Blocking calls only: the lower rank of each pair sends first."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    out = [tensor.clone() if r == rank else torch.empty_like(tensor) for r in range(world_size)]
    for peer in range(world_size):
        if peer < rank:
            dist.recv(out[peer], peer)
            dist.send(tensor, peer)
        elif peer > rank:
            dist.send(tensor, peer)
            dist.recv(out[peer], peer)
    return out


def all_reduce_naive(tensor):
    total = torch.zeros_like(tensor)
    for part in all_gather_isend(tensor):
        total += part
    return total


def test_right_answers_pass():
    result = check_all_gather(all_gather_isend)
    assert result and result.correct == result.total == 9
    assert str(result) == ("✓ all 9 cases correct (all_gather_isend against dist.all_gather on "
                           "world sizes 2, 3 and 4, 3 seeded random inputs each)")
    assert check_all_gather(all_gather_ordered, **FAST)
    assert check_all_reduce(all_reduce_naive, world_sizes=(4,), cases=2)


# --------------------------------------------------------------- wrong answers


def off_by_one_chunk(tensor):
    out = all_gather_isend(tensor)
    return out[1:] + out[:1]  # chunk i holds rank i + 1's tensor


def test_off_by_one_chunk():
    result = check_all_gather(off_by_one_chunk, world_sizes=(3,), cases=1)
    assert not result and result.correct == 0
    first = result.mistakes[0]
    assert first.kind == "off_by_one"
    assert first.where.startswith("W = 3, case 0: shape") and first.where.endswith("rank 0, chunk 0")
    assert "expected rank 0's tensor" in first.message and "it holds rank 1's: off by one" in first.message


def missing_reduction(tensor):
    parts = all_gather_isend(tensor)
    return parts[dist.get_rank()]  # gathered, but never added up


def test_missing_reduction():
    result = check_all_reduce(missing_reduction, **FAST)
    assert not result
    assert {m.kind for m in result.mistakes} <= {"no_reduction", "more"}
    assert "nothing was added (the reduction is missing)" in result.mistakes[0].message


def partial_sum(tensor):
    parts = all_gather_isend(tensor)
    return sum(parts[1:], torch.zeros_like(tensor))  # rank 0's part forgotten


def test_partial_sum_names_the_missing_rank():
    result = check_all_reduce(partial_sum, world_sizes=(3,), cases=1)
    assert result.mistakes[0].kind == "partial_sum"
    assert "the sum of ranks 1 and 2 only: the contributions of rank 0 are missing" in result.mistakes[0].message


def deadlocking_sends(tensor):
    rank, world_size = dist.get_rank(), dist.get_world_size()
    out = [torch.empty_like(tensor) for _ in range(world_size)]
    out[rank] = tensor.clone()
    for peer in range(world_size):
        if peer != rank:
            dist.send(tensor, peer)  # every rank sends first: no one receives
    for peer in range(world_size):
        if peer != rank:
            dist.recv(out[peer], peer)
    return out


def test_deadlocking_send_order():
    result = check_all_gather(deadlocking_sends, world_sizes=(2, 3), timeout=6)
    assert not result
    assert len(result.mistakes) == 1  # it stops after the first hang
    message = result.mistakes[0].message
    assert result.mistakes[0].kind == "deadlock"
    assert message.startswith("deadlock: ranks 0 and 1 both called send first")
    assert "rank 0: waiting in send() (torch.distributed), called from deadlocking_sends()" in message
    assert "stopped after 6 s" in message


def receives_first(tensor):
    rank, world_size = dist.get_rank(), dist.get_world_size()
    out = [torch.empty_like(tensor) for _ in range(world_size)]
    for peer in range(world_size):
        if peer != rank:
            dist.recv(out[peer], peer)
    return out


def test_everyone_receiving_deadlocks_too():
    result = check_all_gather(receives_first, world_sizes=(2,), timeout=6)
    assert result.mistakes[0].message.startswith("deadlock: ranks 0 and 1 both wait in recv")


def modifies_input(tensor):
    for peer, part in enumerate(all_gather_isend(tensor)):
        if peer != dist.get_rank():
            tensor += part  # adds into the caller's tensor
    return tensor


def test_modifies_input():
    result = check_all_reduce(modifies_input, world_sizes=(2,), cases=2)
    assert not result
    assert result.mistakes[0].kind == "modified_input"
    assert "your function changed its input tensor: it was [" in result.mistakes[0].message
    assert "tensor.clone()" in result.mistakes[0].message


def uses_the_builtin(tensor):
    out = tensor.clone()
    dist.all_reduce(out)
    return out


def test_a_builtin_collective_is_refused():
    result = check_all_reduce(uses_the_builtin, world_sizes=(2,), cases=1)
    assert result.mistakes[0].kind == "used_collective"
    assert "raised in uses_the_builtin() line " in result.mistakes[0].message
    assert ": dist.all_reduce(out): RuntimeError" in result.mistakes[0].message
    assert "use send/recv only: dist.all_reduce is switched off in this lab" in result.mistakes[0].message


def raises(tensor):
    return all_gather_isend(tensor)[dist.get_world_size()]


def test_an_exception_shows_its_last_line_and_the_line_that_raised():
    result = check_all_reduce(raises, world_sizes=(2,), cases=1)
    message = result.mistakes[0].message
    assert result.mistakes[0].kind == "exception"
    assert message.startswith("your function raised in raises() line ")
    assert message.endswith(": return all_gather_isend(tensor)[dist.get_world_size()]: "
                            "IndexError: list index out of range")


def forgets_itself(tensor):
    return [t for r, t in enumerate(all_gather_isend(tensor)) if r != dist.get_rank()]


def test_wrong_length_and_wrong_return_types():
    result = check_all_gather(forgets_itself, world_sizes=(3,), cases=1)
    assert result.mistakes[0].kind == "wrong_length"
    assert "a list of 2 tensors; with 3 ranks it needs 3, one per rank (its own included)" in result.mistakes[0].message
    stacked = check_all_gather(lambda t: torch.stack(all_gather_isend(t)), world_sizes=(2,), cases=1)
    assert stacked.mistakes[0].kind == "not_a_list" and "return list(...)" in stacked.mistakes[0].message
    in_place = check_all_reduce(lambda t: None, world_sizes=(2,), cases=1)
    assert "did it change the tensor in place and return nothing?" in in_place.mistakes[0].message


def test_mean_instead_of_sum():
    def mean(tensor):
        return all_reduce_naive(tensor.double()).to(tensor.dtype) / dist.get_world_size() \
            if tensor.is_floating_point() else all_reduce_naive(tensor)

    result = check_all_reduce(mean, world_sizes=(2,), cases=3)
    assert any(m.kind == "mean" and "this lab asks for the sum" in m.message for m in result.mistakes)


# --------------------------------------------------------------- misuse


def test_misuse_raises():
    with pytest.raises(TypeError, match="pass your function itself"):
        check_all_gather("my_all_gather")
    with pytest.raises(ValueError, match="world sizes must be whole numbers from 2 to 8, got 1"):
        check_all_reduce(all_reduce_naive, world_sizes=(1, 2))
    with pytest.raises(ValueError, match="cases must be a positive int"):
        check_all_reduce(all_reduce_naive, cases=0)


def not_written_yet(tensor):
    raise NotImplementedError


def test_a_stub_is_reported_once_as_not_written():
    result = check_all_reduce(not_written_yet, world_sizes=(2, 3), cases=1)
    assert [(m.where, m.kind) for m in result.mistakes] == [("not_written_yet", "not_implemented")]
    assert str(result) == ("✗ 0 of 2 cases correct (not_written_yet against dist.all_reduce on world "
                           "sizes 2 and 3, 1 seeded random input each)\n  • not_written_yet: not "
                           "written yet: replace the `raise NotImplementedError` with your code")


def test_wrong_signature_is_a_mistake_not_an_error():
    result = check_all_gather(lambda tensor, world_size: None)
    assert result.mistakes[0].kind == "signature"
    assert "def my_all_gather(tensor)" in result.mistakes[0].message


def test_cases_are_seeded_and_varied():
    cases = [make_case(w, i, 0) for w in (2, 3, 4) for i in range(3)]
    assert cases == [make_case(w, i, 0) for w in (2, 3, 4) for i in range(3)]
    assert len({c.dtype for c in cases}) > 1 and len({c.shape for c in cases}) > 1


# ------------------------------------------------ Exercise 4: an expert dispatch with all_to_all_single


def dispatch(tokens, destinations):
    world_size = dist.get_world_size()
    counts = torch.bincount(destinations, minlength=world_size)
    received = torch.empty_like(counts)
    dist.all_to_all_single(received, counts)
    out = tokens.new_empty(int(received.sum()))
    dist.all_to_all_single(out, tokens, output_split_sizes=received.tolist(), input_split_sizes=counts.tolist())
    return out


def dispatch_swapped(tokens, destinations):
    world_size = dist.get_world_size()
    counts = torch.bincount(destinations, minlength=world_size)
    received = torch.empty_like(counts)
    dist.all_to_all_single(received, counts)
    out = tokens.new_empty(int(received.sum()))
    dist.all_to_all_single(out, tokens, counts.tolist(), received.tolist())
    return out


def dispatch_without_counts(tokens, destinations):
    counts = torch.bincount(destinations, minlength=dist.get_world_size()).tolist()
    out = tokens.new_empty(sum(counts))
    dist.all_to_all_single(out, tokens, output_split_sizes=counts, input_split_sizes=counts)
    return out


def test_an_expert_dispatch_passes_and_each_slip_is_named():
    from ddp_lab.checks.collectives import check_all_to_all

    assert check_all_to_all(dispatch, world_sizes=(2, 3, 4))
    for slip, kind, words in ((dispatch_swapped, "swapped_splits", "are swapped"),
                              (dispatch_without_counts, "no_count_exchange", "Exchange the counts first")):
        result = check_all_to_all(slip, world_sizes=(3,))
        assert not result and [m.kind for m in result.mistakes] == [kind]
        assert words in result.mistakes[0].message and "line" in result.mistakes[0].message
