"""Build the book, then open every page of it in headless Chromium with no
network, as a reader does: on a desktop (1366x900) and on a phone (360x800,
the narrowest of the 360-414 px phones the book is read on).

``test_page_in_browser[page]``: the browser console stays clean, nothing is
fetched from outside 127.0.0.1, no Python traceback is shown (except in cells
tagged ``raises-exception``), formulas are typeset, and animations and
widgets render and respond. The book's own controls (ddp_lab/widgets) are
moved one by one and must show Python's answer for each new setting
(tests/widget_pages.py).

``test_page_reads_well[page]`` (issue 46):

* no page is wider than the screen, and nothing in it is clipped: what cannot
  wrap (a formula, a table, code) scrolls inside its own box, fold-outs too;
* on the desktop, no code or output block is wider than the text column:
  cells are written and print to fit 80 characters (8.43 px each in the
  757 px column). A cell whose lines truly cannot be shorter opts out with the
  tag ``wide-output`` (its block then scrolls, with the shadow book.css
  draws at the edge that hides more text); SCROLLING_CELLS lists them all;
* every image of the article has an alt text that describes it (not a file
  path), and every figure image (a file the build wrote to _images/) sits in a
  ``figure`` with a ``figcaption``, links to its file, so that a tap opens
  it at full size (book/_ext/book_html.py), and carries its natural width
  (drawn at 2x by ddp_lab.draw);
* on the phone, every figure and every picture of a control keeps its text
  at least 8 px, scrolling in its own box, whose edge shadow shows only
  while there is more (ddp_lab/widgets/js/wide_pictures.css); animation
  players fit the column, their buttons on one line;
* every "Chapter 8", "Chapters 6, 8 and 12" or "Lab 5" in the prose (``p`` and
  ``li``, not code, not headings) is a link to that page, the number inside
  the link; a page may name itself unlinked;
* a page loads neither the theme's Font Awesome script nor, unless it shows a
  widget, the widget manager.

Each page is opened once at each width, and every check of both tests runs
on that visit (``PageVisits``): first the phone's, then, on the desktop, the
measurements of the untouched page, then the clicks. Each test then asserts
on its own page's problems, so a failure names the page and the check as
before. The book is built only when what it is built from has changed
(tests/plumbing/book_build.py).

With ``--screenshots``, screenshots of every page (desktop) go to
``_build/screenshots/``, and of two states of each control to
``_build/screenshots/controls/``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import os
import re
import subprocess
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml
from offline_browser import CHROMIUM, CHROMIUM_ARGS, LOCAL_HOSTS, serve  # tools/offline_browser.py
from plumbing.book_build import BUILD, BuildFailed, built_book, inputs_fingerprint, is_fresh
from widget_pages import exercise_controls

from ddp_lab.draw import COLUMN_PX, MIN_TEXT_PX, PHONE_MIN_TEXT_PX

ROOT = Path(__file__).resolve().parents[1]
EXECUTED = BUILD / "jupyter_execute"  # the notebooks as executed by the build
# The phone first: the desktop's visit ends with clicks that change the page.
WIDTHS = {"phone": {"width": 360, "height": 800}, "desktop": {"width": 1366, "height": 900}}
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def toc_pages() -> list[str]:
    """Every document named in _toc.yml, in reading order."""
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    pages = [toc["root"]]

    def walk(entries):
        for entry in entries:
            if "file" in entry:
                pages.append(entry["file"])
            walk(entry.get("sections", []))
            walk(entry.get("chapters", []))

    walk(toc.get("parts", []))
    walk(toc.get("chapters", []))
    return pages


PAGES = ["index"] + toc_pages() + ["genindex", "search"]  # every page the build writes


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(autouse=True)
def no_rank_outlives_a_test():
    """Replaces the check of tests/conftest.py for this module: no rank is started
    here, and the browser (a grandchild of pytest, under Playwright's driver) is
    meant to outlive each test."""
    yield


@pytest.fixture(scope="module")  # closed before the next test module runs
def book() -> Path:
    """The book built exactly as CI and the README build it, unless it is fresh."""
    try:
        return built_book()
    except BuildFailed as error:
        pytest.fail(str(error), pytrace=False)


@pytest.fixture(scope="module")  # closed before the next test module runs
def site(book):
    """Serve the built HTML on 127.0.0.1 (ephemeral port); yields the base URL."""
    with serve(book) as url:
        yield url


@pytest.fixture(scope="module")  # closed before the next test module runs
def browser():
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} not found: `apt-get install chromium`", pytrace=False)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture(scope="module")
def tabs(browser):
    """One tab at each width, kept for every page, as a reader going from page
    to page in the book has.

    Its renderer process, and the theme's scripts, MathJax and the widget
    libraries in the HTTP cache, serve page after page: opening each page in a
    tab of its own took about three times the CPU to load here (73 core-seconds
    against 25 for the book's 28 pages), the most of any check of this file.
    Each page is still a new document: nothing of the page before runs in it.
    """
    contexts = {label: browser.new_context(viewport=size) for label, size in WIDTHS.items()}
    yield {label: context.new_page() for label, context in contexts.items()}
    for context in contexts.values():
        context.close()


@pytest.fixture(scope="module")
def visits(site, tabs, screenshots):
    """``visits(name)``: what was found on the page ``name``, opened the first time it is asked for."""
    return PageVisits(site, tabs, screenshots)


# --------------------------------------------------------------------------- helpers


def notebook_outputs(page: str) -> list[dict]:
    """The outputs of the executed notebook behind a page ([] for Markdown pages)."""
    path = EXECUTED / f"{page}.ipynb"
    if not path.exists():
        return []
    cells = json.loads(path.read_text())["cells"]
    return [output for cell in cells for output in cell.get("outputs", [])]


def has_animation(outputs) -> bool:
    return any('class="animation"' in "".join(o.get("data", {}).get("text/html", ""))
               for o in outputs)


def has_widgets(outputs) -> bool:
    return any(WIDGET_VIEW in o.get("data", {}) for o in outputs)


class Problems(list):
    """Everything that went wrong while a page was open."""

    @contextlib.contextmanager
    def watching(self, page):
        """Note what goes wrong in ``page`` until the block ends."""
        def request(request):
            url = urlsplit(request.url)
            if url.scheme in {"http", "https", "ws", "wss"} and url.hostname not in LOCAL_HOSTS:
                self.append(f"request leaves the machine (blocked): {request.url}")

        # A listener, not a route: routing turns the HTTP cache off. The
        # browser's resolver rules (CHROMIUM_ARGS) make such a request fail.
        listeners = {
            "request": request,
            "console": lambda m: m.type == "error" and self.append(
                f"console error: {m.text} ({m.location.get('url', '')})"),
            "pageerror": lambda e: self.append(f"JavaScript exception: {e}"),
            "requestfailed": lambda r: self.append(f"request failed: {r.url} ({r.failure})"),
            "response": lambda r: r.status >= 400 and self.append(f"HTTP {r.status}: {r.url}"),
        }
        for event, listener in listeners.items():
            page.on(event, listener)
        try:
            yield
        finally:
            for event, listener in listeners.items():
                page.remove_listener(event, listener)


# JavaScript run in the page --------------------------------------------------

SETTLE = """async () => {
    if (window.MathJax && MathJax.startup) await MathJax.startup.promise;
    await document.fonts.ready;
}"""

# Cell outputs showing a Python traceback, outside cells tagged raises-exception.
TRACEBACKS = """() => [...document.querySelectorAll('.cell_output')]
    .filter(out => !out.closest('.tag_raises-exception'))
    .filter(out => out.querySelector('.output.error, .output.traceback')
                   || out.innerText.includes('Traceback (most recent call last)'))
    .map(out => out.innerText.slice(0, 500))"""

MATH = """() => ({
    formulas: document.querySelectorAll('.math').length,
    typeset: document.querySelectorAll('mjx-container').length,
    errors: document.querySelectorAll('mjx-merror').length,
})"""

ANIMATIONS = """() => [...document.querySelectorAll('.animation')].map(animation => {
    const img = animation.querySelector('img');
    const box = img.getBoundingClientRect();
    const icons = [...animation.querySelectorAll('.anim-buttons button')].map(button => {
        const icon = button.querySelector('i, svg');
        const size = icon ? icon.getBoundingClientRect() : {width: 0, height: 0};
        return {title: button.title, width: size.width, height: size.height,
                font: icon ? getComputedStyle(icon).fontFamily : ''};
    });
    return {width: box.width, height: box.height, naturalWidth: img.naturalWidth, icons};
})"""

FONT_LOADED = """family => [...document.fonts].some(
    face => face.family.replace(/["']/g, '') === family && face.status === 'loaded')"""


# Whether what a click should change has changed (it is compared with ``before``).
FRAME_CHANGED = "before => document.querySelector('.animation img').getAttribute('src') !== before"
READOUTS_CHANGED = """before => JSON.stringify([...document.querySelectorAll('.widget-readout')]
    .map(readout => readout.innerText)) !== JSON.stringify(before)"""


def changed(page, condition, before, seconds: float = 10) -> bool:
    """Wait until ``condition(before)`` holds in the page; False if it still
    does not after ``seconds`` (a bound for a busy machine, not a delay)."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    try:
        page.wait_for_function(condition, arg=before, timeout=seconds * 1000)
    except PlaywrightTimeout:
        return False
    return True


def check_animations(page, problems):
    animations = page.evaluate(ANIMATIONS)
    if not animations:
        problems.append("the notebook has an animation but the page shows none")
    for number, animation in enumerate(animations):
        if not (animation["width"] > 0 and animation["height"] > 0 and animation["naturalWidth"] > 0):
            problems.append(f"animation {number}: frame image not shown: {animation}")
        for icon in animation["icons"]:
            if icon["width"] == 0 or icon["height"] == 0:
                problems.append(f"animation {number}: button {icon['title']!r} has no icon")
            elif "FontAwesome" in icon["font"] and not page.evaluate(FONT_LOADED, "FontAwesome"):
                problems.append(f"animation {number}: Font Awesome font not loaded")
    # Stepping must show another frame.
    img = page.locator(".animation img").first
    before = img.get_attribute("src")
    page.locator(".animation button[title='Next frame']").first.click()
    if not changed(page, FRAME_CHANGED, before):
        problems.append("animation: 'Next frame' did not change the frame")


def check_widgets(page, problems):
    try:
        # ipywidgets' controls carry .jupyter-widgets; the book's own (anywidgets) .ddp-control
        page.wait_for_selector(".jupyter-widgets, .ddp-control", timeout=15_000)
    except Exception:
        problems.append("the notebook has widgets but none rendered (.jupyter-widgets, .ddp-control)")
        return
    views = page.locator("script[type='application/vnd.jupyter.widget-view+json']").count()
    rendered = page.locator(".widget-subarea").count()
    if rendered < views:
        problems.append(f"only {rendered} of {views} widget views rendered")
    # A Play widget linked to a slider must move the slider in the static page.
    if page.locator(".widget-play").count():
        readouts = page.locator(".widget-readout")
        before = readouts.all_inner_texts()
        page.locator(".widget-play button").first.click()
        if not changed(page, READOUTS_CHANGED, before):
            problems.append(f"clicking Play did not move the linked widgets (readouts {before})")


def launch_links(name: str) -> dict[str, str]:
    """The Colab and Binder links a notebook page must offer (from _config.yml's repository)."""
    config = yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]
    repo = urlsplit(config["url"]).path.strip("/")
    branch = config.get("branch", "main")
    return {
        "Colab": f"https://colab.research.google.com/github/{repo}/blob/{branch}/{name}.ipynb",
        "Binder": f"https://mybinder.org/v2/gh/{repo}/{branch}?urlpath=lab/tree/{name}.ipynb",
    }


def check_launch_buttons(page, name, problems):
    links = page.evaluate("() => [...document.querySelectorAll('a[href]')].map(a => a.href)")
    for service, url in launch_links(name).items():
        if url not in links:
            problems.append(f"no {service} launch button linking to {url}")



# Checks of test_page_reads_well ----------------------------------------------

# Cells tagged wide-output, whose blocks may scroll on the desktop: {(page, the
# cell's first line): why its lines cannot be shorter}. A cell tagged in its
# notebook needs an entry here, and an entry a tagged cell
# (test_every_scrolling_cell_is_listed_with_its_reason).
SCROLLING_CELLS: dict[tuple[str, str], str] = {
    ("book/part2_communication/04_point_to_point", "def receive_into(shape, dtype):"):
        "gloo's own error message, one line from C++, shown as the reader's run prints it",
}

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
                link: link ? new URL(link.href).pathname : null, self: new URL(img.src).pathname,
                natural: !!img.style.width};
    })"""

# Each wide picture as shown (ddp_lab/widgets/js/wide_pictures.css): a figure
# image (a file in _images/, in its link) or the picture of one of the book's
# controls (an <svg> with a width, in common.js's pictureBox): whether it is
# in its box, its width shown and natural (the style MyST-NB writes, the
# svg's width; a figure without one fails on the desktop), whether the box
# scrolls and how opaque the shadow at the box's edge is.
WIDE_PICTURES = """() => [
    ...[...document.querySelectorAll('article.bd-article img')]
        .filter(img => new URL(img.src).pathname.includes('/_images/'))
        .map(img => ({picture: img, box: img.closest('a'), natural: parseFloat(img.style.width) || 0,
                      alt: img.getAttribute('alt') || img.getAttribute('src')})),
    ...[...document.querySelectorAll('.ddp-control svg[width]')]
        .map(svg => ({picture: svg, box: svg.parentElement.closest('.ddp-picture'),
                      natural: parseFloat(svg.getAttribute('width')), alt: svg.getAttribute('aria-label') || ''})),
].map(({picture, box, natural, alt}) => ({
    alt: alt.slice(0, 60), boxed: !!box, natural, shown: picture.getBoundingClientRect().width,
    scrolls: !!box && box.scrollWidth > box.clientWidth + 1,
    shadow: box ? parseFloat(getComputedStyle(box, '::after').opacity) : null}))"""

# Animation players that do not fit their column: wider than the cell's output,
# whose box then scrolls them, or with their buttons broken onto two lines.
WIDE_PLAYERS = """() => [...document.querySelectorAll('article.bd-article .animation')]
    .map(player => ({player, width: player.getBoundingClientRect().width,
                     rows: new Set([...player.querySelectorAll('.anim-buttons button')]
                                   .map(button => Math.round(button.getBoundingClientRect().top))).size}))
    .filter(({player, width, rows}) => rows > 1
            || width > player.closest('.cell_output').getBoundingClientRect().width + 1)
    .map(({player, width, rows}) => `${Math.round(width)} px, buttons on ${rows} line(s): `
                                    + (player.querySelector('img').getAttribute('alt') || '').slice(0, 60))"""

# The prose of the article, block by block, with the link of each run of its
# text (a text node: [length, link]); only the blocks that name a chapter or a
# lab, the only ones REFERENCE can match in (a page's whole prose, a link a
# character, took about 5 s of the 29 pages' 45 to send to Python).
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
        if (!blocks.has(block)) blocks.set(block, {text: '', runs: []});
        const entry = blocks.get(block);
        const a = parent.closest('a[href]');
        const href = a && block.contains(a) ? new URL(a.href).pathname : null;
        entry.text += node.data;
        entry.runs.push([node.data.length, href]);
    }
    return [...blocks.values()].filter(block => block.text.includes('Chapter') || block.text.includes('Lab'));
}"""


def prose(tab) -> list[dict]:
    """PROSE's blocks, each as its text and the link of every character (None: no link)."""
    return [{"text": block["text"], "links": [href for length, href in block["runs"] for _ in range(length)]}
            for block in tab.evaluate(PROSE)]

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


# --------------------------------------------------------------------------- one visit a page


def open_page(tab, site, name):
    """Open ``name`` and wait until it is complete: loaded, nothing more coming
    over the network, formulas typeset, fonts loaded."""
    tab.goto(f"{site}/{name}.html", wait_until="load")
    tab.wait_for_load_state("networkidle")
    tab.evaluate(SETTLE)


def reader_problems(tab, label, name) -> list[str]:
    """What test_page_reads_well finds in the page open in ``tab`` (at width ``label``)."""
    problems = []
    wide = tab.evaluate(WIDE)
    if wide["width"] > wide["screen"]:
        problems.append(f"{label}: the page is {wide['width']} px wide on a {wide['screen']} px screen; "
                        + "; ".join(wide["culprits"]))
    problems += [f"{label}: clipped, not scrolled: {clip}" for clip in tab.evaluate(CLIPPED)]
    if label != "desktop":
        return problems + phone_problems(tab, label)
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
            if not image["natural"]:
                problems.append(f"figure image drawn at 1x, without its natural width (import ddp_lab.draw "
                                f"before drawing): {alt[:80] or src}")
    url_of = functools.cache(lambda page: tab.evaluate("p => new URL(p + '.html', location.origin + '/').pathname", page))
    problems += unlinked_references(name, prose(tab), numbered_pages(), url_of)
    loaded = tab.evaluate(SCRIPTS)
    for script in loaded["scripts"]:
        if script.endswith("/fontawesome.js"):
            problems.append(f"loads the theme's Font Awesome script ({script}), which no icon needs")
        if script.endswith("/embed-amd.js") and not loaded["views"]:
            problems.append(f"loads the widget manager ({script}) but shows no widget")
    return problems


def phone_problems(tab, label) -> list[str]:
    """What only a phone shows: animation players wider than the column, and
    pictures shrunk below the width that keeps their text at least
    PHONE_MIN_TEXT_PX (wide_pictures.css), or whose box's shadow says the
    wrong thing about scrolling."""
    if tab.locator(".ddp-control-output").count():
        tab.wait_for_selector(".ddp-control svg[width]", timeout=15_000)  # drawn by the controls' script
    problems = [f"{label}: an animation player that does not fit its column ({player})"
                for player in tab.evaluate(WIDE_PLAYERS)]
    for picture in tab.evaluate(WIDE_PICTURES):
        # at least PHONE_MIN_TEXT_PX / MIN_TEXT_PX of the width at which its text is MIN_TEXT_PX
        least = min(picture["natural"], COLUMN_PX) * PHONE_MIN_TEXT_PX / MIN_TEXT_PX
        where = f"{label}: picture {picture['alt']!r}"
        if not picture["boxed"]:
            problems.append(f"{where} is not in a box of its own (a link, a .ddp-picture)")
        elif picture["shown"] < least - 1:
            problems.append(f"{where} shown {picture['shown']:.0f} px wide, under {least:.0f} px "
                            f"(its natural width {picture['natural']:.0f} px)")
        elif picture["shadow"] != (1 if picture["scrolls"] else 0):
            problems.append(f"{where} {'scrolls' if picture['scrolls'] else 'fits'} but the shadow at "
                            f"its box's edge has opacity {picture['shadow']}")
    return problems


def look_at_page(page, name, outputs, problems, screenshots):
    """Check what the open page shows and that it responds, as a reader would;
    save its screenshot in ``screenshots`` (a folder, or None for none)."""
    problems.extend(f"Python traceback shown: {t}" for t in page.evaluate(TRACEBACKS))
    math = page.evaluate(MATH)
    if math["formulas"] and (not math["typeset"] or math["errors"]):
        problems.append(f"formulas not typeset by MathJax: {math}")
    if (ROOT / f"{name}.ipynb").exists():
        check_launch_buttons(page, name, problems)
    if has_widgets(outputs):
        check_widgets(page, problems)
    if has_animation(outputs):
        check_animations(page, problems)
    if page.locator(".ddp-control-output").count():
        controls = screenshots / "controls" if screenshots else None
        problems.extend(exercise_controls(page, controls, name.replace("/", "--")))

    page.wait_for_load_state("networkidle")  # anything the clicks loaded, watched
    if screenshots:
        # back to the top, nothing focused, so the sticky header sits where a reader sees it
        page.evaluate("() => { document.activeElement.blur(); window.scrollTo(0, 0); }")
        page.screenshot(path=screenshots / f"{name.replace('/', '--')}.png", full_page=True)


def search_icon(tab) -> dict:
    """Where the search field's magnifier ends and where the query's text starts."""
    form = ".bd-search-container form.bd-search"
    return {"icon": tab.locator(f"{form} .fa-magnifying-glass").bounding_box(),
            "field": tab.locator(f"{form} input").evaluate(
                "i => i.getBoundingClientRect().left + parseFloat(getComputedStyle(i).paddingLeft)")}


GPU_STEP = "One DDP step on a GPU"


def contents_panel(tab) -> dict:
    """The entry of chapter 14's contents panel for its h3 section GPU_STEP."""
    entry = tab.locator(".bd-sidebar-secondary nav a", has_text=GPU_STEP)
    found = {"count": entry.count()}
    if found["count"] == 1:
        found |= {"visible": entry.is_visible(), "href": entry.get_attribute("href"),
                  "section": tab.locator("article h3", has_text=GPU_STEP).evaluate(
                      "h => h.closest('section').id")}
    return found


# What the tests of one page's layout read, taken on the visit: {page: {width: {name: probe}}}.
PROBES = {
    "search": {"phone": {"search_icon": search_icon}, "desktop": {"search_icon": search_icon}},
    "book/part4_running/14_gpus": {"desktop": {"contents_panel": contents_panel}},
}


@dataclasses.dataclass
class Visit:
    """What one visit of a page found: each test's problems, and the probes' readings."""

    in_browser: list[str] = dataclasses.field(default_factory=list)  # test_page_in_browser's
    reads_well: list[str] = dataclasses.field(default_factory=list)  # test_page_reads_well's
    probes: dict = dataclasses.field(default_factory=dict)           # {width: {probe: reading or error}}
    error: Exception | None = None                                   # what stopped the visit


class PageVisits:
    """Each page opened once a width, every check run on that visit; the
    tests of a page read the result (``visits(name)``) in any order."""

    def __init__(self, site, tabs, screenshots):
        self.site, self.tabs, self.screenshots = site, tabs, screenshots
        self.done: dict[str, Visit] = {}

    def __call__(self, name: str) -> Visit:
        if name not in self.done:
            self.done[name] = self.visit(name)
        visit = self.done[name]
        if visit.error is not None:
            raise RuntimeError(f"{name}.html could not be checked: {visit.error}") from visit.error
        return visit

    def visit(self, name: str) -> Visit:
        visit = Visit()
        try:
            for label, tab in self.tabs.items():
                problems = Problems()
                with problems.watching(tab) if label == "desktop" else contextlib.nullcontext():
                    open_page(tab, self.site, name)
                    visit.reads_well += reader_problems(tab, label, name)
                    visit.probes[label] = self.probe(tab, PROBES.get(name, {}).get(label, {}))
                    if label == "desktop":
                        look_at_page(tab, name, notebook_outputs(name), problems, self.screenshots)
                visit.in_browser += problems
        except Exception as error:  # noqa: BLE001  (both tests of the page report it)
            visit.error = error
        return visit

    @staticmethod
    def probe(tab, probes) -> dict:
        readings = {}
        for probe_name, probe in probes.items():
            try:
                readings[probe_name] = probe(tab)
            except Exception as error:  # noqa: BLE001  (the probe's test reports it)
                readings[probe_name] = error
        return readings


def reading(visit: Visit, label: str, probe: str):
    """A probe's reading of the page at width ``label``; raises what the probe raised."""
    found = visit.probes[label][probe]
    if isinstance(found, Exception):
        raise found
    return found


# --------------------------------------------------------------------------- tests


@pytest.mark.parametrize("name", PAGES)
def test_page_in_browser(name, visits):
    problems = visits(name).in_browser
    assert not problems, f"{name}.html:\n  " + "\n  ".join(problems)


@pytest.mark.parametrize("name", PAGES)
def test_page_reads_well(name, visits):
    problems = visits(name).reads_well
    assert not problems, f"{name}.html:\n  " + "\n  ".join(problems)


def test_search_icon_leaves_the_query_readable(visits):
    """The magnifier of the search page's field sits before the text, not over its first letter."""
    visit = visits("search")
    for label in WIDTHS:
        found = reading(visit, label, "search_icon")
        icon, field = found["icon"], found["field"]
        assert icon and icon["width"] > 0, f"{label}: the search field's magnifier is not drawn"
        assert icon["x"] + icon["width"] <= field, (
            f"{label}: the magnifier ends at {icon['x'] + icon['width']:.0f} px, over the query, "
            f"whose text starts at {field:.0f} px")


def test_contents_panel_shows_subsections(visits):
    """h3 sections are listed, visible, in the page's contents panel (show_toc_level: 2):
    chapter 14's "One DDP step on a GPU" can be reached from it."""
    entry = reading(visits("book/part4_running/14_gpus"), "desktop", "contents_panel")
    assert entry["count"] == 1, "no entry 'One DDP step on a GPU' in chapter 14's contents panel"
    assert entry["visible"], "'One DDP step on a GPU' is in chapter 14's contents panel but hidden"
    assert entry["href"] == "#" + entry["section"]


def test_every_scrolling_cell_is_listed_with_its_reason():
    """The cells tagged ``wide-output`` are exactly SCROLLING_CELLS."""
    tagged = set()
    for page in toc_pages():
        path = ROOT / f"{page}.ipynb"
        if not path.exists():
            continue
        for cell in json.loads(path.read_text())["cells"]:
            if "wide-output" in cell.get("metadata", {}).get("tags", []):
                tagged.add((page, "".join(cell["source"]).split("\n")[0]))
    assert tagged == set(SCROLLING_CELLS), (
        f"tagged but not listed: {sorted(tagged - set(SCROLLING_CELLS))}; "
        f"listed but not tagged: {sorted(set(SCROLLING_CELLS) - tagged)}")


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


def test_a_request_for_another_host_is_reported_and_fails(browser, tmp_path):
    """The watch kept on every page: a request for another host, named or by
    address, is reported, and the browser's resolver rules make it fail at once."""
    outside = ["https://cdn.jsdelivr.net/npm/mathjax@3/es5/tex-mml-chtml.js",
               "http://example.org/theme.css", "https://192.0.2.1/figure.png"]
    (tmp_path / "page.html").write_text(
        f'<html><head><script src="{outside[0]}"></script><link rel="stylesheet" href="{outside[1]}">'
        f'</head><body><img src="{outside[2]}"></body></html>')
    problems = Problems()
    context = browser.new_context()
    page = context.new_page()
    try:
        with serve(tmp_path) as url, problems.watching(page):
            page.goto(f"{url}/page.html", wait_until="load")
            page.wait_for_load_state("networkidle")
    finally:
        context.close()
    for request in outside:
        assert f"request leaves the machine (blocked): {request}" in problems, problems
        assert f"request failed: {request} (net::ERR_NAME_NOT_RESOLVED)" in problems, problems


def test_the_book_is_built_again_when_what_it_is_built_from_changes(tmp_path):
    """tests/plumbing/book_build.py: a build the tests made is reused only while
    no input has changed, been added or been removed; the tests are no input."""
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / ".gitignore").write_text("_build/\n")
    (tmp_path / "_toc.yml").write_text("root: intro\n")
    (tmp_path / "intro.md").write_text("# Intro\n")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_intro.py").write_text("")
    html = tmp_path / "_build" / "html"
    html.mkdir(parents=True)
    (html / "index.html").write_text("<html></html>")
    stamp = html / ".tests-build.json"
    built = inputs_fingerprint(tmp_path)
    assert not is_fresh(built, html, stamp), "no stamp (a build the tests did not make) is fresh"
    stamp.write_text(json.dumps({"inputs": built}))
    assert is_fresh(built, html, stamp)

    (tmp_path / "tests" / "test_intro.py").write_text("x = 1\n")
    (html / "page.html").write_text("built")
    assert inputs_fingerprint(tmp_path) == built, "tests/ and _build/ are no input of the build"
    changes = {
        "an edited page": lambda: (tmp_path / "intro.md").write_text("# Introduction\n"),
        "a page touched": lambda: os.utime(tmp_path / "_toc.yml", ns=(1, 1)),
        "a new page": lambda: (tmp_path / "outro.md").write_text("# Outro\n"),
        "a page removed": lambda: (tmp_path / "intro.md").unlink(),
    }
    for change, make in changes.items():
        before = inputs_fingerprint(tmp_path)
        make()
        assert not is_fresh(inputs_fingerprint(tmp_path), html, stamp), f"fresh after {change}"
        assert inputs_fingerprint(tmp_path) != before, change
    stamp.write_text(json.dumps({"inputs": inputs_fingerprint(tmp_path)}))
    (html / "index.html").unlink()
    assert not is_fresh(inputs_fingerprint(tmp_path), html, stamp), "fresh without _build/html/index.html"

    # The extensions' own fingerprint (a change there writes every page again) sees only book/_ext.
    (tmp_path / "book" / "_ext").mkdir(parents=True)
    (tmp_path / "book" / "_ext" / "pages.py").write_text("A = 1\n")
    extensions = inputs_fingerprint(tmp_path, under="book/_ext")
    (tmp_path / "outro.md").write_text("# Outro, again\n")
    assert inputs_fingerprint(tmp_path, under="book/_ext") == extensions, "a page changed the extensions' print"
    (tmp_path / "book" / "_ext" / "pages.py").write_text("A = 2\n")
    assert inputs_fingerprint(tmp_path, under="book/_ext") != extensions, "an extension's change went unseen"
