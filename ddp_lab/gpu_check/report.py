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
    show_step_profiles()                 # Chapter 14: one DDP step under torch.profiler, drawn

Where no file is stored, the page says so and how to make one; once a file
is committed, the same cells print its tables. ``report`` gives the same
text for documents at hand (the command prints it for the file it wrote).
Only the plot needs matplotlib, and imports it when asked.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

from ddp_lab.gpu_check.machine import gpu_names
from ddp_lab.gpu_check.results import RESULTS_DIR, RESULTS_FOLDER, stored_results
from ddp_lab.host import uses_nccl
from ddp_lab.units import format_bytes, format_rate, format_seconds

__all__ = ["show_gpu_results", "gpu_results_text", "report", "measured_on", "checks_table", "all_reduce_table",
           "copy_table", "draw_all_reduce_busbw", "no_results_message", "step_profiles", "step_profile_lines",
           "show_step_profiles", "PARTS"]

PARTS = ("all", "checks", "all_reduce", "host_to_device")
# The check that measures each part.
MEASURED_BY = {"all_reduce": "all_reduce_bandwidth", "host_to_device": "host_to_device_copy"}
TITLES = {"all_reduce": "all-reduce", "host_to_device": "host-to-GPU copies"}
# Every line this module prints fits the book's text column (Chapter 14's
# stored report is read on a phone as well as on a desktop).
WIDTH = 80


def wrapped(text: str, indent: str = "") -> str:
    """``text`` as lines of at most WIDTH characters, every line but the first indented."""
    return textwrap.fill(text, WIDTH, subsequent_indent=indent, break_on_hyphens=False)


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
    lines = [wrapped(f"GPU checks, {measured_on(document)}:", "  "),
             f"{summary['passed']} passed, {summary['failed']} failed, {summary['skipped']} skipped"]
    for check in document["checks"]:
        lines.append(wrapped(f"{check['status']:<8} {check['name']}: {check['title']}", " " * 9))
        lines.append(wrapped(f"{'':<8} {check['outcome']}", " " * 9))
    return "\n".join(lines)


def _measurement_block(document, part, *, heading):
    check = next((c for c in document["checks"] if c["name"] == MEASURED_BY[part]), None)
    title = f"{TITLES[part]}, {measured_on(document)}" if heading else TITLES[part]
    if check is None:
        return wrapped(f"{title}: not measured: the run did not include {MEASURED_BY[part]}", "  ")
    if check["status"] != "passed":
        return wrapped(f"{title}: not measured ({check['status']}): {check['outcome']}", "  ")
    table = all_reduce_table if part == "all_reduce" else copy_table
    return f"{wrapped(title, '  ')}\n{table(check['measurement'])}"


def all_reduce_table(measurement) -> str:
    """Time per call (min, median, max), algbw and busbw at each size."""
    m = measurement
    lines = [wrapped(f"{m['backend']}, {m['world_size']} rank(s) on {m['device'].split(':')[0]}, {m['dtype']}, "
                     f"{m['repeats']} repeats of {m['iterations']} calls per size, timed with {m['timer']}"),
             wrapped(m["note"]),
             f"{'size':>9}{'time min':>10}{'median':>10}{'max':>10}{'algbw':>13}{'busbw':>13}{'busbw best':>13}"]
    for row in m["rows"]:
        seconds = row["seconds"]
        lines.append(f"{format_bytes(row['bytes']):>9}{format_seconds(seconds['min']):>10}"
                     f"{format_seconds(seconds['median']):>10}{format_seconds(seconds['max']):>10}"
                     f"{format_rate(row['algbw']):>13}{format_rate(row['busbw']):>13}"
                     f"{format_rate(row['busbw_best']):>13}")
    return "\n".join(lines)


