"""``python -m ddp_lab.gpu_check`` and the pages' rendering of its results, on a machine without a GPU.

What a CPU can prove: the command refuses clearly without CUDA; its own
code path, with every GPU check skipped, assembles a results file that
follows the schema; the all-reduce measurement code runs on gloo ranks (the
same code, timed by the CPU's clock instead of CUDA events); the pages
render a results file, and say so when none is stored. The GPU checks
themselves run on a GPU machine: ``python -m ddp_lab.gpu_check``.
"""

import copy
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from jsonschema import Draft202012Validator

import ddp_lab
from ddp_lab.bench.timing import elapsed_seconds
from ddp_lab.cost import bus_factor
from ddp_lab.gpu_check import chapter14, launches, machine
from ddp_lab.gpu_check.__main__ import NO_CUDA, NOT_WRITTEN, main, recorded_command
from ddp_lab.gpu_check.allreduce import all_reduce_measurement, measure_all_reduce
from ddp_lab.gpu_check.checklist import CHECKS, check_named
from ddp_lab.gpu_check.report import draw_all_reduce_busbw, gpu_results_text, measured_on, no_results_message, report
from ddp_lab.gpu_check.results import (
    RESULTS_DIR,
    RESULTS_FOLDER,
    SCHEMA,
    assemble,
    load,
    record,
    results_filename,
    stored_results,
    validate,
    write,
)
from ddp_lab.gpu_check.runner import Check, CheckFailed, Finding, Options, run_check, run_checks
from ddp_lab.units import spread

ROOT = Path(__file__).resolve().parents[1]
HAS_CUDA = torch.cuda.is_available()
NO_GPU_HERE = pytest.mark.skipif(HAS_CUDA, reason="this machine has a CUDA GPU: the command would run for real")
DATE = "2026-01-10T12:00:00Z"
NO_MEASUREMENT = (f"No GPU measurement is stored yet: run `python -m ddp_lab.gpu_check --out {RESULTS_FOLDER}` "
                  f"on a GPU machine and commit the file.")


def run_command(*args, cwd):
    return subprocess.run([sys.executable, "-m", "ddp_lab.gpu_check", *args], capture_output=True, text=True,
                          cwd=cwd, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)


def dry_run_document():
    """What the command assembles on a machine with no GPU: every check skipped."""
    records = run_checks(CHECKS, 0, Options(), progress=None)
    return assemble(machine.describe_machine(0), records, Options().as_dict(), date=DATE,
                    command="python -m ddp_lab.gpu_check --allow-no-gpu", allow_no_gpu=True)


def two_gpu_document(all_reduce):
    """A results file shaped as from a machine with two GPUs (test data: named 'Test GPU'),
    holding the given all-reduce measurement and a copy measurement."""
    devices = [{"index": i, "name": "Test GPU", "memory_bytes": 16 << 30, "capability": "8.0"} for i in range(2)]
    described = {**machine.describe_machine(0), "gpus": 2, "devices": devices, "driver": "550.0",
                 "driver_source": "nvidia-smi", "cuda": "12.4", "nccl": "2.21.5", "torch": "2.13.0+cu124"}
    copies = {"direction": "host to device", "device": "cuda:0", "repeats": 3, "timer": "cuda events",
              "rows": [{"bytes": 1 << 20,
                        "pageable": {"seconds": spread([4e-4, 5e-4, 6e-4]), "bandwidth": (1 << 20) / 5e-4},
                        "pinned": {"seconds": spread([1e-4, 1e-4, 2e-4]), "bandwidth": (1 << 20) / 1e-4}}]}
    findings = {"all_reduce_bandwidth": Finding("measured", measurement=all_reduce),
                "host_to_device_copy": Finding("measured", measurement=copies)}
    records = [record(check, "passed", seconds=1.0, outcome=findings.get(check.name, Finding("ok")).outcome,
                      measurement=findings.get(check.name, Finding("ok")).measurement) for check in CHECKS]
    return assemble(described, records, Options().as_dict(), date=DATE, command="python -m ddp_lab.gpu_check")


# --- refusing without CUDA ---------------------------------------------------------------


