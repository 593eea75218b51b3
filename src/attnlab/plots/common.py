"""Plots of the course: attention heatmaps, line plots over a scale, the query/key/value picture.

Every function draws with matplotlib only, puts a title and axis labels (with units where there are
any) on what it draws, and returns the ``Figure``, so a notebook can show it, save it or test it.
Functions that take ``ax=`` draw into an existing axes (and return its figure).
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import FancyBboxPatch

__all__ = ["attention_heatmap", "line_plot", "qkv_diagram", "sqrt_dk_figure"]


def _numpy(values: Any) -> np.ndarray:
    """A float numpy array from a tensor (detached, on the CPU), an array or nested lists."""
    if hasattr(values, "detach"):
        values = values.detach().cpu().double().numpy()
    return np.asarray(values, dtype=float)


def _axes(ax: Axes | None, figsize: tuple[float, float]) -> tuple[Figure, Axes]:
    if ax is None:
        fig, ax = plt.subplots(figsize=figsize, layout="constrained")
        return fig, ax
    return ax.figure, ax


# --------------------------------------------------------------------------------------------
# Heatmaps
# --------------------------------------------------------------------------------------------


def attention_heatmap(weights: Any, query_labels: Sequence[str], key_labels: Sequence[str], *,
                      title: str = "Attention weights", ax: Axes | None = None,
                      annotate: bool = True, fmt: str = "{:.2f}", cmap: str = "Blues") -> Figure:
    """Heatmap of one attention matrix: a row per query, a column per key.

    weights: (n_q, n_k), each row a probability distribution over the keys (tensor or array).
    query_labels: n_q names (rows); key_labels: n_k names (columns).
    annotate: write each weight in its cell (``fmt``), in a colour that stays readable.
    The colour scale runs from 0 to 1 so heatmaps are comparable; the colorbar is labelled
    "attention weight". Returns the figure.
    """
    w = _numpy(weights)
    if w.ndim != 2:
        raise ValueError(f"weights must be one (n_q, n_k) matrix, got shape {w.shape}; "
                         "pick one batch element and head first, e.g. weights[0]")
    n_q, n_k = w.shape
    if len(query_labels) != n_q or len(key_labels) != n_k:
        raise ValueError(f"weights has shape {w.shape}, but there are {len(query_labels)} query "
                         f"labels and {len(key_labels)} key labels")
    fig, ax = _axes(ax, (1.2 + 0.75 * n_k, 1.0 + 0.6 * n_q))
    image = ax.imshow(w, cmap=cmap, vmin=0.0, vmax=1.0, aspect="auto")
    colorbar = fig.colorbar(image, ax=ax)
    colorbar.set_label("attention weight")
    ax.set_xticks(range(n_k), labels=list(key_labels), rotation=30, ha="right")
    ax.set_yticks(range(n_q), labels=list(query_labels))
    ax.set_xlabel("key (attended to)")
    ax.set_ylabel("query (attending)")
    ax.set_title(title)
    if annotate:
        for i in range(n_q):
            for j in range(n_k):
                ax.text(j, i, fmt.format(w[i, j]), ha="center", va="center", fontsize=9,
                        color="white" if w[i, j] > 0.55 else "black")
    return fig


# --------------------------------------------------------------------------------------------
# Line plots over a scale (d_k, sequence length, ...)
# --------------------------------------------------------------------------------------------


def line_plot(x: Sequence[float], series: Mapping[str, Any], *, title: str, xlabel: str,
              ylabel: str, ax: Axes | None = None, xscale: str = "linear",
              yscale: str = "linear", markers: bool = True) -> Figure:
    """One line per entry of ``series`` (label -> values) against ``x``.

    values: shape (len(x),) for one run, or (runs, len(x)) for several seeded runs; then the line
    is the mean over runs and a shaded band spans the smallest to the largest run.
    Returns the figure.
    """
    fig, ax = _axes(ax, (5.5, 3.8))
    x = _numpy(x)
    for label, values in series.items():
        y = _numpy(values)
        if y.ndim == 2:
            line, = ax.plot(x, y.mean(axis=0), marker="o" if markers else None, ms=4,
                            label=f"{label} (mean of {y.shape[0]} runs)")
            ax.fill_between(x, y.min(axis=0), y.max(axis=0), color=line.get_color(), alpha=0.2,
                            linewidth=0)
        elif y.ndim == 1:
            ax.plot(x, y, marker="o" if markers else None, ms=4, label=label)
        else:
            raise ValueError(f"series {label!r} must be 1-D or (runs, len(x)), got {y.shape}")
    ax.set_xscale(xscale)
    ax.set_yscale(yscale)
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=8)
    return fig


def sqrt_dk_figure(d_k: Sequence[int], largest_weight: Mapping[str, Any],
                   gradient_norm: Mapping[str, Any], *, n_keys: int | None = None,
                   statistic: str = "median query") -> Figure:
    """The two panels of "why divide by sqrt(d_k)", against d_k on a log axis.

    largest_weight: label ("scaled by 1/sqrt(d_k)", "unscaled") -> (runs, len(d_k)) values of the
       largest softmax weight of a query (1 means one-hot: the softmax has saturated).
    gradient_norm: label -> (runs, len(d_k)) norms of d(output)/d(scores) through the softmax,
       drawn on a log axis.
    n_keys: number of keys, shown in the titles.
    statistic: how one run summarises its queries, shown in the y labels. Returns the figure.
    """
    fig, (left, right) = plt.subplots(1, 2, figsize=(9.4, 4), layout="constrained")  # fits the notebook
    keys = f" ({n_keys} keys)" if n_keys else ""
    xlabel = "d_k, size of queries and keys (log scale)"
    line_plot(d_k, largest_weight, ax=left, xscale="log",
              title=f"(a) Softmax saturation{keys}",
              xlabel=xlabel, ylabel=f"largest weight, {statistic} (1 = one-hot)")
    left.set_ylim(0, 1.05)
    line_plot(d_k, gradient_norm, ax=right, xscale="log", yscale="log",
              title=f"(b) Gradient through the softmax{keys}",
              xlabel=xlabel, ylabel=f"‖∂ output / ∂ scores‖, {statistic} (log scale)")
    for ax in (left, right):
        ax.set_xticks(list(d_k), labels=[str(int(d)) for d in d_k])
        ax.minorticks_off()
    fig.suptitle("Why scaled dot-product attention divides the scores by √d_k")
    return fig


# --------------------------------------------------------------------------------------------
# The query / key / value picture
# --------------------------------------------------------------------------------------------


def _box(ax: Axes, x: float, y: float, text: str, colour: str, width: float = 1.7,
         height: float = 0.55) -> None:
    ax.add_patch(FancyBboxPatch((x - width / 2, y - height / 2), width, height,
                                boxstyle="round,pad=0.03,rounding_size=0.1", fc=colour,
                                ec="0.3", lw=1))
    ax.text(x, y, text, ha="center", va="center", fontsize=9.5)


def _arrow(ax: Axes, start: tuple[float, float], end: tuple[float, float], label: str = "",
           colour: str = "0.35") -> None:
    ax.annotate("", xy=end, xytext=start,
                arrowprops=dict(arrowstyle="-|>", color=colour, lw=1.2, shrinkA=2, shrinkB=2))
    if label:
        mid = ((start[0] + end[0]) / 2, (start[1] + end[1]) / 2)
        ax.text(*mid, label, ha="center", va="bottom", fontsize=9, color="0.15",
                bbox=dict(fc="white", ec="none", pad=0.5))


def qkv_diagram(scores: Sequence[float] = (3.0, 1.0, 0.0),
                values: Sequence[float] = (10.0, 20.0, 30.0), *,
                query_label: str = "query q",
                key_labels: Sequence[str] | None = None) -> Figure:
    """One query attending over a few keys: scores, softmax weights, weighted sum of values.

    scores: the dot products q·k_j (already scaled), one per key.
    values: one number per key (a one-dimensional value, so the sum is easy to follow).
    The weights and the output are computed here (a stable softmax in numpy) and written on the
    picture. Returns the figure.
    """
    s = np.asarray(scores, dtype=float)
    v = np.asarray(values, dtype=float)
    if s.shape != v.shape or s.ndim != 1:
        raise ValueError(f"need one score and one value per key, got {s.shape} and {v.shape}")
    weights = np.exp(s - s.max())
    weights /= weights.sum()
    output = float(weights @ v)
    n = len(s)
    key_labels = list(key_labels) if key_labels is not None else [f"key k{j + 1}" for j in range(n)]

    fig, ax = plt.subplots(figsize=(9.4, 1.2 + 1.1 * n), layout="constrained")  # fits the notebook
    rows = [(n - 1) / 2 - j for j in range(n)]  # y of each key, top to bottom
    columns = {"query": 0.0, "key": 3.2, "weight": 5.9, "value": 8.3, "output": 11.0}
    headers = {"query": "the query asks", "key": "each key answers:\nscore = q·k",
               "weight": "softmax turns scores\ninto weights", "value": "each key's value",
               "output": "output = Σ weight × value"}
    for name, x in columns.items():
        ax.text(x, max(rows) + 0.75, headers[name], ha="center", va="bottom", fontsize=9,
                style="italic", color="0.3")

    _box(ax, columns["query"], 0.0, query_label, "#fde0c5")
    for j, y in enumerate(rows):
        _box(ax, columns["key"], y, key_labels[j], "#d6e6f5")
        _arrow(ax, (columns["query"] + 0.85, 0.0), (columns["key"] - 0.85, y),
               f"score {s[j]:g}")
        _box(ax, columns["weight"], y, f"weight {weights[j]:.2f}", "#e3f1dc", width=1.6)
        _arrow(ax, (columns["key"] + 0.85, y), (columns["weight"] - 0.8, y))
        _box(ax, columns["value"], y, f"value {v[j]:g}", "#efe2f3", width=1.4)
        _arrow(ax, (columns["weight"] + 0.8, y), (columns["value"] - 0.7, y), "×")
        _arrow(ax, (columns["value"] + 0.7, y), (columns["output"] - 1.0, 0.0))
    terms = " + ".join(f"{w:.3f}×{x:g}" for w, x in zip(weights, v))
    _box(ax, columns["output"], 0.0, f"output ≈ {output:.1f}", "#fff3b0", width=2.0)
    ax.text(columns["output"], -0.55, terms, ha="center", va="top", fontsize=8, color="0.25")
    ax.set_xlim(-1.2, 12.3)
    ax.set_ylim(min(rows) - 0.9, max(rows) + 1.45)
    ax.set_axis_off()  # a diagram: positions carry no units
    ax.set_title("One query attending over three keys" if n == 3 else
                 f"One query attending over {n} keys")
    return fig
