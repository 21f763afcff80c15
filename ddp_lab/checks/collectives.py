"""Lab 2's checker: all-gather and all-reduce built from send and recv.

The reader writes, with point-to-point messages only (``dist.send``,
``dist.recv``, ``dist.isend``, ``dist.irecv``):

* ``my_all_gather(tensor)``: called on every rank, returns a list of W
  tensors, element ``i`` a copy of rank ``i``'s ``tensor``;
* ``my_all_reduce(tensor)``: called on every rank, returns a new tensor, the
  element-wise sum of every rank's ``tensor``.

Neither may change ``tensor``: the caller still needs it. Then::

    check_all_gather(my_all_gather)
    check_all_reduce(my_all_reduce)

run the function on real gloo ranks (world sizes 2, 3 and 4), on random
shapes and dtypes drawn from a seeded generator, and compare what every rank
got with what torch's own ``dist.all_gather`` / ``dist.all_reduce`` give on
the same inputs. Mistakes are explained: which rank, which chunk of the
result, whose data it holds instead; a shape or dtype that is off; an input
that was modified; a deadlock, with where each rank was waiting; an
exception, with its last line. Inside the ranks the built-in collectives are
switched off while the reader's function runs (the exercise is to build
them), so calling one fails with a message that says so.

Lab 2's last exercise uses a collective instead of building one: the
reader's ``my_dispatch(tokens, destinations)`` sends each token to the rank
its destination names, as a mixture-of-experts layer sends tokens to the
rank of their expert, with ``dist.all_to_all_single`` and uneven split
sizes. ``check_all_to_all(my_dispatch)`` runs it on real ranks against the
same exchange done by the checker, and names the two usual slips before
gloo gets to them (a mismatch of split sizes between ranks makes gloo raise,
abort the process or, where sizes happen to fit, deliver the wrong tokens):
input and output split sizes exchanged (``swapped_splits``), and the rank's
own counts used as output split sizes, the counts never exchanged
(``no_count_exchange``).

A checker never raises for a wrong answer: it returns a ``CheckResult``
that prints as a verdict and a list of mistakes.
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass
from functools import partial

import torch

from ddp_lab.checks import harness
from ddp_lab.checks.harness import close_elements, launch_checked, point_to_point_only, same_values, show_values
from ddp_lab.checks.result import CheckResult, Mistake, signature_mistake
from ddp_lab.launcher import serialize
from ddp_lab.launcher.errors import RankDied, RankFailed, RanksTimedOut
from ddp_lab.validate import check_positive_int, is_int

__all__ = ["check_all_gather", "check_all_reduce", "check_all_to_all", "make_case", "make_dispatch"]

# Collectives that move data: off while the reader's function runs.
DTYPES = (torch.float32, torch.float64, torch.int64, torch.int32)

# Floats agree within these (compared in float64), integers exactly: harness.close_elements.
TOLERANCE = {"rtol": 1e-5, "atol": 1e-5}
_same = partial(same_values, **TOLERANCE)
SIGNATURES = {
    "all_gather": "def my_all_gather(tensor): ... return [tensor of rank 0, ..., tensor of rank W-1]",
    "all_reduce": "def my_all_reduce(tensor): ... return the sum over all ranks, as a new tensor",
}


class ReaderRaised(Exception):
    """The reader's function raised inside a rank (sent back to the notebook)."""

    def __init__(self, case, last_line, code_line):
        super().__init__(f"case {case}: {last_line}")
        self.case, self.last_line, self.code_line = case, last_line, code_line

    def __reduce__(self):
        return ReaderRaised, (self.case, self.last_line, self.code_line)


@dataclass(frozen=True)
class Case:
    """One random input: the same shape and dtype on every rank."""

    index: int
    shape: tuple
    dtype: torch.dtype

    def __str__(self) -> str:
        return f"case {self.index}: shape {tuple(self.shape)}, {str(self.dtype).replace('torch.', '')}"


