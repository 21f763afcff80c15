"""Where the book's repository lives, in one place: ``_config.yml``'s ``repository.url``; and the install cells.

Everything that names the repository follows that line, and every
notebook's install cell follows the package's version in ``pyproject.toml``:

* the first cell of every notebook (tagged ``remove-input``: the page does not
  show it), which on Colab runs ``pip install ddp-lab==VERSION`` (the release
  the notebook belongs to, from PyPI) and stops the notebook with one line
  when pip fails; elsewhere it installs nothing, and stops with one line
  saying how to install the package when ``ddp_lab`` cannot be imported;
* the Colab address in the README, the repository link of the intro, and
  ``pyproject.toml``'s project URLs (PyPI's page links to them).

The launch buttons (Colab, Binder) are built by Jupyter Book from the same
``repository:`` section. ``tests/test_repository.py`` fails when any of these
disagree. Usage, from the repository root::

    python tools/set_repository.py                              # rewrite what follows the config and version
    python tools/set_repository.py https://github.com/me/fork   # a fork: change the config, then rewrite
    python tools/set_repository.py --check                      # exit 1 if anything disagrees

A release (RELEASING.md): bump ``version`` in pyproject.toml, run this,
commit, tag the commit ``v<version>`` and push the tag; the release workflow
publishes that version to PyPI, where the install cells find it.

An address is accepted only in the form ``https://github.com/OWNER/NAME``,
with GitHub's own characters (checked before anything is written):
OWNER is 1 to 39 ASCII letters, digits or single hyphens, with no hyphen at
either end; NAME is 1 to 100 ASCII letters, digits, ``.``, ``_`` or ``-``,
neither ``.`` nor ``..``, and not ending in ``.git`` (that is a clone
address: give the repository's own).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DISTRIBUTION = "ddp-lab"   # the name on PyPI (pyproject.toml's project.name)
_CONFIG_URL = re.compile(r"^(  url: )(\S+)$", re.M)  # the repository: section's url line
_OWNER = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9]|-(?=[A-Za-z0-9])){0,38}")
_NAME = re.compile(r"[A-Za-z0-9._-]{1,100}")
_VERSION = re.compile(r"\d+(\.\d+)*((a|b|rc)\d+)?(\.post\d+)?(\.dev\d+)?")   # PEP 440, public, normalised


def repository_url(root: Path = ROOT) -> str:
    """``repository.url`` of ``_config.yml``."""
    import yaml

    return yaml.safe_load((root / "_config.yml").read_text())["repository"]["url"]


def version(root: Path = ROOT) -> str:
    """The package's version, from pyproject.toml, the one place it is written."""
    match = re.search(r'^version = "([^"]+)"$', (root / "pyproject.toml").read_text(), re.M)
    if match is None or not _VERSION.fullmatch(match.group(1)):
        raise ValueError(f"pyproject.toml's version must be a plain release number such as 0.1.0 or 1.2.0rc1, "
                         f"got {match.group(1) if match else None!r}")
    return match.group(1)


def check_github_url(url: str) -> dict:
    """``{"owner": ..., "name": ...}`` of ``https://github.com/OWNER/NAME``; ValueError naming what is wrong.

    >>> check_github_url("https://github.com/ddp-lab/ddp-book")
    {'owner': 'ddp-lab', 'name': 'ddp-book'}
    """
    form = "https://github.com/OWNER/NAME (Colab opens notebooks from GitHub)"
    if not isinstance(url, str) or not url.startswith("https://github.com/"):
        raise ValueError(f"the repository must be a GitHub address, {form}, got {url!r}")
    parts = url[len("https://github.com/"):].split("/")
    if len(parts) != 2 or not all(parts):
        raise ValueError(f"the repository must be exactly {form}: no trailing '/', no further path, got {url!r}")
    owner, name = parts
    if not _OWNER.fullmatch(owner):
        raise ValueError(f"the owner {owner!r} in {url!r} is not a GitHub account name: 1 to 39 ASCII letters, "
                         "digits or single hyphens, no hyphen at either end")
    if not _NAME.fullmatch(name) or name in (".", ".."):
        raise ValueError(f"the repository name {name!r} in {url!r} is not a GitHub repository name: 1 to 100 "
                         "ASCII letters, digits, '.', '_' or '-', and neither '.' nor '..'")
    if name.lower().endswith(".git"):
        raise ValueError(f"{url!r} is a clone address; give the repository's own, "
                         f"https://github.com/{owner}/{name[:-4]}")
    return {"owner": owner, "name": name}


