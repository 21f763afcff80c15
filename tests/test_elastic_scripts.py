"""The two scripts of Chapter 12's late-joining node: start_when.py and elastic_join.py's refusals.

The elastic run itself (two torchrun agents, --nnodes 1:2) is checked by nbval
on book/part4_running/12_multi_node.ipynb, cell "A node that joins late".
"""

import subprocess
import sys
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parents[1] / "labs" / "scripts"


def run(script, *args, timeout=60):
    return subprocess.run([sys.executable, str(SCRIPTS / script), *map(str, args)],
                          capture_output=True, text=True, timeout=timeout)


def test_start_when_runs_the_command_once_the_file_exists(tmp_path):
    ready = tmp_path / "running"
    ready.touch()
    result = run("start_when.py", ready, "--", sys.executable, "-c", "print('started')")
    assert result.returncode == 0 and result.stdout == "started\n"


def test_start_when_gives_up_and_says_what_it_did_not_start(tmp_path):
    result = run("start_when.py", tmp_path / "never", "--limit", "0.2", "--", "torchrun", "x.py")
    assert result.returncode == 1
    assert "never did not appear within 0.2 s; torchrun was not started" in result.stderr


def test_start_when_refuses_a_missing_command_and_a_bad_limit(tmp_path):
    assert "no command given: put it after --" in run("start_when.py", tmp_path / "f").stderr
    assert "no command given" in run("start_when.py", tmp_path / "f", "--").stderr
    assert "--limit must be a positive number of seconds, not -1.0" in \
        run("start_when.py", tmp_path / "f", "--limit", "-1", "--", "echo").stderr


def test_elastic_join_refuses_a_size_below_one():
    result = run("elastic_join.py", "--until-world-size", "0")
    assert result.returncode == 1
    assert "--until-world-size must be 1 or more, not 0" in result.stderr
