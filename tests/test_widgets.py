"""The book's controls (ddp_lab/widgets) on the Python side: what a kernel
sees when the reader moves them in JupyterLab or Colab, what the book's page
gets, and how bad settings are refused. Their JavaScript is tested in
Chromium by tests/test_widgets_js.py."""

from __future__ import annotations

import json
import re

import pytest
import traitlets

from ddp_lab.cost import bucket_schedule, collective_time, naive_all_reduce_time, scaling
from ddp_lab.cost.links import LINKS
from ddp_lab.memory import STAGES, memory_per_rank
from ddp_lab.topology import Topology
from ddp_lab.validate import check_positive_int, check_positive_number
from ddp_lab.widgets import AllReduceCost, BucketTradeoff, LayoutExplorer, MemoryCalculator, ScalingModel
from ddp_lab.widgets.control import Control
from ddp_lab.widgets.memory import _constants
from ddp_lab.widgets.scaling import INTER_LINKS, INTRA_LINKS, scaling_model

CONTROLS = (LayoutExplorer, MemoryCalculator, AllReduceCost, BucketTradeoff, ScalingModel)


@pytest.mark.parametrize("cls", CONTROLS)
def test_output_carries_the_view_and_a_static_picture(cls):
    control = cls()
    data, _ = control._repr_mimebundle_()
    assert data["application/vnd.jupyter.widget-view+json"]["model_id"] == control.model_id
    page = data["text/html"]
    tag = re.search(r'<script type="application/vnd.jupyter.widget-view\+json">(.*?)</script>', page)
    assert json.loads(tag[1])["model_id"] == control.model_id          # the embed manager renders it here
    static = page[tag.end():]
    assert 'class="ddp-control-static"' in static and "data:image/png;base64," in static
    # the module loads nothing: no import, no URL but the SVG namespace's name
    urls = set(re.findall(r"https?://[^\s\"'`)]+", control._esm))
    assert urls == {"http://www.w3.org/2000/svg"} and not re.search(r"\bimport\s*[({'\"]|\bfetch\(", control._esm)


def test_the_python_object_follows_the_controls():
    """What a kernel receives when the reader moves a control is a state update;
    the Python answers follow it."""
    explorer = LayoutExplorer()
    explorer.set_state({"nodes": 3, "gpus_per_node": 6, "gpus_per_process": 2})
    assert explorer.topology == Topology(3, 6, 2) and explorer.error is None
    explorer.set_state({"gpus_per_process": 4})
    assert explorer.topology is None
    with pytest.raises(ValueError) as refusal:
        Topology(3, 6, 4)
    assert explorer.error == str(refusal.value)

    calculator = MemoryCalculator(num_parameters=1.5e9, world_size=8)
    assert [row.total for row in calculator.rows] == [24e9, 8.25e9, 5.625e9, 3e9]
    calculator.set_state({"stage": "ZeRO-3", "precision": "fp32"})
    assert calculator.rows == [memory_per_rank(1.5e9, 8, "ZeRO-3", precision="fp32")]

    cost = AllReduceCost()
    cost.set_state({"world_size": 16})
    assert cost.times["ring"]["total"] == collective_time("all_reduce", cost.message_bytes, 16, cost.latency,
                                                          cost.bandwidth)
    assert cost.times["naive"]["total"] == naive_all_reduce_time(cost.message_bytes, 16, cost.latency, cost.bandwidth)

    buckets = BucketTradeoff()
    buckets.set_state({"bucket_bytes": 2.0 ** 20})
    assert len(buckets.schedule) == 400
    assert buckets.schedule == bucket_schedule(400 * 2 ** 20, 2 ** 20, 0.1, 8, 50e-6, 10e9)

    model = ScalingModel()
    model.set_state({"nodes": 2, "tokens_per_gpu": 1024, "utilisation": 0.5})
    compute = scaling.compute_seconds(7e9, 1024, 989e12, 0.5)
    assert model.result["compute"] == compute
    network = LINKS["infiniband"].achieved * 8  # the control prices links as NCCL reaches them
    assert model.result["all_reduce"] == pytest.approx(collective_time("all_reduce", 14e9, 16, 9.6e-6, network))
    assert model.result["step_serial"] == compute + model.result["all_reduce"]


