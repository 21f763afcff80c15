"""How the checkers put what they saw into words.

Two phrasings every code checker needs: a set of training steps as a reader
counts them ("step 2", "steps 1-3"), and an exception raised by the reader's
code, cut down to the message and the reader's own line that raised it.

Used by the checkers of Lab 4 (DDP from hooks) and Lab 6 (ZeRO-1).
"""

from __future__ import annotations

import os
import re
import traceback

__all__ = ["steps_text", "error_in_your_code"]

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Gloo's messages start with a log prefix holding the time and a source line,
# e.g. "[rank0]:[F1122 21:14:26.656353058 ProcessGroupGloo.cpp:1537] ": it changes
# every run and says nothing to the reader.
_GLOO_LOG_PREFIX = re.compile(r"(\[rank\d+\]:)?\[[A-Z]\d{4} [^\]]*\]\s*")


def steps_text(steps) -> str:
    """Zero-based step indices as a reader counts them: ``[1]`` -> "step 2",
    ``[0, 1, 2]`` -> "steps 1-3", ``[0, 2]`` -> "steps 1, 3"."""
    steps = [s + 1 for s in steps]
    if len(steps) == 1:
        return f"step {steps[0]}"
    if steps == list(range(steps[0], steps[-1] + 1)):
        return f"steps {steps[0]}-{steps[-1]}"
    return f"steps {', '.join(map(str, steps))}"


def error_in_your_code(error: BaseException) -> str:
    """The exception's type and message, and the last line of the reader's own
    code in its traceback (frames of ddp_lab and of torch are skipped)."""
    frames = traceback.extract_tb(error.__traceback__)
    theirs = [f for f in frames if not os.path.abspath(f.filename).startswith(_PACKAGE)
              and "torch" not in f.filename]
    where = f" (in {theirs[-1].name}: {theirs[-1].line})" if theirs and theirs[-1].line else ""
    text = _GLOO_LOG_PREFIX.sub("", str(error)).strip()
    return f"{type(error).__name__}: {text}{where}"