def make_case(world_size: int, index: int, seed: int) -> Case:
    """The shape and dtype of case ``index``, drawn from ``seed``."""
    g = torch.Generator().manual_seed(seed * 10_000 + world_size * 100 + index)
    ndim = int(torch.randint(1, 3, (1,), generator=g))
    shape = tuple(int(s) for s in torch.randint(1, 6, (ndim,), generator=g))
    dtype = DTYPES[int(torch.randint(0, len(DTYPES), (1,), generator=g))]
    return Case(index, shape, dtype)


def make_input(case: Case, rank: int, seed: int) -> torch.Tensor:
    """Rank ``rank``'s tensor for ``case``: different on every rank."""
    g = torch.Generator().manual_seed(seed * 10_000 + case.index * 100 + rank + 1)
    if case.dtype.is_floating_point:
        return torch.randn(case.shape, generator=g).to(case.dtype)
    return torch.randint(-50, 50, case.shape, generator=g).to(case.dtype)


# --- inside each rank -----------------------------------------------------------------


def run_on_rank(kind, fn_bytes, cases, seed):
    """Run the reader's function on each case; return what this rank saw.

    For every case: ``(expected, got, input_after)``, where ``expected`` is
    torch's collective on the same input and ``input_after`` is the input
    tensor as the reader's function left it.
    """
    import torch.distributed as dist

    rank, world_size = dist.get_rank(), dist.get_world_size()
    reports = []
    for case in cases:
        tensor = make_input(case, rank, seed)
        original = tensor.clone()
        if kind == "all_gather":
            expected = [torch.empty_like(tensor) for _ in range(world_size)]
            dist.all_gather(expected, tensor)
        else:
            expected = tensor.clone()
            dist.all_reduce(expected)
        with point_to_point_only(partial(_refusal, kind)):
            fn = serialize.loads(fn_bytes)
            try:
                got = fn(tensor)
            except Exception as error:
                raise _reader_raised(case, error) from None
        got = _copy_result(got)
        reports.append((expected, got, None if torch.equal(tensor, original) else tensor.clone()))
        dist.barrier()  # every rank is done with this case before the next
    return reports


@dataclass(frozen=True)
class Returned:
    """What the reader's function returned, by the name of its type, where it is no tensor, list,
    number, string or None (a generator, a lock, a module): sent back instead of the value, which
    might not pickle, so that the mistake can name it."""

    type_name: str


def _copy_result(got):
    if isinstance(got, torch.Tensor):
        return got.detach().clone()
    if isinstance(got, (list, tuple)):  # a namedtuple or list subclass comes back as a plain one
        return (tuple if isinstance(got, tuple) else list)(_copy_result(g) for g in got)
    if got is None or isinstance(got, (bool, int, float, complex, str, bytes)):
        return got
    return Returned(type(got).__name__)


def _reader_raised(case, error):
    """The last line of the exception, and the line of the reader's code that raised."""
    last_line = "".join(traceback.format_exception_only(type(error), error)).strip().splitlines()[-1]
    frames = traceback.extract_tb(error.__traceback__)
    checker = (__file__, harness.__file__)  # the refusing collectives are the harness's
    mine = [f for f in frames if f.filename not in checker and "site-packages" not in f.filename
            and "/torch/" not in f.filename]
    code_line = ""
    if mine:
        frame = mine[-1]
        code_line = f"{frame.name}() line {frame.lineno}" + (f": {frame.line}" if frame.line else "")
    return ReaderRaised(str(case), last_line, code_line)


# --- in the notebook ------------------------------------------------------------------


def check_all_gather(fn, *, world_sizes=(2, 3, 4), cases: int = 3, seed: int = 0,
                     timeout: float = 15) -> CheckResult:
    """Check the reader's ``my_all_gather(tensor) -> list of W tensors`` on real ranks."""
    return _check("all_gather", fn, world_sizes, cases, seed, timeout)


