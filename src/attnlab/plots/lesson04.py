"""Figures of lesson 04: heads side by side, the two-facts experiment, KV cache sizes and times,
the heads of the course model and their measured scores, head pruning, the induction circuit, and
the interactive head viewer.

Every function returns a matplotlib ``Figure`` with a title and labelled axes.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure
from matplotlib.patches import FancyArrowPatch, Rectangle

from attnlab.plots.common import _axes, _numpy, attention_heatmap

__all__ = [
    "decode_time_figure",
    "head_grid",
    "head_viewer",
    "head_viewer_figure",
    "head_scores_figure",
    "heads_diagram",
    "induction_figure",
    "kv_cache_size_figure",
    "pruning_figure",
    "two_facts_figure",
]

_HEAD_COLOURS = ("#4C72B0", "#DD8452", "#55A868", "#C44E52", "#8172B3", "#937860", "#DA8BC3", "#8C8C8C")


def heads_diagram(d_model: int = 12, n_heads: int = 3) -> Figure:
    """One token's query vector cut into ``n_heads`` consecutive slices, each attending on its own.

    The top row is the d_model features of one token's query (the same cut applies to its key and
    value); each slice of h = d_model // n_heads features goes to its own head, which computes its
    own weights over the keys; the heads' outputs are put side by side again and mixed by W_O.
    """
    if d_model % n_heads:
        raise ValueError(f"d_model={d_model} is not divisible by n_heads={n_heads}")
    h = d_model // n_heads
    fig, ax = plt.subplots(figsize=(10, 4.2), layout="constrained")
    for i in range(d_model):
        head = i // h
        colour = _HEAD_COLOURS[head % len(_HEAD_COLOURS)]
        ax.add_patch(Rectangle((i, 6), 0.9, 0.9, color=colour))
        ax.add_patch(Rectangle((i, 0), 0.9, 0.9, color=colour))
    ax.text(-0.4, 6.45, "query of one token\n(d_model features)", ha="right", va="center", fontsize=10)
    ax.text(-0.4, 0.45, "heads' outputs side by side,\nthen mixed by W_O", ha="right", va="center", fontsize=10)
    for head in range(n_heads):
        colour = _HEAD_COLOURS[head % len(_HEAD_COLOURS)]
        centre = head * h + h / 2 - 0.05
        ax.add_patch(Rectangle((head * h + 0.1, 2.6), h - 0.3, 1.8, facecolor="white", edgecolor=colour,
                               linewidth=2))
        ax.text(centre, 3.5, f"head {head}\nsoftmax(q kᵀ/√{h}) v\nits own weights", ha="center",
                va="center", fontsize=9)
        for start, end in (((centre, 5.95), (centre, 4.45)), ((centre, 2.55), (centre, 0.95))):
            ax.add_patch(FancyArrowPatch(start, end, arrowstyle="-|>", mutation_scale=12, color=colour))
        ax.text(centre, 5.3, f"features {head * h}–{head * h + h - 1}", ha="center", va="center", fontsize=8,
                color=colour, backgroundcolor="white")
    ax.set_xlim(-6.5, d_model + 0.5)
    ax.set_ylim(-0.5, 7.3)
    ax.set_title(f"Multi-head attention: d_model = {d_model} features, {n_heads} heads of h = {h}")
    ax.set_xlabel("feature index (colour = head)")
    ax.set_yticks([])
    ax.set_xticks([i + 0.45 for i in range(d_model)], labels=[str(i) for i in range(d_model)], fontsize=8)
    for side in ("left", "right", "top"):
        ax.spines[side].set_visible(False)
    return fig


def two_facts_figure(accuracy: Mapping[str, Mapping[str, float]], weight_by_distance: Mapping[str, Any],
                     distances: Sequence[int], offsets: Sequence[int]) -> Figure:
    """(a) accuracy of each model on the first, the second and both facts; (b) the mean attention
    weight each head gives to the token d places back.

    accuracy: model name -> {"first", "second", "both"} fractions right.
    weight_by_distance: line label (model and head) -> mean weight at each of ``distances``.
    offsets: where the two facts are (marked on panel b).
    """
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.3), layout="constrained")
    names = list(accuracy)
    kinds = ("first", "second", "both")
    width = 0.8 / len(kinds)
    for j, kind in enumerate(kinds):
        values = [accuracy[name][kind] for name in names]
        bars = left.bar(np.arange(len(names)) + (j - 1) * width, values, width, label=f"{kind} fact" if kind != "both"
                        else "both facts", color=("#4C72B0", "#DD8452", "#55A868")[j])
        left.bar_label(bars, fmt="%.2f", fontsize=8)
    left.set_xticks(range(len(names)), labels=names)
    left.set_ylim(0, 1.25)
    left.set_ylabel("fraction right, held-out sequences")
    left.set_xlabel("model (same parameter count, same training steps)")
    left.set_title("(a) Accuracy")
    left.legend(fontsize=8, loc="upper center", ncol=len(kinds))
    for label, values in weight_by_distance.items():
        right.plot(list(distances), _numpy(values), marker="o", label=label)
    for offset in offsets:
        right.axvline(offset, color="0.6", linestyle=":")
    right.set_xticks(list(distances))
    right.set_ylim(0, 1.05)
    right.set_xlabel("distance back from the query (tokens; dotted: where the facts are)")
    right.set_ylabel("mean attention weight")
    right.set_title("(b) Where each head looks")
    right.legend(fontsize=8)
    fig.suptitle("Two facts from two places: one head against several")
    return fig


def kv_cache_size_figure(lengths: Sequence[int], sizes: Mapping[str, Sequence[float]], *, model: str,
                         reference: tuple[str, float] | None = None) -> Figure:
    """Grouped bars of KV cache sizes (GiB) at each context length, one bar per variant.

    sizes: variant label -> size in GiB at each of ``lengths``. reference: (label, GiB) drawn as a
    horizontal line (e.g. the model's own weights)."""
    fig, ax = plt.subplots(figsize=(8, 4.2), layout="constrained")
    width = 0.8 / len(sizes)
    for j, (label, values) in enumerate(sizes.items()):
        bars = ax.bar(np.arange(len(lengths)) + (j - (len(sizes) - 1) / 2) * width, values, width, label=label)
        ax.bar_label(bars, labels=[f"{v:.3f}".rstrip("0").rstrip(".") for v in values], fontsize=8)
    if reference is not None:
        ax.axhline(reference[1], color="0.3", linestyle="--", label=reference[0])
    ax.set_xticks(range(len(lengths)), labels=[f"{n:,}" for n in lengths])
    ax.set_yscale("log")
    ax.set_xlabel("tokens in the context")
    ax.set_ylabel("KV cache of one sequence (GiB, log scale)")
    ax.set_title(f"KV cache of {model} in bfloat16")
    ax.legend(fontsize=8)
    return fig


def decode_time_figure(lengths: Sequence[int], model_ms: Mapping[str, Sequence[float]],
                       grouped_ms: Mapping[str, Sequence[float]], megabytes: Mapping[str, Sequence[float]], *,
                       title: str) -> Figure:
    """Against the number of cached tokens (log-log axes), one line per variant: (a) the measured
    time of one decoding step of a whole model, (b) the measured time of the attention over the cache
    alone, computed without copying shared heads, (c) the bytes of KV cache read per token."""
    from attnlab.plots.common import line_plot

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.3), layout="constrained")
    xlabel = "tokens already in the cache (log scale)"
    line_plot(lengths, model_ms, ax=axes[0], xscale="log", yscale="log", title="(a) Whole model, one token",
              xlabel=xlabel, ylabel="milliseconds per token (log scale)")
    line_plot(lengths, grouped_ms, ax=axes[1], xscale="log", yscale="log",
              title="(b) Attention over the cache, heads not copied", xlabel=xlabel,
              ylabel="milliseconds per token (log scale)")
    line_plot(lengths, megabytes, ax=axes[2], xscale="log", yscale="log", title="(c) KV cache read per token",
              xlabel=xlabel, ylabel="megabytes read (log scale)")
    for ax in axes:
        ax.set_xticks(list(lengths), labels=[str(n) for n in lengths])
        ax.minorticks_off()
    fig.suptitle(title)
    return fig


