"""Pages that show the book's controls (ddp_lab/widgets) the way the built
book does, without building it: RequireJS, the ipywidgets embed manager and
anywidget's front-end from node_modules, the widgets' saved state, and each
control's text/html output. Used by tests/test_widgets_js.py; the pages of
the real book are checked by tests/test_book_html.py.
"""

from __future__ import annotations

import json
from pathlib import Path

from ipywidgets.embed import dependency_state

ROOT = Path(__file__).resolve().parents[1]
NODE_MODULES = ROOT / "node_modules"
STATE_MIMETYPE = "application/vnd.jupyter.widget-state+json"

PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title><link rel="icon" href="data:,">
<script src="_static/widgets_offline.js"></script>
<script src="_static/npm/requirejs/require.js"></script>
<script src="_static/npm/@jupyter-widgets/html-manager/dist/embed-amd.js"></script>
<script type="{state_mimetype}">{state}</script>
<style>body {{ font-family: sans-serif; margin: 20px; max-width: 900px; }}</style>
</head><body>
{outputs}
</body></html>
"""


def write_page(folder: Path, widgets, title: str = "controls") -> Path:
    """index.html in ``folder`` showing ``widgets`` as the book shows them."""
    static = folder / "_static"
    (static / "npm").mkdir(parents=True, exist_ok=True)
    (static / "widgets_offline.js").write_text((ROOT / "book/_static/widgets_offline.js").read_text())
    for package in ("requirejs", "@jupyter-widgets", "anywidget"):
        if not (NODE_MODULES / package).exists():
            raise FileNotFoundError(f"node_modules/{package} is missing: run `npm ci` in {ROOT}")
        link = static / "npm" / package
        if not link.exists():
            link.symlink_to(NODE_MODULES / package)
    state = {"version_major": 2, "version_minor": 0, "state": dependency_state(list(widgets), drop_defaults=False)}
    outputs = "\n".join(
        f'<section class="cell_output" id="output-{i}">{w._repr_mimebundle_()[0]["text/html"]}</section>'
        for i, w in enumerate(widgets))
    page = folder / "index.html"
    page.write_text(PAGE.format(title=title, state_mimetype=STATE_MIMETYPE,
                                state=json.dumps(state).replace("</", "<\\/"), outputs=outputs))
    return page


# --------------------------------------------------------------- driving the controls
#
# Each control is checked the same way wherever it is shown (this harness, or a
# page of the built book): read the state nbclient saved for it, make the same
# control in Python, then move the controls in the page one at a time, make the
# same change in Python, and compare what the page shows with Python's answer.

import math  # noqa: E402

from ddp_lab.units import format_seconds  # noqa: E402
from ddp_lab.widgets.allreduce_cost import AllReduceCost  # noqa: E402
from ddp_lab.widgets.buckets import BucketTradeoff, format_mib  # noqa: E402
from ddp_lab.widgets.layout import LayoutExplorer  # noqa: E402
from ddp_lab.widgets.memory import MemoryCalculator  # noqa: E402
from ddp_lab.widgets.scaling import UTILISATIONS, ScalingModel  # noqa: E402

CONTROLS = {cls.__name__: cls for cls in (LayoutExplorer, MemoryCalculator, AllReduceCost, BucketTradeoff,
                                          ScalingModel)}


def log_value(lo: int, per_decade: int, position: int) -> float:
    """What common.js's logValues(lo, hi, per_decade)[position] holds."""
    return float(format(10 ** ((lo * per_decade + position) / per_decade), ".12g"))


