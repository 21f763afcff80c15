"""Build the whole book as one PDF, offline: ``_build/pdf/book.pdf``.

    python tools/build_pdf.py            # builds the HTML first if _build/html is missing
    python tools/build_pdf.py --rebuild  # builds the HTML again first

How: the book's HTML (``jupyter-book build -W -n --keep-going .``, the same
pages the browser tests check) is served on 127.0.0.1 and every page named in
``_toc.yml`` is printed, in that order, by headless Chromium (Playwright's
``page.pdf()``, A4) with the network cut off: the resolver knows no host but
this machine, and every request for another host is stopped and reported, so
the build fails rather than print a page that needed the internet. Before a
page is printed, MathJax has typeset its formulas, its fonts and images are
loaded, its widgets have rendered and its fold-outs (answers, hidden cells)
are open. ``book/_static/print.css`` is the print
stylesheet (no sidebars, bars or buttons, code and output wrapped rather than
cut, the book's controls shown by their static picture); a page that does not
link it yet gets it here. The animation of Chapter 6 and Lab 3 prints its own
strip of key frames (``ddp_lab.draw.allreduce``).

pypdf then puts the chapters behind a title page and a table of contents with
each chapter's page, numbers the pages (a page of numbers, printed by Chromium
too, laid over each page) and adds the outline (bookmarks): the parts of
``_toc.yml``, each chapter under its part.

Links between pages of the book become plain text in the PDF (they would
point to the local server); links to other sites and within a page stay.
``tests/test_pdf.py`` prints three chapters with the same functions.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import html
import io
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

import yaml
from offline_browser import CHROMIUM, CHROMIUM_ARGS, LOCAL_HOSTS, serve  # tools/: shared with the tests

ROOT = Path(__file__).resolve().parents[1]
HTML = ROOT / "_build" / "html"
OUTPUT = ROOT / "_build" / "pdf" / "book.pdf"
PRINT_CSS = ROOT / "book" / "_static" / "print.css"
MARGIN = {"top": "16mm", "bottom": "18mm", "left": "14mm", "right": "14mm"}
# The width of the text on the paper, 210 - 2 x 14 mm in CSS pixels (96 to the
# inch): the page is laid out at this width before it is printed, so that what
# is measured in it (CUT) is what the paper shows.
PAPER_TEXT_WIDTH = round((210 - 28) / 25.4 * 96)
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


class OfflineError(RuntimeError):
    """A page asked for something outside 127.0.0.1 (the PDF is not written)."""


@dataclasses.dataclass
class Entry:
    """One page of ``_toc.yml``: its document name and the caption of its part."""

    name: str
    part: str | None


@dataclasses.dataclass
class Printed:
    """One page of the book printed: its title, its PDF and what was seen in it."""

    entry: Entry
    title: str
    pdf: bytes
    pages: int
    animation_frames: list[int]  # for each animation, the frame images print shows
    problems: list[str]


def toc_entries(toc_file: Path = ROOT / "_toc.yml") -> list[Entry]:
    """Every document named in ``_toc.yml``, in reading order, with its part's caption."""
    toc = yaml.safe_load(toc_file.read_text())
    entries = [Entry(toc["root"], None)]

    def walk(items, part):
        for item in items:
            if "file" in item:
                entries.append(Entry(item["file"], part))
            walk(item.get("sections", []), part)
            walk(item.get("chapters", []), part)

    for part in toc.get("parts", []):
        walk(part.get("chapters", []), part.get("caption"))
    walk(toc.get("chapters", []), None)
    return entries


def build_html() -> None:
    """Build the HTML as the README does (no kernel runs: it takes seconds)."""
    jupyter_book = Path(sys.executable).with_name("jupyter-book")
    command = [str(jupyter_book) if jupyter_book.exists() else "jupyter-book",
               "build", "-W", "-n", "--keep-going", "."]
    print("building the HTML:", " ".join(command[1:]), flush=True)
    result = subprocess.run(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"`jupyter-book build` exited with {result.returncode}:\n{result.stdout[-3000:]}")


