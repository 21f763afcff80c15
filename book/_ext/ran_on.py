"""Show under each notebook page's title what its outputs ran on (every page of the book).

``tools/execute_notebook.py`` executes a notebook and records, in its
metadata, the torch and Python of the kernel that ran it, the CPU (model and
cores) and the date::

    metadata["ddp_book"]["ran_on"] = {"torch": "2.13.0", "python": "3.11.9",
                                      "cpu": "AMD EPYC 7B13", "cores": 2, "date": "2026-11-28"}

This extension reads that record from the ``.ipynb`` file itself when Sphinx
reads the page (``doctree-read``), and puts one line below the page's title:

    Outputs on this page: torch 2.13.0, Python 3.11, AMD EPYC 7B13 (2 cores), 2026-11-28

so a reader can tell which torch a page's printed results belong to, and
when a page was last run. Pages that are not notebooks, and notebooks with
no record, get no line (``tests/test_ran_on.py`` fails for a notebook of the
book or the labs without one).
"""

from __future__ import annotations

import json
from pathlib import Path

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.util import logging

logger = logging.getLogger(__name__)

KEYS = ("torch", "python", "cpu", "cores", "date")


def read_record(path) -> dict | None:
    """The ``ran_on`` record of the notebook at ``path``, or None (no record, or not a notebook)."""
    path = Path(path)
    if path.suffix != ".ipynb" or not path.is_file():
        return None
    with open(path, encoding="utf-8") as file:
        metadata = json.load(file).get("metadata", {})
    record = metadata.get("ddp_book", {}).get("ran_on")
    if not isinstance(record, dict) or any(key not in record for key in KEYS):
        return None
    return record


def stamp_text(record: dict) -> str:
    """The line a page shows: ``Outputs on this page: torch 2.13.0, Python 3.11, CPU (2 cores), date``."""
    python = ".".join(str(record["python"]).split(".")[:2])
    cores = record["cores"]
    return (f"Outputs on this page: torch {record['torch']}, Python {python}, {record['cpu']} "
            f"({cores} core{'' if cores == 1 else 's'}), {record['date']}")


def add_stamp(app: Sphinx, doctree: nodes.document) -> None:
    """doctree-read: insert the line below the page's first title (or at the top of a page without one)."""
    docname = app.env.docname
    try:
        record = read_record(app.env.doc2path(docname))
    except (OSError, ValueError) as error:  # an unreadable notebook: say so, the build treats it as an error
        logger.warning(f"ran_on: cannot read the record of {docname}: {error}", location=docname)
        return
    if record is None:
        return
    line = nodes.paragraph(stamp_text(record), stamp_text(record), classes=["ran-on"])
    section = next(iter(doctree.findall(nodes.section)), None)
    if section is not None and section.children and isinstance(section[0], nodes.title):
        section.insert(1, line)
    else:
        doctree.insert(0, line)


def setup(app: Sphinx):
    app.connect("doctree-read", add_stamp)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
