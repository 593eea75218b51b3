"""Lesson 01's figures: the encoder-decoder with and without attention, the bottleneck measured,
and the alignment of the trained model on a string of the learner's choice.

Every function returns a matplotlib ``Figure`` with a title and labelled axes (diagrams have no
axes: positions on them carry no units).
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure

from attnlab.plots.common import _arrow, _box, _numpy, attention_heatmap, line_plot

__all__ = ["encoder_decoder_diagram", "bottleneck_figure", "reversal_alignment"]

_FORWARD, _BACKWARD = "#d6e6f5", "#dcefe4"  # the two directions of the encoder
MAX_DIGITS = 32  # the longest string reversal_alignment draws: wider would not fit the notebook


def _bidirectional_encoder(ax, xs: np.ndarray, source: Sequence[str]) -> None:
    """The source, and above each token the encoder's state h_j = [→h_j ; ←h_j]: the forward GRU's
    state (lower half, arrows to the right) and the backward GRU's (upper half, arrows to the left)."""
    for j, (x, token) in enumerate(zip(xs, source)):
        _box(ax, x, 0.0, f"x{j + 1} = {token}", "#efe2f3", width=1.0)
        _box(ax, x, 1.25, f"→h{j + 1}", _FORWARD, width=0.9, height=0.5)
        _box(ax, x, 1.75, f"←h{j + 1}", _BACKWARD, width=0.9, height=0.5)
        _arrow(ax, (x, 0.3), (x, 1.0))  # the token feeds both directions
        if j:
            _arrow(ax, (xs[j - 1] + 0.45, 1.25), (x - 0.45, 1.25))   # forward: left to right
            _arrow(ax, (x - 0.45, 1.75), (xs[j - 1] + 0.45, 1.75))   # backward: right to left
    ax.text(xs.mean(), -0.62, "bidirectional encoder: →h reads left to right, ←h right to left; "
            "h_j = [→h_j ; ←h_j]", ha="center", fontsize=8.5, style="italic", color="0.3")


