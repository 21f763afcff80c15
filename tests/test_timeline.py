"""The backward timeline of a DDP model, recorded on real gloo ranks."""

import pickle

import pytest
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import ddp_lab
from ddp_lab.data_parallel.overlap_timeline import BackwardTimeline, Interval, TimelineRecorder, record_backward
from ddp_lab.models import mlp

WIDTHS = (256,) * 5 + (10,)  # fc1..fc4: 256 x 256 (about 0.25 MiB each), fc5: 256 x 10
LAYERS = ["fc5", "fc4", "fc3", "fc2", "fc1"]


def timelines_for(caps):
    def work():
        torch.manual_seed(dist.get_rank())
        x, y = torch.randn(32, 256), torch.randint(0, 10, (32,))
        return [record_backward(DDP(mlp(WIDTHS, seed=0), bucket_cap_mb=cap), x, y) for cap in caps]

    return ddp_lab.launch(work, 2, backend="gloo")


@pytest.fixture(scope="module")
def recorded():
    """{bucket_cap_mb: [timeline of rank 0, timeline of rank 1]}; None: DDP's default."""
    caps = (25, 0.25, None)
    by_rank = timelines_for(caps)
    return {cap: [by_rank[r][i] for r in range(2)] for i, cap in enumerate(caps)}


def test_one_backward_interval_per_layer_last_layer_first(recorded):
    for timelines in recorded.values():
        for timeline in timelines:
            assert [layer.label for layer in timeline.layers] == LAYERS
            ends = [layer.end for layer in timeline.layers]
            assert ends == sorted(ends)


def test_one_all_reduce_per_bucket_holding_every_parameter_once(recorded):
    names = [name for name, _ in mlp(WIDTHS).named_parameters()]
    for timelines in recorded.values():
        for timeline in timelines:
            assert [b.label for b in timeline.buckets] == [f"bucket {i}" for i in range(len(timeline.buckets))]
            assert len(timeline.bucket_contents) == len(timeline.buckets) == len(timeline.bucket_bytes)
            contents = [name for bucket in timeline.bucket_contents for name in bucket]
            assert sorted(contents) == sorted(names)
            assert sum(timeline.bucket_bytes) == 4 * sum(p.numel() for p in mlp(WIDTHS).parameters())


def test_intervals_are_non_negative_and_in_order(recorded):
    for timelines in recorded.values():
        for timeline in timelines:
            for interval in timeline.layers + timeline.buckets:
                assert 0 <= interval.start <= interval.end <= timeline.backward_end
            starts = [b.start for b in timeline.buckets]
            assert starts == sorted(starts)  # buckets are launched in index order
            # a bucket is launched once the layers it holds are done, not before
            ends = {layer.label: layer.end for layer in timeline.layers}
            for i, bucket in enumerate(timeline.buckets):
                first_done = min(ends[layer] for layer in timeline.bucket_layers(i))
                assert bucket.start >= first_done


def test_bucket_count_follows_bucket_cap_mb(recorded):
    one, many = recorded[25], recorded[0.25]
    assert all(len(t.buckets) == 1 for t in one)
    assert all(len(t.buckets) >= 4 for t in many)
    assert len(many[0].buckets) == len(many[1].buckets)  # every rank has the same buckets
    # with small buckets, the first all-reduce starts while earlier layers still compute
    first = many[0]
    assert first.buckets[0].start < first.layers[-1].start
    assert one[0].buckets[0].start >= one[0].compute_end - 1e-3
    assert one[0].describe().startswith("bucket_cap_mb=25: 5 layers, 1 bucket\n  bucket 0: fc5, fc4, fc3, fc2, fc1")
    assert many[0].bucket_cap_mb == 0.25


def test_the_default_cap_is_told_apart_from_an_explicit_25(recorded):
    # Left to its default, DDP caps the first bucket at 1 MiB; an explicit
    # bucket_cap_mb=25 caps every bucket, the first included, at 25 MiB.
    default, explicit = recorded[None][0], recorded[25][0]
    assert default.bucket_cap_mb == explicit.bucket_cap_mb == 25
    assert default.first_bucket_mb == 1 and explicit.first_bucket_mb is None
    assert default.describe().startswith("default bucket_cap_mb (25, first bucket 1): 5 layers")
    assert explicit.cap_text(spaced=True) == "bucket_cap_mb = 25"


def test_timeline_is_plain_data():
    timeline = BackwardTimeline(0, 2, 1.0, (Interval("fc2", 0.0, 0.002), Interval("fc1", 0.002, 0.003)),
                                (Interval("bucket 0", 0.0031, 0.004),), (("fc2.weight", "fc1.weight"),),
                                (1024,), 0.0045)
    again = pickle.loads(pickle.dumps(timeline))
    assert again == timeline
    assert again.compute_end == 0.003
    assert again.communication_after_compute == pytest.approx(0.001)
    assert again.bucket_layers(0) == ("fc2", "fc1")


def test_recorder_refuses_a_model_that_is_not_ddp():
    with pytest.raises(TypeError, match="needs a DistributedDataParallel model, got Sequential"):
        TimelineRecorder(mlp())