def check_all_reduce(fn, *, world_sizes=(2, 3, 4), cases: int = 3, seed: int = 0,
                     timeout: float = 15) -> CheckResult:
    """Check the reader's ``my_all_reduce(tensor) -> sum over ranks`` on real ranks."""
    return _check("all_reduce", fn, world_sizes, cases, seed, timeout)


def _refuse_bad_arguments(fn, world_sizes, example: str) -> tuple:
    """The checkers' own arguments, refused before any rank starts; the world sizes as a tuple.
    ``example`` is the call the message suggests ("check_all_gather(my_all_gather)")."""
    if not callable(fn):
        raise TypeError(f"pass your function itself, e.g. {example}; got {type(fn).__name__}: {fn!r}")
    world_sizes = tuple(world_sizes)
    for w in world_sizes:
        if not is_int(w) or not 2 <= w <= 8:
            raise ValueError(f"world sizes must be whole numbers from 2 to 8, got {w!r}")
    return world_sizes


def _check(kind, fn, world_sizes, cases, seed, timeout):
    world_sizes = _refuse_bad_arguments(fn, world_sizes, f"check_{kind}(my_{kind})")
    check_positive_int('cases', cases)
    name = getattr(fn, "__name__", f"my_{kind}")
    sizes = f"world size{'s' if len(world_sizes) > 1 else ''} {_and(world_sizes)}"
    inputs = f"{cases} seeded random input{'s' if cases > 1 else ''}"
    subject = f"{name} against dist.{kind} on {sizes}, {inputs} each"
    total = len(world_sizes) * cases
    wrong_signature = signature_mistake(fn, 1, SIGNATURES[kind])
    if wrong_signature:
        return CheckResult(subject, 0, total, "case", (wrong_signature,))
    fn_bytes = serialize.dumps(fn)
    mistakes, correct = [], 0
    for world_size in world_sizes:
        chosen = [make_case(world_size, i, seed) for i in range(cases)]
        where = f"W = {world_size}"
        reports, error = launch_checked(run_on_rank, world_size, args=(kind, fn_bytes, chosen, seed),
                                        timeout=timeout)
        if isinstance(error, harness.YourCodeExited):
            mistakes.append(harness.exit_mistake(where, error))
            break  # it would exit again at every world size
        if isinstance(error, RanksTimedOut):
            mistakes.append(harness.still_computing(where, error, timeout) or _deadlock(where, error, timeout))
            break  # it would hang (or be as slow) again at every world size, for as long
        if isinstance(error, RankFailed):
            mistake = _failure(where, error)
            mistakes.append(mistake)
            if mistake.kind == "not_implemented":
                break
            continue
        if isinstance(error, RankDied):
            mistakes.append(Mistake(where, "died", f"{error}: did the function call exit()?"))
            continue
        for index, case in enumerate(chosen):
            inputs = [make_input(case, r, seed) for r in range(world_size)]
            found = []
            for rank, per_case in enumerate(reports):
                expected, got, changed_input = per_case[index]
                compare = _compare_gather if kind == "all_gather" else _compare_reduce
                found += compare(f"{where}, {case}, rank {rank}", rank, inputs, expected, got)
                if changed_input is not None:
                    found.append(_modified_input(f"{where}, {case}, rank {rank}", inputs[rank],
                                                 changed_input))
            correct += not found
            mistakes += found
    return CheckResult(subject, correct, total, "case", _examples(mistakes))


def _examples(mistakes, per_kind=2):
    """The first ``per_kind`` mistakes of each kind, and a count of the rest.

    A wrong idea usually shows on every rank and every case; two examples
    explain it, forty repeat it.
    """
    shown, left, seen = [], {}, {}
    for m in mistakes:
        key = (m.kind, m.message) if m.kind in ("exception", "used_collective") else m.kind
        seen[key] = seen.get(key, 0) + 1
        if seen[key] <= (1 if m.kind in ("exception", "used_collective") else per_kind):
            shown.append(m)
        else:
            left[m.kind] = left.get(m.kind, 0) + 1
    if left:
        counts = ", ".join(f"{n} × {kind}" for kind, n in left.items())
        n = sum(left.values())
        shown.append(Mistake("also", "more", f"{n} more {'mistake' if n == 1 else 'mistakes'} "
                                             f"of the same {'kind' if len(left) == 1 else 'kinds'} ({counts})"))
    return tuple(shown)


