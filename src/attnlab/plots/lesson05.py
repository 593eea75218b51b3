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

__all__ = ["alibi_figure", "draw_rope_pair", "extrapolation_figure", "rope_decay_bound", "rope_decay_figure",
           "rope_pair_numbers", "rope_pair_scores", "rope_wavelengths", "rope_wavelengths_figure",
           "sinusoidal_figure", "who_paid_figure"]


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


def rope_pair_scores(distances: Sequence[int], head_dim: int, base: float, *, pairs: int = 1000,
                     seed: int = 0, noise: float = 0.6) -> np.ndarray:
    """Scores q·k/√h of ``pairs`` random queries with matching keys, the key ``distance`` tokens
    before the query, both rotated by RoPE: (pairs, len(distances)).

    q has independent standard normal entries and k = q + ``noise`` · (fresh normal entries): a key
    whose content matches the query's. Each pair of dimensions is a complex number z, so the score
    is Re Σ_i z_q,i conj(z_k,i) e^{i·distance·θ_i} / √h (it depends on the distance only).
    """
    if head_dim < 2 or head_dim % 2:
        raise ValueError(f"head_dim must be even and at least 2, got {head_dim}")
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((pairs, head_dim))
    k = q + noise * rng.standard_normal((pairs, head_dim))
    half = head_dim // 2
    products = (q[:, :half] + 1j * q[:, half:]) * np.conj(k[:, :half] + 1j * k[:, half:])   # (pairs, h/2)
    theta = float(base) ** (-np.arange(half) * 2 / head_dim)
    turns = np.exp(1j * np.asarray(distances, dtype=np.float64)[:, None] * theta)            # (distances, h/2)
    return (products @ turns.T).real / math.sqrt(head_dim)


