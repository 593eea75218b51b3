"""The attention explorer: a text's words, and what each word attends to in every layer and head.

    from attnlab import explore
    explore.attention_explorer(model, "anna wrote a list : cake coat . anna read the list : cake",
                               title="The course model on a list read back", token=14, head=(2, 3))

``model`` is the course model or any model built from the course's classes whose
``model(tokens, return_weights=True)`` returns ``(output, [weights (b, n_heads, n, n) of each
layer])`` (``DecoderOnly``, ``EncoderOnly``), or a dict {label: model} to compare several (a
"model" dropdown then picks one). Choose a word, from the dropdown or by clicking it in the row of
words, and the figure shows:

- (a) the words as text, each shaded by the weight the chosen word gives it in the chosen head;
- (b) the chosen word's attention in every layer and head, one heatmap row per head, the chosen
  head framed: the view in which a head that does something stands out;
- (c) the chosen head's full pattern, every word's row, the chosen word's row framed.

A head dropdown picks the head of (a) and (c). It is built like ``attnlab.interactive``'s figures
(the same ``FigureView`` and outer CSS class, so the browser tests drive it) and works the same
where widgets do not render: the output carries the figure at the starting choice as a PNG.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle
from torch import nn

from attnlab import corpus
from attnlab.interactive import CSS_CLASS, FigureView, _image_html, choice

__all__ = ["Explorer", "attention_explorer", "attention_of", "explorer_figure"]

_CMAP = "Blues"
_SMALLEST_PT = 7.5  # shown at 90 dpi: 9.4 px, the smallest text the course's figures allow is 9 px


@torch.no_grad()
def attention_of(model: nn.Module, words: Sequence[str], tokenizer=corpus.TOKENIZER) -> np.ndarray:
    """The attention weights of ``model`` reading ``words``: (n_layers, n_heads, n, n) float64,
    one row per query (the word attending), one column per key (the word attended to)."""
    ids = torch.tensor([tokenizer.encode(list(words))])
    model.eval()
    out = model(ids, return_weights=True)
    if not (isinstance(out, tuple) and len(out) >= 2 and isinstance(out[1], (list, tuple))):
        raise TypeError("the explorer needs a model whose model(tokens, return_weights=True) returns "
                        "(output, [attention weights of each layer]), as the course's DecoderOnly does")
    return torch.stack([w[0] for w in out[1]]).double().numpy()


def _words(text: str | Sequence[str]) -> list[str]:
    return text.split() if isinstance(text, str) else [str(w) for w in text]


def head_label(layer: int, head: int) -> str:
    return f"L{layer}H{head}"


@dataclass
class Explorer:
    """What the explorer shows, without widgets: the words, every model's weights, and the drawing.

    words: the n words; weights: {model label: (n_layers, n_heads, n, n)}. ``token_options`` and
    ``head_options`` are the dropdowns' labels ("14: coat", "L2H3"); ``draw(token, head, model)``
    takes such labels and returns the figure.
    """

    words: list[str]
    weights: dict[str, np.ndarray]
    title: str
    names: Mapping[tuple[int, int], str] = field(default_factory=dict)

    def __post_init__(self):
        shapes = {w.shape for w in self.weights.values()}
        n = len(self.words)
        if len(shapes) != 1 or any(len(s) != 4 or s[-2:] != (n, n) for s in shapes):
            raise ValueError(f"every model's weights must be (n_layers, n_heads, {n}, {n}), got {sorted(shapes)}")
        self.n_layers, self.n_heads = next(iter(shapes))[:2]

    @property
    def token_options(self) -> list[str]:
        return [f"{i}: {word}" for i, word in enumerate(self.words)]

    @property
    def head_options(self) -> list[str]:
        return [head_label(l, h) + (f" ({self.names[(l, h)]})" if (l, h) in self.names else "")
                for l in range(self.n_layers) for h in range(self.n_heads)]

    def token_index(self, option: str | int) -> int:
        index = int(option) if isinstance(option, int) else int(str(option).split(":", 1)[0])
        if not 0 <= index < len(self.words):
            raise ValueError(f"no word at position {index}: the text has {len(self.words)} words")
        return index

    def head_of(self, option: str | tuple[int, int]) -> tuple[int, int]:
        if isinstance(option, tuple):
            layer, head = option
        else:
            layer, head = (int(part) for part in str(option).split()[0][1:].split("H"))
        if not (0 <= layer < self.n_layers and 0 <= head < self.n_heads):
            raise ValueError(f"no head {head_label(layer, head)}: the model has {self.n_layers} layers of "
                             f"{self.n_heads} heads")
        return layer, head

    def draw(self, token: str | int, head: str | tuple[int, int], model: str | None = None) -> Figure:
        label = next(iter(self.weights)) if model is None else model
        layer, h = self.head_of(head)
        return explorer_figure(self.weights[label], self.words, token=self.token_index(token), head=(layer, h),
                               title=self.title + (f" ({label})" if len(self.weights) > 1 else ""),
                               names=self.names)


def _word_strip(ax, words: Sequence[str], shade: np.ndarray, token: int, causal: bool) -> None:
    """The words as text, wrapped into lines, each on a box shaded by ``shade`` (0..1)."""
    cmap = plt.get_cmap(_CMAP)
    ax.set_xlim(0, 1)
    ax.axis("off")
    per_char, gap, x, line = 0.0105, 0.006, 0.0, 0
    lines: list[list[tuple[float, int]]] = [[]]
    for i, word in enumerate(words):
        width = per_char * (len(word) + 1.5)
        if x + width > 1.0 and lines[-1]:
            x, line = 0.0, line + 1
            lines.append([])
        lines[-1].append((x, i))
        x += width + gap
    n_lines = len(lines)
    ax.set_ylim(n_lines - 0.5, -0.5)
    for row, items in enumerate(lines):
        for x, i in items:
            future = causal and i > token
            weight = 0.0 if future else float(shade[i])
            chosen = i == token
            ax.text(x, row, words[i], fontsize=10, va="center", ha="left",
                    color="#9a9a9a" if future else ("white" if weight > 0.55 else "black"),
                    fontweight="bold" if chosen else "normal",
                    bbox={"boxstyle": "round,pad=0.25", "facecolor": cmap(weight) if not future else "white",
                          "edgecolor": "#C44E52" if chosen else "#d0d0d0", "linewidth": 2.0 if chosen else 0.6})


def explorer_figure(weights: Any, words: Sequence[str], *, token: int, head: tuple[int, int], title: str,
                    names: Mapping[tuple[int, int], str] | None = None) -> Figure:
    """The explorer's figure: what word ``token`` attends to, in head ``head`` and in all of them.

    weights: (n_layers, n_heads, n, n) attention weights of one text; words: its n words;
    token: the position of the chosen word (counting from 0); head: (layer, head) picked out;
    names: (layer, head) -> what the head was measured to do (shown next to its label).
    """
    w = np.asarray(weights, dtype=float)
    n_layers, n_heads, n, _ = w.shape
    layer, chosen_head = head
    names = names or {}
    causal = bool(np.allclose(np.triu(w, k=1), 0.0))  # a decoder: the words after the token get nothing
    label = head_label(layer, chosen_head) + (f" ({names[head]})" if head in names else "")
    row = w[layer, chosen_head, token]

    side = min(4.6, max(3.2, 0.13 * n + 0.9))
    fig = plt.figure(figsize=(10.4, 2.0 + side), layout="constrained")
    grid = fig.add_gridspec(2, 2, height_ratios=[1.25, side], width_ratios=[1.0, 1.0])
    strip = fig.add_subplot(grid[0, :])
    _word_strip(strip, words, row, token, causal)
    top = np.argsort(row)[::-1][:2]
    strip.set_title(f"(a) '{words[token]}' (position {token}) in {label}: most weight on "
                    + ", ".join(f"'{words[j]}' ({j}, {row[j]:.2f})" for j in top), fontsize=10)

    # (b) the chosen word's row in every head: n_layers * n_heads rows, one column per word.
    every = w[:, :, token, :].reshape(n_layers * n_heads, n).copy()
    if causal:
        every[:, token + 1:] = np.nan
    ax = fig.add_subplot(grid[1, 0])
    image = ax.imshow(every, cmap=_CMAP, vmin=0, vmax=1, aspect="auto", interpolation="nearest")
    step = max(1, int(np.ceil(n / 28)))
    ticks = list(range(0, n, step))
    ax.set_xticks(ticks, labels=[f"{words[j]} {j}" for j in ticks], rotation=90, fontsize=_SMALLEST_PT)
    rows = [head_label(l, h) for l in range(n_layers) for h in range(n_heads)]
    ax.set_yticks(range(len(rows)), labels=rows, fontsize=_SMALLEST_PT + 0.5)
    chosen_row = layer * n_heads + chosen_head
    ax.add_patch(Rectangle((-0.5, chosen_row - 0.5), n, 1, fill=False, edgecolor="#C44E52", linewidth=2))
    ax.axvline(token, color="#C44E52", linewidth=0.8, linestyle=":")
    ax.set_xlabel("word attended to (key), with its position")
    ax.set_ylabel("layer and head")
    ax.set_title(f"(b) '{words[token]}' in every head", fontsize=10)

    # (c) the chosen head's whole pattern, the chosen word's row framed.
    ax = fig.add_subplot(grid[1, 1])
    pattern = w[layer, chosen_head].copy()
    if causal:
        pattern[np.triu_indices(n, k=1)] = np.nan
    ax.imshow(pattern, cmap=_CMAP, vmin=0, vmax=1, aspect="auto", interpolation="nearest")
    ax.set_xticks(ticks, labels=[f"{words[j]} {j}" for j in ticks], rotation=90, fontsize=_SMALLEST_PT)
    ax.set_yticks(ticks, labels=[f"{j} {words[j]}" for j in ticks], fontsize=_SMALLEST_PT)
    ax.add_patch(Rectangle((-0.5, token - 0.5), n, 1, fill=False, edgecolor="#C44E52", linewidth=2))
    ax.set_xlabel("word attended to (key)")
    ax.set_ylabel("word attending (query)")
    ax.set_title(f"(c) {label}: every word's attention", fontsize=10)
    fig.colorbar(image, ax=fig.axes[1:], shrink=0.8, label="attention weight")
    fig.suptitle(title, fontsize=11)
    return fig


def attention_explorer(model: nn.Module | Mapping[str, nn.Module], text: str | Sequence[str], *, title: str,
                       token: int | None = None, head: tuple[int, int] = (0, 0),
                       names: Mapping[tuple[int, int], str] | None = None,
                       tokenizer=corpus.TOKENIZER) -> FigureView:
    """Show the explorer for ``model`` (or {label: model}) reading ``text`` (words, or a string of
    words separated by spaces); see the module's docstring. token: the word chosen at the start
    (its position, counting from 0; default the last); head: the head picked out at the start;
    names: (layer, head) -> what the head was measured to do. Returns the ``FigureView`` (its
    ``explorer`` attribute: the ``Explorer``)."""
    words = _words(text)
    models = dict(model) if isinstance(model, Mapping) else {"model": model}
    explorer = Explorer(words, {label: attention_of(m, words, tokenizer) for label, m in models.items()}, title,
                        dict(names or {}))
    token = len(words) - 1 if token is None else explorer.token_index(token)
    layer, h = explorer.head_of(tuple(head))
    controls = {"token": choice("word", explorer.token_options, value=explorer.token_options[token]),
                "head": choice("head", explorer.head_options,
                               value=explorer.head_options[layer * explorer.n_heads + h])}
    if len(models) > 1:
        controls["model"] = choice("model", list(models))
    view = FigureView(explorer.draw, controls, title)
    view.explorer = explorer
    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover (IPython comes with the course)
        get_ipython = lambda: None  # noqa: E731
    if get_ipython() is None:
        fig = view.figure()
        if fig is None:
            print(f"{title}: {view.error}")
        return view
    _show(view, explorer)
    return view


def _show(view: FigureView, explorer: Explorer) -> None:
    """The widgets: the dropdowns, a row of clickable words, the picture (as ``interactive``'s)."""
    import ipywidgets as widgets
    from IPython.display import display

    static = view.static_bundle()
    picture = widgets.HTML(_image_html(static))
    printed = widgets.Output()
    inputs = {name: control.widget() for name, control in view.controls.items()}

    def on_change(change, name):
        printed.clear_output()
        with printed:
            picture.value = _image_html(view.bundle(view.redraw(**{name: change["new"]})))

    for name, widget in inputs.items():
        widget.observe(lambda change, name=name: on_change(change, name), names="value")

    # Clicking a word chooses it: the button sets the word dropdown, whose change redraws.
    def choose(index):
        return lambda _button: setattr(inputs["token"], "value", explorer.token_options[index])

    buttons = []
    for index, word in enumerate(explorer.words):
        button = widgets.Button(description=word, tooltip=f"position {index}: show what '{word}' attends to",
                                layout=widgets.Layout(width="auto", height="26px", padding="0 4px", margin="1px"))
        button.on_click(choose(index))
        buttons.append(button)
    words = widgets.HBox(buttons, layout=widgets.Layout(flex_flow="row wrap"))
    words.add_class("attnlab-explorer-words")
    box = widgets.VBox([widgets.HTML(f"<b>{html.escape(view.title)}</b>"),
                        widgets.HBox(list(inputs.values()), layout=widgets.Layout(flex_flow="row wrap")),
                        widgets.HTML("<small>Click a word to see what it attends to:</small>"),
                        words, picture, printed])
    box.add_class(CSS_CLASS)
    view.widgets = {"box": box, "inputs": inputs, "picture": picture, "printed": printed, "words": buttons}
    bundle = box._repr_mimebundle_()
    bundle.update(static)  # a frontend without widgets shows the PNG and its caption
    display(bundle, raw=True)
