"""The book's controls (ddp_lab/widgets) in headless Chromium, with no kernel
and the network cut off, as the static book shows them.

* The JavaScript formulas give Python's answers (``ddp_lab.Topology``,
  ``ddp_lab.memory``, ``ddp_lab.cost``, ``ddp_lab.cost.scaling``) on grids of
  inputs, and print numbers exactly as Python's format() does.
* Each control, moved in the page, shows Python's answer for the new setting,
  and its picture changes; nothing is logged to the console, nothing fetched
  from outside 127.0.0.1. With ``--screenshots``, screenshots of two states
  of each go to ``_build/screenshots/widgets/``.
* Without JavaScript, the page shows the static picture of the default state.

The same checks run on the built book's pages in tests/test_book_html.py.
"""

from __future__ import annotations

import itertools
import json
import math
import random
from pathlib import Path
from types import SimpleNamespace
from urllib.parse import urlsplit

import pytest
from offline_browser import CHROMIUM, LOCAL_HOSTS, serve  # tools/offline_browser.py
from widget_pages import exercise_controls, write_page

from ddp_lab.cost import bucket_schedule, collective_time
from ddp_lab.draw.memory import describe_parameters
from ddp_lab.memory import OPTIMIZERS, PRECISIONS, STAGES, memory_per_rank
from ddp_lab.topology import Topology
from ddp_lab.units import format_bytes, format_seconds
from ddp_lab.units import format_gb as _gb
from ddp_lab.widgets.allreduce_cost import MESSAGE_SIZES, AllReduceCost, all_reduce_times
from ddp_lab.widgets.buckets import BUCKET_SIZES, GRADIENT_SIZES, BucketTradeoff, format_mib
from ddp_lab.widgets.layout import LayoutExplorer
from ddp_lab.widgets.memory import WORLD_SIZES, MemoryCalculator
from ddp_lab.widgets.scaling import ScalingModel, scaling_model


@pytest.fixture(autouse=True)
def no_rank_outlives_a_test():
    """No rank is started here (overrides tests/conftest.py's check, as test_book_html does)."""
    yield


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    folder = tmp_path_factory.mktemp("controls")
    write_page(folder, [LayoutExplorer(), MemoryCalculator(), AllReduceCost(), BucketTradeoff(), ScalingModel()])
    with serve(folder) as url:
        yield url


@pytest.fixture(scope="module")
def browser():
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} not found: `apt-get install chromium`", pytrace=False)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        yield browser
        browser.close()


@pytest.fixture
def page(browser, site):
    """A page of the harness; fails the test on any console error or outside request."""
    yield from open_page(browser, site)


@pytest.fixture(scope="module")
def formulas(browser, site):
    """One page of the harness for every test of the formulas: each imports the
    control's module afresh (module_answers) and changes nothing in the page, so
    they need not pay for opening one each (about 3 s of CPU here)."""
    yield from open_page(browser, site)


@pytest.fixture
def page_slower_than_anywidget_waits(browser, site):
    """The same page on a machine slower than anywidget's 2-second budget for
    initializing a model: the page's ``AbortSignal.timeout(2000)``, the timer
    anywidget's Runtime starts, fires after 1 ms instead. (A busy CI machine,
    two notebooks executing beside the browser, once took longer than 2 s.)"""
    yield from open_page(browser, site, init_script="""
        const timeout = AbortSignal.timeout.bind(AbortSignal);
        AbortSignal.timeout = ms => timeout(ms === 2000 ? 1 : ms);""")


def open_page(browser, site, init_script: str = ""):
    context = browser.new_context(viewport={"width": 1100, "height": 900})
    problems = []

    def route(route):
        if urlsplit(route.request.url).hostname in LOCAL_HOSTS:
            route.continue_()
        else:
            problems.append(f"request leaves the machine (blocked): {route.request.url}")
            route.abort()

    context.route("**/*", route)
    page = context.new_page()
    if init_script:
        page.add_init_script(init_script)
    page.on("console", lambda m: m.type == "error" and problems.append(f"console error: {m.text}"))
    page.on("pageerror", lambda e: problems.append(f"JavaScript exception: {e}"))
    page.goto(f"{site}/index.html", wait_until="load")
    page.wait_for_load_state("networkidle")
    page.problems = problems
    yield page
    context.close()
    assert not problems, "\n".join(problems)


