"""Every private API that the book relies on, in one table: what it is, who uses it, and why.

The book runs real process groups from notebook cells (Chapter 3's
launcher), shows what DDP does inside (Chapters 5 and 8), reads the stacks
and flight records of hung jobs (Chapter 13b) and checks the labs' answers
(Labs 2 to 6). A few of those things no public API offers, so the package,
two chapters, the tests and the book's build reach into the private parts
of torch, of Python's ``multiprocessing`` and of the Jupyter tools: names
that start with ``_``, attributes no documentation promises, formats
written for another purpose. Any release may change them without notice.

So they are all listed here, :data:`PRIVATE_APIS`, each as a
:class:`PrivateAPI`: its dotted path (module, then attributes), the files
that use it, why no public API does the job, and the versions it was last
checked with. ``tests/test_private_apis.py`` resolves every entry, one test
each named by its path: after an upgrade, a name that moved or vanished
fails there, by name, rather than as a hang in Chapter 8 or a kernel that
never answers. The same test checks that each file named still uses it,
so the list does not outlive the code. To add an entry, write the record
below and run that test.

>>> libraries = sorted({api.library for api in PRIVATE_APIS})
>>> "torch" in libraries, "multiprocessing" in libraries
(True, True)
>>> resolve(by_path("multiprocessing.forkserver.ForkServer._stop")).__name__
'_stop'

Nothing is imported until :func:`resolve` is called: the table itself costs
no torch.
"""

from __future__ import annotations

import importlib
import inspect
import re
from dataclasses import dataclass

__all__ = ["PrivateAPI", "PRIVATE_APIS", "resolve", "by_path"]

# The versions every entry was checked with (``pip freeze`` of the book's environment).
TORCH = "torch 2.13.0, Python 3.11"
PYTHON = "Python 3.11"
IPYKERNEL = "ipykernel 7.4.0, IPython 9.18.1, Python 3.11"
IPYTHON = "IPython 9.18.1, Python 3.11"
CLOUDPICKLE = "cloudpickle 3.1.3, Python 3.11"
JUPYTER_CLIENT = "jupyter_client 8.10.0, Python 3.11"
NBVAL = "nbval 0.11.0, Python 3.11"
SPHINX = "Sphinx 7.4.7 (jupyter-book 1, myst-nb 1.4.0), Python 3.11"
ANYWIDGET = "anywidget 0.11.0, Python 3.11"


@dataclass(frozen=True)
class PrivateAPI:
    """One private API: where it is, who uses it, why, and what it was checked with.

    ``path`` is a module followed by attributes
    (``torch.distributed.distributed_c10d._pg_map``). With ``on_instances``,
    the last attribute is set on each instance (in ``__init__``), not on the
    class the path names, and is checked in that class's source.
    ``spelled`` is how the users write it, where not as the path's last part.
    """

    path: str
    used_by: tuple[str, ...]
    why: str
    checked_with: str
    on_instances: bool = False
    spelled: str = ""

    @property
    def library(self) -> str:
        """The top-level package the API belongs to (``torch``, ``multiprocessing``, ...)."""
        return self.path.split(".")[0]

    @property
    def name(self) -> str:
        """What the files in ``used_by`` write: ``spelled``, else the path's last part."""
        return self.spelled or self.path.rsplit(".", 1)[1]