def head_grid(weights: Any, tokens: Sequence[str], *, title: str, names: Mapping[tuple[int, int], str] | None = None) -> Figure:
    """Every head of every layer on one sentence: a grid of small heatmaps.

    weights: (n_layers, n_heads, n, n) attention weights; tokens: the n tokens.
    names: (layer, head) -> a short label (what the head was measured to do), shown in its title.
    """
    w = _numpy(weights)
    if w.ndim != 4 or w.shape[-1] != len(tokens) or w.shape[-2] != len(tokens):
        raise ValueError(f"weights must be (n_layers, n_heads, n, n) with n = {len(tokens)} tokens, got {w.shape}")
    n_layers, n_heads = w.shape[:2]
    fig, axes = plt.subplots(n_layers, n_heads, figsize=(2.6 * n_heads + 1, 2.6 * n_layers + 0.6),
                             layout="constrained", squeeze=False)
    for layer in range(n_layers):
        for head in range(n_heads):
            ax = axes[layer, head]
            image = ax.imshow(w[layer, head], cmap="Blues", vmin=0, vmax=1)
            label = (names or {}).get((layer, head), "")
            ax.set_title(f"layer {layer}, head {head}" + (f"\n{label}" if label else ""), fontsize=9)
            ticks = range(len(tokens))
            ax.set_xticks(ticks, labels=list(tokens) if layer == n_layers - 1 else [], rotation=90, fontsize=6)
            ax.set_yticks(ticks, labels=list(tokens) if head == 0 else [], fontsize=6)
    fig.supxlabel("key (attended to)")
    fig.supylabel("query (attending)")
    fig.colorbar(image, ax=axes, shrink=0.6, label="attention weight")
    fig.suptitle(title)
    return fig


