"""The GitHub Actions workflows (.github/workflows/) are linted, and do what README.md and RELEASING.md say.

actionlint checks each workflow (syntax, expressions, the inputs and runtimes
of the actions used, permissions), with shellcheck on every ``run:`` script;
any finding fails the test. Both come from the package index
(requirements.txt), so the lint runs wherever the suite does. The shell
scripts the workflows and a maintainer run (``.ci/run``, ``tools/*.sh``)
get the same shellcheck.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
WORKFLOWS = ROOT / ".github" / "workflows"
FILES = sorted(WORKFLOWS.glob("*.yml"))


@pytest.fixture(autouse=True)
def no_rank_outlives_a_test():
    """No rank is started here (overrides tests/conftest.py's check)."""
    yield


def tool(name: str) -> str:
    """A command of this environment (requirements.txt installs it), else one on PATH; fails if neither."""
    found = shutil.which(name, path=str(Path(sys.executable).parent)) or shutil.which(name)
    assert found, f"{name} is not installed: python -m pip install -r requirements.txt"
    return found


def actionlint(*paths: Path, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    # shellcheck named explicitly, so that it is never silently off; pyflakes explicitly off
    # (no workflow runs a Python script of its own: `shell: python` steps would need it).
    return subprocess.run([tool("actionlint"), "-no-color", "-shellcheck", tool("shellcheck"), "-pyflakes=",
                           *map(str, paths)], cwd=cwd, capture_output=True, text=True, timeout=120)


def load(name: str) -> dict:
    workflow = yaml.safe_load((WORKFLOWS / name).read_text())
    workflow["on"] = workflow.pop(True, workflow.get("on"))   # YAML 1.1 reads the key `on` as true
    return workflow


def steps(workflow: dict) -> list[dict]:
    return [step for job in workflow["jobs"].values() for step in job["steps"]]


def test_there_are_the_three_workflows():
    assert [path.name for path in FILES] == ["book.yml", "release.yml", "test.yml"]


def test_every_workflow_passes_actionlint_with_shellcheck():
    done = actionlint(*(path.relative_to(ROOT) for path in FILES))
    assert done.returncode == 0 and done.stdout == "", done.stdout + done.stderr


def shell_scripts() -> list[Path]:
    """Every tracked file that starts with a bash shebang."""
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True, check=True)
    scripts = []
    for name in tracked.stdout.split("\0"):
        path = ROOT / name
        if name and path.is_file() and not path.is_symlink():
            with path.open("rb") as file:
                if re.match(rb"#!\s*/(usr/)?bin/(env )?bash\b", file.readline()):
                    scripts.append(path)
    return scripts


def test_every_shell_script_passes_shellcheck():
    scripts = shell_scripts()
    assert {".ci/run", "tools/gpu_run.sh"} <= {str(path.relative_to(ROOT)) for path in scripts}
    done = subprocess.run([tool("shellcheck"), *map(str, scripts)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


def test_actionlint_runs_shellcheck_and_reports_a_finding(tmp_path):
    # The lint above proves something only if it can fail: a mistake of each kind is found.
    bad = tmp_path / ".github" / "workflows" / "bad.yml"
    bad.parent.mkdir(parents=True)
    bad.write_text("on: push\njobs:\n  a:\n    runs-on: ubuntu-latest\n    steps:\n"
                   "      - run: cp $1 ${{ github.event.head_commit.message }}\n"
                   "      - uses: actions/checkout@v5\n        with:\n          no-such-input: 1\n")
    done = actionlint(bad.relative_to(tmp_path), cwd=tmp_path)
    assert done.returncode == 1
    assert "[shellcheck]" in done.stdout and "SC2086" in done.stdout, done.stdout
    assert "[expression]" in done.stdout   # an untrusted input in a script
    assert "no-such-input" in done.stdout


@pytest.mark.parametrize("path", FILES, ids=lambda path: path.name)
def test_no_workflow_names_what_only_this_machine_has(path):
    text = path.read_text()
    for local in ("/work/", "/opt/", "/etc/xdg", "/root", "pypi-more", "/tmp/", "localhost"):
        assert local not in text, f"{path.name} names {local}"


def test_the_tests_run_on_every_push_and_pull_request_with_cis_torch_from_the_cpu_index():
    workflow = load("test.yml")
    assert set(workflow["on"]) == {"push", "pull_request"}
    script = "\n".join(step.get("run", "") for step in steps(workflow))
    pin = re.search(r"python -m pip install (torch==[\d.]+)\s", (ROOT / ".ci" / "run").read_text()).group(1)
    assert f"python -m pip install {pin} --index-url https://download.pytorch.org/whl/cpu" in script
    assert f"python -m pip install {pin} -r requirements.txt" in script
    assert "python -m pip install --upgrade pip" in script
    assert "jupyter-book build -W -n --keep-going ." in script
    assert script.rstrip().endswith("python -m pytest")   # the README's test command, last
    assert f"{pin} --index-url https://download.pytorch.org/whl/cpu" in (ROOT / "README.md").read_text()


def test_the_book_is_deployed_to_pages_from_main():
    workflow = load("book.yml")
    assert workflow["on"]["push"] == {"branches": ["main"]}
    deploy = workflow["jobs"]["deploy"]
    assert deploy["permissions"] == {"pages": "write", "id-token": "write"}
    assert deploy["environment"]["name"] == "github-pages"
    uses = [step.get("uses", "").split("@")[0] for step in steps(workflow)]
    assert "actions/upload-pages-artifact" in uses and "actions/deploy-pages" in uses
    build = "\n".join(step.get("run", "") for step in workflow["jobs"]["build"]["steps"])
    assert "jupyter-book build -W -n --keep-going ." in build


def test_a_tag_publishes_to_pypi_by_trusted_publishing_and_makes_a_github_release():
    workflow = load("release.yml")
    assert workflow["on"] == {"push": {"tags": ["v*"]}}
    assert workflow["permissions"] == {"contents": "read"}
    pypi = workflow["jobs"]["pypi"]
    assert pypi["environment"]["name"] == "pypi" and pypi["permissions"] == {"id-token": "write"}
    (publish,) = [step for step in pypi["steps"] if step.get("uses", "").startswith("pypa/gh-action-pypi-publish")]
    assert not {"password", "user"} & set(publish.get("with", {})), "trusted publishing takes no token"
    assert "secrets." not in (WORKFLOWS / "release.yml").read_text()
    check = "\n".join(step.get("run", "") for step in workflow["jobs"]["dists"]["steps"])
    assert '"$GITHUB_REF_NAME" != "v$version"' in check and "python -m build" in check
    release = workflow["jobs"]["github-release"]
    assert release["needs"] == ["pypi", "pdf"] and release["permissions"] == {"contents": "write"}
    assert "gh release create" in "\n".join(step.get("run", "") for step in release["steps"])
    # the whole-book PDF, built as the README says, attached with the dists
    pdf = "\n".join(step.get("run", "") for step in workflow["jobs"]["pdf"]["steps"])
    assert "python tools/build_pdf.py" in pdf and "python tools/build_pdf.py" in (ROOT / "README.md").read_text()
    downloads = [step["with"] for step in release["steps"] if step.get("uses", "").startswith("actions/download-")]
    assert {"name": "pdf", "path": "dist/"} in downloads, downloads


def test_the_release_notes_come_from_the_changelog_section_of_the_version(tmp_path):
    # the awk program of release.yml, run on CHANGELOG.md for this version
    script = next(step["run"] for step in load("release.yml")["jobs"]["github-release"]["steps"]
                  if "gh release create" in step.get("run", ""))
    program = re.search(r"awk -v heading=\"## \[\$version\]\" '(.*?)'", script, re.S).group(1)
    version = re.search(r'^version = "([^"]+)"$', (ROOT / "pyproject.toml").read_text(), re.M).group(1)
    if not shutil.which("awk"):
        pytest.skip("awk is not installed")
    notes = subprocess.run(["awk", "-v", f"heading=## [{version}]", program, str(ROOT / "CHANGELOG.md")],
                           capture_output=True, text=True, check=True).stdout
    assert notes.strip(), f"CHANGELOG.md has no section ## [{version}]"
    assert "## [" not in notes