PRIVATE_APIS = (
    # ------------------------------------------------------------------- torch
    PrivateAPI(
        "torch.distributed.distributed_c10d._pg_map", ("ddp_lab/launcher/keep_groups.py",),
        "torch's dict of every live process group, which _World.pg_map looks up by name at each call. "
        "A rank replaces it with a dict that also keeps each group, so that freeing a DDP model never "
        "destroys its group (and joins gloo's threads) with the GIL held: a deadlock at the end of a "
        "rank's function (Chapters 3, 8 and 11). torch has no public hook on group creation.", TORCH),
    PrivateAPI(
        "torch.distributed._DEFAULT_FIRST_BUCKET_BYTES", ("ddp_lab/data_parallel/overlap_timeline.py",),
        "The cap of DDP's first bucket (1 MiB) while bucket_cap_mb is left to its default: Chapter 8's "
        "timeline says so under that bucket. DDP documents the behaviour, not the constant.", TORCH),
    PrivateAPI(
        "torch.nn.parallel.DistributedDataParallel.bucket_bytes_cap",
        ("ddp_lab/data_parallel/overlap_timeline.py",),
        "The bucket cap a DDP model really uses, in bytes (bucket_cap_mb converted): Chapter 8's "
        "timeline prints it. Undocumented.", TORCH, on_instances=True),
    PrivateAPI(
        "torch.nn.parallel.DistributedDataParallel.bucket_bytes_cap_default",
        ("ddp_lab/data_parallel/overlap_timeline.py",),
        "Whether bucket_cap_mb was left to its default, which is when the first bucket gets its own "
        "smaller cap (Chapter 8). Undocumented.", TORCH, on_instances=True),
    PrivateAPI(
        "torch.nn.parallel.DistributedDataParallel._get_ddp_logging_data",
        ("book/part3_ddp/08_distributed_data_parallel.ipynb", "ddp_lab/cluster/measure.py",
         "book/part3_ddp/08b_ddp_in_practice.ipynb", "book/part3_ddp/08c_uneven_batchnorm_compile.ipynb",
         "ddp_lab/gpu_check/compiled_ddp.py"),
        "The bucket sizes DDP settled on after its first iterations: Chapter 8 prints them, and "
        "Chapter 12b's settings (cluster/measure.py) were chosen from them; Chapter 8b reads "
        "can_set_static_graph from it, Chapter 8c (and its GPU check, gpu_check/compiled_ddp.py) the "
        "number of buckets beside the graphs compiled. No public API tells.", TORCH),
    PrivateAPI(
        "torch.distributed.ProcessGroup._get_sequence_number_for_group",
        ("book/part2_communication/05_collectives.ipynb", "book/part3_ddp/08b_ddp_in_practice.ipynb",
         "book/part3_ddp/08c_uneven_batchnorm_compile.ipynb"),
        "How many collectives a group has run: Chapter 5 counts the collectives one call issues, "
        "Chapter 8b the all-reduces a step under no_sync and with unused parameters runs, Chapter 8c "
        "those of each step under Join and of Join's exit.", TORCH),
    PrivateAPI(
        "torch._C._distributed_c10d._dump_fr_trace", ("ddp_lab/debugging/flight_recorder.py",),
        "A rank's flight record, pickled: the function NCCL's dump on a timeout calls, the only way to "
        "dump gloo's record (Chapter 13b). The dump's layout (pg_config, entries) is read too.", TORCH),
    PrivateAPI(
        "torch.utils._python_dispatch.TorchDispatchMode",
        ("ddp_lab/collectives/recorder.py",),
        "Sees every c10d operation a rank issues, with its tensors: the package's one recorder of "
        "collectives, with which Labs 4 and 6 check which collectives the reader's code runs and "
        "Chapter 15d counts the bytes of tensor parallelism's. The documented way to intercept "
        "operators, in a private module.", TORCH),
    PrivateAPI(
        "torch.distributed.pipelining.schedules.PipelineScheduleMulti.pipeline_order",
        ("ddp_lab/model_parallel/deep_pipelines.py",),
        "The order of actions a multi-stage schedule gives each rank (None where it idles): Chapter 15f "
        "prints it, and counts each schedule's bubble from it. An attribute without an underscore but "
        "undocumented, holding private _Action tuples.", TORCH, on_instances=True),
    PrivateAPI(
        "torch.distributed.pipelining.schedules._Action.computation_type",
        ("ddp_lab/model_parallel/deep_pipelines.py",),
        "What an action of pipeline_order does (F, B, I, W, ...), with stage_index and "
        "microbatch_index: the fields of the private NamedTuple _Action that Chapter 15f reads.",
        TORCH),
    PrivateAPI(
        "torch.distributed.tensor._redistribute", ("ddp_lab/model_parallel/two_d.py",),
        "Its logger, by the module's name (logging.getLogger): it warns that a redistribution over two "
        "mesh dimensions took several collectives where a flattened mesh would take one, which "
        "full_tensor() of Chapter 15f's 2-D parameters does when they are compared with one "
        "process's. The chapter sets it to errors only, so that the page shows the run.", TORCH,
        spelled="torch.distributed.tensor._redistribute"),
    PrivateAPI(
        "torch.ops.c10d", ("ddp_lab/collectives/recorder.py",),
        "Under a dispatch mode, collectives are operators of the c10d namespace (c10d.allreduce_, "
        "c10d.broadcast_, ...): the recorder of Labs 4 and 6 and Chapter 15d tells them by that name.",
        TORCH),
    PrivateAPI(
        "torch.distributed.ProcessGroup.send", ("ddp_lab/checks/harness.py",),
        "Every point-to-point send (dist.send, isend, a P2POp, group.send) ends in this method of the "
        "Python class ProcessGroup (its own entry in the class's __dict__): Labs 2 and 3 wrap it to "
        "record each message the reader's code sends. That all sends pass there is not promised.", TORCH),
    PrivateAPI(
        "torch._dynamo", ("ddp_lab/launcher/forkserver_preload.py",
                          "book/part3_ddp/08c_uneven_batchnorm_compile.ipynb"),
        "Imported once in the forkserver, which every rank is forked from: any rank that builds an "
        "optimizer imports it (about a second), so a rank forked after it gets it for free (Chapter 3). "
        "Chapter 8c sets torch._dynamo.config.optimize_ddp and calls torch._dynamo.reset() to show "
        "DDPOptimizer's graph breaks per bucket: torch.compile has no public switch for either.",
        TORCH),
    PrivateAPI(
        "torch._logging.set_logs", ("book/part3_ddp/08c_uneven_batchnorm_compile.ipynb",),
        "Silences dynamo's warning that DDP's record_function is ignored, which would print a "
        "machine-dependent line in Chapter 8c's compile cell. The documented way to set torch's "
        "log levels (torch._logging docs), in a private module.", TORCH),
    PrivateAPI(
        "torch.nn.Module._forward_pre_hooks", ("tests/test_checkpointing.py",),
        "The hooks a module holds: the checkpointing test checks that Chapter 15c's wrapper removes "
        "every hook it added. No public API lists a module's hooks.", TORCH, on_instances=True),
    PrivateAPI(
        "torch.distributed.rendezvous._create_c10d_store",
        ("ddp_lab/launcher/where_stuck.py", "ddp_lab/debugging/stacks.py"),
        "Where the env:// and tcp:// rendezvous wait for the other ranks: a rank stuck there is told "
        "from one stuck in a collective, and its arguments (hostname, port, rank, world_size) are read "
        "from the live frame to say which value was wrong (Chapters 3 and 13b).", TORCH),
    PrivateAPI(
        "torch.distributed.rendezvous._env_rendezvous_handler", ("ddp_lab/debugging/stacks.py",),
        "The env:// rendezvous, recognised by name in a worker's stack: such a worker waits for its "
        "peers, not in a collective (Chapter 13b).", TORCH),
    # --------------------------------------------------- Python: multiprocessing
    PrivateAPI(
        "multiprocessing.forkserver._forkserver",
        ("ddp_lab/launcher/forkserver.py", "ddp_lab/launcher/shutdown.py", "tests/test_launch.py",
         "tests/test_kernel_shutdown.py"),
        "The process's one ForkServer: whether it runs yet, and stopping it when the kernel shuts "
        "down (a second saved at every kernel's exit).", PYTHON),
    PrivateAPI(
        "multiprocessing.forkserver._forkserver._forkserver_pid",
        ("ddp_lab/launcher/forkserver.py", "ddp_lab/launcher/shutdown.py", "tests/test_launch.py",
         "tests/test_kernel_shutdown.py"),
        "None until the forkserver runs: add_forkserver_preload refuses once it runs (its imports are "
        "done), shutdown kills it, the tests find it.", PYTHON),
    PrivateAPI(
        "multiprocessing.forkserver._forkserver._forkserver_alive_fd", ("ddp_lab/launcher/forkserver.py",),
        "The write end of the pipe that keeps the forkserver alive. A child made with os.fork() inherits "
        "it with the rest of its parent's record; the launcher closes the child's copy and resets the "
        "record, so that the child's launch starts a forkserver of its own instead of failing with "
        "ChildProcessError (Chapter 3).", PYTHON),
    PrivateAPI(
        "multiprocessing.forkserver._forkserver._forkserver_address",
        ("ddp_lab/launcher/forkserver.py", "tests/test_launch_failures.py"),
        "The forkserver's socket: reset with the rest of an inherited record; a test connects to it and "
        "closes, as a broken-off request does.", PYTHON),
    PrivateAPI(
        "multiprocessing.forkserver._forkserver._lock", ("ddp_lab/launcher/forkserver.py",),
        "Guards the record; replaced in a forked child, where another thread of the parent may have "
        "held it at the fork.", PYTHON),
    PrivateAPI(
        "multiprocessing.forkserver.ForkServer._stop", ("ddp_lab/launcher/shutdown.py",),
        "Closes the forkserver's pipe and collects it, as multiprocessing's own tests do.", PYTHON),
    PrivateAPI(
        "multiprocessing.forkserver.main", ("ddp_lab/launcher/forkserver_preload.py",),
        "The forkserver's loop, recognised by name in the traceback it dies with when a request breaks "
        "off (see recvfds).", PYTHON),
    PrivateAPI(
        "multiprocessing.reduction.recvfds", ("ddp_lab/launcher/forkserver_preload.py",),
        "Where the forkserver's loop receives a request's file descriptors: an EOFError there (a request "
        "broken off) ends the forkserver quietly, and the next launch says so in one line (Chapter 3).",
        PYTHON),
    PrivateAPI(
        "multiprocessing.process.BaseProcess._config", ("ddp_lab/launcher/worker_group.py",),
        "A process's settings, copied into every child (multiprocessing/process.py): its 'tempdir' "
        "points a launch's ranks at a folder of their own, removed with them, so a killed rank's "
        "nested forkserver leaves no listener file.", PYTHON, on_instances=True),
    PrivateAPI(
        "multiprocessing.resource_tracker._resource_tracker",
        ("ddp_lab/launcher/shutdown.py", "tests/test_kernel_shutdown.py"),
        "The process's one resource tracker, stopped with the kernel: ranks still holding its pipe "
        "would keep it alive.", PYTHON),
    PrivateAPI(
        "multiprocessing.resource_tracker._resource_tracker._pid",
        ("ddp_lab/launcher/shutdown.py", "tests/test_kernel_shutdown.py"),
        "The tracker's pid: None while none runs; killed if it does not exit in time.", PYTHON),
    PrivateAPI(
        "multiprocessing.resource_tracker.ResourceTracker._stop", ("ddp_lab/launcher/shutdown.py",),
        "Lets the tracker free what is left and exit; collects it.", PYTHON),
    # ---------------------------------------------------------- Python: the rest
    PrivateAPI(
        "sys._current_frames", ("ddp_lab/launcher/where_stuck.py", "ddp_lab/launcher/config.py"),
        "The main thread's stack, read by a rank's own helper thread while the main thread waits: "
        "where a hung rank waits (Chapter 3); and read by a launch from another thread: whether the "
        "script's unguarded top-level code runs, which every rank would run again. Documented, but "
        "CPython's only.", PYTHON),
    PrivateAPI(
        "sys._getframe", ("ddp_lab/launcher/config.py",),
        "The caller's frames: a launch from a script's top-level code without the __main__ guard is "
        "refused with the line to guard. Documented, but CPython's only.", PYTHON),
    PrivateAPI(
        "argparse.ArgumentParser._actions", ("tests/test_train_script.py",),
        "The options a book script's parser declares, compared with what the chapter says.", PYTHON,
        on_instances=True),
    # ------------------------------------------------------- ipykernel, IPython
    PrivateAPI(
        "ipykernel.kernelbase.Kernel._allow_stdin", ("ddp_lab/launcher/output.py",),
        "Set from each execute request's allow_stdin: whether the front end can answer input(), that "
        "is whether a person watches the cell. The live line of the ranks' output is shown only then "
        "(not under nbclient or nbval).", IPYKERNEL),
    PrivateAPI(
        "ipykernel.zmqshell.ZMQInteractiveShell.kernel", ("ddp_lab/launcher/shutdown.py",),
        "The kernel behind the shell: what tells a Jupyter kernel from IPython in a terminal.",
        IPYKERNEL),
    PrivateAPI(
        "IPython.core.interactiveshell.InteractiveShell.exit_now", ("ddp_lab/launcher/shutdown.py",),
        "ipykernel sets it first thing when asked to shut down or restart: observed, so that the "
        "ranks and the forkserver stop before ipykernel kills the kernel's children.", IPYKERNEL),
    PrivateAPI(
        "IPython.core.compilerop.CachingCompiler.cache", ("ddp_lab/launcher/jobs.py",),
        "Puts each executed cell in linecache under a name that is no file (IPython 8+ with no "
        "modification time, IPython 7 with the time it ran): interactive_sources sends those lines to "
        "the ranks, so that their tracebacks show the cell's code.", IPYTHON, spelled="linecache"),
    PrivateAPI(
        "IPython.core.compilerop.CachingCompiler.format_code_name", ("ddp_lab/launcher/user_traceback.py",),
        "Names a cell's file as IPython's tracebacks do (Cell In[3]): a failed launch shows the "
        "reader's frames under the same names (Chapter 3).", IPYTHON),
    PrivateAPI(
        "IPython.core.interactiveshell.InteractiveShell.showtraceback",
        ("ddp_lab/launcher/errors.py", "ddp_lab/launcher/user_traceback.py"),
        "Shows an exception that has a _render_traceback_ method by calling it (the protocol "
        "ipyparallel's errors use, documented nowhere): a failed launch shows the reader's code, not "
        "the launcher's (Chapter 3).", IPYTHON, spelled="_render_traceback_"),
    # -------------------------------------------------------------- cloudpickle
    PrivateAPI(
        "cloudpickle.Pickler.dispatch_table", ("ddp_lab/launcher/serialize.py",),
        "cloudpickle's reducers by type, a mapping on the class: the launcher's pickler puts its own "
        "reducer for code objects (sent with marshal, file names kept) in front of it (Chapter 3).",
        CLOUDPICKLE),
    # ------------------------------------------------ jupyter_client (the tests)
    PrivateAPI(
        "jupyter_client.manager.KernelManager._async_pre_start_kernel", ("tests/plumbing/unix_socket_kernels.py",),
        "Overridden to switch a kernel to the ipc transport, in a folder of its own, before the "
        "connection file is written: no other process can take its ports.", JUPYTER_CLIENT),
    PrivateAPI(
        "jupyter_client.manager.KernelManager._async_cleanup_resources", ("tests/plumbing/unix_socket_kernels.py",),
        "Overridden to remove that folder when the kernel is shut down.", JUPYTER_CLIENT),
    # ----------------------------------------------------------- nbval (the tests)
    PrivateAPI(
        "nbval.plugin.IPyNbFile.setup", ("tests/plumbing/nbval_unix_sockets.py",),
        "Replaced by nbval's own steps with another kernel: the notebook's kernel on Unix sockets.",
        NBVAL),
    PrivateAPI(
        "nbval.plugin.IPyNbFile.setup_sanitize_files", ("tests/plumbing/nbval_unix_sockets.py",),
        "One of nbval's setup steps, called as nbval calls it.", NBVAL),
    PrivateAPI(
        "nbval.plugin.IPyNbFile.nb", ("tests/plumbing/nbval_unix_sockets.py",),
        "The notebook nbval read: its kernelspec names the kernel.", NBVAL, on_instances=True),
    PrivateAPI(
        "nbval.plugin.IPyNbFile.kernel", ("tests/plumbing/nbval_unix_sockets.py",),
        "Where nbval's cells find their kernel.", NBVAL, on_instances=True),
    PrivateAPI(
        "nbval.kernel.RunningKernel.km", ("tests/plumbing/nbval_unix_sockets.py",),
        "nbval's kernel object, built around a manager started elsewhere.", NBVAL, on_instances=True),
    PrivateAPI(
        "nbval.kernel.RunningKernel.kc", ("tests/plumbing/nbval_unix_sockets.py",),
        "... and its client.", NBVAL, on_instances=True),
    PrivateAPI(
        "nbval.kernel.RunningKernel._ensure_iopub_up", ("tests/plumbing/nbval_unix_sockets.py",),
        "Called as nbval's own __init__ calls it, before the first cell.", NBVAL),
    PrivateAPI(
        "nbval.kernel.CURRENT_ENV_KERNEL_NAME", ("tests/plumbing/nbval_unix_sockets.py",),
        "The kernel name behind --nbval-current-env.", NBVAL),
    PrivateAPI(
        "nbval.kernel.NbvalKernelspecManager", ("tests/plumbing/nbval_unix_sockets.py",),
        "The kernelspec manager that knows that name.", NBVAL),
    PrivateAPI(
        "nbval.cover.setup_coverage", ("tests/plumbing/nbval_unix_sockets.py",),
        "nbval's coverage step, kept as nbval's setup has it.", NBVAL),
    # ------------------------------------------------------- Sphinx (the build)
    PrivateAPI(
        "sphinx.builders.html._assets._JavaScript.filename", ("book/_ext/book_html.py",),
        "The entries of html-page-context's script_files are of this private class: their filename "
        "and attributes tell which scripts were registered twice.", SPHINX, on_instances=True),
    PrivateAPI(
        "sphinx.builders.html._assets._JavaScript.attributes", ("book/_ext/book_html.py",),
        "See filename.", SPHINX, on_instances=True),
    # -------------------------------------------------------- anywidget (the tests)
    PrivateAPI(
        "anywidget.widget._ANYWIDGET_ID_KEY", ("tests/widget_pages.py",),
        "The key of a widget's saved state that names its class (_anywidget_id): the widget tests "
        "find each control on a page by it.", ANYWIDGET, spelled="_anywidget_id"),
)


