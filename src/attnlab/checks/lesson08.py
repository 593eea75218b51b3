"""Visible checks of lesson 08: ``check_attention_flops``, ``check_layer_flops``,
``check_attention_overtakes_ffn`` (the prediction exercise, not graded),
``check_attention_memory_bytes``, ``check_patchify``, ``check_audio_tokens``.

The references are measurements, not formulas copied from the lesson: FLOPs counted by PyTorch's
own ``torch.utils.flop_counter.FlopCounterMode`` while real matrix products run (on the ``meta``
device for large sizes: shapes without data, so a million tokens cost no memory), the pairs a
causal mask allows counted from the mask itself, bytes from the size of a real tensor, patches
from ``torch.nn.functional.unfold``, and frames from exact fractions.

What the trusted cases require, these checks require too: a count is an int (a float of the right
value fails, here and there), and ``patchify`` cuts its patches itself (``attnlab.shortcuts``
forbids PyTorch's unfold and pixel_unshuffle on both sides), in every dtype images come in.
"""

from __future__ import annotations

import math
import numbers
from collections import Counter
from fractions import Fraction
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from attnlab.checks.common import (
    _join,
    _seeded,
    assert_close,
    assert_dtype,
    assert_not_modified,
    assert_shape,
    causal_allowed,
    explain_mismatch,
    run_checks,
)
from attnlab.shortcuts import police

__all__ = [
    "check_attention_flops",
    "check_attention_memory_bytes",
    "check_attention_overtakes_ffn",
    "check_audio_tokens",
    "check_layer_flops",
    "check_patchify",
    "counted_flops",
    "reference_attention_flops",
    "reference_layer_flops",
]

LAYER_PARTS = ("projections", "attention", "feedforward", "total")
_META_ABOVE = 4096  # tokens: from here on, products run on the meta device (shapes only)


def counted_flops(fn: Callable[[], object]) -> int:
    """FLOPs that ``torch.utils.flop_counter.FlopCounterMode`` counts while ``fn()`` runs."""
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        fn()
    return int(counter.get_total_flops())


def _device(*sizes: int) -> str:
    return "meta" if max(sizes) > _META_ABOVE else "cpu"


def _allowed_pairs(n_q: int, n_k: int) -> int:
    """Query-key pairs a bottom-right causal mask allows, counted on the mask (small sizes), or
    summed query by query (large ones)."""
    if n_q * n_k <= 4096 * 4096:
        return int(causal_allowed(n_q, n_k).sum())
    seen = np.arange(n_q, dtype=np.int64) + (n_k - n_q + 1)  # keys query i may see, before clipping
    return int(np.clip(seen, 0, n_k).sum())


def reference_attention_flops(n_q: int, n_k: int, d: int, n_heads: int = 1,
                              causal: bool = False) -> int:
    """Attention's FLOPs as FlopCounterMode counts two real products, ``q @ k^T`` and
    ``weights @ v``, over ``n_heads`` heads; causal: the same count per allowed pair, times the
    number of pairs the mask allows."""
    device = _device(n_q, n_k)
    q = torch.empty(n_heads, n_q, d, device=device)
    k = torch.empty(n_heads, n_k, d, device=device)
    v = torch.empty(n_heads, n_k, d, device=device)
    flops = counted_flops(lambda: (q @ k.transpose(-2, -1)) @ v)
    if causal:  # every pair costs the same: count the allowed ones
        flops = flops // (n_q * n_k) * _allowed_pairs(n_q, n_k)
    return flops


