"""Chapter 12b's scaling model, to play with: when does data parallelism stop scaling?

The reader picks a model size, a cluster (GPUs per node, nodes, the link
inside a node, the network card and how many of them per node), a GPU and
the share of its peak it reaches, the tokens each GPU processes per step,
the gradients' precision, the all-reduce (flat ring or hierarchical), and
the links' speeds: as NCCL's benchmarks reach them (``achieved``, the
default: what a reader's job will see) or as their vendors rate them.
The control shows what :mod:`ddp_lab.cost.scaling` answers:

* the compute of one step (``6 P T / (F x utilisation)``), the all-reduce
  of the gradients, the step with and without overlap, the scaling
  efficiency of each, and the tokens per GPU whose backward pass hides the
  all-reduce (:func:`ddp_lab.cost.scaling.tokens_to_hide`);
* a picture of one step, compute then all-reduce (no overlap) and the
  all-reduce beside the backward pass (overlap), with what sticks out
  shaded;
* the efficiency against the number of GPUs, 1 to 128 nodes of the current
  size, both bounds, the current setting marked.

The network: a flat ring leaves each node through all its cards at once
(NCCL runs a ring per card), so a node sends at ``cards x`` one card's
bandwidth; the hierarchical all-reduce of Chapter 12b sends through one
leader per node, hence one card. Links and GPUs come from
:data:`ddp_lab.cost.links.LINKS` and :data:`ddp_lab.cost.scaling.GPUS`, with their
sources; a link's achieved speed is the bus bandwidth nccl-tests reaches on
it (``Link.achieved``, with its source and date; the rated one where the
book has none). The JavaScript repeats the formulas; ``tests/test_widgets_js.py``
checks them against Python on a grid. In a kernel, ``control.result`` is
Python's answer for the setting on screen. A setting that is a bool, NaN, or
a float where a count is wanted is refused as :mod:`ddp_lab.cost.scaling`
refuses that argument, in its words.

>>> control = ScalingModel(parameters=7e9, nodes=16, tokens_per_gpu=1024, speeds="rated")
>>> round(control.result["all_reduce"] * 1e3), f"{control.result['efficiency_serial']:.0%}"
(72, '60%')
>>> control.speeds = "achieved"  # 47 GB/s of 50 per InfiniBand card
>>> round(control.result["all_reduce"] * 1e3), f"{control.result['efficiency_serial']:.0%}"
(76, '59%')
"""

from __future__ import annotations

import html

import traitlets

from ddp_lab.cost import scaling
from ddp_lab.cost.links import LINKS, Link
from ddp_lab.draw.memory import describe_parameters
from ddp_lab.draw.palette import BLUE, GREEN, SKY_BLUE, VERMILLION
from ddp_lab.units import format_seconds
from ddp_lab.validate import check_positive_int, check_positive_number, is_number

from .control import CheckedEnum, CheckedFloat, CheckedInt, Control, figure_html, javascript

__all__ = ["ScalingModel", "scaling_model", "NODES", "GPUS_PER_NODE", "TOKENS", "UTILISATIONS",
           "INTRA_LINKS", "INTER_LINKS", "SPEEDS"]

GPUS_PER_NODE = (1, 2, 4, 8)
NODES = tuple(2 ** k for k in range(8))                        # 1 to 128 nodes: up to 1024 GPUs
TOKENS = tuple(float(2 ** k) for k in range(8, 21))            # 256 to 1M tokens per GPU per step
UTILISATIONS = tuple(round(0.05 * k, 2) for k in range(1, 21))  # 5% to 100% of the peak
PARAMETER_RANGE = (1e8, 1e12)
MAX_CARDS = 8
INTRA_LINKS = tuple(key for key, link in LINKS.items() if link.where == "inside a node")
INTER_LINKS = tuple(key for key, link in LINKS.items() if link.where == "between nodes")
ALGORITHMS = ("flat", "hierarchical")
SPEEDS = ("achieved", "rated")
COLOURS = {"forward": SKY_BLUE, "backward": GREEN, "comm": BLUE, "exposed": VERMILLION}


