"""Figures of lesson 03 (masking): attention weights with the masked cells greyed out, boolean masks,
and the interactive mask explorer."""

from __future__ import annotations

from typing import Any, Callable, Sequence

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.axes import Axes
from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure

from attnlab.plots.common import _axes, _numpy

__all__ = ["mask_explorer", "mask_picture", "masked_heatmap"]

_MASKED = "#c8c8c8"  # the grey of a cell that may not be attended to


def _labels(labels: Sequence[str] | None, n: int, prefix: str) -> list[str]:
    return [f"{prefix}{i}" for i in range(n)] if labels is None else list(labels)


def _ticks(ax: Axes, query_labels: list[str], key_labels: list[str], legend: str) -> None:
    ax.set_xticks(range(len(key_labels)), labels=key_labels, rotation=30 if len(key_labels) > 6 else 0,
                  ha="right" if len(key_labels) > 6 else "center")
    ax.set_yticks(range(len(query_labels)), labels=query_labels)
    ax.set_xlabel(f"key (attended to)\n{legend}")
    ax.set_ylabel("query (attending)")


def _size(n_q: int, n_k: int, width: float, height: float) -> tuple[float, float]:
    return min(1.6 + width * n_k, 9.0), min(1.2 + height * n_q, 6.5)


def masked_heatmap(weights: Any, allowed: Any, query_labels: Sequence[str] | None = None,
                   key_labels: Sequence[str] | None = None, *, title: str = "Attention weights",
                   ax: Axes | None = None, annotate: bool = True, colorbar: bool = True) -> Figure:
    """Heatmap of one (n_q, n_k) attention matrix whose masked cells (``allowed`` False) are grey.

    weights: (n_q, n_k) tensor or array; allowed: (n_q, n_k) booleans, True = may attend (a mask
    that broadcasts to it, such as (1, n_k), is expanded). Labels default to q0, q1, ... and k0, ...
    annotate: write the weight in every visible cell. Returns the figure.
    """
    w = _numpy(weights)
    if w.ndim != 2:
        raise ValueError(f"weights must be one (n_q, n_k) matrix, got shape {w.shape}")
    mask = np.broadcast_to(np.asarray(_numpy(allowed) > 0.5), w.shape)
    n_q, n_k = w.shape
    query_labels, key_labels = _labels(query_labels, n_q, "q"), _labels(key_labels, n_k, "k")
    if len(query_labels) != n_q or len(key_labels) != n_k:
        raise ValueError(f"weights has shape {w.shape}, but there are {len(query_labels)} query labels "
                         f"and {len(key_labels)} key labels")
    fig, ax = _axes(ax, _size(n_q, n_k, 0.75, 0.6))
    cmap = plt.get_cmap("Blues").with_extremes(bad=_MASKED)
    image = ax.imshow(np.ma.masked_array(w, mask=~mask), cmap=cmap, vmin=0.0, vmax=1.0, aspect="auto")
    if colorbar:
        fig.colorbar(image, ax=ax).set_label("attention weight")
    _ticks(ax, query_labels, key_labels,
           "grey: masked, weight exactly 0" if (~mask).any() else "no key is masked")
    ax.set_title(title)
    if annotate:
        for i in range(n_q):
            for j in range(n_k):
                if mask[i, j]:
                    ax.text(j, i, f"{w[i, j]:.2f}", ha="center", va="center", fontsize=8,
                            color="white" if w[i, j] > 0.55 else "black")
    return fig


def mask_picture(allowed: Any, query_labels: Sequence[str] | None = None,
                 key_labels: Sequence[str] | None = None, *, title: str = "Mask",
                 ax: Axes | None = None) -> Figure:
    """A boolean (n_q, n_k) mask as a grid: blue where the query may attend to the key, grey where
    not. Returns the figure."""
    mask = np.asarray(_numpy(allowed) > 0.5)
    if mask.ndim != 2:
        raise ValueError(f"the mask must be one (n_q, n_k) matrix, got shape {mask.shape}")
    n_q, n_k = mask.shape
    fig, ax = _axes(ax, _size(n_q, n_k, 0.5, 0.45))
    ax.imshow(mask.astype(float), cmap=ListedColormap([_MASKED, "#3b78b0"]), vmin=0, vmax=1, aspect="auto")
    _ticks(ax, _labels(query_labels, n_q, "q"), _labels(key_labels, n_k, "k"),
           "blue: may attend (True), grey: masked (False)")
    ax.set_title(title)
    return fig


