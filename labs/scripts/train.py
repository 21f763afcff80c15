"""Train a small classifier with DistributedDataParallel, ready for torchrun.

One plain file you can copy: it runs unchanged on CPUs (gloo) and on GPUs
(nccl), on one machine or many, and survives the failure of a rank.

    # two processes on this machine
    torchrun --standalone --nproc_per_node 2 train.py --epochs 3

    # rank 1 crashes once at step 13; torchrun restarts the job, which
    # resumes from the last snapshot and ends with the same weights
    TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 torchrun --standalone \\
        --nproc_per_node 2 --max-restarts 1 train.py \\
        --fail-at-step 13 --fail-rank 1

    python train.py --epochs 1                 # one process, no torchrun needed
    python train.py --help                     # every option, explained

How it survives a failure. Every ``--snapshot-every`` steps, and at the end of
every epoch, rank 0 writes a *snapshot*: the model, the optimizer, where the
run is (epoch, batches of the epoch already used, step), the random number
generator state of every rank, and the run's ``--seed``, ``--samples``,
``--batch-size`` and ``--hidden`` (a snapshot of another run is refused, not
resumed: with another batch size, the batches of an epoch it had used would
not be the ones it skips). It writes
to a temporary file and renames it over the old snapshot, so a crash during
the write leaves the previous snapshot intact. When torchrun restarts the
workers after a failure, every rank loads the snapshot and carries on from
there: same epoch, same shuffle, the batches it had already used skipped,
same random numbers. On CPU the final weights are then equal, bit for bit,
to those of a run that never failed. ``--final`` is written the same way, so
a link found at its path is replaced, never written through.

Checked before anything trains: a ``--snapshot`` path that holds something
other than a file (a folder, a named pipe, which would block the read for
ever) and a ``--final`` whose folder does not exist or cannot be written are
refused. A disk that fills up while a snapshot or the final weights are
written stops the job with "no space left on device" and the path.

Why ``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1`` in front of a torchrun that may
restart. By default torchrun's agent hosts one key-value store for every
attempt, and the keys of a crashed attempt stay in it: the restarted workers
can read the addresses their dead predecessors published there, and hang or
fail to connect in ``init_process_group`` (pytorch/pytorch#135712). With the
variable set, rank 0 of each attempt hosts a fresh store. The agent reads it
when it joins the rendezvous (``DynamicRendezvousHandler`` in
torch/distributed/elastic/rendezvous/dynamic_rendezvous.py), before any
worker starts, so it must be in torchrun's own environment, as above: set in
this script, it would come too late. The workers see the agent's choice as
``TORCHELASTIC_USE_AGENT_STORE``; a job that may restart while it is
``True`` gets a warning on stderr.

The task is synthetic, drawn from ``--seed``: nothing is downloaded.
"""

import argparse
import contextlib
import errno
import math
import os
import random
import socket
import stat
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def at_least(minimum):
    """An argparse ``type``: a whole number, ``minimum`` or more.

    A value below it is refused by argparse itself: the usage line, then
    ``argument --epochs: must be 0 or more, got -1``, and exit status 2.
    """
    def whole_number(text):
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"must be a whole number, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(
                f"must be {minimum} or more, got {value}")
        return value
    return whole_number