# --- explaining what went wrong -------------------------------------------------------


def _deadlock(where, error, timeout):
    stuck = error.unfinished
    in_send = sorted(r for r, w in stuck.items() if "in send()" in w)
    in_recv = sorted(r for r, w in stuck.items() if "in recv()" in w)
    lines = [f"rank {r}: {w}" for r, w in sorted(stuck.items())]
    if any("starting up" in w or "idle" in w for w in stuck.values()):
        return Mistake(where, "slow_start",
                       f"the ranks had not all started after {timeout:g} s, before your function "
                       f"ran: the machine is busy. Try again with a larger timeout, e.g. "
                       f"timeout={2 * timeout:g}. Where they were: " + "; ".join(lines))
    if len(in_send) >= 2 and len(in_send) == len(stuck):
        every = "both" if len(in_send) == 2 else "all"
        why = (f"deadlock: ranks {_and(in_send)} {every} called send first. A blocking send "
               f"waits until the other rank posts the matching recv, and each of them is "
               f"waiting in its own send, so none ever reaches its recv. Let one side "
               f"receive first (e.g. the lower rank sends first, the higher one receives "
               f"first), or start the sends with dist.isend and wait on them after the recvs.")
    elif len(in_recv) == len(stuck):
        waits = (f"rank {in_recv[0]} waits" if len(in_recv) == 1 else
                 f"ranks {_and(in_recv)} {'both' if len(in_recv) == 2 else 'all'} wait")
        why = (f"deadlock: {waits} in recv for a message no rank sends "
               f"(everyone receives before sending, or a recv names a rank that never sends "
               f"to it). Check that every recv has a matching send on the rank it names.")
    else:
        why = ("deadlock: the sends and receives do not pair up: every send needs a recv "
               "on the rank it names, posted in an order that lets both sides reach it.")
    return Mistake(where, "deadlock",
                   f"{why} The ranks were stopped after {timeout:g} s; where they waited: "
                   + "; ".join(lines))


def _failure(where, error):
    remote = error.exception if isinstance(error.exception, ReaderRaised) else None
    if remote is None:  # raised by the checker's own code, e.g. a non-picklable return value
        last = error.remote_traceback.strip().splitlines()[-1]
        return Mistake(f"{where}, rank {error.rank}", "exception", f"raised {last}")
    if remote.last_line.startswith("NotImplementedError"):
        return Mistake(name_of(error), "not_implemented",
                       "not written yet: replace the `raise NotImplementedError` with your code")
    kind = "used_collective" if "use send/recv only" in remote.last_line else "exception"
    place = f" in {remote.code_line}" if remote.code_line else ""
    return Mistake(f"{where}, {remote.case}, rank {error.rank}", kind,
                   f"your function raised{place}: {remote.last_line}")


def name_of(error):
    """The reader's function name, from the line that raised."""
    remote = error.exception
    return remote.code_line.split("()")[0] if remote and remote.code_line else "your function"


def _modified_input(where, original, now):
    return Mistake(where, "modified_input",
                   f"your function changed its input tensor: it was {show_values(original)} and is now "
                   f"{show_values(now)}. The caller still needs its own tensor: receive into new "
                   f"tensors (torch.empty_like(tensor)) and add into a copy (tensor.clone()).")


