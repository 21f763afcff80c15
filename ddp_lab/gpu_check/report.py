"""The book's GPU measurements on its pages: results files of ``python -m ddp_lab.gpu_check``, as text and a plot.

The other half of :mod:`ddp_lab.gpu_check.results`: that module writes and
reads the files, this one says what they hold.

Chapters 5, 6, 9 and 14 are built on machines without a GPU. What they show
of GPUs comes from the results files committed in
``book/part4_running/gpu_results/``, each naming the machine it was measured
on and the day::

    show_gpu_results("all_reduce")       # Chapters 5 and 6: nccl's all-reduce
    show_gpu_results("host_to_device")   # Chapter 9: pinned against pageable copies
    show_gpu_results()                   # Chapter 14: every check, then both measurements

Where no file is stored, the page says so and how to make one; once a file
is committed, the same cells print its tables. ``report`` gives the same
text for documents at hand (the command prints it for the file it wrote).
Only the plot needs matplotlib, and imports it when asked.
"""

from __future__ import annotations

from pathlib import Path

from ddp_lab.gpu_check.machine import gpu_names
from ddp_lab.gpu_check.results import RESULTS_DIR, RESULTS_FOLDER, stored_results
from ddp_lab.units import format_bytes, format_rate, format_seconds

__all__ = ["show_gpu_results", "gpu_results_text", "report", "measured_on", "checks_table", "all_reduce_table",
           "copy_table", "draw_all_reduce_busbw", "no_results_message", "PARTS"]

PARTS = ("all", "checks", "all_reduce", "host_to_device")
# The check that measures each part.
MEASURED_BY = {"all_reduce": "all_reduce_bandwidth", "host_to_device": "host_to_device_copy"}
TITLES = {"all_reduce": "all-reduce", "host_to_device": "host-to-GPU copies"}


def show_gpu_results(part="all", folder=None, *, plot=False):
    """Print the stored results (``part``: one of ``PARTS``); with ``plot``, also draw
    the all-reduce bus bandwidth of every stored machine, when there is one."""
    print(gpu_results_text(part, folder))
    if plot:
        figure = draw_all_reduce_busbw(_stored(folder))
        if figure is not None:
            from IPython.display import display

            display(figure)


def gpu_results_text(part="all", folder=None) -> str:
    """The stored results as the pages print them, or why there are none."""
    _check_part(part)
    documents = _stored(folder)
    if not documents:
        return no_results_message(folder)
    return report(documents, part)


def no_results_message(folder=None) -> str:
    """What a page says where no results file is stored."""
    folder = RESULTS_DIR if folder is None else Path(folder)
    if not folder.exists():
        return (f"No GPU measurement is stored here: this copy of ddp_lab comes without the book's "
                f"{RESULTS_FOLDER} folder, where the measurements are kept; they are on the book's pages.")
    return (f"No GPU measurement is stored yet: run `python -m ddp_lab.gpu_check --out {RESULTS_FOLDER}` "
            f"on a GPU machine and commit the file.")


def report(documents, part="all") -> str:
    """One block of text per results document, oldest run first."""
    _check_part(part)
    blocks = []
    for document in documents:
        if part in ("all", "checks"):
            blocks.append(checks_table(document))
        for measured in ("all_reduce", "host_to_device"):
            if part in ("all", measured):
                blocks.append(_measurement_block(document, measured, heading=part != "all"))
    return "\n\n".join(blocks)


def measured_on(document) -> str:
    """``measured on 8 × NVIDIA H100 80GB HBM3 on 2026-01-10 (driver ..., CUDA ..., NCCL ..., torch ...)``."""
    machine, day = document["machine"], document["date"][:10]
    if not machine["gpus"]:
        return (f"made without a GPU (--allow-no-gpu) on {day}: torch {machine['torch']}, "
                f"{machine['cpu_cores']} CPU cores; every GPU check skipped")
    versions = [f"driver {machine['driver']}", f"CUDA {machine['cuda'] or 'unknown'}"]
    if machine["nccl"]:
        versions.append(f"NCCL {machine['nccl']}")
    versions.append(f"torch {machine['torch']}")
    return f"measured on {gpu_names(machine['devices'])} on {day} ({', '.join(versions)})"


