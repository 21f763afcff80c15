"""Execute notebooks several at a time, while Sphinx reads, into myst-nb's cache.

myst-nb executes notebooks one after the other, as Sphinx reads them. On a
machine with two cores that leaves one idle much of the time: a kernel
starting, a notebook importing torch, ranks waiting for each other all keep a
single core busy. So, when Sphinx has listed the pages it is about to read,
this extension starts executing their notebooks several at a time
(``execute_ahead_jobs`` in ``_config.yml``), exactly as myst-nb would: same
working folder, timeout and error policy, and the results go into the same
jupyter-cache. Sphinx reads the other pages first, then each notebook once
its execution has ended (its source-read event waits for it), in the order
they should end; so when myst-nb reads a notebook it finds it in the cache
and moves on, and most of the reading is done on a core the last kernels
leave free.

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
itself and reports the failure the usual way, traceback and all. A port
taken by the notebook running beside it, say, costs time and nothing else.
"""

from __future__ import annotations

import tempfile
import time
from concurrent.futures import ThreadPoolExecutor, wait
from pathlib import Path

import nbformat
from jupyter_cache import get_cache
from jupyter_cache.base import CacheBundleIn
from jupyter_cache.executors.utils import single_nb_execution
from sphinx.application import Sphinx
from sphinx.util import logging

import executed_notebooks
from machine_turns import TIMING_TAG, Turns
from recorded_durations import expected_finish_order, longest_first, notebook_seconds
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
    """Sphinx's env-before-read-docs: start executing the notebooks about to be
    read, and have Sphinx read the other pages first, then the notebooks in
    the order they should finish."""
    nb_config = env.mystnb_config  # myst-nb's, with the cache's path resolved
    jobs = app.config.execute_ahead_jobs
    if nb_config.execution_mode != "cache" or jobs < 2:
        return
    cache = get_cache(nb_config.execution_cache_path)
    paths = {name: Path(env.doc2path(name)) for name in docnames}
    notebooks = {name: nbformat.read(path, as_version=4) for name, path in paths.items() if path.suffix == ".ipynb"}
    notebooks = {name: nb for name, nb in notebooks.items() if not _in_cache(cache, nb)}
    if not notebooks:
        return
    runs = app.execute_ahead = AheadRuns(app, cache, {name: (paths[name], nb) for name, nb in notebooks.items()}, jobs)
    finish = {name: i for i, name in enumerate(runs.expected_finish)}
    docnames.sort(key=lambda name: finish.get(name, -1))  # in place, as the event allows; stable
    if app.parallel > 1:  # a parallel reader reads in other processes: have everything stored first
        runs.finish()


class AheadRuns:
    """The notebooks executing ahead of Sphinx's reader, started longest
    first (``recorded_durations``) in ``jobs`` threads, each stored in the
    cache when the reader reaches it (:meth:`wait_for`, from Sphinx's
    source-read event) or when reading ends (:meth:`finish`).

    Only Sphinx's thread writes the cache. While the reader waits for one
    notebook, the others keep executing; while the last ones execute, it
    reads the pages and notebooks that are done, on a core their kernels
    leave free. Reading is work like any other: the reader holds a shared
    turn on the machine (``machine_turns``) except while it waits, so a
    timing cell never runs beside it either.
    """

    def __init__(self, app, cache, notebooks, jobs):
        self.app, self.cache = app, cache
        seconds = {path: notebook_seconds(nb) for path, nb in notebooks.values()}  # read once, here
        order = longest_first(list(seconds), seconds)
        by_path = {path: name for name, (path, _) in notebooks.items()}
        self.expected_finish = [by_path[path] for path in expected_finish_order(order, jobs, seconds)]
        logger.info(f"executing {len(notebooks)} notebooks ahead, {jobs} at a time")
        self.started = time.perf_counter()
        self.zygote = KernelZygote()  # forks the kernels (zygote_kernels): each saves importing torch twice
        self._turns = tempfile.TemporaryDirectory(prefix="ddp-book-turns-")
        self._pool = ThreadPoolExecutor(jobs)
        self.pending = {}
        for path in order:  # longest first: submitted in this order, they start in it
            name = by_path[path]
            self.pending[name] = (path, self._pool.submit(_execute, path, notebooks[name][1], app.env.mystnb_config,
                                                          self._turns.name, self.zygote))
        self.count = len(notebooks)
        self.reader = Turns(self._turns.name)  # Sphinx's own turn, for reading
        self.reader.take(alone=False)

    def wait_for(self, docname):
        """Block until ``docname``'s execution has ended, and store it; nothing if it is not one of them."""
        if docname in self.pending:
            path, run = self.pending.pop(docname)
            self.reader.release()
            wait([run])
            self.reader.take(alone=False)
            _store(self.cache, path, run, saved=_saved_path(self.app, path))
        if not self.pending:
            self._stop()

    def finish(self):
        """Wait for and store every execution not stored yet (those the reader did not reach)."""
        for docname in list(self.pending):
            self.wait_for(docname)
        self._stop()

    def _stop(self):
        if self.zygote is None:
            return
        self._pool.shutdown()
        self.zygote.stop()
        self.zygote = None
        self.reader.close()
        self._turns.cleanup()
        logger.info(f"executed {self.count} notebooks ahead in {time.perf_counter() - self.started:.1f} s")


def wait_for_execution(app: Sphinx, docname, source):
    """Sphinx's source-read: before myst-nb reads a notebook, its execution ahead has ended and is cached."""
    runs = getattr(app, "execute_ahead", None)
    if runs is not None:
        runs.wait_for(docname)


def finish_executions(app: Sphinx, *_):
    """Sphinx's env-updated and build-finished: no execution is left running or unstored."""
    runs = getattr(app, "execute_ahead", None)
    if runs is not None:
        runs.finish()


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
        logger.info(f"{path}: failed ahead ({type(error).__name__}); myst-nb will execute it itself")
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
    app.connect("source-read", wait_for_execution)
    app.connect("env-updated", finish_executions)
    app.connect("build-finished", finish_executions)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
