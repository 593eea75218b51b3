# Generated from solutions/attnlab/stacks.py by `python -m autograder release`; maintainers edit that file, not this one.
# Learners: fill in the bodies marked YOUR CODE HERE (lesson 07).
"""Lesson 07: three ways to stack one block, encoder-only, decoder-only and encoder-decoder.

You fill in six pieces here; the notebook ``07_three_ways_to_stack.ipynb`` explains each one and
checks it. Shapes: ``b`` batch, ``n`` tokens, ``m`` source tokens, ``d`` = d_model.

- ``EncoderBlock``: self-attention that sees every token (no mask but padding), then a feed-forward
  block, each with its residual connection and its normalization.
- ``DecoderBlock``: causal self-attention, an optional cross-attention to an encoder's output, then a
  feed-forward block.
- ``EncoderOnly`` (BERT-like): embeddings, encoder blocks, a final norm and a classification head.
- ``DecoderOnly`` (GPT-like; the course model is one): embeddings, decoder blocks, a final norm and
  a language-model head, optionally tied to the embeddings.
- ``EncoderDecoder`` (the 2017 transformer, T5, Whisper): an encoder for the source, a decoder with
  cross-attention for the target.
- ``generate(model, prompt, max_new_tokens, ...)``: write text token by token, with or without the
  KV cache.

The blocks are made of your own earlier modules: ``attnlab.multihead.MultiHeadAttention`` (lesson
04, which uses your ``attnlab.masking`` of lesson 03 and ``attnlab.positions`` of lesson 05) and
``attnlab.feedforward`` (lesson 06), unless you borrowed their references.

Names of the submodules (they are the names of the parameters in a saved model, so the course
model's weights load into your classes only if you keep them exactly):

- ``EncoderBlock``: ``attn_norm``, ``self_attn``, ``ffn_norm``, ``ffn``.
- ``DecoderBlock``: ``attn_norm``, ``self_attn``, then with cross-attention ``cross_norm``,
  ``cross_attn``, then ``ffn_norm``, ``ffn``.
  (``*_norm`` a ``feedforward.LayerNorm`` or ``RMSNorm``; ``*_attn`` a
  ``multihead.MultiHeadAttention``; ``ffn`` a ``feedforward.FeedForward``.)
- ``EncoderOnly``: ``embed`` (``nn.Embedding``), ``blocks`` (``nn.ModuleList`` of EncoderBlock),
  ``final_norm``, ``classifier`` (``nn.Linear(d, n_classes)``, when ``n_classes`` is given).
- ``DecoderOnly``: ``embed``, ``blocks`` (of DecoderBlock), ``final_norm``, ``lm_head``
  (``nn.Linear(d, vocab_size, bias=False)``, its weight the embedding's when tied).
- ``EncoderDecoder``: ``embed`` (shared by source and target), ``encoder`` (``nn.ModuleList`` of
  EncoderBlock), ``encoder_norm``, ``decoder`` (of DecoderBlock with cross-attention),
  ``decoder_norm``, ``lm_head``.

So the course model's state dict has keys such as ``embed.weight``,
``blocks.0.attn_norm.weight``, ``blocks.0.self_attn.q_proj.weight``, ``blocks.0.ffn.up.weight``,
``final_norm.bias`` and ``lm_head.weight``.

Pre-norm (``placement="pre"``, the default, as GPT-2, LLaMA and Qwen2.5): ``x + sublayer(norm(x))``
for each sublayer. Post-norm (``"post"``, as the 2017 transformer): ``norm(x + sublayer(x))``; a
post-norm model's ``final_norm`` is ``nn.Identity`` (its last block already normalized).
Positions: rotary (RoPE, lesson 05) in every self-attention, ``rope_base=10000.0`` by default;
``rope_base=None`` gives a model with no positions at all.
"""

from __future__ import annotations

import importlib

import torch
from torch import nn


