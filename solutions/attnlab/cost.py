"""Lesson 08: the quadratic cost, and tokens that are not words.

You fill in five functions here; the notebook ``08_quadratic_cost.ipynb`` explains each one and
checks it. Counts are exact integers, for one sequence (batch 1).

- ``attention_flops(n_q, n_k, d, n_heads=1, causal=False)``: floating-point operations of
  attention's two matrix products, the scores ``q k^T`` and the weighted sum of the values.
- ``layer_flops(n, d_model, d_ff, n_heads, n_kv_heads=None, ffn="gelu")``: the FLOPs of one
  transformer layer over ``n`` tokens, split into projections, attention and feed-forward block.
- ``attention_overtakes_ffn(d_model, d_ff, n_heads, ffn="gelu", causal=False)``: the length at
  which attention's products cost as many FLOPs as the feed-forward block (the lesson's
  prediction exercise, not graded).
- ``attention_memory_bytes(n, n_heads, dtype_bytes, materialized=True)``: the memory one layer's
  attention needs beyond its inputs and outputs.
- ``patchify(images, patch_size)``: images as a sequence of flattened patches, a vision
  transformer's tokens.
- ``audio_tokens(seconds, hop_s=0.01, stride=2)``: how many tokens an audio encoder like Whisper's
  makes of a clip.

Written for you: ``MODELS``, the sizes of three real models (``ModelShape``, with sources), and
``crossover_length(shape, causal=False)``, which uses your ``layer_flops``.

FLOPs are counted as ``torch.utils.flop_counter.FlopCounterMode`` counts them: only matrix
products, each multiply-add two operations, so multiplying an (m, k) matrix by a (k, n) one costs
``2 * m * k * n``. Softmax, normalization, activations and additions are left out: for the sizes of
real models they are a small fraction of the products.
"""

from __future__ import annotations

import math
import numbers
from typing import NamedTuple

import torch

FFN_KINDS = ("gelu", "swiglu")
# Beyond a trillion tokens no model is run: a crossover search that gets there has a counting mistake.
_CROSSOVER_LIMIT = 2**40
LAYER_PARTS = ("projections", "attention", "feedforward", "total")


class ModelShape(NamedTuple):
    """The sizes of a transformer that the counts of this lesson need, and where they come from.

    d_model, d_ff, n_heads, n_kv_heads, ffn: as in ``layer_flops``; n_layers: transformer layers
    (encoder and decoder together for the 2017 model); head_size: ``d_model // n_heads``;
    causal: a decoder that generates token by token (it keeps a KV cache); context: the longest
    input it was built for, in tokens (None where the model sets no limit); source: the paper or
    configuration file the numbers come from.
    """

    name: str
    d_model: int
    d_ff: int
    n_heads: int
    n_kv_heads: int
    n_layers: int
    ffn: str
    causal: bool
    context: int | None
    source: str

    @property
    def head_size(self) -> int:
        return self.d_model // self.n_heads


MODELS: dict[str, ModelShape] = {
    model.name: model for model in (
        ModelShape("2017 base", 512, 2048, 8, 8, 12, "gelu", False, None,
                   "Vaswani et al. (2017), Table 3, base model: 6 encoder and 6 decoder layers, a "
                   "two-matrix ReLU block (counted like GELU's); a layer here is an encoder layer "
                   "(the decoder's layers add cross-attention, counted in the lesson)"),
        ModelShape("Qwen2.5-3B", 2048, 11008, 16, 2, 36, "swiglu", True, 32768,
                   "Qwen2.5-3B's config.json: hidden_size 2048, intermediate_size 11008, "
                   "num_hidden_layers 36, num_attention_heads 16, num_key_value_heads 2, "
                   "max_position_embeddings 32768"),
        ModelShape("ViT-B/16", 768, 3072, 12, 12, 12, "gelu", False, 197,
                   "Dosovitskiy et al. (2020), Table 1 (ViT-Base); 197 tokens = 196 patches of a "
                   "224 x 224 image and a class token"),
    )
}