def scaling_model(parameters: float, gpus_per_node: int, nodes: int, intra: str, inter: str, cards: int,
                  tokens_per_gpu: float, gpu: str, utilisation: float, algorithm: str,
                  bytes_per_gradient: int, speeds: str = "achieved") -> dict:
    """Python's answer for one setting of the control, from :mod:`ddp_lab.cost.scaling`.

    ``intra`` and ``inter`` are keys of :data:`ddp_lab.cost.links.LINKS`, ``gpu``
    of :data:`ddp_lab.cost.scaling.GPUS`; ``cards`` network cards per node (a flat
    ring uses them all, the hierarchical all-reduce's leader one); ``speeds``
    "achieved" prices the links at what nccl-tests reaches on them, "rated" at
    their vendors' figures.
    """
    if speeds not in SPEEDS:
        raise ValueError(f"speeds must be one of {SPEEDS}, got {speeds!r}")
    flops = scaling.GPUS[gpu].flops
    compute = scaling.compute_seconds(parameters, tokens_per_gpu, flops, utilisation)
    nbytes = parameters * bytes_per_gradient
    def priced(key):
        return LINKS[key].at_achieved() if speeds == "achieved" else LINKS[key]

    card = priced(inter)
    network = None
    if nodes > 1:
        network = card if algorithm == "hierarchical" else Link(card.name, cards * card.bandwidth, card.latency)
    reduce = (scaling.hierarchical_all_reduce_seconds if algorithm == "hierarchical"
              else scaling.flat_all_reduce_seconds)
    all_reduce = reduce(nbytes, nodes, gpus_per_node, intra=priced(intra), inter=network)
    serial = scaling.step_seconds(compute, all_reduce, overlap=False)
    overlapped = scaling.step_seconds(compute, all_reduce, overlap=True)
    return {
        "compute": compute,
        "all_reduce": all_reduce,
        "step_serial": serial,
        "step_overlapped": overlapped,
        "efficiency_serial": scaling.scaling_efficiency(compute, serial),
        "efficiency_overlapped": scaling.scaling_efficiency(compute, overlapped),
        "tokens_to_hide": scaling.tokens_to_hide(parameters, all_reduce, flops, utilisation),
    }


def _check_utilisation(name, value):
    """compute_seconds' own check of the utilisation (NaN, 0, above 1), after
    refusing what it lets through (a bool: True < 1) as it refuses its other numbers."""
    if not is_number(value):
        check_positive_number(name, value)
    scaling.compute_seconds(1.0, 1.0, 1.0, value)


def _constants() -> dict:
    def link(key):
        found = LINKS[key]
        return {"name": found.name, "bandwidth": found.bandwidth, "latency": found.latency, "source": found.source,
                "achieved": found.achieved, "achieved_source": found.achieved_source}

    return {
        "gpus_per_node": list(GPUS_PER_NODE),
        "nodes": list(NODES),
        "tokens": list(TOKENS),
        "utilisations": list(UTILISATIONS),
        "parameter_range": list(PARAMETER_RANGE),
        "max_cards": MAX_CARDS,
        "links": {key: link(key) for key in INTRA_LINKS + INTER_LINKS},
        "intra": list(INTRA_LINKS),
        "inter": list(INTER_LINKS),
        "gpus": {key: {"name": gpu.name, "flops": gpu.flops, "source": gpu.source}
                 for key, gpu in scaling.GPUS.items()},
        "backward_share": scaling.BACKWARD_SHARE,
        "colours": COLOURS,
    }


