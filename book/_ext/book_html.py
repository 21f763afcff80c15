"""Make the HTML of the book work offline, with a clean browser console.

A default Jupyter Book 1.x loads MathJax, RequireJS and the ipywidgets embed
manager from CDNs, and matplotlib's animations link Font Awesome from one, so
a reader without a network sees raw LaTeX, dead widgets and blank buttons;
its pages also log errors in the browser console.  This extension:

* runs ``npm ci`` at the repository root when ``node_modules`` is missing or
  older than ``package-lock.json`` (package.json pins the versions);
* copies the files the pages need from ``node_modules/<package>/...`` to
  ``_static/npm/<package>/...`` in the HTML output (``_config.yml`` points
  ``mathjax_path`` and ``nb_ipywidgets_js`` there);
* rewrites the Font Awesome ``<link>`` that ``Animation.to_jshtml()`` puts in
  every animation so that it points to the copy in ``_static/npm``;
* drops duplicated inline ``<script>`` blocks.  Sphinx 7.4 adds body-only
  scripts registered after the builder started (sphinx-thebe's
  ``const THEBE_JS_URL = ...``, sphinx-togglebutton's selector) twice, and
  the second ``const`` is a SyntaxError on every page;
* leaves out the theme's Font Awesome script (1.5 MB on every page): the
  theme's CSS draws every icon the pages show from its web fonts, and the
  script would swap ``<i class="fa ...">`` icons for ``<svg>`` elements,
  breaking the Play button of ipywidgets (see ``drop_font_awesome_script``);
* links each figure image to its file, so that a reader on a phone, where a
  figure is shown smaller than on a desktop, can open it at full size with a
  tap, and gives that link the figure's natural width for the phone's rule
  of ``ddp_lab/widgets/js/wide_pictures.css``, which it copies to _static/
  (``link_figures_to_their_files``);
* gives the frame of every matplotlib animation player an alt text where
  it has none (``Animation.to_jshtml()`` writes ``<img id="_anim_img...">``
  without one; ``ddp_lab.draw.allreduce`` writes its own);
* writes the site's index.html, the redirect to the first page, with an
  empty icon (without one the browser asks for a /favicon.ico that is not there);
* turns ``path_to_book: "."`` into no prefix at all, so that the Colab, Binder
  and repository links read ``blob/main/book/...`` and not ``blob/main/./book/...``.

book/_static/widgets_offline.js is the browser-side part for widget pages.
"""

from __future__ import annotations

import html
import re
import shutil
import subprocess
from pathlib import Path

from sphinx.application import Sphinx
from sphinx.errors import ExtensionError
from sphinx.util import logging

logger = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parents[2]
NODE_MODULES = REPO_ROOT / "node_modules"
WIDE_PICTURES = REPO_ROOT / "ddp_lab" / "widgets" / "js" / "wide_pictures.css"  # _config.yml loads it

# What the pages load, as globs under node_modules/ (copied to _static/npm/).
NPM_FILES = [
    "requirejs/require.js",
    # the AMD embed bundle and the fonts its CSS refers to
    "@jupyter-widgets/html-manager/dist/embed-amd.js",
    "@jupyter-widgets/html-manager/dist/*.woff2",
    "@jupyter-widgets/html-manager/dist/*.woff",
    "@jupyter-widgets/html-manager/dist/*.ttf",
    # the front-end of anywidget, which the book's controls (ddp_lab/widgets) use
    "anywidget/dist/index.js",
    # MathJax's combined component, and what it loads on demand: TeX
    # extensions, CHTML fonts, the context menu and its accessibility tools
    "mathjax/es5/tex-mml-chtml.js",
    "mathjax/es5/input/tex/extensions",
    "mathjax/es5/output/chtml",
    "mathjax/es5/ui",
    "mathjax/es5/a11y",
    "mathjax/es5/sre",
    "font-awesome/css/font-awesome.min.css",
    "font-awesome/fonts",
]

# Stylesheets that notebook outputs link from a CDN -> the copy in _static/npm/.
CDN_STYLESHEETS = {
    # matplotlib.animation's JS_INCLUDE (Font Awesome 4.x on any CDN)
    re.compile(
        r'<link\s+rel="stylesheet"\s+href="https?://[^"]*/font-awesome/4[^"]*\.css"\s*/?>'
    ): "font-awesome/css/font-awesome.min.css",
}