@NO_GPU_HERE
def test_the_command_refuses_without_cuda_before_it_starts_anything(tmp_path):
    done = run_command("--out", str(tmp_path / "results"), cwd=tmp_path)
    assert done.returncode == NO_CUDA == 3
    assert done.stdout == ""
    assert done.stderr.startswith("python -m ddp_lab.gpu_check needs a CUDA GPU, and this machine has none it "
                                  "can use: ")
    assert machine.why_no_cuda() in done.stderr
    assert "Nothing was run." in done.stderr and "--allow-no-gpu" in done.stderr
    assert not (tmp_path / "results").exists()


def test_the_command_prints_its_schema_and_refuses_bad_options(capsys):
    assert main(["--schema"]) == 0
    assert json.loads(capsys.readouterr().out) == SCHEMA
    with pytest.raises(SystemExit) as exited:
        main(["--repeats", "0"])
    assert exited.value.code == 2
    assert "repeats must be an int >= 1, got 0" in capsys.readouterr().err


@pytest.mark.parametrize("timeout", ["inf", "nan", "1e400", "0", "-5", "soon"])
def test_a_timeout_that_is_not_a_finite_number_of_seconds_is_refused(timeout, capsys):
    with pytest.raises(SystemExit) as exited:
        main(["--timeout", timeout, "--schema"])
    assert exited.value.code == 2
    assert f"error: argument --timeout: must be a finite number of seconds > 0, got {timeout!r}" \
        in capsys.readouterr().err


def facts(**changes):
    return {"torch": "2.13.0+cu124", "cuda": "12.4", "cuda_available": True, "nccl_available": True,
            "visible_devices": None, **changes}


@pytest.mark.parametrize("changes, says", [
    ({"torch": "2.13.0+cpu", "cuda": None, "cuda_available": False},
     "torch 2.13.0+cpu is a build without CUDA (torch.version.cuda is None): install a CUDA build"),
    ({"cuda_available": False},
     "torch 2.13.0+cu124 is built for CUDA 12.4 but finds no usable GPU (torch.cuda.is_available() is False): "
     "check that `nvidia-smi` lists a GPU and that its driver supports CUDA 12.4"),
    ({"cuda_available": False, "visible_devices": ""},
     "(torch.cuda.is_available() is False; CUDA_VISIBLE_DEVICES='' hides every GPU)"),
    ({"nccl_available": False}, "has no nccl backend (torch.distributed.is_nccl_available() is False)"),
])
def test_why_no_cuda_names_what_is_missing(changes, says):
    assert says in machine.why_no_cuda(facts(**changes))


def test_a_machine_with_a_gpu_and_nccl_can_run_the_checks():
    assert machine.why_no_cuda(facts()) is None


def test_asking_whether_there_is_a_gpu_makes_no_cuda_context():
    # The command asks before its launches, which must start from a process without one.
    facts = machine.cuda_facts()
    assert machine.why_no_cuda() == machine.why_no_cuda(facts)
    assert facts["cuda"] == torch.version.cuda
    assert not torch.cuda.is_initialized()


# --- the driver's version ----------------------------------------------------------------


def test_driver_version_falls_back_to_unknown(monkeypatch, tmp_path):
    monkeypatch.delattr(torch.cuda, "driver_version", raising=False)
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml raises ImportError
    monkeypatch.setenv("PATH", str(tmp_path))         # no nvidia-smi
    assert machine.driver_version() == {"driver": "unknown", "driver_source": "none"}


def test_driver_version_from_nvidia_smi(monkeypatch, tmp_path):
    monkeypatch.delattr(torch.cuda, "driver_version", raising=False)
    monkeypatch.setitem(sys.modules, "pynvml", None)
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 550.54.15\necho 550.54.15\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert machine.driver_version() == {"driver": "550.54.15", "driver_source": "nvidia-smi"}


def test_driver_version_from_torch_first_where_torch_has_it(monkeypatch):
    monkeypatch.setattr(torch.cuda, "driver_version", lambda: "555.42", raising=False)
    assert machine.driver_version() == {"driver": "555.42", "driver_source": "torch.cuda.driver_version"}


# --- running the checks ------------------------------------------------------------------


def fake_check(run, needs_gpus=1):
    return Check("fake_check", "a check for the tests", (14,), needs_gpus, run)