def module_answers(page, control, function: str, cases: list) -> list:
    """Call ``function`` of the control's ES module (its ``_esm``, as anywidget
    runs it) on every case in the browser.

    The answers come back as one JSON text, not as Playwright's own encoding of
    a JavaScript value (an object per number): a few thousand bucket schedules
    are about 190,000 rows, which that encoding took over 10 s to decode in
    Python. JSON keeps every finite double exactly (both sides write and read
    the shortest form that round-trips); the numbers JSON cannot carry,
    infinities and NaN, travel as ``{"number": "Infinity"}`` and are decoded
    back to floats.
    """
    text = page.evaluate("""async ([esm, name, cases]) => {
        const url = URL.createObjectURL(new Blob([esm], {type: "text/javascript"}));
        const module = await import(url);
        return JSON.stringify(cases.map(args => module[name](...args)),
            (key, value) => typeof value === "number" && !Number.isFinite(value) ? {number: String(value)} : value);
    }""", [control._esm, function, cases])
    return json.loads(text, object_hook=lambda item: float(item["number"]) if item.keys() == {"number"} else item)


def close(a, b):
    return abs(a - b) <= 1e-12 * max(abs(a), abs(b), 1e-300)


# --------------------------------------------------------------- formulas on grids


def test_layout_agrees_with_topology_on_every_setting(formulas):
    cases = [list(c) for c in itertools.product(range(0, 5), range(1, 9), range(1, 9))]
    answers = module_answers(formulas, LayoutExplorer(), "topology", cases)
    for (nodes, gpus, k), answer in zip(cases, answers):
        try:
            topology = Topology(nodes, gpus, k)
        except ValueError as refusal:
            assert answer == {"error": str(refusal)}, (nodes, gpus, k)
            continue
        assert answer["title"] == str(topology)
        assert answer["world_size"] == topology.world_size
        assert [(p["global_rank"], p["local_rank"], p["node"], tuple(p["gpus"])) for p in answer["processes"]] == \
            [(p.global_rank, p.local_rank, p.node, p.gpus) for p in topology.processes]


def test_memory_agrees_with_memory_per_rank(formulas):
    counts = [10 ** (8 + i / 40) for i in range(0, 121, 7)] + [1.5e9, 7.5e9, 18e9, 86_544]
    cases = [[psi, n, stage, precision, optimizer]
             for psi in counts for n in WORLD_SIZES for stage in STAGES
             for precision in PRECISIONS for optimizer in OPTIMIZERS]
    answers = module_answers(formulas, MemoryCalculator(), "memoryPerRank", cases)
    for (psi, n, stage, precision, optimizer), answer in zip(cases, answers):
        row = memory_per_rank(psi, n, stage, precision=precision, optimizer=optimizer)
        for state in ("parameters", "gradients", "optimizer", "total"):
            assert close(answer[state], getattr(row, state)), (psi, n, stage, precision, optimizer, state)
    values = sorted({getattr(memory_per_rank(*c[:3], precision=c[3], optimizer=c[4]), "total") for c in cases})
    assert module_answers(formulas, MemoryCalculator(), "gb", [[v] for v in values]) == [_gb(v) for v in values]
    assert module_answers(formulas, MemoryCalculator(), "describeParameters", [[c] for c in counts]) == \
        [describe_parameters(c) for c in counts]