def encoder_decoder_diagram(source: Sequence[str] = ("3", "1", "4", "1", "5"),
                            weights: Any | None = None, *, step: int = 1) -> Figure:
    """The fixed-length bottleneck, side by side with attention, with the encoder of lesson 01's
    models: a bidirectional GRU.

    Left: the forward GRU reads ``source`` left to right, the backward GRU right to left; only
    c = [→h_n ; ←h_1], the last state of each direction, reaches the decoder, the same at every
    output step. Right: at output step ``step`` (1-based) the decoder state s_{step-1} scores every
    encoder state h_j = [→h_j ; ←h_j] and reads their average, weighted by ``weights`` (one per
    source token, summing to 1; a made-up peaked example by default). The widths of the arrows
    follow the weights. Returns the figure.
    """
    n = len(source)
    if n < 2:
        raise ValueError(f"need a source of at least 2 tokens, got {n}")
    if weights is None:
        peak = n - step if 0 < step <= n else n - 1  # reversal: output step i reads source n - i + 1
        w = np.full(n, 0.1 / (n - 1))
        w[peak] = 0.9
    else:
        w = _numpy(weights).reshape(-1)
        if w.shape != (n,):
            raise ValueError(f"need one weight per source token ({n}), got shape {w.shape}")
    # One panel above the other: side by side they would be wider than a notebook.
    fig, (left, right) = plt.subplots(2, 1, figsize=(9.0, 8.2), layout="constrained")
    xs = np.arange(n) * 1.3
    for ax in (left, right):
        _bidirectional_encoder(ax, xs, source)
        ax.set_axis_off()  # a diagram: positions carry no units
    decoder_y = 4.6
    # Left: one fixed-length vector c = [→h_n ; ←h_1], read by every decoder step.
    c_y = 3.1
    _box(left, xs.mean(), c_y, f"c = [→h{n} ; ←h1]: one fixed-length vector", "#fff3b0", width=3.6)
    c_half = 1.8
    # The forward direction's last state (at the right end) and the backward direction's (at the
    # left end) go up beside the encoder into c.
    for x_from, y_from, side in ((xs[-1] + 0.45, 1.25, 1), (xs[0] - 0.45, 1.75, -1)):
        x_turn = x_from + side * 0.3
        left.plot([x_from, x_turn, x_turn], [y_from, y_from, c_y], color="#b8860b", lw=1.6)
        _arrow(left, (x_turn, c_y), (xs.mean() + side * (c_half + 0.02), c_y), colour="#b8860b")
    for i in range(3):
        x = xs.mean() + (i - 1) * 1.6
        _box(left, x, decoder_y, f"s{i + 1}", "#fde0c5", width=0.8)
        _arrow(left, (xs.mean() + (i - 1) * 0.9, c_y + 0.28), (x, decoder_y - 0.3))
        if i:
            _arrow(left, (x - 1.6 + 0.42, decoder_y), (x - 0.42, decoder_y))
    left.text(xs.mean(), decoder_y + 0.55, "decoder: every step reads the same c", ha="center",
              fontsize=9, style="italic", color="0.3")
    left.set_title("(a) Without attention: the whole source squeezed into c")
    # Right: the decoder state attends over every encoder state.
    x_s = xs.mean()
    _box(right, x_s, decoder_y, f"s{step - 1} → s{step}", "#fde0c5", width=1.3)
    _box(right, x_s + 2.6, decoder_y, f"context c{step} = Σ α·h", "#fff3b0", width=2.0)
    _arrow(right, (x_s + 1.6, decoder_y), (x_s + 0.7, decoder_y))
    for j, x in enumerate(xs):
        right.annotate("", xy=(x_s + 2.0 + 0.15 * j, decoder_y - 0.3), xytext=(x, 2.05),
                       arrowprops=dict(arrowstyle="-|>", color="#1f77b4", lw=0.5 + 5 * w[j],
                                       alpha=0.35 + 0.65 * w[j], shrinkA=2, shrinkB=2))
        right.text(x - 0.12, 2.35, f"α{j + 1}={w[j]:.2f}", ha="right", fontsize=8.5, color="#1f4e79")
    right.text(x_s, decoder_y - 0.55, f"query: s{step - 1}", ha="center", va="top", fontsize=8.5,
               color="0.3")
    right.text(x_s + 1.3, decoder_y + 0.55, f"decoder step {step}: scores every h, reads their "
               "weighted average", ha="center", fontsize=9, style="italic", color="0.3")
    right.set_title(f"(b) With attention: a new context at every step (step {step} shown)")
    for ax in (left, right):
        ax.set_xlim(xs[0] - 1.0, max(xs[-1], x_s + 3.7) + 0.6)
        ax.set_ylim(-0.9, decoder_y + 0.9)
    fig.suptitle("RNN encoder-decoder: the fixed-length bottleneck and Bahdanau attention")
    return fig


