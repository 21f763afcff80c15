"""Execute notebooks in place and record what they ran on (every page of the book).

    python tools/execute_notebook.py book/part4_running/11_torchrun.ipynb
    python tools/execute_notebook.py book/**/*.ipynb labs/*.ipynb   # every notebook (bash: shopt -s globstar)

Each notebook is run as ``jupyter execute --inplace`` runs it: nbclient's
``NotebookClient`` with the same settings (no cell timeout, cells tagged
``skip-execution`` skipped, the first error stops the run, the notebook's own
folder as the working directory) and ``store_widget_state`` on, so the state
of the book's controls is saved in the notebook for the HTML to play back.

Then, in the same kernel, still running, a last snippet (not added to the
notebook) reports the torch and Python that kernel imported, the CPU's
model name (``/proc/cpuinfo``), its core count (``os.cpu_count()``) and the
date. They are written to the notebook's metadata::

    metadata["ddp_book"]["ran_on"] = {"torch": "2.13.0", "python": "3.11.9",
                                      "cpu": "AMD EPYC 7B13", "cores": 2,
                                      "date": "2026-11-28"}

and the built page shows them in one line (``book/_ext/ran_on.py``), so a
reader can see which torch a page's outputs came from and when.
``tests/test_ran_on.py`` fails for a notebook without the record.

A notebook that fails is left as it was (nothing is written), and the tool
goes on with the next one; its exit code is 1 if any failed.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import nbformat
from nbclient import NotebookClient

# Runs in the notebook's kernel after its last cell: one line of JSON on stdout.
PROBE = """\
import datetime as _ddp_book_datetime, json as _ddp_book_json, os as _ddp_book_os, platform as _ddp_book_platform
import torch as _ddp_book_torch
def _ddp_book_cpu():
    try:
        with open("/proc/cpuinfo") as file:
            for line in file:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return _ddp_book_platform.processor() or _ddp_book_platform.machine()
print(_ddp_book_json.dumps({
    "torch": _ddp_book_torch.__version__,
    "python": _ddp_book_platform.python_version(),
    "cpu": _ddp_book_cpu(),
    "cores": _ddp_book_os.cpu_count(),
    "date": _ddp_book_datetime.date.today().isoformat(),
}))
"""

RAN_ON_KEYS = ("torch", "python", "cpu", "cores", "date")


def ran_on(nb) -> dict | None:
    """The record of what a notebook's outputs ran on, or None if it has none."""
    return nb.get("metadata", {}).get("ddp_book", {}).get("ran_on")


def _probe(client: NotebookClient) -> dict:
    """Run PROBE in the client's kernel as a cell of its own, then take the cell away again."""
    cell = nbformat.v4.new_code_cell(PROBE)
    client.nb.cells.append(cell)
    try:
        client.execute_cell(cell, len(client.nb.cells) - 1, store_history=False)
    finally:
        client.nb.cells.pop()
    text = "".join(output.get("text", "") for output in cell.outputs if output.get("name") == "stdout")
    record = json.loads(text.strip().splitlines()[-1])
    missing = [key for key in RAN_ON_KEYS if not record.get(key)]
    if missing:
        raise RuntimeError(f"the kernel did not report {missing}: {record}")
    return record


def execute(path: Path, *, timeout: int | None = None, kernel_name: str = "") -> dict:
    """Execute the notebook at ``path`` in place, record what it ran on, and return that record."""
    path = Path(path)
    if path.suffix != ".ipynb":
        raise ValueError(f"{path} is not a notebook: give .ipynb files")
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such notebook")
    nb = nbformat.read(path, as_version=4)
    # The settings of `jupyter execute` (nbclient.cli.NbClientApp.run_notebook).
    client = NotebookClient(nb, timeout=timeout, startup_timeout=60, skip_cells_with_tag="skip-execution",
                            allow_errors=False, kernel_name=kernel_name, store_widget_state=True,
                            resources={"metadata": {"path": str(path.parent.absolute())}})
    # NotebookClient.execute, with one more step before the kernel stops.
    with client.setup_kernel():
        info = client.wait_for_reply(client.kc.kernel_info())
        if info is not None and "language_info" in info["content"]:
            nb.metadata["language_info"] = info["content"]["language_info"]
        for index, cell in enumerate(nb.cells):
            client.execute_cell(cell, index, execution_count=client.code_cells_executed + 1)
        client.set_widgets_metadata()
        record = _probe(client)
    nb.metadata.setdefault("ddp_book", {})["ran_on"] = record
    nbformat.write(nb, path)
    return record


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="Execute notebooks in place (as `jupyter execute --inplace`) "
                                     "and record in each the torch, Python, CPU and date of the run.")
    parser.add_argument("notebooks", nargs="+", type=Path, metavar="NOTEBOOK")
    parser.add_argument("--timeout", type=int, default=None, metavar="SECONDS",
                        help="the longest a cell may run (default: no limit, as jupyter execute)")
    args = parser.parse_args(argv)
    failed = []
    for path in args.notebooks:
        print(f"executing {path}", file=sys.stderr, flush=True)
        try:
            record = execute(path, timeout=args.timeout)
        except Exception as error:  # report, and go on with the next notebook
            print(f"{path}: FAILED, left unchanged: {type(error).__name__}: {error}", file=sys.stderr)
            failed.append(path)
            continue
        print(f"{path}: ran on torch {record['torch']}, Python {record['python']}, {record['cpu']} "
              f"({record['cores']} cores), {record['date']}", file=sys.stderr)
    if failed:
        print(f"{len(failed)} of {len(args.notebooks)} notebooks failed: {', '.join(map(str, failed))}",
              file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