@contextlib.contextmanager
def chromium():
    """Headless Chromium with the network cut off; yields a browser context
    that stops every request for another host and records it in ``context.outside``."""
    if not Path(CHROMIUM).exists():
        raise FileNotFoundError(f"{CHROMIUM} not found: `apt-get install chromium` (README, 'Set up, build, test')")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            context = browser.new_context(viewport={"width": PAPER_TEXT_WIDTH, "height": 1000})
            context.outside = []

            def guard(route):
                url = urlsplit(route.request.url)
                if url.scheme in {"data", "blob", "about", "file"} or url.hostname in LOCAL_HOSTS:
                    route.continue_()
                else:
                    context.outside.append(route.request.url)
                    route.abort("blockedbyclient")

            context.route("**/*", guard)
            yield context
        finally:
            browser.close()


# JavaScript run in the page before it is printed ------------------------------

SETTLE = """async () => {
    if (window.MathJax && MathJax.startup) { await MathJax.startup.promise; }
    for (const img of document.images) { img.loading = 'eager'; }
    await Promise.all([...document.images].map(img => img.decode().catch(() => null)));
    await document.fonts.ready;
}"""

PREPARE = """() => {
    // On paper a fold-out (an exercise's answer, a hidden cell) cannot be opened.
    for (const details of document.querySelectorAll('article details')) { details.open = true; }
    // A link to another page of the book would point to the local server.
    for (const a of document.querySelectorAll('article a[href]')) {
        const url = new URL(a.href, location.href);
        if (url.origin === location.origin && url.pathname !== location.pathname) {
            a.removeAttribute('href');
        }
    }
    const h1 = document.querySelector('article h1') || document.querySelector('h1');
    return h1 ? h1.innerText.replace(/[#\\u00b6]\\s*$/, '').trim() : document.title;
}"""

# Visible frame images of each animation as printed (print media emulated).
ANIMATION_FRAMES = """() => [...document.querySelectorAll('.cell_output')]
    .filter(out => out.querySelector('.animation'))
    .map(out => [...out.querySelectorAll('img')].filter(img => {
        const box = img.getBoundingClientRect();
        return box.width > 0 && box.height > 0 && getComputedStyle(img).visibility !== 'hidden';
    }).length)"""

# Code, output and display formulas wider than the paper, which print would cut.
CUT = """() => [...document.querySelectorAll('article pre, article mjx-container[display="true"]')]
    .filter(el => el.scrollWidth > el.clientWidth + 1)
    .map(el => `${el.scrollWidth} px wide in ${el.clientWidth} px: ${el.textContent.trim().slice(0, 60)}`)"""

MATH = """() => ({formulas: document.querySelectorAll('.math').length,
                typeset: document.querySelectorAll('mjx-container').length,
                errors: document.querySelectorAll('mjx-merror').length})"""


def print_page(tab, site: str, entry: Entry) -> Printed:
    """Open one page of the book, wait until it is complete, and print it."""
    problems: list[str] = []
    tab.goto(f"{site}/{entry.name}.html", wait_until="load")
    tab.wait_for_load_state("networkidle")
    views = tab.locator(f"script[type='{WIDGET_VIEW}']").count()
    if views:
        try:
            tab.wait_for_function(f"() => document.querySelectorAll('.widget-subarea').length >= {views}",
                                  timeout=20_000)
        except Exception:
            problems.append(f"only {tab.locator('.widget-subarea').count()} of {views} widgets rendered")
    tab.evaluate(SETTLE)
    math = tab.evaluate(MATH)
    if math["formulas"] and (not math["typeset"] or math["errors"]):
        problems.append(f"formulas not typeset by MathJax: {math}")
    if not tab.locator("link[href$='print.css']").count():
        tab.add_style_tag(content=PRINT_CSS.read_text())
    title = tab.evaluate(PREPARE)
    tab.emulate_media(media="print")
    frames = tab.evaluate(ANIMATION_FRAMES)
    problems.extend(f"cut at the right edge of the paper: {cut}" for cut in tab.evaluate(CUT))
    tab.emulate_media(media=None)  # page.pdf() prints with print media, unless told "screen"
    pdf = tab.pdf(format="A4", print_background=True, margin=MARGIN, prefer_css_page_size=False)
    from pypdf import PdfReader

    return Printed(entry, title, pdf, len(PdfReader(io.BytesIO(pdf)).pages), frames, problems)


