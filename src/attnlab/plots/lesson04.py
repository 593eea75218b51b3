"""Figures of lesson 04: heads side by side, the two-facts experiment, KV cache sizes and times,
the heads of the course model and their measured scores, head pruning, the induction circuit,
grouped-query uptraining, the interactive head viewer, the repeated-sequences test of induction and
the phase change replayed from the course model's training record.

Every function returns a matplotlib ``Figure`` with a title and labelled axes, at most 9.6 inches
wide (the notebook's width at 100 dpi), with no text under 7 points and at least three labelled
ticks on every logarithmic axis.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure
from matplotlib.patches import FancyArrowPatch, Rectangle
from matplotlib.ticker import NullLocator

from attnlab.plots.common import _axes, _numpy, attention_heatmap

__all__ = [
    "decode_time_figure",
    "gqa_uptraining_figure",
    "head_grid",
    "head_viewer",
    "head_viewer_figure",
    "head_scores_figure",
    "heads_diagram",
    "induction_figure",
    "induction_test_figure",
    "kv_cache_size_figure",
    "phase_change_figure",
    "pruning_figure",
    "two_facts_figure",
]

_HEAD_COLOURS = ("#4C72B0", "#DD8452", "#55A868", "#C44E52", "#8172B3", "#937860", "#DA8BC3", "#8C8C8C")


def _log_ticks(ax, values: Sequence[float], axis: str = "y") -> None:
    """Label a logarithmic axis with at least three round numbers between the smallest and the
    largest of ``values`` (1, 2, 5 per decade, or more per decade when the range is narrow), so
    that it can be read without counting minor ticks."""
    v = np.asarray([x for x in np.ravel(np.asarray(values, dtype=float)) if x > 0])
    low, high = v.min(), v.max()
    ticks: list[float] = []
    for multipliers in ((1,), (1, 2, 5), (1, 2, 3, 5, 7), tuple(range(1, 10))):
        ticks = [m * 10.0 ** e for e in range(int(np.floor(np.log10(low))) - 1, int(np.ceil(np.log10(high))) + 1)
                 for m in multipliers if low / 1.0001 <= m * 10.0 ** e <= high * 1.0001]
        if len(ticks) >= 3:
            break
    if len(ticks) < 3:  # a range too narrow for round numbers: the extremes and their geometric mean
        ticks = [low, float(np.sqrt(low * high)), high]
    target = ax.yaxis if axis == "y" else ax.xaxis
    (ax.set_yticks if axis == "y" else ax.set_xticks)(ticks, labels=[f"{t:.3g}" for t in ticks])
    target.set_minor_locator(NullLocator())


def heads_diagram(d_model: int = 12, n_heads: int = 3) -> Figure:
    """One token's query vector cut into ``n_heads`` consecutive slices, each attending on its own.

    The top row is the d_model features of one token's query (the same cut applies to its key and
    value); each slice of h = d_model // n_heads features goes to its own head, which computes its
    own weights over the keys; the heads' outputs are put side by side again and mixed by W_O.
    """
    if d_model % n_heads:
        raise ValueError(f"d_model={d_model} is not divisible by n_heads={n_heads}")
    h = d_model // n_heads
    fig, ax = plt.subplots(figsize=(9.4, 4.2), layout="constrained")
    for i in range(d_model):
        head = i // h
        colour = _HEAD_COLOURS[head % len(_HEAD_COLOURS)]
        ax.add_patch(Rectangle((i, 6), 0.9, 0.9, color=colour))
        ax.add_patch(Rectangle((i, 0), 0.9, 0.9, color=colour))
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
    ax.set_xlim(-0.3, d_model + 0.2)
    ax.set_ylim(-0.5, 7.3)
    ax.set_title(f"Multi-head attention: d_model = {d_model} features, {n_heads} heads of h = {h}")
    ax.set_xlabel("feature index (colour = head)")
    ax.set_ylabel("one token, top to bottom")
    ax.set_yticks([6.45, 3.5, 0.45], labels=["its query\n(d_model features)", "each head\non its slice",
                                             "heads' outputs\nside by side,\nthen W_O"], fontsize=9)
    ax.tick_params(axis="y", length=0)
    ax.set_xticks([i + 0.45 for i in range(d_model)], labels=[str(i) for i in range(d_model)], fontsize=8)
    for side in ("left", "right", "top"):
        ax.spines[side].set_visible(False)
    return fig


def two_facts_figure(curves: Mapping[str, tuple[Sequence[int], Any]], weight_by_distance: Mapping[str, Any],
                     distances: Sequence[int], offsets: Sequence[int]) -> Figure:
    """(a) the fraction of held-out positions with both facts right against training steps, one
    line per model (the mean over seeds, shaded from the lowest to the highest seed); (b) the mean
    attention weight each head gives to the token d places back.

    curves: model name -> (steps, accuracies of shape (seeds, len(steps))).
    weight_by_distance: line label (model and head) -> mean weight at each of ``distances``.
    offsets: where the two facts are (marked on panel b).
    """
    fig, (left, right) = plt.subplots(1, 2, figsize=(9.4, 4.1), layout="constrained",
                                      gridspec_kw={"width_ratios": [1.25, 1]})
    for j, (name, (steps, runs)) in enumerate(curves.items()):
        y = np.atleast_2d(_numpy(runs))
        x = np.asarray(steps)
        if y.shape[-1] != len(x):
            raise ValueError(f"curves[{name!r}] has {y.shape[-1]} accuracies for {len(x)} steps")
        colour = _HEAD_COLOURS[j % len(_HEAD_COLOURS)]
        left.plot(x, y.mean(axis=0), color=colour, label=f"{name} (mean of {y.shape[0]} seeds)")
        left.fill_between(x, y.min(axis=0), y.max(axis=0), color=colour, alpha=0.25, linewidth=0)
    left.set_ylim(0, 1.04)
    left.set_xlabel("training steps (batches of 64 sequences)")
    left.set_ylabel("both facts right (held-out positions)")
    left.set_title("(a) Learning curves, same parameters\n(shaded: lowest to highest seed)", fontsize=10)
    left.grid(True, alpha=0.3)
    left.legend(fontsize=8, loc="center right")
    for label, values in weight_by_distance.items():
        right.plot(list(distances), _numpy(values), marker="o", label=label)
    for offset in offsets:
        right.axvline(offset, color="0.6", linestyle=":")
    right.set_xticks(list(distances))
    right.set_ylim(0, 1.05)
    right.set_xlabel("distance back (tokens; dotted: the facts)")
    right.set_ylabel("mean attention weight")
    right.set_title("(b) Where each head looks", fontsize=10)
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
    _log_ticks(ax, [v for values in sizes.values() for v in values] + ([reference[1]] if reference else []))
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
    alone, computed without copying shared heads, (c) the bytes of KV cache read per token.
    One legend for the three panels, under them."""
    fig, axes = plt.subplots(1, 3, figsize=(9.4, 4.0), layout="constrained")
    panels = ((model_ms, "(a) Whole model", "ms per token (log)"),
              (grouped_ms, "(b) Attention over the cache,\nshared heads not copied", "ms per token (log)"),
              (megabytes, "(c) Cache read per token", "megabytes read (log)"))
    for ax, (series, panel_title, ylabel) in zip(axes, panels):
        for j, (label, values) in enumerate(series.items()):
            ax.plot(list(lengths), _numpy(values), marker="o", ms=4, color=_HEAD_COLOURS[j % len(_HEAD_COLOURS)],
                    label=label)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xticks(list(lengths), labels=[f"{n:,}" for n in lengths])
        ax.xaxis.set_minor_locator(NullLocator())
        _log_ticks(ax, [v for values in series.values() for v in values])
        ax.set_xlabel("tokens in the cache (log)")
        ax.set_ylabel(ylabel)
        ax.set_title(panel_title, fontsize=10)
        ax.grid(True, alpha=0.3)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncol=len(labels), fontsize=9)
    fig.suptitle(title)
    return fig