def finite_positive(text):
    """An argparse ``type``: a finite number above 0 (``inf`` and ``nan`` are
    refused)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"must be a number, got {text!r}") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(
            f"must be a finite number > 0, got {text}")
    return value


def build_parser():
    parser = argparse.ArgumentParser(
        description="Train a small classifier with DDP; run it with torchrun "
        "(e.g. torchrun --standalone --nproc_per_node 2 train.py).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--epochs", type=at_least(0), default=3,
                        help="passes over the training set "
                        "(0: only set up, print, and stop)")
    parser.add_argument("--batch-size", type=at_least(1), default=16,
                        help="samples per step on each rank; "
                        "the global batch is this times WORLD_SIZE")
    parser.add_argument("--lr", type=finite_positive, default=3e-3,
                        help="learning rate of AdamW")
    parser.add_argument("--seed", type=int, default=0,
                        help="seed of the data, the initial weights, "
                        "the shuffle and the dropout")
    parser.add_argument("--samples", type=at_least(1), default=512,
                        help="size of the synthetic training set")
    parser.add_argument("--hidden", type=at_least(1), default=64,
                        help="width of the hidden layers")
    parser.add_argument("--snapshot", default="snapshot.pt",
                        help="snapshot file: loaded at start if it exists, "
                        "rewritten by rank 0 (delete it to start over; on "
                        "several machines it must be on a shared file system)")
    parser.add_argument("--snapshot-every", type=at_least(0), default=5,
                        help="also write a snapshot every this many steps "
                        "(0: only at the end of each epoch)")
    parser.add_argument("--final", default=None,
                        help="where rank 0 saves the final weights "
                        "(a state_dict), if given")
    parser.add_argument("--fail-at-step", type=at_least(1), default=None,
                        help="inject a failure: crash in the middle of this "
                        "step (counted from 1, at most the run's last step), "
                        "on the first attempt only "
                        "(TORCHELASTIC_RESTART_COUNT == 0)")
    parser.add_argument("--fail-rank", type=at_least(0), default=0,
                        help="the global rank that crashes (below WORLD_SIZE)")
    parser.add_argument("--backend", choices=["auto", "gloo", "nccl"],
                        default="auto",
                        help="auto: nccl when every process has its GPU(s), "
                        "else gloo")
    parser.add_argument("--cpu", action="store_true",
                        help="run on CPUs even where there are GPUs")
    parser.add_argument("--gpus-per-process", type=int, default=1,
                        choices=[1, 2],
                        help="2: split the model over two devices inside each "
                        "process (the GPUs local_rank*2 and local_rank*2+1), "
                        "with DDP across processes")
    parser.add_argument("--print-ranks", action="store_true",
                        help="rank 0 prints the rank table: what every "
                        "process was told by torchrun")
    return parser


def parse_args(argv=None):
    """The options, checked against the job that torchrun describes."""
    parser = build_parser()
    args = parser.parse_args(argv)
    check_fail_rank(parser, args.fail_rank)
    check_fail_at_step(parser, args)
    check_paths(parser, args)
    warn_if_restarts_share_a_store()
    return args


def check_fail_rank(parser, fail_rank):
    """``--fail-rank`` must be a rank of this job: known from WORLD_SIZE,
    before training."""
    # plain `python train.py`: one process
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if fail_rank >= world_size:
        ranks = "0" if world_size == 1 else f"0 to {world_size - 1}"
        parser.error(f"argument --fail-rank: must be a rank of this job, "
                     f"{ranks} (WORLD_SIZE={world_size}), got {fail_rank}")


def steps_per_epoch(samples, batch_size, world_size):
    """Optimizer steps in one epoch: DistributedSampler gives each rank
    ceil(samples / WORLD_SIZE) samples (repeating some to even the ranks out),
    cut into batches, the last one maybe short."""
    return math.ceil(math.ceil(samples / world_size) / batch_size)


def check_fail_at_step(parser, args):
    """``--fail-at-step`` must be a step of this run (its steps are counted
    from 1 to the last), or the failure it asks for would never come: known
    from WORLD_SIZE, before training."""
    if args.fail_at_step is None:
        return
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    per_epoch = steps_per_epoch(args.samples, args.batch_size, world_size)
    steps = args.epochs * per_epoch
    if args.fail_at_step > steps:
        parser.error(f"argument --fail-at-step: must be a step of this run, "
                     f"which has {steps} ({args.epochs} epoch(s) of "
                     f"{per_epoch}: --samples {args.samples} over "
                     f"WORLD_SIZE={world_size} in batches of "
                     f"{args.batch_size}), got {args.fail_at_step}")


def check_paths(parser, args):
    """Before the process group: is ``--snapshot`` absent or a file, and can
    ``--final`` be written?

    The snapshot path is examined with ``os.stat``, never opened: opening a
    named pipe (FIFO) waits for a writer that never comes. ``--final`` is
    written by rank 0 only, so only rank 0 checks its folder: that it exists
    and that this user may create a file in it (the weights are written to a
    temporary file there, then renamed).
    """
    kind = _not_a_file(args.snapshot)
    if kind is not None:
        parser.error(f"argument --snapshot: {args.snapshot} is {kind}, "
                     f"not a file: the snapshot is read from and written to "
                     f"a file. Remove it, or pass --snapshot another path")
    if args.final is None or os.environ.get("RANK", "0") != "0":
        return
    folder = os.path.dirname(os.path.abspath(args.final))
    if os.path.isdir(args.final):
        parser.error(f"argument --final: {args.final} is a folder: "
                     f"give the path of a file to write")
    if not os.path.isdir(folder):
        parser.error(f"argument --final: the folder {folder} does not "
                     f"exist: create it, or pass another path")
    if not os.access(folder, os.W_OK | os.X_OK):
        parser.error(f"argument --final: cannot create files in {folder} "
                     f"(no permission): pass another path")


def _not_a_file(path):
    """What is at ``path`` if it is there and not a regular file ("a named
    pipe (FIFO)"), else None.

    ``os.stat`` follows a symbolic link: a link to a file is a file.
    """
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return None
    if stat.S_ISREG(mode):
        return None
    kinds = [(stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a named pipe (FIFO)"),
             (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
             (stat.S_ISBLK, "a block device")]
    return next((name for test, name in kinds if test(mode)),
                "not a regular file")


def warn_if_restarts_share_a_store():
    """Rank 0 warns when torchrun may restart the job with its shared store
    (see the top)."""
    restarts = int(os.environ.get("TORCHELASTIC_MAX_RESTARTS", "0"))
    shared = os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
    if restarts and shared and os.environ.get("RANK") == "0":
        print("warning: torchrun may restart this job (--max-restarts), "
              "and its attempts share the agent's store, so a restarted "
              "attempt can hang or fail to connect (pytorch/pytorch#135712). "
              "Start it as: TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 torchrun ...",
              file=sys.stderr, flush=True)


# ---------------------------------------------------------------- setup

def log(message, rank, every_rank=False):
    """Print from rank 0 only (or from this rank, with every_rank), prefixed."""
    if rank == 0 or every_rank:
        print(f"[rank {rank}] {message}", flush=True)


def devices_for(local_rank, gpus_per_process, use_cuda):
    # The GPUs of a process: cuda:(local_rank*g) .. cuda:(local_rank*g + g-1),
    # as ddp_lab.devices.devices_for computes it (copied so this file
    # stands alone).
    if not use_cuda:
        return [torch.device("cpu")] * gpus_per_process
    return [torch.device("cuda", local_rank * gpus_per_process + k)
            for k in range(gpus_per_process)]


def setup(args):
    """Join the process group that torchrun's environment describes."""
    if "RANK" not in os.environ:  # plain `python train.py`: one process
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))  # a free port for the rendezvous
            port = sock.getsockname()[1]
        os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1",
                          LOCAL_WORLD_SIZE="1", MASTER_ADDR="127.0.0.1",
                          MASTER_PORT=str(port))
    rank = int(os.environ["RANK"])
    local_rank = int(os.environ["LOCAL_RANK"])
    local_world_size = int(os.environ["LOCAL_WORLD_SIZE"])
    gpus_needed = local_world_size * args.gpus_per_process
    use_cuda = (not args.cpu and torch.cuda.is_available()
                and torch.cuda.device_count() >= gpus_needed)
    backend = args.backend
    if backend == "auto":
        backend = "nccl" if use_cuda else "gloo"
    if backend == "nccl" and not use_cuda:
        raise SystemExit(f"--backend nccl needs {gpus_needed} GPU(s) on "
                         f"this node ({local_world_size} processes x "
                         f"{args.gpus_per_process}); found "
                         f"{torch.cuda.device_count()}. Use --backend gloo.")
    devices = devices_for(local_rank, args.gpus_per_process, use_cuda)
    if use_cuda:
        # this process's first GPU becomes "cuda"
        torch.cuda.set_device(devices[0])
    # env://: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT
    dist.init_process_group(backend)
    return rank, dist.get_world_size(), local_rank, devices, backend


