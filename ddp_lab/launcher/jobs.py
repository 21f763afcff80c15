"""What a job carries to the ranks: the function, pickled by value, and the cells' source.

``launch`` and ``spawn`` (Chapter 3 on) send the function a rank must
call, with its arguments, as one pickle made by ``ddp_lab.launcher.serialize``
(cloudpickle, by value: a function defined in a notebook cell travels whole).
A value that cannot be pickled is named before any rank starts, and so is a
function that the arguments given cannot call (``check_arguments``). The
source lines of the notebook's cells go along, so that a traceback from a
rank shows the cell's code.
"""

from __future__ import annotations

import inspect
import linecache
import os
import reprlib

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

    IPython keeps each executed cell in ``linecache`` under a name that is
    no file on disk: IPython 8 and later with no modification time (the
    entry's second item is None), IPython 7 (Colab's) with the time the cell
    ran, kept there by its own ``checkcache``. Sending those lines along lets
    a traceback from a rank show the cell's code, not just a line number
    (Lab 3's checker names the line a deadlocked rank waits on).
    """
    return {
        name: entry[2]
        for name, entry in list(linecache.cache.items())
        if len(entry) == 4 and entry[2] and (entry[1] is None or not os.path.exists(name))
    }


_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


def check_arguments(fn, args=(), kwargs=None, *, launcher="launch"):
    """Refuse, before any rank starts, a function that needs more positional arguments than it gets.

    ``launch`` calls ``fn(*args, **kwargs)`` on every rank, the same call on
    each; ``spawn`` calls ``fn(rank, *args)``, with ``args`` here already
    starting with the rank. The usual mistake (Chapter 3) is a function
    written for ``torch.multiprocessing.spawn``, ``def run(rank, size):`` as
    in PyTorch's tutorial, given to ``launch``: every rank would raise
    ``TypeError: run() missing 2 required positional arguments``. The error
    raised here names the function, its parameters, what it was given, and
    what to do. Only that case is refused: a signature ``inspect`` cannot
    read, or any other mismatch, is left to the call in the ranks.

    >>> def run(rank, size): ...
    >>> check_arguments(run, (), {})  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    TypeError: run(rank, size) needs 2 positional arguments (rank, size), but launch calls run(): ...
    """
    kwargs = kwargs or {}
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):  # no signature to read (some built-ins)
        return
    try:
        signature.bind(*args, **kwargs)
        return
    except TypeError:
        pass
    positional = [p for p in signature.parameters.values() if p.kind in _POSITIONAL]
    missing = [p.name for p in positional[len(args):]
               if p.default is p.empty and not (p.kind is p.POSITIONAL_OR_KEYWORD and p.name in kwargs)]
    if not missing:
        return
    name = getattr(fn, "__name__", None) or type(fn).__name__
    needed = [p.name for p in positional if p.default is p.empty]
    shown = reprlib.Repr()
    shown.maxstring = shown.maxother = 40
    values = ["rank", *map(shown.repr, args[1:])] if launcher == "spawn" else list(map(shown.repr, args))
    call = ", ".join([*values, *(f"{k}={shown.repr(v)}" for k, v in kwargs.items())])
    plural = "s" if len(needed) != 1 else ""
    message = (f"{name}{signature} needs {len(needed)} positional argument{plural} "
               f"({', '.join(needed)}), but {launcher} calls {name}({call}): "
               f"{', '.join(missing)} {'is' if len(missing) == 1 else 'are'} missing. ")
    if launcher == "spawn":
        message += ("ddp_lab.spawn, like torch.multiprocessing.spawn, calls fn(rank, *args) on "
                    "each rank: the rank first, then args; put the other values in args=(...).")
    else:
        message += ("ddp_lab.launch calls fn(*args, **kwargs), the same call on every rank; a "
                    "rank asks for its rank with dist.get_rank() and for the number of ranks with "
                    "dist.get_world_size(). torch.multiprocessing.spawn passes the rank as the "
                    "first argument instead. For a function written for spawn, such as the "
                    "tutorial's run(rank, size), launch a call that passes them, "
                    f"ddp_lab.launch(lambda: {name}(dist.get_rank(), dist.get_world_size()), W), "
                    "or run the tutorial's code unchanged with ddp_lab.spawn(fn, args=(...), nprocs=W).")
    raise TypeError(message)
