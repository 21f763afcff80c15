"""The built book for the browser tests: built once, and again only when what
it is built from has changed.

``tests/test_book_html.py`` opens every page of ``_build/html`` and
``tests/test_pdf.py`` prints two of them. Each used to run
``jupyter-book build`` itself (at least 6 core-seconds even when nothing
changed), and pytest-xdist may run the two files at the same time, in two
workers, both writing ``_build/html``. :func:`built_book` builds under a lock
(``flock``: the second worker waits, then finds the book built), and after a
build that succeeded writes a stamp, ``_build/html/.tests-build.json``, with
the fingerprint of the build's inputs taken *before* the build started.

The book is fresh when the stamp's fingerprint is the one of the inputs now:
every file git tracks or would track (``git ls-files --cached --others
--exclude-standard``) outside ``tests/`` (which ``_config.yml`` excludes from
the build), by path, size and modification time; ``node_modules`` (by the
``.package-lock.json`` npm writes there); and the versions of the packages
that render the pages. Anything else changed, added or removed, and the book
is built again. A build that failed writes no stamp, so the next call builds
again and reports the failure again. A build made outside the tests (CI's
``jupyter-book build`` in ``.ci/run``) leaves no stamp either: the first
browser test builds once more, incrementally (Sphinx rereads nothing that is
unchanged).

Sphinx writes again only the pages whose source changed: a change to the
book's own extensions (``book/_ext``), which rewrite every page's HTML, would
leave the other pages as the old code wrote them. The stamp also records a
fingerprint of those extensions; when it differs, or there is no stamp, the
build writes every page (``--all``).
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.metadata
import json
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / "_build"
HTML = BUILD / "html"
BUILD_LOG = BUILD / "build.log"
STAMP = HTML / ".tests-build.json"
LOCK = BUILD / ".tests-build.lock"
COMMAND = ["build", "-W", "-n", "--keep-going", "."]  # as CI and the README build it
EXTENSIONS = "book/_ext"  # code that writes every page
RENDERERS = ("jupyter-book", "sphinx", "myst-nb", "myst-parser", "sphinx-book-theme", "pydata-sphinx-theme")
ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*m")


class BuildFailed(Exception):
    """``jupyter-book build`` exited with an error; the message is its report."""


def inputs_fingerprint(root: Path = ROOT, under: str | None = None) -> str:
    """A digest of what the build reads: files, node_modules, renderer versions
    (``under``: only the files in that folder)."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            cwd=root, capture_output=True, check=True).stdout.decode()
    entries = []
    for name in sorted(set(filter(None, listed.split("\0"))) | {"node_modules/.package-lock.json"}):
        if name.startswith("tests/") or (under and not name.startswith(under + "/")):
            continue
        try:
            stat = (root / name).stat()
            entries.append([name, stat.st_size, stat.st_mtime_ns])
        except FileNotFoundError:
            entries.append([name, None, None])  # listed but deleted: still a change
    versions = {}
    for package in RENDERERS:
        try:
            versions[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            versions[package] = None
    text = json.dumps({"files": entries, "versions": versions, "python": sys.version})
    return hashlib.sha256(text.encode()).hexdigest()


def recorded(stamp: Path = STAMP) -> dict:
    """The stamp's fingerprints ({} without a stamp)."""
    try:
        return json.loads(stamp.read_text())
    except (FileNotFoundError, ValueError):
        return {}


def is_fresh(fingerprint: str, html: Path = HTML, stamp: Path = STAMP) -> bool:
    """Whether ``html`` is what a build that succeeded made from inputs with ``fingerprint``."""
    return recorded(stamp).get("inputs") == fingerprint and (html / "index.html").exists()


def built_book() -> Path:
    """``_build/html``, built first unless it is fresh; raises :class:`BuildFailed`."""
    BUILD.mkdir(exist_ok=True)
    with LOCK.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # freed when the file closes, also if this process dies
        fingerprint = inputs_fingerprint()
        if is_fresh(fingerprint):
            return HTML
        extensions = inputs_fingerprint(under=EXTENSIONS)
        every_page = ["--all"] if recorded().get("extensions") != extensions else []
        STAMP.unlink(missing_ok=True)
        jupyter_book = Path(sys.executable).with_name("jupyter-book")
        command = [str(jupyter_book) if jupyter_book.exists() else "jupyter-book", *COMMAND, *every_page]
        started = time.time()
        with BUILD_LOG.open("w") as log:
            result = subprocess.run(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
        if result.returncode != 0:
            raise BuildFailed(f"`{' '.join(command)}` exited with {result.returncode}\n"
                              + build_failure_report(started))
        STAMP.write_text(json.dumps({"inputs": fingerprint, "extensions": extensions,
                                     "built": time.strftime("%Y-%m-%d %H:%M:%S")}))
    return HTML


def build_failure_report(started: float) -> str:
    """The build's warnings, and the error of each notebook that failed to execute."""
    lines = ANSI_ESCAPE.sub("", BUILD_LOG.read_text()).splitlines()
    report = list(dict.fromkeys(line for line in lines if "WARNING" in line or "ERROR" in line))
    for err_log in sorted((HTML / "reports").rglob("*.err.log")):
        if err_log.stat().st_mtime >= started:  # written by this build
            tail = ANSI_ESCAPE.sub("", err_log.read_text()).splitlines()[-25:]
            report += ["", f"--- {err_log.relative_to(ROOT)} (end) ---", *tail]
    return "\n".join(report + ["", "--- build log (end) ---", *lines[-15:], f"full log: {BUILD_LOG}"])



if __name__ == "__main__":
    # .ci/run's clean build: the README's command, stamped, so that the browser
    # tests find the book fresh instead of building it a second time.
    try:
        built_book()
    except BuildFailed as failure:
        sys.exit(str(failure))
    print("\n".join(ANSI_ESCAPE.sub("", BUILD_LOG.read_text()).splitlines()[-8:]))
