"""Lesson 04: multi-head and grouped-query attention, and the KV cache.

You fill in six pieces here; the notebook ``04_multi_head_attention.ipynb`` explains each one and
checks it. Shapes: ``b`` batch, ``n`` tokens, ``H`` query heads, ``G`` key/value heads, ``h`` head
size, ``d_model = H * h``; ``...`` is any number of leading dimensions.

- ``split_heads(x, n_heads)``: (..., n, H*h) -> (..., H, n, h), one slice of the features per head.
- ``merge_heads(x)``: the inverse, (..., H, n, h) -> (..., n, H*h).
- ``repeat_kv(k, n_rep)``: (..., G, n, h) -> (..., G*n_rep, n, h), each key/value head repeated
  for the ``n_rep`` query heads that share it (grouped-query attention).
- ``KVCache``: the keys and values of the tokens seen so far, for one attention layer.
- ``MultiHeadAttention``: projections, heads, the attention of lesson 03, and back: multi-head,
  grouped-query or multi-query attention, self- or cross-attention, with an optional cache and
  rotary positions (lesson 05).
- ``kv_cache_bytes(...)``: how much memory a model's KV cache takes.

The attention itself is ``attnlab.masking.masked_attention`` (lesson 03) and the rotation is
``attnlab.positions.apply_rope`` (lesson 05): your own code of those lessons, unless you borrowed
the reference.
"""

from __future__ import annotations

import importlib
import math

import torch
from torch import nn


class _Library:
    """``attnlab.<name>`` as it is at the moment of each use.

    ``masking.masked_attention`` below always calls the module the course's switch currently
    selects: your lesson-03 code, or the reference if you borrowed it with
    ``attnlab.use_reference("masking")`` after this module was imported.
    """

    def __init__(self, name: str):
        self._name = f"attnlab.{name}"

    def __getattr__(self, attribute: str):
        return getattr(importlib.import_module(self._name), attribute)


masking = _Library("masking")  # lesson 03: causal_mask, masked_attention
rotary = _Library("positions")  # lesson 05: apply_rope