class ScalingModel(Control):
    """When data parallelism stops scaling, Chapter 12b (``book/part4_running/12b_scaling_limits``)."""

    # the numbers go through the checks of ddp_lab.cost.scaling (and of ddp_lab.cost.links, whose
    # all-reduce its flat ring is) before the choices: True is not 1 GPU, nor 4.0 four nodes
    parameters = CheckedFloat(7e9, min=PARAMETER_RANGE[0], max=PARAMETER_RANGE[1],
                              check=check_positive_number).tag(sync=True)
    gpus_per_node = CheckedEnum(GPUS_PER_NODE, default_value=8, check=check_positive_int).tag(sync=True)
    nodes = CheckedEnum(NODES, default_value=16, check=check_positive_int).tag(sync=True)
    intra = traitlets.Enum(INTRA_LINKS, default_value="nvlink").tag(sync=True)
    inter = traitlets.Enum(INTER_LINKS, default_value="infiniband").tag(sync=True)
    cards = CheckedInt(8, min=1, max=MAX_CARDS, check=check_positive_int).tag(sync=True)
    tokens_per_gpu = CheckedEnum(TOKENS, default_value=4096.0, check=check_positive_number).tag(sync=True)
    gpu = traitlets.Enum(tuple(scaling.GPUS), default_value="h100").tag(sync=True)
    utilisation = CheckedEnum(UTILISATIONS, default_value=0.4, check=_check_utilisation).tag(sync=True)
    algorithm = traitlets.Enum(ALGORITHMS, default_value="flat").tag(sync=True)
    bytes_per_gradient = CheckedEnum((2, 4), default_value=2, check=check_positive_int).tag(sync=True)
    speeds = traitlets.Enum(SPEEDS, default_value="achieved").tag(sync=True)

    _esm = javascript("scaling.js", _constants())

    def _arguments(self, nodes=None) -> tuple:
        return (self.parameters, self.gpus_per_node, self.nodes if nodes is None else nodes, self.intra,
                self.inter, self.cards, self.tokens_per_gpu, self.gpu, self.utilisation, self.algorithm,
                self.bytes_per_gradient, self.speeds)

    @property
    def result(self) -> dict:
        """Python's answer for the setting on screen (see :func:`scaling_model`)."""
        return scaling_model(*self._arguments())

    @property
    def curve(self) -> list[tuple[int, float, float]]:
        """(GPUs, efficiency without overlap, with overlap) for 1 to 128 nodes of this size."""
        rows = []
        for nodes in NODES:
            answer = scaling_model(*self._arguments(nodes))
            rows.append((nodes * self.gpus_per_node, answer["efficiency_serial"], answer["efficiency_overlapped"]))
        return rows

    def title(self) -> str:
        """The setting in one line, as the control's heading shows it."""
        gpus = self.nodes * self.gpus_per_node
        return (f"{describe_parameters(self.parameters)} parameters on {gpus} GPUs "
                f"({self.nodes} x {self.gpus_per_node}), {self.tokens_per_gpu:,.0f} tokens per GPU, "
                f"{self.algorithm} all-reduce, {self.speeds} link speeds")

    def static_html(self) -> str:
        import matplotlib.pyplot as plt

        curve = self.curve
        fig, ax = plt.subplots(figsize=(5.6, 3.2), layout="tight")
        plt.close(fig)
        gpus = [row[0] for row in curve]
        ax.plot(gpus, [100 * row[2] for row in curve], color=COLOURS["backward"], linewidth=2, label="overlap")
        ax.plot(gpus, [100 * row[1] for row in curve], color=COLOURS["exposed"], linewidth=2, label="no overlap")
        now = self.result
        current = self.nodes * self.gpus_per_node
        ax.plot([current], [100 * now["efficiency_overlapped"]], "o", color=COLOURS["backward"])
        ax.plot([current], [100 * now["efficiency_serial"]], "o", color=COLOURS["exposed"])
        ax.set_xscale("log", base=2)
        ax.set_xticks(gpus, [str(g) for g in gpus])
        ax.set_ylim(0, 105)
        ax.set_xlabel("GPUs")
        ax.set_ylabel("scaling efficiency (%)")
        ax.grid(color="0.9", which="both")
        ax.legend(frameon=False, loc="lower left")
        title = self.title()
        rows = [("compute", format_seconds(now["compute"], "text")),
                ("all-reduce", format_seconds(now["all_reduce"], "text")),
                ("step, no overlap", format_seconds(now["step_serial"], "text")),
                ("step, overlap", format_seconds(now["step_overlapped"], "text")),
                ("efficiency, no overlap", f"{now['efficiency_serial']:.1%}"),
                ("efficiency, overlap", f"{now['efficiency_overlapped']:.1%}"),
                ("tokens per GPU that hide the all-reduce", f"{now['tokens_to_hide']:,.0f}")]
        cells = "".join(f"<tr><td>{name}</td><td>{value}</td></tr>" for name, value in rows)
        return (f"<p>{html.escape(title)}</p>" + figure_html(fig, alt=title)
                + f"<table><tbody>{cells}</tbody></table>")
