"""ddp_lab.debugging (Chapter 13b) and the Lab 5b checker, on real ranks."""

import datetime
import os
import tempfile
import time
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

import ddp_lab
from ddp_lab.checks.debugging import BUGS, check_diagnosis, check_fix, run_lab_script
from ddp_lab.cluster.scripts import book_script
from ddp_lab.debugging import (
    RankTimes,
    WaitComputeTimer,
    compare_replicas,
    dump_flight_record,
    find_straggler,
    fr_analyser,
    read_flight_records,
    records_side_by_side,
    stack_lines,
    stacks_of_hung_job,
    tensor_checksum,
)

# ---- checksums and replicas -------------------------------------------------------------

def test_checksum_sees_one_changed_element_and_a_swap():
    t = torch.arange(10, dtype=torch.float32)
    assert tensor_checksum(t) == tensor_checksum(t.clone())
    changed = t.clone()
    changed[7] = torch.nextafter(changed[7], torch.tensor(100.0))  # one bit
    assert tensor_checksum(changed) != tensor_checksum(t)
    swapped = t.clone()
    swapped[[2, 3]] = swapped[[3, 2]]
    assert tensor_checksum(swapped) != tensor_checksum(t)
    assert tensor_checksum(torch.tensor(5)) != tensor_checksum(torch.tensor(6))  # a 0-d int64 buffer


def _replicas(perturb_rank, perturb):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3))
    if dist.get_rank() == perturb_rank:
        with torch.no_grad():
            getattr(model[1], perturb).add_(1.0)
    report = compare_replicas(model)
    return report.agree, report.differing, report.ranks_that_differ, str(report)


def test_compare_replicas_agree_and_differ_on_real_ranks():
    agree, differing, _, text = ddp_lab.launch(_replicas, 3, args=(None, "running_mean"))[0]
    assert agree and differing == {} and text == "replicas agree: all 7 tensors identical on 3 ranks"
    results = ddp_lab.launch(_replicas, 3, args=(2, "running_mean"))
    assert len({r[3] for r in results}) == 1  # the same verdict on every rank
    agree, differing, ranks, text = results[0]
    assert not agree and differing == {"1.running_mean": (2,)} and ranks == (2,)
    assert "1.running_mean (buffer): on rank 2" in text
    _, differing, _, text = ddp_lab.launch(_replicas, 3, args=(1, "weight"))[0]
    assert differing == {"1.weight": (1,)} and "(parameter)" in text


def _different_models():
    model = torch.nn.Linear(2, 2) if dist.get_rank() == 0 else torch.nn.Linear(2, 2, bias=False)
    try:
        compare_replicas(model)
    except ValueError as error:
        return str(error)


def test_compare_replicas_refuses_different_models():
    messages = ddp_lab.launch(_different_models, 2)
    assert all("different numbers of tensors: [2, 1]" in m for m in messages)
    with pytest.raises(TypeError, match="torch.nn.Module"):
        compare_replicas(torch.ones(2))


# ---- stragglers -------------------------------------------------------------------------

def _timed_steps(slow_rank, steps=4, base=0.25, extra=0.5, slow_steps=None):
    # Every rank computes 0.25 s per step and the slow one 0.5 s more: wide enough
    # margins that a loaded machine's scheduling delays cannot flip the verdict.
    # With 0.05 s and nothing for the others, CI once saw rank 0 wait less than
    # the slow rank; with 0.1 s for all, it once saw a rank of the even run
    # sleep 123 ms too long in 4 steps, past find_straggler's 25% tolerance.
    # slow_steps: the steps in which the slow rank is slow (None: all of them).
    timer = WaitComputeTimer()
    for step in range(steps):
        slow = dist.get_rank() == slow_rank and (slow_steps is None or step in slow_steps)
        with timer.computing():
            time.sleep(base + extra * slow)
        with timer.waiting():
            dist.all_reduce(torch.ones(4))
        timer.step()
    return timer.gather()


def test_find_straggler_on_real_ranks():
    times = ddp_lab.launch(_timed_steps, 3, args=(1,))[0]
    assert [t.rank for t in times] == [0, 1, 2] and all(t.steps == 4 for t in times)
    verdict = find_straggler(times)
    assert verdict.straggler == 1 and verdict.least_waiting == 1 and "rank 1 is the straggler" in str(verdict)
    assert not find_straggler(ddp_lab.launch(_timed_steps, 3, args=(None,))[0])