def test_the_scaling_control_answers_chapter_12bs_quiz():
    """Quiz 1 and 2 of Chapter 12b: a 7B model on 16 nodes of 8 H100 at 40%,
    16-bit gradients; one 400 Gb/s card per GPU, then one per node. The quiz
    prices the cards at their rated 50 GB/s; at the 47 GB/s NCCL reaches on
    them (the control's default) the all-reduce takes 50/47 as long."""
    model = ScalingModel(parameters=7e9, nodes=16, gpus_per_node=8, cards=8)
    achieved = model.result["all_reduce"]
    model.speeds = "rated"
    assert round(model.result["all_reduce"] * 1e3) == 72 and round(model.result["tokens_to_hide"]) == 1016
    assert round(achieved * 1e3) == 76
    model.cards = 1
    assert round(model.result["all_reduce"] * 1e3) == 558 and round(model.result["tokens_to_hide"], -2) == 7900
    # the hierarchical all-reduce's leader sends through one card, however many the node has
    model.algorithm = "hierarchical"
    one = model.result["all_reduce"]
    model.cards = 8
    assert model.result["all_reduce"] == one == scaling.hierarchical_all_reduce_seconds(
        14e9, 16, 8, intra=LINKS["nvlink"], inter=LINKS["infiniband"])
    # one node: no network at all, and one GPU: no all-reduce
    model.nodes = 1
    assert model.result["all_reduce"] == scaling.hierarchical_all_reduce_seconds(14e9, 1, 8, intra=LINKS["nvlink"])
    model.gpus_per_node = 1
    assert model.result["all_reduce"] == 0 and model.result["efficiency_serial"] == 1.0
    assert [point[0] for point in model.curve] == [1, 2, 4, 8, 16, 32, 64, 128]


def test_the_scaling_control_offers_the_books_links_and_gpus():
    assert set(INTRA_LINKS) == {"nvlink", "nvlink3", "nvlink1", "pcie"}
    assert "infiniband" in INTER_LINKS and "ethernet25" in INTER_LINKS and "nvlink" not in INTER_LINKS
    constants = ScalingModel._esm.split("\n", 2)[1]
    assert '"h100": {"name": "H100 SXM", "flops": 989000000000000.0' in constants


def test_memory_constants_come_from_ddp_lab_memory():
    constants = _constants()
    assert constants["bytes_per_parameter"]["mixed"]["adam"] == [2, 2, 12]
    # what each stage shards, read from memory_per_rank: ZeRO-k shards k states
    assert [sum(constants["sharded"][stage]) for stage in STAGES] == [0, 1, 2, 3]


@pytest.mark.parametrize("cls, settings, named", [
    (LayoutExplorer, {"nodes": 5}, "nodes"),
    (LayoutExplorer, {"gpus_per_node": 0}, "gpus_per_node"),
    (MemoryCalculator, {"world_size": 48}, "world_size"),
    (MemoryCalculator, {"precision": "fp8"}, "precision"),
    (AllReduceCost, {"world_size": 1}, "world_size"),
    (BucketTradeoff, {"bucket_bytes": 10.0}, "bucket_bytes"),
    (ScalingModel, {"nodes": 3}, "nodes"),
    (ScalingModel, {"inter": "nvlink"}, "inter"),
    (ScalingModel, {"utilisation": 0.33}, "utilisation"),
    (ScalingModel, {"parameters": 1e13}, "parameters"),
])
def test_bad_settings_are_refused_naming_the_setting(cls, settings, named):
    with pytest.raises(traitlets.TraitError, match=named):
        cls(**settings)


def test_bucket_schedule_closed_form():
    """The schedule's end is max(T_b + c, T_b/n + n c), Chapter 8's formula."""
    for gradient, bucket, backward in [(400e6, 25e6, 0.1), (400e6, 1e6, 0.1), (1e9, 1e9, 0.01), (64e6, 3e6, 0.5)]:
        schedule = bucket_schedule(gradient, bucket, backward, 8, 5e-5, 1e10)
        n = len(schedule)
        c = collective_time("all_reduce", gradient / n, 8, 5e-5, 1e10)
        assert schedule[-1][2] == pytest.approx(max(backward + c, backward / n + n * c), rel=1e-12)
    with pytest.raises(ValueError, match="bucket_bytes"):
        bucket_schedule(1e6, 0, 0.1, 8, 1e-5, 1e9)


