"""Build the book, then open every page in headless Chromium with no network.

A page passes when the browser console stays clean, nothing is fetched from
outside 127.0.0.1, no Python traceback is shown (except in cells tagged
``raises-exception``), formulas are typeset, and animations and widgets render
and respond.  The book's own controls (ddp_lab/widgets) are moved one by one
and must show Python's answer for each new setting (tests/widget_pages.py).
With ``--screenshots``, screenshots of every page go to ``_build/screenshots/``,
and of two states of each control to ``_build/screenshots/controls/``.
"""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml
from widget_pages import CHROMIUM, LOCAL_HOSTS, exercise_controls, serve

ROOT = Path(__file__).resolve().parents[1]
BUILD = ROOT / "_build"
HTML = BUILD / "html"
EXECUTED = BUILD / "jupyter_execute"  # the notebooks as executed by the build
BUILD_LOG = BUILD / "build.log"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    # No name but this machine's resolves, so a request for another host fails at
    # once, offline as on a reader's machine (each one is also reported: Problems).
    "--host-resolver-rules=MAP * ~NOTFOUND, " + ", ".join(f"EXCLUDE {host}" for host in LOCAL_HOSTS),
]
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*m")


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
    """Build the book exactly as CI and the README do; the jupyter-cache keeps it quick."""
    jupyter_book = Path(sys.executable).with_name("jupyter-book")
    command = [str(jupyter_book) if jupyter_book.exists() else "jupyter-book",
               "build", "-W", "-n", "--keep-going", "."]
    BUILD.mkdir(exist_ok=True)
    started = time.time()
    with BUILD_LOG.open("w") as log:
        result = subprocess.run(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    if result.returncode != 0:
        pytest.fail(f"`{' '.join(command)}` exited with {result.returncode}\n"
                    + build_failure_report(started), pytrace=False)
    return HTML


def build_failure_report(started: float) -> str:
    """The build's warnings, and the error of each notebook that failed to execute."""
    lines = ANSI_ESCAPE.sub("", BUILD_LOG.read_text()).splitlines()
    report = list(dict.fromkeys(line for line in lines if "WARNING" in line or "ERROR" in line))
    for err_log in sorted((HTML / "reports").rglob("*.err.log")):
        if err_log.stat().st_mtime >= started:  # written by this build
            tail = ANSI_ESCAPE.sub("", err_log.read_text()).splitlines()[-25:]
            report += ["", f"--- {err_log.relative_to(ROOT)} (end) ---", *tail]
    return "\n".join(report + ["", "--- build log (end) ---", *lines[-15:], f"full log: {BUILD_LOG}"])


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
def tab(browser):
    """One tab for every page, as a reader going from page to page in the book has.

    Its renderer process, and the theme's scripts, MathJax and the widget
    libraries in the HTTP cache, serve page after page: opening each page in a
    tab of its own took about three times the CPU to load here (73 core-seconds
    against 25 for the book's 28 pages), the most of any check of this file.
    Each page is still a new document: nothing of the page before runs in it.
    """
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    yield context.new_page()
    context.close()


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
    page.wait_for_timeout(300)
    if img.get_attribute("src") == before:
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
        page.wait_for_timeout(1500)
        if readouts.all_inner_texts() == before:
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


# --------------------------------------------------------------------------- tests


@pytest.mark.parametrize("name", PAGES)
def test_page_in_browser(name, site, tab, screenshots):
    outputs = notebook_outputs(name)
    problems = Problems()
    with problems.watching(tab):
        look_at_page(tab, site, name, outputs, problems, screenshots)
    assert not problems, f"{name}.html:\n  " + "\n  ".join(problems)


def look_at_page(page, site, name, outputs, problems, screenshots):
    """Open the page as a reader would and check what it shows; save its
    screenshot in ``screenshots`` (a folder, or None for none)."""
    page.goto(f"{site}/{name}.html", wait_until="load")
    page.wait_for_load_state("networkidle")
    page.evaluate(SETTLE)

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