def test_find_straggler_thresholds_and_bad_input():
    even = [RankTimes(r, 1.0, 0.1, 10) for r in range(4)]
    assert find_straggler(even).straggler is None
    small = even[:3] + [RankTimes(3, 1.05, 0.0, 10)]  # 5 ms per step more: noise
    assert find_straggler(small).straggler is None
    slow = even[:3] + [RankTimes(3, 2.0, 0.0, 10)]
    assert find_straggler(slow).straggler == 3
    assert "computed longest and waited least" in str(find_straggler(slow))
    waits_elsewhere = [RankTimes(0, 1.0, 0.0, 10)] + even[1:3] + [RankTimes(3, 2.0, 0.5, 10)]
    verdict = find_straggler(waits_elsewhere)  # rank 3 computes longest, rank 0 waits least
    assert (verdict.straggler, verdict.least_waiting) == (3, 0)
    assert "computed longest and waited least" not in str(verdict)
    assert "100.0 ms per step more" in str(verdict) and "rank 0 waited least" in str(verdict)
    # printed, a verdict fits the book's pages (80 characters); .sentence is one line
    for verdict in (find_straggler(slow), verdict):
        assert max(map(len, str(verdict).splitlines())) <= 80 and "\n" in str(verdict)
        assert str(verdict).replace("\n", " ") == verdict.sentence
    with pytest.raises(ValueError, match="at least 2 ranks"):
        find_straggler(even[:1])
    with pytest.raises(ValueError, match="tolerance"):
        find_straggler(even, tolerance=-1)


# ---- flight recorder --------------------------------------------------------------------

def _recorded_mismatch(folder):
    os.environ["TORCH_FR_BUFFER_SIZE"] = "16"
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=1))
    dist.all_reduce(torch.ones(3))
    try:
        if dist.get_rank() == 0:
            dist.all_reduce(torch.ones(1))
        else:
            dist.broadcast(torch.ones(1), src=0)
    except RuntimeError:
        dump_flight_record(folder)
    dist.destroy_process_group()


def test_flight_record_of_a_mismatch(tmp_path):
    ddp_lab.launch(_recorded_mismatch, 2, args=(str(tmp_path),), init_process_group=False)
    dumps = read_flight_records(tmp_path)
    assert sorted(dumps) == [0, 1]
    table = records_side_by_side(dumps).splitlines()
    assert table[1].startswith("1") and "differ" not in table[1]
    assert table[2].startswith("2") and "all_reduce [[1]]" in table[2] and "broadcast [[1]]" in table[2]
    assert table[2].endswith("<- differ")
    report = fr_analyser(tmp_path)
    assert "Collective sequence number: 2 has errors" in report
    assert "Culprit rank 1" in report and "COLLECTIVE_TYPE_MISMATCH" in report
    with pytest.raises(FileNotFoundError, match="no flight records"):
        read_flight_records(tmp_path / "empty")


def test_an_analyser_that_reads_no_gloo_dumps_gets_one_line():
    """torch 2.11's analyser (Colab's) asserts the backend is NCCL or XCCL; its
    traceback's last line, as it printed it there, becomes one line that says so."""
    from ddp_lab.debugging.flight_recorder import without_gloo_refusal

    refused = ("Traceback (most recent call last):\n  ...\n"
               "AssertionError: name formatting error? gloo != 'nccl' or 'xccl'")
    line = without_gloo_refusal(refused)
    assert "\n" not in line and "reads NCCL's and XCCL's dumps, not gloo's" in line
    assert f"torch {torch.__version__}" in line
    report = "Collective sequence number: 2 has errors"
    assert without_gloo_refusal(report) is report


# ---- py-spy on a hung torchrun job ------------------------------------------------------

def test_py_spy_finds_both_ranks_and_nothing_is_left():
    script = book_script("hang_mismatch.py")
    job = stacks_of_hung_job(script, ["--timeout", "3"], nproc_per_node=2, timeout=60)
    assert stack_lines(job.stacks[0])[-2:] == ["hang_mismatch.py:31 in log_progress",
                                               "    torch.distributed: all_reduce"]
    assert stack_lines(job.stacks[1])[-2:] == ["hang_mismatch.py:56 in main", "    torch.distributed: barrier"]
    assert job.run.returncode != 0 and "Timed out" in job.run.stderr
    assert job.processes_left() == []


