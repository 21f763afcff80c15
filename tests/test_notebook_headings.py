"""A heading stands just before the cells of its section, never between a sentence and the cells it announces.

The book's prose introduces a code cell with a sentence that ends in a colon
("Chapter 13b's replica check catches it:"), and the cell comes next. A
heading placed after such a sentence, in the same markdown cell or at the top
of the next one, cuts the sentence off from the cells it announces: those
cells then run under the new heading, and the new section's opening reads as
if it introduced them. Chapter 8 had it (issue 45, item 1): "## Unused
parameters" and its opening paragraph ended the cell that announced the
`no_sync` slip, so the reader saw "0 all-reduces / replicas differ" under
the unused-parameters heading, right after "DDP notices ... on every rank:".

The rule, for every notebook under book/ and labs/: in the markdown, outside
fenced code, display math and directive fences (`:::`), a line ending in a
colon is not followed, past blank lines, by a heading, neither in its cell nor
(when it is the cell's last line) at the start of the next cell. A colon
followed by a fenced block, a list or display math is followed by what it
announces, and passes. The fix is to split the cell: the heading and its
section's opening go into a markdown cell of their own, just before the cells
of that section.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

NOTEBOOKS = sorted(
    path.relative_to(ROOT).as_posix()
    for folder in ("book", "labs")
    for path in (ROOT / folder).rglob("*.ipynb")
    if ".ipynb_checkpoints" not in path.parts
)

HEADING = re.compile(r"^ {0,3}#{1,6}(\s|$)")
FENCE = re.compile(r"^\s*(`{3,}|~{3,})")
DIRECTIVE = re.compile(r"^\s*:{3,}")  # MyST's ":::{dropdown}" ... ":::"
BLOCK = "<block>"  # what a fenced block or display math stands for: content, not an announcement


def prose_lines(source: str) -> list[str]:
    """The cell's non-blank lines, each fenced block and each display-math block replaced by one BLOCK line."""
    lines, fence, math = [], None, False
    for line in source.splitlines():
        stripped = line.strip()
        if fence:
            if stripped.startswith(fence):
                fence = None
            continue
        if math:
            if stripped.endswith("$$"):
                math = False
            continue
        opened = FENCE.match(line)
        if opened:
            fence = opened.group(1)
            lines.append(BLOCK)
        elif stripped.startswith("$$"):
            math = not (len(stripped) > 2 and stripped.endswith("$$"))  # "$$ ... $$" on one line closes itself
            lines.append(BLOCK)
        elif stripped:
            lines.append(line)
    return lines


def announces(line: str) -> bool:
    """A line of prose that ends in a colon, announcing what comes next."""
    return (line != BLOCK and line.rstrip().endswith(":")
            and not HEADING.match(line) and not DIRECTIVE.match(line))


def headings_after_announcements(cells: list[dict]) -> list[str]:
    """Each heading that comes right after a line ending in a colon, as 'cell N: ...' (N: 0-based cell index)."""
    found = []
    previous_last = None  # the last line of the previous cell, when that cell is markdown
    for index, cell in enumerate(cells):
        if cell["cell_type"] != "markdown":
            previous_last = None
            continue
        source = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
        lines = prose_lines(source)
        if lines and previous_last is not None and announces(previous_last) and HEADING.match(lines[0]):
            found.append(f"cell {index}: {lines[0].strip()!r} opens the cell after a cell ending in "
                         f"{previous_last.strip()[-60:]!r}, whose cells it should follow")
        for before, line in zip(lines, lines[1:]):
            if announces(before) and HEADING.match(line):
                found.append(f"cell {index}: {line.strip()!r} follows {before.strip()[-60:]!r}, which "
                             f"announces the cells after this one: move the heading and its opening to a "
                             f"markdown cell of their own, just before the section's cells")
        previous_last = lines[-1] if lines else None
    return found


@pytest.mark.parametrize("notebook", NOTEBOOKS)
def test_no_heading_cuts_a_sentence_off_from_the_cells_it_announces(notebook):
    cells = json.loads((ROOT / notebook).read_text())["cells"]
    assert headings_after_announcements(cells) == [], notebook


# --- the rule itself, on small notebooks ----------------------------------------------------------


def markdown(text):
    return {"cell_type": "markdown", "metadata": {}, "source": text}


def code(text):
    return {"cell_type": "code", "metadata": {}, "source": text, "outputs": [], "execution_count": None}


NO_SYNC = markdown("Now the slip: the forward inside `no_sync`, the backward outside.\n"
                   "Chapter 13b's replica check catches it:")
UNUSED = markdown("## Unused parameters\n\nDDP waits until every parameter has reported ready.\n"
                  "DDP notices at the start of the next iteration, on every rank:")
SLIP = code("print(forward_inside_backward_outside())")
TWO_HEADS = code("train_two_heads(find_unused_parameters=False)")


def test_chapter_8s_old_layout_is_flagged():
    # Issue 45, item 1: cells 17-19 of Chapter 8 as they were, the heading at the end of the slip's cell.
    old = [code("# the accumulation run"), markdown(NO_SYNC["source"] + "\n\n" + UNUSED["source"]),
           SLIP, TWO_HEADS, markdown("Parameters 4 and 5 ...")]
    assert headings_after_announcements(old) == [
        "cell 1: '## Unused parameters' follows \"Chapter 13b's replica check catches it:\", which announces "
        "the cells after this one: move the heading and its opening to a markdown cell of their own, just "
        "before the section's cells"]


def test_chapter_8s_repaired_layout_passes():
    repaired = [code("# the accumulation run"), NO_SYNC, SLIP, UNUSED, TWO_HEADS, markdown("Parameters 4 and 5 ...")]
    assert headings_after_announcements(repaired) == []


def test_a_heading_at_the_top_of_the_next_markdown_cell_is_flagged_too():
    cells = [NO_SYNC, UNUSED, SLIP, TWO_HEADS]
    assert headings_after_announcements(cells) == [
        "cell 1: '## Unused parameters' opens the cell after a cell ending in \"Chapter 13b's replica check "
        "catches it:\", whose cells it should follow"]


@pytest.mark.parametrize("between", [
    "```python\nprint(1)\n```",            # the announced code is in the cell itself
    "~~~\nplain text\n~~~",
    "$$\nT(n) = \\alpha + n / B\n$$",      # display math
    "$$ T = 3h $$",
    "* a list item\n* and another",        # a list announced by the colon
])
def test_a_colon_followed_by_what_it_announces_then_a_heading_passes(between):
    cells = [markdown(f"The call looks like this:\n\n{between}\n\n## Next section\n\nIts opening.")]
    assert headings_after_announcements(cells) == []


def test_directive_fences_and_headings_are_not_announcements():
    cells = [markdown(":::{dropdown} Answers\n1. Yes.\n:::\n\n## Summary\n"),
             markdown("## Exercises:\n### 1. The first one\n")]
    assert headings_after_announcements(cells) == []


def test_a_colon_inside_a_fenced_block_is_code_not_prose():
    cells = [markdown("```python\nfor x in y:\n```\n## After the block\n")]
    assert headings_after_announcements(cells) == []


def test_a_heading_that_ends_a_cell_before_its_own_code_passes():
    # Lab 5b's layout: each bug's heading ends a cell, and the cells after it are that bug's.
    cells = [markdown("Your diagnosis and fix, then check them:\n\n```python\ncheck_fix(...)\n```\n\n"
                      "## 2. Each rank trains on its own shard"), code("show('uneven_shards')")]
    assert headings_after_announcements(cells) == []