def print_pages(entries: list[Entry], html_dir: Path = HTML, context=None, log=print) -> list[Printed]:
    """Print each page of ``entries`` from the built HTML in ``html_dir`` (in
    ``context``, from :func:`chromium`, or a browser of its own); raises
    :class:`OfflineError` if any page asked for another host."""
    printed = []
    with serve(html_dir) as site, _browser(context) as context:
        tab = context.new_page()
        for entry in entries:
            started = time.time()
            page = print_page(tab, site, entry)
            log(f"{page.pages:4d} pages  {time.time() - started:5.1f} s  {entry.name}  ({page.title})"
                + "".join(f"\n      problem: {p}" for p in page.problems))
            printed.append(page)
        tab.close()
        check_offline(context)
    return printed


def check_offline(context) -> None:
    """Raise :class:`OfflineError` naming every request for another host made in ``context``."""
    if context.outside:
        raise OfflineError("requests for other hosts (stopped): " + ", ".join(sorted(set(context.outside))))


def _browser(context):
    """``context`` itself, or a new one from :func:`chromium` if it is None."""
    return contextlib.nullcontext(context) if context is not None else chromium()


# Front matter and page numbers -------------------------------------------------

FRONT_CSS = """
@page { size: A4; margin: 25mm 22mm; }
body { font-family: "DejaVu Serif", serif; color: #222; }
.title { break-after: page; text-align: center; padding-top: 70mm; }
.title h1 { font-size: 28pt; font-weight: normal; margin: 0 0 12mm; }
.title p { font-size: 13pt; margin: 3mm 0; }
h2 { font-size: 20pt; font-weight: normal; margin: 0 0 8mm; }
.part { font-weight: bold; margin: 6mm 0 2mm; font-size: 11.5pt; }
.row { display: flex; font-size: 11pt; margin: 1.2mm 0 1.2mm 6mm; break-inside: avoid; }
.row .dots { flex: 1; border-bottom: 1px dotted #888; margin: 0 2mm 1.2mm; }
"""


def front_matter_html(config: dict, printed: list[Printed], first_page: int) -> str:
    """The title page and the contents, each chapter with the page it starts on."""
    rows, part, page = [], object(), first_page
    for item in printed:
        if item.entry.part != part and item.entry.part:
            rows.append(f'<div class="part">{html.escape(item.entry.part)}</div>')
        part = item.entry.part
        rows.append(f'<div class="row"><span>{html.escape(item.title)}</span>'
                    f'<span class="dots"></span><span>{page}</span></div>')
        page += item.pages
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><style>{FRONT_CSS}</style></head><body>"
            f"<div class='title'><h1>{html.escape(config.get('title', 'The book'))}</h1>"
            f"<p>{html.escape(str(config.get('author', '')))}</p>"
            f"<p>&copy; {html.escape(str(config.get('copyright', '')))}</p></div>"
            f"<h2>Contents</h2>{''.join(rows)}</body></html>")


def numbers_html(count: int, skip: int) -> str:
    """``count`` blank A4 pages, each with its number at the foot (none on the first ``skip``)."""
    pages = "".join(f'<div class="p"><span>{n + 1 if n >= skip else ""}</span></div>' for n in range(count))
    return ("<!DOCTYPE html><html><head><meta charset='utf-8'><style>"
            "@page { size: A4; margin: 0; } body { margin: 0; }"
            ".p { height: 296mm; position: relative; break-after: page; overflow: hidden; }"
            ".p span { position: absolute; bottom: 8mm; width: 100%; text-align: center;"
            " font: 9pt 'DejaVu Sans', sans-serif; color: #444; }"
            f"</style></head><body>{pages}</body></html>")