def by_path(path: str) -> PrivateAPI:
    """The entry of :data:`PRIVATE_APIS` with this ``path``."""
    for api in PRIVATE_APIS:
        if api.path == path:
            return api
    raise KeyError(f"no private API {path!r} in ddp_lab.private_apis")


def resolve(api: PrivateAPI):
    """Import and look up ``api`` now; raises ``LookupError`` naming it when it is gone.

    The longest importable prefix of the path is imported as a module, the
    rest looked up as attributes (``torch.distributed.rendezvous`` is the
    module, though ``torch.distributed`` also has a function of that name).
    For an attribute set on instances, the class is returned once its
    source is seen to set it.
    """
    parts = api.path.split(".")
    last = len(parts) - 1 if api.on_instances else len(parts)
    for split in range(last, 0, -1):
        try:
            found = importlib.import_module(".".join(parts[:split]))
            break
        except ImportError:
            continue
    else:
        raise LookupError(f"private API {api.path} (used by {', '.join(api.used_by)}): "
                          f"{parts[0]} cannot be imported")
    for i, attribute in enumerate(parts[split:last], start=split):
        try:
            found = getattr(found, attribute)
        except AttributeError:
            raise LookupError(f"private API {api.path} (used by {', '.join(api.used_by)}) is gone: "
                              f"{'.'.join(parts[:i])} has no attribute {attribute!r} "
                              f"(checked with {api.checked_with})") from None
    if api.on_instances and not _sets_on_instances(found, parts[-1]):
        raise LookupError(f"private API {api.path} (used by {', '.join(api.used_by)}) is gone: "
                          f"{found.__qualname__} no longer sets {parts[-1]!r} on its instances "
                          f"(checked with {api.checked_with})")
    return found


def _sets_on_instances(cls, attribute) -> bool:
    """Whether a class (or a base of it) sets ``attribute``: ``self.attribute = ...``,
    ``self.a, self.attribute = ...`` or ``setattr(self, "attribute", ...)``."""
    assigned = re.compile(rf"\bself\.{attribute}\b[^=\n]*=(?!=)|[\"']{attribute}[\"']")
    for klass in inspect.getmro(cls):
        try:
            source = inspect.getsource(klass)
        except (OSError, TypeError):  # a class of C, or object
            continue
        if assigned.search(source):
            return True
    return False