def print_rank_table(rank, devices):
    """Every rank says who it is; rank 0 prints the table."""
    me = {name: os.environ.get(name) for name in ("RANK", "LOCAL_RANK",
          "GROUP_RANK", "LOCAL_WORLD_SIZE", "WORLD_SIZE")}
    me["device"] = ",".join(str(d) for d in devices)
    me["host"], me["pid"] = socket.gethostname(), os.getpid()
    table = [None] * dist.get_world_size()
    dist.all_gather_object(table, me)
    log(f"rank table (WORLD_SIZE={me['WORLD_SIZE']}):", rank)
    for row in table:
        log("  " + "  ".join(f"{key}={value}" for key, value in row.items()
                             if key != "WORLD_SIZE"), rank)


# ------------------------------------------------------------- data and model

def make_dataset(seed, samples, features=16, classes=4):
    """A synthetic task drawn from the seed: 4 classes given by a random
    linear map."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(samples, features, generator=generator)
    teacher = torch.randn(features, classes, generator=generator)
    noise = 0.5 * torch.randn(samples, classes, generator=generator)
    return TensorDataset(x, (x @ teacher + noise).argmax(dim=1))


class TinyNet(nn.Module):
    """An MLP in two stages; each stage lives on one of the process's devices.

    With one device per process both stages share it. With two (the layout
    where a process spans two GPUs) the activations move from the first GPU
    to the second in the middle of the forward pass, and autograd moves the
    gradients back in the backward pass.
    """

    def __init__(self, features, hidden, classes, devices):
        super().__init__()
        self.devices = devices
        self.stage1 = nn.Sequential(
            nn.Linear(features, hidden), nn.ReLU(), nn.Dropout(0.1),
        ).to(devices[0])
        self.stage2 = nn.Sequential(
            nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, classes),
        ).to(devices[-1])

    def forward(self, x):
        x = self.stage1(x.to(self.devices[0]))
        return self.stage2(x.to(self.devices[-1]))


# ---------------------------------------------------------------- snapshots

def rng_state():
    """This rank's random number generators: what decides its dropout masks."""
    state = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state):
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_snapshot(path, snapshot):
    """Write atomically: into a temporary file next to ``path``, then rename.

    ``os.replace`` swaps the name in one step, so a reader (a restarted job)
    finds either the old snapshot or the new one, never half of one, even if
    this process dies in the middle of ``torch.save``. The temporary file is
    in the same directory because a rename is only atomic within one file
    system; fsync makes the bytes reach the disk before the name points at
    them.
    The temporary file is always a new one: whatever is found at its name
    (left by a write that was killed, or a link put there) is removed, not
    written through, and mode "x" (``O_CREAT | O_EXCL``) refuses to open
    anything that is there, a symbolic link included. ``os.replace`` replaces
    a link found at ``path`` itself, not its target. The final weights
    (``--final``) are written this way too.

    A full disk stops the job with a message naming ``path`` (``full_disk``),
    and the partial temporary file is removed.
    """
    tmp = f"{path}.tmp"
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp)  # a symbolic link is removed, its target untouched
    try:
        with open(tmp, "xb") as file:  # x: create a new file, or fail
            torch.save(snapshot, file)
            file.flush()
            os.fsync(file.fileno())
    except (OSError, RuntimeError) as error:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        full = full_disk(error, path)
        if full is None:
            raise
        raise SystemExit(full) from None
    os.replace(tmp, path)


