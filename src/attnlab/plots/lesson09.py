"""Figures of lesson 09 (FlashAttention): the online softmax block by block (the lesson's interactive
figure), which tiles of Q, K, V and O sit in fast memory at each step, what the backward pass
costs with and without recomputation, the roofline of this machine with the attention methods on
it, the allocator experiment, and the GPU comparison (measured or recorded).

Each function returns a matplotlib ``Figure`` with a title and labelled axes.
"""

from __future__ import annotations

import math
from typing import Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure
from matplotlib.patches import Patch, Rectangle
from matplotlib.ticker import FuncFormatter, LogLocator, NullLocator

from attnlab.bench import series

__all__ = ["allocator_figure", "backward_cost_figure", "bound_blocks_slider", "gpu_results_figure",
           "online_softmax_figure", "online_softmax_state", "roofline_figure", "tiling_diagram"]

MiB = 2**20

# The row of scores the online-softmax figure streams through (fixed, so that moving a control
# changes only what the learner moved). The maximum arrives late, in the eighth entry.
SOFTMAX_ROW = (1.0, 3.0, 2.0, 0.5, -1.0, 4.0, 2.5, 8.0, 0.0, 7.0, 1.5, 3.5)

_FAST = "#f4a261"    # in fast memory now
_SLOW = "#d9d9d9"    # in main memory
_DONE = "#2a9d8f"    # written back, finished
_EMPTY = "#ffffff"


# --------------------------------------------------------------------------------------------
# The online softmax, block by block (interactive)
# --------------------------------------------------------------------------------------------


def online_softmax_state(x: Sequence[float], block_size: int, blocks_read: int) -> dict:
    """The running maximum m and normaliser l after reading ``blocks_read`` blocks of ``x``.

    Returns ``{"m", "l", "seen"}``: m = max of the entries seen, l = sum of exp(x_j - m) over them,
    seen = how many entries were read. Follows the recurrence of the lesson, block by block.
    """
    if block_size < 1 or blocks_read < 0:
        raise ValueError(f"block_size must be >= 1 and blocks_read >= 0, got {block_size}, {blocks_read}")
    m, l = -math.inf, 0.0
    seen = min(len(x), block_size * blocks_read)
    for start in range(0, seen, block_size):
        block = x[start:min(start + block_size, seen)]
        m_new = max(m, max(block))
        l = l * math.exp(m - m_new) + sum(math.exp(value - m_new) for value in block)
        m = m_new
    return {"m": m, "l": l, "seen": seen}


def online_softmax_figure(blocks_read: int = 2, block_size: int = 3,
                          x: Sequence[float] = SOFTMAX_ROW) -> Figure:
    """Two panels for one row of scores ``x`` read in blocks of ``block_size``.

    Top: the scores, the blocks read so far in colour, the running maximum m as a line.
    Bottom: the weights exp(x_j - m) / l that the entries read so far would get with the current
    m and l, next to the true softmax of the whole row: they agree once every block is read.
    """
    x = [float(value) for value in x]
    n = len(x)
    blocks = math.ceil(n / block_size)
    blocks_read = max(0, min(int(blocks_read), blocks))
    state = online_softmax_state(x, block_size, blocks_read)
    positions = np.arange(n)
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 5.6), sharex=True, layout="constrained")

    colours = [_FAST if j < state["seen"] else _SLOW for j in range(n)]
    top.bar(positions, x, color=colours, edgecolor="black", linewidth=0.6)
    for boundary in range(block_size, n, block_size):
        top.axvline(boundary - 0.5, color="black", linestyle=":", linewidth=0.8)
    # Headroom above the tallest score, so that the running maximum's label stays inside the frame.
    top.set_ylim(min(0.0, min(x)) - 0.5, max(x) + 0.22 * (max(x) - min(0.0, min(x))) + 0.5)
    if state["seen"]:
        top.axhline(state["m"], color="#c1121f", linewidth=1.5)
        top.text(n - 0.7, state["m"], f"running max m = {state['m']:g}", color="#c1121f",
                 va="bottom", ha="right", fontsize=10,
                 bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.8, "pad": 1.5})
    top.set_ylabel("score x_j")
    top.set_xlabel("position j in the row")
    top.tick_params(labelbottom=True)
    top.set_title(f"Blocks of {block_size}: {blocks_read} of {blocks} read, "
                  f"l = {state['l']:.4f}" + (f", log-sum-exp so far = {state['m'] + math.log(state['l']):.4f}"
                                             if state["seen"] else ""))
    top.legend(handles=[Patch(color=_FAST, label="read"), Patch(color=_SLOW, label="not read yet")],
               loc="upper left", fontsize=9)

    exact = np.exp(np.array(x) - max(x))
    exact /= exact.sum()
    partial = np.zeros(n)
    if state["seen"]:
        partial[:state["seen"]] = np.exp(np.array(x[:state["seen"]]) - state["m"]) / state["l"]
    width = 0.4
    bottom.bar(positions - width / 2, partial, width, color=_FAST, label="exp(x_j − m) / l so far")
    bottom.bar(positions + width / 2, exact, width, color=_DONE, label="softmax of the whole row")
    bottom.set_xlabel("position j in the row")
    bottom.set_ylabel("weight")
    bottom.set_xticks(positions)
    bottom.set_ylim(0, 1)
    bottom.legend(loc="upper left", fontsize=9)
    fig.suptitle("The online softmax, one block at a time")
    return fig