def sinusoidal_figure(encoding: Any, *, anchors: Sequence[int] | None = None) -> Figure:
    """Three panels for a sinusoidal encoding (n_positions, d_model): (a) the table as a heatmap,
    (b) the wavelength of each pair of columns, (c) the dot product of the encodings of positions
    m and m + distance, for a few anchors m (the curves coincide: it depends on the distance)."""
    table = _numpy(encoding)
    n, d = table.shape
    anchors = list(anchors) if anchors is not None else [n // 4, n // 2, 3 * n // 4]
    fig = plt.figure(figsize=(9.4, 6.8), layout="constrained")
    mosaic = fig.subplot_mosaic([["a", "b"], ["c", "c"]])
    axes = [mosaic["a"], mosaic["b"], mosaic["c"]]

    image = axes[0].imshow(table, aspect="auto", cmap="RdBu_r", vmin=-1, vmax=1, interpolation="nearest")
    axes[0].set(title="(a) The table: one row per position", xlabel="dimension (column of PE)",
                ylabel="position")
    fig.colorbar(image, ax=axes[0], label="value")

    pairs = np.arange(d // 2)
    axes[1].semilogy(pairs, 2 * math.pi * 10000.0 ** (2 * pairs / d), "o-", ms=3)
    axes[1].axhline(2 * math.pi, color="0.5", ls=":", lw=1)
    axes[1].axhline(10000 * 2 * math.pi, color="0.5", ls=":", lw=1)
    axes[1].text(0, 2 * math.pi * 1.3, "2π", color="0.35")
    axes[1].text(0, 10000 * 2 * math.pi / 1.3, "10000·2π", color="0.35", va="top")  # below: clear of the title
    axes[1].set(title="(b) Wavelength of each pair", xlabel="pair i (columns 2i and 2i+1)",
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
                      log_distance: bool = False, scores: Mapping[str, Any] | None = None,
                      scores_title: str = "(b) Scores of a query and a matching key") -> Figure:
    """The long-range decay bound (``rope_decay_bound``) against the distance, one line per base;
    ``log_distance`` puts the distance on a logarithmic scale (linear between 0 and 1).

    scores: optional second panel, label -> scores at ``distances``, (len(distances),) or one row
    per curve (e.g. a few single query-key pairs, then the average over many, from
    ``rope_pair_scores``); the first entry is drawn thin and grey.
    """
    xlabel = "distance between query and key (tokens" + (", log scale)" if log_distance else ")")
    if scores is None:
        fig, ax = plt.subplots(figsize=(7.5, 4.2), layout="constrained")
        axes = [ax]
        title = f"Long-range decay of RoPE (head size {head_dim}; Su et al., 2021, Fig. 2)"
    else:
        fig, axes = plt.subplots(1, 2, figsize=(9.4, 4), layout="constrained")
        fig.suptitle(f"Long-range decay of RoPE, head size {head_dim}")
        title = "(a) The bound of Su et al. (2021, Fig. 2)"
    for label, values in curves.items():
        axes[0].plot(distances, _numpy(values), lw=1.5, label=label)
    axes[0].set(title=title, xlabel=xlabel, ylabel="relative upper bound of the score")
    if scores is not None:
        for index, (label, values) in enumerate(scores.items()):
            style = {"color": "0.6", "lw": 0.7} if index == 0 else {"lw": 1.8, "color": "tab:blue"}
            for row, curve in enumerate(np.atleast_2d(_numpy(values))):   # several pairs: one label
                axes[1].plot(distances, curve, label=label if row == 0 else None, **style)
        axes[1].axhline(0, color="0.3", lw=0.8)
        axes[1].set(title=scores_title, xlabel=xlabel, ylabel=f"score q·k/√{head_dim}")
    for ax in axes:
        if log_distance:
            ax.set_xscale("symlog", linthresh=1)
        ax.set_xlim(min(distances), max(distances))
        ax.legend(fontsize=9)
        ax.grid(alpha=0.3)
    return fig


def who_paid_figure(losses: Mapping[str, Sequence[float]], accuracies: Mapping[str, float], *,
                    chance: float = 0.5, window: int = 10) -> Figure:
    """(a) training loss of each model (moving average over ``window`` steps), (b) accuracy on
    every sentence of the task, with chance as a dashed line."""
    fig, axes = plt.subplots(1, 2, figsize=(9.4, 4), layout="constrained")
    palette = ["0.55", "tab:blue", "tab:orange", "tab:green", "tab:red"]
    colour = {name: palette[i % len(palette)] for i, name in enumerate(dict.fromkeys([*losses, *accuracies]))}
    for label, values in losses.items():
        values = np.asarray(values, dtype=float)
        smooth = np.convolve(values, np.ones(window) / window, mode="valid") if len(values) >= window else values
        axes[0].plot(np.arange(len(smooth)) + (len(values) - len(smooth)), smooth, label=label, lw=1.5,
                     color=colour[label])
    axes[0].axhline(math.log(2), color="0.3", ls=":", lw=1, label="ln 2 (a coin toss)")
    axes[0].set(title='(a) Training loss on "who paid?"', xlabel="training step",
                ylabel="cross-entropy (nats)")
    axes[0].legend(fontsize=9)
    names = list(accuracies)
    bars = axes[1].bar(names, [accuracies[n] for n in names], color=[colour[n] for n in names])
    for bar, name in zip(bars, names):
        axes[1].text(bar.get_x() + bar.get_width() / 2, accuracies[name] + 0.02, f"{accuracies[name]:.0%}",
                     ha="center", fontsize=10)
    axes[1].axhline(chance, color="0.3", ls="--", lw=1, label=f"chance ({chance:.0%})")
    axes[1].set(title="(b) Accuracy on every sentence", xlabel="how the model sees positions",
                ylabel="fraction answered right", ylim=(0, 1.1))
    axes[1].legend(fontsize=9, loc="lower right")
    return fig


def alibi_figure(slopes: Sequence[float], *, max_distance: int = 32) -> Figure:
    """ALiBi (Press et al., 2022): (a) the bias ``-slope * distance`` each head adds to its scores,
    (b) the factor ``exp(bias)`` by which that multiplies a key's weight before normalising."""
    distance = np.arange(max_distance + 1)
    fig, axes = plt.subplots(1, 2, figsize=(9.4, 3.8), layout="constrained")
    for head, slope in enumerate(_numpy(slopes)):
        label = f"head {head}: slope 1/{1 / slope:g}"
        axes[0].plot(distance, -slope * distance, lw=1.8, label=label)
        axes[1].plot(distance, np.exp(-slope * distance), lw=1.8, label=label)
    axes[0].set(title="(a) ALiBi's bias, added to the score", xlabel="distance from query to key (tokens)",
                ylabel="bias")
    axes[1].set(title="(b) The factor it puts on a key's weight", xlabel="distance from query to key (tokens)",
                ylabel="exp(bias)", ylim=(0, 1.05))
    for ax in axes:
        ax.legend(fontsize=9)
        ax.grid(alpha=0.3)
    return fig


def extrapolation_figure(lengths: Sequence[int], accuracies: Mapping[str, Any], *,
                         train_lengths: tuple[int, int], chance: float | None = None,
                         moved: Any = None) -> Figure:
    """Train short, test long. (a) accuracy against the test length for each kind of positions:
    the mean over seeds as a line, the lowest and highest seed as a band, the training lengths
    shaded; ``accuracies``: kind -> (seeds, len(lengths)). (b), when ``moved`` is given: how far
    each row of a learned position table moved from its initial value in training, (rows,)."""
    lengths = np.asarray(lengths)
    panels = 1 if moved is None else 2
    fig, axes = plt.subplots(1, panels, figsize=(9.4 if panels == 2 else 6.5, 4), layout="constrained",
                             squeeze=False)
    ax = axes[0, 0]
    ax.axvspan(*train_lengths, color="0.9", label=f"training lengths ({train_lengths[0]}-{train_lengths[1]})")
    for label, values in accuracies.items():
        values = np.atleast_2d(_numpy(values))
        line, = ax.plot(lengths, values.mean(axis=0), "o-", ms=3.5, lw=1.8, label=label)
        ax.fill_between(lengths, values.min(axis=0), values.max(axis=0), color=line.get_color(), alpha=0.2)
    if chance is not None:
        ax.axhline(chance, color="0.3", ls="--", lw=1, label=f"a blind guess ({chance:.0%})")
    ax.set_xscale("log", base=2)
    ax.set_xticks(lengths, [str(n) for n in lengths])
    ax.minorticks_off()
    ax.set(title="(a) Trained on short streams, tested on long ones", xlabel="test length (tokens, log scale)",
           ylabel="accuracy (band: lowest to highest seed)", ylim=(0, 1.05))
    ax.legend(fontsize=8.5, loc="lower left")
    ax.grid(alpha=0.3)
    if moved is not None:
        moved = _numpy(moved)
        right = axes[0, 1]
        right.plot(np.arange(len(moved)), moved, lw=1.5, color="tab:blue")
        right.axvline(train_lengths[1] - 0.5, color="0.3", ls="--", lw=1,
                      label=f"longest training stream ({train_lengths[1]} tokens)")
        right.set(title="(b) Learned table: change of each row", xlabel="position (row of the table)",
                  ylabel="distance moved in training (L2)")
        right.legend(fontsize=8.5)
        right.grid(alpha=0.3)
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
    layout), their score q·k / √16, the scores against every key position 0 .. 64, and the average
    of those scores over 1000 random queries with matching keys (``rope_pair_scores``)."""
    q, k = _query_key()
    q_rot, k_rot = _rotate(q, query_position, base), _rotate(k, key_position, base)
    keys = np.stack([_rotate(k, p, base) for p in _KEY_POSITIONS])
    average = rope_pair_scores(query_position - _KEY_POSITIONS, _HEAD_DIM, base).mean(axis=0)
    return {"q": q_rot, "k": k_rot, "score": float(q_rot @ k_rot) / math.sqrt(_HEAD_DIM),
            "key_positions": _KEY_POSITIONS, "scores": keys @ q_rot / math.sqrt(_HEAD_DIM),
            "average_scores": average}


def draw_rope_pair(query_position: int = 10, key_position: int = 4, base: float = 10000.0,
                   pair: int = 0) -> Figure:
    """A query at ``query_position`` and a key at ``key_position``, rotated by RoPE with ``base``.

    Left: pair ``pair`` of both vectors in its plane (faint: before rotation). Right: the score of
    the query against the same key placed at every position 0 .. 64, the chosen key marked, and
    (dashed) the average of that curve over 1000 random queries with matching keys. Move both
    positions by the same amount: the arrows turn together and the score stays put.
    """
    half = _HEAD_DIM // 2
    if not 0 <= pair < half:
        raise ValueError(f"pair must be between 0 and {half - 1}, got {pair}")
    numbers = rope_pair_numbers(query_position, key_position, base)
    q, k = _query_key()
    fig, (plane, line) = plt.subplots(1, 2, figsize=(10, 4.4), layout="constrained",
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
              label=f"this query at {query_position}, this key at each position")
    line.plot(numbers["key_positions"], numbers["average_scores"], color="tab:green", lw=1.5, ls="--",
              label="average over 1000 random query-key pairs")
    line.plot([key_position], [numbers["score"]], "o", color="tab:orange", ms=9,
              label=f"key at {key_position}: score {numbers['score']:.3f}")
    line.axvline(query_position, color="tab:blue", ls=":", lw=1, label=f"query position {query_position}")
    both = np.concatenate([numbers["scores"], numbers["average_scores"]])
    low, high = float(both.min()), float(both.max())
    line.set_ylim(low - 0.05 * (high - low), high + 0.45 * (high - low))  # room for the legend above the curve
    line.set(title=f"score q·k/√{_HEAD_DIM} at distance {query_position - key_position} (base {base:g})",
             xlabel="key position (tokens)", ylabel="score")
    line.legend(fontsize=8, loc="upper right")
    line.grid(alpha=0.3)
    return fig
