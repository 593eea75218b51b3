"""Lesson 02's own figures: one query's softmax as d_k grows (the interactive figure), and
recurrence against attention, timed.

(The query/key/value picture and the two panels of "why divide by √d_k" are in
``attnlab.plots.common``.) Every function returns a matplotlib ``Figure`` with a title and
labelled axes.
"""

from __future__ import annotations

import math
from typing import Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogLocator, NullLocator

from attnlab.plots.common import line_plot

__all__ = ["softmax_saturation", "saturation_numbers", "recurrence_figure"]

_LARGEST_D_K = 4096


def saturation_numbers(d_k: int, scaled: bool = True, *, n_keys: int = 16, seed: int = 0) -> dict:
    """One query against ``n_keys`` keys, entries drawn from N(0, 1) with ``seed``: the scores q·k
    (divided by √d_k when ``scaled``), the softmax weights, the largest weight and the size
    (Frobenius norm) of the softmax's Jacobian ∂w/∂s = diag(w) - w wᵀ.

    The query and keys of size d_k are the first d_k entries of one draw of size 4096, so moving
    d_k changes the vectors gradually instead of drawing new ones.
    """
    if not 1 <= int(d_k) <= _LARGEST_D_K:
        raise ValueError(f"d_k must be between 1 and {_LARGEST_D_K}, got {d_k}")
    if n_keys < 2:
        raise ValueError(f"need at least 2 keys, got {n_keys}")
    d_k = int(d_k)
    rng = np.random.default_rng(seed)
    query = rng.standard_normal(_LARGEST_D_K)[:d_k]
    keys = rng.standard_normal((n_keys, _LARGEST_D_K))[:, :d_k]
    scores = keys @ query / (math.sqrt(d_k) if scaled else 1.0)
    weights = np.exp(scores - scores.max())
    weights /= weights.sum()
    jacobian = np.diag(weights) - np.outer(weights, weights)
    return {"scores": scores, "weights": weights, "largest_weight": float(weights.max()),
            "jacobian_norm": float(np.linalg.norm(jacobian)), "score_std": float(scores.std())}


def softmax_saturation(d_k: int = 64, scaled: bool = True, *, n_keys: int = 16, seed: int = 0) -> Figure:
    """Two bar charts for one query and ``n_keys`` keys (see ``saturation_numbers``): (a) its
    scores, (b) its softmax weights, with the largest weight and the Jacobian's size in the title.
    Returns the figure."""
    numbers = saturation_numbers(d_k, scaled, n_keys=n_keys, seed=seed)
    keys = np.arange(1, n_keys + 1)
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.6), layout="constrained")
    left.bar(keys, numbers["scores"], color="#1f77b4")
    left.axhline(0, color="0.4", lw=0.8)
    how = "q·k / √d_k" if scaled else "q·k (unscaled)"
    left.set_title(f"(a) Scores {how}: spread (std) {numbers['score_std']:.1f}")
    left.set_xlabel("key")
    left.set_ylabel("score (no unit)")
    right.bar(keys, numbers["weights"], color="#ff7f0e")
    right.set_ylim(0, 1.02)
    right.set_title(f"(b) Softmax weights: largest {numbers['largest_weight']:.2f}")
    right.set_xlabel("key")
    right.set_ylabel("attention weight")
    for ax in (left, right):
        ax.set_xticks(keys[::3] if n_keys > 8 else keys)
    uniform = math.sqrt(n_keys - 1) / n_keys  # the Jacobian's size when every weight is 1/n_keys
    fig.suptitle(f"One query, {n_keys} keys, d_k = {int(d_k)}, {'scaled by 1/√d_k' if scaled else 'unscaled'}: "
                 f"‖∂w/∂s‖ = {numbers['jacobian_norm']:.3g} ({uniform:.2f} for equal weights, 0 for one-hot)")
    return fig


def recurrence_figure(ns: Sequence[int], seconds: Mapping[str, Sequence[float]],
                      gflops: Mapping[str, Sequence[float]]) -> Figure:
    """Recurrence against attention over ``ns`` positions: (a) time of one layer, (b) arithmetic
    done per second, both on log-log axes.

    seconds, gflops: layer name -> one value per n. Returns the figure.
    """
    fig, (left, right) = plt.subplots(1, 2, figsize=(11.5, 4), layout="constrained")
    line_plot(list(ns), {name: np.asarray(values) * 1e3 for name, values in seconds.items()}, ax=left,
              xscale="log", yscale="log", title="(a) Time of one layer against the sequence length",
              xlabel="positions n (log scale)", ylabel="time (ms, log scale)")
    line_plot(list(ns), dict(gflops), ax=right, xscale="log", yscale="log",
              title="(b) Arithmetic done per second",
              xlabel="positions n (log scale)", ylabel="GFLOP/s (log scale)")
    for ax in (left, right):
        ax.set_xticks(list(ns), labels=[str(int(n)) for n in ns])
        ax.xaxis.set_minor_locator(NullLocator())
        ax.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))  # 0.1, 0.2, 0.5, 1, 2, 5, ...
        ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
        ax.yaxis.set_minor_locator(NullLocator())
    fig.suptitle("A GRU steps through the positions one after another; attention computes them all at once "
                 "(one CPU thread)")
    return fig