# --- a bool, NaN or a float count: refused as the function the control mirrors refuses it ------------------

NAN = float("nan")
SCALING_DEFAULTS = dict(parameters=7e9, gpus_per_node=8, nodes=16, intra="nvlink", inter="infiniband", cards=8,
                        tokens_per_gpu=4096.0, gpu="h100", utilisation=0.4, algorithm="flat", bytes_per_gradient=2)


def refusal(function, *args, **kwargs) -> str:
    """The ValueError message of ``function(*args, **kwargs)``."""
    with pytest.raises(ValueError) as refused:
        function(*args, **kwargs)
    return str(refused.value)


def scaling_with(**change):
    return scaling_model(**{**SCALING_DEFAULTS, **change})


def as_bytes(name, value):
    return check_positive_number(name, value, "bytes")


def as_seconds(name, value):
    return check_positive_number(name, value, "seconds")


def as_bandwidth(name, value):
    return check_positive_number(name, value, "bytes per second")


# (control, setting, the bad values, what says how the mirrored function refuses a value)
BAD_SETTINGS = [
    (LayoutExplorer, "nodes", (True, NAN, 4.0), lambda v: refusal(Topology, v, 4, 1)),
    (LayoutExplorer, "gpus_per_node", (True, NAN, 4.0), lambda v: refusal(Topology, 2, v, 1)),
    (LayoutExplorer, "gpus_per_process", (True, NAN, 4.0), lambda v: refusal(Topology, 2, 4, v)),
    (MemoryCalculator, "num_parameters", (True, NAN), lambda v: refusal(memory_per_rank, v, 64)),
    (MemoryCalculator, "world_size", (True, NAN, 4.0), lambda v: refusal(memory_per_rank, 7.5e9, v)),
    (AllReduceCost, "world_size", (True, NAN, 4.0),
     lambda v: refusal(collective_time, "all_reduce", 1e6, v, 1e-5, 1e10)),
    (BucketTradeoff, "world_size", (True, NAN, 4.0),
     lambda v: refusal(bucket_schedule, 400e6, 25e6, 0.1, v, 5e-5, 1e10)),
    (ScalingModel, "parameters", (True, NAN), lambda v: refusal(scaling_with, parameters=v)),
    (ScalingModel, "nodes", (True, NAN, 4.0), lambda v: refusal(scaling_with, nodes=v)),
    (ScalingModel, "gpus_per_node", (True, NAN, 4.0), lambda v: refusal(scaling_with, gpus_per_node=v)),
    (ScalingModel, "utilisation", (NAN,), lambda v: refusal(scaling_with, utilisation=v)),
    # compute_seconds calls it tokens
    (ScalingModel, "tokens_per_gpu", (True, NAN),
     lambda v: refusal(scaling_with, tokens_per_gpu=v).replace("tokens", "tokens_per_gpu", 1)),
    # What the functions let through (a bool or NaN for a size, a latency or a bandwidth of ddp_lab.cost's
    # α-β functions; True for the utilisation, which is 0 < True <= 1; the cards, which scaling_model only
    # multiplies by): the control refuses it all the same, with ddp_lab.validate's words or, for the
    # utilisation, those of compute_seconds' other numbers.
    (MemoryCalculator, "capacity_gb", (True, NAN), lambda v: refusal(check_positive_number, "capacity_gb", v)),
    (AllReduceCost, "message_bytes", (True, NAN), lambda v: refusal(as_bytes, "message_bytes", v)),
    (AllReduceCost, "latency", (True, NAN), lambda v: refusal(as_seconds, "latency", v)),
    (AllReduceCost, "bandwidth", (True, NAN), lambda v: refusal(as_bandwidth, "bandwidth", v)),
    (BucketTradeoff, "gradient_bytes", (True, NAN), lambda v: refusal(as_bytes, "gradient_bytes", v)),
    (BucketTradeoff, "bucket_bytes", (True, NAN), lambda v: refusal(as_bytes, "bucket_bytes", v)),
    (BucketTradeoff, "backward_seconds", (True, NAN), lambda v: refusal(as_seconds, "backward_seconds", v)),
    (BucketTradeoff, "latency", (True, NAN), lambda v: refusal(as_seconds, "latency", v)),
    (BucketTradeoff, "bandwidth", (True, NAN), lambda v: refusal(as_bandwidth, "bandwidth", v)),
    (ScalingModel, "utilisation", (True,), lambda v: refusal(scaling_with, parameters=v).replace(
        "parameters", "utilisation", 1)),
    (ScalingModel, "cards", (True, NAN, 4.0), lambda v: refusal(check_positive_int, "cards", v)),
    (ScalingModel, "bytes_per_gradient", (True, NAN, 4.0),
     lambda v: refusal(check_positive_int, "bytes_per_gradient", v)),
]


