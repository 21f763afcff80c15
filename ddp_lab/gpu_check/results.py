"""The results file of ``python -m ddp_lab.gpu_check``: its format, writing and reading it.

One JSON document per run of the command on one machine. It says what the
machine is (``machine``: GPUs, driver, CUDA, NCCL, torch), when the run
was (``date``, UTC), how it measured (``options``) and, for every check, in
the order they ran::

    {"name": "launch_nccl", "title": "...", "chapters": [3, 14], "needs_gpus": 1,
     "status": "passed" | "failed" | "skipped", "seconds": 4.2,
     "outcome": "one line: what was seen, why it was skipped, or what went wrong",
     "details": {...}, "measurement": {...} or null, "error": "traceback" or null}

Two checks carry a ``measurement``: ``all_reduce_bandwidth`` (time, algbw
and busbw of an all-reduce against message size) and ``host_to_device_copy``
(pinned vs pageable copies). Every repeated time is kept as its spread over
the repeats, ``{"min", "median", "max"}`` in seconds (``ddp_lab.units.spread``).
``SCHEMA`` is the whole format as a JSON Schema (``python -m ddp_lab.gpu_check --schema`` prints it).

The book keeps such files in ``book/part4_running/gpu_results/``
(``RESULTS_DIR``); Chapters 5, 6, 9 and 14 show what they hold through
``ddp_lab.gpu_check.report``.
"""

from __future__ import annotations

import json
import os
import re
import secrets
from pathlib import Path

from ddp_lab.cluster.scripts import stored_runs_folder

__all__ = ["FORMAT", "SCHEMA", "RESULTS_DIR", "RESULTS_FOLDER", "STATUSES", "record",
           "assemble", "validate", "write", "load", "stored_results", "results_filename", "results_path",
           "out_problem"]

FORMAT = "ddp_lab.gpu_check/1"
STATUSES = ("passed", "failed", "skipped")
# Where the book keeps results files: as typed from the repository's root, and on disk.
RESULTS_FOLDER = "book/part4_running/gpu_results/"
RESULTS_DIR = stored_runs_folder("gpu_results")  # the checkout's RESULTS_FOLDER, or the wheel's copy

_NUMBER = {"type": "number", "minimum": 0}
_COUNT = {"type": "integer", "minimum": 1}
_TEXT = {"type": "string"}

SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$id": "urn:ddp-lab:gpu-check:1",
    "title": "Results of python -m ddp_lab.gpu_check on one machine",
    "type": "object",
    "required": ["format", "date", "command", "allow_no_gpu", "machine", "options", "checks", "summary"],
    "additionalProperties": False,
    "properties": {
        "format": {"const": FORMAT},
        "date": {"type": "string", "pattern": r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$",
                 "description": "when the run started, UTC"},
        "command": {**_TEXT, "description": "the command line that made the file"},
        "allow_no_gpu": {"type": "boolean",
                         "description": "made with --allow-no-gpu: on a machine without a GPU every GPU check "
                                        "is skipped"},
        "machine": {"$ref": "#/$defs/machine"},
        "options": {"$ref": "#/$defs/options"},
        "checks": {"type": "array", "minItems": 1, "items": {"$ref": "#/$defs/check"}},
        "summary": {
            "type": "object", "required": list(STATUSES), "additionalProperties": False,
            "properties": {status: {"type": "integer", "minimum": 0} for status in STATUSES},
        },
    },
    "$defs": {
        "machine": {
            "type": "object",
            "required": ["gpus", "devices", "driver", "driver_source", "cuda", "nccl", "torch", "python",
                         "platform", "cpu_cores"],
            "additionalProperties": False,
            "properties": {
                "gpus": {"type": "integer", "minimum": 0},
                "devices": {"type": "array", "items": {
                    "type": "object", "required": ["index", "name", "memory_bytes", "capability"],
                    "additionalProperties": False,
                    "properties": {"index": {"type": "integer", "minimum": 0}, "name": _TEXT,
                                   "memory_bytes": {"type": "integer", "minimum": 0},
                                   "capability": {"type": "string", "pattern": r"^\d+\.\d+$"}},
                }},
                "driver": {**_TEXT, "description": "the NVIDIA driver's version, or 'unknown'"},
                "driver_source": {"enum": ["torch.cuda.driver_version", "pynvml", "nvidia-smi", "none"]},
                "cuda": {"type": ["string", "null"], "description": "torch.version.cuda"},
                "nccl": {"type": ["string", "null"]},
                "torch": _TEXT,
                "python": _TEXT,
                "platform": _TEXT,
                "cpu_cores": _COUNT,
            },
        },
        "options": {
            "type": "object",
            "required": ["repeats", "iterations", "all_reduce_sizes", "copy_sizes", "timeout"],
            "additionalProperties": False,
            "properties": {
                "repeats": _COUNT, "iterations": _COUNT, "timeout": _NUMBER,
                "all_reduce_sizes": {"type": "array", "minItems": 1, "items": _COUNT},
                "copy_sizes": {"type": "array", "minItems": 1, "items": _COUNT},
            },
        },
        "spread": {
            "type": "object", "required": ["min", "median", "max"], "additionalProperties": False,
            "properties": {"min": _NUMBER, "median": _NUMBER, "max": _NUMBER},
            "description": "seconds, over the repeats",
        },
        "all_reduce": {
            "type": "object",
            "required": ["collective", "backend", "world_size", "device", "dtype", "repeats", "iterations",
                         "timer", "bus_factor", "note", "rows"],
            "additionalProperties": False,
            "properties": {
                "collective": {"const": "all_reduce"},
                "backend": {"enum": ["nccl", "gloo"]},
                "world_size": _COUNT,
                "device": {**_TEXT, "description": "rank 0's device: cuda:0, or cpu"},
                "dtype": {"const": "float32"},
                "repeats": _COUNT,
                "iterations": {**_COUNT, "description": "calls per timed repeat"},
                "timer": {"enum": ["cuda events", "perf_counter"]},
                "bus_factor": {**_NUMBER, "description": "2(W-1)/W: busbw = algbw x bus_factor"},
                "note": _TEXT,
                "rows": {"type": "array", "minItems": 1, "items": {
                    "type": "object", "required": ["bytes", "seconds", "algbw", "busbw", "busbw_best"],
                    "additionalProperties": False,
                    "properties": {
                        "bytes": _COUNT,
                        "seconds": {"$ref": "#/$defs/spread"},
                        "algbw": {**_NUMBER, "description": "bytes / median seconds, bytes/s"},
                        "busbw": {**_NUMBER, "description": "algbw x bus_factor, bytes/s"},
                        "busbw_best": {**_NUMBER, "description": "the same from the fastest repeat"},
                    },
                }},
            },
        },
        "copy": {
            "type": "object", "required": ["seconds", "bandwidth"], "additionalProperties": False,
            "properties": {"seconds": {"$ref": "#/$defs/spread"},
                           "bandwidth": {**_NUMBER, "description": "bytes / median seconds, bytes/s"}},
        },
        "host_to_device": {
            "type": "object",
            "required": ["direction", "device", "repeats", "timer", "rows"],
            "additionalProperties": False,
            "properties": {
                "direction": {"const": "host to device"},
                "device": _TEXT,
                "repeats": _COUNT,
                "timer": {"const": "cuda events"},
                "rows": {"type": "array", "minItems": 1, "items": {
                    "type": "object", "required": ["bytes", "pageable", "pinned"], "additionalProperties": False,
                    "properties": {"bytes": _COUNT, "pageable": {"$ref": "#/$defs/copy"},
                                   "pinned": {"$ref": "#/$defs/copy"}},
                }},
            },
        },
        "check": {
            "type": "object",
            "required": ["name", "title", "chapters", "needs_gpus", "status", "seconds", "outcome", "details",
                         "measurement", "error"],
            "additionalProperties": False,
            "properties": {
                "name": {"type": "string", "pattern": r"^[a-z0-9_]+$"},
                "title": _TEXT,
                "chapters": {"type": "array", "items": _COUNT},
                "needs_gpus": _COUNT,
                "status": {"enum": list(STATUSES)},
                "seconds": _NUMBER,
                "outcome": {"type": "string", "minLength": 1},
                "details": {"type": "object"},
                "measurement": {"anyOf": [{"type": "null"}, {"$ref": "#/$defs/all_reduce"},
                                          {"$ref": "#/$defs/host_to_device"}]},
                "error": {"type": ["string", "null"]},
            },
            "allOf": [
                {"if": {"properties": {"name": {"const": "all_reduce_bandwidth"}, "status": {"const": "passed"}}},
                 "then": {"properties": {"measurement": {"$ref": "#/$defs/all_reduce"}}}},
                {"if": {"properties": {"name": {"const": "host_to_device_copy"}, "status": {"const": "passed"}}},
                 "then": {"properties": {"measurement": {"$ref": "#/$defs/host_to_device"}}}},
                {"if": {"properties": {"status": {"const": "failed"}}},
                 "then": {"properties": {"error": {"type": "string"}}}},
                {"if": {"properties": {"status": {"const": "skipped"}}},
                 "then": {"properties": {"measurement": {"type": "null"}, "error": {"type": "null"}}}},
            ],
        },
    },
}