def test_hung_job_past_its_timeout_is_stopped():
    script = book_script("hang_mismatch.py")
    start = time.monotonic()
    job = stacks_of_hung_job(script, ["--timeout", "600"], nproc_per_node=2, settle=30, timeout=20)
    # The script's own timeout is 600 s: ending well before it means ours stopped the job
    # (20 s + settle on an idle machine; no tighter bound, which load could break).
    assert time.monotonic() - start < 300
    assert set(job.stacks) == {0, 1}
    assert job.processes_left() == []


def test_a_job_that_does_not_hang_says_so():
    """print_env.py prints and exits at once: there is no hang to read, and the job says so
    instead of returning empty stacks as if they were where the ranks waited."""
    script = os.path.join(os.path.dirname(__file__), os.pardir, "labs", "scripts", "print_env.py")
    job = stacks_of_hung_job(script, nproc_per_node=2, settle=30, timeout=60)
    assert job.run.returncode == 0, job.run.stderr
    assert not job.hung and job.finished_before_read == [0, 1]
    assert job.report().startswith("the job did not hang: ranks 0, 1 exited before their stack could be read "
                                   "(torchrun's exit code 0). ")
    assert job.processes_left() == []


def test_hung_job_refuses_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match="nproc_per_node must be an int from 1 to 16, got 0"):
        stacks_of_hung_job(book_script("hang_mismatch.py"), nproc_per_node=0)
    with pytest.raises(ValueError, match="timeout must be a number of seconds"):
        stacks_of_hung_job(book_script("hang_mismatch.py"), timeout=-1)
    with pytest.raises(ValueError, match="no such file"):
        stacks_of_hung_job(tmp_path / "missing.py")


# ---- the Lab 5b checker -----------------------------------------------------------------

REFERENCE = {
    "checkpoint_order": dict(cause="collective_order", line=61, ranks=[0]),
    "uneven_shards": dict(cause="uneven_data", line=43, ranks=[2, 3]),
    "batchnorm": dict(cause="unsynchronised_buffer", line=23),
    "ring_sends": dict(cause="blocking_sends", line=21),
    "slow_rank": dict(cause="straggler", line=51, ranks=[2]),
}


@pytest.mark.parametrize("bug", sorted(BUGS))
def test_lab_scripts_fit_the_page_with_their_line_numbers(bug):
    # Lab 5b prints each script with a 4-character line number in front: 76 + 4 = 80
    lines = book_script(BUGS[bug].script).read_text().splitlines()
    wide = [(number, len(line)) for number, line in enumerate(lines, 1) if len(line) > 76]
    assert wide == [], f"{BUGS[bug].script}: lines over 76 characters (number, length): {wide}"


@pytest.mark.parametrize("bug", sorted(BUGS))
def test_reference_diagnoses_pass(bug):
    result = check_diagnosis(bug, **REFERENCE[bug])
    assert result, str(result)


def test_wrong_diagnoses_are_explained():
    result = check_diagnosis("checkpoint_order", cause="uneven_data", line=3, ranks=[1, 2, 3])
    assert result.correct == 0 and [m.kind for m in result.mistakes] == ["wrong_cause", "wrong_line", "wrong_ranks"]
    cause, line, ranks = (str(m) for m in result.mistakes)
    assert "rank 0 waiting in barrier()" in cause
    assert "line 3 is `torchrun --standalone" in line
    assert "not rank(s) 1, 2, 3" in ranks and "rank 0 is the one whose order" in ranks
    result = check_diagnosis("uneven_shards", cause="uneven_data", line=43)
    assert [m.kind for m in result.mistakes] == ["no_ranks"] and "ranks 2 and 3 get 5 samples" in str(result)
    result = check_diagnosis("batchnorm", cause="rank_dependent_seed", line=23)
    assert "running_mean and running_var" in str(result.mistakes[0])
    result = check_diagnosis("slow_rank", cause="straggler", line=51, ranks=0)
    assert "not rank(s) 0" in str(result.mistakes[0])


