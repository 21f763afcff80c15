"""Open every page of the built book as a reader does, on a phone (390x844) and
on a desktop (1366x900), and check that it reads well (issue 46):

* no page is wider than the screen, and nothing in it is clipped: what cannot
  wrap (a formula, a table, code) scrolls inside its own box, fold-outs too;
* on the desktop, no code or output block is wider than the text column:
  cells are written and print to fit 80 characters (8.43 px each in the
  757 px column). A cell whose lines truly cannot be shorter opts out with the
  tag ``wide-output`` (its block then scrolls, with the shadow book.css
  draws at the edge that hides more text); SCROLLING_CELLS lists them all;
* every image of the article has an alt text that describes it (not a file
  path), and every figure image (a file the build wrote to _images/) sits in a
  ``figure`` with a ``figcaption`` and links to its file, so that a tap opens
  it at full size (book/_ext/book_html.py);
* every "Chapter 8", "Chapters 6, 8 and 12" or "Lab 5" in the prose (``p`` and
  ``li``, not code, not headings) is a link to that page, the number inside
  the link; a page may name itself unlinked;
* a page loads neither the theme's Font Awesome script nor, unless it shows a
  widget, the widget manager.

It reuses the build, the server and the browser of tests/test_book_html.py and
its list of pages (PAGES); one context a width, one tab each.
"""

from __future__ import annotations

import re

import pytest
from test_book_html import (  # noqa: F401  (fixtures, used by name)
    PAGES,
    book,
    browser,
    no_rank_outlives_a_test,
    site,
    toc_pages,
)

WIDTHS = {"phone": {"width": 390, "height": 844}, "desktop": {"width": 1366, "height": 900}}

# Cells tagged wide-output: their blocks may scroll on the desktop. None yet;
# a cell added here needs the tag in its notebook and a reason in this list.
SCROLLING_CELLS: dict[str, str] = {}

SETTLE = """async () => {
    if (window.MathJax && MathJax.startup) await MathJax.startup.promise;
    await document.fonts.ready;
}"""

# What sticks out of the screen: the outermost elements of the article past the
# viewport's right edge that are not inside a box of their own that scrolls.
WIDE = """() => {
    const screen = document.documentElement.clientWidth;
    const width = document.documentElement.scrollWidth;
    if (width <= screen) return {width, screen, culprits: []};
    const culprits = [];
    for (const el of document.querySelectorAll('body *')) {
        const box = el.getBoundingClientRect();
        if (!box.width || box.right <= screen + 1) continue;
        let up = el.parentElement, outermost = true;
        while (up && up !== document.body) {
            if (up.getBoundingClientRect().right > screen + 1
                || getComputedStyle(up).overflowX !== 'visible') { outermost = false; break; }
            up = up.parentElement;
        }
        if (outermost) culprits.push(`<${el.tagName.toLowerCase()} class="${el.className}"> ends at `
            + `${Math.round(box.right)} px: ${(el.innerText || el.outerHTML).trim().slice(0, 80)}`);
    }
    return {width, screen, culprits: culprits.slice(0, 5)};
}"""

# Content cut off by a box that hides its overflow (the theme's inline formulas,
# fold-outs): the visible part of what overflows, past the box's right edge.
CLIPPED = """() => {
    const found = [];
    for (const box of document.querySelectorAll('article.bd-article *')) {
        if (box.scrollWidth <= box.clientWidth + 1) continue;
        if (!['hidden', 'clip'].includes(getComputedStyle(box).overflowX)) continue;
        if (box.closest('mjx-assistive-mml')) continue;   // hidden on purpose, for screen readers
        const edge = box.getBoundingClientRect().right;
        let past = 0;
        for (const el of box.querySelectorAll('*')) {
            if (el.closest('mjx-assistive-mml')) continue;
            const right = el.getBoundingClientRect().right;
            if (el.getBoundingClientRect().width) past = Math.max(past, right - edge);
        }
        if (past > 1) found.push(`<${box.tagName.toLowerCase()} class="${box.className}"> hides `
            + `${Math.round(past)} px: ${box.innerText.trim().replace(/\\s+/g, ' ').slice(0, 80)}`);
    }
    return found;
}"""

# Code and output blocks wider than their box, with their longest line.
CUT_BLOCKS = """() => [...document.querySelectorAll('article.bd-article pre')]
    .filter(pre => pre.scrollWidth > pre.clientWidth + 1 && pre.getBoundingClientRect().width)
    .map(pre => {
        const cell = pre.closest('.cell');
        const source = cell && cell.querySelector('.cell_input pre');
        const lines = pre.textContent.split('\\n');   // textContent: a folded cell counts too
        const longest = lines.reduce((a, b) => (b.length > a.length ? b : a), '');
        return {over: pre.scrollWidth - pre.clientWidth, box: pre.clientWidth,
                kind: pre.closest('.cell_output') ? 'output' : pre.closest('.cell_input') ? 'code cell' : 'literal block',
                folded: !!pre.closest('details:not([open])'),
                optedOut: !!(cell && cell.classList.contains('tag_wide-output')),
                cell: source ? source.textContent.trim().split('\\n')[0].slice(0, 50) : '',
                chars: longest.length, line: longest.slice(0, 80)};
    })"""