def record(check, status, *, seconds=0.0, outcome, details=None, measurement=None, error=None) -> dict:
    """One check's entry in the results file (``check`` is a ``checklist.Check``)."""
    if status not in STATUSES:
        raise ValueError(f"status must be one of {', '.join(STATUSES)}, got {status!r}")
    return {"name": check.name, "title": check.title, "chapters": list(check.chapters),
            "needs_gpus": check.needs_gpus, "status": status, "seconds": round(float(seconds), 3),
            "outcome": outcome, "details": details or {}, "measurement": measurement, "error": error}


def assemble(machine: dict, records: list, options: dict, *, date: str, command: str,
             allow_no_gpu: bool = False) -> dict:
    """The results document of one run, checked against ``SCHEMA`` before it is returned."""
    document = {
        "format": FORMAT,
        "date": date,
        "command": command,
        "allow_no_gpu": bool(allow_no_gpu),
        "machine": machine,
        "options": options,
        "checks": list(records),
        "summary": {status: sum(r["status"] == status for r in records) for status in STATUSES},
    }
    validate(document)
    return document


def validate(document, *, source="the results document") -> dict:
    """Raise ValueError naming the first thing in ``document`` that breaks the format."""
    from jsonschema import Draft202012Validator

    errors = sorted(Draft202012Validator(SCHEMA).iter_errors(document), key=lambda e: list(e.path))
    if errors:
        where = "/".join(map(str, errors[0].path)) or "(top level)"
        raise ValueError(f"{source} does not follow {FORMAT}: at {where}: {errors[0].message}")
    problems = _inconsistencies(document)
    if problems:
        raise ValueError(f"{source} does not follow {FORMAT}: {problems[0]}")
    return document


def _inconsistencies(document) -> list[str]:
    """What JSON Schema cannot say: counts that must agree."""
    problems = []
    machine, checks = document["machine"], document["checks"]
    if machine["gpus"] != len(machine["devices"]):
        problems.append(f"machine.gpus is {machine['gpus']} but {len(machine['devices'])} device(s) are described")
    names = [c["name"] for c in checks]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        problems.append(f"checks named more than once: {', '.join(repeated)}")
    counted = {status: sum(c["status"] == status for c in checks) for status in STATUSES}
    if counted != document["summary"]:
        problems.append(f"summary says {document['summary']} but the checks count {counted}")
    return problems


def results_filename(document) -> str:
    """``8x-nvidia-h100-80gb-hbm3-2026-01-10.json``: the GPUs and the day, or ``no-gpu-<day>``."""
    devices = document["machine"]["devices"]
    names = {}
    for device in devices:
        names[device["name"]] = names.get(device["name"], 0) + 1
    machine = "-and-".join(f"{count}x-{name}" for name, count in names.items()) or "no-gpu"
    slug = re.sub(r"[^a-z0-9]+", "-", machine.lower()).strip("-")
    return f"{slug}-{document['date'][:10]}.json"


