"""A reader's answer that returns something odd is graded as a mistake naming it, never raised on."""

import torch

from ddp_lab.checks import collectives
from ddp_lab.checks.collectives import Returned, _compare_gather, _compare_reduce, _copy_result
from ddp_lab.checks.debugging import BUGS, check_fix
from ddp_lab.cluster.scripts import book_script

INPUTS = [torch.tensor([1.0, 2.0]), torch.tensor([3.0, 4.0])]
SUM = INPUTS[0] + INPUTS[1]


def _one(mistakes):
    assert len(mistakes) == 1, mistakes
    return mistakes[0]


def test_all_reduce_answers_that_are_not_plain_tensors_are_mistakes():
    sparse = _one(_compare_reduce("W = 2", 0, INPUTS, SUM, SUM.to_sparse()))
    assert sparse.kind == "unusual_tensor" and "sparse coo tensor of shape (2,)" in sparse.message
    meta = _one(_compare_reduce("W = 2", 0, INPUTS, SUM, torch.empty(2, device="meta")))
    assert meta.kind == "unusual_tensor" and "on device meta" in meta.message
    made = _one(_compare_reduce("W = 2", 0, INPUTS, SUM, _copy_result(x for x in [SUM])))
    assert made.kind == "not_a_tensor" and "returned a generator" in made.message
    text = _one(_compare_reduce("W = 2", 0, INPUTS, SUM, "sum"))
    assert text.kind == "not_a_tensor" and "returned a str, 'sum'" in text.message


def test_all_gather_answers_that_are_not_plain_tensors_are_mistakes():
    chunks = _compare_gather("W = 2", 0, INPUTS, INPUTS, [INPUTS[0].to_sparse(), INPUTS[1]])
    assert _one(chunks).kind == "unusual_tensor" and "chunk 0" in chunks[0].where
    made = _one(_compare_gather("W = 2", 0, INPUTS, INPUTS, _copy_result(iter(INPUTS))))
    assert made.kind == "not_a_list" and "returned a list_iterator" in made.message


def test_what_cannot_travel_back_is_named_not_pickled():
    from collections import namedtuple

    pair = namedtuple("Pair", "a b")(SUM, SUM)
    copied = _copy_result(pair)  # namedtuple(generator) would raise in the rank
    assert type(copied) is tuple and len(copied) == 2 and torch.equal(copied[0], SUM)
    assert _copy_result([torch.nn.Linear(1, 1)]) == [Returned("Linear")]
    assert _copy_result(None) is None and _copy_result(3) == 3


def _sparse_sum(tensor):
    import torch.distributed as dist

    total = tensor.clone()
    other = torch.empty_like(tensor)
    peer = 1 - dist.get_rank()
    if dist.get_rank() == 0:
        dist.send(tensor, peer)
        dist.recv(other, peer)
    else:
        dist.recv(other, peer)
        dist.send(tensor, peer)
    return (total + other).to_sparse()


def test_a_real_run_returning_sparse_tensors_is_graded():
    result = collectives.check_all_reduce(_sparse_sum, world_sizes=(2,), cases=1, timeout=30)
    assert not result and {m.kind for m in result.mistakes} == {"unusual_tensor"}, result.mistakes


def test_check_fix_names_what_main_returned_and_how_far_replicas_differ(tmp_path):
    source = book_script(BUGS["batchnorm"].script).read_text()
    assert source.count("    return model\n") == 1
    script = tmp_path / "returns_nothing.py"
    script.write_text(source.replace("    return model\n", "    return None\n"))
    nothing = check_fix("batchnorm", script)
    assert [m.kind for m in nothing.mistakes] == ["no_model"], nothing.mistakes
    assert "main() returned None, not the model" in nothing.mistakes[0].message

    diverged = check_fix("batchnorm", book_script(BUGS["batchnorm"].script))
    assert [m.kind for m in diverged.mistakes] == ["differ"]
    assert "the largest difference between two ranks is" in diverged.mistakes[0].message
    assert "running_" in diverged.mistakes[0].message.split("largest difference")[1]