def _compare_gather(where, rank, inputs, expected, got):
    world_size = len(inputs)
    if not isinstance(got, (list, tuple)):
        hint = ""
        if isinstance(got, torch.Tensor) and got.shape[:1] == (world_size,):
            hint = " (a stacked tensor? return list(...) of the W tensors instead)"
        return [Mistake(where, "not_a_list",
                        f"returned {_describe(got)}{hint}; return a list of {world_size} tensors, "
                        f"element i holding rank i's tensor")]
    if len(got) != world_size:
        return [Mistake(where, "wrong_length",
                        f"returned a list of {len(got)} tensors; with {world_size} ranks it needs "
                        f"{world_size}, one per rank (its own included)")]
    mistakes = []
    for chunk, (want, have) in enumerate(zip(expected, got)):
        at = f"{where}, chunk {chunk}"
        if not isinstance(have, torch.Tensor):
            mistakes.append(Mistake(at, "not_a_tensor", f"is {_describe(have)}, not a tensor"))
        elif _unusual(have, want):
            mistakes.append(Mistake(at, "unusual_tensor",
                                    f"is {_unusual(have, want)}; return ordinary tensors like rank {chunk}'s "
                                    f"(dense, on {want.device}): receive into torch.empty_like(tensor)"))
        elif have.shape != want.shape:
            mistakes.append(Mistake(at, "wrong_shape",
                                    f"has shape {tuple(have.shape)}, expected {tuple(want.shape)} "
                                    f"(the shape of rank {chunk}'s tensor)"))
        elif have.dtype != want.dtype:
            mistakes.append(Mistake(at, "wrong_dtype",
                                    f"has dtype {have.dtype}, expected {want.dtype}: receive into "
                                    f"torch.empty_like(tensor)"))
        elif not _same(have, want):
            mistakes.append(Mistake(at, *_whose(have, chunk, rank, inputs)))
    return mistakes


def _whose(have, chunk, rank, inputs):
    """(kind, message) for a chunk that holds the wrong values."""
    world_size = len(inputs)
    head = f"holds {show_values(have)}, expected rank {chunk}'s tensor {show_values(inputs[chunk])}"
    for other in range(world_size):
        if other != chunk and _same(have, inputs[other]):
            if other == rank:
                return "own_tensor", f"{head}, but it holds this rank's own tensor: was the recv from rank {chunk} stored in the wrong place, or never made?"
            if other in ((chunk + 1) % world_size, (chunk - 1) % world_size):
                return "off_by_one", (f"{head}, but it holds rank {other}'s: off by one. "
                                      f"Chunk i of the result must hold what rank i sent.")
            return "wrong_chunk", f"{head}, but it holds rank {other}'s: the chunks are in the wrong order."
    if not have.any():
        return "zeros", f"{head}: all zeros, as if nothing was received into it"
    return "wrong_values", head


def _compare_reduce(where, rank, inputs, expected, got):
    if not isinstance(got, torch.Tensor):
        hint = " (did it change the tensor in place and return nothing?)" if got is None else ""
        return [Mistake(where, "not_a_tensor",
                        f"returned {_describe(got)}{hint}; return a new tensor holding the sum")]
    if _unusual(got, expected):
        return [Mistake(where, "unusual_tensor",
                        f"returned {_unusual(got, expected)}; return an ordinary tensor like the input "
                        f"(dense, on {expected.device}) holding the sum")]
    if got.shape != expected.shape:
        return [Mistake(where, "wrong_shape",
                        f"returned shape {tuple(got.shape)}, expected {tuple(expected.shape)}, the "
                        f"shape of the input: all-reduce adds element by element")]
    if got.dtype != expected.dtype:
        return [Mistake(where, "wrong_dtype",
                        f"returned dtype {got.dtype}, expected {expected.dtype}, the input's")]
    if _same(got, expected):
        return []
    return [Mistake(where, *_explain_sum(got, expected, rank, inputs))]


