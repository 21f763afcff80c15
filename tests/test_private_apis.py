"""Every private API in ddp_lab/private_apis.py is still there, and still used where the table says.

One test per entry, named by its dotted path: after an upgrade of torch,
Python or a Jupyter tool, a private name that moved or vanished fails here
by name, with the files that use it, instead of as a hang in a chapter or a
kernel that never answers. A few entries are relied on for more than their
existence (what a dict holds, the arguments a function takes): ``BEHAVIOUR``
checks that too. A second test per entry keeps the table honest the other
way: each file it names must exist and still use the API.
"""

import importlib
import inspect
import linecache
import re
from collections.abc import Mapping
from pathlib import Path

import pytest

from ddp_lab.private_apis import PRIVATE_APIS, by_path, resolve

ROOT = Path(__file__).resolve().parents[1]
IDS = [api.path for api in PRIVATE_APIS]


def _pg_map_read_by_name(pg_map):
    c10d = importlib.import_module("torch.distributed.distributed_c10d")
    assert isinstance(pg_map, dict), f"_pg_map is a {type(pg_map).__name__}, not a dict"
    source = inspect.getsource(c10d._World.pg_map.fget)
    assert re.search(r"\b_pg_map\b", source), "_World.pg_map no longer reads the module's _pg_map"


def _rendezvous_arguments(function):
    from ddp_lab.launcher import where_stuck

    parameters = set(inspect.signature(function).parameters)
    wanted = set(where_stuck._RENDEZVOUS_ARGUMENTS["_create_c10d_store"])
    assert wanted <= parameters, \
        f"_create_c10d_store takes {sorted(parameters)}, no longer {sorted(wanted - parameters)}"


def _send_of_its_own(send):
    import torch.distributed as dist

    assert "send" in vars(dist.ProcessGroup), "ProcessGroup.send is no longer the class's own (harness wraps it there)"


def _collective_operators(namespace):
    for name in ("allreduce_", "broadcast_", "allgather_", "reduce_scatter_"):
        assert hasattr(namespace, name), f"torch.ops.c10d has no operator {name}"


def _cells_in_linecache(cache):
    from IPython.core.compilerop import CachingCompiler

    name = CachingCompiler().cache("x = 1\n", 0, "x = 1\n")
    size, mtime, lines, _ = linecache.cache[name]
    assert mtime is None and lines == ["x = 1\n"], "IPython no longer keeps a cell in linecache without an mtime"


def _calls_render_traceback(showtraceback):
    assert "_render_traceback_" in inspect.getsource(showtraceback), \
        "IPython's showtraceback no longer calls an exception's _render_traceback_"


def _a_mapping(table):
    assert isinstance(table, Mapping), f"cloudpickle.Pickler.dispatch_table is a {type(table).__name__}"


def _allow_stdin_set_per_request(trait):
    import ipykernel.ipkernel

    source = inspect.getsource(ipykernel.ipkernel)
    assert re.search(r"self\._allow_stdin\s*=\s*allow_stdin", source), \
        "ipykernel no longer sets _allow_stdin from each execute request"


def _names_the_class_in_the_state(key):
    import anywidget

    class Probe(anywidget.AnyWidget):
        _esm = "export default {};"

    assert key == "_anywidget_id"
    assert Probe().get_state()[key].endswith(".Probe")


def _tempdir_inherited(process_class):
    import multiprocessing.process
    import multiprocessing.util

    config = multiprocessing.process.current_process()._config
    assert isinstance(config, dict), f"a process's _config is a {type(config).__name__}, not a dict"
    assert "_config" in inspect.getsource(multiprocessing.process.BaseProcess.__init__), \
        "a new process no longer copies its parent's _config"
    assert re.search(r"_config\.get\(['\"]tempdir['\"]\)", inspect.getsource(multiprocessing.util.get_temp_dir)), \
        "multiprocessing.util.get_temp_dir no longer reads _config['tempdir']"


