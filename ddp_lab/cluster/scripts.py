"""The book's scripts (``labs/scripts/``): where they are, and one function of them to show.

Chapters 11 to 14 and Lab 5b run ``train.py``, ``print_env.py`` and the
other scripts under torchrun and Slurm, and print a function of a script
rather than copy it into the page (so the page shows the code that ran).
``book_script`` finds a script in the checkout, or in the installed package
(``pip install ddp-lab``, as on Colab: the wheel carries ``labs/scripts/`` as
``ddp_lab/book_scripts/``, mapped there by ``pyproject.toml``). Nothing is
downloaded. ``script_function`` returns the source of one of its functions.
"""

from __future__ import annotations

import ast
from pathlib import Path

__all__ = ["book_script", "script_names", "scripts_folder", "script_function", "stored_runs_folder"]

STORED_RUNS = ("gpu_results", "cluster_results")  # book/part4_running/<name>: runs measured once, kept


def scripts_folder() -> Path:
    """The folder that holds the book's scripts, for this copy of ddp_lab.

    Installed from a wheel or an sdist: ``ddp_lab/book_scripts/`` beside this
    package's modules. Run from a checkout (an editable install, or the
    repository on ``sys.path``): the repository's own ``labs/scripts/``, the
    repository being the folder that holds this very package and its
    ``pyproject.toml``. The current folder plays no part, so a ``labs/scripts``
    in some folder above the notebook is never run.
    """
    package = Path(__file__).resolve().parents[1]  # ddp_lab/cluster/scripts.py -> ddp_lab
    installed = package / "book_scripts"
    if installed.is_dir():
        return installed
    checkout = package.parent
    if (checkout / "pyproject.toml").is_file() and (checkout / "labs" / "scripts").is_dir():
        return checkout / "labs" / "scripts"
    raise FileNotFoundError(f"the book's scripts are not in this installation of ddp_lab ({package}): neither "
                            f"{installed} nor a checkout's labs/scripts; reinstall it (pip install ddp-lab) or "
                            "run from a clone of the book's repository")


def script_names() -> list[str]:
    """The names ``book_script`` accepts: every file of the book's scripts folder.

    >>> {"train.py", "print_env.py", "train.sbatch"} <= set(script_names())
    True
    """
    return sorted(path.name for path in scripts_folder().iterdir()
                  if path.is_file() and not path.name.startswith((".", "_")) and path.suffix != ".pyc")


def stored_runs_folder(name: str) -> Path:
    """The folder of one kind of stored run: ``"gpu_results"`` (Chapters 5, 6, 9, 14) or
    ``"cluster_results"`` (Chapters 12 and 12b).

    From a checkout: ``book/part4_running/NAME``. Installed from the wheel:
    ``ddp_lab/stored_runs/NAME``, where ``pyproject.toml`` maps those folders,
    so that the pages run on Colab show the same stored runs.
    """
    if name not in STORED_RUNS:
        raise ValueError(f"stored runs are {' or '.join(map(repr, STORED_RUNS))}, got {name!r}")
    package = Path(__file__).resolve().parents[1]
    installed = package / "stored_runs" / name
    if installed.is_dir():
        return installed
    return package.parent / "book" / "part4_running" / name


def book_script(name: str) -> Path:
    """The path of one of the book's scripts (``labs/scripts/NAME``), read where ddp_lab is.

    ``name`` is a file name from :func:`script_names`, such as ``"train.py"``;
    anything else (another name, a path, ``..``) is refused with the list of
    the names there are, before any file is opened.

    >>> book_script("train.py").name
    'train.py'
    """
    if not isinstance(name, str):
        raise TypeError(f"the script's name must be a str such as 'train.py', got {name!r}")
    allowed = script_names()
    if name not in allowed or "/" in name or "\\" in name or ".." in name:
        raise ValueError(f"{name!r} is not one of the book's scripts; the scripts are: {', '.join(allowed)}")
    return scripts_folder() / name


def script_function(path, name: str) -> str:
    """The source of the top-level function ``name`` in the script at ``path``, to show it."""
    source = open(path).read()
    for node in ast.parse(source).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name == name:
            start = min([node.lineno] + [d.lineno for d in node.decorator_list])
            return "\n".join(source.splitlines()[start - 1:node.end_lineno])
    raise ValueError(f"no top-level function or class {name!r} in {path}")
