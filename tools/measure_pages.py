"""Measure how every page of a built book reads on a phone and on a desktop.

    python tools/measure_pages.py [HTML_DIR]     (default: _build/html)

Opens each page of the book (index, the pages of _toc.yml, genindex, search:
every .html outside the underscore folders) in headless Chromium with no
network, as tests/test_book_html.py does, at 390x844 and at 1366x900, and
prints one row a page and the totals:

  wide390   the page's width at 390 px (document.documentElement.scrollWidth);
            over 390 means the page pans sideways on a phone
  cut1366   code and output blocks (``pre`` in the article: cell inputs,
            cell outputs, literal blocks) wider than their box at 1366 px,
            out of ``pre`` blocks in all
  cut390    the same at 390 px
  links     links from the article (article.bd-article, not the sidebar) to
            another page of the book
  KB, JS, CSS  what the page loads, in kilobytes of response bodies (cached or
            not): everything, of which JavaScript and stylesheets

Figures are PNGs whose type sizes cannot be read from the HTML; they are
measured where they are drawn (ddp_lab/draw). Issue 46 uses these figures
before and after its changes.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from offline_browser import CHROMIUM, CHROMIUM_ARGS, serve  # noqa: E402

WIDTHS = {"phone": {"width": 390, "height": 844}, "desktop": {"width": 1366, "height": 900}}

# Resource Timing keeps 250 entries by default; MathJax's fonts and the widget
# modules of one page can come near that.
BIG_BUFFER = "performance.setResourceTimingBufferSize(5000);"

SETTLE = """async () => {
    if (window.MathJax && MathJax.startup) await MathJax.startup.promise;
    await document.fonts.ready;
}"""

MEASURE = """() => {
    // the search page has no article: nothing of it is counted
    const article = document.querySelector('article.bd-article') || document.createElement('article');
    const blocks = [...article.querySelectorAll('pre')];
    const cut = blocks.filter(pre => pre.scrollWidth > pre.clientWidth + 1);
    const here = location.pathname;
    const links = [...article.querySelectorAll('a[href]')].filter(a => {
        const url = new URL(a.href, location.href);
        return url.origin === location.origin && url.pathname.endsWith('.html')
               && url.pathname !== here;
    });
    const resources = [performance.getEntriesByType('navigation')[0],
                       ...performance.getEntriesByType('resource')];
    const weight = {total: 0, js: 0, css: 0};
    for (const entry of resources) {
        const size = entry.decodedBodySize || 0;
        const path = new URL(entry.name).pathname;
        weight.total += size;
        if (path.endsWith('.js')) weight.js += size;
        if (path.endsWith('.css')) weight.css += size;
    }
    return {width: document.documentElement.scrollWidth, blocks: blocks.length,
            cut: cut.length, links: links.length, weight};
}"""


def book_pages(html_dir: Path) -> list[str]:
    """Every page of a built book, as paths under html_dir without .html."""
    pages = [str(path.relative_to(html_dir).with_suffix(""))
             for path in html_dir.rglob("*.html")
             if not any(part.startswith("_") or part == "reports"
                        for part in path.relative_to(html_dir).parts)]
    return sorted(pages, key=lambda name: (name in {"genindex", "search"}, name != "index", name))


def measure(html_dir: Path) -> dict[str, dict[str, dict]]:
    """{page: {"phone": measurements, "desktop": measurements}}."""
    from playwright.sync_api import sync_playwright

    sys.path.insert(0, str(ROOT / "tests"))

    pages = book_pages(html_dir)
    results: dict[str, dict[str, dict]] = {name: {} for name in pages}
    with serve(html_dir) as site, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        for label, viewport in WIDTHS.items():
            context = browser.new_context(viewport=viewport)
            context.add_init_script(BIG_BUFFER)
            tab = context.new_page()
            for name in pages:
                tab.goto(f"{site}/{name}.html", wait_until="load")
                tab.wait_for_load_state("networkidle")
                tab.evaluate(SETTLE)
                results[name][label] = tab.evaluate(MEASURE)
            context.close()
        browser.close()
    return results


def table(results: dict[str, dict[str, dict]]) -> str:
    header = f"{'page':<48} {'wide390':>7} {'cut1366':>9} {'cut390':>9} {'links':>5} {'KB':>6} {'JS':>6} {'CSS':>5}"
    lines = [header, "-" * len(header)]
    totals = {"wide": 0, "cut1366": 0, "cut390": 0, "blocks": 0, "links": 0, "kb": 0.0, "js": 0.0, "css": 0.0}
    for name, widths in results.items():
        phone, desktop = widths["phone"], widths["desktop"]
        weight = desktop["weight"]
        kb, js, css = (weight[key] / 1000 for key in ("total", "js", "css"))
        lines.append(f"{name:<48} {phone['width']:>7} {desktop['cut']:>4}/{desktop['blocks']:<4} "
                     f"{phone['cut']:>4}/{phone['blocks']:<4} {desktop['links']:>5} {kb:>6.0f} {js:>6.0f} {css:>5.0f}")
        totals["wide"] += phone["width"] > 390
        totals["cut1366"] += desktop["cut"]
        totals["cut390"] += phone["cut"]
        totals["blocks"] += desktop["blocks"]
        totals["links"] += desktop["links"]
        totals["kb"] += kb
        totals["js"] += js
        totals["css"] += css
    count = len(results)
    lines += ["-" * len(header),
              f"{count} pages: {totals['wide']} wider than 390 px; "
              f"{totals['cut1366']} of {totals['blocks']} code/output blocks cut at 1366 px, "
              f"{totals['cut390']} at 390 px; {totals['links']} links between pages; "
              f"{totals['kb'] / 1000:.1f} MB loaded in all ({totals['kb'] / count:.0f} KB a page on average: "
              f"JS {totals['js'] / count:.0f} KB, CSS {totals['css'] / count:.0f} KB)"]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("html_dir", nargs="?", default=str(ROOT / "_build" / "html"),
                        help="the built book (default: _build/html)")
    html_dir = Path(parser.parse_args(argv).html_dir).resolve()
    if not (html_dir / "search.html").exists():
        parser.error(f"{html_dir} is not a built book (no search.html): "
                     "build it with `jupyter-book build -W -n --keep-going .`")
    if not Path(CHROMIUM).exists():
        parser.error(f"{CHROMIUM} not found: `apt-get install chromium`")
    print(table(measure(html_dir)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
