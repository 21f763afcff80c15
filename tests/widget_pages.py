"""Pages that show the book's controls (ddp_lab/widgets) the way the built
book does, without building it: RequireJS, the ipywidgets embed manager and
anywidget's front-end from node_modules, the widgets' saved state, and each
control's text/html output. Used by tests/test_widgets_js.py; the pages of
the real book are checked by tests/test_book_html.py.
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import json
import threading
from pathlib import Path

from ipywidgets.embed import dependency_state

ROOT = Path(__file__).resolve().parents[1]
NODE_MODULES = ROOT / "node_modules"
STATE_MIMETYPE = "application/vnd.jupyter.widget-state+json"

PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title><link rel="icon" href="data:,">
<script src="_static/widgets_offline.js"></script>
<script src="_static/npm/requirejs/require.js"></script>
<script src="_static/npm/@jupyter-widgets/html-manager/dist/embed-amd.js"></script>
<script type="{state_mimetype}">{state}</script>
<style>body {{ font-family: sans-serif; margin: 20px; max-width: 900px; }}</style>
</head><body>
{outputs}
</body></html>
"""


def write_page(folder: Path, widgets, title: str = "controls") -> Path:
    """index.html in ``folder`` showing ``widgets`` as the book shows them."""
    static = folder / "_static"
    (static / "npm").mkdir(parents=True, exist_ok=True)
    (static / "widgets_offline.js").write_text((ROOT / "book/_static/widgets_offline.js").read_text())
    for package in ("requirejs", "@jupyter-widgets", "anywidget"):
        link = static / "npm" / package
        if not link.exists():
            link.symlink_to(NODE_MODULES / package)
    state = {"version_major": 2, "version_minor": 0, "state": dependency_state(list(widgets), drop_defaults=False)}
    outputs = "\n".join(
        f'<section class="cell_output" id="output-{i}">{w._repr_mimebundle_()[0]["text/html"]}</section>'
        for i, w in enumerate(widgets))
    page = folder / "index.html"
    page.write_text(PAGE.format(title=title, state_mimetype=STATE_MIMETYPE,
                                state=json.dumps(state).replace("</", "<\\/"), outputs=outputs))
    return page


@contextlib.contextmanager
def serve(folder: Path):
    """Serve ``folder`` on 127.0.0.1 (a port the system picks); yields the base URL."""

    class Handler(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0),
                                             functools.partial(Handler, directory=str(folder)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
