"""The book's controls in a real JupyterLab: a check run by hand (it needs
`pip install jupyterlab`, which the book itself does not).

    python tools/check_controls_in_jupyterlab.py

Starts JupyterLab on 127.0.0.1 in a temporary folder, opens a notebook in
headless Chromium with every request leaving the machine blocked, runs cells
that show the layout explorer and the memory calculator, moves them in the
page, then runs a cell that prints what the kernel's Python objects say:
the moves must have reached the kernel (3 nodes x 4 GPUs, 2 GPUs per
process: W = 6; ZeRO-3 only, 3 GB). Prints that line, the console errors and
the blocked requests (both should be empty); a screenshot goes to the folder.
"""
import json
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

from playwright.sync_api import sync_playwright

nb = {"cells": [
  {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None,
   "source": "from ddp_lab.widgets import LayoutExplorer, MemoryCalculator\nexplorer = LayoutExplorer()\nexplorer"},
  {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None,
   "source": "calculator = MemoryCalculator(num_parameters=1.5e9, world_size=8)\ncalculator"},
  {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None,
   "source": "print('KERNEL', explorer.topology, '|', explorer.error, '|', [round(r.total/1e9, 4) for r in calculator.rows], calculator.stage)"},
 ], "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
 "nbformat": 4, "nbformat_minor": 5}
# When a cell may be run. JupyterLab runs a code cell only if the notebook's
# session has a kernel (CodeCell.execute in @jupyterlab/cells: without one it
# clears the cell's prompt and returns, and run-and-select-next still moves on).
# The toolbar's execution indicator is no sign of that: it starts at
# data-status="idle" before any kernel is attached (then "initializing",
# "unknown", and "idle" again once connected), and a Shift+Enter pressed in
# that second or so was lost: the first cell never ran.
KERNEL_READY = """() => {
  const kernel = window.jupyterapp?.shell.currentWidget?.sessionContext?.session?.kernel;
  return !!kernel && kernel.connectionStatus === "connected" && kernel.status === "idle";
}"""
root = tempfile.mkdtemp(prefix="ddp-lab-jupyterlab-")
json.dump(nb, open(f"{root}/check.ipynb", "w"))
with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
# expose_app_in_browser: window.jupyterapp, to wait for the notebook's kernel (see KERNEL_READY)
lab = subprocess.Popen([sys.executable, "-m", "jupyter", "lab", "--no-browser", f"--port={port}", "--ip=127.0.0.1",
                        "--IdentityProvider.token=t0k", "--allow-root", f"--ServerApp.root_dir={root}",
                        "--LabApp.expose_app_in_browser=True"],
                       stdout=subprocess.DEVNULL, stderr=open(f"{root}/lab.log", "w"))
try:
    for _ in range(120):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/api?token=t0k")
            break
        except Exception:
            time.sleep(0.5)
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox", "--disable-gpu"])
        ctx = b.new_context(viewport={"width": 1300, "height": 1000})
        external = []
        ctx.route("**/*", lambda r: (r.continue_() if "127.0.0.1" in r.request.url or r.request.url.startswith(("blob:", "data:")) else (external.append(r.request.url), r.abort())))
        page = ctx.new_page()
        errors = []
        page.on("console", lambda m: m.type == "error" and errors.append(m.text))
        page.goto(f"http://127.0.0.1:{port}/lab/tree/check.ipynb?token=t0k")
        page.wait_for_selector(".jp-Notebook", timeout=60000)
        page.wait_for_function(KERNEL_READY, timeout=60000)
        page.locator(".jp-Cell").first.click()
        for _ in range(2):
            page.keyboard.press("Shift+Enter")
            time.sleep(0.3)
        page.wait_for_selector(".ddp-layout-explorer", timeout=60000)
        page.wait_for_selector(".ddp-memory-calculator", timeout=60000)
        page.locator(".ddp-layout-explorer input[name=nodes]").fill("3")
        page.locator(".ddp-layout-explorer [data-name=gpus_per_process] button[data-value='2']").click()
        page.locator(".ddp-memory-calculator [data-name=stage] button[data-value='ZeRO-3']").click()
        time.sleep(1)
        page.keyboard.press("Escape")
        page.locator(".jp-Cell").nth(2).click()
        page.keyboard.press("Shift+Enter")
        page.wait_for_selector("text=KERNEL", timeout=60000)
        time.sleep(0.5)
        print([t for t in page.locator(".jp-OutputArea-output").all_inner_texts() if "KERNEL" in t])
        print("static picture visible in Lab:", page.locator(".ddp-control-static").count(), "elements",
              [page.locator(".ddp-control-static").nth(i).is_visible() for i in range(page.locator(".ddp-control-static").count())])
        page.screenshot(path=f"{root}/lab.png")
        print("screenshot:", f"{root}/lab.png")
        print("console errors:", errors, "external:", external)
        b.close()
finally:
    lab.terminate()
    lab.wait(timeout=20)
