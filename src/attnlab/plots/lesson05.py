"""Lesson 05's figures: sinusoidal encodings, RoPE's wavelengths and long-range decay, the "who
paid?" training, and the interactive rotated query and key.

Every function returns a matplotlib ``Figure`` with a title and labelled axes. The RoPE figures
compute their rotations here, in numpy (a pair of dimensions is a complex number, a rotation a
product with e^{it}), so they draw before the exercises are written.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure

from attnlab.plots.common import _numpy

__all__ = ["draw_rope_pair", "rope_decay_bound", "rope_decay_figure", "rope_pair_numbers",
           "rope_wavelengths", "rope_wavelengths_figure", "sinusoidal_figure", "who_paid_figure"]


def rope_wavelengths(head_dim: int, base: float) -> np.ndarray:
    """Tokens it takes each pair i = 0 .. head_dim/2 - 1 to turn once: 2π · base^(2i / head_dim)."""
    if head_dim < 2 or head_dim % 2:
        raise ValueError(f"head_dim must be even and at least 2, got {head_dim}")
    return 2 * math.pi * float(base) ** (np.arange(0, head_dim, 2) / head_dim)


def rope_decay_bound(distances: Sequence[int], head_dim: int, base: float) -> np.ndarray:
    """The relative upper bound of Su et al. (2021, section 3.4.3, Figure 2) at each distance r:
    (1 / (h/2)) · Σ_j |S_j|, with S_j = Σ_{k<j} e^{i r θ_k} and θ_k = base^(-2k/h)."""
    r = np.asarray(distances, dtype=np.float64)[:, None]
    theta = float(base) ** (-np.arange(0, head_dim, 2) / head_dim)
    partial_sums = np.cumsum(np.exp(1j * r * theta), axis=1)   # S_1 ... S_{h/2}
    return np.abs(partial_sums).sum(axis=1) / (head_dim // 2)


def sinusoidal_figure(encoding: Any, *, anchors: Sequence[int] | None = None) -> Figure:
    """Three panels for a sinusoidal encoding (n_positions, d_model): (a) the table as a heatmap,
    (b) the wavelength of each pair of columns, (c) the dot product of the encodings of positions
    m and m + distance, for a few anchors m (the curves coincide: it depends on the distance)."""
    table = _numpy(encoding)
    n, d = table.shape
    anchors = list(anchors) if anchors is not None else [n // 4, n // 2, 3 * n // 4]
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2), layout="constrained")

    image = axes[0].imshow(table, aspect="auto", cmap="RdBu_r", vmin=-1, vmax=1, interpolation="nearest")
    axes[0].set(title="(a) The encodings: one row per position", xlabel="dimension (column of PE)",
                ylabel="position")
    fig.colorbar(image, ax=axes[0], label="value")

    pairs = np.arange(d // 2)
    axes[1].semilogy(pairs, 2 * math.pi * 10000.0 ** (2 * pairs / d), "o-", ms=3)
    axes[1].axhline(2 * math.pi, color="0.5", ls=":", lw=1)
    axes[1].axhline(10000 * 2 * math.pi, color="0.5", ls=":", lw=1)
    axes[1].text(0, 2 * math.pi * 1.3, "2π", color="0.35")
    axes[1].text(0, 10000 * 2 * math.pi / 1.3, "10000·2π", color="0.35", va="top")  # below: clear of the title
    axes[1].set(title="(b) Wavelength of each pair of columns", xlabel="pair i (columns 2i and 2i+1)",
                ylabel="wavelength (positions, log scale)")

    for m in anchors:
        distances = np.arange(-m, n - m)
        axes[2].plot(distances, table @ table[m], label=f"m = {m}", lw=1.5, alpha=0.8)
    axes[2].set(title="(c) PE[m] · PE[m + distance]", xlabel="distance (positions)", ylabel="dot product")
    axes[2].legend(fontsize=9)
    return fig


def rope_wavelengths_figure(head_dim: int, bases: Mapping[str, float], *, context: int | None = None,
                            context_label: str = "context length") -> Figure:
    """Wavelength (tokens per full turn) of every pair of a RoPE head for each base, log scale,
    with the context length as a horizontal line."""
    fig, ax = plt.subplots(figsize=(7.5, 4.2), layout="constrained")
    for label, base in bases.items():
        ax.semilogy(np.arange(head_dim // 2), rope_wavelengths(head_dim, base), lw=2, label=label)
    if context is not None:
        ax.axhline(context, color="0.3", ls="--", lw=1, label=f"{context_label} ({context:,} tokens)")
    ax.set(title=f"RoPE wavelengths of a head of size {head_dim}", xlabel="pair i",
           ylabel="wavelength (tokens per turn, log scale)")
    ax.legend(fontsize=9)
    ax.grid(alpha=0.3, which="both")
    return fig


def rope_decay_figure(distances: Sequence[int], curves: Mapping[str, Any], *, head_dim: int,
                      log_distance: bool = False) -> Figure:
    """The long-range decay bound (``rope_decay_bound``) against the distance, one line per base;
    ``log_distance`` puts the distance on a logarithmic scale (linear between 0 and 1)."""
    fig, ax = plt.subplots(figsize=(7.5, 4.2), layout="constrained")
    for label, values in curves.items():
        ax.plot(distances, _numpy(values), lw=1.5, label=label)
    ax.set(title=f"Long-range decay of RoPE (head size {head_dim}; Su et al., 2021, Fig. 2)",
           xlabel="distance between query and key (tokens" + (", log scale)" if log_distance else ")"),
           ylabel="relative upper bound of the score")
    if log_distance:
        ax.set_xscale("symlog", linthresh=1)
    ax.legend(fontsize=9)
    ax.grid(alpha=0.3)
    return fig


def who_paid_figure(losses: Mapping[str, Sequence[float]], accuracies: Mapping[str, float], *,
                    chance: float = 0.5, window: int = 10) -> Figure:
    """(a) training loss of each model (moving average over ``window`` steps), (b) accuracy on
    every sentence of the task, with chance as a dashed line."""
    fig, axes = plt.subplots(1, 2, figsize=(12, 4), layout="constrained")
    palette = ["0.55", "tab:blue", "tab:orange", "tab:green", "tab:red"]
    colour = {name: palette[i % len(palette)] for i, name in enumerate(dict.fromkeys([*losses, *accuracies]))}
    for label, values in losses.items():
        values = np.asarray(values, dtype=float)
        smooth = np.convolve(values, np.ones(window) / window, mode="valid") if len(values) >= window else values
        axes[0].plot(np.arange(len(smooth)) + (len(values) - len(smooth)), smooth, label=label, lw=1.5,
                     color=colour[label])
    axes[0].axhline(math.log(2), color="0.3", ls=":", lw=1, label="ln 2 (a coin between the two parties)")
    axes[0].set(title='(a) Training loss on "who paid?"', xlabel="training step",
                ylabel="cross-entropy (nats)")
    axes[0].legend(fontsize=9)
    names = list(accuracies)
    bars = axes[1].bar(names, [accuracies[n] for n in names], color=[colour[n] for n in names])
    for bar, name in zip(bars, names):
        axes[1].text(bar.get_x() + bar.get_width() / 2, accuracies[name] + 0.02, f"{accuracies[name]:.0%}",
                     ha="center", fontsize=10)
    axes[1].axhline(chance, color="0.3", ls="--", lw=1, label=f"chance ({chance:.0%})")
    axes[1].set(title="(b) Accuracy on every sentence of the task", xlabel="how the model sees positions",
                ylabel="fraction answered right", ylim=(0, 1.1))
    axes[1].legend(fontsize=9, loc="lower right")
    return fig


# --------------------------------------------------------------------------------------------
# The interactive figure: a query and a key, rotated
# --------------------------------------------------------------------------------------------

_HEAD_DIM = 16
_KEY_POSITIONS = np.arange(0, 65)


def _query_key(seed: int = 5) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    q = rng.standard_normal(_HEAD_DIM)
    return q, q + 0.6 * rng.standard_normal(_HEAD_DIM)  # a key that matches the query fairly well


def _rotate(x: np.ndarray, position: float, base: float) -> np.ndarray:
    """RoPE, "half" layout, in numpy: pair i is (x[i], x[i + h/2])."""
    half = x.shape[-1] // 2
    z = (x[..., :half] + 1j * x[..., half:]) * np.exp(1j * position * base ** (-np.arange(half) * 2 / x.shape[-1]))
    return np.concatenate([z.real, z.imag], axis=-1)


def rope_pair_numbers(query_position: int, key_position: int, base: float) -> dict:
    """The numbers behind ``draw_rope_pair``: the rotated query and key (head size 16, "half"
    layout), their score q·k / √16, and the scores against every key position 0 .. 64."""
    q, k = _query_key()
    q_rot, k_rot = _rotate(q, query_position, base), _rotate(k, key_position, base)
    keys = np.stack([_rotate(k, p, base) for p in _KEY_POSITIONS])
    return {"q": q_rot, "k": k_rot, "score": float(q_rot @ k_rot) / math.sqrt(_HEAD_DIM),
            "key_positions": _KEY_POSITIONS, "scores": keys @ q_rot / math.sqrt(_HEAD_DIM)}


def draw_rope_pair(query_position: int = 10, key_position: int = 4, base: float = 10000.0,
                   pair: int = 0) -> Figure:
    """A query at ``query_position`` and a key at ``key_position``, rotated by RoPE with ``base``.

    Left: pair ``pair`` of both vectors in its plane (faint: before rotation). Right: the score of
    the query against the same key placed at every position 0 .. 64, the chosen key marked. Move
    both positions by the same amount: the arrows turn together and the score stays put.
    """
    half = _HEAD_DIM // 2
    if not 0 <= pair < half:
        raise ValueError(f"pair must be between 0 and {half - 1}, got {pair}")
    numbers = rope_pair_numbers(query_position, key_position, base)
    q, k = _query_key()
    fig, (plane, line) = plt.subplots(1, 2, figsize=(11, 4.4), layout="constrained",
                                      gridspec_kw={"width_ratios": [1, 1.5]})
    limit = 1.15 * max(np.hypot(q[pair], q[pair + half]), np.hypot(k[pair], k[pair + half]))
    for vector, rotated, colour, name in ((q, numbers["q"], "tab:blue", "query"),
                                          (k, numbers["k"], "tab:orange", "key")):
        plane.annotate("", xy=(vector[pair], vector[pair + half]), xytext=(0, 0),
                       arrowprops={"arrowstyle": "->", "color": colour, "alpha": 0.25, "lw": 1.5})
        plane.annotate("", xy=(rotated[pair], rotated[pair + half]), xytext=(0, 0),
                       arrowprops={"arrowstyle": "->", "color": colour, "lw": 2.5})
        plane.plot([], [], color=colour, lw=2.5, label=f"{name} (faint: at position 0)")
    angle = base ** (-2 * pair / _HEAD_DIM)
    plane.set(xlim=(-limit, limit), ylim=(-limit, limit), aspect="equal",
              title=f"pair {pair}: turns {angle:.3g} rad per position",
              xlabel=f"dimension {pair}", ylabel=f"dimension {pair + half}")
    plane.axhline(0, color="0.85", lw=0.8)
    plane.axvline(0, color="0.85", lw=0.8)
    plane.legend(fontsize=8, loc="lower left")

    line.plot(numbers["key_positions"], numbers["scores"], color="0.4", lw=1.5,
              label=f"query at {query_position}, key at each position")
    line.plot([key_position], [numbers["score"]], "o", color="tab:orange", ms=9,
              label=f"key at {key_position}: score {numbers['score']:.3f}")
    line.axvline(query_position, color="tab:blue", ls=":", lw=1, label=f"query position {query_position}")
    low, high = float(numbers["scores"].min()), float(numbers["scores"].max())
    line.set_ylim(low - 0.05 * (high - low), high + 0.45 * (high - low))  # room for the legend above the curve
    line.set(title=f"score q·k/√{_HEAD_DIM} at distance {query_position - key_position} (base {base:g})",
             xlabel="key position (tokens)", ylabel="score")
    line.legend(fontsize=8, loc="upper right")
    line.grid(alpha=0.3)
    return fig