def results_path(document, out) -> Path:
    """Where ``write`` puts ``document``: ``out`` itself if it ends in ``.json``, else
    ``out / results_filename(document)``."""
    out = Path(out)
    return out if out.suffix == ".json" else out / results_filename(document)


def out_problem(out) -> str | None:
    """Why ``out`` (``--out``: a ``.json`` file, or a folder) cannot take a results file,
    in words; None when it can. It creates nothing.

    ``python -m ddp_lab.gpu_check`` asks before any check runs, so that a bad
    path is refused before there are results to lose. The file, where ``out``
    names it, must not be a symbolic link, nor anything but a file. The folder
    it goes in must be a folder this user can write to, or one that can be
    created there: the folder, or where it does not exist yet the nearest one
    above it that does, must not be a symbolic link either, since the file, or
    the folders to make, would be written through it. Folders further up are
    only passed through, and may be links (``/tmp`` is one on macOS).
    """
    out = Path(out)
    if out.suffix == ".json":
        problem = _file_problem(out)
        if problem:
            return problem
        out = out.parent
    into = out  # the folder written into: ``out``, or the nearest existing one above it
    while not os.path.lexists(into):
        into = into.parent
    if into.is_symlink():
        return f"{into} is a symbolic link (to {os.readlink(into)}): name the folder itself"
    if not into.is_dir():
        return f"{into} is not a folder" if into == out else f"{out} cannot be created: {into} is not a folder"
    if not os.access(into, os.W_OK | os.X_OK):
        return (f"{into} is not writable" if into == out
                else f"{out} cannot be created: {into} is not writable")
    return None


def _file_problem(path: Path) -> str | None:
    if path.is_symlink():
        return f"{path} is a symbolic link (to {os.readlink(path)}): the results are never written through one"
    if path.exists() and not path.is_file():
        return f"{path} is {'a folder' if path.is_dir() else 'not a plain file'}"
    return None


def write(document, out) -> Path:
    """Write ``document`` to ``out``: a ``.json`` file, or a folder (created if need be)
    in which it gets the name ``results_filename`` gives. Returns the file's path.

    ValueError, before anything is written, where ``out_problem`` says the path
    cannot take it (a symbolic link among them). The file appears whole or not
    at all: the text goes to a new file beside it (created with ``O_EXCL`` and
    ``O_NOFOLLOW``), which then replaces it (``os.replace``, which replaces a
    link planted meanwhile rather than writing through it)."""
    validate(document)
    path = results_path(document, out)
    problem = out_problem(path)
    if problem:
        raise ValueError(f"cannot write the results to {path}: {problem}")
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(document, indent=1) + "\n"
    temporary, descriptor = _new_file_beside(path)
    try:
        with os.fdopen(descriptor, "w") as file:
            file.write(text)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        try:
            os.unlink(temporary)
        except FileNotFoundError:
            pass
        raise
    return path


def _new_file_beside(path: Path):
    """A new, hidden file in ``path``'s folder, opened for writing: (its path, its descriptor).
    Mode 0o666 less the umask, as ``open`` would give (``tempfile.mkstemp`` gives 0o600)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    for _ in range(100):
        temporary = path.parent / f".{path.name}.{secrets.token_hex(4)}.tmp"
        try:
            return temporary, os.open(temporary, flags, 0o666)
        except FileExistsError:
            continue
    raise FileExistsError(f"could not make a new file beside {path}")


def load(path) -> dict:
    """Read one results file; ValueError, naming the file, if it is not one."""
    path = Path(path)
    try:
        document = json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise ValueError(f"{path} is not JSON: {error}") from None
    return validate(document, source=str(path))


def stored_results(folder=None) -> list[dict]:
    """Every results file in ``folder`` (default: the book's, ``RESULTS_DIR``), oldest run first."""
    folder = RESULTS_DIR if folder is None else Path(folder)
    documents = [load(path) for path in sorted(folder.glob("*.json"))]
    return sorted(documents, key=lambda document: document["date"])