IMAGES = """() => [...document.querySelectorAll('article.bd-article img')]
    .filter(img => img.getBoundingClientRect().width)   // a control's static picture, once the control shows, is not
    .map(img => {
        const figure = img.closest('figure');
        const link = img.closest('a[href]');
        return {src: img.getAttribute('src'), alt: img.getAttribute('alt'),
                file: new URL(img.src).pathname.includes('/_images/'),
                figure: !!figure, caption: !!(figure && figure.querySelector('figcaption')),
                link: link ? new URL(link.href).pathname : null, self: new URL(img.src).pathname};
    })"""

# The prose of the article, block by block, with the link of every character.
PROSE = """() => {
    const skip = 'code, pre, kbd, samp, h1, h2, h3, h4, h5, h6, .toctree-wrapper, mjx-container';
    const blocks = new Map();
    const article = document.querySelector('article.bd-article');
    if (!article) return [];   // the search page has none
    const walker = document.createTreeWalker(article, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
        const parent = node.parentElement;
        if (parent.closest(skip)) continue;
        const block = parent.closest('p, li');
        if (!block) continue;
        if (!blocks.has(block)) blocks.set(block, {text: '', links: []});
        const entry = blocks.get(block);
        const a = parent.closest('a[href]');
        const href = a && block.contains(a) ? new URL(a.href).pathname : null;
        entry.text += node.data;
        for (let i = 0; i < node.data.length; i++) entry.links.push(href);
    }
    return [...blocks.values()];
}"""

SCRIPTS = """() => ({
    scripts: [...document.querySelectorAll('script[src]')].map(s => new URL(s.src).pathname),
    views: document.querySelectorAll('script[type="application/vnd.jupyter.widget-view+json"]').length,
})"""

NUMBER = r"\d+[a-z]?\b"
REFERENCE = re.compile(
    rf"\b(?P<kind>Chapters?|Labs?)\s+(?P<numbers>{NUMBER}"
    rf"(?:(?:\s*,\s*|\s*,?\s+(?:and|or|to)\s+|\s*[–-]\s*){NUMBER})*)")


def numbered_pages() -> dict[tuple[str, str], str]:
    """("Chapter", "8b") -> "book/part3_ddp/08b_ddp_in_practice", ("Lab", "5") -> "labs/lab5_torchrun"."""
    pages = {}
    for page in toc_pages():
        stem = page.rsplit("/", 1)[-1].split("_", 1)[0]
        chapter = re.fullmatch(r"(\d+)([a-z]?)", stem)
        lab = re.fullmatch(r"lab(\d+[a-z]?)", stem)
        if chapter:
            pages[("Chapter", str(int(chapter.group(1))) + chapter.group(2))] = page
        elif lab:
            pages[("Lab", lab.group(1))] = page
    return pages


def unlinked_references(name: str, blocks: list[dict], pages: dict, url_of) -> list[str]:
    """Each chapter or lab number in ``blocks`` not inside a link to its page."""
    problems = []
    for block in blocks:
        text, links = block["text"], block["links"]
        for match in REFERENCE.finditer(text):
            kind = "Chapter" if match["kind"].startswith("Chapter") else "Lab"
            for number in re.finditer(NUMBER, match["numbers"]):
                key = (kind, number.group(0).lstrip("0") or "0")
                start = match.start("numbers") + number.start()
                context = text[max(0, start - 40):start + 40].replace("\n", " ")
                if key not in pages:
                    problems.append(f"{kind} {number.group(0)}: no such page in _toc.yml: …{context}…")
                    continue
                target = url_of(pages[key])
                if pages[key] == name:
                    continue  # a page may name itself without a link
                spans = set(links[start:start + len(number.group(0))])
                if spans != {target}:
                    where = f"a link to {spans.pop()}" if spans != {None} and len(spans) == 1 else "no link"
                    problems.append(f"{kind} {number.group(0)} is {where}, not to {target}: …{context}…")
    return problems


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def tabs(browser):  # noqa: F811 (the fixture of test_book_html)
    """One tab at each width, kept for every page (the HTTP cache serves page after page)."""
    contexts = {label: browser.new_context(viewport=size) for label, size in WIDTHS.items()}
    yield {label: context.new_page() for label, context in contexts.items()}
    for context in contexts.values():
        context.close()


def open_page(tab, site, name):  # noqa: F811
    tab.goto(f"{site}/{name}.html", wait_until="load")
    tab.wait_for_load_state("networkidle")
    tab.evaluate(SETTLE)


# --------------------------------------------------------------------------- tests