def test_diagnosis_refuses_bad_input():
    with pytest.raises(ValueError, match="bug must be one of"):
        check_diagnosis("no_such_bug", cause="straggler", line=1)
    with pytest.raises(ValueError, match="cause must be one of .* got 'slow'"):
        check_diagnosis("slow_rank", cause="slow", line=1)
    with pytest.raises(ValueError, match="line must be a line number"):
        check_diagnosis("slow_rank", cause="straggler", line=0)
    with pytest.raises(ValueError, match="ranks must be a rank or a list of ranks"):
        check_diagnosis("slow_rank", cause="straggler", line=51, ranks=["x"])


def _copy_with(tmp_path, bug, old, new):
    source = book_script(BUGS[bug].script).read_text()
    assert source.count(old) == 1
    path = tmp_path / BUGS[bug].script
    path.write_text(source.replace(old, new))
    return path


def test_fixes_pass_and_broken_fixes_are_caught(tmp_path):
    hung = check_fix("ring_sends", book_script(BUGS["ring_sends"].script), timeout=4)
    assert not hung and hung.mistakes[0].kind == "did_not_finish" and "waiting in send()" in str(hung)

    diverged = check_fix("batchnorm", book_script(BUGS["batchnorm"].script))
    assert [m.kind for m in diverged.mistakes] == ["differ"] and "1.running_mean (buffer)" in str(diverged)
    fixed = _copy_with(tmp_path, "batchnorm", "        parameter.grad /= dist.get_world_size()\n",
                       "        parameter.grad /= dist.get_world_size()\n    for buffer in model.buffers():\n"
                       "        if buffer.is_floating_point():\n            dist.all_reduce(buffer)\n"
                       "            buffer /= dist.get_world_size()\n")
    assert check_fix("batchnorm", fixed)

    slow = check_fix("slow_rank", book_script(BUGS["slow_rank"].script))
    assert [m.kind for m in slow.mistakes] == ["still_slow"] and "rank 2 is the straggler" in str(slow)
    fixed = _copy_with(tmp_path, "slow_rank", "if rank == DASHBOARD_RANK:",
                       "if rank == DASHBOARD_RANK and step % 10 == 0:")
    assert check_fix("slow_rank", fixed)


def test_run_lab_script_reports_where_a_hang_waits():
    run = run_lab_script("uneven_shards", timeout=4)
    assert not run.finished
    text = str(run)
    assert "rank 2: waiting in barrier()" in text and "rank 0: waiting in all_reduce()" in text
    with pytest.raises(ValueError, match="world_size must be an int from 2 to 8"):
        run_lab_script("uneven_shards", world_size=1)
    with pytest.raises(ValueError, match="no such file"):
        run_lab_script("not_a_script.py")


def test_what_a_hung_script_writes_in_the_temporary_folder_goes_with_the_run():
    # lab5b_checkpoint_order.py saves a checkpoint in the temporary folder and hangs before
    # it deletes it: the checker runs it in a temporary folder of the run's own.
    def checkpoints():
        return set(Path(tempfile.gettempdir()).glob("lab5b_checkpoint_*.pt"))

    before = checkpoints()
    run = run_lab_script("checkpoint_order", timeout=4)
    assert "rank 0: waiting in barrier()" in str(run)  # past torch.save, in save_checkpoint's barrier
    assert checkpoints() - before == set()


def test_a_rank_paused_in_one_step_is_not_a_straggler():
    # Issue 34: on a loaded machine the correct fix of lab5b_slow_rank.py was
    # judged "still slow": one rank lost its core for a while, and its total
    # computing time passed the tolerance. The median step is what counts.
    even = [RankTimes(r, 0.1, 0.05, 10, step_compute_s=0.01) for r in range(3)]
    paused = RankTimes(3, 0.4, 0.0, 10, step_compute_s=0.011)  # 300 ms lost in one step
    assert find_straggler(even + [paused]).straggler is None
    every_step = RankTimes(3, 0.5, 0.0, 10, step_compute_s=0.05)  # 40 ms more at every step
    assert find_straggler(even + [every_step]).straggler == 3


def test_the_median_step_is_measured_on_real_ranks():
    times = ddp_lab.launch(_timed_steps, 3, args=(1, 5, 0.05, 0.6, {2}))[0]  # rank 1 slow in step 2 only
    assert all(t.step_compute_s is not None and 0.04 < t.step_compute_s < 0.3 for t in times)
    assert times[1].compute_s > times[0].compute_s + 0.4  # the slow step is in the total ...
    assert not find_straggler(times)                       # ... but one slow step makes no straggler
