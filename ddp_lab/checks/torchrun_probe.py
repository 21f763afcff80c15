"""Run a training script with recorders attached: the rank side of lab 5's checker.

    torchrun --nproc_per_node 2 --max-restarts 1 torchrun_probe.py EVENTS_DIR train.py ARGS...

The final weights tell the checker *whether* a restarted job ended where an
uninterrupted one did, not *how*: a script that ignores its snapshot and
trains again from scratch ends with the same weights too. So inside every
worker this probe records a few facts, then runs the script exactly as
``python train.py ARGS...`` would (``__name__ == "__main__"``):

* every optimizer step (a global hook that every ``torch.optim`` optimizer calls);
* every ``torch.save`` and ``torch.load``, with the file it names;
* every ``os.replace`` and ``os.rename``, with the source and destination.

Each event is one line of JSON, appended and flushed at once to
``EVENTS_DIR/attempt{A}_rank{R}.jsonl`` (A is torchrun's restart count), so
the events of a worker that crashes, or is killed by torchrun, are kept.

The recorders are attached the moment the script's own ``import torch``
finishes (an import hook), not before: a script that fails before it
imports torch (a wrong path, a typo) fails at once, without the seconds of
CPU that importing torch costs each of the job's workers and restarts.

This file imports nothing from ddp_lab: it runs inside the reader's job,
where only torch is needed.
"""

import importlib.abc
import importlib.util
import json
import os
import runpy
import sys


def _path_of(target):
    """The absolute path that ``torch.save``/``torch.load`` was given, or None (a buffer)."""
    if isinstance(target, (str, os.PathLike)):
        return os.path.abspath(os.fspath(target))
    name = getattr(target, "name", None)  # an open file
    return os.path.abspath(name) if isinstance(name, str) else None


class Recorder:
    """Appends one JSON line per event to this worker's file."""

    def __init__(self, events_dir):
        rank = os.environ.get("RANK", "0")
        attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
        self.rank = int(rank)
        self.file = open(os.path.join(events_dir, f"attempt{attempt}_rank{rank}.jsonl"), "a")

    def __call__(self, kind, **details):
        self.file.write(json.dumps({"kind": kind, **details}) + "\n")
        self.file.flush()


def attach(record):
    """Wrap torch.save, torch.load, os.replace and os.rename; hook optimizer steps."""
    import torch
    from torch.optim.optimizer import register_optimizer_step_post_hook

    real_save, real_load = torch.save, torch.load
    real_replace, real_rename = os.replace, os.rename

    def save(obj, f, *args, **kwargs):
        record("save", path=_path_of(f))
        return real_save(obj, f, *args, **kwargs)

    def load(f, *args, **kwargs):
        record("load", path=_path_of(f))
        return real_load(f, *args, **kwargs)

    def replace(src, dst, *args, **kwargs):
        record("replace", src=_path_of(src), dst=_path_of(dst))
        return real_replace(src, dst, *args, **kwargs)

    def rename(src, dst, *args, **kwargs):
        record("replace", src=_path_of(src), dst=_path_of(dst))
        return real_rename(src, dst, *args, **kwargs)

    torch.save, torch.load = save, load
    os.replace, os.rename = replace, rename
    register_optimizer_step_post_hook(lambda optimizer, args, kwargs: record("step"))


class AttachAfterTorchImport(importlib.abc.MetaPathFinder):
    """Finds nothing itself: when ``torch`` is first imported, attaches ``record`` once it has loaded."""

    def __init__(self, record):
        self.record = record

    def find_spec(self, name, path=None, target=None):
        if name != "torch":
            return None
        sys.meta_path.remove(self)  # once, and so that the real finders find torch below
        spec = importlib.util.find_spec("torch")
        load = spec.loader.exec_module

        def exec_module(module):
            load(module)  # torch/__init__.py, whole
            attach(self.record)

        spec.loader.exec_module = exec_module
        return spec


def main():
    if len(sys.argv) < 3:
        raise SystemExit("usage: torchrun_probe.py EVENTS_DIR SCRIPT [ARGS...]")
    events_dir, script = sys.argv[1], sys.argv[2]
    record = Recorder(events_dir)
    record("start", world_size=int(os.environ.get("WORLD_SIZE", "1")))
    if "torch" in sys.modules:
        attach(record)
    else:
        sys.meta_path.insert(0, AttachAfterTorchImport(record))
    sys.argv = sys.argv[2:]  # the script sees its own name and arguments
    sys.path[0] = os.path.dirname(os.path.abspath(script))  # as `python script` sets it
    runpy.run_path(script, run_name="__main__")
    record("end")


if __name__ == "__main__":
    main()