def checks_table(document) -> str:
    """Every check of one run: its status and what it saw, or why it did not run."""
    summary = document["summary"]
    lines = [f"GPU checks, {measured_on(document)}:",
             f"{summary['passed']} passed, {summary['failed']} failed, {summary['skipped']} skipped"]
    for check in document["checks"]:
        lines.append(f"{check['status']:<8} {check['name']}: {check['title']}")
        lines.append(f"{'':<8} {check['outcome']}")
    return "\n".join(lines)


def _measurement_block(document, part, *, heading):
    check = next((c for c in document["checks"] if c["name"] == MEASURED_BY[part]), None)
    title = f"{TITLES[part]}, {measured_on(document)}" if heading else TITLES[part]
    if check is None:
        return f"{title}: not measured: the run did not include {MEASURED_BY[part]}"
    if check["status"] != "passed":
        return f"{title}: not measured ({check['status']}): {check['outcome']}"
    table = all_reduce_table if part == "all_reduce" else copy_table
    return f"{title}\n{table(check['measurement'])}"


def all_reduce_table(measurement) -> str:
    """Time per call (min, median, max), algbw and busbw at each size."""
    m = measurement
    lines = [f"{m['backend']}, {m['world_size']} rank(s) on {m['device'].split(':')[0]}, {m['dtype']}, "
             f"{m['repeats']} repeats of {m['iterations']} calls per size, timed with {m['timer']}",
             m["note"],
             f"{'size':>10}{'time min':>11}{'median':>11}{'max':>11}{'algbw':>13}{'busbw':>13}{'busbw best':>13}"]
    for row in m["rows"]:
        seconds = row["seconds"]
        lines.append(f"{format_bytes(row['bytes']):>10}{format_seconds(seconds['min']):>11}"
                     f"{format_seconds(seconds['median']):>11}{format_seconds(seconds['max']):>11}"
                     f"{format_rate(row['algbw']):>13}{format_rate(row['busbw']):>13}"
                     f"{format_rate(row['busbw_best']):>13}")
    return "\n".join(lines)


def copy_table(measurement) -> str:
    """Bandwidth (from the median time) of pageable and pinned copies at each size."""
    m = measurement
    lines = [f"{m['direction']} ({m['device']}), {m['repeats']} repeats per size, timed with {m['timer']}",
             f"{'size':>10}{'pageable':>13}{'pinned':>13}{'pinned/pageable':>17}"
             f"{'pageable min-max':>22}{'pinned min-max':>22}"]
    for row in m["rows"]:
        pageable, pinned = row["pageable"], row["pinned"]
        lines.append(f"{format_bytes(row['bytes']):>10}{format_rate(pageable['bandwidth']):>13}"
                     f"{format_rate(pinned['bandwidth']):>13}"
                     f"{pinned['bandwidth'] / pageable['bandwidth']:>16.2f}x"
                     f"{_time_range(pageable['seconds']):>22}{_time_range(pinned['seconds']):>22}")
    return "\n".join(lines)


def _time_range(seconds):
    return f"{format_seconds(seconds['min'])}-{format_seconds(seconds['max'])}"


def draw_all_reduce_busbw(documents):
    """Bus bandwidth against size, one line per stored machine with two ranks or more;
    None when there is nothing to draw (no file, nothing measured, one rank only)."""
    measured = []
    for document in documents:
        check = next((c for c in document["checks"] if c["name"] == MEASURED_BY["all_reduce"]), None)
        if check and check["status"] == "passed" and check["measurement"]["world_size"] > 1:
            measured.append((document, check["measurement"]))
    if not measured:
        return None
    import matplotlib.pyplot as plt

    figure, ax = plt.subplots(figsize=(6.4, 3.6))
    plt.close(figure)
    for document, m in measured:
        label = f"{gpu_names(document['machine']['devices'])}, {m['backend']}, {document['date'][:10]}"
        ax.plot([r["bytes"] for r in m["rows"]], [r["busbw"] / 1e9 for r in m["rows"]], "o-", label=label)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel("bus bandwidth (GB/s, median)")
    ax.set_title("All-reduce on GPUs, from the stored results")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    return figure


def _stored(folder):
    folder = RESULTS_DIR if folder is None else Path(folder)
    return stored_results(folder) if folder.exists() else []


def _check_part(part):
    if part not in PARTS:
        raise ValueError(f"part must be one of {', '.join(map(repr, PARTS))}, got {part!r}")
