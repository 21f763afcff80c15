"""What a job carries to the ranks: the function, pickled by value, and the cells' source.

``launch`` and ``spawn`` (Chapter 3 on) send the function a rank must
call, with its arguments, as one pickle made by ``ddp_lab.launcher.serialize``
(cloudpickle, by value: a function defined in a notebook cell travels whole).
A value that cannot be pickled is named before any rank starts. The source
lines of the notebook's cells go along, so that a traceback from a rank shows
the cell's code.
"""

from __future__ import annotations

import linecache

from ddp_lab.launcher import serialize


def pickle_call(fn, args=(), kwargs=None):
    """Pickle ``(fn, args, kwargs)`` by value, naming the part that cannot be."""
    if not callable(fn):
        raise TypeError(f"fn must be callable (a function), got {type(fn).__name__}: {fn!r}")
    if not isinstance(args, (tuple, list)):
        raise TypeError(f"args must be a tuple, got {type(args).__name__}: {args!r}")
    kwargs = {} if kwargs is None else kwargs
    if not isinstance(kwargs, dict):
        raise TypeError(f"kwargs must be a dict, got {type(kwargs).__name__}: {kwargs!r}")
    try:
        return serialize.dumps((fn, tuple(args), kwargs))
    except Exception as error:
        raise _unpicklable_part(fn, args, kwargs) from error


def _unpicklable_part(fn, args, kwargs):
    parts = [("fn", fn)]
    parts += [(f"args[{i}]", value) for i, value in enumerate(args)]
    parts += [(f"kwargs[{key!r}]", value) for key, value in kwargs.items()]
    for label, value in parts:
        try:
            serialize.dumps(value)
        except Exception as error:
            return TypeError(
                f"{label} ({type(value).__name__}) cannot be pickled, so it cannot be "
                f"sent to the ranks: {error}. Create it inside the function instead.")
    return TypeError("(fn, args, kwargs) cannot be pickled")


def interactive_sources():
    """Source lines of code typed into notebook cells, for remote tracebacks.

    IPython keeps each executed cell in ``linecache`` with no modification
    time (it is not a file). Sending those lines along lets a traceback from
    a rank show the cell's code, not just a line number.
    """
    return {
        name: entry[2]
        for name, entry in list(linecache.cache.items())
        if len(entry) == 4 and entry[1] is None and entry[2]
    }
