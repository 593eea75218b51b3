"""Interactive figures: controls (ipywidgets) that redraw a matplotlib figure, with a static twin.

A lesson writes one drawing function and names its controls::

    from attnlab.interactive import interactive_figure, slider, choice

    def draw(n_q, window):
        fig, ax = plt.subplots(figsize=(5, 4), layout="constrained")
        ...                              # title, axis labels, units
        return fig

    interactive_figure(
        draw,
        n_q=slider("queries n_q", 1, 12, value=6),
        window=choice("window", [None, 2, 4], value=None),
        title="Masks, combined",
    )

Where widgets render (JupyterLab), moving a control redraws the figure. Where they do not (an
HTML export, a notebook viewer, a plain-text console, ``nbclient`` in the tests) the same output
carries the figure drawn at the controls' starting values as a PNG, and a line saying which values
it shows, so the lesson still reads. Outside IPython ``interactive_figure`` just draws the static
figure and returns the view.

The logic (values in, figure out, how many redraws) lives in ``FigureView`` and is tested without a
browser; the browser tests move one control of each lesson's figure once and see it redraw.
"""

from __future__ import annotations

import base64
import html
import io
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import matplotlib.pyplot as plt
from matplotlib.figure import Figure

__all__ = ["Control", "FigureView", "checkbox", "choice", "interactive_figure", "slider", "text"]

# Browser tests find every interactive figure by this class on its outer box.
CSS_CLASS = "attnlab-interactive-figure"


@dataclass(frozen=True)
class Control:
    """One control of an interactive figure, described as data (its widget is built on show).

    kind: "int" or "float" slider, "choice" (a dropdown), "checkbox" or "text".
    label: what the learner reads next to it.
    value: the starting value (the static figure shows it).
    """

    kind: str
    label: str
    value: Any
    low: float | None = None
    high: float | None = None
    step: float | None = None
    options: tuple = ()

    def __post_init__(self):
        if self.kind not in ("int", "float", "choice", "checkbox", "text"):
            raise ValueError(f"unknown control kind {self.kind!r}")
        if self.kind in ("int", "float"):
            if self.low is None or self.high is None or not self.low <= self.value <= self.high:
                raise ValueError(f"control {self.label!r}: value {self.value!r} is outside "
                                 f"[{self.low}, {self.high}]")
        if self.kind == "choice" and self.value not in self.options:
            raise ValueError(f"control {self.label!r}: value {self.value!r} is not one of its options")

    def widget(self):
        """A fresh ipywidget for this control."""
        import ipywidgets as widgets

        # A slider sized "auto" inside the wrapping row of controls collapses to its handle (a
        # track 0 px wide that cannot be dragged): sliders get a width of their own.
        width = "min(100%, 480px)" if self.kind in ("int", "float") else "auto"
        common = {"description": self.label, "style": {"description_width": "initial"},
                  "layout": widgets.Layout(width=width), "continuous_update": False}
        if self.kind == "int":
            return widgets.IntSlider(value=self.value, min=int(self.low), max=int(self.high),
                                     step=int(self.step or 1), **common)
        if self.kind == "float":
            return widgets.FloatSlider(value=self.value, min=self.low, max=self.high,
                                       step=self.step or (self.high - self.low) / 100, **common)
        if self.kind == "choice":
            labels = [(str(option), option) for option in self.options]
            common.pop("continuous_update")
            return widgets.Dropdown(options=labels, value=self.value, **common)
        if self.kind == "checkbox":
            common.pop("continuous_update")
            return widgets.Checkbox(value=bool(self.value), indent=False, **common)
        return widgets.Text(value=str(self.value), **common)


def slider(label: str, low: float, high: float, value: float | None = None, step: float | None = None) -> Control:
    """An int slider when ``low``, ``high`` (and ``value``, ``step``) are ints, else a float one."""
    value = low if value is None else value
    whole = all(isinstance(x, int) and not isinstance(x, bool) for x in (low, high, value)) and (
        step is None or isinstance(step, int))
    return Control("int" if whole else "float", label, value, low, high, step)


def choice(label: str, options: Sequence[Any], value: Any = None) -> Control:
    """A dropdown over ``options`` (shown with ``str``), starting at ``value`` (the first one)."""
    options = tuple(options)
    return Control("choice", label, options[0] if value is None else value, options=options)


def checkbox(label: str, value: bool = False) -> Control:
    return Control("checkbox", label, bool(value))


def text(label: str, value: str = "") -> Control:
    """A text box (the figure redraws when the learner presses Enter or leaves the box)."""
    return Control("text", label, value)


def _png(fig: Figure) -> str:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=90)
    return base64.b64encode(buffer.getvalue()).decode()


