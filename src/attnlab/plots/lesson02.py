"""Lesson 02's own figures: one query's softmax as d_k grows (the interactive figure), recurrence
against attention, timed, and how far a gradient travels through each.

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

__all__ = ["softmax_saturation", "saturation_numbers", "recurrence_figure", "path_length_figure"]

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
    keys = np.arange(n_keys)  # counted from 0, as every position in the course
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.6), layout="constrained")
    left.bar(keys, numbers["scores"], color="#1f77b4")
    left.axhline(0, color="0.4", lw=0.8)
    how = "q·k / √d_k" if scaled else "q·k (unscaled)"
    left.set_title(f"(a) Scores {how}: spread (std) {numbers['score_std']:.1f}")
    left.set_xlabel("key (counting from 0)")
    left.set_ylabel("score (no unit)")
    right.bar(keys, numbers["weights"], color="#ff7f0e")
    right.set_ylim(0, 1.02)
    right.set_title(f"(b) Softmax weights: largest {numbers['largest_weight']:.2f}")
    right.set_xlabel("key (counting from 0)")
    right.set_ylabel("attention weight")
    for ax in (left, right):
        ax.set_xticks(keys[::3] if n_keys > 8 else keys)
    uniform = math.sqrt(n_keys - 1) / n_keys  # the Jacobian's size when every weight is 1/n_keys
    # Its largest size is 0.5, when two keys share the weight equally: ‖J‖ = 2 p (1 - p) for two
    # weights p and 1 - p (the lesson searches for a larger one and finds none).
    fig.suptitle(f"One query, {n_keys} keys, d_k = {int(d_k)}, {'scaled by 1/√d_k' if scaled else 'unscaled'}: "
                 f"softmax Jacobian ‖∂w/∂s‖ = {numbers['jacobian_norm']:.3g}\n"
                 f"(0 for one-hot weights, {uniform:.2f} for {n_keys} equal weights, at most 0.5: two equal weights)")
    return fig


_LAYER_COLOURS = {"GRU": "#1f77b4", "self-attention": "#ff7f0e"}


def recurrence_figure(ns: Mapping[int, Sequence[int]], seconds: Mapping[int, Mapping[str, Sequence[float]]],
                      gflops: Mapping[int, Mapping[str, Sequence[float]]]) -> Figure:
    """Recurrence against attention over sequence lengths, for one or more batch sizes: (a) time
    per sequence, (b) arithmetic done per second, both on log-log axes.

    ns: batch size -> the sequence lengths n measured at that batch size.
    seconds: batch size -> layer name ("GRU", "self-attention") -> seconds per sequence, one per n.
    gflops: batch size -> layer name -> GFLOP/s, one per n. Returns the figure.
    """
    if set(ns) != set(seconds) or set(ns) != set(gflops):
        raise ValueError(f"ns, seconds and gflops must have the same batch sizes, got {sorted(ns)}, "
                         f"{sorted(seconds)} and {sorted(gflops)}")
    fig, (left, right) = plt.subplots(1, 2, figsize=(9.4, 4.2), layout="constrained")
    styles = [("-", "o"), ("--", "s"), (":", "^")]
    all_ns = sorted({int(n) for lengths in ns.values() for n in lengths})
    for (batch, lengths), (line, marker) in zip(sorted(ns.items()), styles):
        for name, colour in _LAYER_COLOURS.items():
            if name not in seconds[batch]:
                continue
            label = f"{name}, batch {batch}"
            left.plot(lengths, np.asarray(seconds[batch][name]) * 1e3, line, marker=marker, ms=4,
                      color=colour, label=label)
            right.plot(lengths, gflops[batch][name], line, marker=marker, ms=4, color=colour, label=label)
    left.set_title("(a) Time per sequence")
    left.set_ylabel("ms per sequence (log scale)")
    right.set_title("(b) Arithmetic done per second")
    right.set_ylabel("GFLOP/s (log scale)")
    for ax in (left, right):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("positions n (log scale)")
        ax.set_xticks(all_ns, labels=[str(n) if i % 2 == 0 else "" for i, n in enumerate(all_ns)])
        ax.xaxis.set_minor_locator(NullLocator())
        ax.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))  # 0.1, 0.2, 0.5, 1, 2, 5, ...
        ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
        ax.yaxis.set_minor_locator(NullLocator())
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle("A GRU takes one step per position; attention computes all positions at once (one CPU thread)")
    return fig


def path_length_figure(ns: Sequence[int], gradient_norms: Mapping[str, Sequence[Sequence[float]]]) -> Figure:
    """How much the last output of a layer depends on its first input, against the sequence
    length: one line per layer (mean over seeded runs, band from the smallest to the largest run),
    on log-log axes.

    gradient_norms: layer name -> (runs, len(ns)) norms of d(output at the last position) /
       d(input at the first position). Returns the figure.
    """
    fig, ax = plt.subplots(figsize=(6.4, 3.9), layout="constrained")
    for name, values in gradient_norms.items():
        values = np.asarray(values, dtype=float)
        if values.ndim != 2 or values.shape[1] != len(ns):
            raise ValueError(f"{name!r}: need (runs, {len(ns)}) norms, got shape {values.shape}")
        # geometric mean: the runs differ by factors, and the GRU's norms span many decades
        line, = ax.plot(ns, np.exp(np.log(values).mean(axis=0)), marker="o", ms=4, color=_LAYER_COLOURS.get(name),
                        label=f"{name} (geometric mean of {values.shape[0]} seeds)")
        ax.fill_between(ns, values.min(axis=0), values.max(axis=0), color=line.get_color(), alpha=0.2, linewidth=0)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xticks(list(ns), labels=[str(int(n)) for n in ns])
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xlabel("positions n (log scale)")
    ax.set_ylabel("‖∂ output at n−1 / ∂ input at 0‖ (log scale)")
    ax.set_title("How much the last output depends on the first input (untrained layers)")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=8)
    return fig