@pytest.mark.parametrize("name", PAGES)
def test_page_reads_well(name, site, tabs):  # noqa: F811
    problems = []
    pages = numbered_pages()
    for label, tab in tabs.items():
        open_page(tab, site, name)
        wide = tab.evaluate(WIDE)
        if wide["width"] > wide["screen"]:
            problems.append(f"{label}: the page is {wide['width']} px wide on a {wide['screen']} px screen; "
                            + "; ".join(wide["culprits"]))
        problems += [f"{label}: clipped, not scrolled: {clip}" for clip in tab.evaluate(CLIPPED)]
        if label != "desktop":
            continue
        for block in tab.evaluate(CUT_BLOCKS):
            if block["optedOut"]:
                continue
            cell = f" of the cell {block['cell']!r}" if block["cell"] else ""
            folded = " (folded)" if block["folded"] else ""
            problems.append(
                f"{label}: {block['kind']}{cell}{folded} is {block['over']} px wider than its "
                f"{block['box']} px box, a line of {block['chars']} characters: {block['line']!r}")
        for image in tab.evaluate(IMAGES):
            src = image["src"][:80]
            alt = (image["alt"] or "").strip()
            if not alt:
                problems.append(f"image without alt text: {src}")
            elif re.search(r"[/\\]|\.(png|svg|jpe?g|gif)$", alt, re.IGNORECASE) and " " not in alt:
                problems.append(f"image whose alt text is a file path: {alt[:80]}")
            if image["file"]:
                if not image["caption"]:
                    problems.append(f"figure image not in a <figure> with a <figcaption>: {alt[:80] or src}")
                if image["link"] != image["self"]:
                    problems.append(f"figure image not linked to its file (tap to enlarge): {alt[:80] or src}")
        url_of = lambda page: tab.evaluate("p => new URL(p + '.html', location.origin + '/').pathname", page)  # noqa: E731
        problems += unlinked_references(name, tab.evaluate(PROSE), pages, url_of)
        loaded = tab.evaluate(SCRIPTS)
        for script in loaded["scripts"]:
            if script.endswith("/fontawesome.js"):
                problems.append(f"loads the theme's Font Awesome script ({script}), which no icon needs")
            if script.endswith("/embed-amd.js") and not loaded["views"]:
                problems.append(f"loads the widget manager ({script}) but shows no widget")
    assert not problems, f"{name}.html:\n  " + "\n  ".join(problems)


def test_search_icon_leaves_the_query_readable(site, tabs):  # noqa: F811
    """The magnifier of the search page's field sits before the text, not over its first letter."""
    for label, tab in tabs.items():
        open_page(tab, site, "search")
        form = ".bd-search-container form.bd-search"
        icon = tab.locator(f"{form} .fa-magnifying-glass").bounding_box()
        field = tab.locator(f"{form} input").evaluate(
            "i => i.getBoundingClientRect().left + parseFloat(getComputedStyle(i).paddingLeft)")
        assert icon and icon["width"] > 0, f"{label}: the search field's magnifier is not drawn"
        assert icon["x"] + icon["width"] <= field, (
            f"{label}: the magnifier ends at {icon['x'] + icon['width']:.0f} px, over the query, "
            f"whose text starts at {field:.0f} px")


def test_contents_panel_shows_subsections(site, tabs):  # noqa: F811
    """h3 sections are listed, visible, in the page's contents panel (show_toc_level: 2):
    chapter 14's "One DDP step on a GPU" can be reached from it."""
    tab = tabs["desktop"]
    open_page(tab, site, "book/part4_running/14_gpus")
    entry = tab.locator(".bd-sidebar-secondary nav a", has_text="One DDP step on a GPU")
    assert entry.count() == 1, "no entry 'One DDP step on a GPU' in chapter 14's contents panel"
    assert entry.is_visible(), "'One DDP step on a GPU' is in chapter 14's contents panel but hidden"
    heading = tab.locator("article h3", has_text="One DDP step on a GPU")
    assert entry.get_attribute("href") == "#" + heading.evaluate("h => h.closest('section').id")


def test_reference_check_finds_unlinked_numbers():
    """The chapter-reference check itself: the numbers a reader would look up."""
    pages = {("Chapter", "6"): "b/06", ("Chapter", "8"): "b/08", ("Chapter", "12b"): "b/12b",
             ("Lab", "5"): "labs/lab5"}
    text = "You need: Chapters 6, 8 and 12b, and Lab 5."
    links = [None] * len(text)
    six = text.index("6")
    links[six] = "/b/06.html"
    url_of = lambda page: f"/{page}.html"  # noqa: E731
    problems = unlinked_references("b/08", [{"text": text, "links": links}], pages, url_of)
    assert [problem.split(":")[0] for problem in problems] == [
        "Chapter 12b is no link, not to /b/12b.html",
        "Lab 5 is no link, not to /labs/lab5.html",
    ], problems