def bound_blocks_slider(view, x: Sequence[float] = SOFTMAX_ROW) -> None:
    """Keep the "blocks read" slider of the online-softmax figure within the blocks there are.

    ``view``: the ``FigureView`` that ``attnlab.interactive.interactive_figure`` returned for
    ``online_softmax_figure`` with controls ``blocks_read`` and ``block_size``. Where widgets are
    shown, choosing a block size moves the slider's end to ceil(len(x) / block size) (the slider
    takes a value past the new end down with it, and the figure redraws); elsewhere (a static
    figure) there is no slider and nothing to do.
    """
    inputs = getattr(view, "widgets", {}).get("inputs", {})
    if "blocks_read" not in inputs or "block_size" not in inputs:
        return

    def follow(change):
        inputs["blocks_read"].max = math.ceil(len(x) / change["new"])

    follow({"new": inputs["block_size"].value})
    inputs["block_size"].observe(follow, names="value")


# --------------------------------------------------------------------------------------------
# Tiles in fast memory
# --------------------------------------------------------------------------------------------


def _tiling_panel(ax, query_blocks: int, key_blocks: int, i: int, j: int) -> None:
    """One step (query block i, key block j) of the forward pass as coloured blocks."""
    cell, thin, gap = 1.0, 0.45, 0.35
    s_left, s_bottom = thin + gap, 0.0
    s_top = query_blocks * cell

    def block(x, y, w, h, colour, hatch=None, dashed=False):
        ax.add_patch(Rectangle((x, y), w, h, facecolor=colour, edgecolor="black", hatch=hatch,
                               linewidth=0.8, linestyle="--" if dashed else "-"))

    for row in range(query_blocks):  # rows from the top: query block 0 is the highest
        y = s_top - (row + 1) * cell
        block(0, y, thin, cell, _FAST if row == i else _SLOW)  # Q
        o_colour = _DONE if row < i else (_FAST if row == i else _EMPTY)
        block(s_left + key_blocks * cell + gap, y, thin, cell, o_colour)  # O (with m and l)
        for col in range(key_blocks):
            x = s_left + col * cell
            if (row, col) == (i, j):
                block(x, y, cell, cell, _FAST)
                ax.text(x + cell / 2, y + cell / 2, "S, P", ha="center", va="center", fontsize=9)
            else:
                block(x, y, cell, cell, _EMPTY, dashed=True)
    for col in range(key_blocks):
        x = s_left + col * cell
        colour = _FAST if col == j else _SLOW
        block(x, s_top + gap, cell, thin, colour)  # K^T above S
        block(x, -gap - thin, cell, thin, colour)  # V^T below S
    # Q labels its column from the left, apart from Kᵀ's row, so that the two never read "QKᵀ"
    ax.text(-0.12, s_top / 2, "Q", ha="right", va="center", fontsize=11)
    ax.text(s_left - 0.1, s_top + gap + thin / 2, "Kᵀ", ha="right", va="center", fontsize=11)
    ax.text(s_left - 0.1, -gap - thin / 2, "Vᵀ", ha="right", va="center", fontsize=11)
    o_x = s_left + key_blocks * cell + gap + thin / 2
    ax.text(o_x, s_top + gap + thin / 2, "O\n(m, ℓ)", ha="center", va="center", fontsize=10)
    ax.set_xlim(-0.55, o_x + thin / 2 + 0.2)
    ax.set_ylim(-gap - thin - 0.2, s_top + gap + thin + 0.35)
    ax.set_aspect("equal")
    ax.set_xticks([])
    ax.set_yticks([])
    ax.set_xlabel("key blocks →", fontsize=9)
    ax.set_ylabel("← query blocks", fontsize=9)
    ax.set_title(f"query block {i}, key block {j}")