def test_all_reduce_times_agree_with_cost(formulas):
    cases = [[n, w, latency, bandwidth] for n in MESSAGE_SIZES[::3] for w in (2, 3, 8, 17, 64)
             for latency in (1e-6, 1e-5, 3.3e-4) for bandwidth in (1e8, 1e10, 5e10)]
    answers = module_answers(formulas, AllReduceCost(), "allReduceTimes", cases)
    for case, answer in zip(cases, answers):
        times = all_reduce_times(*case)
        for algorithm, term in itertools.product(("ring", "naive"), ("latency", "bandwidth", "total")):
            assert close(answer[algorithm][term], times[algorithm][term]), (case, algorithm, term)
    seconds = [t[a]["total"] for t in map(lambda c: all_reduce_times(*c), cases) for a in ("ring", "naive")]
    assert module_answers(formulas, AllReduceCost(), "formatSeconds", [[s] for s in seconds]) == \
        [format_seconds(s, "text") for s in seconds]
    sizes = list(MESSAGE_SIZES) + [0, 1, 1023, 1536, 10 ** 12]
    assert module_answers(formulas, AllReduceCost(), "formatBytes", [[s] for s in sizes]) == [format_bytes(s) for s in sizes]


def test_bucket_schedule_agrees_with_cost(formulas):
    cases = [[g, b, t, w, latency, bandwidth] for g in GRADIENT_SIZES[::4] for b in BUCKET_SIZES[::5]
             for t in (1e-3, 0.1) for w in (2, 8, 64) for latency in (1e-6, 1e-4) for bandwidth in (1e8, 1e11)
             if g / b <= 4096]  # whole schedules cross to Python: keep them to a few thousand buckets
    answers = module_answers(formulas, BucketTradeoff(), "bucketSchedule", cases)
    for case, answer in zip(cases, answers):
        expected = bucket_schedule(*case)
        assert len(answer) == len(expected), case
        assert all(close(a, e) for row, want in zip(answer, expected) for a, e in zip(row, want)), case
    sizes = list(BUCKET_SIZES) + list(GRADIENT_SIZES)
    assert module_answers(formulas, BucketTradeoff(), "formatMiB", [[s] for s in sizes]) == [format_mib(s) for s in sizes]


def test_scaling_model_agrees_with_scaling(formulas):
    """Chapter 12b's control against ddp_lab.cost.scaling, through scaling_model, on a
    grid of every kind of input (both algorithms, one node and many, 1 to 8
    cards, the two GPUs, 16- and 32-bit gradients, links with and without an
    achieved speed, priced at either)."""
    cases = [list(c) for c in itertools.product(
        (1e8, 7e9, 1e12), (1, 8), (1, 2, 128), ("nvlink", "pcie"), ("infiniband", "ethernet25"), (1, 8),
        (256.0, 2.0 ** 20), ("h100", "a100"), (0.05, 1.0), ("flat", "hierarchical"), (2, 4),
        ("achieved", "rated"))]
    answers = module_answers(formulas, ScalingModel(), "scalingModel", cases)
    for case, answer in zip(cases, answers):
        expected = scaling_model(*case)
        assert answer.keys() == expected.keys()
        for key, value in expected.items():
            assert close(answer[key], value), (case, key)
    # the ring collectives it is built on, as ddp_lab.cost prices them
    collectives = [[c, n, w, a, b] for c in ("all_reduce", "reduce", "broadcast") for n in (0, 1e3, 3e9)
                   for w in (1, 2, 7, 1024) for a in (0.0, 9.6e-6) for b in (1e8, 4.5e11)]
    assert all(close(got, collective_time(*case)) for got, case in
               zip(module_answers(formulas, ScalingModel(), "collectiveTime", collectives), collectives))
    efficiencies = sorted({v for c in cases for k, v in scaling_model(*c).items() if k.startswith("efficiency")})
    assert module_answers(formulas, ScalingModel(), "percent", [[e] for e in efficiencies]) == \
        [f"{e:.1%}" for e in efficiencies]
    tokens = sorted({scaling_model(*c)["tokens_to_hide"] for c in cases})
    assert module_answers(formulas, ScalingModel(), "count", [[t] for t in tokens]) == [f"{t:,.0f}" for t in tokens]
    counts = [10 ** (8 + i / 10) for i in range(41)]
    assert module_answers(formulas, ScalingModel(), "describeParameters", [[c] for c in counts]) == \
        [describe_parameters(c) for c in counts]