def _explain_sum(got, expected, rank, inputs):
    world_size = len(inputs)
    head = f"holds {show_values(got)}, expected the sum {show_values(expected)}"
    if _same(got, inputs[rank]):
        return "no_reduction", (f"{head}, but it holds its own input, unchanged: nothing was "
                                f"added (the reduction is missing)")
    for other in range(world_size):
        if _same(got, inputs[other]):
            return "no_reduction", (f"{head}, but it holds rank {other}'s input: what arrived "
                                    f"replaced the running sum instead of being added to it")
    for subset in _subsets(world_size):
        if _same(got, sum(inputs[r].double() for r in subset)):
            missing = sorted(set(range(world_size)) - set(subset))
            return "partial_sum", (f"{head}, but it holds the sum of ranks {_and(subset)} only: "
                                   f"the contributions of rank{'s' if len(missing) > 1 else ''} "
                                   f"{_and(missing)} are missing")
    if got.dtype.is_floating_point and _same(got, expected.double() / world_size):
        return "mean", f"{head}, but it holds the mean: this lab asks for the sum, as dist.all_reduce does"
    for times in range(2, world_size + 1):
        if _same(got, expected.double() * times):
            return "counted_twice", f"{head}: that is {times} times the sum, every contribution was added {times} times"
    if _same(got, expected.double() - inputs[rank].double()):
        return "own_missing", f"{head}, but it holds the sum of the other ranks only: add the rank's own tensor too"
    wrong = (~close_elements(got, expected, **TOLERANCE)).nonzero()
    first = tuple(int(i) for i in wrong[0])
    return "wrong_values", (f"{head}: {len(wrong)} of {got.numel()} elements are wrong, the first at "
                            f"index {first if len(first) > 1 else first[0]}")


def _subsets(world_size):
    """Proper subsets of the ranks with at least two members (one member is handled above)."""
    from itertools import combinations

    return [s for k in range(2, world_size) for s in combinations(range(world_size), k)]


def _unusual(got, like):
    """What makes the tensor ``got`` unlike ``like``, beyond shape and dtype, so that it cannot be
    compared element by element (sparse, nested, quantized, on another device); "" if nothing."""
    if got.is_nested:
        return "a nested tensor"
    if got.layout != torch.strided:
        return f"a {str(got.layout).replace('torch.', '').replace('_', ' ')} tensor of shape {tuple(got.shape)}"
    if got.is_quantized:
        return f"a quantized tensor of shape {tuple(got.shape)}"
    if got.device != like.device:
        return f"a tensor on device {got.device} (shape {tuple(got.shape)})"
    return ""


def _describe(value):
    if isinstance(value, torch.Tensor):
        return f"a tensor of shape {tuple(value.shape)}"
    if value is None:
        return "None"
    if isinstance(value, Returned):
        return f"a {value.type_name}"
    if isinstance(value, (bool, int, float, complex, str, bytes)):
        return f"a {type(value).__name__}, {value!r:.60}"
    return f"a {type(value).__name__}"


def _and(items):
    items = [str(i) for i in items]
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _refusal(kind, name):
    """What a switched-off collective says in Lab 2."""
    return (f"use send/recv only: dist.{name} is switched off in this lab, because the "
            f"exercise is to build {kind} from point-to-point messages "
            f"(dist.send, dist.recv, dist.isend, dist.irecv)")


# --- Lab 2's all-to-all: tokens dispatched to the rank of their expert -------------------

DISPATCH_SIGNATURE = "def my_dispatch(tokens, destinations): ... return the tokens sent to this rank"


def make_dispatch(world_size: int, seed: int = 0) -> list:
    """How many tokens each rank sends each rank: ``counts[r][j]``, from ``seed``.

    Uneven, with some zeros, and drawn again until no rank sends the counts
    it receives (``counts[r] != column r``): then swapped or unexchanged
    split sizes are wrong on every rank, not just on most.
    """
    g = torch.Generator().manual_seed(seed * 100 + world_size)
    while True:
        counts = torch.randint(0, 4, (world_size, world_size), generator=g)
        if all(not torch.equal(counts[r], counts[:, r]) for r in range(world_size)):
            return counts.tolist()