# pydata-sphinx-theme writes this <script> into every page from its layout
# (static/webpack-macros.html, head_js_preload), so no Sphinx event can drop it.
# fontawesome.js replaces every <i class="fa ..."> with an <svg>, including the
# icon of ipywidgets' Play button, whose code then fails when it switches
# between play and pause ("Cannot set properties of undefined (setting
# 'className')").  The theme's CSS already draws every icon from its web fonts
# (vendor/fontawesome/webfonts, 0.3 MB, fetched only for the glyphs a page
# shows), the Font Awesome 4 names of matplotlib and ipywidgets included.
FONT_AWESOME_SCRIPT = re.compile(
    r'[ \t]*(?:<!-- So that users can add custom icons -->\s*)?'
    r'<script\s+defer\s+src="[^"]*_static/scripts/fontawesome\.js(?:\?[^"]*)?"\s*>\s*</script>\n?'
)

# An image the build copied to _images/ (a figure, a plot of a cell), not yet
# inside a link: group 1 is the link before it, if any; group 2 the <img>,
# group 3 its file.
IMAGE = re.compile(r'(<a\b[^>]*>\s*)?(<img\b[^>]*?\bsrc="([^"]*_images/[^"]+)"[^>]*>)')
NATURAL_WIDTH = re.compile(r'\bstyle="width: (\d+(?:\.\d+)?)px;')  # as MyST-NB writes it


def normalise_path_to_book(app: Sphinx, config) -> None:
    options = config.html_theme_options
    if options.get("path_to_docs", "").strip("/") == ".":
        options["path_to_docs"] = ""


def ensure_node_modules(app: Sphinx) -> None:
    """Run ``npm ci`` if node_modules is missing or out of date."""
    if app.builder.format != "html":
        return
    installed = NODE_MODULES / ".package-lock.json"  # written by npm itself
    lock = REPO_ROOT / "package-lock.json"
    if installed.exists() and installed.stat().st_mtime >= lock.stat().st_mtime:
        return
    npm = shutil.which("npm")
    if npm is None:
        raise ExtensionError(
            "The book serves MathJax and the widget manager from node_modules/, "
            "which is missing, and npm is not installed: install Node.js "
            "(`apt-get install npm`) or run `npm ci` in the repository root."
        )
    logger.info("book_html: running `npm ci` in %s", REPO_ROOT)
    subprocess.run(
        [npm, "ci", "--no-audit", "--no-fund", "--ignore-scripts"],
        cwd=REPO_ROOT,
        check=True,
    )


def copy_static_files(app: Sphinx, exception: Exception | None) -> None:
    """Copy the npm files, the book's own html_static_path, and
    ddp_lab/widgets/js/wide_pictures.css, which the controls share.

    Sphinx copies html_static_path only when it rewrites some page, so an edit
    of book/_static/*.js or *.css alone would not reach _build/html.
    """
    if exception is not None or app.builder.format != "html":
        return
    static = Path(app.outdir) / "_static"
    for entry in app.config.html_static_path:
        if not Path(entry).is_absolute():  # ours; extensions add absolute paths
            shutil.copytree(Path(app.confdir) / entry, static, dirs_exist_ok=True)
    # the wide pictures' phone rule, one file for the figures and the controls
    shutil.copy2(WIDE_PICTURES, static / WIDE_PICTURES.name)
    for pattern in NPM_FILES:
        matches = sorted(NODE_MODULES.glob(pattern))
        if not matches:
            raise ExtensionError(f"book_html: nothing in node_modules matches {pattern}")
        for source in matches:
            target = static / "npm" / source.relative_to(NODE_MODULES)
            if source.is_dir():
                shutil.copytree(source, target, dirs_exist_ok=True)
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source, target)


def write_index_redirect(app: Sphinx, exception: Exception | None) -> None:
    """The site's index.html: a redirect to the book's first page that asks for no icon.

    sphinx-external-toc writes a bare ``<meta http-equiv="Refresh">`` there
    (when no index.html exists yet, after this). A page that names no icon
    makes the browser ask for /favicon.ico, which the book does not have (its
    pages name _static/logo.svg), and the 404 can reach the console of a
    reader opening the book at its root; naming the real icon instead starts a
    request that the redirect then cuts off. An empty ``data:`` icon asks the
    server for nothing.
    """
    if exception is not None or app.builder.name != "html" or app.config.root_doc == "index":
        return
    first_page = f"{app.config.root_doc}.html"
    title = html.escape(app.config.html_title or app.config.project)
    (Path(app.outdir) / "index.html").write_text(
        f'<!DOCTYPE html>\n<html><head><meta charset="utf-8"><title>{title}</title>'
        f'<link rel="icon" href="data:,"><meta http-equiv="Refresh" content="0; url={first_page}"></head>'
        f'<body><a href="{first_page}">{title}</a></body></html>\n', encoding="utf8")


