"""How checkers word steps and the reader's exceptions."""

import pytest

from ddp_lab.checks.wording import error_in_your_code, steps_text


@pytest.mark.parametrize("steps, text", [
    ([0], "step 1"),
    ([1, 2, 3], "steps 2-4"),
    ([0, 2], "steps 1, 3"),
])
def test_steps_are_counted_from_one_and_runs_are_ranges(steps, text):
    assert steps_text(steps) == text


GLOO_MESSAGE = "[rank1]:[F1122 21:14:26.656353058 ProcessGroupGloo.cpp:1537] sizes do not match"


def readers_step():
    raise RuntimeError(GLOO_MESSAGE)


def test_an_exception_is_cut_to_its_message_and_the_readers_line():
    try:
        readers_step()
    except RuntimeError as error:
        text = error_in_your_code(error)
    assert text == "RuntimeError: sizes do not match (in readers_step: raise RuntimeError(GLOO_MESSAGE))"


def test_without_a_traceback_only_the_message_is_given():
    assert error_in_your_code(ValueError("bad shape")) == "ValueError: bad shape"