def install_cell(version: str) -> str:
    """The source of every notebook's first cell, for the release ``version``."""
    requirement = f"{DISTRIBUTION}=={version}"
    return f'''# Installs ddp_lab, the book's companion package, on Colab, at the release this notebook
# belongs to; elsewhere it installs nothing, and says how to install the package if it is missing.
import sys
from importlib.util import find_spec

class DdpLabMissing(Exception):
    def _render_traceback_(self):  # IPython shows this one line, no traceback
        return [str(self)]

if "google.colab" in sys.modules:
    import subprocess
    if subprocess.run([sys.executable, "-m", "pip", "install", "-q", "{requirement}"]).returncode:
        raise DdpLabMissing("{requirement} could not be installed (pip says why above): connect the runtime "
                            "to the internet, or run the notebook in a clone of the book's repository")
elif find_spec("ddp_lab") is None:
    raise DdpLabMissing("ddp_lab is not installed for this kernel's Python ({{}}): pip install {requirement}, "
                        "or pip install -e . in a clone of the book's repository".format(sys.executable))'''


def notebooks(root: Path = ROOT) -> list[Path]:
    return sorted(path for folder in ("book", "labs") for path in (root / folder).rglob("*.ipynb")
                  if ".ipynb_checkpoints" not in path.parts)


def with_install_cell(text: str, cell: str, path: Path) -> str:
    """A notebook's JSON text with its first cell's source set to ``cell``, all else as it was."""
    nb = json.loads(text)
    first = nb["cells"][0] if nb.get("cells") else None
    if first is None or first["cell_type"] != "code" or "remove-input" not in first["metadata"].get("tags", []):
        raise ValueError(f"{path}: the first cell must be the install cell, a code cell tagged remove-input")
    lines = cell.split("\n")
    first["source"] = [line + "\n" for line in lines[:-1]] + [lines[-1]]
    return json.dumps(nb, indent=1, ensure_ascii=False) + "\n"


def rewrites(url: str, release: str, root: Path = ROOT) -> dict[Path, str]:
    """{file: its text as it should be}, for every file that names the repository or the release."""
    where = check_github_url(url)
    wanted = {}
    cell = install_cell(release)
    for path in notebooks(root):
        wanted[path] = with_install_cell(path.read_text(), cell, path)
    readme = root / "README.md"
    wanted[readme] = re.sub(r"https://colab\.research\.google\.com/github/[\w.-]+/[\w.-]+/blob/",
                            f"https://colab.research.google.com/github/{where['owner']}/{where['name']}/blob/",
                            readme.read_text())
    pyproject = root / "pyproject.toml"   # [project.urls], which PyPI's page links to
    wanted[pyproject] = re.sub(r'^((?:Homepage|Changelog) = ")https://github\.com/[\w.-]+/[\w.-]+', rf"\g<1>{url}",
                               pyproject.read_text(), flags=re.M)
    intro = root / "book" / "intro.md"
    wanted[intro] = re.sub(r"\[repository\]\(https://github\.com/[\w.-]+/[\w.-]+\)", f"[repository]({url})",
                           intro.read_text())
    return wanted


def differences(url: str, release: str, root: Path = ROOT) -> list[Path]:
    return [path for path, text in rewrites(url, release, root).items() if path.read_text() != text]


def main(argv=None, root: Path = ROOT) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("url", nargs="?", help="a new repository address, https://github.com/OWNER/NAME")
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if anything disagrees")
    args = parser.parse_args(argv)
    if args.url is not None:
        if args.check:
            parser.error("--check takes no address: it checks the one in _config.yml")
        try:
            check_github_url(args.url)
        except ValueError as error:
            parser.error(str(error))   # exit status 2, nothing written
    config = root / "_config.yml"
    url = args.url if args.url is not None else repository_url(root)
    try:
        release = version(root)
        wanted = rewrites(url, release, root)   # every check, before any file is written
    except ValueError as error:
        parser.error(f"{error} (nothing was changed)")
    stale = [path for path, text in wanted.items() if path.read_text() != text]
    if args.check:
        for path in stale:
            print(f"{path.relative_to(root)} does not follow _config.yml and pyproject.toml ({url}, {release})")
        return 1 if stale else 0
    if args.url is not None:
        config.write_text(_CONFIG_URL.sub(lambda m: m.group(1) + args.url, config.read_text(), count=1))
    for path in stale:
        path.write_text(wanted[path])
        print(f"rewrote {path.relative_to(root)}")
    print(f"repository {url}, notebooks install {DISTRIBUTION}=={release} on Colab")
    return 0


if __name__ == "__main__":
    sys.exit(main())
