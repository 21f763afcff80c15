"""Code sent to the ranks keeps its file name and lines, whatever cloudpickle does.

cloudpickle 3.1.3 renames every code object it ships by value to
"<dynamic-code>"; these tests fail with it if ``ddp_lab.launcher.serialize`` is plain
cloudpickle.
"""

import linecache
import pickle

import pytest
import torch.distributed as dist

import ddp_lab
from ddp_lab.launcher import serialize


def _nested():
    def inner(x):
        return x + 1
    return inner


class _Model:
    def forward(self, x):
        return x * 2

    @staticmethod
    def helper():
        return 3


@pytest.mark.parametrize("fn", [
    lambda: 0,
    _nested,
    _nested(),
    _Model.forward,
    _Model.helper,
], ids=["lambda", "function", "nested function", "method", "staticmethod"])
def test_code_shipped_by_value_keeps_its_file_name_and_first_line(fn):
    shipped = pickle.loads(serialize.dumps(fn))
    assert shipped.__code__.co_filename == __file__ == fn.__code__.co_filename
    assert shipped.__code__.co_firstlineno == fn.__code__.co_firstlineno
    assert list(shipped.__code__.co_positions()) == list(fn.__code__.co_positions())


def test_nested_code_inside_shipped_code_keeps_its_file_name_too():
    outer = pickle.loads(serialize.dumps(_nested))
    assert outer().__code__.co_filename == __file__


def test_a_class_defined_on_the_fly_keeps_its_methods_file_name():
    namespace = {}
    exec(compile("class Local:\n    def method(self):\n        return 1\n", "<cell 7>", "exec"), namespace)
    shipped = pickle.loads(serialize.dumps(namespace["Local"]))
    assert shipped.method.__code__.co_filename == "<cell 7>"
    assert shipped().method() == 1


def _cell(source, filename):
    """Define code the way IPython does for a notebook cell: source in linecache, no file."""
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace = {"dist": dist}
    exec(compile(source, filename, "exec"), namespace)
    return namespace


CELL = "/tmp/ipykernel_4242/1234567890.py"  # ipykernel's name for a cell


def test_a_rank_traceback_shows_the_line_of_a_notebook_cell():
    work = _cell("def work():\n    if dist.get_rank() == 1:\n        raise ValueError('odd rank')\n",
                 CELL)["work"]
    with pytest.raises(ddp_lab.RankFailed) as caught:
        ddp_lab.launch(work, 2)
    assert f'File "{CELL}", line 3, in work' in caught.value.remote_traceback
    assert "raise ValueError('odd rank')" in caught.value.remote_traceback


def test_a_timeout_says_which_cell_line_a_rank_waits_in():
    work = _cell("def hang():\n    if dist.get_rank() == 0:\n        dist.barrier()\n",
                 CELL.replace("123", "321"))["hang"]
    with pytest.raises(ddp_lab.RanksTimedOut) as caught:
        ddp_lab.launch(work, 2, timeout=2)
    assert "called from hang() line 3: dist.barrier()" in caught.value.unfinished[0]