# (what to do in the page, the same change in Python); "fill" sets an input's value
# (a range input's position), "click" presses a button, "select" picks an option of a
# <select>. Two states are screenshotted: after the moves marked "shot".
SCENARIOS = {
    "LayoutExplorer": [
        ("fill", "input[name=nodes]", "3", {"nodes": 3}),
        ("fill", "input[name=gpus_per_node]", "6", {"gpus_per_node": 6}),
        ("click", "[data-name=gpus_per_process] button[data-value='2']", None, {"gpus_per_process": 2}),
        ("shot",),
        ("click", "[data-name=gpus_per_process] button[data-value='4']", None, {"gpus_per_process": 4}),
        ("shot",),
    ],
    "MemoryCalculator": [
        ("fill", "input[name=world_size]", "5", {"world_size": 32}),
        ("fill", "input[name=num_parameters]", "60", {"num_parameters": log_value(8, 40, 60)}),
        ("click", "[data-name=stage] button[data-value='ZeRO-2']", None, {"stage": "ZeRO-2"}),
        ("shot",),
        ("click", "[data-name=stage] button[data-value='all']", None, {"stage": "all"}),
        ("click", "[data-name=precision] button[data-value='fp32']", None, {"precision": "fp32"}),
        ("click", "[data-name=optimizer] button[data-value='sgd-momentum']", None, {"optimizer": "sgd-momentum"}),
        ("fill", "input[name=capacity_gb]", "24", {"capacity_gb": 24.0}),
        ("shot",),
    ],
    "AllReduceCost": [
        ("fill", "input[name=world_size]", "32", {"world_size": 32}),
        ("shot",),
        ("fill", "input[name=message_bytes]", "2", {"message_bytes": float(2 ** 12)}),
        ("fill", "input[name=latency]", "20", {"latency": log_value(-6, 10, 20)}),
        ("fill", "input[name=bandwidth]", "25", {"bandwidth": log_value(8, 10, 25)}),
        ("shot",),
    ],
    "BucketTradeoff": [
        ("fill", "input[name=bucket_bytes]", "4", {"bucket_bytes": float(2 ** 20)}),
        ("shot",),
        ("fill", "input[name=bucket_bytes]", "20", {"bucket_bytes": float(2 ** 8 * 2 ** 20)}),
        ("fill", "input[name=world_size]", "64", {"world_size": 64}),
        ("fill", "input[name=backward_seconds]", "5", {"backward_seconds": log_value(-3, 10, 5)}),
        ("shot",),
    ],
    "ScalingModel": [
        ("fill", "input[name=nodes]", "7", {"nodes": 128}),
        ("fill", "input[name=tokens_per_gpu]", "2", {"tokens_per_gpu": 1024.0}),
        ("shot",),
        ("click", "[data-name=algorithm] button[data-value='hierarchical']", None, {"algorithm": "hierarchical"}),
        ("select", "select[name=inter]", "ethernet100", {"inter": "ethernet100"}),
        ("fill", "input[name=parameters]", "25", {"parameters": log_value(8, 10, 25)}),
        ("click", "[data-name=gpu] button[data-value='a100']", None, {"gpu": "a100"}),
        ("fill", "input[name=utilisation]", "5", {"utilisation": UTILISATIONS[5]}),
        ("click", "[data-name=bytes_per_gradient] button[data-value='4']", None, {"bytes_per_gradient": 4}),
        ("shot",),
        ("select", "select[name=inter]", "infiniband", {"inter": "infiniband"}),
        ("click", "[data-name=speeds] button[data-value='rated']", None, {"speeds": "rated"}),
    ],
}


def saved_states(page) -> dict:
    """The widget state the page carries: model id -> the model's state."""
    text = page.evaluate(f"""() => document.querySelector('script[type="{STATE_MIMETYPE}"]').textContent""")
    return {model_id: entry["state"] for model_id, entry in json.loads(text)["state"].items()}


def controls_on(page) -> list[tuple[str, str]]:
    """(model id, control class name) of every control's output on the page, in order."""
    return page.evaluate("""() => [...document.querySelectorAll('.ddp-control-output')].map(out => {
        const tag = out.querySelector('script[type="application/vnd.jupyter.widget-view+json"]');
        return JSON.parse(tag.textContent).model_id;
    })""")


def python_twin(state: dict):
    """The control, made in Python with the saved state's settings."""
    name = state["_anywidget_id"].rsplit(".", 1)[1]
    cls = CONTROLS[name]
    settings = {trait: state[trait] for trait in cls.class_own_traits(sync=True) if trait in state}
    return cls(**settings)


def close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-15)