class _Layer(nn.Module):
    """One transformer layer written with plain ``nn.Linear`` layers (biases included: the
    counter leaves them out, as the lesson does) and explicit attention products, so that
    FlopCounterMode sees every product (it does not count PyTorch's fused attention kernels)."""

    def __init__(self, d_model, d_ff, n_heads, n_kv_heads, ffn, device):
        super().__init__()
        self.n_heads, self.n_kv_heads = n_heads, n_kv_heads
        self.head_size = d_model // n_heads
        kv_width = n_kv_heads * self.head_size
        self.q = nn.Linear(d_model, d_model, device=device)
        self.k = nn.Linear(d_model, kv_width, device=device)
        self.v = nn.Linear(d_model, kv_width, device=device)
        self.o = nn.Linear(d_model, d_model, device=device)
        self.ffn = ffn
        self.up = nn.Linear(d_model, d_ff, device=device)
        self.gate = nn.Linear(d_model, d_ff, device=device) if ffn == "swiglu" else None
        self.down = nn.Linear(d_ff, d_model, device=device)

    def heads(self, x, count):
        return x.reshape(x.shape[0], count, self.head_size).transpose(0, 1)

    def parts(self, x) -> dict[str, int]:
        n = x.shape[0]
        counts = {}
        counts["q, k, v"] = counted_flops(lambda: (self.q(x), self.k(x), self.v(x)))
        q = self.heads(self.q(x), self.n_heads)
        k = self.heads(self.k(x), self.n_kv_heads).repeat_interleave(self.n_heads // self.n_kv_heads, 0)
        v = self.heads(self.v(x), self.n_kv_heads).repeat_interleave(self.n_heads // self.n_kv_heads, 0)
        counts["attention"] = counted_flops(lambda: torch.softmax(q @ k.transpose(-2, -1), -1) @ v)
        merged = torch.empty(n, self.n_heads * self.head_size, device=x.device)
        counts["projections"] = counts.pop("q, k, v") + counted_flops(lambda: self.o(merged))
        if self.gate is None:
            counts["feedforward"] = counted_flops(lambda: self.down(F.gelu(self.up(x))))
        else:
            counts["feedforward"] = counted_flops(
                lambda: self.down(F.silu(self.gate(x)) * self.up(x)))
        return counts


def reference_layer_flops(n: int, d_model: int, d_ff: int, n_heads: int,
                          n_kv_heads: int | None = None, ffn: str = "gelu",
                          causal: bool = False) -> dict[str, int]:
    """The FLOPs of one layer's parts, counted by FlopCounterMode on ``_Layer``'s forward pass
    over ``n`` tokens; causal attention counts the pairs its mask allows."""
    n_kv_heads = n_heads if n_kv_heads is None else n_kv_heads
    device = _device(n, d_model, d_ff)
    layer = _Layer(d_model, d_ff, n_heads, n_kv_heads, ffn, device)
    counts = layer.parts(torch.empty(n, d_model, device=device))
    if causal:
        counts["attention"] = counts["attention"] // (n * n) * _allowed_pairs(n, n)
    counts["total"] = counts["projections"] + counts["attention"] + counts["feedforward"]
    return counts


def _whole_number(value, what: str) -> int:
    """``value`` as an int, or a failure that says what came back. A count is an int (a Python
    int, a NumPy integer or a 0-d integer tensor), never a float, even one holding a whole number:
    floats lose exactness past 2**53, ints never (the trusted cases ask the same)."""
    if getattr(value, "ndim", None) == 0 and hasattr(value, "item"):  # NumPy scalars, 0-d tensors
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        why = ("; a count is a whole number: use // (not /), and math.floor or math.ceil, which "
               "return ints" if isinstance(value, numbers.Real) else "")
        raise AssertionError(f"{what} must be an int, got {type(value).__name__}: {value!r}{why}")
    return int(value)


def _exact(got, expected: int, what: str, hints: Callable[[], dict[str, int]] | None = None,
           hint: str = "") -> None:
    """``got`` is an int equal to the exact count ``expected``; on failure, say which known mistake
    it matches (``hints()`` maps a hint to the count that mistake gives; called only on failure).
    A hint whose count is the right one, or that of another hint, is never given: on this input
    it cannot tell the mistakes apart."""
    got = _whole_number(got, what)
    if got == expected:
        return
    wrong_counts = hints() if hints else {}
    seen = Counter(wrong_counts.values())
    matched = next((text for text, wrong in wrong_counts.items()
                    if got == wrong != expected and seen[wrong] == 1), "")
    ratio = f" ({got / expected:.4g} times the right count)" if expected else ""
    raise AssertionError(_join(f"{what} is {got:,}, expected {expected:,}{ratio}", matched or hint))


# --------------------------------------------------------------------------------------------
# attention_flops
# --------------------------------------------------------------------------------------------


def _pairs_seen(n_q: int, n_k: int, first: int, clip: bool = True) -> int:
    """Query-key pairs when query i sees ``i + first`` keys, clipped to [0, n_k] (the causal mask:
    ``first = n_k - n_q + 1``; the mistakes below move or drop it)."""
    seen = np.arange(n_q, dtype=np.int64) + first
    return int((np.clip(seen, 0, n_k) if clip else seen).sum())


def _causal_pair_hints(n_q: int, n_k: int) -> dict[str, int]:
    """Known wrong counts of the pairs a bottom-right causal mask allows, by hint."""
    return {
        "you halved n_q * n_k: count the pairs the mask allows exactly (n (n + 1) / 2 when "
        "n_q == n_k; with n_q != n_k, query i sees min(n_k, max(0, i + n_k - n_q + 1)) keys)":
            n_q * n_k // 2,
        "causal=True is ignored: count only the pairs the mask allows": n_q * n_k,
        "your mask is aligned to the top-left corner; align it to the bottom-right (query i "
        "sees keys j <= i + n_k - n_q), as in lessons 02 and 03": _pairs_seen(n_q, n_k, 1),
        "a query also sees the key at its own position (j <= i + n_k - n_q, not <): n (n + 1) / 2 "
        "pairs when n_q == n_k, not n (n - 1) / 2": _pairs_seen(n_q, n_k, n_k - n_q),
        "with n_q > n_k the first n_q - n_k queries see no key: count 0 for them, not a negative "
        "number": _pairs_seen(n_q, n_k, n_k - n_q + 1, clip=False),
    }


def _attention_hints(n_q, n_k, d, n_heads, causal) -> dict[str, int]:
    if causal:
        return {text: 4 * n_heads * d * pairs for text, pairs in _causal_pair_hints(n_q, n_k).items()}
    full = 4 * n_heads * n_q * n_k * d
    return {
        "you counted one of the two products, or one FLOP per multiply-add: attention does two "
        "products (q k^T and weights @ v), each 2 FLOPs per multiply-add": full // 2,
        "multiply by n_heads: every head computes its own scores and weighted sum": full // n_heads,
        "you counted 4 FLOPs per multiply-add: FlopCounterMode counts 2 (a multiply and an add)": 2 * full,
    }


def check_attention_flops(fn: Callable) -> None:
    """Check ``attention_flops(n_q, n_k, d, n_heads=1, causal=False)`` against FlopCounterMode."""

    def case(n_q, n_k, d, n_heads, causal):
        def run():
            got = fn(n_q, n_k, d, n_heads=n_heads, causal=causal)
            expected = reference_attention_flops(n_q, n_k, d, n_heads, causal)
            _exact(got, expected, f"attention_flops({n_q}, {n_k}, d={d}, n_heads={n_heads}, causal={causal})",
                   lambda: _attention_hints(n_q, n_k, d, n_heads, causal))
        return run

    run_checks("attention_flops", [
        ("one head, n_q != n_k, as FlopCounterMode counts", case(5, 7, 3, 1, False)),
        ("several heads", case(9, 4, 8, 6, False)),
        ("causal, n_q == n_k", case(6, 6, 4, 2, True)),
        ("causal, n_q < n_k (bottom-right aligned)", case(3, 8, 5, 1, True)),
        ("causal, n_q > n_k (the first queries see no key)", case(7, 4, 2, 3, True)),
        ("a million tokens, 16 heads of 128", case(10**6, 10**6, 128, 16, False)),
        ("a million tokens, causal", case(10**6, 10**6, 128, 16, True)),
    ])


# --------------------------------------------------------------------------------------------
# layer_flops
# --------------------------------------------------------------------------------------------


def _layer_hints(n, d_model, d_ff, n_heads, n_kv_heads, ffn, causal) -> dict[str, dict[str, int]]:
    """Known wrong counts of each part, by hint. They know ``causal``: a layer that ignores it
    must hear that, not a hint about heads whose count happens to coincide."""
    n_kv_heads = n_heads if n_kv_heads is None else n_kv_heads
    head = d_model // n_heads
    pairs = _allowed_pairs(n, n) if causal else n * n
    causal_hints = {
        "causal=True is ignored: pass causal on to attention_flops, which counts only the pairs "
        "the mask allows": 4 * n_heads * head * n * n,
        "you halved n * n: a causal mask allows n (n + 1) / 2 pairs": 4 * n_heads * head * (n * n // 2),
    } if causal else {}
    return {
        "projections": {
            f"your key and value projections have d_model outputs; with {n_kv_heads} key/value heads "
            f"of size {head} they have {n_kv_heads * head} (grouped-query attention shrinks them)":
                2 * n * d_model * 4 * d_model,
            "count four projections: queries, keys, values and the output projection":
                2 * n * d_model * (d_model + 2 * n_kv_heads * head),
        },
        "attention": {
            "d in attention_flops is the head size d_model // n_heads, not d_model": 4 * n_heads * pairs * d_model,
            "every query head scores every key: count n_heads heads, not n_kv_heads":
                4 * n_kv_heads * pairs * head,
            **causal_hints,
        },
        "feedforward": {
            "a SwiGLU block has three matrices (gate, up and down), not two": 2 * 2 * n * d_model * d_ff,
            "a GELU block has two matrices (up and down), not three": 3 * 2 * n * d_model * d_ff,
        },
    }


def check_layer_flops(fn: Callable) -> None:
    """Check ``layer_flops(n, d_model, d_ff, n_heads, n_kv_heads=None, ffn="gelu", causal=False)``
    part by part against FlopCounterMode on a real layer's forward pass."""

    def compare(n, d_model, d_ff, n_heads, n_kv_heads=None, ffn="gelu", causal=False):
        got = fn(n, d_model, d_ff, n_heads, n_kv_heads=n_kv_heads, ffn=ffn, causal=causal)
        call = (f"layer_flops({n}, d_model={d_model}, d_ff={d_ff}, n_heads={n_heads}, "
                f"n_kv_heads={n_kv_heads}, ffn={ffn!r}{', causal=True' if causal else ''})")
        if not isinstance(got, dict):
            raise AssertionError(f"{call} must return a dict with keys {LAYER_PARTS}, got a "
                                 f"{type(got).__name__}")
        missing = [key for key in LAYER_PARTS if key not in got]
        if missing:
            raise AssertionError(f"{call} returned a dict without {missing}; it needs the keys {LAYER_PARTS}")
        expected = reference_layer_flops(n, d_model, d_ff, n_heads, n_kv_heads, ffn, causal)
        hints = _layer_hints(n, d_model, d_ff, n_heads, n_kv_heads, ffn, causal)
        attention_hint = ("the attention part is attention_flops(n, n, d_model // n_heads, n_heads"
                          f"{', causal=True' if causal else ''}): every query head, each of the head size")
        for part in ("projections", "attention", "feedforward"):
            _exact(got[part], expected[part], f'{call}["{part}"]', lambda: hints[part],
                   hint=attention_hint if part == "attention" else "")
        parts_sum = sum(_whole_number(got[part], part) for part in ("projections", "attention", "feedforward"))
        _exact(got["total"], parts_sum, f'{call}["total"]',
               hint="total is the sum of projections, attention and feedforward")

    run_checks("layer_flops", [
        ("GELU block, multi-head attention (FlopCounterMode)", lambda: compare(37, 48, 96, 4)),
        ("SwiGLU block, grouped-query attention", lambda: compare(29, 64, 80, 8, n_kv_heads=2, ffn="swiglu")),
        ("one key/value head (multi-query)", lambda: compare(11, 24, 40, 6, n_kv_heads=1, ffn="swiglu")),
        ("causal self-attention", lambda: compare(13, 32, 64, 2, causal=True)),
        ("causal, grouped-query", lambda: compare(21, 48, 72, 6, n_kv_heads=3, ffn="swiglu", causal=True)),
        ("Qwen2.5-3B's sizes at 32768 tokens",
         lambda: compare(32768, 2048, 11008, 16, n_kv_heads=2, ffn="swiglu")),
    ])


# --------------------------------------------------------------------------------------------
# attention_overtakes_ffn (not graded: the learner's prediction)
# --------------------------------------------------------------------------------------------


def _feedforward_flops(n: int, d_model: int, d_ff: int, ffn: str) -> int:
    """The feed-forward block's FLOPs over n tokens, counted by FlopCounterMode on meta tensors
    (shapes only): up and down, and the gate of a SwiGLU block."""
    x = torch.empty(n, d_model, device="meta")
    up, gate = torch.empty(d_model, d_ff, device="meta"), torch.empty(d_model, d_ff, device="meta")
    down = torch.empty(d_ff, d_model, device="meta")
    if ffn == "swiglu":
        return counted_flops(lambda: (F.silu(x @ gate) * (x @ up)) @ down)
    return counted_flops(lambda: F.gelu(x @ up) @ down)


def _smallest_length(reaches: Callable[[int], bool], high: int) -> int:
    """The smallest n in [1, high] with ``reaches(n)``, for a condition that stays true once true."""
    low = 1
    while low < high:
        middle = (low + high) // 2
        if reaches(middle):
            high = middle
        else:
            low = middle + 1
    return low


def _attention_flops_on_meta(n: int, head: int, n_heads: int, causal: bool) -> int:
    """Attention's FLOPs over n tokens, counted by FlopCounterMode on meta tensors; causal: the
    same count per pair, times the pairs a bottom-right mask allows (summed query by query)."""
    q, k, v = (torch.empty(n_heads, n, head, device="meta") for _ in range(3))
    flops = counted_flops(lambda: (q @ k.transpose(-2, -1)) @ v)
    return flops // (n * n) * _pairs_seen(n, n, 1) if causal else flops


def reference_attention_overtakes_ffn(d_model: int, d_ff: int, n_heads: int, ffn: str = "gelu",
                                      causal: bool = False) -> int:
    """The smallest n at which attention's products reach the feed-forward block's FLOPs, both
    counted by FlopCounterMode, found by bisection."""
    head = d_model // n_heads
    return _smallest_length(
        lambda n: _attention_flops_on_meta(n, head, n_heads, causal) >= _feedforward_flops(n, d_model, d_ff, ffn),
        high=4 * 3 * d_ff + 4)


def _overtake_hints(d_model, d_ff, n_heads, ffn, causal, expected) -> dict[str, int]:
    """Known wrong predictions, by hint: each is the smallest n under a mistaken count."""
    matrices = 2 if ffn == "gelu" else 3
    head = d_model // n_heads

    def pairs(n):
        return n * (n + 1) // 2 if causal else n * n

    def first(attention, rest):
        return _smallest_length(lambda n: attention(n) >= rest(n), high=64 * 3 * d_ff * max(1, n_heads))

    block = lambda n: matrices * 2 * n * d_model * d_ff  # noqa: E731
    other = 3 if matrices == 2 else 2
    projections = lambda n: 2 * n * d_model * 4 * d_model  # noqa: E731  (q, k, v and output)
    named = "three matrices (gate, up and down)" if ffn == "swiglu" else "two matrices (up and down)"
    hints = {
        "you compared attention with the projections and the feed-forward block together; compare "
        "it with the feed-forward block alone": first(lambda n: 4 * d_model * pairs(n),
                                                      lambda n: block(n) + projections(n)),
        f"a {'SwiGLU' if ffn == 'swiglu' else 'GELU'} block has {named}, not {other}, each "
        "2 * n * d_model * d_ff FLOPs":
            first(lambda n: 4 * d_model * pairs(n), lambda n: other * 2 * n * d_model * d_ff),
        "count both of attention's products (q k^T and weights @ v), 2 FLOPs per multiply-add each":
            first(lambda n: 2 * d_model * pairs(n), block),
        "count every head: attention_flops over n_heads heads of size d_model // n_heads costs "
        "4 * d_model per pair, so the number of heads cancels": first(lambda n: 4 * head * pairs(n), block),
        f"at n = d_model ({d_model}) n * n * d_model equals n * d_model * d_model, but the block is "
        "d_ff wide and attention has two products: count both sides with the lesson's table": d_model,
        f"the smallest n is wanted: at n = {expected - 1} attention is still cheaper than the block "
        "(round up, and mind the last step of a search)": expected - 1,
        f"the smallest n is wanted: at n = {expected} attention already reaches the block": expected + 1,
    }
    if causal:
        hints["causal=True counts only the pairs the mask allows, n (n + 1) / 2: about half, so "
              "attention needs about twice the length"] = first(lambda n: 4 * d_model * n * n, block)
    return hints


def check_attention_overtakes_ffn(fn: Callable) -> None:
    """Check ``attention_overtakes_ffn(d_model, d_ff, n_heads, ffn="gelu", causal=False)``, the
    learner's prediction, against a search over FLOPs counted by FlopCounterMode. Any way of
    computing it passes (algebra, a loop, a bisection) as long as the length is the smallest one;
    a wrong length hears which count it got wrong. The exercise is not graded."""

    def case(d_model, d_ff, n_heads, ffn="gelu", causal=False):
        def run():
            got = fn(d_model, d_ff, n_heads, ffn=ffn, causal=causal)
            expected = reference_attention_overtakes_ffn(d_model, d_ff, n_heads, ffn, causal)
            _exact(got, expected, f"attention_overtakes_ffn({d_model}, {d_ff}, n_heads={n_heads}, "
                                  f"ffn={ffn!r}, causal={causal})",
                   lambda: _overtake_hints(d_model, d_ff, n_heads, ffn, causal, expected))
        return run

    run_checks("attention_overtakes_ffn", [
        ("width 96, 3 heads, GELU block 320 wide", case(96, 320, 3)),
        ("the lesson's layer: width 128, 2 heads, GELU block 512 wide", case(128, 512, 2)),
        ("the same layer with one head of 128", case(128, 512, 1)),
        ("the 2017 base model's sizes, 8 heads", case(512, 2048, 8)),
        ("a SwiGLU block: Qwen2.5-3B's sizes", case(2048, 11008, 16, "swiglu")),
        ("a length that is not a whole quotient: round up", case(64, 5, 4, "swiglu")),
        ("causal, the lesson's layer", case(128, 512, 2, causal=True)),
        ("causal SwiGLU, Qwen2.5-3B's sizes", case(2048, 11008, 16, "swiglu", causal=True)),
    ])


# --------------------------------------------------------------------------------------------
# attention_memory_bytes
# --------------------------------------------------------------------------------------------


def check_attention_memory_bytes(fn: Callable) -> None:
    """Check ``attention_memory_bytes(n, n_heads, dtype_bytes, materialized=True)`` against the size
    of real tensors: the (n_heads, n, n) scores, or the (n_heads, n) float32 log-sum-exp."""

    def case(n, n_heads, dtype, materialized):
        def run():
            dtype_bytes = torch.empty((), dtype=dtype).element_size()
            got = fn(n, n_heads, dtype_bytes, materialized=materialized)
            shape = (n_heads, n, n) if materialized else (n_heads, n)
            expected = torch.empty(shape, dtype=dtype if materialized else torch.float32, device="meta").nbytes

            def hints():
                found = {
                    "multiply by n_heads: every head has its own scores": expected // n_heads,
                    "the log-sum-exp is float32 whatever the inputs' dtype: 4 bytes per number":
                        n * n_heads * dtype_bytes,
                    "without the matrix, what is kept is one number per query and head, not n * n":
                        n * n * n_heads * 4,
                    "with materialized=False nothing of size n x n is stored":
                        n * n * n_heads * dtype_bytes,
                }
                if materialized:  # only the first hint is about the materialized count
                    return dict(list(found.items())[:1])
                return found

            _exact(got, expected, f"attention_memory_bytes({n}, {n_heads}, {dtype_bytes}, "
                                  f"materialized={materialized})", hints)
        return run

    run_checks("attention_memory_bytes", [
        ("one head's float32 scores", case(1000, 1, torch.float32, True)),
        ("32 heads in bfloat16", case(4096, 32, torch.bfloat16, True)),
        ("a million tokens, float64", case(10**6, 2, torch.float64, True)),
        ("not materialized: the float32 log-sum-exp", case(4096, 32, torch.bfloat16, False)),
        ("not materialized, float64 inputs", case(777, 3, torch.float64, False)),
    ])


# --------------------------------------------------------------------------------------------
# patchify
# --------------------------------------------------------------------------------------------


def reference_patches(images: torch.Tensor, patch_size: int) -> torch.Tensor:
    """(B, N, C*P*P): ``torch.nn.functional.unfold`` with stride P, patches along the middle axis,
    in ``images``' dtype. Unfolding only copies numbers, so it runs in float64 (which holds every
    uint8 and half-precision value exactly; PyTorch's unfold has no uint8 version)."""
    patches = F.unfold(images.double(), patch_size, stride=patch_size).transpose(1, 2)
    return patches.to(images.dtype)


def _patch_candidates(images: torch.Tensor, p: int) -> dict[str, torch.Tensor]:
    b, c, h, w = images.shape
    grid = images.reshape(b, c, h // p, p, w // p, p)
    n, size = (h // p) * (w // p), c * p * p
    return {
        "each patch must be flattened channel first, (C, P, P) as nn.Unfold does; yours puts the "
        "channel last": grid.permute(0, 2, 4, 3, 5, 1).reshape(b, n, size),
        "your patches go down the columns first; list them in reading order, along each row of "
        "patches first": grid.permute(0, 4, 2, 1, 3, 5).reshape(b, n, size),
        "inside a patch, go along each row of pixels first (row, then column), as nn.Unfold does":
            grid.permute(0, 2, 4, 1, 5, 3).reshape(b, n, size),
        "a reshape alone mixes pixels of different patches: reshape to (B, C, H/P, P, W/P, P), "
        "then permute so the two patch-grid axes come first": images.reshape(b, n, size),
    }


def _images(shape, dtype: torch.dtype, seed: int) -> torch.Tensor:
    """Random images: pixel values 0 to 255 for an integer dtype, standard normal otherwise."""
    if not dtype.is_floating_point:
        return torch.randint(0, 256, shape, generator=_seeded(seed)).to(dtype)
    return torch.randn(*shape, generator=_seeded(seed), dtype=torch.float64).to(dtype)


def check_patchify(fn: Callable) -> None:
    """Check ``patchify(images, patch_size)`` against ``torch.nn.functional.unfold``, in every dtype
    images come in (uint8 pixels included), and that it cuts the patches itself: no ``F.unfold``,
    ``nn.Unfold``, ``Tensor.unfold`` or ``F.pixel_unshuffle`` (the trusted cases forbid them too)."""
    fn = police(fn, "cost.patchify")

    def case(shape, p, dtype=torch.float64, seed=0):
        def run():
            images = _images(shape, dtype, seed)
            got = assert_not_modified(fn, images, p)
            expected = reference_patches(images, p)
            b, c, h, w = shape
            assert_shape(got, expected.shape, what=f"patchify of images {tuple(shape)}, P={p}",
                         meaning=f"(B, N, C*P*P) = ({b}, {h // p} * {w // p}, {c} * {p} * {p})")
            assert_dtype(got, dtype, what="patchify's output", hint="" if dtype.is_floating_point else
                         "uint8 pixels stay uint8: patchify only moves numbers (no .float(), * 1.0 or / 255)")
            assert_close(got, expected, what=f"patches of images {tuple(shape)}, P={p}",
                         hint=explain_mismatch(got, _patch_candidates(images, p)))
        return run

    run_checks("patchify", [
        ("one 4 x 4 image, one channel, P=2", case((1, 1, 4, 4), 2, seed=1)),
        ("RGB, not square (8 x 12), P=4", case((2, 3, 8, 12), 4, seed=2)),
        ("P=1: every pixel a token", case((1, 2, 3, 5), 1, seed=3)),
        ("one patch covering the image", case((2, 3, 6, 6), 6, seed=4)),
        ("float32 kept", case((1, 3, 16, 16), 8, dtype=torch.float32, seed=5)),
        ("float16 kept", case((2, 2, 6, 4), 2, dtype=torch.float16, seed=6)),
        ("bfloat16 kept", case((1, 4, 8, 8), 2, dtype=torch.bfloat16, seed=7)),
        ("uint8 pixels (0 to 255) kept", case((2, 3, 9, 6), 3, dtype=torch.uint8, seed=8)),
        ("a ViT image: 224 x 224, P=16 -> 196 tokens", case((1, 3, 224, 224), 16, dtype=torch.float32, seed=9)),
    ])


# --------------------------------------------------------------------------------------------
# audio_tokens
# --------------------------------------------------------------------------------------------


def reference_audio_tokens(seconds, hop_s: float = 0.01, stride: int = 2) -> int:
    """Tokens from exact decimal fractions: floor(seconds / hop_s) frames, ceil(frames / stride)."""
    frames = math.floor(Fraction(str(seconds)) / Fraction(str(hop_s)))
    return -(-frames // stride)


def check_audio_tokens(fn: Callable) -> None:
    """Check ``audio_tokens(seconds, hop_s=0.01, stride=2)`` on Whisper's settings and others."""

    def case(seconds, hop_s=0.01, stride=2):
        def run():
            got = fn(seconds, hop_s=hop_s, stride=stride)
            expected = reference_audio_tokens(seconds, hop_s, stride)
            frames = reference_audio_tokens(seconds, hop_s, 1)
            def hints():
                return {
                    f"{seconds} / {hop_s} is {seconds / hop_s!r} in floating point: round it (e.g. "
                    "to 6 decimals) before taking the floor": -(-math.floor(seconds / hop_s) // stride),
                    "keep only the frames that fit entirely: floor(seconds / hop_s), not round or ceil":
                        -(-math.ceil(Fraction(str(seconds)) / Fraction(str(hop_s))) // stride),
                    "the convolution pads the end: ceil(frames / stride) tokens, not floor": frames // stride,
                    "divide the frames by the stride": frames,
                }

            _exact(got, expected, f"audio_tokens({seconds}, hop_s={hop_s}, stride={stride})", hints)
        return run

    run_checks("audio_tokens", [
        ("Whisper: 30 s -> 1500 tokens", case(30.0)),
        ("stride=1 counts frames: 30 s -> 3000", case(30.0, stride=1)),
        ("floating point: 0.29 s -> 29 frames", case(0.29, stride=1)),
        ("a partial frame is dropped (0.095 s)", case(0.095, stride=1)),
        ("an odd number of frames rounds up (0.05 s -> 3)", case(0.05)),
        ("other hops and strides", case(12.8, hop_s=0.02, stride=4)),
        ("no sound, no tokens", case(0.0)),
    ])