def _check_count(name: str, value, low: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
    return value


def _check_tensor(name: str, x, min_dim: int) -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.dim() < min_dim:
        raise ValueError(f"{name} must have at least {min_dim} dimensions, got shape {tuple(x.shape)}")


def split_heads(x: torch.Tensor, n_heads: int) -> torch.Tensor:
    """Split the last dimension into heads: (..., n, n_heads * h) -> (..., n_heads, n, h).

    Head ``i`` gets features ``i*h ... i*h + h - 1`` of every token (consecutive slices, as in
    ``torch.nn.MultiheadAttention`` and Hugging Face models), and the head axis moves in front of
    the token axis so that each head is a separate batch of attention. ``x`` is left unchanged.
    """
    _check_tensor("x", x, 2)
    _check_count("n_heads", n_heads)
    if x.shape[-1] % n_heads:
        raise ValueError(f"the last dimension of x ({x.shape[-1]}) is not divisible by n_heads={n_heads}")
    ### BEGIN SOLUTION
    *lead, n, width = x.shape
    return x.reshape(*lead, n, n_heads, width // n_heads).transpose(-3, -2)
    ### END SOLUTION


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """Put the heads back side by side: (..., n_heads, n, h) -> (..., n, n_heads * h).

    The inverse of ``split_heads``: ``merge_heads(split_heads(x, H))`` equals ``x``.
    """
    _check_tensor("x", x, 3)
    ### BEGIN SOLUTION
    *lead, n_heads, n, h = x.shape
    return x.transpose(-3, -2).reshape(*lead, n, n_heads * h)
    ### END SOLUTION


def repeat_kv(k: torch.Tensor, n_rep: int) -> torch.Tensor:
    """Repeat key/value heads for grouped-query attention: (..., G, n, h) -> (..., G*n_rep, n, h).

    Each head is repeated ``n_rep`` times *consecutively*: key/value head ``j`` serves query heads
    ``j*n_rep ... j*n_rep + n_rep - 1`` (the layout of Hugging Face's ``repeat_kv`` and of
    ``F.scaled_dot_product_attention(..., enable_gqa=True)``). ``n_rep=1`` returns ``k`` as it is.
    """
    _check_tensor("k", k, 3)
    _check_count("n_rep", n_rep)
    ### BEGIN SOLUTION
    if n_rep == 1:
        return k
    return k.repeat_interleave(n_rep, dim=-3)
    ### END SOLUTION


class KVCache:
    """The keys and values one attention layer has computed so far, for decoding token by token.

    ``keys`` and ``values`` are None while the cache is empty, then tensors of shape
    (batch, n_kv_heads, length, head_dim): keys already rotated (RoPE) at their own positions, so
    they never need rotating again. ``length`` is the number of tokens cached (0 when empty); the
    next token's position is ``length``.
    """

    def __init__(self):
        self.keys: torch.Tensor | None = None
        self.values: torch.Tensor | None = None

    @property
    def length(self) -> int:
        """Number of tokens in the cache."""
        ### BEGIN SOLUTION
        return 0 if self.keys is None else int(self.keys.shape[-2])
        ### END SOLUTION

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Add the keys and values of new tokens; return all of them so far.

        k, v: (batch, n_kv_heads, n_new, head_dim), the same batch, heads and head size as what the
        cache holds. Returns ``(keys, values)``, each (batch, n_kv_heads, length, head_dim), the
        old tokens first. ``k`` and ``v`` are not modified.
        """
        for name, t in (("k", k), ("v", v)):
            _check_tensor(name, t, 4)
            if t.dim() != 4:
                raise ValueError(f"{name} must be (batch, n_kv_heads, n_new, head_dim), got shape {tuple(t.shape)}")
        if k.shape[:-1] != v.shape[:-1]:
            raise ValueError(f"k {tuple(k.shape)} and v {tuple(v.shape)} must agree in batch, heads and tokens")
        if self.keys is not None:
            for name, new, old in (("k", k, self.keys), ("v", v, self.values)):
                if new.shape[:2] != old.shape[:2] or new.shape[-1] != old.shape[-1]:
                    raise ValueError(
                        f"{name} has shape {tuple(new.shape)}, but the cache holds {tuple(old.shape)}: "
                        "batch, n_kv_heads and head_dim must stay the same")
        ### BEGIN SOLUTION
        if self.keys is None:
            self.keys, self.values = k, v
        else:
            self.keys = torch.cat([self.keys, k], dim=-2)
            self.values = torch.cat([self.values, v], dim=-2)
        return self.keys, self.values
        ### END SOLUTION


class MultiHeadAttention(nn.Module):
    """Multi-head attention, with grouped-query attention when ``n_kv_heads < n_heads``.

    d_model: width of the tokens; n_heads: query heads H, each of size h = d_model // n_heads;
    n_kv_heads: key/value heads G (None: G = H, multi-head attention; 1: multi-query attention);
    G must divide H, and query heads ``j*H/G ... (j+1)*H/G - 1`` share key/value head ``j``.
    bias: whether the four projections have biases.
    rope_base: None for no rotary positions; otherwise queries and keys are rotated with
    ``attnlab.positions.apply_rope(..., base=rope_base, layout="half")`` (lesson 05).

    Submodules (their names are the names of the parameters in a saved model):
    ``q_proj`` (d_model -> H*h), ``k_proj`` and ``v_proj`` (d_model -> G*h), ``o_proj`` (H*h ->
    d_model), each an ``nn.Linear(..., bias=bias)``.
    """

    def __init__(self, d_model: int, n_heads: int, n_kv_heads: int | None = None, bias: bool = False,
                 rope_base: float | None = None):
        super().__init__()
        _check_count("d_model", d_model)
        _check_count("n_heads", n_heads)
        n_kv_heads = n_heads if n_kv_heads is None else _check_count("n_kv_heads", n_kv_heads)
        if d_model % n_heads:
            raise ValueError(f"d_model={d_model} is not divisible by n_heads={n_heads}: each head needs "
                             "d_model // n_heads features")
        if n_heads % n_kv_heads:
            raise ValueError(f"n_heads={n_heads} is not a multiple of n_kv_heads={n_kv_heads}: every key/value "
                             "head must serve the same number of query heads")
        if rope_base is not None and (d_model // n_heads) % 2:
            raise ValueError(f"rotary positions need an even head size, got {d_model // n_heads}")
        self.d_model, self.n_heads, self.n_kv_heads = d_model, n_heads, n_kv_heads
        self.head_dim = d_model // n_heads
        self.rope_base = rope_base
        ### BEGIN SOLUTION
        self.q_proj = nn.Linear(d_model, n_heads * self.head_dim, bias=bias)
        self.k_proj = nn.Linear(d_model, n_kv_heads * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(d_model, n_kv_heads * self.head_dim, bias=bias)
        self.o_proj = nn.Linear(n_heads * self.head_dim, d_model, bias=bias)
        ### END SOLUTION

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None, *, causal: bool = False,
                memory: torch.Tensor | None = None, cache: KVCache | None = None,
                positions: torch.Tensor | None = None, return_weights: bool = False,
                head_mask: torch.Tensor | None = None):
        """Attend from the tokens of ``x`` to themselves, or to ``memory``.

        x: (b, n, d_model), the tokens that ask (queries).
        mask: optional boolean, True = may attend, broadcastable to (b, H, n, n_k); a padding mask
           of shape (b, n_k) is passed as ``mask[:, None, None, :]``.
        causal: query i may see key j only if j <= i + n_k - n; built after the cache is extended,
           so a new token sees every cached one. Combined (and) with ``mask``. Ignored with memory.
        memory: (b, m, d_model) for cross-attention: keys and values come from it (no rotation);
           with a cache, the memory's keys and values are computed once and then read from it.
        cache: a ``KVCache``, extended with this call's (rotated) keys and values.
        positions: integer positions of the tokens of x, (n,) or (b, n), for the rotation;
           default ``cache.length, ..., cache.length + n - 1`` (0, ..., n-1 without a cache).
        head_mask: (H,) numbers that multiply each head's output before ``o_proj`` (0 prunes it).
        Returns out (b, n, d_model), or (out, weights (b, H, n, n_k)) with ``return_weights``.
        """
        _check_tensor("x", x, 3)
        if x.dim() != 3 or x.shape[-1] != self.d_model:
            raise ValueError(f"x must be (batch, n, d_model={self.d_model}), got shape {tuple(x.shape)}")
        if memory is not None and (memory.dim() != 3 or memory.shape[0] != x.shape[0]
                                   or memory.shape[-1] != self.d_model):
            raise ValueError(f"memory must be (batch={x.shape[0]}, m, d_model={self.d_model}), "
                             f"got shape {tuple(memory.shape)}")
        if mask is not None and (not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool):
            raise TypeError("mask must be a boolean torch.Tensor (True = may attend)")
        if head_mask is not None and tuple(head_mask.shape) != (self.n_heads,):
            raise ValueError(f"head_mask must have shape ({self.n_heads},), one number per head, "
                             f"got {tuple(head_mask.shape)}")
        ### BEGIN SOLUTION
        n = x.shape[1]
        q = split_heads(self.q_proj(x), self.n_heads)                      # (b, H, n, h)
        if memory is not None:                                              # cross-attention
            if cache is not None and cache.length:
                k, v = cache.keys, cache.values                             # memory seen already
            else:
                k = split_heads(self.k_proj(memory), self.n_kv_heads)       # (b, G, m, h)
                v = split_heads(self.v_proj(memory), self.n_kv_heads)
                if cache is not None:
                    k, v = cache.append(k, v)
        else:                                                               # self-attention
            k = split_heads(self.k_proj(x), self.n_kv_heads)                # (b, G, n, h)
            v = split_heads(self.v_proj(x), self.n_kv_heads)
            if self.rope_base is not None:
                if positions is None:
                    start = 0 if cache is None else cache.length
                    positions = torch.arange(start, start + n, device=x.device)
                if positions.dim() == 2:                                    # (b, n): one row per sequence
                    positions = positions[:, None, :]                       # broadcast over heads
                q = rotary.apply_rope(q, positions, base=self.rope_base, layout="half")
                k = rotary.apply_rope(k, positions, base=self.rope_base, layout="half")
            if cache is not None:
                k, v = cache.append(k, v)                                   # (b, G, n_k, h)
        allowed = mask
        if causal and memory is None:
            lower = masking.causal_mask(n, k.shape[-2]).to(x.device)
            allowed = lower if mask is None else mask & lower
        n_rep = self.n_heads // self.n_kv_heads
        out, weights = masking.masked_attention(q, repeat_kv(k, n_rep), repeat_kv(v, n_rep), allowed)
        if head_mask is not None:
            out = out * head_mask.to(out.dtype)[:, None, None]
        out = self.o_proj(merge_heads(out))
        return (out, weights) if return_weights else out
        ### END SOLUTION


def kv_cache_bytes(n_layers: int, n_kv_heads: int, head_dim: int, seq_len: int, dtype_bytes: int,
                   batch: int = 1) -> int:
    """Bytes of a KV cache: keys and values of ``seq_len`` tokens, in every layer and KV head.

    dtype_bytes: bytes per number (2 for bfloat16 or float16, 4 for float32). Returns an int.
    """
    for name, value in (("n_layers", n_layers), ("n_kv_heads", n_kv_heads), ("head_dim", head_dim),
                        ("dtype_bytes", dtype_bytes), ("batch", batch)):
        _check_count(name, value)
    _check_count("seq_len", seq_len, low=0)
    ### BEGIN SOLUTION
    return 2 * n_layers * n_kv_heads * head_dim * seq_len * dtype_bytes * batch
    ### END SOLUTION
