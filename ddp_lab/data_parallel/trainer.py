"""A complete data-parallel training loop, small enough to read in one sitting.

:class:`Trainer` is what Part III builds up to, in one place:

* the model is wrapped in ``DistributedDataParallel`` (Chapter 8);
* each rank reads its own shard of the training set through a
  ``DistributedSampler``, reshuffled every epoch with ``set_epoch``
  (Chapter 9);
* metrics are *reduced across ranks*: each rank sums its loss and counts
  its correct answers and samples, one ``all_reduce`` adds the sums up, and
  only then are means taken, so the numbers are those of the whole dataset,
  not of rank 0's shard; evaluation uses shards without padding, so that
  every sample counts exactly once;
* checkpoints are written by rank 0 only (one copy of identical replicas is
  enough), atomically: to a temporary file first, then renamed over the old
  checkpoint, so a crash mid-write never leaves a half-written file behind;
  every rank loads it, with ``map_location`` so that tensors land on the
  rank's own device;
* only rank 0 logs; W ranks printing the same line would say nothing new.

The same code runs on one rank or on many, under ``ddp_lab.launch`` or
under torchrun: it needs only an initialised default process group.

    def main(checkpoint_dir):
        train, validation = split(spirals(1200), 300)
        trainer = Trainer(mlp(seed=0), train, validation, epochs=10,
                          checkpoint_dir=checkpoint_dir)
        return trainer.fit()

    history = ddp_lab.launch(main, 4, args=(tmpdir,))[0]
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Subset
from torch.utils.data.distributed import DistributedSampler

from ddp_lab.host import uses_nccl
from ddp_lab.validate import check_positive_int

__all__ = ["EpochMetrics", "Trainer", "reduce_sums"]

CHECKPOINT_NAME = "checkpoint.pt"
BAR_WIDTH = 20


@dataclass(frozen=True)
class EpochMetrics:
    """What one epoch achieved, over the whole dataset (all ranks together)."""

    epoch: int
    train_loss: float
    train_accuracy: float
    validation_loss: float
    validation_accuracy: float
    samples: int  # training samples processed by all ranks this epoch

    def __str__(self) -> str:
        return (f"loss {self.train_loss:.3f} acc {self.train_accuracy:.3f} | "
                f"validation loss {self.validation_loss:.3f} acc {self.validation_accuracy:.3f}")


def reduce_sums(*values: float, device=None) -> list[float]:
    """Sum each value over all ranks (one all_reduce for all of them).

    Reduce *sums and counts*, then divide: the mean of per-rank means is
    wrong as soon as ranks hold different numbers of samples.
    """
    tensor = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return tensor.tolist()


class Trainer:
    """Train a classifier with DDP on every rank of the default process group.

    Args:
        model: the (unwrapped) model; the same architecture on every rank.
            Its initial weights need not agree: DDP broadcasts rank 0's.
        train_set, validation_set: map-style datasets of ``(x, label)``.
        batch_size: samples per rank per step (the global batch is
            ``batch_size * world_size``).
        lr: Adam's learning rate.
        epochs: how many epochs :meth:`fit` trains in all (a resumed run
            counts the epochs already done).
        checkpoint_dir: where rank 0 writes ``checkpoint.pt`` after every
            ``save_every`` epochs; None: no checkpoints.
        seed: the sampler's shuffling seed.
        log: print one line per epoch on rank 0: ``True``, the progress bar
            and the epoch's metrics; ``"progress"``, the bar alone (Chapter
            10: the metrics' last digits depend on the CPU's float path, so
            a page that must print the same on every machine draws them
            instead); ``False``, nothing.
    """

    def __init__(self, model: nn.Module, train_set, validation_set, *, batch_size: int = 32,
                 lr: float = 0.01, epochs: int = 10, checkpoint_dir=None, save_every: int = 1,
                 seed: int = 0, log: bool | str = True):
        if not dist.is_initialized():
            raise RuntimeError("Trainer needs an initialised process group: run it under "
                               "ddp_lab.launch or torchrun (dist.init_process_group first)")
        for name, value in (("batch_size", batch_size), ("epochs", epochs), ("save_every", save_every)):
            check_positive_int(name, value)
        if not (log is True or log is False or log == "progress"):
            raise ValueError(f"log must be True, False or 'progress', got {log!r}")
        self.rank, self.world_size = dist.get_rank(), dist.get_world_size()
        self.device = _device_of_this_rank()
        self.epochs, self.save_every, self.log_enabled = epochs, save_every, log
        self.checkpoint_dir = None if checkpoint_dir is None else Path(checkpoint_dir)

        model = model.to(self.device)
        self.model = DDP(model, device_ids=[self.device.index] if self.device.type == "cuda" else None)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=lr)
        self.sampler = DistributedSampler(train_set, shuffle=True, seed=seed)
        self.train_loader = DataLoader(train_set, batch_size=batch_size, sampler=self.sampler,
                                       pin_memory=self.device.type == "cuda")
        # Every rank evaluates every W-th sample: no padding, each sample counted once.
        shard = Subset(validation_set, range(self.rank, len(validation_set), self.world_size))
        self.validation_loader = DataLoader(shard, batch_size=256)
        self.epoch = 0  # the next epoch to train
        self.history: list[EpochMetrics] = []

    # ------------------------------------------------------------- training

    def fit(self) -> list[EpochMetrics]:
        """Train from ``self.epoch`` up to ``epochs``; return the metrics of every epoch."""
        while self.epoch < self.epochs:
            self.sampler.set_epoch(self.epoch)  # a new shuffle, the same on every rank
            loss, accuracy, samples = self.train_epoch()
            validation_loss, validation_accuracy = self.evaluate()
            metrics = EpochMetrics(self.epoch, loss, accuracy, validation_loss, validation_accuracy, samples)
            self.history.append(metrics)
            self.epoch += 1
            line = f"epoch {self.epoch:>{len(str(self.epochs))}}/{self.epochs} {_bar(self.epoch, self.epochs)}"
            self.log(line if self.log_enabled == "progress" else f"{line} {metrics}")
            if self.checkpoint_dir is not None and self.epoch % self.save_every == 0:
                self.save_checkpoint()
        return self.history

    def train_epoch(self) -> tuple[float, float, int]:
        """One pass over this rank's shard; (loss, accuracy, samples) over all ranks."""
        self.model.train()
        loss_sum = correct = count = 0.0
        for x, y in self.train_loader:
            x, y = x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True)
            self.optimizer.zero_grad(set_to_none=True)
            logits = self.model(x)
            loss = F.cross_entropy(logits, y)
            loss.backward()  # DDP all-reduces the gradients here
            self.optimizer.step()
            loss_sum += loss.item() * len(y)
            correct += (logits.argmax(1) == y).sum().item()
            count += len(y)
        loss_sum, correct, count = reduce_sums(loss_sum, correct, count, device=self.device)
        return loss_sum / count, correct / count, int(count)

    @torch.no_grad()
    def evaluate(self) -> tuple[float, float]:
        """(loss, accuracy) on the whole validation set, every sample counted once."""
        self.model.eval()
        loss_sum = correct = count = 0.0
        for x, y in self.validation_loader:
            x, y = x.to(self.device), y.to(self.device)
            logits = self.model.module(x)  # no gradients: no need to go through DDP
            loss_sum += F.cross_entropy(logits, y, reduction="sum").item()
            correct += (logits.argmax(1) == y).sum().item()
            count += len(y)
        loss_sum, correct, count = reduce_sums(loss_sum, correct, count, device=self.device)
        return loss_sum / count, correct / count

    # ---------------------------------------------------------- checkpoints

    @property
    def checkpoint_path(self) -> Path:
        if self.checkpoint_dir is None:
            raise ValueError("this Trainer has no checkpoint_dir")
        return self.checkpoint_dir / CHECKPOINT_NAME

    def save_checkpoint(self) -> bool:
        """Rank 0 writes the checkpoint; every rank waits until it is complete.

        Returns True on the rank that wrote it. The replicas are identical,
        so one copy is enough; W ranks writing the same file at once would
        at best waste W - 1 writes and at worst interleave them.
        """
        wrote = False
        if self.rank == 0:
            state = {
                "model": self.model.module.state_dict(),  # without DDP's "module." prefix
                "optimizer": self.optimizer.state_dict(),
                "epoch": self.epoch,
                "history": [asdict(m) for m in self.history],
            }
            self.checkpoint_dir.mkdir(parents=True, exist_ok=True)
            temporary = self.checkpoint_path.with_suffix(".tmp")
            torch.save(state, temporary)
            os.replace(temporary, self.checkpoint_path)  # atomic: the old file or the new one
            wrote = True
        dist.barrier()  # nobody reads (or resumes from) a checkpoint before it exists
        return wrote

    def load_checkpoint(self, path=None) -> int:
        """Every rank loads the checkpoint onto its own device; returns the epoch to resume at."""
        path = Path(path) if path is not None else self.checkpoint_path
        state = torch.load(path, map_location=self.device, weights_only=True)
        self.model.module.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.epoch = state["epoch"]
        self.history = [EpochMetrics(**m) for m in state["history"]]
        self.log(f"resumed from {path.name} at epoch {self.epoch}/{self.epochs}")
        return self.epoch

    # -------------------------------------------------------------- logging

    def log(self, message: str) -> None:
        """Print on rank 0 only."""
        if self.log_enabled and self.rank == 0:
            print(message, flush=True)


def _device_of_this_rank() -> torch.device:
    """The rank's GPU (``cuda:LOCAL_RANK``) under nccl, else the CPU."""
    if uses_nccl(dist.get_backend()) and torch.cuda.is_available():  # "nccl" or "cpu:gloo,cuda:nccl"
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
    return torch.device("cpu")


def _bar(done: int, total: int) -> str:
    filled = round(BAR_WIDTH * done / total)
    return "[" + "#" * filled + "." * (BAR_WIDTH - filled) + "]"
