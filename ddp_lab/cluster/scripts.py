"""The book's scripts (``labs/scripts/``): where they are, and one function of them to show.

Chapters 11 to 14 run ``train.py`` and ``print_env.py`` under torchrun and
Slurm, and print a function of the script rather than copy it into the page
(so the page shows the code that ran). ``book_script`` finds a script in the
checkout, or downloads it once where ddp_lab was installed with pip (Colab);
``script_function`` returns the source of one of its functions.
"""

from __future__ import annotations

import ast
from pathlib import Path

__all__ = ["SCRIPTS_URL", "book_script", "script_function"]

SCRIPTS_URL = "https://raw.githubusercontent.com/ddp-lab/ddp-book/v0.1.0/labs/scripts/"


def book_script(name: str) -> Path:
    """The path of one of the book's scripts (``labs/scripts/NAME``).

    From the book's repository when ddp_lab runs from a checkout (the
    repository that holds this very package: the current folder plays no
    part, so a ``labs/scripts`` in some folder above it is never run);
    otherwise (ddp_lab installed with pip, as on Colab) the script is
    downloaded once from the book's repository into ``~/.cache/ddp_lab/scripts``.
    """
    checkout = Path(__file__).resolve().parents[2]  # ddp_lab/cluster/scripts.py -> the repository
    candidate = checkout / "labs" / "scripts" / name
    if candidate.is_file():
        return candidate
    cached = Path.home() / ".cache" / "ddp_lab" / "scripts" / name
    if not cached.is_file():
        import urllib.request

        cached.parent.mkdir(parents=True, exist_ok=True)
        try:
            urllib.request.urlretrieve(SCRIPTS_URL + name, cached)
        except OSError as error:
            raise FileNotFoundError(f"labs/scripts/{name} is not here and could not be downloaded from "
                                    f"{SCRIPTS_URL}{name} ({error}); clone the book's repository") from None
    return cached


def script_function(path, name: str) -> str:
    """The source of the top-level function ``name`` in the script at ``path``, to show it."""
    source = open(path).read()
    for node in ast.parse(source).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name == name:
            start = min([node.lineno] + [d.lineno for d in node.decorator_list])
            return "\n".join(source.splitlines()[start - 1:node.end_lineno])
    raise ValueError(f"no top-level function or class {name!r} in {path}")
