"""Execute notebooks several at a time, ahead of Sphinx, into myst-nb's cache.

myst-nb executes notebooks one after the other, as Sphinx reads them. On a
machine with two cores that leaves one idle much of the time: a kernel
starting, a notebook importing torch, ranks waiting for each other all keep a
single core busy. So, before Sphinx reads anything, this extension executes
the notebooks it is about to read several at a time (``execute_ahead_jobs`` in
``_config.yml``), exactly as myst-nb would: same working folder, timeout and
error policy, and the results go into the same jupyter-cache. When Sphinx
then reads them, myst-nb finds them in the cache and moves on.

Cells that measure time are tagged ``measures-time``, and each runs with the
machine to itself: a benchmark sharing the cores with another notebook would
print slower figures than the machine gives. ``machine_turns.Turns`` arranges
this (the tests share the same lock between pytest's workers).
Ordinary cells, and kernels starting or stopping, share the machine; a
timing cell waits until the other notebook's cell in progress has finished,
and that notebook waits before its next cell until the timing cell is done.

Their kernels are forked from one process that has imported torch
(``zygote_kernels``), instead of each starting a fresh Python that imports
torch twice, once in the kernel and once in its forkserver: that saves
about 2.5 s of CPU per notebook, a minute of the build on two cores.

They start longest first, by the time each took when last executed
(``recorded_durations``), so that no long notebook starts last and runs
alone at the end.

Each execution is also saved with a record of everything its outputs
depend on (``executed_notebooks``), so that the tests that follow the build
compare it with the committed outputs instead of executing the notebook a
second time.

A notebook that fails here is simply not cached, so myst-nb executes it again
on its own and reports the failure the usual way, traceback and all. A port
taken by the notebook running beside it, say, costs time and nothing else.
"""

from __future__ import annotations

import tempfile
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

import nbformat
from jupyter_cache import get_cache
from jupyter_cache.base import CacheBundleIn
from jupyter_cache.executors.utils import single_nb_execution
from sphinx.application import Sphinx
from sphinx.util import logging

import executed_notebooks
from machine_turns import TIMING_TAG, Turns
from recorded_durations import longest_first
from zygote_kernels import KernelZygote

logger = logging.getLogger(__name__)


class NotebookTurns:
    """One notebook's turns on the machine (``machine_turns.Turns``), taken in
    nbclient's cell hooks.

    The notebook shares the machine from the moment its kernel starts until it
    has stopped, except while one of its timing cells has the machine alone.
    Before each cell it gives its share up and takes it again, which is where
    a timing cell of another notebook gets in.
    """

    def __init__(self, folder):
        self.turns = Turns(folder)
        self.cell_times = {}  # cell index: [start, end], seconds since the epoch (kept with the execution)

    def take(self, alone):
        self.turns.take(alone)

    def release(self):
        self.turns.close()

    def on_cell_execute(self, cell, cell_index):
        self.take(alone=TIMING_TAG in cell.metadata.get("tags", []))
        self.cell_times[cell_index] = [round(time.time(), 3)]

    def on_cell_executed(self, cell, cell_index, execute_reply):
        self.cell_times[cell_index].append(round(time.time(), 3))
        if self.turns.held == "alone":
            self.take(alone=False)


def execute_ahead(app: Sphinx, env, docnames):
    """Sphinx's env-before-read-docs: execute the notebooks about to be read."""
    nb_config = env.mystnb_config  # myst-nb's, with the cache's path resolved
    jobs = app.config.execute_ahead_jobs
    if nb_config.execution_mode != "cache" or jobs < 2:
        return
    cache = get_cache(nb_config.execution_cache_path)
    paths = [Path(env.doc2path(name)) for name in sorted(docnames)]
    notebooks = [(path, nbformat.read(path, as_version=4)) for path in paths if path.suffix == ".ipynb"]
    notebooks = [(path, nb) for path, nb in notebooks if not _in_cache(cache, nb)]
    if not notebooks:
        return
    # Longest first (recorded_durations): the last notebook to start is a short one.
    order = {path: i for i, path in enumerate(longest_first([path for path, _ in notebooks]))}
    notebooks.sort(key=lambda item: order[item[0]])
    logger.info(f"executing {len(notebooks)} notebooks ahead, {jobs} at a time")
    started = time.perf_counter()
    zygote = KernelZygote()  # forks the kernels (zygote_kernels): each saves importing torch twice
    try:
        with tempfile.TemporaryDirectory(prefix="ddp-book-turns-") as turns_folder, ThreadPoolExecutor(jobs) as pool:
            runs = {pool.submit(_execute, path, nb, nb_config, turns_folder, zygote): path for path, nb in notebooks}
            for run in as_completed(runs):
                _store(cache, runs[run], run, saved=_saved_path(app, runs[run]))  # the cache is written from this thread only
    finally:
        zygote.stop()
    logger.info(f"executed {len(notebooks)} notebooks ahead in {time.perf_counter() - started:.1f} s")


def _in_cache(cache, nb):
    try:
        cache.match_cache_notebook(nb)
    except KeyError:
        return False
    return True


def _execute(path, nb, nb_config, turns_folder, zygote):
    """Run one notebook in its own folder, as myst-nb's cache mode does."""
    turns = NotebookTurns(turns_folder)
    inputs = executed_notebooks.inputs(nb)  # before it runs: what it ran from
    turns.take(alone=False)  # for the kernel's start
    try:
        return inputs, turns.cell_times, single_nb_execution(
            nb,
            cwd=str(path.parent.resolve()),
            timeout=nb_config.execution_timeout,
            allow_errors=nb_config.execution_allow_errors,
            meta_override=True,
            on_cell_execute=turns.on_cell_execute,
            on_cell_executed=turns.on_cell_executed,
            kernel_manager_class=zygote.kernel_manager_class(),
        )
    finally:
        turns.release()  # after the kernel stopped, or when a cell failed


def _saved_path(app, path):
    """Where the execution is kept for nbval: ``_build/executed/`` for the book
    (``executed_notebooks.saved_path``), the notebook's place under the sources."""
    return executed_notebooks.saved_path(path, sources=app.srcdir, folder=Path(app.outdir).parent / executed_notebooks.EXECUTED.name)


def _store(cache, path, run, saved):
    """Cache a run the way myst-nb's cache mode does (its own code cannot take
    the cell hooks above, so these two calls are repeated from it)."""
    # A kernel that would not start raises; a cell that raised or timed out is in result.err.
    error = run.exception() or run.result()[-1].err
    if error is not None:
        logger.info(f"{path}: failed ahead ({type(error).__name__}); myst-nb will execute it alone")
        return
    inputs, cell_times, result = run.result()
    record = cache.add_nb_to_project(str(path))
    cache.cache_notebook_bundle(
        CacheBundleIn(result.nb, record.uri, data={"execution_seconds": result.time}),
        check_validity=False,
        overwrite=True,
    )
    executed_notebooks.save(saved, result.nb, inputs, result.time, cell_times)  # for nbval
    logger.info(f"{path}: executed ahead in {result.time:.2f} seconds")


def setup(app: Sphinx):
    app.add_config_value("execute_ahead_jobs", 2, "env", types=[int])
    app.connect("env-before-read-docs", execute_ahead)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