def test_answers_cross_from_the_browser_exactly(formulas):
    """module_answers' JSON transport: doubles come back bit for bit, and the
    values JSON has no words for (infinities, NaN) come back as floats too."""
    echo = SimpleNamespace(_esm="export const same = x => x;")
    values = [0.1, 1 / 3, 2.0 ** -1074, 1.7976931348623157e308, -5e-324, 123456789.0]
    assert module_answers(formulas, echo, "same", [[v] for v in values]) == values
    awkward = module_answers(formulas, echo, "same", [[math.inf], [-math.inf], [math.nan]])
    assert awkward[:2] == [math.inf, -math.inf] and math.isnan(awkward[2])


def test_numbers_are_formatted_as_python_formats_them(formulas):
    rng = random.Random(21)
    values = [0.125, 1.125, 2.5, 0.5, 1.5, 99.95, 999.5, 1e-5, 1.0000000000000002, 123456.0, 1e21, 9.9999,
              0.00012345, 5e-324, 1.7976931348623157e308, -2.675, 0.0, 1234567.5]
    values += [rng.uniform(0, 10) * 10 ** rng.randint(-8, 12) for _ in range(300)]
    cases = [[v, p] for v in values for p in (1, 2, 3, 6)]
    assert module_answers(formulas, LayoutExplorer(), "formatG", cases) == [format(v, f".{p}g") for v, p in cases]
    fixed = [[v, d] for v in values if abs(v) < 1e20 for d in (0, 1, 2)]
    assert module_answers(formulas, LayoutExplorer(), "formatFixed", fixed) == [format(v, f",.{d}f") for v, d in fixed]


# --------------------------------------------------------------- the controls in a page


def test_controls_follow_python_as_they_move(page, screenshots):
    page.wait_for_selector(".ddp-control", timeout=15_000)
    problems = exercise_controls(page, screenshots / "widgets" if screenshots else None, "harness")
    assert page.locator(".ddp-control").count() == 5
    assert not problems, "\n".join(problems)


def test_without_javascript_the_default_state_is_shown(browser, site):
    context = browser.new_context(java_script_enabled=False)
    page = context.new_page()
    try:
        page.goto(f"{site}/index.html")
        statics = page.locator(".ddp-control-static")
        assert statics.count() == 5
        for index in range(5):
            assert statics.nth(index).is_visible()
            image = statics.nth(index).locator("img")
            assert image.is_visible() and image.evaluate("img => img.naturalWidth") > 0
        layout = statics.nth(0).inner_text()
        assert "7" in layout and "LOCAL_RANK" in layout            # the 2 x 4 table, ranks 0 to 7
        memory = statics.nth(1).inner_text()
        assert "120 GB" in memory and "31.4 GB" in memory          # DDP and ZeRO-1 for 7.5B on 64 ranks
        scaling = statics.nth(4).inner_text()
        assert "7B parameters on 128 GPUs" in scaling and "1,078" in scaling  # tokens that hide the all-reduce
        assert "achieved link speeds" in scaling                   # priced as NCCL reaches the links
    finally:
        context.close()


def test_controls_render_on_a_machine_slower_than_anywidget_waits(page_slower_than_anywidget_waits):
    """anywidget 0.11 rejects a model's ``ready`` promise when the model is not
    initialized within 2 s (``AbortSignal.timeout(2e3)`` in its Runtime). Only
    kernel messages await that promise, so in the static book nothing catches the
    rejection and the browser reports an error, although the control appears
    moments later. widgets_offline.js handles that one rejection: every control
    renders, and no error is reported (the page fixture fails the test on one)."""
    page = page_slower_than_anywidget_waits
    page.wait_for_function("document.querySelectorAll('.ddp-control').length == 5", timeout=15_000)
    page.wait_for_timeout(200)  # the 1 ms timers have fired
    assert page.locator(".ddp-control svg").count() >= 5