@dataclass
class FigureView:
    """A drawing function, its controls and the current values; no widgets.

    ``draw(**values)`` must return a matplotlib ``Figure`` (the view closes it after use).
    ``redraw(**changes)`` draws again with some values changed and returns the new figure.
    """

    draw: Callable[..., Figure]
    controls: dict[str, Control]
    title: str
    values: dict[str, Any] = field(default_factory=dict)
    redraws: int = 0
    error: str = ""  # the last drawing error, shown instead of the figure

    def __post_init__(self):
        if not self.controls:
            raise ValueError("an interactive figure needs at least one control")
        self.values = {name: control.value for name, control in self.controls.items()}

    def figure(self) -> Figure | None:
        """The figure at the current values, or None (with ``error`` set) if drawing failed."""
        try:
            # Not registered with pyplot's interactive display: the view shows it and closes it,
            # so the inline backend never draws a copy of it elsewhere.
            with plt.ioff():
                fig = self.draw(**self.values)
        except Exception as exc:  # noqa: BLE001 (a bad combination of values is shown, not raised)
            self.error = f"{type(exc).__name__}: {exc}"
            return None
        if not isinstance(fig, Figure):
            raise TypeError(f"the drawing function of {self.title!r} must return a matplotlib Figure, "
                            f"got {type(fig).__name__}")
        self.error = ""
        return fig

    def redraw(self, **changes: Any) -> Figure | None:
        unknown = set(changes) - set(self.controls)
        if unknown:
            raise KeyError(f"{self.title!r} has no control named {sorted(unknown)}; it has {sorted(self.controls)}")
        self.values.update(changes)
        self.redraws += 1
        return self.figure()

    def caption(self) -> str:
        shown = ", ".join(f"{self.controls[name].label} = {value}" for name, value in self.values.items())
        return f"{self.title} (shown at {shown}; run the notebook in JupyterLab to change them)"

    def static_bundle(self) -> dict[str, str]:
        """The figure at the current values as a display bundle: a PNG and a text line."""
        return self.bundle(self.figure())

    def bundle(self, fig: Figure | None) -> dict[str, str]:
        """``fig`` (None: the drawing failed, ``error`` says why) as a display bundle, closed."""
        bundle = {"text/plain": self.caption() if fig is not None else f"{self.title}: {self.error}"}
        if fig is not None:
            bundle["image/png"] = _png(fig)
            plt.close(fig)
        return bundle


def interactive_figure(draw: Callable[..., Figure], *, title: str, **controls: Control) -> FigureView:
    """Show ``draw`` with one control per keyword; see the module's docstring. Returns the view."""
    for name, control in controls.items():
        if not isinstance(control, Control):
            raise TypeError(f"control {name!r} must be made by slider(), choice(), checkbox() or text(), "
                            f"got {type(control).__name__}")
    view = FigureView(draw, dict(controls), title)
    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover (IPython comes with the course)
        get_ipython = lambda: None  # noqa: E731
    if get_ipython() is None:
        fig = view.figure()
        if fig is None:
            print(f"{title}: {view.error}")
        return view
    _show_widgets(view)
    return view


def _show_widgets(view: FigureView) -> None:
    import ipywidgets as widgets
    from IPython.display import display

    static = view.static_bundle()  # drawn before any control moves: the fallback shows the start
    # The figure is shown as a PNG inside an HTML widget, not through an Output widget: it needs no
    # kernel round trip to display, so it also works where outputs are captured (nbclient).
    picture = widgets.HTML(_image_html(static))
    inputs = {name: control.widget() for name, control in view.controls.items()}

    # What a redraw prints or displays goes here, under the figure, not into JupyterLab's Log
    # Console (a widget callback has no cell to write to).
    printed = widgets.Output()

    def on_change(change, name):
        printed.clear_output()
        with printed:
            fig = view.redraw(**{name: change["new"]})  # drawn once, shown, closed
            picture.value = _image_html(view.bundle(fig))

    for name, widget in inputs.items():
        widget.observe(lambda change, name=name: on_change(change, name), names="value")
    box = widgets.VBox([widgets.HTML(f"<b>{html.escape(view.title)}</b>"),
                        widgets.HBox(list(inputs.values()), layout=widgets.Layout(flex_flow="row wrap")),
                        picture, printed])
    box.add_class(CSS_CLASS)
    view.widgets = {"box": box, "inputs": inputs, "picture": picture, "printed": printed}
    bundle = box._repr_mimebundle_()
    bundle.update(static)  # a frontend without widgets shows the PNG and its caption
    display(bundle, raw=True)


def _image_html(bundle: dict[str, str]) -> str:
    if "image/png" not in bundle:
        return f"<pre>{html.escape(bundle['text/plain'])}</pre>"
    return (f'<img alt="{html.escape(bundle["text/plain"])}" src="data:image/png;base64,{bundle["image/png"]}" '
            'style="max-width:100%">')