def dispatch_inputs(counts: list, rank: int):
    """Rank ``rank``'s ``(tokens, destinations)``: tokens ``100 rank + i``, grouped by destination."""
    destinations = torch.repeat_interleave(torch.arange(len(counts)), torch.tensor(counts[rank]))
    tokens = torch.arange(len(destinations), dtype=torch.float32) + 100 * rank
    return tokens, destinations


class SplitSlip(Exception):
    """The reader's all_to_all_single was called with split sizes that cannot work (sent back)."""

    def __init__(self, kind, message, code_line=""):
        super().__init__(f"{kind}: {message}")
        self.kind, self.message, self.code_line = kind, message, code_line

    def __reduce__(self):
        return SplitSlip, (self.kind, self.message, self.code_line)


def _split_list(sizes):
    return None if sizes is None or len(sizes) == 0 else [int(s) for s in sizes]


def _slip(given_in, given_out, send, receive):
    """(kind, message) for split sizes that differ from ``send`` / ``receive``; None if they are right."""
    if given_in == send and given_out == receive:
        return None
    if given_in == receive and given_out == send:
        return "swapped_splits", (
            f"input_split_sizes={given_in} and output_split_sizes={given_out} are swapped: "
            f"input_split_sizes cuts this rank's tokens by destination, {send}, and "
            f"output_split_sizes cuts what arrives by source, {receive}, the counts the "
            f"other ranks sent in the exchange of counts")
    if given_out == send:
        return "no_count_exchange", (
            f"output_split_sizes={given_out} are this rank's own counts, what it sends to each "
            f"rank; what it receives from each is {receive}, which only the other ranks know. "
            f"Exchange the counts first: dist.all_to_all_single(received_counts, counts), "
            f"then cut the output by the received ones")
    if given_in is None or given_out is None:
        return "no_splits", (
            f"without split sizes all_to_all_single cuts the tensors into equal parts, but this "
            f"rank sends {send} tokens and receives {receive}: pass input_split_sizes and "
            f"output_split_sizes")
    return "wrong_splits", (
        f"called with input_split_sizes={given_in} and output_split_sizes={given_out}; this "
        f"rank sends {send} tokens to ranks 0, 1, ... and receives {receive} from them")


def _recording_all_to_all(send, receive, calls):
    """A ``dist.all_to_all_single`` that records its split sizes and refuses a slip before gloo sees it.

    Only the exchange of floating-point tokens is judged; the exchange of
    counts (whole numbers) goes through as it is.
    """
    import torch.distributed as dist

    original = dist.all_to_all_single

    def all_to_all_single(output, input, output_split_sizes=None, input_split_sizes=None,
                          group=None, async_op=False):
        given_in, given_out = _split_list(input_split_sizes), _split_list(output_split_sizes)
        if isinstance(input, torch.Tensor) and input.is_floating_point():
            calls.append((given_in, given_out))
            slip = _slip(given_in, given_out, send, receive)
            if slip is not None:
                raise SplitSlip(*slip)
        return original(output, input, output_split_sizes, input_split_sizes, group=group, async_op=async_op)

    return original, all_to_all_single


def run_dispatch_on_rank(fn_bytes, counts):
    """Inside a rank: torch's exchange of this rank's tokens, then the reader's; ``(expected, got)``."""
    import torch.distributed as dist

    rank = dist.get_rank()
    tokens, destinations = dispatch_inputs(counts, rank)
    send = counts[rank]
    receive = [row[rank] for row in counts]
    expected = tokens.new_empty(sum(receive))
    dist.all_to_all_single(expected, tokens, receive, send)
    calls = []
    original, recording = _recording_all_to_all(send, receive, calls)
    dist.all_to_all_single = recording
    try:
        fn = serialize.loads(fn_bytes)
        got = fn(tokens.clone(), destinations.clone())
    except SplitSlip as slip:
        where = _reader_raised("", slip)
        raise SplitSlip(slip.kind, slip.message, where.code_line) from None
    except Exception as error:
        raise _reader_raised(f"rank {rank}", error) from None
    finally:
        dist.all_to_all_single = original
    return expected, _copy_result(got)