def compare(name: str, twin, root) -> list[str]:
    """What the control shows against Python's answer for the same settings."""
    result = json.loads(root.get_attribute("data-result"))
    problems = []
    if name == "LayoutExplorer":
        if twin.error is not None:
            shown = root.locator(".ddp-message").inner_text() if root.locator(".ddp-message").count() else None
            if shown != twin.error:
                problems.append(f"refusal shown {shown!r}, Topology says {twin.error!r}")
            return problems
        topology = twin.topology
        expected = [[str(r["node"]), ", ".join(map(str, r["gpus"])), str(r["global_rank"]), str(r["local_rank"])]
                    for r in topology.table()]
        rows = [[cell.inner_text() for cell in row.locator("td").all()]
                for row in root.locator(".ddp-layout-table tbody tr").all()]
        if rows != expected:
            problems.append(f"table {rows} != Topology's {expected}")
        boxes = root.locator(".ddp-process")
        drawn = sorted((int(b.get_attribute("data-global-rank")), int(b.get_attribute("data-local-rank")),
                        b.get_attribute("data-gpus")) for b in boxes.all())
        want = [(p.global_rank, p.local_rank, ",".join(map(str, p.gpus))) for p in topology.processes]
        if drawn != want:
            problems.append(f"process boxes {drawn} != Topology's {want}")
        if root.locator(".ddp-title").inner_text() != str(topology):
            problems.append(f"title {root.locator('.ddp-title').inner_text()!r} != {str(topology)!r}")
    elif name == "MemoryCalculator":
        from ddp_lab.units import format_gb as _gb

        for shown, row in zip(result["rows"], twin.rows, strict=True):
            for state in ("parameters", "gradients", "optimizer", "total"):
                if not close(shown[state], getattr(row, state)):
                    problems.append(f"{row.stage} {state}: page {shown[state]}, memory_per_rank {getattr(row, state)}")
        texts = [[cell.inner_text() for cell in tr.locator("td").all()]
                 for tr in root.locator(".ddp-memory-table tbody tr").all()]
        expected = [[row.stage, _gb(row.parameters), _gb(row.gradients), _gb(row.optimizer), _gb(row.total),
                     "fits" if row.total / 1e9 <= twin.capacity_gb else "does not fit"] for row in twin.rows]
        if texts != expected:
            problems.append(f"table {texts} != Python's {expected}")
        bars = root.locator(".ddp-bar").count()
        if bars != len(twin.rows):
            problems.append(f"{bars} bars for {len(twin.rows)} stages")
    elif name == "AllReduceCost":
        times = twin.times
        for algorithm in ("ring", "naive"):
            for term in ("latency", "bandwidth", "total"):
                if not close(result[algorithm][term], times[algorithm][term]):
                    problems.append(f"{algorithm} {term}: page {result[algorithm][term]}, "
                                    f"ddp_lab.cost {times[algorithm][term]}")
            shown = root.locator(f".ddp-number[data-name={algorithm}] b").inner_text()
            expected = format_seconds(times[algorithm]["total"], "text")
            if shown != expected:
                problems.append(f"{algorithm} shown as {shown!r}, Python {expected!r}")
    elif name == "BucketTradeoff":
        schedule = twin.schedule
        if result["buckets"] != len(schedule) or not close(result["total"], schedule[-1][2]):
            problems.append(f"page: {result['buckets']} buckets, T = {result['total']}; "
                            f"bucket_schedule: {len(schedule)}, {schedule[-1][2]}")
        best_size, best_time = twin.best
        if not (close(result["best"][0], best_size) and close(result["best"][1], best_time)):
            problems.append(f"best bucket {result['best']} != Python's {[best_size, best_time]}")
        shown = root.locator(".ddp-number[data-name=total] b").inner_text()
        if shown != format_seconds(schedule[-1][2], "text"):
            problems.append(f"T shown as {shown!r}, Python {format_seconds(schedule[-1][2], 'text')!r}")
        shown = root.locator(".ddp-number[data-name=best] b").inner_text()
        if shown != f"{format_mib(best_size)} ({format_seconds(best_time, 'text')})":
            problems.append(f"best shown as {shown!r}")
    elif name == "ScalingModel":
        answer = twin.result
        for key, value in answer.items():
            if not close(result[key], value):
                problems.append(f"{key}: page {result[key]}, ddp_lab.cost.scaling {value}")
        expected = {key: format_seconds(answer[key], "text") for key in ("compute", "all_reduce", "step_serial",
                                                                 "step_overlapped")}
        expected |= {key: f"{answer[key]:.1%}" for key in ("efficiency_serial", "efficiency_overlapped")}
        expected["tokens_to_hide"] = f"{answer['tokens_to_hide']:,.0f}"
        for key, text in expected.items():
            shown = root.locator(f".ddp-number[data-name={key}] b").inner_text()
            if shown != text:
                problems.append(f"{key} shown as {shown!r}, Python {text!r}")
        if root.locator(".ddp-title").inner_text() != twin.title():
            problems.append(f"title {root.locator('.ddp-title').inner_text()!r} != {twin.title()!r}")
    return problems


def exercise_controls(page, screenshots: Path, prefix: str) -> list[str]:
    """Move every control on the page through its scenario, comparing with
    Python after each move and the picture before and after; screenshots of
    two states of each control go to ``screenshots`` (a folder; None: none)."""
    problems = []
    states = saved_states(page)
    for index, model_id in enumerate(controls_on(page)):
        output = page.locator(".ddp-control-output").nth(index)
        try:
            output.locator(".ddp-control").wait_for(timeout=15_000)
        except Exception:
            problems.append(f"control {index} ({model_id}) did not render")
            continue
        if output.locator(".ddp-control-static").is_visible():
            problems.append(f"control {index}: the static picture is still shown beside the live control")
        twin = python_twin(states[model_id])
        name = type(twin).__name__
        root = output.locator(".ddp-control")
        problems += [f"{name} as saved: {p}" for p in compare(name, twin, root)]
        shots = 0
        for step in SCENARIOS[name]:
            if step[0] == "shot":
                shots += 1
                if screenshots:
                    screenshots.mkdir(parents=True, exist_ok=True)
                    root.scroll_into_view_if_needed()
                    root.screenshot(path=screenshots / f"{prefix}-{index}-{name}-{shots}.png")
                continue
            action, selector, value, change = step
            picture_before = root.locator("svg").first.inner_html() if root.locator("svg").count() else ""
            target = root.locator(selector)
            if action == "fill":
                target.fill(value)
                target.dispatch_event("change")
            elif action == "select":
                target.select_option(value)
            else:
                target.click()
            twin.set_state(change)  # what the page sends to a kernel, when there is one
            problems += [f"{name} after {selector} -> {change}: {p}" for p in compare(name, twin, root)]
            picture_after = root.locator("svg").first.inner_html() if root.locator("svg").count() else ""
            if picture_after == picture_before and not (name == "LayoutExplorer" and twin.error):
                problems.append(f"{name}: the picture did not change after {selector} -> {change}")
    return problems
