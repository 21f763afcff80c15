"""A failed launch as the reader sees it in a notebook: their code, not the launcher's (Chapter 3).

IPython shows an exception that has a ``_render_traceback_`` method by
calling it, instead of formatting the traceback itself (ipyparallel's
``RemoteError`` shows the errors of its engines this way). ``RankFailed``,
``RankDied`` and ``RanksTimedOut`` (``ddp_lab.launcher.errors``) have one,
which calls ``render`` here. A cell whose rank 1 raised then shows::

    Traceback (most recent call last):
      Cell In[4], line 1, in <module>
        ddp_lab.launch(work, 2)

    Traceback from rank 1 (most recent call last):
      Cell In[3], line 3, in work
        raise ValueError("odd rank")
    ValueError: odd rank

    RankFailed: rank 1 raised ValueError: odd rank

- no frame of the launcher (``ddp_lab/launcher``), in the notebook or in
  the rank: they are the same for every launch and say nothing about the
  reader's code; IPython's own frames are left out too, as IPython does;
- a function defined in a notebook cell is named as IPython names the cell
  (``Cell In[3]``); any other file without the machine's folders: relative
  to the repository (or to site-packages, or to the standard library),
  ``~`` for the home folder and ``<tmp>`` for the temporary one, so that
  what a page of the book shows is the same on every machine.

``str(error)`` and ``error.remote_traceback`` keep the whole text, paths
included, for code that reads them.
"""

from __future__ import annotations

import functools
import os
import re
import site
import sys
import sysconfig
import tempfile
import traceback

_LAUNCHER_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
_REPOSITORY = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# A frame line of Python's tracebacks: '  File "/x/y.py", line 3, in work'.
_FRAME = re.compile(r'^(?P<indent> *)File "(?P<file>[^"]*)", line (?P<line>\d+)(?P<rest>.*)$')
# A path starts after none of these: "/tmp" in "x/tmp" or "<tmp>" is no path of its own.
_PATH_START = r"(?<![\w.~<>/-])"


def render(error):
    """The lines IPython shows for a launch error (see the module doc)."""
    lines = []
    here = clean_traceback("".join(traceback.format_tb(error.__traceback__)))
    if here:
        lines += ["Traceback (most recent call last):", *here, ""]
    there = clean_traceback(getattr(error, "remote_traceback", None) or "")
    if there:
        if there[0].startswith("Traceback (most recent call last)"):
            there[0] = f"Traceback from rank {error.rank} (most recent call last):"
        lines += [*there, ""]
    summary = getattr(error, "summary", None) or str(error)
    return lines + shorten_paths(f"{type(error).__name__}: {summary}").splitlines()


def clean_traceback(text):
    """Python's traceback ``text`` as lines, without launcher or IPython frames, paths shortened.

    A frame is its ``File ...`` line and the lines indented under it (its
    code, the ``^^^`` under it).
    """
    kept, hidden_indent = [], None
    for line in text.rstrip("\n").splitlines():
        frame = _FRAME.match(line)
        if frame:
            hidden = _hidden(frame["file"])
            hidden_indent = len(frame["indent"]) if hidden else None
            if not hidden:
                kept.append(_frame_line(frame))
        elif hidden_indent is not None and _indent(line) > hidden_indent:
            continue  # a line of a hidden frame
        else:
            hidden_indent = None
            kept.append(shorten_paths(line))
    return kept


def _indent(line):
    return len(line) - len(line.lstrip(" "))


def _hidden(filename):
    """Frames of the launcher, and of IPython running the cell."""
    return filename.startswith((_LAUNCHER_DIR, *_shell_dirs()))


def _shell_dirs():
    dirs = []
    for name in ("IPython", "ipykernel"):
        module = sys.modules.get(name)
        if getattr(module, "__file__", None):
            dirs.append(os.path.dirname(os.path.abspath(module.__file__)) + os.sep)
    return dirs


def _frame_line(frame):
    """A frame's first line: the cell's name as IPython gives it, or a shortened path."""
    where = _cell_name(frame["file"]) or f'File "{shorten_paths(frame["file"])}"'
    return f'{frame["indent"]}{where}, line {frame["line"]}{frame["rest"]}'


def _cell_name(filename):
    """``Cell In[3]`` for the file name IPython gave a cell of this kernel, else None."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    format_code_name = getattr(getattr(shell, "compile", None), "format_code_name", None)
    named = format_code_name(filename) if format_code_name is not None else None
    return " ".join(named) if named else None


def shorten_paths(text):
    """``text`` with the machine's folders taken out of every path in it.

    >>> home = os.path.expanduser("~")
    >>> shorten_paths(f'File "{home}/data/x.csv"') == 'File "~/data/x.csv"'
    True
    >>> shorten_paths(os.path.join(_REPOSITORY, "ddp_lab", "models.py"))
    'ddp_lab/models.py'
    """
    for pattern, replacement in _path_rules():
        text = pattern.sub(replacement, text)
    return text


@functools.lru_cache(maxsize=None)
def _path_rules():
    """(pattern, replacement) for each folder, longest first: a folder inside
    another (site-packages in the home folder) is taken out before it."""
    relative = [_REPOSITORY, *_library_dirs()]
    named = [(tempfile.gettempdir(), "<tmp>"), (os.path.expanduser("~"), "~")]
    folders = {os.path.normpath(path): "" for path in relative if path}
    folders.update({os.path.normpath(path): name for path, name in named if path})
    rules = []
    for folder in sorted(folders, key=len, reverse=True):
        if len(folder) <= 1:  # "/" itself: nothing to take out
            continue
        if folders[folder]:
            rules.append((re.compile(_PATH_START + re.escape(folder) + r"(?![\w.-])"),
                          folders[folder]))
        else:
            rules.append((re.compile(_PATH_START + re.escape(folder + os.sep)), ""))
    return rules


def _library_dirs():
    """site-packages and the standard library: their files are named as modules are."""
    paths = sysconfig.get_paths()
    dirs = [paths.get(key) for key in ("purelib", "platlib", "stdlib", "platstdlib")]
    if hasattr(site, "getsitepackages"):
        dirs += site.getsitepackages()
    return [d for d in dirs if d]
