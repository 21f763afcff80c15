"""Lab 3's checker on right and wrong ring all-reduces, on real ranks."""

import torch
import torch.distributed as dist

from ddp_lab.checks.ring import check_ring_all_reduce, textbook_sends
from ddp_lab.collectives.ring import ring_all_reduce


def textbook_ring(tensor, *, forget_to_add=False, chunk_shift=0):
    world_size, rank = dist.get_world_size(), dist.get_rank()
    chunks = list(tensor.tensor_split(world_size))
    right, left = (rank + 1) % world_size, (rank - 1) % world_size
    for step in range(2 * (world_size - 1)):
        send, receive = (rank - step + chunk_shift) % world_size, (rank - step - 1) % world_size
        incoming = torch.empty_like(chunks[receive])
        request = dist.isend(chunks[send], right)
        dist.recv(incoming, left)
        request.wait()
        if step < world_size - 1 and not forget_to_add:
            chunks[receive] += incoming
        else:
            chunks[receive].copy_(incoming)


def test_a_correct_ring_passes():
    result = check_ring_all_reduce(textbook_ring)
    assert result and str(result).startswith("✓ all 9 runs correct")
    assert check_ring_all_reduce(lambda t: ring_all_reduce(t))


def test_forgetting_the_addition_is_pointed_at_the_first_wrong_step():
    result = check_ring_all_reduce(lambda t: textbook_ring(t, forget_to_add=True), world_sizes=(3,))
    assert not result
    message = result.mistakes[0].message
    assert "at step 1 (reduce-scatter) rank 0 sent" in message
    assert "passed the chunk on without adding its own values" in message


def test_a_wrong_chunk_index_is_named():
    result = check_ring_all_reduce(lambda t: textbook_ring(t, chunk_shift=1), world_sizes=(4,))
    assert not result
    assert "at step 0 (reduce-scatter) rank 0 sent" in result.mistakes[0].message
    assert "check the chunk index" in result.mistakes[0].message


def test_built_in_collectives_are_off():
    result = check_ring_all_reduce(lambda t: dist.all_reduce(t))
    assert "dist.all_reduce is off in this lab" in result.mistakes[0].message


def test_a_deadlock_is_explained():
    def receive_first(tensor):
        rank, world_size = dist.get_rank(), dist.get_world_size()
        dist.recv(torch.empty_like(tensor), (rank - 1) % world_size)

    result = check_ring_all_reduce(receive_first, timeout=2)
    assert result.mistakes[0].kind == "deadlock"
    assert "every rank is waiting in recv()" in result.mistakes[0].message


def test_sending_everything_to_everyone_is_right_but_not_a_ring():
    def all_to_all(tensor):
        rank, world_size = dist.get_rank(), dist.get_world_size()
        total = tensor.clone()
        for other in range(world_size):
            if other != rank:
                incoming = torch.empty_like(tensor)
                request = dist.isend(tensor, other)
                dist.recv(incoming, other)
                request.wait()
                total += incoming
        tensor.copy_(total)

    result = check_ring_all_reduce(all_to_all, world_sizes=(3,))
    assert result.mistakes[0].kind == "not_a_ring"
    assert "only sends to its right neighbour" in result.mistakes[0].message


def test_a_wrong_signature_is_reported_once():
    result = check_ring_all_reduce(lambda: None)
    assert len(result.mistakes) == 1 and result.mistakes[0].kind == "signature"


def test_textbook_schedule_of_two_ranks():
    sends = textbook_sends([torch.tensor([1.0, 2.0]), torch.tensor([10.0, 20.0])])
    assert [(c, v.tolist()) for c, v in sends[0]] == [(0, [1.0]), (1, [22.0])]
    assert [(c, v.tolist()) for c, v in sends[1]] == [(1, [20.0]), (0, [11.0])]
