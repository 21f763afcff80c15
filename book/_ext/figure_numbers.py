"""Figures numbered by chapter: "Fig. 8b.2" is the second figure of Chapter 8b.

Sphinx numbers captioned figures (``numfig``) by section number when the
table of contents is numbered, and otherwise in one sequence over the whole
book, so that Chapter 2's first figure would be "Fig. 4". The book numbers
its chapters itself, in their titles ("8b. ..."), so after Sphinx has
numbered the figures (its TocTreeCollector, on ``env-get-updated``) this
renumbers them per page and prefixes the chapter's number, read from the file
name (``08b_ddp_in_practice`` gives ``8b``; ``lab3_...`` gives ``Lab 3``'s
``L3``). A page without a number keeps plain 1, 2, 3. ``{numref}`` links and
captions both use the new numbers.
"""

from __future__ import annotations

import re

CHAPTER = re.compile(r"(?:^|/)(\d\d)([a-z]?)_[^/]*$")
LAB = re.compile(r"(?:^|/)lab(\d+[a-z]?)_[^/]*$")


def chapter_label(docname: str) -> str | None:
    """``book/part3_ddp/08b_ddp_in_practice`` gives ``"8b"``; a lab ``"L3"``; other pages None."""
    if found := CHAPTER.search(docname):
        return f"{int(found[1])}{found[2]}"
    if found := LAB.search(docname):
        return f"L{found[1]}"
    return None


def number_by_chapter(app, env) -> list[str]:
    """Renumber every page's captioned figures (and tables, code blocks) from 1, after its chapter."""
    changed = []
    for docname, by_type in env.toc_fignumbers.items():
        label = chapter_label(docname)
        for figtype, numbers in by_type.items():
            in_order = sorted(numbers, key=numbers.get)
            renumbered = {figure_id: ((label, n) if label else (n,)) for n, figure_id in enumerate(in_order, 1)}
            if renumbered != numbers:
                by_type[figtype] = renumbered
                changed.append(docname)
    return sorted(set(changed))


def setup(app):
    # After Sphinx's own numbering (its collectors listen with the default priority 500).
    app.connect("env-get-updated", number_by_chapter, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