def full_disk(error, path):
    """The message for a write of ``path`` that failed because the disk is
    full, or None.

    ``torch.save`` into a file reports a full disk as a ``RuntimeError``
    ("unexpected pos 704 vs 598", from ``inline_container.cc``); the
    ``OSError`` with errno ENOSPC that Python's ``write`` raised is its
    ``__context__``. The chain of causes is searched for it (and for
    EDQUOT, a user's disk quota used up).
    """
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if (isinstance(error, OSError)
                and error.errno in (errno.ENOSPC, errno.EDQUOT)):
            reason = ("no space left on device" if error.errno == errno.ENOSPC
                      else "disk quota exceeded")
            return (f"error: {reason} while writing {path}: free some space "
                    f"on its file system (the previous file at that path, if "
                    f"any, is intact), or write it elsewhere")
        error = error.__cause__ or error.__context__
    return None


SNAPSHOT_KEYS = ("model", "optimizer", "epoch", "batches_done", "step", "rng",
                 "world_size")
# the run it belongs to: not all in older snapshots
RUN_KEYS = ("seed", "samples", "batch_size", "hidden")
# An older train.py recorded no batch size: such a snapshot is resumed without
# checking it, and without a notice (the notice names the keys that every
# snapshot of that train.py lacks).
SILENT_IF_MISSING = ("batch_size",)


def load_snapshot(path):
    """The snapshot at ``path``, or None. Every rank reads it (weights_only:
    plain data only).

    A file that is not a whole snapshot (cut short, overwritten, another
    kind of file) stops the job with a message that says what to do, rather
    than a traceback from deep inside ``torch.load``.
    """
    if not os.path.exists(path):
        return None
    try:
        snapshot = torch.load(path, map_location="cpu", weights_only=True)
    # cut short, or not torch.save's format: what is raised varies
    except Exception as error:
        if isinstance(error, OSError) and error.filename is not None:
            # not readable at all (a folder, no permission): its message
            # says so
            raise
        # its first sentence, if any
        sentence = next(iter(str(error).splitlines()), "").split(". ")[0]
        reason = (f"torch.load failed: {type(error).__name__}"
                  + (f": {sentence}" if sentence else ""))
        raise SystemExit(unusable_snapshot(path, reason)) from None
    missing = [key for key in SNAPSHOT_KEYS
               if not isinstance(snapshot, dict) or key not in snapshot]
    if missing:
        raise SystemExit(unusable_snapshot(
            path, f"it holds no {', '.join(missing)}"))
    return snapshot