def _check_count(name: str, value, low: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
    return int(value)


def _check_positive(name: str, value, low: float = 0.0, strict: bool = True) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    if value < low or (strict and value == low):
        raise ValueError(f"{name} must be {'>' if strict else '>='} {low}, got {value!r}")
    return float(value)


def attention_flops(n_q: int, n_k: int, d: int, n_heads: int = 1, causal: bool = False) -> int:
    """FLOPs of attention's two products for ``n_q`` queries, ``n_k`` keys and ``n_heads`` heads.

    d: the head size (queries, keys and values all have d features per head).
    For every query-key pair a head computes one score, a dot product of length d (d multiply-adds,
    2d FLOPs), and adds that key's value, weighted, to the output (another 2d FLOPs): 4d FLOPs per
    pair and head. Without a mask every pair counts: ``4 * n_heads * n_q * n_k * d``.
    causal: count only the pairs the causal mask allows, bottom-right aligned as in lessons 02
       and 03 (query i sees key j if j <= i + n_k - n_q). With n_q == n_k that is
       n (n + 1) / 2 pairs, a little over half; with n_q > n_k the first n_q - n_k queries see
       no key at all. Returns an int.
    """
    n_q, n_k, d, n_heads = (_check_count(name, value) for name, value in
                            (("n_q", n_q), ("n_k", n_k), ("d", d), ("n_heads", n_heads)))
    ### BEGIN SOLUTION
    if not causal:
        pairs = n_q * n_k
    elif n_q <= n_k:  # query i sees i + 1 + (n_k - n_q) keys
        pairs = n_q * (n_k - n_q) + n_q * (n_q + 1) // 2
    else:  # the last n_k queries see 1, 2, ..., n_k keys; the others none
        pairs = n_k * (n_k + 1) // 2
    return 4 * n_heads * pairs * d
    ### END SOLUTION


def layer_flops(n: int, d_model: int, d_ff: int, n_heads: int, n_kv_heads: int | None = None,
                ffn: str = "gelu", causal: bool = False) -> dict[str, int]:
    """FLOPs of one transformer layer's forward pass over ``n`` tokens (one sequence).

    d_model: width of the residual stream; n_heads query heads of size ``d_model // n_heads``;
    n_kv_heads: key/value heads (grouped-query attention, lesson 04; None means n_heads);
    d_ff: width of the feed-forward block's hidden layer; ffn: "gelu" for the two-matrix block of
    the 2017 transformer and BERT (up, activation, down; the activation does not change the
    count), "swiglu" for the three-matrix gated block of Llama and Qwen (gate, up, down).
    causal: count the attention products of causal self-attention only (see attention_flops).

    Returns a dict of ints:
    - "projections": the four projections, queries (d_model -> d_model), keys and values
      (d_model -> n_kv_heads * head size each) and the output (d_model -> d_model);
    - "attention": ``attention_flops`` of the n x n self-attention over all heads;
    - "feedforward": the feed-forward block;
    - "total": their sum.
    Biases, normalization, softmax and residual additions are not counted (FlopCounterMode
    leaves them out too).
    """
    n, d_model, d_ff, n_heads = (_check_count(name, value) for name, value in
                                 (("n", n), ("d_model", d_model), ("d_ff", d_ff), ("n_heads", n_heads)))
    n_kv_heads = n_heads if n_kv_heads is None else _check_count("n_kv_heads", n_kv_heads)
    if d_model % n_heads:
        raise ValueError(f"d_model={d_model} is not divisible by n_heads={n_heads}")
    if n_heads % n_kv_heads:
        raise ValueError(f"n_heads={n_heads} is not a multiple of n_kv_heads={n_kv_heads}: each "
                         "key/value head must serve the same number of query heads")
    if ffn not in FFN_KINDS:
        raise ValueError(f"ffn must be one of {FFN_KINDS}, got {ffn!r}")
    ### BEGIN SOLUTION
    head_size = d_model // n_heads
    kv_width = n_kv_heads * head_size
    projections = 2 * n * d_model * (d_model + 2 * kv_width + d_model)
    attention = attention_flops(n, n, head_size, n_heads, causal=causal)
    matrices = 2 if ffn == "gelu" else 3
    feedforward = matrices * 2 * n * d_model * d_ff
    return {"projections": projections, "attention": attention, "feedforward": feedforward,
            "total": projections + attention + feedforward}
    ### END SOLUTION


def crossover_length(shape: ModelShape, causal: bool = False) -> int:
    """The smallest n at which attention's FLOPs reach those of the rest of one of ``shape``'s
    layers (projections and feed-forward block), found by bisection on ``layer_flops``: attention
    grows like n², the rest like n, so below this length the rest costs more, above it attention.

    The search doubles n until attention has overtaken, then bisects between the last two
    lengths: it never asks ``layer_flops`` about lengths far beyond the answer, so an
    ``attention_flops`` that counts pairs in a Python loop still answers in a moment."""

    def overtaken(n: int) -> bool:
        parts = layer_flops(n, shape.d_model, shape.d_ff, shape.n_heads, shape.n_kv_heads,
                            ffn=shape.ffn, causal=causal)
        return parts["attention"] >= parts["projections"] + parts["feedforward"]

    high = 1
    while not overtaken(high):
        if high >= _CROSSOVER_LIMIT:
            raise ValueError(f"attention's FLOPs never reach the rest of the layer up to n = {_CROSSOVER_LIMIT:,} "
                             f"for {shape}: does attention_flops grow like n_q * n_k?")
        high *= 2
    low = high // 2 + 1 if high > 1 else 1
    while low < high:
        n = (low + high) // 2
        if overtaken(n):
            high = n
        else:
            low = n + 1
    return low


def attention_overtakes_ffn(d_model: int, d_ff: int, n_heads: int, ffn: str = "gelu",
                            causal: bool = False) -> int:
    """The smallest sequence length n at which attention's two products cost at least as many
    FLOPs as the feed-forward block, in one layer over n tokens (one sequence).

    d_model, d_ff, n_heads, ffn: as in ``layer_flops`` (heads of size ``d_model // n_heads``);
    causal: count only the pairs the causal mask allows (as ``attention_flops`` does).
    Attention's side is your ``attention_flops(n, n, ...)`` over all heads, the other side the
    "feedforward" part of ``layer_flops``; the projections are left out. Work out from the
    lesson's table how each side grows with n before you write code: an answer from algebra, from
    a search over n or from a bisection like ``crossover_length`` is right as long as it is the
    smallest such n. Returns an int.
    """
    d_model, d_ff, n_heads = (_check_count(name, value) for name, value in
                              (("d_model", d_model), ("d_ff", d_ff), ("n_heads", n_heads)))
    if d_model % n_heads:
        raise ValueError(f"d_model={d_model} is not divisible by n_heads={n_heads}")
    if ffn not in FFN_KINDS:
        raise ValueError(f"ffn must be one of {FFN_KINDS}, got {ffn!r}")
    ### BEGIN SOLUTION
    # Attention: 4 * n_heads * (d_model / n_heads) * pairs = 4 * d_model * pairs: the heads cancel.
    # Feed-forward: block * 2 * n * d_model * d_ff for a block of 2 (GELU) or 3 (SwiGLU) matrices.
    # Dividing both by 2 * d_model * n:
    #   every pair:  2 * n        >= block * d_ff  <=>  n >= block * d_ff / 2
    #   causal:      n + 1        >= block * d_ff  <=>  n >= block * d_ff - 1
    block = {"gelu": 2, "swiglu": 3}[ffn]  # the block's matrices
    if causal:
        return max(1, block * d_ff - 1)
    return -(-block * d_ff // 2)
    ### END SOLUTION


def attention_memory_bytes(n: int, n_heads: int, dtype_bytes: int, materialized: bool = True) -> int:
    """Bytes one layer's self-attention over ``n`` tokens needs beyond its inputs and outputs.

    materialized=True: naive attention stores the n x n score matrix of every head, each entry
       ``dtype_bytes`` bytes (2 for bfloat16, 4 for float32): ``n * n * n_heads * dtype_bytes``.
       (The softmax's weights are a second matrix of the same size unless written over the scores.)
    materialized=False: a FlashAttention-style kernel (lesson 09) never stores that matrix; what it
       keeps per head is one log-sum-exp per query, in float32 whatever ``dtype_bytes`` is:
       ``n * n_heads * 4``. Returns an int.
    """
    n, n_heads, dtype_bytes = (_check_count(name, value) for name, value in
                               (("n", n), ("n_heads", n_heads), ("dtype_bytes", dtype_bytes)))
    ### BEGIN SOLUTION
    if materialized:
        return n * n * n_heads * dtype_bytes
    return n * n_heads * 4
    ### END SOLUTION


def patchify(images: torch.Tensor, patch_size: int) -> torch.Tensor:
    """Cut images into square patches and flatten each: a vision transformer's tokens.

    images: (B, C, H, W), with H and W multiples of ``patch_size`` (P).
    Returns (B, N, C * P * P) with N = (H / P) * (W / P): patches in reading order (left to right
    along the top row of patches, then the next row down), each flattened channel by channel, then
    row by row inside the patch: the same layout as ``torch.nn.Unfold(P, stride=P)`` gives after
    ``.transpose(1, 2)``. Same dtype as ``images``, which is left unchanged.
    """
    if not isinstance(images, torch.Tensor):
        raise TypeError(f"images must be a torch.Tensor, got {type(images).__name__}")
    if images.dim() != 4:
        raise ValueError(f"images must have shape (B, C, H, W), got {tuple(images.shape)}")
    patch_size = _check_count("patch_size", patch_size)
    height, width = images.shape[-2:]
    if height % patch_size or width % patch_size:
        raise ValueError(f"the image size {height} x {width} is not a multiple of patch_size="
                         f"{patch_size}: crop or resize the images first")
    ### BEGIN SOLUTION
    b, c = images.shape[:2]
    rows, cols = height // patch_size, width // patch_size
    grid = images.reshape(b, c, rows, patch_size, cols, patch_size)
    # (B, rows, cols, C, P, P): one patch per (row, col), its pixels in channel-row-column order
    return grid.permute(0, 2, 4, 1, 3, 5).reshape(b, rows * cols, c * patch_size * patch_size)
    ### END SOLUTION


def audio_tokens(seconds: float, hop_s: float = 0.01, stride: int = 2) -> int:
    """How many tokens an audio encoder makes of ``seconds`` of sound.

    The sound becomes a spectrogram with one frame every ``hop_s`` seconds (Whisper: 10 ms), the
    frames that fit entirely: ``floor(seconds / hop_s)``. Beware of binary floating point: 0.29 / 0.01
    is 28.999999999999996, not 29, so round the quotient to 6 decimals before taking the floor. A
    convolution with ``stride`` then keeps every stride-th frame, padded at the end: ``ceil(frames /
    stride)`` tokens (Whisper: stride 2, so 30 s -> 3000 frames -> 1500 tokens). With stride=1
    this counts the frames. Returns an int.
    """
    seconds = _check_positive("seconds", seconds, strict=False)
    hop_s = _check_positive("hop_s", hop_s)
    stride = _check_count("stride", stride)
    ### BEGIN SOLUTION
    frames = math.floor(round(seconds / hop_s, 6))
    return -(-frames // stride)
    ### END SOLUTION