def head_grid(weights: Any, tokens: Sequence[str], *, title: str, names: Mapping[tuple[int, int], str] | None = None) -> Figure:
    """Every head of every layer on one sentence: a grid of small heatmaps.

    weights: (n_layers, n_heads, n, n) attention weights; tokens: the n tokens (their positions,
    counting from 0, label the axes: the words of a passage do not fit under panels this small;
    print them with their positions beside the figure).
    names: (layer, head) -> a short label (what the head was measured to do), shown in its title.
    """
    w = _numpy(weights)
    if w.ndim != 4 or w.shape[-1] != len(tokens) or w.shape[-2] != len(tokens):
        raise ValueError(f"weights must be (n_layers, n_heads, n, n) with n = {len(tokens)} tokens, got {w.shape}")
    n_layers, n_heads = w.shape[:2]
    side = min(2.1, 8.6 / n_heads)
    fig, axes = plt.subplots(n_layers, n_heads, figsize=(side * n_heads + 1.0, side * n_layers + 0.8),
                             layout="constrained", squeeze=False, sharex=True, sharey=True)
    step = max(1, int(np.ceil(len(tokens) / 4 / 4)) * 4)  # about four ticks, at multiples of 4
    ticks = list(range(0, len(tokens), step))
    for layer in range(n_layers):
        for head in range(n_heads):
            ax = axes[layer, head]
            image = ax.imshow(w[layer, head], cmap="Blues", vmin=0, vmax=1)
            label = (names or {}).get((layer, head), "")
            ax.set_title(f"layer {layer}, head {head}" + (f"\n{label}" if label else ""), fontsize=9)
            ax.set_xticks(ticks, labels=[str(t) for t in ticks], fontsize=8)
            ax.set_yticks(ticks, labels=[str(t) for t in ticks], fontsize=8)
            ax.set_xlabel("key", fontsize=8, labelpad=1)
            ax.set_ylabel("query", fontsize=8, labelpad=1)
    fig.supxlabel("positions of the keys (attended to) and queries (attending), counting from 0", fontsize=10)
    fig.colorbar(image, ax=axes, shrink=0.6, label="attention weight")
    fig.suptitle(title)
    return fig