def _boundaries(text: str, n: int) -> list[int]:
    """Positions where a new document starts, from text such as "3, 6" (0 < position < n)."""
    found = []
    for part in text.replace(";", ",").split(","):
        part = part.strip()
        if not part:
            continue
        if not part.lstrip("-").isdigit():
            raise ValueError(f"document starts must be whole numbers separated by commas, got {part!r}")
        if 0 < int(part) < n:
            found.append(int(part))
    return sorted(set(found))


def mask_explorer(masking: Any, seed: int = 0, d: int = 8) -> Callable[..., Figure]:
    """A drawing function for ``attnlab.interactive.interactive_figure``, built on the mask
    functions of ``masking`` (the learner's ``attnlab.masking``, or the reference).

    The keys are positions 0 .. n_k - 1 of one sequence; the queries are its last n_q positions
    (bottom-right alignment; with n_q > n_k the first queries come before every key). The returned
    ``draw(n_q, n_k, causal, window, padding, left_padding, documents)`` combines: the causal mask
    (if ``causal``), a sliding window of ``window`` keys (0: none), ``padding`` padded keys at the
    end (or the start, with ``left_padding``), and documents starting at the positions listed in
    ``documents`` ("4, 7"). It draws the combined mask and the weights of
    ``masking.masked_attention`` on fixed random queries and keys.
    """
    g = torch.Generator().manual_seed(seed)
    pool_q = torch.randn(24, d, generator=g, dtype=torch.float64)
    pool_k = torch.randn(24, d, generator=g, dtype=torch.float64)

    def draw(n_q: int = 6, n_k: int = 8, causal: bool = True, window: int = 0, padding: int = 0,
             left_padding: bool = False, documents: str = "") -> Figure:
        n_q, n_k, window, padding = int(n_q), int(n_k), int(window), int(padding)
        if not (1 <= n_q <= 24 and 1 <= n_k <= 24):
            raise ValueError("n_q and n_k must be between 1 and 24")
        masks = []
        if causal:
            masks.append(masking.causal_mask(n_q, n_k))
        if window > 0:
            masks.append(masking.sliding_window_mask(n_q, n_k, window))
        padding = min(padding, n_k)
        if padding:
            real = masking.padding_mask(torch.tensor([n_k - padding]), n_k)[0]
            masks.append((real.flip(-1) if left_padding else real)[None, :])
        starts = _boundaries(documents, n_k)
        if starts:
            # Document ids of positions min(0, n_k - n_q) .. n_k - 1; queries sit at the last n_q.
            first = min(0, n_k - n_q)
            positions = torch.arange(first, n_k)
            ids = torch.bucketize(positions, torch.tensor(starts), right=True)
            same = masking.document_mask(ids)
            masks.append(same[len(positions) - n_q:, -first:])
        allowed = masking.combine_masks(*masks)
        allowed = torch.ones(n_q, n_k, dtype=torch.bool) if allowed is None else allowed.expand(n_q, n_k)
        _, weights = masking.masked_attention(pool_q[:n_q], pool_k[:n_k], pool_k[:n_k], allowed)

        fig, (left, right) = plt.subplots(1, 2, figsize=(10.5, 4.4), layout="constrained")
        padded = set(range(padding)) if left_padding else set(range(n_k - padding, n_k))
        key_labels = [f"{j} pad" if j in padded else str(j) for j in range(n_k)]
        query_labels = [f"q{i} @ {i + n_k - n_q}" for i in range(n_q)]
        mask_picture(allowed, query_labels, key_labels, title="Combined mask (True = may attend)", ax=left)
        masked_heatmap(weights, allowed, query_labels, key_labels, ax=right, annotate=n_q * n_k <= 64,
                       title="Weights of masked_attention")
        left.set_ylabel("query (at its position)")
        right.set_ylabel("query (at its position)")
        empty = int((~allowed.any(dim=-1)).sum())
        fig.suptitle(f"n_q = {n_q}, n_k = {n_k}: {empty} of {n_q} queries have nothing to see"
                     + (" (their weights are all 0)" if empty else ""), fontsize=11)
        return fig

    return draw