def tiling_diagram(query_blocks: int = 4, key_blocks: int = 4,
                   steps: Sequence[tuple[int, int]] = ((0, 0), (0, 1), (0, 3), (1, 0))) -> Figure:
    """Which blocks of Q, K, V, S and O are in fast memory at a few steps of the forward pass.

    The loop order of FlashAttention-2 (and of exercise 2): query blocks outside, key blocks
    inside. At step (i, j), the fast memory holds query block i, key block j of K and of V, the one
    block S_ij = Q_i K_jᵀ (and its weights P_ij), and block i of the output accumulator with its
    running m and ℓ. The other blocks of S are never stored anywhere; O's earlier blocks are
    finished and written back.
    """
    for i, j in steps:
        if not (0 <= i < query_blocks and 0 <= j < key_blocks):
            raise ValueError(f"step {(i, j)} is outside {query_blocks} x {key_blocks} blocks")
    # at most 9.4 inches wide: the width of the notebook (968 px at 100 dpi, with margins)
    width = min(9.4, 3.3 * len(steps))
    fig, axes = plt.subplots(1, len(steps), figsize=(width, 1.1 * width / len(steps) + 1.4),
                             layout="constrained", squeeze=False)
    for ax, (i, j) in zip(axes[0], steps):
        _tiling_panel(ax, query_blocks, key_blocks, i, j)
    fig.legend(handles=[
        Patch(facecolor=_FAST, edgecolor="black", label="in fast memory (cache, SRAM) now"),
        Patch(facecolor=_SLOW, edgecolor="black", label="in main memory (RAM, HBM)"),
        Patch(facecolor=_DONE, edgecolor="black", label="output block finished, written back"),
        Patch(facecolor=_EMPTY, edgecolor="black", linestyle="--", label="never stored"),
    ], loc="outside lower center", ncols=2, fontsize=9)
    fig.suptitle("Tiled attention: what sits in fast memory at each step (queries outside, keys inside)",
                 fontsize=11)
    return fig


# --------------------------------------------------------------------------------------------
# The backward pass: autograd through naive attention against recomputation
# --------------------------------------------------------------------------------------------


