"""Recording what ranks held around a collective, on real gloo groups."""

import pickle

import pytest
import torch
import torch.distributed as dist

import ddp_lab
from ddp_lab.collectives.before_after import CollectiveRecord, record


def all_reduce_recorded():
    rank = dist.get_rank()
    t = torch.tensor([10.0 * rank + 1, 10.0 * rank + 2])
    rec = record("all_reduce", note="op=SUM")
    rec.before(t=t)
    dist.all_reduce(t)
    done = rec.after(t=t)
    t.zero_()  # a record is a copy: later changes must not show in it
    return done


def test_records_what_every_rank_held():
    records = ddp_lab.launch(all_reduce_recorded, 3, backend="gloo")
    assert [r.rank for r in records] == [0, 1, 2]
    for r in records:
        assert isinstance(r, CollectiveRecord)
        assert (r.name, r.world_size, r.note) == ("all_reduce", 3, "op=SUM")
        assert r.before["t"].tolist() == [10.0 * r.rank + 1, 10.0 * r.rank + 2]
        assert r.after["t"].tolist() == [33.0, 36.0]


def gather_recorded():
    rank, world_size = dist.get_rank(), dist.get_world_size()
    t = torch.tensor([rank])
    bucket = [torch.zeros(1, dtype=torch.long) for _ in range(world_size)] if rank == 0 else None
    rec = record("gather").before(t=t, gather_list=bucket)
    dist.gather(t, bucket, dst=0)
    return rec.after(t=t, gather_list=bucket)


def test_lists_and_nothing():
    records = ddp_lab.launch(gather_recorded, 2, backend="gloo")
    root, other = records
    assert isinstance(root.after["gather_list"], tuple)
    assert [t.item() for t in root.after["gather_list"]] == [0, 1]
    assert [t.item() for t in root.before["gather_list"]] == [0, 0]
    assert other.before["gather_list"] is None and other.after["gather_list"] is None
    assert "gather_list=-" in str(other)


def test_a_record_is_plain_picklable_data():
    rec = record("broadcast").before(t=torch.ones(2, requires_grad=True))
    done = rec.after(t=torch.zeros(2))
    again = pickle.loads(pickle.dumps(done))
    assert again.before["t"].tolist() == [1.0, 1.0] and not again.before["t"].requires_grad
    assert again.after["t"].tolist() == [0.0, 0.0]


def test_outside_a_process_group_rank_comes_from_the_environment(monkeypatch):
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "4")
    done = record("x").before().after()
    assert (done.rank, done.world_size, done.before, done.after) == (3, 4, {}, {})
    assert str(done) == "rank 3: x  before (nothing)  ->  after (nothing)"


def test_misuse_is_explained():
    with pytest.raises(RuntimeError, match=r"after\(\) was called before \.before\(\)"):
        record("all_reduce").after(t=torch.ones(1))
    with pytest.raises(TypeError, match="t=list: record a tensor, a list of tensors, or None"):
        record("all_reduce").before(t=[1, 2])
    with pytest.raises(ValueError, match="name must be a non-empty string"):
        record("")
