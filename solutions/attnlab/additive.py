"""Lesson 01: additive (Bahdanau) attention.

You fill in four pieces here; the notebook ``01_bahdanau_attention.ipynb`` explains each one and
checks it. Shapes use ``...`` for any number of leading batch dimensions, and matrices are applied
on the right, as in PyTorch (``x @ W``).

- ``additive_scores(query, keys, W_q, W_k, v)``: the score of every key,
  ``tanh(query @ W_q + keys[j] @ W_k) @ v``;
- ``additive_attention(query, keys, values, W_q, W_k, v, mask=None)``: scores, a softmax over the
  keys that may be used, and the weighted average of the values; returns ``(context, weights)``;
- ``AdditiveAttention(d_q, d_k, d_attn)``: the same as an ``nn.Module`` that owns ``W_q``, ``W_k``
  and ``v`` as parameters;
- ``AttentionDecoderStep``: one step of Bahdanau's decoder: attend over the encoder states with the
  previous decoder state, feed the context and the previous token to a GRU cell, predict the next
  token.
"""

from __future__ import annotations

import math

import torch
from torch import nn


def _check_tensor(name: str, t, min_dim: int, meaning: str) -> None:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if not t.is_floating_point():
        raise TypeError(f"{name} must be floating point, got {t.dtype}")
    if t.dim() < min_dim:
        raise ValueError(f"{name} must have shape {meaning}, got {tuple(t.shape)}")


def _check_scores_inputs(query, keys, W_q, W_k, v) -> None:
    """Raise a clear error for inputs whose additive scores cannot be computed."""
    _check_tensor("query", query, 1, "(..., d_q)")
    _check_tensor("keys", keys, 2, "(..., n, d_k)")
    _check_tensor("W_q", W_q, 2, "(d_q, d_attn)")
    _check_tensor("W_k", W_k, 2, "(d_k, d_attn)")
    _check_tensor("v", v, 1, "(d_attn,)")
    if W_q.dim() != 2 or W_k.dim() != 2 or v.dim() != 1:
        raise ValueError(
            f"W_q must be (d_q, d_attn), W_k (d_k, d_attn) and v (d_attn,); got W_q "
            f"{tuple(W_q.shape)}, W_k {tuple(W_k.shape)}, v {tuple(v.shape)}"
        )
    dtypes = {t.dtype for t in (query, keys, W_q, W_k, v)}
    if len(dtypes) > 1:
        raise TypeError(
            f"query, keys, W_q, W_k and v must share one dtype, got {sorted(str(d) for d in dtypes)}; "
            "convert them first (e.g. .double() on all of them)"
        )
    if query.shape[-1] != W_q.shape[0]:
        raise ValueError(
            f"query has size d_q={query.shape[-1]} but W_q is {tuple(W_q.shape)}; W_q must be (d_q, d_attn)"
        )
    if keys.shape[-1] != W_k.shape[0]:
        raise ValueError(
            f"keys have size d_k={keys.shape[-1]} but W_k is {tuple(W_k.shape)}; W_k must be (d_k, d_attn)"
        )
    if not W_q.shape[1] == W_k.shape[1] == v.shape[0]:
        raise ValueError(
            f"W_q {tuple(W_q.shape)}, W_k {tuple(W_k.shape)} and v {tuple(v.shape)} must share the "
            "attention size d_attn (the last dimension of W_q and W_k, the length of v)"
        )
    try:
        torch.broadcast_shapes(query.shape[:-1], keys.shape[:-2])
    except RuntimeError:
        raise ValueError(
            f"the batch dimensions of query {tuple(query.shape)} = (..., d_q) and keys "
            f"{tuple(keys.shape)} = (..., n, d_k) do not broadcast"
        ) from None