def test_a_check_needing_more_gpus_is_skipped_with_the_count():
    entry = run_check(fake_check(lambda gpus, options: pytest.fail("ran"), needs_gpus=2), 1, Options())
    assert (entry["status"], entry["outcome"]) == ("skipped", "needs 2 CUDA GPUs; this machine has 1")
    entry = run_check(fake_check(lambda gpus, options: pytest.fail("ran")), 0, Options())
    assert entry["outcome"] == "needs a CUDA GPU; this machine has 0"


def test_checks_that_pass_fail_or_raise():
    passed = run_check(fake_check(lambda gpus, options: Finding(f"saw {gpus} GPUs", {"x": 1})), 2, Options())
    assert (passed["status"], passed["outcome"], passed["details"]) == ("passed", "saw 2 GPUs", {"x": 1})

    def disappointed(gpus, options):
        raise CheckFailed("rank 1 is on cuda:0, not cuda:1", {"rank": 1})

    failed = run_check(fake_check(disappointed), 2, Options())
    assert (failed["status"], failed["outcome"], failed["details"]) == (
        "failed", "rank 1 is on cuda:0, not cuda:1", {"rank": 1})

    def crashed(gpus, options):
        raise RuntimeError("NCCL error: unhandled system error\nmore lines")

    crashed = run_check(fake_check(crashed), 2, Options())
    assert crashed["status"] == "failed"
    assert crashed["outcome"] == "RuntimeError: NCCL error: unhandled system error"
    assert "Traceback" in crashed["error"] and "more lines" in crashed["error"]


def test_the_checks_cover_every_gpu_path_of_the_issue():
    names = [check.name for check in CHECKS]
    assert names == ["launch_auto", "launch_nccl", "cpu_examples_on_gpus", "gloo_shared_gpu", "nccl_shared_gpu",
                     "ddp_device_ids", "ddp_step_profile", "all_reduce_bandwidth", "ring_all_reduce_nccl",
                     "train_one_gpu_per_process", "train_spanning_two_gpus", "ddp_compiled",
                     "fsdp2_mixed_precision", "launch_after_cuda_init", "host_to_device_copy"]
    assert names[-1] == "host_to_device_copy"  # the one that makes a CUDA context here: last
    assert check_named("train_spanning_two_gpus").needs_gpus == 2
    with pytest.raises(ValueError, match="no GPU check named 'nope': the checks are launch_auto, "):
        check_named("nope")


def test_options_refuse_bad_values():
    with pytest.raises(ValueError, match="repeats must be an int >= 1, got 0"):
        Options(repeats=0)
    with pytest.raises(ValueError, match="all_reduce_sizes must be byte counts of at least 4"):
        Options(all_reduce_sizes=(2,))


@pytest.mark.parametrize("timeout", [float("inf"), float("nan"), True, 0, -5.0])
def test_options_refuse_a_timeout_that_is_not_a_finite_number_of_seconds(timeout):
    # as --timeout does: Options(timeout=inf) once passed, and failed later inside a launch
    with pytest.raises(ValueError) as refused:
        Options(timeout=timeout)
    assert str(refused.value) == f"timeout must be a finite number of seconds > 0, got {timeout!r}"


# --- the results document ----------------------------------------------------------------


def test_the_schema_is_a_valid_json_schema():
    Draft202012Validator.check_schema(SCHEMA)


def test_the_dry_run_document_follows_the_schema():
    document = dry_run_document()
    assert validate(json.loads(json.dumps(document))) == document
    assert document["summary"] == {"passed": 0, "failed": 0, "skipped": len(CHECKS)}
    assert document["machine"]["gpus"] == 0 and document["machine"]["devices"] == []
    for check in document["checks"]:
        assert check["status"] == "skipped" and check["measurement"] is None
        assert check["outcome"].startswith("needs ") and check["outcome"].endswith("this machine has 0")