def drop_font_awesome_script(app: Sphinx, exception: Exception | None) -> None:
    """Take the theme's fontawesome.js out of every page written (see FONT_AWESOME_SCRIPT).

    Runs on every page of the output, so that pages an incremental build did
    not rewrite lose it too; a page without the script is left as it is.
    """
    if exception is not None or app.builder.format != "html":
        return
    outdir = Path(app.outdir)
    for page in outdir.rglob("*.html"):
        if page.relative_to(outdir).parts[0].startswith("_"):  # _static holds templates
            continue
        text = page.read_text(encoding="utf8")
        lighter = FONT_AWESOME_SCRIPT.sub("", text)
        if lighter != text:
            page.write_text(lighter, encoding="utf8")


def link_figures_to_their_files(app: Sphinx, pagename, templatename, context, doctree) -> None:
    """Wrap each image of the page's body that the build copied to _images/
    in a link to that file, unless it is in a link already.

    On a phone (360-414 px) a figure is shown smaller than on a desktop,
    and its labels with it; a tap on the figure opens the PNG at its full
    size, which the browser lets the reader zoom. Book.css gives the link a
    zoom-in cursor.

    The image's natural width (the style MyST-NB writes, ``width: 990px;``)
    is repeated as ``--natural-width``, which
    ``ddp_lab/widgets/js/wide_pictures.css`` reads to keep the figure's text
    at least 8 px on a phone.
    """
    body = context.get("body")
    if not body:
        return

    def link(match: re.Match) -> str:
        image = NATURAL_WIDTH.sub(r"\g<0> --natural-width: \g<1>px;", match.group(2), count=1)
        if match.group(1):  # already a link (Sphinx links scaled images to their file)
            return match.group(1) + image
        return (f'<a class="image-enlarge" href="{match.group(3)}" '
                f'title="Open the figure at full size">{image}</a>')

    context["body"] = IMAGE.sub(link, body)


ANIMATION_FRAME = '<img id="_anim_img'  # as matplotlib writes it: no alt
ANIMATION_ALT = "the animation's current frame; the buttons below play it and step through it"


def describe_animation_frames(app: Sphinx, pagename, templatename, context, doctree) -> None:
    """Give matplotlib's animation player image an alt text (it writes none)."""
    body = context.get("body")
    if body and ANIMATION_FRAME in body:
        context["body"] = body.replace(ANIMATION_FRAME, f'<img alt="{ANIMATION_ALT}" id="_anim_img')


def rewrite_cdn_links(app: Sphinx, pagename, templatename, context, doctree) -> None:
    """Point stylesheets that notebook outputs load from CDNs to _static/npm/."""
    body = context.get("body")
    if not body:
        return
    for pattern, local in CDN_STYLESHEETS.items():
        href = context["pathto"](f"_static/npm/{local}", 1)
        body = pattern.sub(f'<link rel="stylesheet" href="{href}">', body)
    context["body"] = body


def drop_duplicate_scripts(app: Sphinx, pagename, templatename, context, doctree) -> None:
    """Keep the first of several identical <script> entries (see module docstring)."""
    scripts, seen = [], set()
    for script in context.get("script_files", []):
        attributes = getattr(script, "attributes", {})
        key = (getattr(script, "filename", script) or "", tuple(sorted(attributes.items())))
        if key not in seen:
            seen.add(key)
            scripts.append(script)
    context["script_files"] = scripts


def setup(app: Sphinx):
    app.connect("config-inited", normalise_path_to_book)
    app.connect("builder-inited", ensure_node_modules)
    app.connect("html-page-context", rewrite_cdn_links)
    app.connect("html-page-context", link_figures_to_their_files)
    app.connect("html-page-context", describe_animation_frames)
    # after the other extensions have added their per-page scripts
    app.connect("html-page-context", drop_duplicate_scripts, priority=900)
    app.connect("build-finished", copy_static_files)
    app.connect("build-finished", drop_font_awesome_script)
    app.connect("build-finished", write_index_redirect, priority=400)  # before sphinx-external-toc's
    return {"parallel_read_safe": True, "parallel_write_safe": True}
