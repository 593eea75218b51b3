"""Figures of lesson 06: the two placements of a norm, activation functions, where a transformer's
parameters are, gradients at initialization under each placement, superposition in a toy model, and
the feed-forward neurons of the course model (their top contexts, the tokens their values promote,
and what scaling one does to the next-token probabilities).

Every function returns a matplotlib ``Figure`` with a title and labelled axes.
"""

from __future__ import annotations

import math
from typing import Callable, Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch
from matplotlib.ticker import FuncFormatter, LogLocator, MaxNLocator, NullFormatter

from attnlab.plots.common import _axes, _numpy

__all__ = [
    "activation_figure",
    "gradient_figure",
    "neuron_figure",
    "neuron_viewer",
    "norm_placement_diagram",
    "parameter_share_figure",
    "residual_update_figure",
    "superposition_figure",
]

_PART_COLOURS = {"attention": "#4C72B0", "feed-forward": "#DD8452", "embeddings": "#8C8C8C",
                 "norms": "#55A868"}
_PLACEMENT_COLOURS = {"post-norm": "#C44E52", "pre-norm": "#4C72B0"}


# --------------------------------------------------------------------------------------------
# Pictures of the idea
# --------------------------------------------------------------------------------------------


def _box(ax: Axes, x: float, y: float, text: str, colour: str, width: float = 2.2) -> None:
    ax.add_patch(FancyBboxPatch((x - width / 2, y - 0.3), width, 0.6, boxstyle="round,pad=0.05",
                                facecolor=colour, edgecolor="black", linewidth=1))
    ax.text(x, y, text, ha="center", va="center", fontsize=10)


def _plus(ax: Axes, x: float, y: float) -> None:
    ax.add_patch(plt.Circle((x, y), 0.22, facecolor="white", edgecolor="black", linewidth=1.2))
    ax.text(x, y, "+", ha="center", va="center", fontsize=13, fontweight="bold")


def _arrow(ax: Axes, start: tuple[float, float], end: tuple[float, float], colour: str = "black",
           style: str = "-|>", connection: str = "arc3") -> None:
    ax.add_patch(FancyArrowPatch(start, end, arrowstyle=style, mutation_scale=12, color=colour,
                                 linewidth=1.4, connectionstyle=connection))


def norm_placement_diagram() -> Figure:
    """One residual sublayer drawn twice: pre-norm, ``x + sublayer(norm(x))``, and post-norm,
    ``norm(x + sublayer(x))``. The skip path (the residual stream) is drawn in blue."""
    fig, axes = plt.subplots(1, 2, figsize=(9, 5), layout="constrained")
    stream = "#4C72B0"
    for ax, placement in zip(axes, ("pre", "post")):
        ax.set_xlim(-2.2, 2.8)
        ax.set_ylim(-0.6, 5.9)
        ax.axis("off")
        ax.text(0, -0.45, "x (from the layer below)", ha="center", fontsize=10)
        ax.text(0, 5.45, "output (to the layer above)", ha="center", fontsize=10)
        if placement == "pre":
            ax.set_title("Pre-norm: x + sublayer(norm(x))\n(GPT-2, LLaMA, Qwen2.5, the course model)", fontsize=11)
            # The branch sits to the right of the stream, so the skip path crosses nothing.
            _box(ax, 1.4, 1.6, "norm", "#CFE3C6")
            _box(ax, 1.4, 3.0, "sublayer\n(attention or FFN)", "#F6D5B8")
            _plus(ax, 0, 4.3)
            _arrow(ax, (0, -0.2), (0, 4.08), stream)              # the stream goes straight up
            _arrow(ax, (0, 0.7), (1.4, 1.3), connection="arc3,rad=-0.2")
            _arrow(ax, (1.4, 1.9), (1.4, 2.7))
            _arrow(ax, (1.4, 3.3), (0.2, 4.2), connection="arc3,rad=0.2")
            _arrow(ax, (0, 4.52), (0, 5.3), stream)
            ax.text(-0.3, 2.2, "skip path:\nx itself", ha="right", color=stream, fontsize=9)
        else:
            ax.set_title("Post-norm: norm(x + sublayer(x))\n(the 2017 transformer, BERT)", fontsize=11)
            _box(ax, 1.4, 1.9, "sublayer\n(attention or FFN)", "#F6D5B8")
            _plus(ax, 0, 3.4)
            _box(ax, 0, 4.5, "norm", "#CFE3C6")
            _arrow(ax, (0, -0.2), (0, 3.18), stream)
            _arrow(ax, (0, 0.7), (1.4, 1.6), connection="arc3,rad=-0.2")
            _arrow(ax, (1.4, 2.2), (0.2, 3.3), connection="arc3,rad=0.2")
            _arrow(ax, (0, 3.62), (0, 4.2), stream)
            _arrow(ax, (0, 4.8), (0, 5.3))
            ax.text(-0.3, 1.6, "skip path:\nx itself", ha="right", color=stream, fontsize=9)
            ax.text(1.25, 4.5, "every path,\nskip included,\ngoes through\nthe norm", fontsize=8, color="#555555",
                    ha="left", va="center")
    fig.suptitle("Where the normalization sits in a residual sublayer", fontsize=12)
    return fig