def check_all_to_all(fn, *, world_sizes=(3, 4), seed: int = 0, timeout: float = 15) -> CheckResult:
    """Check the reader's ``my_dispatch(tokens, destinations)`` on real ranks (Lab 2, Exercise 4)."""
    world_sizes = _refuse_bad_arguments(fn, world_sizes, "check_all_to_all(my_dispatch)")
    name = getattr(fn, "__name__", "my_dispatch")
    subject = (f"{name} against dist.all_to_all_single on world size{'s' if len(world_sizes) > 1 else ''} "
               f"{_and(world_sizes)}, uneven counts")
    wrong_signature = signature_mistake(fn, 2, DISPATCH_SIGNATURE)
    if wrong_signature:
        return CheckResult(subject, 0, len(world_sizes), "world size", (wrong_signature,))
    fn_bytes = serialize.dumps(fn)
    mistakes, correct = [], 0
    for world_size in world_sizes:
        where = f"W = {world_size}"
        counts = make_dispatch(world_size, seed)
        reports, error = launch_checked(run_dispatch_on_rank, world_size, args=(fn_bytes, counts),
                                        timeout=timeout)
        found = _dispatch_failure(where, error, timeout) if error is not None else [
            m for rank, (expected, got) in enumerate(reports)
            for m in _compare_dispatch(f"{where}, rank {rank}", expected, got, counts, rank)]
        correct += not found
        mistakes += found
        if found and found[0].kind in ("not_implemented", "exit", "too_slow", "hang", "swapped_splits",
                                       "no_count_exchange"):
            break  # the same slip again at every world size
    return CheckResult(subject, correct, len(world_sizes), "world size", _examples(mistakes, per_kind=1))


def _dispatch_failure(where, error, timeout):
    if isinstance(error, harness.YourCodeExited):
        return [harness.exit_mistake(where, error)]
    if isinstance(error, RanksTimedOut):
        return [harness.timed_out(where, error, timeout,
                                  "Every rank must call all_to_all_single the same number of times, "
                                  "the exchange of counts included.")]
    if isinstance(error, RankDied):
        return [Mistake(where, "died", f"{error}: gloo stops a process whose messages do not match "
                                       f"the sizes the other side expects; check the split sizes")]
    if isinstance(error.exception, SplitSlip):
        slip = error.exception
        place = f" ({slip.code_line})" if slip.code_line else ""
        return [Mistake(f"{where}, rank {error.rank}", slip.kind, slip.message + place)]
    if isinstance(error.exception, ReaderRaised) and error.exception.last_line.startswith("NotImplementedError"):
        return [Mistake(name_of(error), "not_implemented",
                        "not written yet: replace the `raise NotImplementedError` with your code")]
    return [_failure(where, error)]


def _compare_dispatch(where, expected, got, counts, rank):
    receive = [row[rank] for row in counts]
    if not isinstance(got, torch.Tensor):
        return [Mistake(where, "not_a_tensor", f"returned {_describe(got)}; return the tensor of the "
                                               f"tokens this rank received")]
    if got.shape != expected.shape:
        return [Mistake(where, "wrong_shape",
                        f"returned shape {tuple(got.shape)}, expected {tuple(expected.shape)}: this rank "
                        f"receives {receive} tokens from ranks 0, 1, ..., {sum(receive)} in all")]
    if not _same(got, expected):
        return [Mistake(where, "wrong_values",
                        f"holds {show_values(got, limit=8)}, expected {show_values(expected, limit=8)}: "
                        f"rank 0's tokens for this rank first, then rank 1's, ... (a token's hundreds "
                        f"digit is the rank that sent it)")]
    return []