def _a_fresh_record_starts_a_new_forkserver(alive_fd):
    from multiprocessing import forkserver

    init = inspect.getsource(forkserver.ForkServer.__init__)
    for name in ("_forkserver_address", "_forkserver_alive_fd", "_forkserver_pid"):
        assert re.search(rf"self\.{name}\s*=\s*None", init), f"a new ForkServer no longer sets {name} to None"
    assert re.search(r"if self\._forkserver_pid is not None", inspect.getsource(forkserver.ForkServer.ensure_running)), \
        "ForkServer.ensure_running no longer starts a forkserver when _forkserver_pid is None"


def _the_loop_receives_with_recvfds(main):
    assert "reduction.recvfds(" in inspect.getsource(main), \
        "the forkserver's loop no longer receives a request with reduction.recvfds"


BEHAVIOUR = {
    "torch.distributed.distributed_c10d._pg_map": _pg_map_read_by_name,
    "torch.distributed.rendezvous._create_c10d_store": _rendezvous_arguments,
    "torch.distributed.ProcessGroup.send": _send_of_its_own,
    "torch.ops.c10d": _collective_operators,
    "IPython.core.compilerop.CachingCompiler.cache": _cells_in_linecache,
    "IPython.core.interactiveshell.InteractiveShell.showtraceback": _calls_render_traceback,
    "cloudpickle.Pickler.dispatch_table": _a_mapping,
    "ipykernel.kernelbase.Kernel._allow_stdin": _allow_stdin_set_per_request,
    "anywidget.widget._ANYWIDGET_ID_KEY": _names_the_class_in_the_state,
    "multiprocessing.process.BaseProcess._config": _tempdir_inherited,
    "multiprocessing.forkserver._forkserver._forkserver_alive_fd": _a_fresh_record_starts_a_new_forkserver,
    "multiprocessing.forkserver.main": _the_loop_receives_with_recvfds,
}


def test_the_table_is_one_entry_per_path():
    assert len(set(IDS)) == len(IDS), "a path is listed twice"
    assert set(BEHAVIOUR) <= set(IDS), "BEHAVIOUR names a path the table does not have"
    assert by_path("torch._dynamo").library == "torch"


@pytest.mark.parametrize("path", IDS, ids=IDS)
def test_the_private_api_is_still_there(path):
    api = by_path(path)
    try:
        found = resolve(api)
    except LookupError as error:
        pytest.fail(f"{error}\n  why it is used: {api.why}")
    if path in BEHAVIOUR:
        try:
            BEHAVIOUR[path](found)
        except AssertionError as error:
            pytest.fail(f"private API {path} (used by {', '.join(api.used_by)}) changed: {error}\n"
                        f"  why it is used: {api.why}\n  checked with {api.checked_with}")


@pytest.mark.parametrize("path", IDS, ids=IDS)
def test_each_user_still_uses_it(path):
    api = by_path(path)
    for user in api.used_by:
        file = ROOT / user
        assert file.exists(), f"{path}: the table says {user} uses it, but there is no such file"
        assert api.name in file.read_text(encoding="utf-8"), (
            f"{path}: {user} no longer mentions {api.name!r}; drop it from the entry's used_by "
            f"(or the entry) in ddp_lab/private_apis.py")


def test_resolve_says_what_is_gone():
    from ddp_lab.private_apis import PrivateAPI

    gone = PrivateAPI("multiprocessing.forkserver._no_such_thing", ("nowhere.py",), "a test", "Python 3.11")
    with pytest.raises(LookupError, match=r"multiprocessing.forkserver._no_such_thing \(used by nowhere.py\) is gone"):
        resolve(gone)
    unset = PrivateAPI("argparse.ArgumentParser._no_such_field", ("nowhere.py",), "a test", "Python 3.11",
                       on_instances=True)
    with pytest.raises(LookupError, match="no longer sets '_no_such_field' on its instances"):
        resolve(unset)