@NO_GPU_HERE
def test_the_command_with_allow_no_gpu_writes_a_file_that_follows_the_schema(tmp_path):
    done = run_command("--allow-no-gpu", "--out", "results/", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    (path,) = (tmp_path / "results").iterdir()
    assert path.name.startswith("no-gpu-") and path.suffix == ".json"
    document = load(path)
    assert document["allow_no_gpu"] and document["summary"]["skipped"] == len(CHECKS)
    assert document["command"] == "python -m ddp_lab.gpu_check --allow-no-gpu --out results/"
    lines = done.stdout.splitlines()
    assert lines[0].startswith("ddp_lab.gpu_check: 0 CUDA GPU(s) (torch ")
    assert "[9/15] ring_all_reduce_nccl: skipped: needs 2 CUDA GPUs; this machine has 0" in lines
    assert report([document]) in done.stdout
    assert lines[-1] == f"results written to {Path('results') / path.name}"


@NO_GPU_HERE
def test_the_file_records_no_absolute_out_path(tmp_path, monkeypatch, capsys):
    # The book's GPU run wrote to the machine's own folder, "--out /root/out/" (issue 45, item 15).
    elsewhere, here = tmp_path / "machine" / "out", tmp_path / "repo"
    here.mkdir()
    monkeypatch.chdir(here)
    assert main(["--allow-no-gpu", "--only", "launch_nccl", "--out", f"{elsewhere}/"]) == 0
    (document,) = stored_results(elsewhere)
    assert document["command"] == "python -m ddp_lab.gpu_check --allow-no-gpu --only launch_nccl --out OUT"
    assert main(["--allow-no-gpu", "--only", "launch_nccl", f"--out={here / 'results'}/"]) == 0
    (document,) = stored_results(here / "results")
    assert document["command"] == "python -m ddp_lab.gpu_check --allow-no-gpu --only launch_nccl --out=results/"
    capsys.readouterr()


@pytest.mark.parametrize("argv, command", [
    (["--out", "results/"], "--out results/"),                          # relative: as typed
    (["--out", "/repo/book/gpu_results/"], "--out book/gpu_results/"),  # inside the folder it ran in
    (["--ou", "/repo/r.json", "--timeout", "90"], "--ou r.json --timeout 90"),  # argparse's abbreviation
    (["--out=/repo"], "--out=."),
    (["--timeout", "90", "--out", "/root/out/"], "--timeout 90 --out OUT"),  # elsewhere: the argument's name
    (["--out", "/repository/r.json"], "--out OUT"),                     # a prefix of the name is not inside
    (["--only", "launch_nccl", "--out=/tmp/x.json"], "--only launch_nccl --out=OUT"),
])
def test_the_recorded_command_keeps_no_absolute_path(argv, command):
    assert recorded_command(argv, cwd="/repo") == f"python -m ddp_lab.gpu_check {command}"


# Absolute paths in a results file's text: a "/" that starts a word, "//" (a URL) excluded.
ABSOLUTE_PATH = re.compile(r"(?:^|(?<=[\s=:'\"(\[]))/(?!/)[^\s'\",)\]]+")
# The one kind allowed: torch's own C++ source file, named in its error messages (NCCL's
# "NCCL error in: /pytorch/torch/csrc/distributed/c10d/NCCLUtils.cpp:93"), a path of the
# machine that built the wheel, not of the one that ran the checks.
TORCH_SOURCE = re.compile(r"^/pytorch/torch/csrc/[\w/.]+:\d+$")


def texts(value, where="$"):
    """Every string in a JSON document, with where it is."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield from texts(item, f"{where}.{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from texts(item, f"{where}[{index}]")
    elif isinstance(value, str):
        yield where, value


def test_absolute_paths_are_found_in_text():
    found = [m.group(0) for text in ("python -m x --out /root/out/", "--out=/tmp/r.json", "see https://a.b/c",
                                     "busbw = algbw x 2(W-1)/W", "7.0 GB/s", "NCCL error in: /pytorch/torch/"
                                     "csrc/distributed/c10d/NCCLUtils.cpp:93, invalid usage")
             for m in ABSOLUTE_PATH.finditer(text)]
    assert found == ["/root/out/", "/tmp/r.json", "/pytorch/torch/csrc/distributed/c10d/NCCLUtils.cpp:93"]
    assert [bool(TORCH_SOURCE.match(path)) for path in found] == [False, False, True]


@pytest.mark.parametrize("path", sorted(RESULTS_DIR.glob("*.json")), ids=lambda path: path.name)
def test_no_committed_results_file_carries_a_path_of_its_machine(path):
    document = json.loads(path.read_text())
    paths = [(where, found) for where, text in texts(document) for found in ABSOLUTE_PATH.findall(text)
             if not TORCH_SOURCE.match(found)]
    assert paths == [], f"{path.name}: absolute paths of the machine that wrote it: {paths}"


def named(document, name):
    return next(check for check in document["checks"] if check["name"] == name)


def broken(change):
    document = copy.deepcopy(dry_run_document())
    change(document)
    return document


@pytest.mark.parametrize("change, says", [
    (lambda d: d["checks"][0].update(status="fine"), "at checks/0/status: 'fine' is not one of"),
    (lambda d: named(d, "all_reduce_bandwidth").update(status="passed"),
     "at checks/7/measurement: None is not of type 'object'"),
    (lambda d: named(d, "host_to_device_copy").update(status="failed"), "/error: None is not of type 'string'"),
    (lambda d: d["checks"][1].update(name="launch_auto"), "checks named more than once: launch_auto"),
    (lambda d: d["machine"].update(gpus=2), "machine.gpus is 2 but 0 device(s) are described"),
    (lambda d: d["summary"].update(skipped=3), "summary says"),
    (lambda d: d.update(date="2026-01-10"), "at date: '2026-01-10' does not match"),
    (lambda d: d.pop("machine"), "'machine' is a required property"),
])
def test_validate_names_what_breaks_the_format(change, says):
    with pytest.raises(ValueError, match="does not follow ddp_lab.gpu_check/1") as raised:
        validate(broken(change))
    assert says in str(raised.value)


def test_write_names_the_file_after_the_gpus_and_the_day(tmp_path):
    document = two_gpu_document(all_reduce_measurement(
        [(1024, [1e-5])], world_size=2, backend="nccl", device="cuda:0", repeats=1, iterations=1))
    assert results_filename(document) == "2x-test-gpu-2026-01-10.json"
    assert write(document, tmp_path / "folder") == tmp_path / "folder" / "2x-test-gpu-2026-01-10.json"
    assert write(document, tmp_path / "mine.json") == tmp_path / "mine.json"
    assert load(tmp_path / "mine.json") == document
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(ValueError, match="bad.json is not JSON"):
        load(tmp_path / "bad.json")


# --- where the results go: --out checked first, the file written whole, never through a link -----


def refused_out(out, capsys):
    """What the command says about ``--out out`` (with --allow-no-gpu, which on a machine
    without a GPU would run nothing and write the file)."""
    with pytest.raises(SystemExit) as exited:
        main(["--allow-no-gpu", "--out", str(out)])
    captured = capsys.readouterr()
    assert exited.value.code == 2
    assert captured.out == ""  # refused before it said it was starting anything
    (line,) = [line for line in captured.err.splitlines() if "error:" in line]
    assert line.startswith(f"python -m ddp_lab.gpu_check: error: argument --out: cannot write the results to "
                           f"{str(out)!r}: ")
    assert line.endswith(". --out takes a .json file, or a folder (created if need be), that you can write to "
                         "and that is not a symbolic link")
    return line


def test_a_bad_out_is_refused_before_anything_starts(tmp_path, capsys):
    target = tmp_path / "precious.txt"
    target.write_text("keep me\n")
    (tmp_path / "link.json").symlink_to(target)
    assert f"{tmp_path / 'link.json'} is a symbolic link (to {target}): the results are never written " \
           f"through one" in refused_out(tmp_path / "link.json", capsys)
    (tmp_path / "dangling.json").symlink_to(tmp_path / "nowhere.json")
    assert "dangling.json is a symbolic link" in refused_out(tmp_path / "dangling.json", capsys)
    (tmp_path / "real").mkdir()
    (tmp_path / "linked").symlink_to(tmp_path / "real")
    assert f"{tmp_path / 'linked'} is a symbolic link (to {tmp_path / 'real'}): name the folder itself" \
        in refused_out(tmp_path / "linked", capsys)
    assert "linked is a symbolic link" in refused_out(tmp_path / "linked" / "new" / "r.json", capsys)
    assert f"{tmp_path / 'precious.txt'} is not a folder" in refused_out(target, capsys)
    assert f"{tmp_path / 'precious.txt' / 'sub'} cannot be created: {target} is not a folder" \
        in refused_out(target / "sub" / "r.json", capsys)
    (tmp_path / "folder.json").mkdir()
    assert f"{tmp_path / 'folder.json'} is a folder" in refused_out(tmp_path / "folder.json", capsys)
    assert target.read_text() == "keep me\n" and not (tmp_path / "nowhere.json").exists()
    assert not list((tmp_path / "real").iterdir())


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write anywhere")
def test_an_out_that_cannot_be_written_is_refused_before_anything_starts(tmp_path, capsys):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o555)
    assert f"{locked} is not writable" in refused_out(locked, capsys)
    assert f"{locked / 'new'} cannot be created: {locked} is not writable" in refused_out(locked / "new", capsys)


@NO_GPU_HERE
def test_results_that_cannot_be_written_are_printed_instead(tmp_path, capsys):
    # The folder is fine before the run; the file's name (GPUs and day) is known only after it.
    target = tmp_path / "precious.txt"
    target.write_text("keep me\n")
    for seconds in (0, 86400):  # today and tomorrow (UTC), should the run cross midnight
        day = time.strftime("%Y-%m-%d", time.gmtime(time.time() + seconds))
        (tmp_path / f"no-gpu-{day}.json").symlink_to(target)
    assert main(["--allow-no-gpu", "--out", str(tmp_path)]) == NOT_WRITTEN == 4
    captured = capsys.readouterr()
    assert captured.err.startswith("python -m ddp_lab.gpu_check: the results file could not be written: "
                                   f"cannot write the results to {tmp_path}{os.sep}no-gpu-")
    assert "is a symbolic link" in captured.err
    text = captured.out.split("the results, as JSON (the file could not be written):\n")[1]
    assert validate(json.loads(text))["allow_no_gpu"]
    assert target.read_text() == "keep me\n"


def test_write_replaces_the_file_whole_and_leaves_nothing_else(tmp_path, monkeypatch):
    document = dry_run_document()
    path = tmp_path / "r.json"
    path.write_text("the old results\n")
    old = path.stat().st_ino
    assert write(document, path) == path
    assert load(path) == document and path.stat().st_ino != old  # a new file, moved into place
    assert path.stat().st_mode & 0o777 == 0o666 & ~umask()  # as open() would make it, not mkstemp's 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]

    def disk_full(descriptor):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", disk_full)
    path.write_text("the old results\n")
    with pytest.raises(OSError, match="No space left"):
        write(document, path)
    assert path.read_text() == "the old results\n"  # untouched, and no half-written file beside it
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]


def test_write_refuses_a_symbolic_link(tmp_path):
    target = tmp_path / "precious.txt"
    target.write_text("keep me\n")
    (tmp_path / "link.json").symlink_to(target)
    with pytest.raises(ValueError, match="link.json is a symbolic link"):
        write(dry_run_document(), tmp_path / "link.json")
    assert target.read_text() == "keep me\n" and (tmp_path / "link.json").is_symlink()


def umask():
    mask = os.umask(0)
    os.umask(mask)
    return mask


# --- measuring: the all-reduce code on gloo, and the arithmetic ----------------------------


def test_bus_bandwidth_is_algbw_times_2_w_minus_1_over_w():
    rows = [(1 << 20, [1e-3, 2e-3, 4e-3])]
    four = all_reduce_measurement(rows, world_size=4, backend="nccl", device="cuda:0", repeats=3, iterations=5)
    (row,) = four["rows"]
    assert row["seconds"] == {"min": 1e-3, "median": 2e-3, "max": 4e-3}
    assert row["algbw"] == pytest.approx((1 << 20) / 2e-3)
    assert row["busbw"] == pytest.approx(row["algbw"] * 2 * 3 / 4)
    assert row["busbw_best"] == pytest.approx((1 << 20) / 1e-3 * 1.5)
    assert four["timer"] == "cuda events" and four["bus_factor"] == bus_factor("all_reduce", 4) == 1.5
    one = all_reduce_measurement(rows, world_size=1, backend="nccl", device="cuda:0", repeats=3, iterations=5)
    assert one["rows"][0]["busbw"] == 0 and one["note"].startswith("one rank: an all-reduce has no other rank")


def test_the_all_reduce_measurement_runs_on_gloo_ranks_and_renders():
    measurement = measure_all_reduce(2, [1024, 4096], repeats=2, iterations=2, backend="gloo", timeout=120)
    assert (measurement["device"], measurement["timer"], measurement["backend"]) == ("cpu", "perf_counter", "gloo")
    assert [row["bytes"] for row in measurement["rows"]] == [1024, 4096]
    for row in measurement["rows"]:
        assert 0 < row["seconds"]["min"] <= row["seconds"]["median"] <= row["seconds"]["max"]
        assert row["busbw"] == pytest.approx(row["algbw"])  # 2(W-1)/W = 1 for W = 2
    document = two_gpu_document(measurement)  # validated by assemble
    text = report([document], "all_reduce")
    assert max(map(len, text.splitlines())) <= 80  # the book's text column
    assert one_line(text).startswith("all-reduce, measured on 2 × Test GPU on 2026-01-10 (driver 550.0, CUDA 12.4, "
                                     "NCCL 2.21.5, torch 2.13.0+cu124) gloo, 2 rank(s) on cpu, float32, 2 repeats "
                                     "of 2 calls per size, timed with perf_counter")
    header = next(i for i, line in enumerate(text.splitlines()) if line.split()[:1] == ["size"])
    assert text.splitlines()[header].split() == ["size", "time", "min", "median", "max", "algbw", "busbw", "busbw",
                                                 "best"]
    assert text.splitlines()[header + 1].split()[:2] == ["1", "KiB"]


def test_the_cpu_examples_check_passes_where_auto_picks_gloo():
    # Without GPUs 'auto' picks gloo; on a GPU machine the same check runs W = GPUs ranks with
    # 'cpu:gloo,cuda:nccl', then one rank more than there are GPUs, with gloo.
    finding = launches.cpu_examples_on_gpus(2, Options(timeout=120))
    assert finding.outcome == ("a CPU tensor all-reduced: 2 rank(s), backend 'gloo': sum 3 on every rank; "
                               "3 rank(s), backend 'gloo': sum 6 on every rank")
    assert [r["sum"] for r in finding.details["ranks_3"]] == [6.0, 6.0, 6.0]


@NO_GPU_HERE
def test_the_chapter_14_check_fails_saying_what_train_py_ran_on():
    # The same torchrun run as on a GPU machine; without GPUs train.py falls back to gloo on the CPU.
    with pytest.raises(CheckFailed) as failed:
        chapter14.one_gpu_per_process(2, Options(timeout=120))
    assert str(failed.value) == ("rank 0 began with '[rank 0] restart 0: WORLD_SIZE=2, backend gloo, devices cpu', "
                                 "not '[rank 0] restart 0: WORLD_SIZE=2, backend nccl, devices cuda:0'")
    assert failed.value.details["command"] == ("torchrun --standalone --nproc_per_node 2 train.py --epochs 1 "
                                               "--samples 256 --snapshot nccl.pt")


def test_elapsed_seconds_on_the_cpu_is_the_clock():
    assert elapsed_seconds(lambda: sum(range(1000)), torch.device("cpu")) > 0


# --- the pages ---------------------------------------------------------------------------


def one_line(text: str) -> str:
    """``text`` with its line breaks and runs of spaces as single spaces: what was wrapped, unwrapped."""
    return " ".join(text.split())


def test_the_pages_say_no_measurement_is_stored_in_an_empty_folder(tmp_path):
    assert gpu_results_text("all_reduce", tmp_path) == NO_MEASUREMENT
    assert no_results_message(tmp_path) == NO_MEASUREMENT
    assert "comes without the book's book/part4_running/gpu_results/ folder" in gpu_results_text(
        "all", tmp_path / "missing")


def test_the_pages_render_a_dry_run_file_as_measuring_nothing(tmp_path):
    write(dry_run_document(), tmp_path)
    text = gpu_results_text("all", tmp_path)
    assert text.startswith("GPU checks, made without a GPU (--allow-no-gpu) on 2026-01-10: torch ")
    assert f"0 passed, 0 failed, {len(CHECKS)} skipped" in text
    assert max(map(len, text.splitlines())) <= 80  # the book's text column
    assert "skipped  train_spanning_two_gpus: train.py under torchrun, each process spanning\n" \
           "         two GPUs\n" \
           "         needs 2 CUDA GPUs; this machine has 0" in text
    assert one_line(text).endswith("host-to-GPU copies: not measured (skipped): needs a CUDA GPU; this machine has 0")
    assert gpu_results_text("host_to_device", tmp_path).startswith("host-to-GPU copies, made without a GPU")
    assert draw_all_reduce_busbw(stored_results(tmp_path)) is None


def test_the_pages_render_a_gpu_file(tmp_path):
    measurement = all_reduce_measurement([(1024, [1e-5, 2e-5]), (1 << 20, [1e-4, 3e-4])], world_size=2,
                                         backend="nccl", device="cuda:0", repeats=2, iterations=20)
    write(two_gpu_document(measurement), tmp_path)
    text = gpu_results_text("all", tmp_path)
    assert max(map(len, text.splitlines())) <= 80  # the book's text column
    assert one_line(text).startswith("GPU checks, measured on 2 × Test GPU on 2026-01-10 (driver 550.0, CUDA 12.4, ")
    assert "nccl, 2 rank(s) on cuda, float32, 2 repeats of 20 calls per size, timed with cuda events" in one_line(text)
    assert "    1 MiB    100 us    200 us    300 us" in text
    copies = gpu_results_text("host_to_device", tmp_path).splitlines()
    assert max(map(len, copies)) <= 80
    header = next(i for i, line in enumerate(copies) if line.split()[:1] == ["size"])
    assert one_line("\n".join(copies[:header + 1])).endswith(
        "host to device (cuda:0), 3 repeats per size, timed with cuda events size pageable pinned pinned/pageable")
    assert copies[header + 1].split()[:5] == ["1", "MiB", "2.10", "GB/s", "10.49"]
    assert "5.00x" in copies[header + 1]
    assert copies[header + 3].split() == ["size", "pageable", "min-max", "pinned", "min-max"]  # the times, apart
    figure = draw_all_reduce_busbw(stored_results(tmp_path))
    assert figure.axes[0].get_legend().get_texts()[0].get_text() == "2 × Test GPU, nccl, 2026-01-10"
    assert measured_on(stored_results(tmp_path)[0]).startswith("measured on 2 × Test GPU on 2026-01-10")


def test_the_book_stores_only_real_gpu_measurements():
    assert RESULTS_DIR == ROOT / "book" / "part4_running" / "gpu_results"
    assert (RESULTS_DIR / "README.md").is_file()  # the folder, documented, even while it holds no file
    for document in stored_results():  # each one follows the format...
        machine = document["machine"]
        assert machine["gpus"] >= 1 and not document["allow_no_gpu"]  # ...and comes from GPUs
        # ...named, with the versions a reader compares with their own machine's
        assert all(device["name"] for device in machine["devices"]) and machine["driver"] != "unknown"
        assert machine["cuda"] and machine["nccl"] and "+cu" in machine["torch"]
    if not stored_results():
        assert gpu_results_text("all_reduce") == NO_MEASUREMENT


def test_the_compiled_ddp_check_runs_on_a_cpu_rank_and_counts_one_graph_per_bucket():
    """ddp_compiled's rank function on one gloo rank, compiling nothing (backend "eager"), on
    Chapter 8c's model and cap with 8 samples a step. (A cap under DDP's first bucket's 1 MiB
    is refused by DDPOptimizer: "First bucket should be smaller/equal to other buckets".)"""
    from ddp_lab.gpu_check.compiled_ddp import on_rank_compiled_ddp

    [report] = ddp_lab.launch(on_rank_compiled_ddp, 1, args=(2, 1), backend="gloo", timeout=300,
                              kwargs={"backend": "eager", "batch": 8})
    assert report["device"] == "cpu" and report["graphs"] == report["buckets"] > 1, report
    assert report["eager"]["losses"] == report["compiled"]["losses"]  # the same training, bit for bit
    assert len(report["eager"]["losses"]) == 3 and report["compiled"]["seconds_per_step"] > 0


def test_the_mixed_precision_check_runs_on_a_cpu_rank():
    from ddp_lab.gpu_check.mixed_precision import on_rank_mixed_precision

    [report] = ddp_lab.launch(on_rank_mixed_precision, 1, args=(2, 1), backend="gloo", timeout=300,
                              kwargs={"widths": (16, 32, 32, 8), "batch": 16})
    fp32, bf16 = report["fp32"], report["bf16"]
    assert report["device"] == "cpu" and fp32["peak_bytes"] is None  # memory figures: on a GPU only
    assert len(fp32["losses"]) == len(bf16["losses"]) == 3 and fp32["losses"] != bf16["losses"]
    assert max(abs(a - b) / abs(a) for a, b in zip(fp32["losses"], bf16["losses"])) < 0.05