def copy_table(measurement) -> str:
    """Bandwidth (from the median time) of pageable and pinned copies at each
    size, then each copy's fastest and slowest time: two tables of 80 columns."""
    m = measurement
    lines = [wrapped(f"{m['direction']} ({m['device']}), {m['repeats']} repeats per size, "
                     f"timed with {m['timer']}"),
             f"{'size':>10}{'pageable':>13}{'pinned':>13}{'pinned/pageable':>17}"]
    for row in m["rows"]:
        pageable, pinned = row["pageable"], row["pinned"]
        lines.append(f"{format_bytes(row['bytes']):>10}{format_rate(pageable['bandwidth']):>13}"
                     f"{format_rate(pinned['bandwidth']):>13}"
                     f"{pinned['bandwidth'] / pageable['bandwidth']:>16.2f}x")
    lines += ["", f"{'size':>10}{'pageable min-max':>22}{'pinned min-max':>22}"]
    for row in m["rows"]:
        lines.append(f"{format_bytes(row['bytes']):>10}{_time_range(row['pageable']['seconds']):>22}"
                     f"{_time_range(row['pinned']['seconds']):>22}")
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


def step_profiles(documents):
    """``[(document, [rank 0's summary of each layout])]`` for every run whose
    ``ddp_step_profile`` check passed (``ddp_lab.gpu_check.step_profile``)."""
    found = []
    for document in documents:
        check = next((c for c in document["checks"] if c["name"] == "ddp_step_profile"), None)
        if check and check["status"] == "passed":
            found.append((document, list(check["details"].values())))
    return found


def layout_title(summary) -> str:
    """``nccl: 1 rank on cuda:0`` or ``gloo: 2 ranks sharing cuda:0 (rank 0 drawn)``."""
    ranks, device = summary["world_size"], summary["device"]
    if ranks == 1:
        where = f"1 rank on {device}"
    elif uses_nccl(summary["backend"]):
        where = f"{ranks} ranks, one GPU each (rank 0 drawn)"
    else:
        where = f"{ranks} ranks sharing {device} (rank 0 drawn)"
    return f"{summary['backend']}: {where}"


def step_profile_lines(summary) -> list[str]:
    """What one profiled step holds, in numbers: phases, all-reduce calls, GPU work by kind."""
    phases = ", ".join(f"{p['name']} {format_seconds(p['dur_us'] / 1e6)}" for p in summary["phases"])
    kinds = [e["kind"] for lane in summary["streams"] for e in lane["events"]]
    calls = summary["collectives"]
    longest = max((c["dur_us"] for c in calls), default=0.0)
    model = summary["model"]
    lines = [layout_title(summary) + f": an MLP of {model['layers']} layers of {model['width']}, batch "
             f"{model['batch']}, {format_bytes(model['parameter_bytes'])} of parameters",
             f"  CPU: {phases}",
             f"  {len(calls)} all-reduce calls ({calls[0]['name'] if calls else 'none'}), the longest "
             f"{format_seconds(longest / 1e6)} on the CPU",
             f"  GPU: {kinds.count('compute')} compute kernels, {kinds.count('nccl')} NCCL kernels, "
             f"{kinds.count('copy')} copies, on {len(summary['streams'])} stream(s); communication beside "
             f"backward's kernels: {format_seconds(summary['overlap_us'] / 1e6)}"]
    return [wrapped(line, "    ") for line in lines]


def show_step_profiles(folder=None):
    """Print and draw the profiled DDP steps of the stored runs, or say there are none."""
    found = step_profiles(_stored(folder))
    if not found:
        print(no_results_message(folder) if not _stored(folder) else
              "No stored run holds a profiled DDP step (check ddp_step_profile): run python -m "
              f"ddp_lab.gpu_check --only ddp_step_profile --out {RESULTS_FOLDER} on a GPU machine.")
        return
    from IPython.display import display

    from ddp_lab.draw.gpu_profile import draw_step_profile
    from ddp_lab.gpu_check.step_profile import with_communication_marked

    for document, summaries in found:
        print(wrapped(f"A DDP step under torch.profiler, {measured_on(document)}:", "  "))
        for summary in summaries:
            print("\n".join(step_profile_lines(summary)))
        display(draw_step_profile([with_communication_marked(s) for s in summaries],
                                  titles=[layout_title(s) for s in summaries]))


def _stored(folder):
    folder = RESULTS_DIR if folder is None else Path(folder)
    return stored_results(folder) if folder.exists() else []


def _check_part(part):
    if part not in PARTS:
        raise ValueError(f"part must be one of {', '.join(map(repr, PARTS))}, got {part!r}")