def head_scores_figure(scores: Mapping[str, Any], even: Mapping[str, float], *, title: str) -> Figure:
    """One small heatmap per measured pattern: the score of every head (rows: layers, columns: heads),
    written in its cell, with what a head that attends evenly would score in the panel's title.

    scores: pattern name -> (n_layers, n_heads) scores; even: pattern name -> the even baseline.
    """
    names = list(scores)
    columns = min(2, len(names))
    rows = -(-len(names) // columns)
    fig, axes = plt.subplots(rows, columns, figsize=(3.6 * columns + 0.8, 3.1 * rows + 0.5), layout="constrained",
                             squeeze=False)
    for ax in axes.flat[len(names):]:
        ax.set_visible(False)
    for ax, name in zip(axes.flat, names):
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
    """The induction circuit of the course model in four panels.

    (a) the fraction of list words copied right with each set of heads masked (``copied``: label ->
    fraction); (b) the weights of induction head ``head`` from the words of a list read back
    (``query_words``, rows) to the list written earlier (``key_words``, columns); as heads are
    pruned least important first, against the fraction of heads removed, (c) the fraction copied
    and (d) the validation loss. Bars that fall more than 0.1 below the first (all heads) are red.
    """
    fig, axes = plt.subplot_mosaic([["a", "a"], ["b", "c"], ["b", "d"]], figsize=(9.4, 9.0), layout="constrained",
                                   height_ratios=[1.25, 1, 1])
    bars_ax, heat, copy_ax, loss_ax = axes["a"], axes["b"], axes["c"], axes["d"]
    labels = list(copied)
    values = [copied[label] for label in labels]
    colours = ["0.45" if i == 0 else "#C44E52" if v < values[0] - 0.1 else "#4C72B0" for i, v in enumerate(values)]
    bars = bars_ax.barh(range(len(labels)), values, color=colours)
    bars_ax.bar_label(bars, fmt="%.2f", fontsize=9, padding=2)
    bars_ax.set_yticks(range(len(labels)), labels=labels, fontsize=9)
    bars_ax.invert_yaxis()
    bars_ax.set_xlim(0, 1.1)
    bars_ax.set_xlabel("fraction of list words predicted right (red: 0.1 or more below all heads)")
    bars_ax.set_ylabel("heads masked")
    bars_ax.set_title("(a) Copying a list read back, heads masked", fontsize=10)
    w = _numpy(weights)
    image = heat.imshow(w, cmap="Blues", vmin=0, vmax=1, aspect="auto")
    fig.colorbar(image, ax=heat, label="attention weight", shrink=0.8, location="bottom")
    heat.set_xticks(range(len(key_words)), labels=list(key_words), rotation=45, ha="right", fontsize=9)
    heat.set_yticks(range(len(query_words)), labels=list(query_words), fontsize=9)
    heat.set_xlabel("key: the list as it was written")
    heat.set_ylabel("query: the list read back")
    heat.set_title(f"(b) Induction head {head}: where it looks", fontsize=10)
    fraction = _numpy(removed_fraction)
    copy_ax.plot(fraction, _numpy(copied_when_pruned), marker="o", ms=4, color="#C44E52")
    copy_ax.set_ylim(0, 1.05)
    copy_ax.set_ylabel("list words right")
    copy_ax.set_xlabel("fraction of heads removed")
    copy_ax.set_title("(c) Pruning least important first (by loss):\ncopying", fontsize=10)
    loss_ax.plot(fraction, _numpy(loss_when_pruned), marker="s", ms=4, color="0.3", linestyle="--")
    loss_ax.set_ylabel("validation loss\n(nats per word)")
    loss_ax.set_xlabel("fraction of heads removed")
    loss_ax.set_title("(d) ... and the loss", fontsize=10)
    for ax in (copy_ax, loss_ax):
        ax.grid(True, alpha=0.3)
    fig.suptitle(title)
    return fig


def gqa_uptraining_figure(losses: Mapping[str, Mapping[str, float]], cache_mib: Mapping[str, float], *,
                          full_loss: float, title: str) -> Figure:
    """Turning multi-head attention into grouped-query attention: (a) the validation loss of each
    variant as converted and after a short fine-tune, against the original model's; (b) the KV cache
    each variant needs.

    losses: variant label -> {"converted": loss, "fine-tuned": loss} (nats per word).
    cache_mib: variant label -> cache size (MiB); the original model's entry may be among them.
    """
    fig, (left, right) = plt.subplots(1, 2, figsize=(9.4, 3.9), layout="constrained")
    names = list(losses)
    kinds = ("converted", "fine-tuned")
    width = 0.38
    for j, kind in enumerate(kinds):
        values = [losses[name][kind] for name in names]
        bars = left.bar(np.arange(len(names)) + (j - 0.5) * width, values, width,
                        label=f"{kind}", color=("#DD8452", "#4C72B0")[j])
        left.bar_label(bars, fmt="%.2f", fontsize=8)
    left.axhline(full_loss, color="0.3", linestyle="--", label=f"original, 4 key/value heads ({full_loss:.2f})")
    left.set_xticks(range(len(names)), labels=names)
    left.set_ylim(0, 1.2 * max(max(v.values()) for v in losses.values()))
    left.set_xlabel("key/value heads per layer")
    left.set_ylabel("validation loss (nats per word)")
    left.set_title("(a) Loss, converted and fine-tuned", fontsize=10)
    left.legend(fontsize=8, loc="upper left")
    labels = list(cache_mib)
    bars = right.bar(range(len(labels)), [cache_mib[label] for label in labels], color="#55A868")
    right.bar_label(bars, fmt="%g", fontsize=8)
    right.set_xticks(range(len(labels)), labels=labels)
    right.set_ylim(0, 1.2 * max(cache_mib.values()))
    right.set_xlabel("key/value heads per layer")
    right.set_ylabel("KV cache (MiB)")
    right.set_title("(b) Cache of the serving budget's batch", fontsize=10)
    fig.suptitle(title)
    return fig


def pruning_figure(fractions: Mapping[str, Sequence[float]], losses: Mapping[str, Sequence[float]], *,
                   full_loss: float, title: str) -> Figure:
    """Validation loss against the fraction of heads removed, one line per pruning order."""
    fig, ax = _axes(None, (8.4, 4.4))
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


def induction_test_figure(scores: Mapping[str, Any], halves: Mapping[str, tuple[float, float]], *, title: str) -> Figure:
    """The repeated-sequences test of induction, side by side for several cases.

    scores: case -> (n_layers, n_heads) induction scores (one heatmap each, every head's score
    written in its cell); halves: case -> (loss on the first half, loss on the second half), drawn
    as pairs of bars in nats per word.
    """
    cases = list(scores)
    fig, axes = plt.subplot_mosaic([[f"s{i}" for i in range(len(cases))], ["bars"] * len(cases)],
                                   figsize=(9.4, 6.6), layout="constrained", height_ratios=[1.15, 1])
    image = None
    for i, case in enumerate(cases):
        ax = axes[f"s{i}"]
        s = _numpy(scores[case])
        image = ax.imshow(s, cmap="Blues", vmin=0, vmax=1)
        n_layers, n_heads = s.shape
        for layer in range(n_layers):
            for head in range(n_heads):
                ax.text(head, layer, f"{s[layer, head]:.2f}", ha="center", va="center", fontsize=8,
                        color="white" if s[layer, head] > 0.55 else "black")
        ax.set_xticks(range(n_heads), labels=[str(h) for h in range(n_heads)])
        ax.set_yticks(range(n_layers), labels=[str(l) for l in range(n_layers)])
        ax.set_xlabel("head")
        ax.set_ylabel("layer")
        ax.set_title(f"({'abc'[i]}) {case}", fontsize=10)
    fig.colorbar(image, ax=[axes[f"s{i}"] for i in range(len(cases))], label="induction score", shrink=0.9)
    bars = axes["bars"]
    x = np.arange(len(cases))
    for offset, (index, label, colour) in zip((-0.18, 0.18), ((0, "first half", "0.6"), (1, "second half (a repeat)", "#4C72B0"))):
        values = [halves[case][index] for case in cases]
        drawn = bars.bar(x + offset, values, width=0.34, label=label, color=colour)
        bars.bar_label(drawn, fmt="%.2f", fontsize=9, padding=2)
    bars.set_xticks(x, labels=cases)
    bars.set_ylabel("loss (nats per word)")
    bars.set_xlabel("the sequences the model reads")
    bars.set_ylim(0, 1.15 * max(max(v) for v in halves.values()))
    bars.set_title(f"({'abcdefg'[len(cases)]}) Next-word loss on each half", fontsize=10)
    bars.legend(fontsize=9, loc="upper right")
    fig.suptitle(title)
    return fig


def _formation_span(ax, span: tuple[int, int] | None) -> None:
    if span is not None:
        ax.axvspan(*span, color="#DD8452", alpha=0.15, lw=0)


def phase_change_figure(record: Mapping[str, Any], *, induction_heads: Sequence[tuple[int, int]],
                        previous_heads: Sequence[tuple[int, int]], span: tuple[int, int] | None = None,
                        title: str) -> Figure:
    """The course model's training replayed from its record (``attnlab.zoo.phase``), against step:

    (a) the training loss (mean of the last steps) and the validation loss; (b) the loss on the
    first and the second half of random lists written and read back and of ARENA's repeated random
    tokens; (c) every head's induction score on the random lists, ``induction_heads`` in colour;
    (d) every head's previous-token score on them, ``previous_heads`` in colour. ``span``: the
    steps over which the induction heads formed, shaded in every panel.
    """
    points = record["points"]
    steps = np.array([p["step"] for p in points])
    fig, axes = plt.subplots(2, 2, figsize=(9.4, 6.8), layout="constrained", sharex=True)
    (loss_ax, halves_ax), (ind_ax, prev_ax) = axes
    trained = [(p["step"], p["train_loss"]) for p in points if p["train_loss"] is not None]
    loss_ax.plot([s for s, _ in trained], [v for _, v in trained], color="0.45", label="training (mean of 20 steps)")
    loss_ax.plot(steps, [p["validation"]["loss"] for p in points], color="#4C72B0", label="validation")
    loss_ax.set_ylabel("loss (nats per word)")
    loss_ax.set_title("(a) The loss while it trained", fontsize=10)
    for probe, style, name in (("lists", "-", "random lists"), ("random", ":", "random tokens (ARENA)")):
        halves_ax.plot(steps, [p[probe]["first_half_loss"] for p in points], linestyle=style, color="0.45",
                       label=f"{name}: first half")
        halves_ax.plot(steps, [p[probe]["second_half_loss"] for p in points], linestyle=style, color="#C44E52",
                       label=f"{name}: second half")
    halves_ax.set_ylabel("loss (nats per word)")
    halves_ax.set_title("(b) Repeated sequences: each half", fontsize=10)
    for ax, key, chosen, name in ((ind_ax, "induction", induction_heads, "induction"),
                                  (prev_ax, "previous_token", previous_heads, "previous-token")):
        scores = np.array([p["lists"][key] for p in points])       # (points, layers, heads)
        n_layers, n_heads = scores.shape[1:]
        for layer in range(n_layers):
            for head in range(n_heads):
                if (layer, head) not in chosen:
                    ax.plot(steps, scores[:, layer, head], color="0.8", lw=0.8)
        for colour, (layer, head) in zip(_HEAD_COLOURS, chosen):
            ax.plot(steps, scores[:, layer, head], color=colour, lw=2, label=f"L{layer}H{head}")
        ax.plot([], [], color="0.8", lw=0.8, label="the other heads")
        ax.set_ylim(0, 1)
        ax.set_ylabel(f"{name} score")
        ax.set_xlabel("training step")
        ax.set_title(f"({'c' if key == 'induction' else 'd'}) Every head's {name} score (random lists)", fontsize=10)
    for ax in axes.flat:
        _formation_span(ax, span)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8, loc="best")
    loss_ax.set_xlabel("training step")
    halves_ax.set_xlabel("training step")
    fig.suptitle(title)
    return fig
