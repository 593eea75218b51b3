"""Figures of lesson 08, the quadratic cost.

- ``score_grids``: every query meets every key, drawn for a few lengths;
- ``loglog_slope`` and ``scaling_figure``: measurements against n on log-log axes, each with the
  slope of its fitted straight line;
- ``training_cost_figure``: training FLOPs per token against 6N, and the activations a layer keeps
  for the backward pass;
- ``crossover_measurement``: measured time of attention over that of the feed-forward block,
  against n, with the predicted crossover;
- ``patch_grid``: an image cut into numbered patches, in ``patchify``'s order;
- ``same_output_figure``: two attention patterns that give the same output;
- ``planted_key_figure``: the weight of one relevant key as the input grows;
- ``vit_data_figure``: the cited ViT accuracies against the size of the pre-training data;
- ``context_cost``: the drawing function of the lesson's interactive figure (FLOPs and memory of
  a model against its context length).
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import LogLocator

from attnlab.plots.common import _numpy

__all__ = [
    "context_cost",
    "crossover_measurement",
    "loglog_slope",
    "patch_grid",
    "planted_key_figure",
    "same_output_figure",
    "scaling_figure",
    "score_grids",
    "training_cost_figure",
    "vit_data_figure",
]

# The notebook's width in JupyterLab is about 9.6 inches at the inline backend's 100 dpi: wider
# figures are shrunk, and their text with them.
_FULL_WIDTH = 9.4

def score_grids(lengths: Sequence[int] = (4, 8, 16)) -> Figure:
    """One n x n grid of scores per length: a row per query, a column per key, every cell filled."""
    fig, axes = plt.subplots(1, len(lengths), figsize=(3.2 * len(lengths), 3.4), layout="constrained")
    for ax, n in zip(np.atleast_1d(axes), lengths):
        ax.imshow(np.ones((n, n)), cmap="Blues", vmin=0, vmax=1.6)
        for edge in np.arange(0.5, n - 1):
            ax.axhline(edge, color="white", linewidth=1.5 if n < 12 else 0.8)
            ax.axvline(edge, color="white", linewidth=1.5 if n < 12 else 0.8)
        ax.set_xticks([])
        ax.set_yticks([])
        ax.set_title(f"n = {n} tokens: {n * n} scores")
        ax.set_xlabel("key (n columns)")
        ax.set_ylabel("query (n rows)")
    fig.suptitle("Every query scores every key: doubling n quadruples the scores, per head and layer")
    return fig


def loglog_slope(x: Sequence[float], y: Sequence[float]) -> float:
    """Slope of the least-squares line through (log x, log y): the p of y ∝ x^p."""
    x, y = _numpy(x), _numpy(y)
    if x.shape != y.shape or x.size < 2 or (x <= 0).any() or (y <= 0).any():
        raise ValueError(f"need at least two positive (x, y) pairs of the same length, got "
                         f"{x.shape} and {y.shape}")
    return float(np.polyfit(np.log(x), np.log(y), 1)[0])


def scaling_figure(ns: Sequence[int], panels: Mapping[str, Mapping[str, Sequence[float]]], *,
                   ylabels: Mapping[str, str], title: str,
                   guides: Sequence[float] = (1.0, 2.0)) -> Figure:
    """One log-log panel per entry of ``panels`` (panel title -> {label -> values at ``ns``}).

    Each series is drawn with its fitted slope in the legend, in the same colour in every panel;
    dotted guide lines of the slopes in ``guides`` (n and n², through the first point of the first
    series) help read them. ylabels: panel title -> y-axis label (with units). Returns the figure.
    """
    fig, axes = plt.subplots(1, len(panels), figsize=(min(5.6 * len(panels), _FULL_WIDTH), 4.4),
                             layout="constrained", squeeze=False)
    x = _numpy(ns)
    palette = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    colors: dict[str, str] = {}  # label -> colour, so a series keeps its colour across panels
    for ax, (panel, series) in zip(axes[0], panels.items()):
        for label, values in series.items():
            y = _numpy(values)
            keep = np.isfinite(y) & (y > 0)
            color = colors.setdefault(label, palette[len(colors) % len(palette)])
            ax.plot(x[keep], y[keep], marker="o", ms=4, color=color,
                    label=f"{label} (slope {loglog_slope(x[keep], y[keep]):.2f})")
        first = _numpy(next(iter(series.values())))[0]
        for power, style in zip(guides, (":", "--")):
            shown = {1.0: "n", 2.0: "n²"}.get(float(power), f"n^{power:g}")
            ax.plot(x, first * (x / x[0]) ** power, style, color="0.55", linewidth=1,
                    label=f"guide: slope {power:g} (∝ {shown})")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(list(ns), labels=[str(int(n)) for n in ns])
        ax.minorticks_off()
        ax.set_title(panel)
        ax.set_xlabel("sequence length n (tokens, log scale)")
        ax.set_ylabel(ylabels[panel])
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(fontsize=7.5)
    fig.suptitle(title)
    return fig


def _powers_of_two_ticks(ax, low: float, high: float) -> None:
    """y ticks at the powers of two from below ``low`` to above ``high``, labelled plainly, so a
    log axis over a decade or two keeps several labelled ticks."""
    powers = np.arange(np.floor(np.log2(low)), np.ceil(np.log2(high)) + 1)
    ax.set_yticks(2.0 ** powers, labels=[f"{2.0 ** k:g}" for k in powers])
    ax.set_ylim(2.0 ** powers[0], 2.0 ** powers[-1])


def training_cost_figure(ns: Sequence[int], per_token_over_n: Sequence[float],
                         predicted_over_n: Sequence[float] | None, activation_ns: Sequence[int],
                         saved_bytes: Mapping[str, Sequence[float]], *, title: str) -> Figure:
    """Left: training FLOPs per token divided by N (counted), the prediction 6 + attention's term
    (left out when None), and the line at 6, against the length n. Right: bytes one layer keeps
    for the backward pass, per kind of attention, against n (log-log, with each series' slope)."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(_FULL_WIDTH, 4.0), layout="constrained")
    x = _numpy(ns)
    left.plot(x, _numpy(per_token_over_n), "o", ms=6, label="counted (FlopCounterMode)")
    if predicted_over_n is not None:
        left.plot(x, _numpy(predicted_over_n), "-", color="0.35", label="6 + attention's term")
    left.axhline(6, color="tab:green", linestyle=":", label="6N per token")
    left.set_xscale("log", base=2)
    left.set_xticks(list(ns), labels=[str(int(n)) for n in ns])
    left.minorticks_off()
    left.set_ylim(0, None)
    left.set_title("Training FLOPs per token, divided by N")
    left.set_xlabel("sequence length n (tokens, log scale)")
    left.set_ylabel("FLOPs per token / N")
    left.legend(fontsize=8, loc="lower right")
    left.grid(True, alpha=0.3)
    a = _numpy(activation_ns)
    for label, values in saved_bytes.items():
        y = _numpy(values) / 2**20
        right.plot(a, y, "o-", ms=4, label=f"{label} (slope {loglog_slope(a, y):.2f})")
    right.set_xscale("log", base=2)
    right.set_yscale("log")
    right.set_xticks(list(activation_ns), labels=[str(int(n)) for n in activation_ns])
    everything = np.concatenate([_numpy(values) for values in saved_bytes.values()]) / 2**20
    _powers_of_two_ticks(right, everything.min(), everything.max())
    right.minorticks_off()
    right.set_title("Activations one layer keeps for backward")
    right.set_xlabel("sequence length n (tokens, log scale)")
    right.set_ylabel("MiB kept (log scale)")
    right.legend(fontsize=8, loc="upper left")
    right.grid(True, which="major", alpha=0.3)
    fig.suptitle(title)
    return fig


def crossover_measurement(lengths: Sequence[int], ratios: Mapping[str, Sequence[Sequence[float]]],
                          predicted: int, *, title: str) -> Figure:
    """Measured time of attention divided by that of the feed-forward block against n (log-log):
    ``ratios`` maps an attention to one list of ratios at ``lengths`` per seed. Above 1, attention
    takes longer. The predicted crossover (from FLOPs) is the vertical line."""
    fig, ax = plt.subplots(figsize=(6.8, 4.2), layout="constrained")
    palette = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    x = _numpy(lengths)
    for colour, (label, runs) in zip(palette, ratios.items()):
        for index, run in enumerate(runs):
            ax.plot(x, _numpy(run), "o-", ms=4, color=colour, alpha=0.75, linewidth=1,
                    label=f"{label} ({len(runs)} seed{'s' if len(runs) != 1 else ''})" if index == 0 else None)
    ax.axhline(1.0, color="0.3", linewidth=1, label="equal time")
    ax.axvline(predicted, color="tab:red", linestyle="--", linewidth=1.2,
               label=f"predicted from FLOPs: n = {predicted:,}")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.set_xticks(list(lengths), labels=[str(int(n)) for n in lengths])
    values = np.concatenate([_numpy(run) for runs in ratios.values() for run in runs])
    low, high = np.floor(np.log2(values.min())), np.ceil(np.log2(values.max()))
    powers = np.arange(min(low, -1), max(high, 1) + 1)
    ax.set_yticks(2.0 ** powers, labels=[f"{2.0 ** k:g}" for k in powers])
    ax.minorticks_off()
    ax.set_title(title)
    ax.set_xlabel("sequence length n (tokens, log scale)")
    ax.set_ylabel("attention's time / feed-forward's time (log scale)")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    return fig


def patch_grid(image: Any, patch_size: int, *, title: str = "An image as a sequence of patches") -> Figure:
    """The image (C, H, W), values in [0, 1], with the patch grid drawn over it and every patch
    numbered in ``patchify``'s order (reading order: along the rows, then down)."""
    picture = _numpy(image)
    if picture.ndim != 3 or picture.shape[0] not in (1, 3):
        raise ValueError(f"image must be (C, H, W) with 1 or 3 channels, got shape {picture.shape}")
    channels, height, width = picture.shape
    rows, cols = (size // patch_size for size in (height, width))
    fig, ax = plt.subplots(figsize=(5, 5 * height / width + 0.4), layout="constrained")
    shown = picture[0] if channels == 1 else np.moveaxis(picture, 0, -1)
    ax.imshow(np.clip(shown, 0, 1), cmap="gray" if channels == 1 else None, extent=(0, width, height, 0))
    for r in range(rows + 1):
        ax.axhline(r * patch_size, color="white", linewidth=1.5)
    for c in range(cols + 1):
        ax.axvline(c * patch_size, color="white", linewidth=1.5)
    for index in range(rows * cols):
        r, c = divmod(index, cols)
        ax.text((c + 0.5) * patch_size, (r + 0.5) * patch_size, str(index), ha="center", va="center",
                fontsize=9, color="black", bbox={"fc": "white", "alpha": 0.7, "pad": 1, "lw": 0})
    ax.set_title(f"{title}\n{rows} x {cols} = {rows * cols} tokens of {channels}·{patch_size}·{patch_size} = "
                 f"{channels * patch_size * patch_size} numbers each")
    ax.set_xlabel("x (pixels)")
    ax.set_ylabel("y (pixels)")
    return fig


def same_output_figure(tokens: Sequence[str], patterns: Mapping[str, Any], outputs: Mapping[str, Any],
                       features: Sequence[str]) -> Figure:
    """Left: the attention weights of each pattern (grouped bars over the tokens); right: the output
    each gives (one group of bars per output feature)."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(_FULL_WIDTH, 3.8), layout="constrained",
                                      gridspec_kw={"width_ratios": [3, 2]})
    width = 0.8 / len(patterns)
    for i, (label, weights) in enumerate(patterns.items()):
        w = _numpy(weights)
        left.bar(np.arange(len(tokens)) + (i - (len(patterns) - 1) / 2) * width, w, width, label=label)
        out = _numpy(outputs[label])
        right.bar(np.arange(len(features)) + (i - (len(patterns) - 1) / 2) * width, out, width, label=label)
    left.set_xticks(range(len(tokens)), labels=list(tokens))
    left.set_title("Two attention patterns over the same tokens")
    left.set_xlabel("key token")
    left.set_ylabel("attention weight")
    left.legend(fontsize=8)
    right.set_xticks(range(len(features)), labels=list(features))
    right.set_title("... and the outputs they give")
    right.set_xlabel("output feature")
    right.set_ylabel("value")
    right.legend(fontsize=8)
    fig.suptitle("Different weights, identical output: the weights alone do not say what mattered")
    return fig


def planted_key_figure(ns: Sequence[int], measured: Sequence[Sequence[float]], predicted: Sequence[float],
                       *, margin: float) -> Figure:
    """The weight one relevant key gets among n - 1 random ones against n: ``measured``, one list per
    seed (one draw per n each), and ``predicted``."""
    fig, ax = plt.subplots(figsize=(6.2, 4), layout="constrained")
    for index, run in enumerate(measured):
        ax.plot(ns, run, "o-", ms=3.5, linewidth=1, alpha=0.7, color="tab:blue",
                label=f"measured ({len(measured)} seeds, one draw per n each)" if index == 0 else None)
    ax.plot(ns, predicted, "--", color="0.4", label=f"e^{margin:g} / (e^{margin:g} + (n − 1)·e^0.5)")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_title(f"The relevant key's weight at a fixed score margin of {margin:g}")
    ax.set_xlabel("number of keys n (log scale)")
    ax.set_ylabel("attention weight of the relevant key (log scale)")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=8)
    return fig


def vit_data_figure(accuracy: Mapping[str, Mapping[str, float]], *, source: str) -> Figure:
    """Grouped bars: pre-training data set (with its size) -> model -> ImageNet top-1 accuracy (%)."""
    datasets = list(accuracy)
    models = list(next(iter(accuracy.values())))
    fig, ax = plt.subplots(figsize=(7, 4), layout="constrained")
    width = 0.8 / len(models)
    for i, model in enumerate(models):
        values = [accuracy[data][model] for data in datasets]
        bars = ax.bar(np.arange(len(datasets)) + (i - (len(models) - 1) / 2) * width, values, width,
                      label=model)
        ax.bar_label(bars, fmt="%.2f", fontsize=8)
    ax.set_xticks(range(len(datasets)), labels=datasets)
    ax.set_ylim(70, 90)
    ax.set_title("Bigger vision transformers need more data")
    ax.set_xlabel(f"pre-training data set (fine-tuned and tested on ImageNet; {source})")
    ax.set_ylabel("ImageNet top-1 accuracy (%)")
    ax.legend(fontsize=8, loc="upper left")
    return fig


# --------------------------------------------------------------------------------------------
# The interactive figure: what a context length costs a model
# --------------------------------------------------------------------------------------------


_CONTEXT_TICKS = [2**5, 2**8, 2**11, 2**14, 2**17, 2**20]


def _short(n: int) -> str:
    """A power of two as a tick label: 32, 256, 2k, 16k, 128k, 1M."""
    for suffix, size in (("M", 2**20), ("k", 2**10)):
        if n >= size:
            return f"{n // size}{suffix}"
    return str(n)


def _human_bytes(n: float) -> str:
    """Bytes in decimal units, as the lesson writes them (1 GB = 10⁹ bytes)."""
    for unit, size in (("PB", 1e15), ("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n:.0f} B"


def context_cost(model: str, log2_n: int, *, cost, models: Mapping[str, Any],
                 kv_cache_bytes: Callable | None = None,
                 measured: Mapping[str, Sequence[float]] | None = None) -> Figure:
    """What a context of 2**log2_n tokens costs ``models[model]`` (a ``cost.ModelShape``).

    Left: FLOPs of one layer against n, split into attention's products and the rest
    (projections and feed-forward block), from ``cost.layer_flops``; the crossover where they are
    equal is marked. Right: memory against n: one layer's score matrices (all heads, bfloat16, from
    ``cost.attention_memory_bytes``), the same layer with FlashAttention, the whole model's KV
    cache (decoders; ``kv_cache_bytes`` of lesson 04, in bfloat16), and ``measured`` points:
    {"n": [...], "bytes": [...]}, the peak memory of naive attention on one float32 head measured
    in the lesson, next to its formula. Returns the figure.
    """
    shape = models[model]
    n_now = 2 ** int(log2_n)
    ns = np.unique(np.round(np.logspace(5, 21, 65, base=2)).astype(int))
    parts = [cost.layer_flops(int(n), shape.d_model, shape.d_ff, shape.n_heads, shape.n_kv_heads,
                              ffn=shape.ffn, causal=shape.causal) for n in ns]
    attention = np.array([p["attention"] for p in parts], dtype=float)
    rest = np.array([p["projections"] + p["feedforward"] for p in parts], dtype=float)
    now = cost.layer_flops(n_now, shape.d_model, shape.d_ff, shape.n_heads, shape.n_kv_heads,
                           ffn=shape.ffn, causal=shape.causal)
    share = now["attention"] / now["total"]

    fig, (left, right) = plt.subplots(1, 2, figsize=(10.4, 5.0), layout="constrained")
    left.plot(ns, attention, color="tab:red", label="attention: q kᵀ and weights · v")
    left.plot(ns, rest, color="tab:blue", label="projections + feed-forward block")
    left.plot(ns, attention + rest, "--", color="0.3", label="the whole layer")
    crossing = cost.crossover_length(shape, causal=shape.causal)
    if crossing <= ns[-1]:
        at_crossing = cost.layer_flops(crossing, shape.d_model, shape.d_ff, shape.n_heads, shape.n_kv_heads,
                                       ffn=shape.ffn, causal=shape.causal)["attention"]
        left.plot(crossing, at_crossing, "ko", ms=5)
        left.annotate(f"equal at n = {crossing:,}", (crossing, at_crossing),
                      textcoords="offset points", xytext=(-10, 12), ha="right", fontsize=8.5)
    left.set_title(f"{model}: FLOPs of one layer (attention {share:.0%} at n = {n_now:,})")
    left.set_ylabel("FLOPs per layer, one sequence (log scale)")

    score = np.array([cost.attention_memory_bytes(int(n), shape.n_heads, 2) for n in ns], dtype=float)
    flash = np.array([cost.attention_memory_bytes(int(n), shape.n_heads, 2, materialized=False)
                      for n in ns], dtype=float)
    right.plot(ns, score, color="tab:red", label="one layer's scores, all heads (bf16)")
    right.plot(ns, flash, color="tab:green", label="the same with FlashAttention (lesson 09)")
    memory_now = cost.attention_memory_bytes(n_now, shape.n_heads, 2)
    note = f"scores {_human_bytes(memory_now)}"
    if shape.causal and kv_cache_bytes is not None:
        try:
            cache = np.array([kv_cache_bytes(shape.n_layers, shape.n_kv_heads, shape.head_size, int(n), 2)
                              for n in ns], dtype=float)
        except NotImplementedError:
            note += "; KV cache: write lesson 04's kv_cache_bytes to see it"
        else:
            right.plot(ns, cache, color="tab:purple",
                       label=f"KV cache, all {shape.n_layers} layers (bf16)")
            cache_now = kv_cache_bytes(shape.n_layers, shape.n_kv_heads, shape.head_size, n_now, 2)
            note += f", KV cache {_human_bytes(cache_now)}"
    if measured:
        right.plot(measured["n"], measured["bytes"], "ks", ms=4,
                   label="measured here: naive attention, 1 head, float32")
        right.plot(ns, [cost.attention_memory_bytes(int(n), 1, 4) for n in ns], ":", color="0.4",
                   label="formula: 1 head's scores, float32")
    right.set_title(f"{model}: memory at n = {n_now:,}:\n{note}", fontsize=9)
    right.set_ylabel("bytes (log scale)")

    for ax in (left, right):
        ax.axvline(n_now, color="0.5", linewidth=1, label=f"chosen length ({n_now:,} tokens)")
        if shape.context:
            ax.axvline(shape.context, color="tab:orange", linestyle=":", linewidth=1.5,
                       label=f"context window ({shape.context:,} tokens)")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        # few, plain tick labels: laying out many mathtext labels is most of a redraw's time
        ax.set_xticks(_CONTEXT_TICKS, labels=[_short(n) for n in _CONTEXT_TICKS])
        ax.yaxis.set_major_locator(LogLocator(base=10, numticks=6))
        ax.minorticks_off()
        ax.set_xlabel("context length n (tokens, log scale)")
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(fontsize=7.5, loc="upper left")
    causal_note = " (causal: allowed pairs only)" if shape.causal else ""
    fig.suptitle(f"What {n_now:,} tokens cost {model}{causal_note}")
    return fig
