"""Execute notebooks two at a time, ahead of Sphinx, into myst-nb's cache.

myst-nb executes notebooks one after the other, as Sphinx reads them. On a
machine with two cores that leaves one idle much of the time: a kernel
starting, a notebook importing torch, ranks waiting for each other all keep a
single core busy. So, before Sphinx reads anything, this extension executes the
notebooks listed in ``execute_ahead_notebooks`` (``_config.yml``) two at a time
(``execute_ahead_jobs``), exactly as myst-nb would: same working folder,
timeout and error policy, and the results go into the same jupyter-cache. When
Sphinx then reads those notebooks, myst-nb finds them in the cache and moves
on; the notebooks not listed it executes itself, one at a time, as before.

Only notebooks that measure no time may be listed: a benchmark sharing the
machine with another notebook would print slower figures than the machine
gives. The list is in order of execution; longest first keeps both workers
busy to the end.

A notebook that fails here is simply not cached, so myst-nb executes it again
on its own and reports the failure the usual way, traceback and all. A port
taken by the notebook running beside it, say, costs time and nothing else.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

import nbformat
from jupyter_cache import get_cache
from jupyter_cache.base import CacheBundleIn
from jupyter_cache.executors.utils import single_nb_execution
from sphinx.application import Sphinx
from sphinx.util import logging

logger = logging.getLogger(__name__)


def execute_ahead(app: Sphinx, env, docnames):
    """Sphinx's env-before-read-docs: execute the listed notebooks about to be read."""
    config, nb_config = app.config, env.mystnb_config  # myst-nb's, with the cache's path resolved
    if nb_config.execution_mode != "cache" or config.execute_ahead_jobs < 2:
        return
    cache = get_cache(nb_config.execution_cache_path)
    to_read = set(docnames)
    paths = [Path(env.doc2path(name)) for name in config.execute_ahead_notebooks if name in to_read]
    notebooks = [(path, nbformat.read(path, as_version=4)) for path in paths if path.suffix == ".ipynb"]
    notebooks = [(path, nb) for path, nb in notebooks if not _in_cache(cache, nb)]
    if not notebooks:
        return
    logger.info(f"executing {len(notebooks)} notebooks ahead, {config.execute_ahead_jobs} at a time")
    started = time.perf_counter()
    with ThreadPoolExecutor(config.execute_ahead_jobs) as pool:
        runs = {pool.submit(_execute, path, nb, nb_config): path for path, nb in notebooks}
        for run in as_completed(runs):
            _store(cache, runs[run], run)  # the cache is written from this thread only
    logger.info(f"executed {len(notebooks)} notebooks ahead in {time.perf_counter() - started:.1f} s")


def _in_cache(cache, nb):
    try:
        cache.match_cache_notebook(nb)
    except KeyError:
        return False
    return True


def _execute(path, nb, nb_config):
    """Run one notebook in its own folder, as myst-nb's cache mode does."""
    return single_nb_execution(
        nb,
        cwd=str(path.parent.resolve()),
        timeout=nb_config.execution_timeout,
        allow_errors=nb_config.execution_allow_errors,
        meta_override=True,
    )


def _store(cache, path, run):
    error = run.exception()  # e.g. a kernel that would not start
    result = run.result() if error is None else None
    if error is None:
        error = result.err  # a cell that raised or timed out
    if error is not None:
        logger.info(f"{path}: failed ahead ({type(error).__name__}); myst-nb will execute it alone")
        return
    record = cache.add_nb_to_project(str(path))
    cache.cache_notebook_bundle(
        CacheBundleIn(result.nb, record.uri, data={"execution_seconds": result.time}),
        check_validity=False,
        overwrite=True,
    )
    logger.info(f"{path}: executed ahead in {result.time:.2f} seconds")


def setup(app: Sphinx):
    app.add_config_value("execute_ahead_notebooks", [], "env", types=[list])
    app.add_config_value("execute_ahead_jobs", 2, "env", types=[int])
    app.connect("env-before-read-docs", execute_ahead)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