def bottleneck_figure(lengths: Sequence[int], by_length: Mapping[str, Sequence[float]],
                      by_position: Mapping[str, Mapping[str, Sequence[float]]], *,
                      position_length: int, steps: int) -> Figure:
    """Lesson 01's measurement: (a) accuracy against source length, (b) accuracy against output
    position for sources of ``position_length`` digits.

    by_length: model name -> fraction of digits right at each of ``lengths`` (greedy decoding).
    by_position: model name -> {decoding ("greedy", "teacher forcing") -> fraction right at each
        output position 1..position_length}; one colour per model, solid for greedy decoding,
        dashed for teacher forcing.
    steps: training steps of each model (in the title). Returns the figure.
    """
    fig, (left, right) = plt.subplots(1, 2, figsize=(9.4, 4.6), layout="constrained")
    line_plot(list(lengths), dict(by_length), ax=left, title="(a) Accuracy against source length",
              xlabel="source length (digits)", ylabel="digits right (fraction, held-out)")
    positions = list(range(1, position_length + 1))
    colours = {name: left.lines[i].get_color() for i, name in enumerate(by_length)}
    for name, runs in by_position.items():
        for decoding, values in runs.items():
            if len(values) != position_length:
                raise ValueError(f"{name}, {decoding}: need {position_length} positions, got {len(values)}")
            right.plot(positions, values, marker="o", ms=3.5, color=colours.get(name),
                       linestyle="--" if decoding == "teacher forcing" else "-", label=f"{name}, {decoding}")
    right.set_title(f"(b) Where the errors are, {position_length}-digit sources")
    right.set_xlabel(f"output position\n(1 = first digit written = source digit {position_length})")
    right.set_ylabel("digits right (fraction, held-out)")
    right.set_xticks(positions[::2] if position_length > 10 else positions)
    right.grid(True, alpha=0.3)
    for ax in (left, right):
        ax.axhline(0.1, color="0.5", linestyle=":", label="chance (1 in 10)")
        ax.set_ylim(0, 1.03)
    left.legend(fontsize=8, loc="lower left")
    fig.legend(*right.get_legend_handles_labels(), loc="outside lower center", ncol=2, fontsize=8,
               title="panel (b): solid = greedy decoding, dashed = teacher forcing", title_fontsize=8)
    fig.suptitle(f"Reversing digit strings: GRU encoder-decoders, same size, {steps} training steps each")
    return fig


def reversal_alignment(model, digits: str) -> Figure:
    """The alignment of a trained attention model (``attnlab.seq2seq``, task "reverse") on the
    string ``digits`` ("31415926"), decoded greedily: one row per digit written, one column per
    source digit. The title says what the model wrote and whether it is right. Returns the figure.
    A string longer than ``MAX_DIGITS`` is a ValueError (its figure would not fit the notebook).
    """
    from attnlab import data, seq2seq  # here, not at import: the plots load without the models

    if model is None:
        raise ValueError("no trained attention model: run the training cell first")
    batch = data.batch_from_text(digits, model.config.task)
    if batch.source.shape[1] > MAX_DIGITS:
        raise ValueError(f"type at most {MAX_DIGITS} digits (twice the longest training string), "
                         f"got {batch.source.shape[1]}")
    predicted, weights = seq2seq.predict(model, batch)
    if weights is None:
        raise ValueError("this model has no attention weights to show (kind 'plain')")
    source = data.to_text(batch.source[0]).split()
    written = [data.VOCAB[token] for token in predicted[0].tolist()]  # one per step, even "<pad>"
    wrong = sum(a != b for a, b in zip(written, data.to_text(batch.target[0]).split()))
    shown = "".join(token if token.isdigit() else "?" for token in written)  # "?": not a digit
    n = len(source)
    # At most 9.4 inches wide, so that a long string still fits the notebook's width.
    fig, ax = plt.subplots(figsize=(min(9.4, 3.2 + 0.45 * n), 1.8 + 0.36 * min(n, 24)), layout="constrained")
    verdict = "all right" if not wrong else f"{wrong} of {n} digits wrong"
    trained = model.config.max_len
    beyond = f"; longer than any training string ({trained})" if n > trained else ""
    attention_heatmap(weights[0], [f"step {i + 1}: wrote {d}" for i, d in enumerate(written)],
                      [f"{j + 1}: {d}" for j, d in enumerate(source)], ax=ax, annotate=n <= 10,
                      title=f"Reversing {''.join(source)}\nwrote {shown} ({verdict}{beyond})")
    ax.set_xlabel("source position: digit (attended to)")
    ax.set_ylabel("output step: digit written (attending)")
    if n > 16:  # upright labels would overlap
        for label in ax.get_xticklabels():
            label.set(rotation=90, ha="center")
    return fig