def backward_cost_figure(ns: Sequence[int], time_ms: Mapping[str, Sequence[float]],
                         memory_mib: Mapping[str, Sequence[float]], *, title: str) -> Figure:
    """Time (left) and peak extra memory (right, log scale) of a forward and backward pass
    against the sequence length n, one bar per method and n.

    time_ms, memory_mib: method name -> one value per n (milliseconds, MiB).
    """
    fig, (left, right) = plt.subplots(1, 2, figsize=(9.4, 3.9), layout="constrained")
    positions = np.arange(len(ns))
    width = 0.8 / max(1, len(time_ms))
    for ax, values, ylabel in ((left, time_ms, "time of forward + backward (ms)"),
                               (right, memory_mib, "peak extra memory (MiB, log scale)")):
        for index, (name, series_) in enumerate(values.items()):
            bars = ax.bar(positions + (index - (len(values) - 1) / 2) * width, series_, width,
                          color=f"C{index}", label=name)
            ax.bar_label(bars, fmt="%.0f" if ax is left else "%.1f", fontsize=9, padding=1)
        ax.set_xticks(positions, labels=[str(n) for n in ns])
        ax.set_xlabel("sequence length n")
        ax.set_ylabel(ylabel)
        ax.legend(fontsize=9, loc="upper left")
    left.set_ylim(0, 1.2 * max(max(v) for v in time_ms.values()))
    right.set_yscale("log")
    high = max(max(v) for v in memory_mib.values())
    low = min(min(v) for v in memory_mib.values())
    right.set_ylim(10 ** math.floor(math.log10(low)), 10 ** math.ceil(math.log10(high * 3)))
    left.set_title("time")
    right.set_title("peak memory")
    fig.suptitle(title)
    return fig


# --------------------------------------------------------------------------------------------
# The allocator experiment: fresh memory against memory reused
# --------------------------------------------------------------------------------------------


def allocator_figure(times_ms: Mapping[str, Mapping[str, Mapping[int, float]]], *, title: str,
                     labels: Mapping[str, str] | None = None) -> Figure:
    """One panel per n: each method's time under each allocator setting, side by side.

    times_ms: setting name ("default", "memory reused") -> method -> {n: milliseconds}.
    labels: method -> the name to show (e.g. "tiled PyTorch" -> "tiled (yours)").
    """
    settings = list(times_ms)
    methods = list(dict.fromkeys(m for setting in times_ms.values() for m in setting))
    ns = sorted({n for setting in times_ms.values() for by_n in setting.values() for n in by_n})
    if not ns:
        raise ValueError("no times to draw")
    labels = labels or {}
    fig, axes = plt.subplots(1, len(ns), figsize=(min(9.4, 3.2 * len(ns)), 3.9), layout="constrained",
                             squeeze=False)
    hatches = ["", "//", "..", "xx"]
    width = 0.8 / len(settings)
    positions = np.arange(len(methods))
    for ax, n in zip(axes[0], ns):
        for index, setting in enumerate(settings):
            heights = [times_ms[setting].get(m, {}).get(n, np.nan) for m in methods]
            ax.bar(positions + (index - (len(settings) - 1) / 2) * width, heights, width,
                   color=[f"C{j}" for j in range(len(methods))], edgecolor="black", linewidth=0.6,
                   hatch=hatches[index % len(hatches)])
        ax.set_xticks(positions, labels=[labels.get(m, m).replace(" (", "\n(") for m in methods],
                      fontsize=9)
        ax.set_title(f"n = {n}")
        ax.set_xlabel("implementation")
        ax.set_ylabel("CPU time of the thread (ms)")
    fig.legend(handles=[Patch(facecolor="white", edgecolor="black", hatch=hatches[i % len(hatches)],
                              label=f"allocator: {setting}") for i, setting in enumerate(settings)],
               loc="outside lower center", ncols=len(settings), fontsize=9)
    fig.suptitle(title)
    return fig


# --------------------------------------------------------------------------------------------
# The roofline
# --------------------------------------------------------------------------------------------