class _Library:
    """``attnlab.<name>`` as it is at the moment of each use, so that ``attnlab.use_reference``
    and ``use_own`` take effect for blocks built afterwards."""

    def __init__(self, name: str):
        self._name = f"attnlab.{name}"

    def __getattr__(self, attribute: str):
        return getattr(importlib.import_module(self._name), attribute)


multihead = _Library("multihead")      # lesson 04: MultiHeadAttention, KVCache
feedforward = _Library("feedforward")  # lesson 06: FeedForward, LayerNorm, RMSNorm

PLACEMENTS = ("pre", "post")
NORMS = ("layer", "rms")


def _check_count(name: str, value, low: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
    return value


def _check_choice(name: str, value, options: tuple) -> None:
    if value not in options:
        raise ValueError(f"{name} must be one of {options}, got {value!r}")


def _check_tokens(tokens, vocab_size: int, name: str = "tokens") -> None:
    if not isinstance(tokens, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of token ids, got {type(tokens).__name__}")
    if tokens.dim() != 2 or tokens.dtype not in (torch.int64, torch.int32):
        raise ValueError(f"{name} must be a (batch, n) tensor of integer ids, got shape "
                         f"{tuple(tokens.shape)} and dtype {tokens.dtype}")
    if tokens.numel() and (int(tokens.min()) < 0 or int(tokens.max()) >= vocab_size):
        raise ValueError(f"{name} holds ids outside the vocabulary [0, {vocab_size})")


def _check_padding(mask, tokens, name: str = "mask") -> None:
    if mask is None:
        return
    if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool or mask.shape != tokens.shape:
        raise ValueError(f"{name} must be a boolean (batch, n) tensor shaped like the tokens "
                         f"{tuple(tokens.shape)}, True at real tokens")


def make_norm(kind: str, d: int) -> nn.Module:
    """The normalization of a block: ``feedforward.LayerNorm(d)`` ("layer") or ``RMSNorm(d)`` ("rms")."""
    _check_choice("norm", kind, NORMS)
    return feedforward.LayerNorm(d) if kind == "layer" else feedforward.RMSNorm(d)


def initialize(model: nn.Module, n_layers: int) -> None:
    """Draw every weight of ``model`` afresh (given; each model's ``__init__`` calls it last): each
    linear map and embedding from N(0, 1/fan_in) (fan_in: a linear map's input size, an
    embedding's width), biases zero, norms unchanged; the maps that write into the residual stream
    (``o_proj`` and ``ffn.down``) are scaled down by a further sqrt(2 * n_layers), as in GPT-2
    (Radford et al., 2019), so that the stream does not grow with depth. Tied embeddings get
    N(0, 1/d_model) either way."""
    for name, module in model.named_modules():
        if isinstance(module, (nn.Linear, nn.Embedding)):
            fan_in = module.weight.shape[1]
            scale = (2 * n_layers) ** -0.5 if name.endswith(("o_proj", "ffn.down")) else 1.0
            nn.init.normal_(module.weight, mean=0.0, std=fan_in ** -0.5 * scale)
            if getattr(module, "bias", None) is not None:
                nn.init.zeros_(module.bias)


def _sublayer(placement: str, x: torch.Tensor, norm: nn.Module, sublayer, *args, **kwargs):
    """One residual step, pre-norm or post-norm: (new x, attention weights or None).

    The sublayer returns its output, or (output, weights) when called with return_weights=True.
    """
    result = sublayer(norm(x) if placement == "pre" else x, *args, **kwargs)
    update, weights = result if isinstance(result, tuple) else (result, None)
    return (x + update if placement == "pre" else norm(x + update)), weights


class EncoderBlock(nn.Module):
    """One encoder block: self-attention over all tokens, then a feed-forward block.

    d_model, n_heads, n_kv_heads, rope_base: as ``multihead.MultiHeadAttention``; d_ff and
    activation: as ``feedforward.FeedForward``; norm: "layer" or "rms"; placement: "pre" or "post";
    bias: biases in the attention's projections.
    Submodules: ``attn_norm``, ``self_attn``, ``ffn_norm``, ``ffn``.

    forward(x (b, n, d), mask=None, *, positions=None, return_weights=False):
      mask: boolean, True = may attend, broadcastable to (b, n_heads, n, n); for padding pass
      ``padding[:, None, None, :]``. No causal mask: every token sees every other token.
      Returns x (b, n, d), or (x, weights (b, n_heads, n, n)) with ``return_weights``.
    """

    def __init__(self, d_model: int, n_heads: int, d_ff: int, *, n_kv_heads: int | None = None,
                 activation: str = "gelu", norm: str = "layer", placement: str = "pre",
                 rope_base: float | None = 10000.0, bias: bool = False):
        super().__init__()
        _check_count("d_ff", d_ff)
        _check_choice("norm", norm, NORMS)
        _check_choice("placement", placement, PLACEMENTS)
        self.placement = placement
        # YOUR CODE HERE
        raise NotImplementedError(
            "Lesson 07: EncoderBlock.__init__() in attnlab/stacks.py is not written yet. "
            "Fill in its body, or borrow the course's reference with attnlab.use_reference('stacks')"
        )

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None, *,
                positions: torch.Tensor | None = None, return_weights: bool = False):
        # YOUR CODE HERE
        raise NotImplementedError(
            "Lesson 07: EncoderBlock.forward() in attnlab/stacks.py is not written yet. "
            "Fill in its body, or borrow the course's reference with attnlab.use_reference('stacks')"
        )


class DecoderBlock(nn.Module):
    """One decoder block: causal self-attention, optional cross-attention, then a feed-forward block.

    Arguments as ``EncoderBlock``; cross_attention: True adds ``cross_norm`` and ``cross_attn``,
    which read an encoder's output (``memory``).
    Submodules: ``attn_norm``, ``self_attn``, (``cross_norm``, ``cross_attn``), ``ffn_norm``, ``ffn``.

    forward(x (b, n, d), memory=None, *, memory_mask=None, cache=None, positions=None,
    return_weights=False):
      the self-attention is causal (token i sees tokens up to i, and every cached token);
      memory: (b, m, d), the encoder's output, needed exactly when the block has cross-attention;
      memory_mask: boolean (b, m), True at real source tokens (padding is not attended to);
      cache: a ``multihead.KVCache`` for the self-attention, extended by this call.
      Returns x (b, n, d), or with ``return_weights`` (x, self_weights (b, n_heads, n, n_k),
      cross_weights (b, n_heads, n, m) or None without cross-attention).
    """

    def __init__(self, d_model: int, n_heads: int, d_ff: int, *, n_kv_heads: int | None = None,
                 cross_attention: bool = False, activation: str = "gelu", norm: str = "layer",
                 placement: str = "pre", rope_base: float | None = 10000.0, bias: bool = False):
        super().__init__()
        _check_count("d_ff", d_ff)
        _check_choice("norm", norm, NORMS)
        _check_choice("placement", placement, PLACEMENTS)
        self.placement, self.cross_attention = placement, bool(cross_attention)
        # YOUR CODE HERE
        raise NotImplementedError(
            "Lesson 07: DecoderBlock.__init__() in attnlab/stacks.py is not written yet. "
            "Fill in its body, or borrow the course's reference with attnlab.use_reference('stacks')"
        )

    def forward(self, x: torch.Tensor, memory: torch.Tensor | None = None, *,
                memory_mask: torch.Tensor | None = None, cache=None,
                positions: torch.Tensor | None = None, return_weights: bool = False):
        if self.cross_attention and memory is None:
            raise ValueError("this DecoderBlock has cross-attention: pass the encoder's output as memory")
        if not self.cross_attention and memory is not None:
            raise ValueError("this DecoderBlock has no cross-attention (cross_attention=False), "
                             "so it cannot read memory")
        # YOUR CODE HERE
        raise NotImplementedError(
            "Lesson 07: DecoderBlock.forward() in attnlab/stacks.py is not written yet. "
            "Fill in its body, or borrow the course's reference with attnlab.use_reference('stacks')"
        )


class EncoderOnly(nn.Module):
    """A BERT-like encoder: every token sees every other; it reads, it does not write.

    vocab_size, d_model, n_layers, n_heads, d_ff: sizes; n_classes: the number of classes of the
    classification head (None: no head); the other arguments as ``EncoderBlock``.
    Submodules: ``embed``, ``blocks``, ``final_norm``, ``classifier`` (when n_classes is given).

    forward(tokens (b, n), mask=None, *, return_weights=False): the final hidden states (b, n, d),
      after ``final_norm``; mask: boolean (b, n), True at real tokens, False at padding (no token
      attends to padding). With ``return_weights``: (hidden, [weights of each layer]).
    classify(tokens, mask=None): class logits (b, n_classes), from the mean of the hidden states of
      the real tokens.
    """

    def __init__(self, vocab_size: int, d_model: int, n_layers: int, n_heads: int, d_ff: int, *,
                 n_classes: int | None = None, n_kv_heads: int | None = None, activation: str = "gelu",
                 norm: str = "layer", placement: str = "pre", rope_base: float | None = 10000.0,
                 bias: bool = False):
        super().__init__()
        _check_count("vocab_size", vocab_size)
        _check_count("n_layers", n_layers)
        if n_classes is not None:
            _check_count("n_classes", n_classes)
        _check_choice("placement", placement, PLACEMENTS)
        self.vocab_size, self.n_classes = vocab_size, n_classes
        # YOUR CODE HERE
        raise NotImplementedError(
            "Lesson 07: EncoderOnly.__init__() in attnlab/stacks.py is not written yet. "
            "Fill in its body, or borrow the course's reference with attnlab.use_reference('stacks')"
        )
        initialize(self, n_layers)

    def forward(self, tokens: torch.Tensor, mask: torch.Tensor | None = None, *, return_weights: bool = False):
        _check_tokens(tokens, self.vocab_size)
        _check_padding(mask, tokens)
        # YOUR CODE HERE
        raise NotImplementedError(
            "Lesson 07: EncoderOnly.forward() in attnlab/stacks.py is not written yet. "
            "Fill in its body, or borrow the course's reference with attnlab.use_reference('stacks')"
        )

    def classify(self, tokens: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        if self.n_classes is None:
            raise ValueError("this EncoderOnly has no classification head: build it with n_classes=...")
        # YOUR CODE HERE
        raise NotImplementedError(
            "Lesson 07: EncoderOnly.classify() in attnlab/stacks.py is not written yet. "
            "Fill in its body, or borrow the course's reference with attnlab.use_reference('stacks')"
        )


class DecoderOnly(nn.Module):
    """A GPT-like language model: each token sees itself and the tokens before it, and the model
    predicts the next token at every position. The course model is one.

    vocab_size, d_model, n_layers, n_heads, d_ff: sizes; tie_embeddings: the language-model head
    shares its weight with the embedding (the logits are the dot products of the final hidden state
    with every token's embedding); the other arguments as ``DecoderBlock``.
    Submodules: ``embed``, ``blocks``, ``final_norm``, ``lm_head``.

    forward(tokens (b, n), cache=None, *, return_weights=False): next-token logits (b, n, vocab).
      cache: a list of one ``multihead.KVCache`` per layer; the tokens then continue the cached
      text (their positions start at the cache's length). With ``return_weights``:
      (logits, [self-attention weights (b, n_heads, n, n_k) of each layer]).
    """

    def __init__(self, vocab_size: int, d_model: int, n_layers: int, n_heads: int, d_ff: int, *,
                 n_kv_heads: int | None = None, activation: str = "gelu", norm: str = "layer",
                 placement: str = "pre", rope_base: float | None = 10000.0, tie_embeddings: bool = True,
                 bias: bool = False):
        super().__init__()
        _check_count("vocab_size", vocab_size)
        _check_count("n_layers", n_layers)
        _check_choice("placement", placement, PLACEMENTS)
        self.vocab_size, self.n_layers = vocab_size, n_layers
        # YOUR CODE HERE
        raise NotImplementedError(
            "Lesson 07: DecoderOnly.__init__() in attnlab/stacks.py is not written yet. "
            "Fill in its body, or borrow the course's reference with attnlab.use_reference('stacks')"
        )
        initialize(self, n_layers)

    def new_cache(self) -> list:
        """An empty KV cache: one ``multihead.KVCache`` per layer."""
        return [multihead.KVCache() for _ in range(self.n_layers)]

    def forward(self, tokens: torch.Tensor, cache: list | None = None, *, return_weights: bool = False):
        _check_tokens(tokens, self.vocab_size)
        if cache is not None and len(cache) != self.n_layers:
            raise ValueError(f"cache must hold one KVCache per layer ({self.n_layers}), got {len(cache)}")
        # YOUR CODE HERE
        raise NotImplementedError(
            "Lesson 07: DecoderOnly.forward() in attnlab/stacks.py is not written yet. "
            "Fill in its body, or borrow the course's reference with attnlab.use_reference('stacks')"
        )


class EncoderDecoder(nn.Module):
    """The transformer of 2017 (and T5, Whisper): an encoder reads the source, a decoder writes the
    target, reading the encoder's output through cross-attention in every block.

    vocab_size: one vocabulary for source and target (one ``embed``); n_layers encoder blocks and
    n_decoder_layers decoder blocks (None: as many); the rest as ``DecoderOnly``.
    Submodules: ``embed``, ``encoder``, ``encoder_norm``, ``decoder``, ``decoder_norm``, ``lm_head``.

    encode(source (b, m), source_mask=None): memory (b, m, d); source_mask boolean (b, m), True at
      real tokens.
    decode(target (b, n), memory, source_mask=None, cache=None, *, return_weights=False): logits
      (b, n, vocab) of the next target token at every position; cache: one KVCache per decoder
      layer (self-attention). With ``return_weights``: (logits, [self weights], [cross weights]).
    forward(source, target, source_mask=None, *, return_weights=False): decode(target, encode(source)).
    """

    def __init__(self, vocab_size: int, d_model: int, n_layers: int, n_heads: int, d_ff: int, *,
                 n_decoder_layers: int | None = None, n_kv_heads: int | None = None,
                 activation: str = "gelu", norm: str = "layer", placement: str = "pre",
                 rope_base: float | None = 10000.0, tie_embeddings: bool = True, bias: bool = False):
        super().__init__()
        _check_count("vocab_size", vocab_size)
        _check_count("n_layers", n_layers)
        n_decoder_layers = n_layers if n_decoder_layers is None else _check_count("n_decoder_layers",
                                                                                   n_decoder_layers)
        _check_choice("placement", placement, PLACEMENTS)
        self.vocab_size, self.n_decoder_layers = vocab_size, n_decoder_layers
        # YOUR CODE HERE
        raise NotImplementedError(
            "Lesson 07: EncoderDecoder.__init__() in attnlab/stacks.py is not written yet. "
            "Fill in its body, or borrow the course's reference with attnlab.use_reference('stacks')"
        )
        initialize(self, n_layers + n_decoder_layers)

    def new_cache(self) -> list:
        """An empty KV cache for the decoder: one ``multihead.KVCache`` per decoder layer."""
        return [multihead.KVCache() for _ in range(self.n_decoder_layers)]

    def encode(self, source: torch.Tensor, source_mask: torch.Tensor | None = None) -> torch.Tensor:
        _check_tokens(source, self.vocab_size, "source")
        _check_padding(source_mask, source, "source_mask")
        # YOUR CODE HERE
        raise NotImplementedError(
            "Lesson 07: EncoderDecoder.encode() in attnlab/stacks.py is not written yet. "
            "Fill in its body, or borrow the course's reference with attnlab.use_reference('stacks')"
        )

    def decode(self, target: torch.Tensor, memory: torch.Tensor, source_mask: torch.Tensor | None = None,
               cache: list | None = None, *, return_weights: bool = False):
        _check_tokens(target, self.vocab_size, "target")
        if cache is not None and len(cache) != self.n_decoder_layers:
            raise ValueError(f"cache must hold one KVCache per decoder layer ({self.n_decoder_layers}), "
                             f"got {len(cache)}")
        # YOUR CODE HERE
        raise NotImplementedError(
            "Lesson 07: EncoderDecoder.decode() in attnlab/stacks.py is not written yet. "
            "Fill in its body, or borrow the course's reference with attnlab.use_reference('stacks')"
        )

    def forward(self, source: torch.Tensor, target: torch.Tensor, source_mask: torch.Tensor | None = None, *,
                return_weights: bool = False):
        memory = self.encode(source, source_mask)
        return self.decode(target, memory, source_mask, return_weights=return_weights)


@torch.no_grad()
def generate(model: nn.Module, prompt: torch.Tensor, max_new_tokens: int, use_cache: bool = True,
             temperature: float = 0.0, generator: torch.Generator | None = None, *,
             source: torch.Tensor | None = None, source_mask: torch.Tensor | None = None) -> torch.Tensor:
    """Continue ``prompt`` by ``max_new_tokens`` tokens, one at a time.

    model: a ``DecoderOnly``; or an ``EncoderDecoder`` with ``source`` (b, m) (and ``source_mask``),
      whose decoder then writes the target starting from ``prompt`` (e.g. a begin token).
    prompt: (n,) or (b, n) token ids, n >= 1. Returns the prompt followed by the new tokens:
      (n + max_new_tokens,) or (b, n + max_new_tokens).
    use_cache: True runs the prompt once, then only the newest token at each step, reading the
      keys and values of the earlier tokens from a KV cache; False runs the whole text again at each
      step. Both give the same tokens.
    temperature: 0 picks the most likely token (greedy); above 0 samples from
      softmax(logits / temperature) with ``torch.multinomial(..., generator=generator)``.

    The code before the loop is given: ``tokens`` is the prompt as (b, n), and ``run(piece, cache)``
    returns the next-token logits (b, len(piece), vocab) of ``piece``, continuing ``cache`` (an
    empty one is ``model.new_cache()``; None for no cache).
    """
    if not isinstance(prompt, torch.Tensor) or prompt.dim() not in (1, 2) or prompt.shape[-1] < 1:
        raise ValueError("prompt must be a (n,) or (batch, n) tensor of token ids with n >= 1")
    _check_count("max_new_tokens", max_new_tokens, low=0)
    if not temperature >= 0:
        raise ValueError(f"temperature must be >= 0, got {temperature!r}")
    if source is not None and not hasattr(model, "encode"):
        raise ValueError("source is given, but the model has no encoder (use an EncoderDecoder)")
    if source is None and hasattr(model, "encode"):
        raise ValueError("an EncoderDecoder needs the source to translate: pass source=...")
    was_training = model.training
    model.eval()
    tokens = prompt[None] if prompt.dim() == 1 else prompt
    memory = None if source is None else model.encode(source, source_mask)

    def run(piece, cache=None):
        """Next-token logits (b, n, vocab) of the tokens ``piece`` (continuing ``cache``, if any)."""
        if memory is None:
            return model(piece, cache)
        return model.decode(piece, memory, source_mask, cache)

    # YOUR CODE HERE
    raise NotImplementedError(
        "Lesson 07: generate() in attnlab/stacks.py is not written yet. "
        "Fill in its body, or borrow the course's reference with attnlab.use_reference('stacks')"
    )
    model.train(was_training)
    return tokens[0] if prompt.dim() == 1 else tokens