def additive_scores(query: torch.Tensor, keys: torch.Tensor, W_q: torch.Tensor,
                    W_k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Bahdanau's additive score of every key for a query.

    query: (..., d_q), one query per batch element (in the decoder: the previous decoder state).
    keys:  (..., n, d_k), n keys per batch element (in the decoder: the encoder states).
    W_q:   (d_q, d_attn); W_k: (d_k, d_attn); v: (d_attn,).
    Returns scores of shape (..., n): the score of key j is ``tanh(query @ W_q + keys[j] @ W_k) @ v``.
    The leading dimensions of query and keys broadcast; the dtype of the inputs is kept.

    Project the query once and every key once, add the query's projection to each key's (insert
    a key axis into the query's with ``unsqueeze(-2)``), apply tanh, then reduce the attention
    axis with ``v``.
    """
    _check_scores_inputs(query, keys, W_q, W_k, v)
    ### BEGIN SOLUTION
    hidden = torch.tanh((query @ W_q).unsqueeze(-2) + keys @ W_k)  # (..., n, d_attn)
    return hidden @ v
    ### END SOLUTION


def _check_values_and_mask(query, keys, values, mask) -> None:
    """Raise a clear error for values or a mask that do not fit the keys."""
    _check_tensor("values", values, 2, "(..., n, d_v)")
    if values.dtype != keys.dtype:
        raise TypeError(f"values must have the dtype of keys ({keys.dtype}), got {values.dtype}")
    if values.shape[-2] != keys.shape[-2]:
        raise ValueError(
            f"keys and values must have the same number n of positions: keys {tuple(keys.shape)}, "
            f"values {tuple(values.shape)}"
        )
    scores_shape = (*torch.broadcast_shapes(query.shape[:-1], keys.shape[:-2]), keys.shape[-2])
    try:
        torch.broadcast_shapes(values.shape[:-2], scores_shape[:-1])
    except RuntimeError:
        raise ValueError(
            f"the batch dimensions of values {tuple(values.shape)} do not broadcast with those of "
            f"the scores {scores_shape} = (..., n)"
        ) from None
    if mask is None:
        return
    if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
        got = mask.dtype if isinstance(mask, torch.Tensor) else type(mask).__name__
        raise TypeError(f"mask must be a boolean torch.Tensor (True = may be used), got {got}")
    try:
        fits = torch.broadcast_shapes(mask.shape, scores_shape) == torch.Size(scores_shape)
    except RuntimeError:
        fits = False
    if not fits:
        raise ValueError(
            f"mask of shape {tuple(mask.shape)} does not broadcast to the scores' shape "
            f"{scores_shape} = (..., n)"
        )
    if not bool(mask.any(dim=-1).all()):
        raise ValueError(
            "every query needs at least one key it may use, but a row of the mask is all False "
            "(an empty source?); a softmax over no keys is undefined"
        )


def additive_attention(
    query: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    W_q: torch.Tensor,
    W_k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Additive attention: score the keys, softmax over the usable ones, average the values.

    query: (..., d_q); keys: (..., n, d_k); values: (..., n, d_v); W_q, W_k, v as in
       ``additive_scores``. Leading dimensions broadcast.
    mask: optional boolean tensor broadcastable to (..., n); True where a key may be used, False
       at padding (PyTorch's convention). Every row must allow at least one key: a fully masked
       row is a ``ValueError`` (raised for you by the input checks).
    Returns ``(context, weights)``: context (..., d_v), the weighted average of the values;
    weights (..., n), non-negative, summing to 1 over the keys the mask allows and exactly 0 where
    it is False. The dtype of the inputs is kept; the inputs are left unchanged.

    Use ``additive_scores``, set the masked scores to ``-inf`` before the softmax (so their weight
    is exactly 0), take the softmax over the key axis, and average the values with the weights.
    """
    _check_scores_inputs(query, keys, W_q, W_k, v)
    _check_values_and_mask(query, keys, values, mask)
    ### BEGIN SOLUTION
    scores = additive_scores(query, keys, W_q, W_k, v)
    usable = scores if mask is None else scores.masked_fill(~mask, -math.inf)
    weights = torch.softmax(usable, dim=-1)  # exp(-inf) = 0: masked keys get weight exactly 0
    context = (weights.unsqueeze(-2) @ values).squeeze(-2)
    return context, weights  # (..., d_v), (..., n)
    ### END SOLUTION


def _check_size(name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")


class AdditiveAttention(nn.Module):
    """Additive attention as a module: it owns the parameters ``W_q``, ``W_k`` and ``v``.

    AdditiveAttention(d_q, d_k, d_attn) has three ``nn.Parameter``s, shapes as in
    ``additive_scores``: ``W_q`` (d_q, d_attn), ``W_k`` (d_k, d_attn), ``v`` (d_attn,).
    ``reset_parameters`` draws them (uniform in ±1/sqrt(fan-in), like ``nn.Linear``), so
    ``torch.manual_seed`` before construction fixes them.

    forward(query, keys, values, mask=None) -> (context, weights), exactly as
    ``additive_attention`` with the module's parameters.
    """

    def __init__(self, d_q: int, d_k: int, d_attn: int):
        for name, value in (("d_q", d_q), ("d_k", d_k), ("d_attn", d_attn)):
            _check_size(name, value)
        super().__init__()
        self.d_q, self.d_k, self.d_attn = d_q, d_k, d_attn
        # Create the three parameters: tensors of the right shapes (torch.empty) wrapped in
        # nn.Parameter. The call below then fills them.
        ### BEGIN SOLUTION
        self.W_q = nn.Parameter(torch.empty(d_q, d_attn))
        self.W_k = nn.Parameter(torch.empty(d_k, d_attn))
        self.v = nn.Parameter(torch.empty(d_attn))
        ### END SOLUTION
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Draw W_q, W_k and v uniformly in ±1/sqrt(fan-in), as ``nn.Linear`` does."""
        with torch.no_grad():
            for parameter, fan_in in ((self.W_q, self.d_q), (self.W_k, self.d_k), (self.v, self.d_attn)):
                bound = 1.0 / math.sqrt(fan_in)
                parameter.uniform_(-bound, bound)

    def forward(self, query: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
                mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """(context (..., d_v), weights (..., n)) of ``additive_attention`` with this module's parameters."""
        ### BEGIN SOLUTION
        return additive_attention(query, keys, values, self.W_q, self.W_k, self.v, mask)
        ### END SOLUTION

    def extra_repr(self) -> str:
        return f"d_q={self.d_q}, d_k={self.d_k}, d_attn={self.d_attn}"


class AttentionDecoderStep(nn.Module):
    """One step of Bahdanau's attention decoder, on a batch.

    AttentionDecoderStep(vocab_size, d_embed, d_hidden, d_enc, d_attn) owns, ready-made:

    - ``embedding``: nn.Embedding(vocab_size, d_embed), the previous output token's vector;
    - ``attention``: AdditiveAttention(d_hidden, d_enc, d_attn), queried with the decoder state;
    - ``cell``: nn.GRUCell(d_embed + d_enc, d_hidden), whose input is (embedding, context)
      concatenated in that order;
    - ``output``: nn.Linear(d_hidden + d_enc, vocab_size), reading (new hidden, context) in that
      order.

    forward(prev_tokens, hidden, encoder_states, mask=None) -> (logits, new_hidden, weights):

    prev_tokens:    (batch,) long, the previous output token (the start token at the first step).
    hidden:         (batch, d_hidden), the previous decoder state s_{i-1}.
    encoder_states: (batch, n, d_enc), one state per source position: the keys and the values.
    mask:           optional (batch, n) boolean, True at real source tokens, False at padding.
    Returns logits (batch, vocab_size) for the next token, the new state (batch, d_hidden) and
    the attention weights (batch, n) this step used.
    """

    def __init__(self, vocab_size: int, d_embed: int, d_hidden: int, d_enc: int, d_attn: int):
        for name, value in (("vocab_size", vocab_size), ("d_embed", d_embed), ("d_hidden", d_hidden),
                            ("d_enc", d_enc), ("d_attn", d_attn)):
            _check_size(name, value)
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, d_embed)
        self.attention = AdditiveAttention(d_hidden, d_enc, d_attn)
        self.cell = nn.GRUCell(d_embed + d_enc, d_hidden)
        self.output = nn.Linear(d_hidden + d_enc, vocab_size)

    def forward(self, prev_tokens: torch.Tensor, hidden: torch.Tensor, encoder_states: torch.Tensor,
                mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(logits, new_hidden, weights): attend with ``hidden``, update the state, predict.

        1. attend: ``self.attention`` with ``hidden`` as the query, the encoder states as both keys
           and values, and the mask, gives the context and the weights;
        2. update: ``self.cell`` reads (embedding of prev_tokens, context), concatenated in that
           order, and ``hidden``; its output is the new state;
        3. predict: ``self.output`` reads (new state, context), concatenated in that order.
        """
        if not isinstance(prev_tokens, torch.Tensor) or prev_tokens.dtype != torch.long:
            raise TypeError("prev_tokens must be a torch.long tensor of token ids, shape (batch,)")
        if prev_tokens.dim() != 1 or hidden.dim() != 2 or encoder_states.dim() != 3:
            raise ValueError(
                f"expected prev_tokens (batch,), hidden (batch, d_hidden), encoder_states "
                f"(batch, n, d_enc); got {tuple(prev_tokens.shape)}, {tuple(hidden.shape)}, "
                f"{tuple(encoder_states.shape)}"
            )
        if not prev_tokens.shape[0] == hidden.shape[0] == encoder_states.shape[0]:
            raise ValueError(
                f"prev_tokens, hidden and encoder_states must share the batch size, got "
                f"{prev_tokens.shape[0]}, {hidden.shape[0]} and {encoder_states.shape[0]}"
            )
        ### BEGIN SOLUTION
        context, weights = self.attention(hidden, encoder_states, encoder_states, mask)
        cell_input = torch.cat([self.embedding(prev_tokens), context], dim=-1)
        new_hidden = self.cell(cell_input, hidden)
        logits = self.output(torch.cat([new_hidden, context], dim=-1))
        return logits, new_hidden, weights  # (batch, vocab_size), (batch, d_hidden), (batch, n)
        ### END SOLUTION
