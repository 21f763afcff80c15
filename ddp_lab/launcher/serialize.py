"""How code and values travel between the notebook and the ranks.

A function defined in a notebook cell lives in no importable module, so
plain ``pickle`` cannot send it to a rank: cloudpickle sends it *by value*
(its code object, defaults, closure and the globals it uses). Everything
``ddp_lab`` sends either way (jobs, results, exceptions, the functions the
lab checkers run) goes through :func:`dumps` and :func:`loads` here.

One thing is changed from cloudpickle's defaults: code objects travel with
``marshal``, the format Python itself uses for ``.pyc`` files. cloudpickle
3.1.3 replaces the file name of every code object it ships with
``"<dynamic-code>"`` (to make its output byte-for-byte deterministic); the
rank then cannot show the reader's own line in a traceback, nor say
"waiting in all_reduce(), called from work() line 4" when a launch hangs.
``marshal`` keeps every field of the code object, nested functions'
code included. Its format is tied to the Python version, which is safe
here: the ranks are forked from the notebook's own interpreter.

Used by the launcher (chapter 3 onwards) and by the lab checkers.
"""

from __future__ import annotations

import marshal
import types
from collections import ChainMap
from io import BytesIO

import cloudpickle


def _code_by_marshal(code):
    return marshal.loads, (marshal.dumps(code),)


class CodeKeepingPickler(cloudpickle.Pickler):
    """cloudpickle's pickler, with code objects sent whole (file name kept)."""

    dispatch_table = ChainMap({types.CodeType: _code_by_marshal},
                              cloudpickle.Pickler.dispatch_table)


def dumps(obj) -> bytes:
    """Pickle ``obj`` by value, as cloudpickle does, keeping code file names."""
    buffer = BytesIO()
    CodeKeepingPickler(buffer, protocol=cloudpickle.DEFAULT_PROTOCOL).dump(obj)
    return buffer.getvalue()


def loads(data: bytes):
    """Unpickle what :func:`dumps` made (plain ``pickle.loads`` would do too)."""
    return cloudpickle.loads(data)