def check_resume(snapshot, args, rank):
    """Before resuming: is ``snapshot`` from this run, and is anything left to
    train?

    A snapshot of another run (another ``--seed``, ``--samples``,
    ``--batch-size`` or ``--hidden``) stops the job on every rank, naming
    both values: resumed, it would mix two runs, skip batches it never
    trained on (the batches of an epoch already used are counted in batches
    of the snapshot's size), or fail to load. One written by an older
    train.py, which did not record them all, is resumed, and rank 0 says
    which it could not check (the hidden size, it reads from the weights).
    One whose run is already over is resumed too, and trains nothing: rank 0
    says so, and how to start over. That is a notice, not an error, because
    it is also what a restart finds when a rank fails after the last
    snapshot: the work is done, and ``--final`` still gets the weights.
    """
    recorded = {name: snapshot.get(name) for name in RUN_KEYS}
    # an older snapshot: the width of the first layer says it
    if recorded["hidden"] is None:
        weight = (snapshot["model"].get("stage1.0.weight")
                  if isinstance(snapshot["model"], dict) else None)
        recorded["hidden"] = (int(weight.shape[0])
                              if isinstance(weight, torch.Tensor) else None)
    differ = [name for name, value in recorded.items()
              if value is not None and value != getattr(args, name)]
    if differ:
        theirs = " ".join(f"{_option(name)} {recorded[name]}"
                          for name in differ)
        ours = " ".join(f"{_option(name)} {getattr(args, name)}"
                        for name in differ)
        raise SystemExit(f"error: --snapshot {args.snapshot} is from a run "
                         f"with {theirs}, not {ours}: pass {theirs} to resume "
                         f"it, or delete it (or pass --snapshot another path) "
                         f"to start over")
    unknown = [_option(name) for name, value in recorded.items()
               if value is None and name not in SILENT_IF_MISSING]
    if unknown:
        log(f"{args.snapshot} does not record its run's "
            f"{', '.join(unknown)} (an older train.py wrote it): resuming "
            f"without checking {'it' if len(unknown) == 1 else 'them'}", rank)
    epoch = snapshot["epoch"]
    if args.epochs and epoch >= args.epochs:
        run = (f"a finished run (epoch {epoch} of {args.epochs})"
               if epoch == args.epochs
               else f"a run already at epoch {epoch}, "
                    f"past --epochs {args.epochs}")
        log(f"{args.snapshot} is from {run}: nothing to train; delete it or "
            f"pass --snapshot another path", rank)


def _option(name):
    """``batch_size`` -> ``--batch-size``: the option a run key comes from."""
    return "--" + name.replace("_", "-")


def unusable_snapshot(path, reason):
    return (f"error: --snapshot {path} is not a snapshot this script can "
            f"resume from ({reason}). It is truncated, damaged or another "
            f"kind of file. Delete it to start from scratch, or point "
            f"--snapshot elsewhere.")


def take_snapshot(path, rank, model, optimizer, epoch, batches_done, step,
                  args):
    """Collective: every rank sends its RNG state; rank 0 writes the snapshot.

    The barrier keeps every rank from running ahead of a snapshot that is
    not on disk yet, so the snapshot a restart finds is always this one or a
    later one.
    """
    rng_states = [None] * dist.get_world_size() if rank == 0 else None
    dist.gather_object(rng_state(), rng_states, dst=0)
    if rank == 0:
        save_snapshot(path, {
            # .module: without DDP's "module." prefix
            "model": model.module.state_dict(),
            "optimizer": optimizer.state_dict(),
            "epoch": epoch,                # the epoch to continue
            "batches_done": batches_done,  # batches of that epoch already used
            "step": step,                  # optimizer steps done so far
            "rng": rng_states,             # one entry per rank
            "world_size": dist.get_world_size(),
            "seed": args.seed,
            "samples": args.samples,
            "batch_size": args.batch_size,
            "hidden": args.hidden,
        })
    dist.barrier()


# ---------------------------------------------------------------- training