def head_scores_figure(scores: Mapping[str, Any], even: Mapping[str, float], *, title: str) -> Figure:
    """One small heatmap per measured pattern: the score of every head (rows: layers, columns: heads),
    written in its cell, with what a head that attends evenly would score in the panel's title.

    scores: pattern name -> (n_layers, n_heads) scores; even: pattern name -> the even baseline.
    """
    names = list(scores)
    fig, axes = plt.subplots(1, len(names), figsize=(3.4 * len(names) + 0.6, 3.6), layout="constrained",
                             squeeze=False)
    for ax, name in zip(axes[0], names):
        s = _numpy(scores[name])
        if s.ndim != 2:
            raise ValueError(f"scores[{name!r}] must be (n_layers, n_heads), got shape {s.shape}")
        top = max(float(s.max()), 1e-9)
        ax.imshow(s, cmap="Blues", vmin=0, vmax=top)
        for (layer, head), value in np.ndenumerate(s):
            ax.text(head, layer, f"{value:.2f}", ha="center", va="center", fontsize=9,
                    color="white" if value > 0.55 * top else "black")
        ax.set_xticks(range(s.shape[1]))
        ax.set_yticks(range(s.shape[0]))
        ax.set_xlabel("head")
        ax.set_ylabel("layer")
        ax.set_title(f"{name.replace('_', ' ')}\n(attending evenly: {even[name]:.3f})", fontsize=10)
    fig.suptitle(title)
    return fig


def induction_figure(copied: Mapping[str, float], weights: Any, query_words: Sequence[str],
                     key_words: Sequence[str], *, head: str, removed_fraction: Sequence[float],
                     copied_when_pruned: Sequence[float], loss_when_pruned: Sequence[float], title: str) -> Figure:
    """The induction circuit of the course model in three panels.

    (a) the fraction of list words copied right with each set of heads masked (``copied``: label ->
    fraction); (b) the weights of induction head ``head`` from the words of a list read back
    (``query_words``, rows) to the list written earlier (``key_words``, columns); (c) as heads are
    pruned least important first, the fraction copied and the validation loss, against the
    fraction of heads removed. Bars that fall more than 0.1 below the first (all heads) are red.
    """
    fig, (left, middle, right) = plt.subplots(1, 3, figsize=(17, 4.8), layout="constrained",
                                              gridspec_kw={"width_ratios": [1.25, 1, 1]})
    labels = list(copied)
    values = [copied[label] for label in labels]
    colours = ["0.45" if i == 0 else "#C44E52" if v < values[0] - 0.1 else "#4C72B0" for i, v in enumerate(values)]
    bars = left.barh(range(len(labels)), values, color=colours)
    left.bar_label(bars, fmt="%.2f", fontsize=8, padding=2)
    left.set_yticks(range(len(labels)), labels=labels, fontsize=8)
    left.invert_yaxis()
    left.set_xlim(0, 1.12)
    left.set_xlabel("fraction of list words predicted right\n(red: 0.1 or more below all heads)")
    left.set_title("(a) Copying a list read back, heads masked")
    w = _numpy(weights)
    image = middle.imshow(w, cmap="Blues", vmin=0, vmax=1, aspect="auto")
    fig.colorbar(image, ax=middle, label="attention weight", shrink=0.9)
    middle.set_xticks(range(len(key_words)), labels=list(key_words), rotation=45, ha="right", fontsize=8)
    middle.set_yticks(range(len(query_words)), labels=list(query_words), fontsize=8)
    middle.set_xlabel("key: the list as it was written")
    middle.set_ylabel("query: the list read back")
    middle.set_title(f"(b) Induction head {head}: where it looks")
    right.plot(_numpy(removed_fraction), _numpy(copied_when_pruned), marker="o", color="#C44E52",
               label="list words copied (left axis)")
    right.set_ylim(0, 1.05)
    right.set_xlabel("fraction of heads removed (least important first, by loss)")
    right.set_ylabel("fraction of list words predicted right")
    right.set_title("(c) Pruning: copying against loss")
    twin = right.twinx()
    twin.plot(_numpy(removed_fraction), _numpy(loss_when_pruned), marker="s", color="0.3", linestyle="--",
              label="validation loss (right axis)")
    twin.set_ylabel("validation loss (nats per word)")
    lines = right.get_lines() + twin.get_lines()
    right.legend(lines, [line.get_label() for line in lines], fontsize=8, loc="center left",
                 bbox_to_anchor=(0.0, 0.62))
    right.grid(True, alpha=0.3)
    fig.suptitle(title)
    return fig


