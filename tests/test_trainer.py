"""The Trainer on real gloo ranks: it learns, reduces its metrics over all ranks,
writes checkpoints from rank 0 only, and resumes to the very same weights."""

import os

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F

import ddp_lab
from ddp_lab.data import spirals, split
from ddp_lab.data_parallel.trainer import EpochMetrics, Trainer, reduce_sums
from ddp_lab.models import flat_parameters, mlp

EPOCHS = 4


def run(checkpoint_dir, epochs, resume=False, save_flags=False):
    train, validation = split(spirals(1200, seed=0), 300)
    trainer = Trainer(mlp(seed=dist.get_rank()), train, validation, batch_size=32, lr=0.03,
                      epochs=epochs, checkpoint_dir=checkpoint_dir, log=dist.get_rank() == 0)
    if resume:
        trainer.load_checkpoint()
    history = trainer.fit()
    wrote = trainer.save_checkpoint() if save_flags else None
    return flat_parameters(trainer.model.module), history, wrote


@pytest.fixture(scope="module")
def straight(tmp_path_factory):
    directory = tmp_path_factory.mktemp("straight")
    return directory, ddp_lab.launch(run, 2, args=(str(directory), EPOCHS), kwargs={"save_flags": True},
                                     backend="gloo")


def test_it_learns_the_spirals(straight):
    _, results = straight
    history = results[0][1]
    assert [m.epoch for m in history] == list(range(EPOCHS))
    assert history[-1].train_loss < 0.5 * history[0].train_loss
    assert history[-1].validation_accuracy > 0.8
    assert history[0].samples == 900  # the whole training set, once per epoch, over both ranks


def test_metrics_are_reduced_over_all_ranks_and_exact(straight):
    _, results = straight
    weights, history, _ = results[0]
    assert results[1][1] == history  # every rank reports the same numbers
    model = mlp()
    torch.nn.utils.vector_to_parameters(weights, model.parameters())
    x, y = split(spirals(1200, seed=0), 300)[1].tensors
    with torch.no_grad():
        logits = model(x)
    assert history[-1].validation_accuracy == (logits.argmax(1) == y).sum().item() / len(y)
    assert history[-1].validation_loss == pytest.approx(F.cross_entropy(logits, y).item(), rel=1e-5)


def test_checkpoint_is_written_by_rank_0_only_and_atomically(straight):
    directory, results = straight
    assert [wrote for _, _, wrote in results] == [True, False]
    assert os.listdir(directory) == ["checkpoint.pt"]  # no temporary file left behind
    state = torch.load(directory / "checkpoint.pt", weights_only=True)
    assert state["epoch"] == EPOCHS
    assert [EpochMetrics(**m) for m in state["history"]] == results[0][1]


def test_resuming_on_every_rank_gives_the_same_weights_as_never_stopping(straight, tmp_path, capsys):
    _, uninterrupted = straight
    ddp_lab.launch(run, 2, args=(str(tmp_path), EPOCHS // 2), backend="gloo")
    resumed = ddp_lab.launch(run, 2, args=(str(tmp_path), EPOCHS), kwargs={"resume": True}, backend="gloo")
    out = capsys.readouterr().out
    assert f"[rank 0] resumed from checkpoint.pt at epoch {EPOCHS // 2}/{EPOCHS}" in out
    assert "[rank 1]" not in out  # only rank 0 logs
    for rank in range(2):
        assert torch.equal(resumed[rank][0], uninterrupted[rank][0])
        assert resumed[rank][1] == uninterrupted[rank][1]


def test_reduce_sums_adds_over_ranks():
    def work():
        return reduce_sums(1.0, float(dist.get_rank()), 0.5)

    assert ddp_lab.launch(work, 3, backend="gloo") == [[3.0, 3.0, 1.5]] * 3


def test_misuse_is_named():
    with pytest.raises(RuntimeError, match="needs an initialised process group"):
        Trainer(mlp(), None, None)

    def bad_batch():
        Trainer(mlp(), spirals(10), spirals(10), batch_size=0)

    with pytest.raises(ddp_lab.RankFailed, match="batch_size must be a positive int, got 0"):
        ddp_lab.launch(bad_batch, 1, backend="gloo", threads=1)


def _progress_only(checkpoint_dir):
    train_set, validation_set = split(spirals(120, seed=0), 30)
    Trainer(mlp(seed=0), train_set, validation_set, batch_size=16, epochs=2, log="progress").fit()


def test_a_progress_log_prints_the_bar_without_float_digits(capfd):
    ddp_lab.launch(_progress_only, 2, args=(None,))
    out = capfd.readouterr().out
    assert "epoch 2/2 [####################]" in out
    assert "loss" not in out and "acc" not in out


def _bad_log():
    train_set, validation_set = split(spirals(120, seed=0), 30)
    Trainer(mlp(seed=0), train_set, validation_set, log="metrics")


def test_an_unknown_log_setting_is_refused_naming_it():
    with pytest.raises(ddp_lab.RankFailed, match="log must be True, False or 'progress', got 'metrics'"):
        ddp_lab.launch(_bad_log, 1)
