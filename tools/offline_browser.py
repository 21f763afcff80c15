"""Headless Chromium on the built book, offline: one home for what the browser
tests (tests/test_book_html.py, tests/test_widgets_js.py), the PDF
(tools/build_pdf.py) and the page measures (tools/measure_pages.py) share.

The book must work with no network: Chromium is started with resolver rules
under which no name but this machine's resolves, so a page's request for any
other host fails at once, as it would on a reader's machine offline; the pages
are served from 127.0.0.1 by :func:`serve`. Standard library only.
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import threading
from pathlib import Path

CHROMIUM = "/usr/bin/chromium"  # Debian's (apt-get install chromium), driven by Playwright
LOCAL_HOSTS = {"127.0.0.1", "localhost"}  # where the pages may fetch from
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--host-resolver-rules=MAP * ~NOTFOUND, " + ", ".join(f"EXCLUDE {host}" for host in LOCAL_HOSTS),
]


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