def roofline_figure(peak_flops: float, bandwidth: float,
                    points: Mapping[str, tuple[float, float]], *, title: str,
                    model_only: Sequence[str] = ()) -> Figure:
    """The roofline of a machine and methods placed on it.

    peak_flops: the arithmetic rate (FLOP/s); bandwidth: main-memory bytes per second. The roof
    is min(peak, bandwidth * intensity); it bends at the balance point peak / bandwidth.
    points: name -> (intensity in FLOP per byte, attained FLOP/s: counted FLOPs / measured time).
    model_only: names whose attained rate is the roof itself (drawn hollow: no measurement).
    """
    if peak_flops <= 0 or bandwidth <= 0:
        raise ValueError(f"peak_flops and bandwidth must be positive, got {peak_flops}, {bandwidth}")
    balance = peak_flops / bandwidth
    intensities = [value[0] for value in points.values()] + [balance]
    low = 10 ** math.floor(math.log10(min(intensities) / 3))
    high = 10 ** math.ceil(math.log10(max(intensities) * 3))
    x = np.logspace(math.log10(low), math.log10(high), 200)
    roof = np.minimum(peak_flops, bandwidth * x)
    fig, ax = plt.subplots(figsize=(8, 5), layout="constrained")
    ax.loglog(x, roof / 1e9, color="black", linewidth=2, label="roof: min(peak, bandwidth × intensity)")
    ax.axvline(balance, color="grey", linestyle="--", linewidth=1)
    ax.text(balance * 1.08, peak_flops / 1e9 * 0.05, f"balance\n{balance:.1f} FLOP/byte",
            color="dimgrey", fontsize=9)
    ax.text(low * 1.3, bandwidth * low * 1.6 / 1e9, "limited by memory", rotation=0, fontsize=9,
            color="dimgrey")
    ax.text(high / 1.3, peak_flops / 1e9 * 1.15, "limited by arithmetic", ha="right", fontsize=9,
            color="dimgrey")
    markers = ["o", "s", "^", "D", "v", "P", "X", "*"]
    for index, (name, (intensity, attained)) in enumerate(points.items()):
        hollow = name in model_only
        ax.plot(intensity, attained / 1e9, markers[index % len(markers)], markersize=9,
                markerfacecolor="none" if hollow else f"C{index}", markeredgecolor=f"C{index}",
                markeredgewidth=1.5, linestyle="none", label=name)
    ax.set_xlabel("arithmetic intensity (FLOP per byte of main memory, log scale)")
    ax.set_ylabel("attained throughput (GFLOP/s, log scale)")
    ax.set_ylim(min([bandwidth * low] + [v[1] for v in points.values()]) / 1e9 / 2, peak_flops / 1e9 * 3)
    ax.set_title(title)
    # Ticks at 1, 2 and 5 of each decade, labelled as plain numbers: the y range spans at least
    # 18 times (half the lowest point below peak / 3, up to 3 x peak), so at least three are labelled
    # whatever this machine measured (decades alone could leave two).
    ax.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    ax.yaxis.set_minor_locator(NullLocator())
    ax.legend(fontsize=8, loc="lower right")
    ax.grid(True, which="major", alpha=0.3)
    return fig


# --------------------------------------------------------------------------------------------
# GPU results (measured live, or recorded by `python -m attnlab.bench flash`)
# --------------------------------------------------------------------------------------------


def gpu_results_figure(records: Sequence[dict], title: str) -> Figure:
    """TFLOP/s (top) and peak memory (bottom) against n, one line per implementation, one column
    per (d, causal) setting of the records (``attnlab.bench.gpu_comparison``'s format)."""
    settings = sorted({(r["d"], r["causal"]) for r in records})
    if not settings:
        raise ValueError("no GPU records to draw")
    fig, axes = plt.subplots(2, len(settings), figsize=(4.2 * len(settings), 7), layout="constrained",
                             squeeze=False)
    all_ns = sorted({r["n"] for r in records})
    for col, (d, causal) in enumerate(settings):
        for row, (value, scale, ylabel) in enumerate((("tflops", 1, "throughput (TFLOP/s)"),
                                                       ("memory_bytes", 1 / MiB, "peak memory (MiB, log scale)"))):
            ax = axes[row, col]
            for index, (name, (ns, values)) in enumerate(series(records, value, d=d, causal=causal).items()):
                ax.plot(ns, [v * scale for v in values], marker="o", label=name, color=f"C{index}")
            ax.set_xscale("log")
            if row:
                ax.set_yscale("log")
            ax.set_title(f"d={d}, {'causal' if causal else 'not causal'}")
            ax.set_xlabel("sequence length n (log scale)")
            ax.set_ylabel(ylabel)
            ax.set_xticks(all_ns, labels=[str(n) for n in all_ns])
            ax.minorticks_off()
            if ax.get_lines():
                ax.legend(fontsize=7)
    fig.suptitle(title)
    return fig

