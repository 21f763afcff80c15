"""Where the book's repository lives, in one place: ``_config.yml``'s ``repository.url``.

Everything that names it follows that line, with the package's version from
``pyproject.toml``:

* the first cell of every notebook, which on Colab installs ddp_lab *at the
  version the notebook belongs to* (``git+URL@vVERSION``, a tag, not the
  moving ``main``), and stops the notebook with one line saying what to do
  when it cannot;
* ``ddp_lab.cluster.scripts.SCRIPTS_URL``, where a pip-installed ddp_lab
  downloads the book's scripts from (the same tag);
* the Colab address in the README and the repository link of the intro.

The launch buttons (Colab, Binder) are built by Jupyter Book from the same
``repository:`` section. ``tests/test_repository.py`` fails when any of these
disagree. Usage, from the repository root::

    python tools/set_repository.py                              # rewrite what follows the config
    python tools/set_repository.py https://github.com/me/fork   # a fork: change the config, then rewrite
    python tools/set_repository.py --check                      # exit 1 if anything disagrees

A release: bump ``version`` in pyproject.toml, run this, commit, then tag
the commit ``v<version>`` and push the tag, so that the notebooks' install
cells find it.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "_config.yml"
GITHUB = re.compile(r"^https://github\.com/(?P<owner>[\w.-]+)/(?P<name>[\w.-]+?)/?$")
_CONFIG_URL = re.compile(r"^(  url: )(\S+)$", re.M)  # the repository: section's url line


def repository_url() -> str:
    """``repository.url`` of ``_config.yml``."""
    import yaml

    return yaml.safe_load(CONFIG.read_text())["repository"]["url"]


def version() -> str:
    """The package's version, from pyproject.toml."""
    match = re.search(r'^version = "([^"]+)"$', (ROOT / "pyproject.toml").read_text(), re.M)
    return match.group(1)


def check_github_url(url: str) -> re.Match:
    match = GITHUB.match(url)
    if match is None:
        raise ValueError(f"the repository must be a GitHub address, https://github.com/OWNER/NAME, got {url!r} "
                         "(Colab opens notebooks from GitHub)")
    return match


def install_cell(url: str, tag: str) -> str:
    """The source of every notebook's first cell (tagged ``remove-input``: the page does not show it)."""
    return f'''# On Colab: install ddp_lab, the book's companion package, at this notebook's version.
import sys
if "google.colab" in sys.modules:
    import subprocess
    SOURCE = "git+{url}@{tag}"
    if subprocess.run([sys.executable, "-m", "pip", "install", "-q", f"ddp_lab @ {{SOURCE}}"]).returncode:
        class InstallFailed(Exception):
            def _render_traceback_(self):  # IPython shows this one line, no traceback
                return [str(self)]
        raise InstallFailed(f"ddp_lab could not be installed from {{SOURCE}} (pip says why above): connect the "
                            "runtime to the internet, or run the notebook in a clone of the repository")'''


def scripts_url(url: str, tag: str) -> str:
    match = check_github_url(url)
    return f"https://raw.githubusercontent.com/{match['owner']}/{match['name']}/{tag}/labs/scripts/"


def notebooks() -> list[Path]:
    return sorted(path for folder in ("book", "labs") for path in (ROOT / folder).rglob("*.ipynb")
                  if ".ipynb_checkpoints" not in path.parts)


def rewrites(url: str, tag: str) -> dict[Path, str]:
    """{file: its text as it should be}, for every file that names the repository."""
    match = check_github_url(url)
    wanted = {}
    cell = install_cell(url, tag)
    for path in notebooks():
        nb = json.loads(path.read_text())
        lines = cell.split("\n")
        nb["cells"][0]["source"] = [line + "\n" for line in lines[:-1]] + [lines[-1]]
        wanted[path] = json.dumps(nb, indent=1, ensure_ascii=False) + "\n"
    scripts = ROOT / "ddp_lab" / "cluster" / "scripts.py"
    wanted[scripts] = re.sub(r'^SCRIPTS_URL = ".*"$', f'SCRIPTS_URL = "{scripts_url(url, tag)}"',
                             scripts.read_text(), flags=re.M)
    readme = ROOT / "README.md"
    wanted[readme] = re.sub(r"https://colab\.research\.google\.com/github/[\w.-]+/[\w.-]+/blob/",
                            f"https://colab.research.google.com/github/{match['owner']}/{match['name']}/blob/",
                            readme.read_text())
    intro = ROOT / "book" / "intro.md"
    wanted[intro] = re.sub(r"\[repository\]\(https://github\.com/[\w.-]+/[\w.-]+\)", f"[repository]({url})",
                           intro.read_text())
    return wanted


def differences(url: str, tag: str) -> list[Path]:
    return [path for path, text in rewrites(url, tag).items() if path.read_text() != text]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("url", nargs="?", help="a new repository address, https://github.com/OWNER/NAME")
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if anything disagrees")
    args = parser.parse_args(argv)
    if args.url:
        check_github_url(args.url)
        if args.check:
            parser.error("--check takes no address: it checks the one in _config.yml")
        CONFIG.write_text(_CONFIG_URL.sub(lambda m: m.group(1) + args.url, CONFIG.read_text(), count=1))
    url, tag = repository_url(), f"v{version()}"
    stale = differences(url, tag)
    if args.check:
        for path in stale:
            print(f"{path.relative_to(ROOT)} does not follow _config.yml ({url}, {tag})")
        return 1 if stale else 0
    for path, text in rewrites(url, tag).items():
        if path in stale:
            path.write_text(text)
            print(f"rewrote {path.relative_to(ROOT)}")
    print(f"repository {url}, notebooks install {tag}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