@torch.no_grad()
def evaluate(model, dataset, device):
    """Loss and accuracy on the whole training set (the same on every rank)."""
    model.eval()
    logits = model(dataset.tensors[0]).to(device)
    labels = dataset.tensors[1].to(device)
    model.train()
    loss = F.cross_entropy(logits, labels).item()
    accuracy = (logits.argmax(dim=1) == labels).float().mean().item()
    return loss, accuracy


def main(argv=None):
    args = parse_args(argv)
    rank, world_size, local_rank, devices, backend = setup(args)
    restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    log(f"restart {restart}: WORLD_SIZE={world_size}, backend {backend}, "
        f"devices {','.join(str(d) for d in devices)}", rank)
    if args.print_ranks:
        print_rank_table(rank, devices)

    dataset = make_dataset(args.seed, args.samples)
    # The shuffle of an epoch depends only on (seed, epoch): set_epoch below.
    sampler = DistributedSampler(dataset, shuffle=True, seed=args.seed)
    # A private generator: DataLoader draws a seed from it each epoch, and
    # would otherwise draw from the global generator that dropout uses.
    loader = DataLoader(dataset, batch_size=args.batch_size, sampler=sampler,
                        generator=torch.Generator())

    torch.manual_seed(args.seed)  # the same initial weights on every rank
    model = TinyNet(dataset.tensors[0].shape[1], args.hidden, 4, devices)
    torch.manual_seed(args.seed + 1 + rank)  # each rank its own dropout masks
    epoch, batches_done, step = 0, 0, 0

    snapshot = load_snapshot(args.snapshot)
    if snapshot is not None:
        # from this run? anything left to train?
        check_resume(snapshot, args, rank)
        model.load_state_dict(snapshot["model"])
        epoch = snapshot["epoch"]
        batches_done, step = snapshot["batches_done"], snapshot["step"]
        if snapshot["world_size"] == world_size:
            set_rng_state(snapshot["rng"][rank])
        else:  # the shards of an epoch depend on WORLD_SIZE: redo this epoch
            log(f"snapshot from WORLD_SIZE={snapshot['world_size']}: "
                f"epoch {epoch} starts over", rank)
            batches_done = 0
        log(f"resumed from snapshot at epoch {epoch}, batch {batches_done} "
            f"of {len(loader)} (step {step})", rank)
    else:
        log("no snapshot: starting from scratch", rank)

    # device_ids: the one GPU this process drives; None when the model spans
    # several devices (or lives on the CPU): DDP then leaves placement alone.
    one_gpu = devices[0].type == "cuda" and args.gpus_per_process == 1
    model = DDP(model, device_ids=[devices[0].index] if one_gpu else None)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    if snapshot is not None:
        optimizer.load_state_dict(snapshot["optimizer"])

    for epoch in range(epoch, args.epochs):
        sampler.set_epoch(epoch)
        for batch, (x, y) in enumerate(loader):
            if batch < batches_done:
                continue  # used before the snapshot: same shuffle, so skip them
            step += 1
            loss = F.cross_entropy(model(x), y.to(devices[-1]))
            if (step == args.fail_at_step and rank == args.fail_rank
                    and restart == 0):
                log(f"injected failure in step {step} "
                    f"(epoch {epoch}, batch {batch})", rank, every_rank=True)
                raise RuntimeError(
                    f"injected failure: rank {rank}, step {step}")
            optimizer.zero_grad(set_to_none=True)
            loss.backward()  # DDP averages the gradients over the ranks here
            optimizer.step()
            end_of_epoch = batch + 1 == len(loader)
            every = args.snapshot_every
            if end_of_epoch or (every and step % every == 0):
                position = ((epoch + 1, 0) if end_of_epoch
                            else (epoch, batch + 1))
                take_snapshot(args.snapshot, rank, model, optimizer,
                              *position, step, args)
                log(f"snapshot at step {step}: epoch {position[0]}, "
                    f"batch {position[1]}", rank)
        batches_done = 0
        loss, accuracy = evaluate(model, dataset, devices[-1])
        log(f"epoch {epoch}: loss {loss:.4f}, accuracy {accuracy:.1%}", rank)

    if args.final and rank == 0:
        # atomically, as a snapshot
        save_snapshot(args.final, model.module.state_dict())
    log(f"done: {step} steps", rank)
    # The model goes before the group it talks over. Left to the end of main,
    # its C++ Reducer would destroy the group holding the GIL, while a gloo
    # thread may need the GIL to finish: a deadlock
    # (ddp_lab.launcher.keep_groups).
    del model
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
