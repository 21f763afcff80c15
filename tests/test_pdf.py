"""The book on paper (tools/build_pdf.py): two chapters printed as the whole
book is, offline, and what the PDF holds checked.

Chapter 6 has formulas, an animation and a control (the cost model);
Chapter 4 has the book's one output line wider than the page, an error
message of gloo's (the cell tagged wide-output). Both are printed from the
built HTML (the build tests/test_book_html.py opens, made once for both and
again only when what it is built from has changed: tests/plumbing/book_build.py),
behind a title page and a table of contents, numbered and with an outline, by
the tool's own functions.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import types
from pathlib import Path

import pytest
from plumbing.book_build import BuildFailed, built_book
from pypdf import PdfReader

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("build_pdf", ROOT / "tools" / "build_pdf.py")
build_pdf = importlib.util.module_from_spec(_spec)
sys.modules["build_pdf"] = build_pdf  # dataclasses look their module up there
_spec.loader.exec_module(build_pdf)

RING = "book/part2_communication/06_ring_allreduce"
WIDE = "book/part2_communication/04_point_to_point"  # the one cell tagged wide-output
LIGATURES = str.maketrans({"\ufb00": "ff", "\ufb01": "fi", "\ufb02": "fl", "\ufb03": "ffi", "\ufb04": "ffl"})


def source(name: str) -> Path:
    return next(ROOT.glob(f"{name}.*"))


@pytest.fixture(scope="module")
def html() -> Path:
    """The built HTML, built first unless it is fresh (the same build as tests/test_book_html.py's)."""
    try:
        return built_book()
    except BuildFailed as error:
        pytest.fail(str(error), pytrace=False)


@pytest.fixture(scope="module")
def book(html, tmp_path_factory):
    """Both chapters printed and put together as tools/build_pdf.py does; the
    browser is closed before any test runs."""
    entries = [entry for entry in build_pdf.toc_entries() if entry.name in (WIDE, RING)]
    output = tmp_path_factory.mktemp("pdf") / "book.pdf"
    with build_pdf.chromium() as context:
        printed = build_pdf.print_pages(entries, html, context, log=lambda line: None)
        build_pdf.assemble(printed, output, context=context)
        outside = list(context.outside)
    reader = PdfReader(output)
    front = len(reader.pages) - sum(item.pages for item in printed)
    chapters, start = {}, front
    for item in printed:
        chapters[item.entry.name] = types.SimpleNamespace(printed=item, pages=reader.pages[start:start + item.pages])
        start += item.pages
    return types.SimpleNamespace(reader=reader, front=front, chapters=chapters, outside=outside)


def text(pages) -> str:
    return "\n".join(page.extract_text() for page in pages).translate(LIGATURES)


def squeezed(string: str) -> str:
    """Without whitespace: a line wrapped on paper reads as the line itself."""
    return "".join(string.split())


def test_title_contents_chapters_page_numbers_and_outline(book):
    assert book.front == 2, f"title page and contents should take 2 pages, took {book.front}"
    assert "Distributed Data Parallel" in text(book.reader.pages[:1])
    wide, ring = book.chapters[WIDE].printed, book.chapters[RING].printed
    assert ring.title == "6. Ring all-reduce", ring.title
    contents = text(book.reader.pages[1:2]).splitlines()
    assert f"{wide.title} 3" in contents and f"{ring.title} {3 + wide.pages}" in contents, contents
    for number, page in enumerate(book.reader.pages[1:], start=2):
        assert page.extract_text().splitlines()[-1] == str(number), f"page {number} is not numbered"
    outline = [(item["/Title"], book.reader.get_destination_page_number(item))
               for item in _flatten(book.reader.outline)]
    assert outline == [("Contents", 1), ("Part II: Communication", 2), (wide.title, 2),
                       (ring.title, 2 + wide.pages)]
    for item in (wide, ring):
        assert not item.problems, f"{item.entry.name}: {item.problems}"


def _flatten(outline):
    for item in outline:
        yield from _flatten(item) if isinstance(item, list) else [item]


def test_formulas_are_typeset(book):
    ring = text(book.chapters[RING].pages)
    assert "2(W − 1)N" in ring, "the formula 2(W-1)N/W of Chapter 6 is not typeset (MathJax's minus sign)"
    for tex in ("\\frac", "\\alpha", "$$", "\\("):
        assert tex not in ring, f"TeX source {tex!r} printed: MathJax did not typeset the page"


def test_code_and_output_print_in_full(book):
    """The longest code line and the longest output line of Chapter 4 (an
    error message of gloo's, one line of 253 characters, which the screen
    scrolls) are printed whole (wrapped), not cut at the edge of the paper."""
    cells = json.loads(source(WIDE).read_text())["cells"]
    shown = [cell for cell in cells
             if not {"remove-input", "remove-cell"} & set(cell.get("metadata", {}).get("tags", []))]
    code = max((line for cell in shown if cell["cell_type"] == "code"
                for line in "".join(cell["source"]).splitlines()), key=len)
    output = max((line for cell in shown if "remove-output" not in cell.get("metadata", {}).get("tags", [])
                  for out in cell.get("outputs", [])
                  for line in "".join(out.get("text", "")).splitlines()), key=len)
    assert len(output) > 100, "no output line longer than the paper is wide left to check"
    printed = squeezed(text(book.chapters[WIDE].pages))
    for line in (code, output):
        assert squeezed(line) in printed, f"cut on paper: {line}"


def test_nothing_leaves_the_machine(book, tmp_path):
    assert book.outside == [], book.outside
    outside = ["https://cdn.jsdelivr.net/npm/mathjax@3/es5/tex-mml-chtml.js", "https://192.0.2.1/figure.png"]
    (tmp_path / "page.html").write_text(f'<html><head><script src="{outside[0]}"></script></head>'
                                        f'<body><h1>Offline</h1><img src="{outside[1]}"></body></html>')
    with pytest.raises(build_pdf.OfflineError) as error:
        build_pdf.print_pages([build_pdf.Entry("page", None)], tmp_path, log=lambda line: None)
    for url in outside:
        assert url in str(error.value)


def test_animations_print_their_key_frames(book):
    chapter = book.chapters[RING]
    frames = chapter.printed.animation_frames
    assert frames, "Chapter 6 printed no animation"
    assert all(count > 1 for count in frames), f"frame images printed by each animation: {frames}"
    images = sum(len(page.images) for page in chapter.pages)
    assert images >= sum(frames), f"the PDF of Chapter 6 holds {images} images, its animations show {frames}"