def pruning_figure(fractions: Mapping[str, Sequence[float]], losses: Mapping[str, Sequence[float]], *,
                   full_loss: float, title: str) -> Figure:
    """Validation loss against the fraction of heads removed, one line per pruning order."""
    fig, ax = _axes(None, (7, 4.2))
    for label in losses:
        ax.plot(_numpy(fractions[label]), _numpy(losses[label]), marker="o", ms=3, label=label)
    ax.axhline(full_loss, color="0.5", linestyle=":", label="all heads")
    ax.set_xlabel("fraction of heads removed")
    ax.set_ylabel("validation loss (nats per token)")
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    return fig


def head_viewer(weights_of: Callable[[Any, Any], Any], loss_of: Callable[[Any], float],
                sentences: Mapping[str, tuple[Any, Sequence[str]]], n_layers: int, n_heads: int,
                roles: Mapping[tuple[int, int], str] | None = None) -> Callable[..., Figure]:
    """The drawing function of the interactive head viewer: ``draw(layer, head, sentence, prune)``.

    weights_of(tokens, mask): the model's attention weights on ``tokens`` with head ``mask``
    (n_layers, n_heads) applied, as (n_layers, n_heads, n, n); loss_of(mask): its validation loss
    with that mask. sentences: label -> (token ids, words). roles: (layer, head) -> what it was
    measured to do. The viewer remembers every head it has shown; with ``prune`` every one of them
    is masked, so the learner prunes heads by looking at them and sees the loss change.
    """
    import torch

    shown: list[tuple[int, int]] = []
    losses: dict[frozenset, float] = {}

    def loss(pruned: Sequence[tuple[int, int]]) -> float:
        key = frozenset(pruned)
        if key not in losses:
            losses[key] = float(loss_of(_mask(pruned)))
        return losses[key]

    def _mask(pruned):
        mask = torch.ones(n_layers, n_heads)
        for layer, head in pruned:
            mask[layer, head] = 0.0
        return mask

    def draw(layer: int, head: int, sentence: str, prune: bool) -> Figure:
        if not (0 <= layer < n_layers and 0 <= head < n_heads):
            raise ValueError(f"layer must be in 0..{n_layers - 1} and head in 0..{n_heads - 1}")
        if (layer, head) not in shown:
            shown.append((layer, head))
        pruned = list(shown) if prune else []
        tokens, words = sentences[sentence]
        weights = weights_of(tokens, _mask(pruned))[layer, head]
        note = (roles or {}).get((layer, head), "")
        if (layer, head) in pruned:
            note = (note + "; " if note else "") + "pruned: its output is multiplied by 0"
        return head_viewer_figure(weights, words, layer=layer, head=head, loss=loss(pruned),
                                  full_loss=loss([]), pruned=pruned, note=note)

    draw.shown = shown  # the heads shown so far, for tests and curious learners
    return draw


def head_viewer_figure(weights: Any, tokens: Sequence[str], *, layer: int, head: int, loss: float,
                       full_loss: float, pruned: Sequence[tuple[int, int]], note: str = "") -> Figure:
    """One head's weights on a sentence, with the model's validation loss (and which heads are pruned)."""
    fig, ax = plt.subplots(figsize=(7.5, 6), layout="constrained")
    attention_heatmap(weights, list(tokens), list(tokens), ax=ax, annotate=False,
                      title=f"Layer {layer}, head {head}" + (f" ({note})" if note else ""))
    removed = ", ".join(f"L{l}H{h}" for l, h in pruned) or "none"
    ax.set_xlabel(f"key (attended to)\nheads pruned: {removed}; validation loss {loss:.3f} "
                  f"(all heads: {full_loss:.3f})")
    return fig
