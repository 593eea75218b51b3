"""Figures of lesson 07: the three arrangements and their masks, accuracy and timing curves, the
two senses of "bank", what top-k and top-p sampling keep, the masks of the pretraining objectives,
and the interactive generation view.

Every figure fits the notebook's width (at most 9.6 inches at 100 dpi) with text of 8 points or more.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure

from attnlab.plots.common import _axes, _box, _numpy

__all__ = ["arrangements_figure", "generation_figure", "generation_view", "objectives_figure", "sampling_figure",
           "sense_scatter", "time_per_token_figure"]


def _mask_panel(ax, allowed: np.ndarray, rows: Sequence[str], cols: Sequence[str], title: str,
                xlabel: str, ylabel: str) -> None:
    ax.imshow(allowed, cmap="Greens", vmin=0, vmax=1.4)
    ax.set_xticks(range(len(cols)), labels=list(cols), rotation=45, ha="right", fontsize=8)
    ax.set_yticks(range(len(rows)), labels=list(rows), fontsize=8)
    ax.set_xticks(np.arange(-0.5, len(cols)), minor=True)
    ax.set_yticks(np.arange(-0.5, len(rows)), minor=True)
    ax.grid(which="minor", color="white", linewidth=1.5)
    ax.tick_params(which="minor", length=0)
    ax.set_title(title, fontsize=10)
    ax.set_xlabel(xlabel, fontsize=9)
    ax.set_ylabel(ylabel, fontsize=9)


def arrangements_figure(source: Sequence[str] = ("3", "1", "4", "1", "5"),
                        text: Sequence[str] = ("the", "bank", "approved", "the", "loan")) -> Figure:
    """The three arrangements of one block (top) and who may attend to whom in each (bottom):
    an encoder's self-attention sees everything, a decoder's is causal, and an encoder-decoder's
    cross-attention lets every target token read every source token."""
    fig, axes = plt.subplots(2, 3, figsize=(9.5, 6.8), layout="constrained",
                             gridspec_kw={"height_ratios": [1.15, 1]})
    columns = [
        ("Encoder-only (BERT)", ["embeddings", "N × encoder block\n(self-attention: all)", "classifier"],
         "#dbe9f6"),
        ("Decoder-only (GPT, course model)",
         ["embeddings", "N × decoder block\n(self-attention: causal)", "language-model head\n(next token)"], "#fde2c8"),
        ("Encoder-decoder (T5, Whisper)",
         ["source → encoder blocks", "target → decoder blocks\n(causal self + cross-attention)",
          "language-model head"], "#e2f0d9"),
    ]
    for ax, (title, boxes, colour) in zip(axes[0], columns):
        ax.set_xlim(0, 4)
        ax.set_ylim(0, 4.2)
        ax.axis("off")
        ax.set_title(title, fontsize=10)
        for level, label in enumerate(boxes):
            _box(ax, 2.0, 0.6 + 1.35 * level, label, colour, width=3.8, height=0.9)
            if level:
                ax.annotate("", xy=(2.0, 0.6 + 1.35 * level - 0.47), xytext=(2.0, 0.6 + 1.35 * (level - 1) + 0.47),
                            arrowprops={"arrowstyle": "->", "lw": 1.3})
    n = len(text)
    _mask_panel(axes[1, 0], np.ones((n, n)), text, text, "encoder: every pair",
                "key (attended to)", "query (attending)")
    _mask_panel(axes[1, 1], np.tril(np.ones((n, n))), text, text, "decoder: the past only",
                "key (attended to)", "query (attending)")
    target = [f"y{i + 1}" for i in range(len(source))]
    _mask_panel(axes[1, 2], np.ones((len(target), len(source))), target, source,
                "cross-attention: target reads source", "source token (key)", "target token (query)")
    fig.suptitle("One block, three arrangements (green: may attend)", fontsize=13)
    return fig


def time_per_token_figure(lengths: Sequence[int], series: Mapping[str, Any], *,
                          title: str = "Time to generate one token") -> Figure:
    """Milliseconds per generated token against the length of the text so far, one line per
    way of generating (``series``: label -> ms for each length)."""
    fig, ax = _axes(None, (6.0, 3.8))
    for label, values in series.items():
        ax.plot(lengths, _numpy(values), marker="o", ms=3, label=label)
    ax.set_title(title)
    ax.set_xlabel("length of the text so far (tokens)")
    ax.set_ylabel("time per new token (ms)")
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=9)
    return fig


def sense_scatter(points: Any, senses: Sequence[int], *, labels: Sequence[str] = ("money", "river"),
                  title: str = 'The hidden vector of "bank", projected to two dimensions',
                  ax=None) -> Figure:
    """Scatter of 2-d points (one per occurrence of "bank"), coloured by sense."""
    xy = _numpy(points)
    senses = np.asarray(senses)
    fig, ax = _axes(ax, (5.5, 4.4))
    for value, (label, colour, marker) in enumerate(zip(labels, ("#1f77b4", "#2ca02c"), ("o", "^"))):
        chosen = senses == value
        ax.scatter(xy[chosen, 0], xy[chosen, 1], s=18, alpha=0.7, color=colour, marker=marker,
                   label=f'"bank" in a {label} sentence ({int(chosen.sum())})')
    ax.set_title(title, fontsize=10)
    ax.set_xlabel("first principal component")
    ax.set_ylabel("second principal component")
    ax.legend(fontsize=8)
    ax.grid(True, alpha=0.3)
    return fig


def generation_figure(words: Sequence[str], n_prompt: int, weights: Any, step: int, *,
                      title: str = "Generating, one token at a time") -> Figure:
    """The text generated so far and, for the token written at ``step`` (1 = the first new
    token), the attention its prediction paid to every earlier token (bars).

    words: the prompt and the generated tokens; weights: (n_steps, len(words)) attention of each
    step's query (the last token read) over the tokens, zero beyond it.
    """
    w = _numpy(weights)
    if not 1 <= step <= w.shape[0]:
        raise ValueError(f"step must be between 1 and {w.shape[0]}, got {step}")
    upto = n_prompt + step - 1            # tokens read when choosing the new one
    # As wide as the words need, up to the notebook's width (9.6 inches at 100 dpi).
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(min(9.5, max(6.0, 0.55 * upto + 1.5)), 4.6), layout="constrained",
                                      gridspec_kw={"height_ratios": [3, 1]})
    bars = top.bar(range(upto), w[step - 1, :upto], color=["#9ecae1" if i < n_prompt else "#fdae6b"
                                                          for i in range(upto)])
    bars[int(np.argmax(w[step - 1, :upto]))].set_edgecolor("black")
    top.set_xticks(range(upto), labels=list(words[:upto]), rotation=45, ha="right", fontsize=9)
    top.set_ylim(0, 1)
    top.set_ylabel("attention weight")
    top.set_xlabel("tokens read so far (blue: prompt, orange: generated)")
    top.set_title(f'{title}: step {step} writes "{words[upto]}"', fontsize=11)
    bottom.axis("off")
    bottom.set_title("the text so far (| ends the prompt, [ ] marks the word this step writes)", fontsize=9, loc="left")
    shown = " ".join(words[:n_prompt]) + " | " + " ".join(
        f"[{word}]" if i == upto else word for i, word in enumerate(words[n_prompt:upto + 1], start=n_prompt))
    bottom.text(0.0, 0.5, shown, fontsize=10, va="center", ha="left", wrap=True, transform=bottom.transAxes)
    return fig


def generation_view(run: Callable[[str, str, str], tuple[list[str], int, Any]]) -> Callable[..., Figure]:
    """A ``draw(prompt, step, layer, head="mean")`` for ``interactive_figure``: ``run(prompt,
    layer, head)`` returns (words, n_prompt, weights) as ``generation_figure`` takes them, for one
    layer and one head ("mean": the mean of the layer's heads). Results are kept per prompt, layer
    and head, so moving the step slider redraws at once."""
    cache: dict[tuple[str, str, str], tuple] = {}

    def draw(prompt: str, step: int, layer: str, head: str = "mean") -> Figure:
        key = (prompt, str(layer), str(head))
        if key not in cache:
            cache[key] = run(*key)
        words, n_prompt, weights = cache[key]
        which = "mean of the heads" if str(head) == "mean" else f"head {head}"
        return generation_figure(words, n_prompt, weights, min(int(step), _numpy(weights).shape[0]),
                                 title=f"Generating (layer {layer}, {which})")

    return draw


def sampling_figure(distributions: Mapping[str, tuple[Sequence[str], Any]], *, top_k: int, top_p: float,
                    nucleus_sizes: Any = None, shown: int = 12) -> Figure:
    """What top-k and top-p (nucleus) sampling keep of a next-word distribution.

    distributions: panel title -> (words, probabilities): the vocabulary (len V) and one next-word
    distribution (V,). Each panel draws the ``shown`` most likely words as bars, dark where top-p
    keeps the word (the fewest most likely words whose probabilities add up to ``top_p``), and a
    dashed line after the ``top_k``-th word (top-k keeps those to its left). nucleus_sizes: how many
    words top-p keeps at each of many positions (any length); drawn as a histogram in a last panel.
    """
    if top_k < 1 or not 0 < top_p <= 1:
        raise ValueError(f"need top_k >= 1 and 0 < top_p <= 1, got top_k={top_k}, top_p={top_p}")
    panels = len(distributions) + (nucleus_sizes is not None)
    rows = (panels + 1) // 2
    fig, axes = plt.subplots(rows, 2, figsize=(9.5, 3.2 * rows), layout="constrained", squeeze=False)
    for ax, (title, (words, probabilities)) in zip(axes.flat, distributions.items()):
        p = _numpy(probabilities).astype(float)
        if p.ndim != 1 or len(p) != len(words):
            raise ValueError(f"panel {title!r}: probabilities must be (V,) for V = {len(words)} words, got {p.shape}")
        order = np.argsort(-p)
        sorted_p = p[order]
        kept = int(np.sum(np.cumsum(sorted_p) - sorted_p < top_p))      # the nucleus: words before p is reached
        n = min(shown, len(p))
        ax.bar(range(n), sorted_p[:n], color=["#08519c" if i < kept else "#c6dbef" for i in range(n)])
        ax.axvline(top_k - 0.5, color="#d62728", linestyle="--", linewidth=1.2)
        ax.text(top_k - 0.4, 0.97, f"top-{top_k}", color="#d62728", fontsize=9, va="top", ha="left",
                transform=ax.get_xaxis_transform())
        ax.set_xticks(range(n), labels=[words[i] for i in order[:n]], rotation=45, ha="right", fontsize=9)
        ax.set_ylim(0, 1)
        ax.set_ylabel("probability")
        ax.set_xlabel(f"the {n} most likely next words (dark: top-p {top_p} keeps {kept})")
        ax.set_title(title, fontsize=10)
    used = len(distributions)
    if nucleus_sizes is not None:
        ax = axes.flat[used]
        sizes = _numpy(nucleus_sizes).ravel()
        ax.hist(sizes, bins=np.arange(0.5, sizes.max() + 1.5, 1), color="#6baed6")
        ax.axvline(top_k, color="#d62728", linestyle="--", linewidth=1.2, label=f"top-k keeps {top_k}")
        ax.set_xlabel(f"words top-p {top_p} keeps")
        ax.set_ylabel("positions")
        ax.set_title(f"How many words top-p keeps, over {len(sizes)} held-out positions", fontsize=10)
        ax.legend(fontsize=9)
        used += 1
    for ax in list(axes.flat)[used:]:
        ax.set_visible(False)
    fig.suptitle(f"Top-k (k = {top_k}) keeps a fixed number of words; top-p (p = {top_p}) as many as it takes",
                 fontsize=11)
    return fig


def objectives_figure(examples: Sequence[Mapping[str, Any]]) -> Figure:
    """The attention masks of pretraining objectives, one panel each.

    examples: one mapping per objective with "title", "queries" and "keys" (token labels of the
    rows and columns), "allowed" (a boolean (len(queries), len(keys)) array: True may attend) and
    "loss" (the indices of the rows whose prediction is trained, drawn in red).
    """
    cols = 2 if len(examples) > 1 else 1
    rows = (len(examples) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(9.5, 4.3 * rows), layout="constrained", squeeze=False)
    for ax, example in zip(axes.flat, examples):
        allowed = np.asarray(example["allowed"], dtype=float)
        queries, keys = list(example["queries"]), list(example["keys"])
        if allowed.shape != (len(queries), len(keys)):
            raise ValueError(f"{example['title']!r}: allowed has shape {allowed.shape}, expected "
                             f"({len(queries)}, {len(keys)}) for the labels given")
        _mask_panel(ax, allowed, queries, keys, example["title"], example.get("xlabel", "key (attended to)"),
                    example.get("ylabel", "query (attending)"))
        for row in example["loss"]:
            label = ax.get_yticklabels()[row]
            label.set_color("#d62728")
            label.set_fontweight("bold")
    for ax in list(axes.flat)[len(examples):]:
        ax.set_visible(False)
    fig.suptitle("Pretraining objectives: who may attend to whom (green), and where the loss is (red rows)",
                 fontsize=11)
    return fig