def activation_figure() -> Figure:
    """GELU, ReLU and SiLU on [-4, 4]: the non-linearities of the feed-forward block."""
    x = np.linspace(-4, 4, 401)
    phi = 0.5 * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))
    fig, ax = _axes(None, (5.5, 3.8))
    ax.plot(x, np.maximum(x, 0), label="ReLU: max(0, x) (2017 transformer)", color="#8C8C8C", linestyle="--")
    ax.plot(x, x * phi, label="GELU: x·Φ(x) (GPT-2, BERT)", color="#4C72B0")
    ax.plot(x, x / (1 + np.exp(-x)), label="SiLU: x·sigmoid(x) (SwiGLU's gate)", color="#DD8452")
    ax.axhline(0, color="black", linewidth=0.6)
    ax.set_title("The non-linearity between the two matrix products")
    ax.set_xlabel("pre-activation (input of the function)")
    ax.set_ylabel("activation (output)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    return fig


# --------------------------------------------------------------------------------------------
# Parameters
# --------------------------------------------------------------------------------------------


def parameter_share_figure(breakdowns: Mapping[str, Mapping[str, int]]) -> Figure:
    """One horizontal bar per configuration, split into its parts' shares of the parameters.

    breakdowns: configuration name -> part ("attention", "feed-forward", "embeddings", "norms")
    -> number of parameters. Each bar shows percentages; the feed-forward share is written on it.
    """
    names = list(breakdowns)
    fig, ax = _axes(None, (9, 0.7 * len(names) + 1.6))
    parts = [p for p in _PART_COLOURS if any(p in b for b in breakdowns.values())]
    largest = {part: max(100 * b.get(part, 0) / sum(b.values()) for b in breakdowns.values()) for part in parts}
    legend = {part: part if largest[part] >= 0.5 else f"{part} (under 0.5 %: too thin to see)" for part in parts}
    for row, name in enumerate(names):
        total = sum(breakdowns[name].values())
        left = 0.0
        for part in parts:
            share = 100 * breakdowns[name].get(part, 0) / total
            ax.barh(row, share, left=left, color=_PART_COLOURS[part], edgecolor="white",
                    label=legend[part] if row == 0 else None)
            if part == "feed-forward" and share > 0:
                # Written near the segment's left end, clear of the two-thirds line.
                ax.text(left + 1.5, row, f"{share:.0f} %", ha="left", va="center", fontsize=9,
                        color="black", fontweight="bold")
            left += share
    ax.axvline(200 / 3, color="black", linestyle=":", linewidth=1.2, label="two thirds")
    ax.set_yticks(range(len(names)), names, fontsize=9)
    ax.set_xlim(0, 100)
    ax.set_ylim(len(names) - 0.5, -0.5)
    ax.set_xlabel("share of the parameters (%)")
    ax.set_ylabel("configuration")
    ax.set_title("Where the parameters are")
    ax.legend(fontsize=8, ncols=len(parts) + 1, loc="upper center", bbox_to_anchor=(0.5, -0.14), frameon=False)
    return fig


# --------------------------------------------------------------------------------------------
# Pre-norm against post-norm
# --------------------------------------------------------------------------------------------


def gradient_figure(layers: Sequence[int], per_layer: Mapping[str, Sequence[Sequence[float]]],
                    depths: Sequence[int], last_layer: Mapping[str, Sequence[Sequence[float]]]) -> Figure:
    """Gradient norms at initialization, one colour per placement ("post-norm", "pre-norm").

    per_layer: placement -> (seeds, len(layers)) gradient norms of each layer of one depth of model,
       drawn one thin line per seed and a thick line for their mean (panel a);
    last_layer: placement -> (seeds, len(depths)) gradient norms of the last layer of models of
       each depth in ``depths``, drawn as the mean with a band from the smallest to the largest
       seed, against depth on a log axis (panel b).
    """
    fig, (left, right) = plt.subplots(1, 2, figsize=(9.4, 4.0), layout="constrained")
    x = _numpy(layers)
    for label, runs in per_layer.items():
        runs, colour = _numpy(runs), _PLACEMENT_COLOURS.get(label)
        for run in runs:
            left.plot(x, run, color=colour, alpha=0.35, linewidth=0.8)
        left.plot(x, runs.mean(axis=0), color=colour, linewidth=2.2, marker="o", ms=3.5,
                  label=f"{label}: mean of {len(runs)} seeds\n(thin lines: each seed)")
    left.set_title(f"(a) Layer by layer, {len(x)} layers")
    left.set_xlabel("layer (1 = next to the input)")
    left.set_ylabel("‖∂loss/∂(feed-forward weights)‖")
    left.set_xticks(x)
    d = _numpy(depths)
    for label, runs in last_layer.items():
        runs, colour = _numpy(runs), _PLACEMENT_COLOURS.get(label)
        right.plot(d, runs.mean(axis=0), color=colour, linewidth=2.2, marker="o", ms=4,
                   label=f"{label}: mean of {len(runs)} seeds")
        right.fill_between(d, runs.min(axis=0), runs.max(axis=0), color=colour, alpha=0.2, linewidth=0)
    right.set_xscale("log")
    right.set_xticks(list(d), labels=[str(int(v)) for v in d])
    right.minorticks_off()
    right.set_ylim(0, None)
    right.set_title("(b) The last layer, against depth")
    right.set_xlabel("number of layers (log scale)")
    right.set_ylabel("‖∂loss/∂(last layer's feed-forward weights)‖")
    for ax in (left, right):
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle("Gradients at initialization: post-norm against pre-norm (band: smallest to largest seed)")
    return fig


# --------------------------------------------------------------------------------------------
# Superposition
# --------------------------------------------------------------------------------------------


def superposition_figure(directions: Mapping[str, Sequence[Sequence[float]]], *, stored: float = 0.5) -> Figure:
    """Where a toy model puts each feature in its hidden space of two numbers, one panel per setting.

    directions: setting name -> (2, n_features) matrix W whose column i is feature i's direction
       (h = W x); a feature whose direction is shorter than ``stored`` is drawn faint and counted
       as dropped in the panel's title.
    """
    fig, axes = plt.subplots(1, len(directions), figsize=(4.3 * len(directions), 4.4), layout="constrained",
                             squeeze=False)
    colours = plt.get_cmap("tab10").colors
    for ax, (name, w) in zip(axes[0], directions.items()):
        w = _numpy(w)
        lengths = np.linalg.norm(w, axis=0)
        ax.add_patch(plt.Circle((0, 0), 1.0, fill=False, linestyle=":", color="#888888"))
        for i, (length, colour) in enumerate(zip(lengths, colours)):
            kept = length >= stored
            ax.add_patch(FancyArrowPatch((0, 0), tuple(w[:, i]), arrowstyle="-|>", mutation_scale=12,
                                         color=colour, alpha=1.0 if kept else 0.35, linewidth=1.8))
            if kept:
                ax.text(*(w[:, i] * (1 + 0.22 / max(length, 1e-9))), f"feature {i}", ha="center",
                        va="center", fontsize=9, color=colour)
        ax.set_xlim(-1.6, 1.6)
        ax.set_ylim(-1.6, 1.6)
        ax.set_aspect("equal")
        ax.set_title(f"{name}\n{int((lengths >= stored).sum())} of {len(lengths)} features stored", fontsize=10)
        ax.set_xlabel("hidden number 1")
        ax.set_ylabel("hidden number 2")
        ax.grid(True, alpha=0.3)
    fig.suptitle(f"{w.shape[1]} features squeezed into {w.shape[0]} numbers (dotted: length 1)")
    return fig


# --------------------------------------------------------------------------------------------
# The course model
# --------------------------------------------------------------------------------------------


def residual_update_figure(stream: Sequence[float], attention: Sequence[float], ffn: Sequence[float],
                           stream_after_attention: Sequence[float], final_stream: float | None = None) -> Figure:
    """How much each sublayer adds to the residual stream, layer by layer.

    stream: mean norm of the stream entering each layer; attention, ffn: mean norm of what the
    layer's attention and feed-forward sublayers add; stream_after_attention: mean norm of the stream
    the feed-forward update joins; final_stream: mean norm of the stream leaving the last layer
    (drawn one step to the right of the last layer, if given). Left: the norms; right: each update as
    a fraction of the stream it is added to.
    """
    s, a, f, m = (_numpy(v) for v in (stream, attention, ffn, stream_after_attention))
    layers = np.arange(len(s))
    fig, (left, right) = plt.subplots(1, 2, figsize=(9.4, 3.8), layout="constrained")
    if final_stream is None:
        left.plot(layers, s, marker="o", color="black", label="the stream entering the layer")
    else:
        left.plot(np.arange(len(s) + 1), np.append(s, final_stream), marker="o", color="black",
                  label="the stream entering the layer\n(last point: leaving the last layer)")
    left.plot(layers, a, marker="s", color=_PART_COLOURS["attention"], label="attention's update")
    left.plot(layers, f, marker="^", color=_PART_COLOURS["feed-forward"], label="feed-forward's update")
    left.set_title("(a) Sizes along the residual stream")
    left.set_ylabel("mean vector norm (no unit)")
    width = 0.38
    right.bar(layers - width / 2, a / s, width, color=_PART_COLOURS["attention"], label="attention")
    right.bar(layers + width / 2, f / m, width, color=_PART_COLOURS["feed-forward"], label="feed-forward")
    right.axhline(1, color="black", linestyle=":", linewidth=1)
    right.text(len(s) - 0.5, 1.05, "update as long as the stream", ha="right", va="bottom", fontsize=8)
    right.set_yscale("log")
    right.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    right.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    right.yaxis.set_minor_formatter(NullFormatter())
    right.set_title("(b) Each update relative to the stream it joins")
    right.set_ylabel("‖update‖ / ‖stream‖ (log scale)")
    for ax in (left, right):
        ax.set_xlabel("layer (0 = first)")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    right.set_xticks(layers)
    if final_stream is None:
        left.set_xticks(layers)
    else:
        left.set_xticks(np.arange(len(s) + 1), [str(i) for i in layers] + ["out"])
    return fig


def neuron_figure(contexts: Sequence[tuple[str, str, float]], promoted: Sequence[tuple[str, float]],
                  probabilities: Mapping[str, Sequence[float]], tokens: Sequence[str], *, title: str,
                  prompt: str, scale: float) -> Figure:
    """One feed-forward neuron of the course model in three panels.

    contexts: its top-activating contexts, (text before, the token where it fires, activation).
    promoted: (token, score) pairs, the tokens its value vector pushes up most (value · embedding).
    probabilities: "unchanged" and "scaled" -> next-token probabilities of ``tokens`` after ``prompt``,
       without intervention and with the neuron's activation multiplied by ``scale``.
    """
    fig = plt.figure(figsize=(10.6, 4.6), layout="constrained")
    grid = fig.add_gridspec(1, 3, width_ratios=[1.5, 0.8, 1.1])
    text_ax, value_ax, prob_ax = (fig.add_subplot(grid[0, i]) for i in range(3))

    text_ax.axis("off")
    text_ax.set_title("(a) Contexts where its key fires most", fontsize=10)
    for row, (before, token, activation) in enumerate(contexts):
        y = 1 - (row + 0.5) / max(len(contexts), 1)
        text_ax.text(0.0, y, f"{activation:5.2f}", fontsize=8.5, family="monospace", va="center",
                     transform=text_ax.transAxes, color="#555555")
        text_ax.text(0.14, y, f"… {before} [{token}]", fontsize=8.5, family="monospace", va="center",
                     transform=text_ax.transAxes)

    words, scores = [w for w, _ in promoted], [s for _, s in promoted]
    value_ax.barh(range(len(words)), scores, color=_PART_COLOURS["feed-forward"])
    value_ax.set_yticks(range(len(words)), words, fontsize=9)
    value_ax.invert_yaxis()
    value_ax.set_title("(b) Tokens its value vector promotes", fontsize=10)
    value_ax.set_ylabel("token")
    value_ax.set_xlabel("value · output embedding (logit change\nper unit of activation)")
    value_ax.grid(True, axis="x", alpha=0.3)

    positions = np.arange(len(tokens))
    width = 0.4
    largest = 0.0
    for offset, (label, values) in zip((-width / 2, width / 2), probabilities.items()):
        values = _numpy(values)
        largest = max(largest, float(values.max(initial=0.0)))
        prob_ax.barh(positions + offset, values, width, label=label,
                     color=("#BBBBBB", _PART_COLOURS["feed-forward"])[offset > 0])
    prob_ax.set_yticks(positions, tokens, fontsize=9)
    prob_ax.invert_yaxis()
    # Zoomed to the bars (probabilities of single words are small), in steps of 0.1, at most 1.
    prob_ax.set_xlim(0, min(1.0, max(0.1, math.ceil(10 * largest * 1.15) / 10)))
    prob_ax.xaxis.set_major_locator(MaxNLocator(5))
    prob_ax.set_xlabel("next-token probability")
    prob_ax.set_ylabel("next token")
    prob_ax.set_title(f"(c) After “… {prompt}”, activation × {scale:g}", fontsize=10)
    prob_ax.legend(fontsize=8, loc="lower right")
    prob_ax.grid(True, axis="x", alpha=0.3)
    fig.suptitle(title, fontsize=12)
    return fig


def neuron_viewer(neurons: Mapping[str, Mapping], probabilities: Callable[[str, float], Mapping[str, Sequence[float]]]
                  ) -> Callable[..., Figure]:
    """The drawing function of the interactive neuron viewer: ``draw(neuron, scale) -> Figure``.

    neurons: label -> {"contexts", "promoted", "prompt", "tokens"} (as ``neuron_figure`` takes them),
       computed once; probabilities(label, scale): the next-token probabilities of that neuron's
       ``tokens`` after its ``prompt``, {"unchanged": [...], "scaled": [...]}, computed by the model
       with the neuron's activation multiplied by ``scale``.
    """
    def draw(neuron: str, scale: float) -> Figure:
        info = neurons[neuron]
        return neuron_figure(info["contexts"], info["promoted"], probabilities(neuron, scale), info["tokens"],
                             title=f"Feed-forward neuron {neuron}", prompt=info["prompt"], scale=scale)

    return draw
