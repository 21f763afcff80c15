"""What every interactive control of the book shares: its JavaScript, its
static picture, and how it shows up in a notebook and in the built book.

A control is an `anywidget <https://anywidget.dev>`_ widget: a Python object
whose traits (the slider positions) are synced with a JavaScript module that
draws it. The module is plain text shipped with the widget (``_esm``), so the
same control runs in JupyterLab, in Colab and in the static HTML of the book,
where nbclient saved the widget's state and the ipywidgets embed manager
plays it back without a kernel. Everything the module needs is in it:
``js/common.js`` (elements, sliders, number formatting), the control's own
``js/<name>.js``, and before both a ``const PY = {...}`` of constants taken
from Python (colours, choices, bytes per parameter), so that the page and the
Python package cannot drift apart on them. The formulas themselves are
written again in JavaScript; ``tests/test_widgets_js.py`` evaluates them in
Chromium on a grid of inputs and compares every answer with Python's.

The colours are the book's (``ddp_lab.draw.palette``), the same as its
figures': each control passes those it draws with in ``PY``, and the
stylesheet ``js/controls.css`` gets those it uses as CSS variables
(:func:`palette_css`). Only the greys of axes and grid lines are the
controls' own, written where they are drawn.

Each control also has a **static picture** of its default state: the
``text/html`` of its output holds the widget's view tag followed by that
picture (a PNG drawn by ``ddp_lab.draw`` and the numbers as an HTML table).
The book's build prefers ``text/html`` for such outputs
(``nb_mime_priority_overrides`` in ``_config.yml``), so a reader without
JavaScript, or a search engine, sees the default state, and the embed
manager renders the live control in place of the tag; the control's CSS then
hides the picture. JupyterLab and Colab prefer the widget view and never
show the picture.

A control refuses a setting as the Python function it mirrors refuses that
argument, in the same words: each numeric setting is a :class:`CheckedInt`,
:class:`CheckedFloat` or :class:`CheckedEnum`, which puts every value
through that function's own check (one from :mod:`ddp_lab.validate`, or
the module's where it has its own) before the slider's range. A bool, NaN,
or a float where a count is wanted (``4.0``) is refused so, where traitlets
alone would take ``True`` for 1 and ``4.0`` for 4. The refusal is a
:class:`SettingError`: a ValueError, as the function's, and a TraitError, as
traitlets' own refusals (a value off the slider) are.
"""

from __future__ import annotations

import base64
import html
import io
import json
from importlib import resources

import anywidget
import ipywidgets
import traitlets

from ddp_lab.draw.palette import BLUE, INK, MUTED_TEXT, VERMILLION

__all__ = ["Control", "javascript", "figure_html", "palette_css", "SettingError", "CheckedInt", "CheckedFloat",
           "CheckedEnum"]

VIEW_MIMETYPE = "application/vnd.jupyter.widget-view+json"


def _read(name: str) -> str:
    return resources.files(__package__).joinpath("js", name).read_text(encoding="utf-8")


def javascript(name: str, constants: dict) -> str:
    """The ES module of a control: Python's constants, common.js, then ``js/<name>``."""
    return "\n".join([
        f"// constants exported from Python by ddp_lab.widgets.control.javascript\nconst PY = {json.dumps(constants)};",
        _read("common.js"),
        _read(name),
    ])


def palette_css() -> str:
    """The palette's colours that ``js/controls.css`` uses, as CSS variables of every control."""
    variables = {"ink": INK, "muted": MUTED_TEXT, "accent": BLUE, "warning": VERMILLION}
    return ".ddp-control {\n" + "".join(f"  --ddp-{name}: {colour};\n" for name, colour in variables.items()) + "}\n"


def figure_html(figure, *, alt: str, dpi: int = 90) -> str:
    """A matplotlib figure as an ``<img>`` (PNG, embedded), for static pictures.

    Drawn at ``RETINA`` (2) times ``dpi`` and shown at the width it has at
    ``dpi`` (the ``width`` attribute), so that it is sharp on a HiDPI screen, as
    the book's figures are (``ddp_lab.draw``); ``controls.css`` lets it
    shrink to a narrower column.

    The picture is the figure's whole canvas (the caller lays the figure
    out to fit it), not cropped to what is drawn (``bbox_inches="tight"``):
    a crop's size follows the fonts' metrics, which differ between machines
    and matplotlib releases, and the ``width`` printed in the cell's HTML
    would differ with it.
    """
    from ddp_lab.draw import RETINA

    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=dpi * RETINA)
    png = buffer.getvalue()
    width = round(figure.get_figwidth() * dpi)
    data = base64.b64encode(png).decode("ascii")
    return (f'<img class="ddp-static-figure" alt="{html.escape(alt)}" width="{width}" '
            f'src="data:image/png;base64,{data}">')


class SettingError(traitlets.TraitError, ValueError):
    """A control's setting refused by the check of the function it mirrors, in that check's words."""


class _Checked:
    """A trait that puts each value through ``check(name, value)`` (which raises ValueError)
    before its own validation: the type and range checks of traitlets."""

    def __init__(self, *args, check, **kwargs):
        super().__init__(*args, **kwargs)
        self.check = check

    def validate(self, obj, value):
        try:
            self.check(self.name, value)
        except ValueError as refusal:
            raise SettingError(str(refusal)) from None
        return super().validate(obj, value)


class CheckedInt(_Checked, traitlets.Int):
    """``traitlets.Int`` whose values first pass ``check`` (see :class:`_Checked`)."""


class CheckedFloat(_Checked, traitlets.Float):
    """``traitlets.Float`` whose values first pass ``check`` (see :class:`_Checked`)."""


class CheckedEnum(_Checked, traitlets.Enum):
    """``traitlets.Enum`` whose values first pass ``check`` (see :class:`_Checked`)."""


class Control(anywidget.AnyWidget):
    """Base class of the book's controls (see the module docstring).

    A subclass sets ``_esm = javascript("<name>.js", constants)`` and
    implements :meth:`static_html`, the picture of its current state.
    """

    _css = palette_css() + _read("controls.css") + _read("wide_pictures.css")

    def static_html(self) -> str:  # pragma: no cover - every control defines it
        raise NotImplementedError

    def _repr_mimebundle_(self, **kwargs):
        """The widget view, as every widget has, plus ``text/html``: the view tag
        the embed manager renders, then the static picture."""
        bundle = super()._repr_mimebundle_(**kwargs)
        data, metadata = bundle if isinstance(bundle, tuple) else (bundle, {})
        view = json.dumps({"version_major": 2, "version_minor": 0, "model_id": self.model_id})
        data["text/html"] = (
            f'<div class="ddp-control-output">'
            f'<script type="{VIEW_MIMETYPE}">{view}</script>'
            f'<div class="ddp-control-static">{self.static_html()}</div></div>'
        )
        return data, metadata

    if int(getattr(ipywidgets, "__version__", "8").split(".")[0]) < 8:
        def _ipython_display_(self, **kwargs):
            """ipywidgets 7 (Colab's 7.7.1) displays a widget through a method of this name,
            which IPython prefers to ``_repr_mimebundle_`` and which would leave out the
            ``text/html`` above; ipywidgets 8 has no such method. Display what
            ``_repr_mimebundle_`` gives, as IPython does under ipywidgets 8."""
            from IPython.display import display

            data, metadata = self._repr_mimebundle_(**kwargs)
            display(data, metadata=metadata, raw=True)