@pytest.mark.parametrize("cls, setting, value, says", [
    pytest.param(cls, setting, value, says, id=f"{cls.__name__}-{setting}-{value!r}")
    for cls, setting, values, says in BAD_SETTINGS for value in values])
def test_a_bool_nan_or_float_count_is_refused_in_the_functions_words(cls, setting, value, says):
    expected = says(value)
    assert expected.startswith(f"{setting} must be ")
    with pytest.raises(ValueError) as refused:
        cls(**{setting: value})
    assert str(refused.value) == expected
    control = cls()
    before = getattr(control, setting)
    with pytest.raises(ValueError) as refused:  # moved afterwards, from Python or the page: the same
        control.set_state({setting: value})
    assert str(refused.value) == expected
    assert getattr(control, setting) == before and type(getattr(control, setting)) is type(before)
    assert isinstance(refused.value, traitlets.TraitError)  # as a value off the slider is


def test_every_numeric_setting_of_every_control_is_checked():
    checked = {(cls, setting) for cls, setting, _, _ in BAD_SETTINGS}
    for cls in CONTROLS:
        for name, trait in cls.class_traits(sync=True).items():
            values = getattr(trait, "values", None) or ()
            numeric = isinstance(trait, (traitlets.Int, traitlets.Float)) or any(
                isinstance(v, (int, float)) for v in values)
            if numeric and name not in Control.class_traits():
                assert (cls, name) in checked, f"{cls.__name__}.{name} takes numbers and is not checked"


def test_a_static_picture_is_as_wide_as_its_figure_whatever_its_text():
    """figure_html's width is the figure's, not a crop's that follows the fonts'
    metrics (Colab's matplotlib printed width="520" where the page had 525)."""
    import base64
    import re

    import matplotlib.pyplot as plt

    from ddp_lab.draw import RETINA
    from ddp_lab.widgets.control import figure_html

    widths = []
    for label in ("short", "a much longer label that reaches well past the axes' edge " * 2):
        fig, ax = plt.subplots(figsize=(5.6, 3.2))
        ax.set_ylabel(label)
        page = figure_html(fig, alt="a test", dpi=90)
        plt.close(fig)
        widths.append(int(re.search(r'width="(\d+)"', page).group(1)))
        png = base64.b64decode(re.search(r"base64,([^\"]+)", page).group(1))
        assert int.from_bytes(png[16:20], "big") == widths[-1] * RETINA
    assert widths == [round(5.6 * 90)] * 2, widths


def test_the_book_ships_the_controls_as_the_package_writes_them():
    """The JavaScript and CSS of a control travel inside the executed notebook
    (the widget state anywidget saves: ``_esm``, ``_css``), so a change to
    ddp_lab/widgets/js reaches the book only when the notebooks showing that
    control run again (tools/execute_notebook.py). Every stored control must
    carry what its class writes today."""
    import importlib
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    stale, seen = [], 0
    for notebook in sorted([*root.glob("book/*/*.ipynb"), *root.glob("labs/*.ipynb")]):
        state = json.loads(notebook.read_text()).get("metadata", {}).get("widgets", {}).get(
            "application/vnd.jupyter.widget-state+json", {}).get("state", {})
        for model in state.values():
            name = model["state"].get("_anywidget_id", "")
            if not name.startswith("ddp_lab."):
                continue
            module, _, cls = name.rpartition(".")
            control = getattr(importlib.import_module(module), cls)
            seen += 1
            for trait in ("_esm", "_css"):
                if model["state"].get(trait) != getattr(control, trait):
                    stale.append(f"{notebook.relative_to(root)}: {cls}.{trait}")
    assert seen >= len(CONTROLS), f"found {seen} stored controls"
    assert not stale, "run these notebooks again (tools/execute_notebook.py): " + ", ".join(stale)