def render_html(text: str, context=None) -> bytes:
    """Print a page made here (front matter, page numbers) with the same offline browser."""
    with _browser(context) as context:
        tab = context.new_page()
        tab.set_content(text, wait_until="load")
        pdf = tab.pdf(format="A4", print_background=True, prefer_css_page_size=True)
        tab.close()
        check_offline(context)
    return pdf


def assemble(printed: list[Printed], output: Path, config: dict | None = None, context=None) -> Path:
    """Title page, contents, the printed pages, page numbers and outline, into ``output``."""
    from pypdf import PdfReader, PdfWriter

    config = config if config is not None else yaml.safe_load((ROOT / "_config.yml").read_text())
    front_pages = 2
    for _ in range(4):  # the contents may run onto more pages than guessed
        front = PdfReader(io.BytesIO(render_html(front_matter_html(config, printed, front_pages + 1), context)))
        if len(front.pages) == front_pages:
            break
        front_pages = len(front.pages)
    writer = PdfWriter()
    writer.append(front)
    starts = []
    for item in printed:
        starts.append(len(writer.pages))
        writer.append(PdfReader(io.BytesIO(item.pdf)), import_outline=False)
    numbers = PdfReader(io.BytesIO(render_html(numbers_html(len(writer.pages), skip=1), context)))
    for page, number in zip(writer.pages, numbers.pages, strict=True):
        page.merge_page(number, over=True)
        page.compress_content_streams()  # merging leaves the page's drawing uncompressed (2.4 times the size)
    writer.add_outline_item("Contents", 1)
    parts: dict[str, object] = {}
    for item, start in zip(printed, starts, strict=True):
        parent = None
        if item.entry.part:
            if item.entry.part not in parts:
                parts[item.entry.part] = writer.add_outline_item(item.entry.part, start)
            parent = parts[item.entry.part]
        writer.add_outline_item(item.title, start, parent=parent)
    writer.add_metadata({"/Title": str(config.get("title", "")), "/Author": str(config.get("author", ""))})
    writer.page_mode = "/UseOutlines"
    output.parent.mkdir(parents=True, exist_ok=True)
    with output.open("wb") as file:
        writer.write(file)
    return output


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--html", type=Path, default=HTML, help="the built HTML (default: _build/html)")
    parser.add_argument("--output", type=Path, default=OUTPUT, help="the PDF (default: _build/pdf/book.pdf)")
    parser.add_argument("--rebuild", action="store_true", help="build the HTML again first")
    parser.add_argument("--pages", nargs="+", metavar="DOC",
                        help="only these documents of _toc.yml (e.g. book/part3_ddp/08b_ddp_in_practice)")
    args = parser.parse_args(argv)
    started = time.time()
    if args.rebuild or not (args.html / "index.html").exists():
        if args.html != HTML:
            parser.error(f"--rebuild builds {HTML}, not {args.html}")
        build_html()
    entries = toc_entries()
    if args.pages:
        known = {entry.name for entry in entries}
        unknown = [name for name in args.pages if name not in known]
        if unknown:
            parser.error(f"not in _toc.yml: {', '.join(unknown)} (names have no extension, as in _toc.yml)")
        entries = [entry for entry in entries if entry.name in args.pages]
    try:
        with chromium() as context:
            printed = print_pages(entries, args.html, context)
            output = assemble(printed, args.output, context=context)
    except OfflineError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    problems = [f"{item.entry.name}: {p}" for item in printed for p in item.problems]
    from pypdf import PdfReader

    pages = len(PdfReader(output).pages)
    print(f"{output.relative_to(ROOT) if output.is_relative_to(ROOT) else output}: {pages} pages, "
          f"{output.stat().st_size / 2**20:.1f} MiB, {time.time() - started:.0f} s")
    for problem in problems:
        print("problem:", problem, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
