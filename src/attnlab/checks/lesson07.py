"""Visible checks of lesson 07: ``check_encoder_block``, ``check_decoder_block``,
``check_encoder_only``, ``check_decoder_only``, ``check_encoder_decoder``, ``check_generate``.

Each check builds your class, gives every parameter random values (norms included, so that a
missing norm shows), and compares what it computes with a float64 reference written here from
PyTorch's functions (``F.layer_norm``, ``F.rms_norm``, ``F.scaled_dot_product_attention``,
``F.gelu``) reading the same parameters by name. Then the properties any correct arrangement has:
no token of a decoder sees a later one (lesson 03's perturbation test), decoding token by token with
the KV cache gives what one full pass gives, cross-attention reads the source, padding is not
attended to, and ``generate`` gives the same tokens with and without the cache.
"""

from __future__ import annotations

import math
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from attnlab.checks.common import (
    _as_float64,
    _seeded,
    assert_close,
    assert_not_modified,
    assert_shape,
    explain_mismatch,
    run_checks,
)

__all__ = [
    "check_decoder_block",
    "check_decoder_only",
    "check_encoder_block",
    "check_encoder_decoder",
    "check_encoder_only",
    "check_generate",
    "reference_transformer_block",
    "reference_transformer",
]

# Submodules every arrangement must have, by the names the course model's weights use.
BLOCK_NAMES = ("attn_norm", "self_attn", "ffn_norm", "ffn")
CROSS_NAMES = ("cross_norm", "cross_attn")
MODEL_NAMES = {
    "EncoderOnly": ("embed", "blocks", "final_norm"),
    "DecoderOnly": ("embed", "blocks", "final_norm", "lm_head"),
    "EncoderDecoder": ("embed", "encoder", "encoder_norm", "decoder", "decoder_norm", "lm_head"),
}


# --------------------------------------------------------------------------------------------
# Trusted references (float64, functional, reading a state dict by name)
# --------------------------------------------------------------------------------------------


def _get(state: dict, name: str) -> torch.Tensor | None:
    value = state.get(name)
    return None if value is None else _as_float64(value)


def _norm(state: dict, prefix: str, x: torch.Tensor, eps: float | None = None) -> torch.Tensor:
    """LayerNorm if the state has ``prefix.bias``, else RMSNorm (eps: 1e-5 and 1e-6, the defaults)."""
    weight, bias = _get(state, f"{prefix}.weight"), _get(state, f"{prefix}.bias")
    if bias is not None:
        return F.layer_norm(x, x.shape[-1:], weight, bias, 1e-5 if eps is None else eps)
    return F.rms_norm(x, x.shape[-1:], weight, 1e-6 if eps is None else eps)


def _linear(state: dict, prefix: str, x: torch.Tensor) -> torch.Tensor:
    return F.linear(x, _get(state, f"{prefix}.weight"), _get(state, f"{prefix}.bias"))


def _rope(x: torch.Tensor, positions: torch.Tensor, base: float) -> torch.Tensor:
    """Rotary positions, "half" layout: pairs (i, i + h/2) turn by position * base^(-2i/h)."""
    h = x.shape[-1]
    angles = positions.to(torch.float64)[:, None] * base ** (-torch.arange(h // 2, dtype=torch.float64) * 2 / h)
    cos, sin = angles.cos(), angles.sin()
    first, second = x[..., : h // 2], x[..., h // 2:]
    return torch.cat([first * cos - second * sin, second * cos + first * sin], dim=-1)


def _attention(state: dict, prefix: str, x: torch.Tensor, source: torch.Tensor, n_heads: int, n_kv_heads: int,
               allowed: torch.Tensor | None, rope_base: float | None, start: int = 0):
    """Multi-head (grouped-query) attention of x (b, n, d) over source (b, m, d): (out, weights)."""
    b, n, d = x.shape
    h = d // n_heads
    q = _linear(state, f"{prefix}.q_proj", x).view(b, n, n_heads, h).transpose(1, 2)
    k = _linear(state, f"{prefix}.k_proj", source).view(b, -1, n_kv_heads, h).transpose(1, 2)
    v = _linear(state, f"{prefix}.v_proj", source).view(b, -1, n_kv_heads, h).transpose(1, 2)
    if rope_base is not None:
        q = _rope(q, torch.arange(start + k.shape[-2] - n, start + k.shape[-2]), rope_base)
        k = _rope(k, torch.arange(start, start + k.shape[-2]), rope_base)
    k = k.repeat_interleave(n_heads // n_kv_heads, dim=1)
    v = v.repeat_interleave(n_heads // n_kv_heads, dim=1)
    scores = q @ k.transpose(-2, -1) / math.sqrt(h)
    if allowed is not None:
        scores = scores.masked_fill(~allowed, -math.inf)
    weights = torch.softmax(scores, dim=-1)
    out = (weights @ v).transpose(1, 2).reshape(b, n, n_heads * h)
    return _linear(state, f"{prefix}.o_proj", out), weights


def _ffn(state: dict, prefix: str, x: torch.Tensor) -> torch.Tensor:
    if f"{prefix}.gate.weight" in state:
        hidden = F.silu(_linear(state, f"{prefix}.gate", x)) * _linear(state, f"{prefix}.up", x)
    else:
        hidden = F.gelu(_linear(state, f"{prefix}.up", x))
    return _linear(state, f"{prefix}.down", hidden)


def reference_transformer_block(state: dict, x, *, n_heads: int, n_kv_heads: int | None = None, causal: bool = False,
                    memory=None, memory_mask=None, mask=None, placement: str = "pre",
                    rope_base: float | None = 10000.0, prefix: str = "", mistake: str = "") -> dict:
    """One block (encoder block, or decoder block when ``causal``, with cross-attention when
    ``memory`` is given), in float64, from the parameters in ``state`` (names as in
    ``attnlab.stacks``, after ``prefix``). mask: boolean, broadcastable to (b, H, n, n).
    mistake: "" or one of the usual errors ("post" for "pre" and the reverse, "no residual",
    "no causal mask", "causal", "ffn reads x", "memory not masked", "cross before self").
    Returns {"out", "self_weights", "cross_weights"}.
    """
    x = _as_float64(x)
    n_kv = n_heads if n_kv_heads is None else n_kv_heads
    n = x.shape[1]
    p = prefix

    def step(x, norm_name, sublayer, reads_norm=True):
        pre = placement == "pre"
        if mistake == "post":
            pre = not pre
        skip = mistake == "no residual" or mistake == f"no residual around {norm_name[:-5]}"
        if pre:
            update = sublayer(_norm(state, p + norm_name, x) if reads_norm else x)
            return update if skip else x + update
        update = sublayer(x)
        return _norm(state, p + norm_name, update if skip else x + update)

    allowed = None if mask is None else torch.as_tensor(mask, dtype=torch.bool)
    use_causal = (causal and mistake != "no causal mask") or (not causal and mistake == "causal")
    if use_causal:
        lower = torch.ones(n, n, dtype=torch.bool).tril()
        allowed = lower if allowed is None else allowed & lower
    found = {}

    def self_attention(h):
        out, found["self_weights"] = _attention(state, p + "self_attn", h, h, n_heads, n_kv, allowed, rope_base)
        return out

    def cross_attention(h):
        keep = None
        if memory_mask is not None and mistake != "memory not masked":
            keep = torch.as_tensor(memory_mask, dtype=torch.bool)[:, None, None, :]
        out, found["cross_weights"] = _attention(state, p + "cross_attn", h, _as_float64(memory), n_heads, n_kv,
                                                 keep, None)
        return out

    order = ["self", "cross"] if mistake != "cross before self" else ["cross", "self"]
    for part in order:
        if part == "self":
            x = step(x, "attn_norm", self_attention)
        elif memory is not None:
            x = step(x, "cross_norm", cross_attention)
    x = step(x, "ffn_norm", lambda h: _ffn(state, p + "ffn", h), reads_norm=mistake != "ffn reads x")
    found["out"] = x
    found.setdefault("cross_weights", None)
    return found


def reference_transformer(kind: str, state: dict, *, n_heads: int, n_kv_heads: int | None = None,
                    tokens=None, mask=None, source=None, target=None, source_mask=None,
                    placement: str = "pre", rope_base: float | None = 10000.0, mistake: str = "") -> dict:
    """A whole model in float64 from its state dict: kind "EncoderOnly" (tokens, mask: hidden
    states and mean-pooled class logits), "DecoderOnly" (tokens: logits) or "EncoderDecoder"
    (source, target, source_mask: logits). mistake: "" or "pool padding" (EncoderOnly's mean over
    every position), "no final norm", or a block mistake."""
    block_mistake = mistake if mistake not in ("pool padding", "no final norm") else ""
    settings = dict(n_heads=n_heads, n_kv_heads=n_kv_heads, placement=placement, rope_base=rope_base,
                    mistake=block_mistake)
    embed = _get(state, "embed.weight")

    def final(name, x):
        if mistake == "no final norm" or f"{name}.weight" not in state:
            return x
        return _norm(state, name, x)

    def layers(prefix):
        return sorted({int(k.split(".")[1]) for k in state if k.startswith(prefix + ".")})

    if kind == "EncoderOnly":
        x = embed[torch.as_tensor(tokens)]
        allowed = None if mask is None else torch.as_tensor(mask, dtype=torch.bool)[:, None, None, :]
        for i in layers("blocks"):
            x = reference_transformer_block(state, x, mask=allowed, prefix=f"blocks.{i}.", **settings)["out"]
        hidden = final("final_norm", x)
        found = {"hidden": hidden}
        if "classifier.weight" in state:
            # Mean over the real positions, written as a weighted sum (independent of the reference).
            keep = (torch.ones(hidden.shape[:2], dtype=torch.float64) if mask is None or mistake == "pool padding"
                    else torch.as_tensor(mask, dtype=torch.float64))
            pooled = torch.einsum("bn,bnd->bd", keep / keep.sum(dim=1, keepdim=True).clamp(min=1.0), hidden)
            found["classes"] = _linear(state, "classifier", pooled)
        return found
    if kind == "DecoderOnly":
        x = embed[torch.as_tensor(tokens)]
        for i in layers("blocks"):
            x = reference_transformer_block(state, x, causal=True, prefix=f"blocks.{i}.", **settings)["out"]
        head = _get(state, "lm_head.weight")
        return {"logits": final("final_norm", x) @ (embed if head is None else head).T}
    if kind == "EncoderDecoder":
        x = embed[torch.as_tensor(source)]
        keep = None if source_mask is None else torch.as_tensor(source_mask, dtype=torch.bool)
        for i in layers("encoder"):
            x = reference_transformer_block(state, x, mask=None if keep is None else keep[:, None, None, :],
                                prefix=f"encoder.{i}.", **settings)["out"]
        memory = final("encoder_norm", x)
        y = embed[torch.as_tensor(target)]
        for i in layers("decoder"):
            y = reference_transformer_block(state, y, causal=True, memory=memory, memory_mask=keep, prefix=f"decoder.{i}.",
                                **settings)["out"]
        head = _get(state, "lm_head.weight")
        return {"logits": final("decoder_norm", y) @ (embed if head is None else head).T, "memory": memory}
    raise ValueError(f"unknown kind {kind!r}")


# --------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------


def _randomize(module: nn.Module, seed: int) -> dict[str, torch.Tensor]:
    """Give every parameter of ``module`` random values (norm weights around 1, the rest small);
    returns its state dict (tied weights appear under both names)."""
    generator = _seeded(seed)
    with torch.no_grad():
        for name, parameter in module.named_parameters():
            noise = torch.randn(parameter.shape, generator=generator, dtype=torch.float64)
            if name.endswith("norm.weight"):
                value = 1.0 + 0.3 * noise
            elif parameter.dim() >= 2 and "embed" not in name:
                value = noise / math.sqrt(parameter.shape[-1])
            else:
                value = 0.5 * noise
            parameter.copy_(value.to(parameter.dtype))
    return dict(module.state_dict())


def _need(module: nn.Module, names: tuple[str, ...], cls: str) -> None:
    have = dict(module.named_children())
    missing = [name for name in names if name not in have]
    if missing:
        raise AssertionError(
            f"{cls} has no submodule {', '.join(repr(m) for m in missing)} (it has {sorted(have) or 'none'}). "
            f"Create them in __init__ with exactly these names ({', '.join(names)}): a saved model, such as "
            "the course model, is loaded by name")


def _tokens(generator: torch.Generator, vocab: int, *shape: int) -> torch.Tensor:
    return torch.randint(0, vocab, shape, generator=generator)


def _block_hint(actual, state, x, mistakes, **settings) -> str:
    candidates = {hint: reference_transformer_block(state, x, mistake=mistake, **settings)["out"]
                  for mistake, hint in mistakes.items()}
    return explain_mismatch(actual, candidates, rtol=1e-4, atol=1e-4)


_BLOCK_MISTAKES = {
    "post": "you placed the norms the other way round (pre-norm is x + sublayer(norm(x)); post-norm is "
            "norm(x + sublayer(x)))",
    "no residual": "you forgot the residual connections: add each sublayer's output to x",
    "no residual around attn": "you forgot the residual connection around the self-attention: x + self_attn(...)",
    "no residual around ffn": "you forgot the residual connection around the feed-forward block: x + ffn(...)",
    "ffn reads x": "the feed-forward block must read ffn_norm(x), not x",
    "causal": "an encoder block has no causal mask: every token sees every other token",
    "no causal mask": "a decoder's self-attention must be causal: pass causal=True to self_attn",
    "memory not masked": "the cross-attention must not attend to padded source tokens: pass memory_mask as "
                         "a mask of shape (b, 1, 1, m)",
    "cross before self": "the decoder block runs self-attention first, then cross-attention, then the "
                         "feed-forward block",
}


_RESIDUALS = ("no residual", "no residual around attn", "no residual around ffn")


def _compare(actual, expected, what, hint_fn=None):
    try:
        assert_close(actual, expected, what=what, rtol=1e-4, atol=1e-5)
    except AssertionError:
        hint = hint_fn() if hint_fn else ""
        if hint:
            raise AssertionError(f"{what} differs from the reference: {hint}") from None
        raise


def _float_block(cls, init: dict, seed: int):
    block = cls(**init).double()
    return block, _randomize(block, seed)


# --------------------------------------------------------------------------------------------
# Checks
# --------------------------------------------------------------------------------------------


def check_encoder_block(EncoderBlock: type) -> None:
    """Your ``EncoderBlock`` against the float64 reference: names, pre- and post-norm, padding,
    grouped-query attention, the attention weights it returns, inputs unchanged."""
    g = _seeded(7)

    def case(init, b, n, padded=False, seed=0):
        def run():
            block, state = _float_block(EncoderBlock, init, seed)
            _need(block, BLOCK_NAMES, "EncoderBlock")
            x = torch.randn(b, n, init["d_model"], generator=g, dtype=torch.float64)
            mask = None
            if padded:
                lengths = torch.randint(1, n + 1, (b,), generator=g)
                lengths[0] = n
                mask = (torch.arange(n) < lengths[:, None])[:, None, None, :]
            settings = dict(n_heads=init["n_heads"], n_kv_heads=init.get("n_kv_heads"),
                            placement=init.get("placement", "pre"), mask=mask)
            out, weights = assert_not_modified(block, x, mask, return_weights=True)
            expected = reference_transformer_block(state, x, **settings)
            _compare(out, expected["out"], "EncoderBlock's output",
                     lambda: _block_hint(out, state, x, {k: _BLOCK_MISTAKES[k] for k in
                                                         ("post", "ffn reads x", "causal", *_RESIDUALS)}, **settings))
            _compare(weights, expected["self_weights"], "EncoderBlock's attention weights")
            plain = block(x, mask)
            assert_shape(plain, x.shape, what="EncoderBlock(x) without return_weights")
        return run

    run_checks("EncoderBlock", [
        ("pre-norm, 2 heads", case(dict(d_model=8, n_heads=2, d_ff=16), 2, 5)),
        ("post-norm", case(dict(d_model=8, n_heads=2, d_ff=12, placement="post"), 2, 4, seed=1)),
        ("padding mask", case(dict(d_model=12, n_heads=3, d_ff=20), 3, 6, padded=True, seed=2)),
        ("grouped-query attention, RMSNorm", case(dict(d_model=16, n_heads=4, n_kv_heads=2, d_ff=24, norm="rms"),
                                                  2, 5, seed=3)),
    ])


def _leak_check(fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, what: str, position: int,
                vocab: int | None = None) -> None:
    """Changing position ``position`` and everything after must not change the outputs before it
    (x: floats, or token ids below ``vocab``)."""
    changed = x.clone()
    if x.is_floating_point():
        changed[:, position:] = changed[:, position:] * -2.0 + 1.0
    else:
        changed[:, position:] = (changed[:, position:] + 1) % vocab
    before, after = fn(x), fn(changed)
    if not torch.allclose(before[:, :position], after[:, :position], atol=1e-9, rtol=0):
        raise AssertionError(f"{what}: changing the tokens from position {position} on changed the outputs "
                             f"before it, so a token sees the future. The self-attention must be causal "
                             f"(causal=True)")


def check_decoder_block(DecoderBlock: type) -> None:
    """Your ``DecoderBlock`` against the float64 reference: names, causal self-attention (no
    future leak), cross-attention that reads the memory (and not its padding), decoding with a
    KV cache equal to one full pass."""
    import importlib

    multihead = importlib.import_module("attnlab.multihead")
    g = _seeded(11)

    def values(init, b, n, m=None, padded=False, seed=0):
        def run():
            block, state = _float_block(DecoderBlock, init, seed)
            names = BLOCK_NAMES + (CROSS_NAMES if init.get("cross_attention") else ())
            _need(block, names, "DecoderBlock")
            if not init.get("cross_attention") and any(hasattr(block, c) for c in CROSS_NAMES):
                raise AssertionError("DecoderBlock(cross_attention=False) must not create cross_norm and "
                                     "cross_attn: its weights would be missing from a saved decoder-only model")
            d = init["d_model"]
            x = torch.randn(b, n, d, generator=g, dtype=torch.float64)
            memory = None if m is None else torch.randn(b, m, d, generator=g, dtype=torch.float64)
            memory_mask = None
            if padded:
                lengths = torch.randint(1, m + 1, (b,), generator=g)
                lengths[0] = m
                memory_mask = torch.arange(m) < lengths[:, None]
            settings = dict(n_heads=init["n_heads"], n_kv_heads=init.get("n_kv_heads"), causal=True,
                            placement=init.get("placement", "pre"), memory=memory, memory_mask=memory_mask)
            result = assert_not_modified(block, x, memory, memory_mask=memory_mask, return_weights=True)
            if not isinstance(result, tuple) or len(result) != 3:
                raise AssertionError("DecoderBlock(..., return_weights=True) must return (x, self_weights, "
                                     "cross_weights), cross_weights None without cross-attention")
            out, self_weights, cross_weights = result
            expected = reference_transformer_block(state, x, **settings)
            mistakes = ("post", "ffn reads x", "no causal mask", *_RESIDUALS) + (
                ("memory not masked", "cross before self") if m is not None else ())
            _compare(out, expected["out"], "DecoderBlock's output",
                     lambda: _block_hint(out, state, x, {k: _BLOCK_MISTAKES[k] for k in mistakes}, **settings))
            _compare(self_weights, expected["self_weights"], "DecoderBlock's self-attention weights")
            if m is None:
                if cross_weights is not None:
                    raise AssertionError("without cross-attention, the third value returned must be None")
            else:
                _compare(cross_weights, expected["cross_weights"], "DecoderBlock's cross-attention weights")
        return run

    def no_leak():
        block, _ = _float_block(DecoderBlock, dict(d_model=8, n_heads=2, d_ff=16), 4)
        x = torch.randn(2, 7, 8, generator=g, dtype=torch.float64)
        _leak_check(lambda t: block(t), x, "DecoderBlock", 4)

    def reads_memory():
        block, _ = _float_block(DecoderBlock, dict(d_model=8, n_heads=2, d_ff=16, cross_attention=True), 5)
        x = torch.randn(2, 4, 8, generator=g, dtype=torch.float64)
        memory = torch.randn(2, 6, 8, generator=g, dtype=torch.float64)
        if torch.allclose(block(x, memory), block(x, memory + 1.0)):
            raise AssertionError("changing the memory (the encoder's output) did not change the decoder "
                                 "block's output: the cross-attention must take its keys and values from memory")
        _leak_check(lambda t: block(t, memory), x, "DecoderBlock with cross-attention", 2)

    def with_cache():
        init = dict(d_model=12, n_heads=3, d_ff=16)
        block, _ = _float_block(DecoderBlock, init, 6)
        x = torch.randn(2, 6, 12, generator=g, dtype=torch.float64)
        full = block(x)
        cache = multihead.KVCache()
        pieces = [block(x[:, :3], cache=cache), block(x[:, 3:4], cache=cache), block(x[:, 4:], cache=cache)]
        _compare(torch.cat(pieces, dim=1), full, "decoding in pieces with a KVCache",
                 lambda: "pass the cache on to self_attn (cache=cache); it continues the positions itself")

    run_checks("DecoderBlock", [
        ("no cross-attention", values(dict(d_model=8, n_heads=2, d_ff=16), 2, 5)),
        ("cross-attention to a padded memory",
         values(dict(d_model=12, n_heads=3, d_ff=20, cross_attention=True), 3, 4, m=6, padded=True, seed=1)),
        ("post-norm, grouped-query attention, cross-attention",
         values(dict(d_model=16, n_heads=4, n_kv_heads=2, d_ff=24, placement="post", cross_attention=True),
                2, 5, m=3, seed=2)),
        ("no token sees a later one", no_leak),
        ("the cross-attention reads the memory", reads_memory),
        ("the KV cache gives the same outputs", with_cache),
    ])


def check_encoder_only(EncoderOnly: type) -> None:
    """Your ``EncoderOnly`` against the float64 reference: names, hidden states, padding ignored,
    class logits from the mean of the real tokens."""
    g = _seeded(13)

    def case(init, b, n, padded, seed):
        def run():
            model = EncoderOnly(**init).double()
            _need(model, MODEL_NAMES["EncoderOnly"] + ("classifier",), "EncoderOnly")
            state = _randomize(model, seed)
            tokens = _tokens(g, init["vocab_size"], b, n)
            mask = None
            if padded:
                lengths = torch.randint(1, n + 1, (b,), generator=g)
                lengths[0] = n
                mask = torch.arange(n) < lengths[:, None]
            settings = dict(n_heads=init["n_heads"], tokens=tokens, mask=mask)
            hidden = assert_not_modified(model, tokens, mask)
            expected = reference_transformer("EncoderOnly", state, **settings)
            _compare(hidden, expected["hidden"], "EncoderOnly's hidden states", lambda: explain_mismatch(
                hidden, {"apply final_norm after the last block": reference_transformer(
                    "EncoderOnly", state, mistake="no final norm", **settings)["hidden"]}, rtol=1e-4, atol=1e-4))
            classes = model.classify(tokens, mask)
            _compare(classes, expected["classes"], "EncoderOnly.classify", lambda: explain_mismatch(
                classes, {"average the hidden states of the real tokens only (where mask is True)": reference_transformer(
                    "EncoderOnly", state, mistake="pool padding", **settings)["classes"]}, rtol=1e-4, atol=1e-4))
            if mask is not None:
                changed = tokens.masked_fill(~mask, 0)
                if not torch.allclose(model.classify(changed, mask), classes, atol=1e-9):
                    raise AssertionError("changing the padding tokens changed the classes: no token may attend "
                                         "to padding (pass mask[:, None, None, :] to the blocks)")
        return run

    run_checks("EncoderOnly", [
        ("one layer, no padding", case(dict(vocab_size=11, d_model=8, n_layers=1, n_heads=2, d_ff=16, n_classes=3),
                                       2, 5, False, 0)),
        ("two layers, padding", case(dict(vocab_size=13, d_model=12, n_layers=2, n_heads=3, d_ff=16, n_classes=2),
                                     3, 6, True, 1)),
    ])


def check_decoder_only(DecoderOnly: type) -> None:
    """Your ``DecoderOnly`` against the float64 reference: names, tied embeddings, logits, no
    token sees a later one, the KV cache, the attention weights of every layer."""
    g = _seeded(17)

    def values(init, b, n, seed):
        def run():
            model = DecoderOnly(**init).double()
            _need(model, MODEL_NAMES["DecoderOnly"], "DecoderOnly")
            tied = init.get("tie_embeddings", True)
            if tied and model.lm_head.weight is not model.embed.weight:
                raise AssertionError("with tie_embeddings=True, lm_head must share the embedding's weight: "
                                     "self.lm_head.weight = self.embed.weight")
            if not tied and model.lm_head.weight is model.embed.weight:
                raise AssertionError("with tie_embeddings=False, lm_head must have a weight of its own")
            if model.lm_head.bias is not None:
                raise AssertionError("lm_head has no bias: nn.Linear(d_model, vocab_size, bias=False)")
            state = _randomize(model, seed)
            tokens = _tokens(g, init["vocab_size"], b, n)
            settings = dict(n_heads=init["n_heads"], n_kv_heads=init.get("n_kv_heads"), tokens=tokens)
            logits = assert_not_modified(model, tokens)
            expected = reference_transformer("DecoderOnly", state, **settings)["logits"]
            _compare(logits, expected, "DecoderOnly's logits", lambda: explain_mismatch(logits, {
                "apply final_norm before lm_head": reference_transformer("DecoderOnly", state, mistake="no final norm",
                                                                   **settings)["logits"],
                "the self-attention of every block must be causal": reference_transformer(
                    "DecoderOnly", state, mistake="no causal mask", **settings)["logits"],
            }, rtol=1e-4, atol=1e-4))
            result = model(tokens, return_weights=True)
            if not isinstance(result, tuple) or len(result) != 2 or len(result[1]) != init["n_layers"]:
                raise AssertionError("model(tokens, return_weights=True) must return (logits, [weights of each "
                                     f"of the {init['n_layers']} layers])")
            assert_shape(result[1][0], (b, init["n_heads"], n, n), what="the weights of layer 0",
                         meaning="(b, n_heads, n, n)")
        return run

    def no_leak():
        model = DecoderOnly(vocab_size=10, d_model=8, n_layers=2, n_heads=2, d_ff=16).double()
        _randomize(model, 3)
        tokens = _tokens(g, 10, 2, 7)
        _leak_check(lambda t: model(t), tokens, "DecoderOnly", 3, vocab=10)

    def with_cache():
        model = DecoderOnly(vocab_size=10, d_model=12, n_layers=2, n_heads=3, d_ff=16).double()
        _randomize(model, 4)
        tokens = _tokens(g, 10, 2, 7)
        full = model(tokens)
        cache = model.new_cache()
        pieces = [model(tokens[:, :4], cache), model(tokens[:, 4:5], cache), model(tokens[:, 5:], cache)]
        _compare(torch.cat(pieces, dim=1), full, "DecoderOnly in pieces with a cache",
                 lambda: "give block i the cache of layer i (cache[i])")

    run_checks("DecoderOnly", [
        ("tied embeddings, two layers", values(dict(vocab_size=11, d_model=8, n_layers=2, n_heads=2, d_ff=16), 2, 5, 0)),
        ("untied, grouped-query attention, RMSNorm",
         values(dict(vocab_size=9, d_model=16, n_layers=1, n_heads=4, n_kv_heads=2, d_ff=20, norm="rms",
                     tie_embeddings=False), 3, 4, 1)),
        ("no token sees a later one", no_leak),
        ("the KV cache gives the same logits", with_cache),
    ])


def check_encoder_decoder(EncoderDecoder: type) -> None:
    """Your ``EncoderDecoder`` against the float64 reference: names, logits with a padded source;
    changing the source changes the result, changing the target's future does not change the past."""
    g = _seeded(19)

    def values(init, b, m, n, seed):
        def run():
            model = EncoderDecoder(**init).double()
            _need(model, MODEL_NAMES["EncoderDecoder"], "EncoderDecoder")
            state = _randomize(model, seed)
            source, target = _tokens(g, init["vocab_size"], b, m), _tokens(g, init["vocab_size"], b, n)
            lengths = torch.randint(1, m + 1, (b,), generator=g)
            lengths[0] = m
            source_mask = torch.arange(m) < lengths[:, None]
            settings = dict(n_heads=init["n_heads"], source=source, target=target, source_mask=source_mask)
            logits = assert_not_modified(model, source, target, source_mask)
            expected = reference_transformer("EncoderDecoder", state, **settings)
            _compare(model.encode(source, source_mask), expected["memory"], "EncoderDecoder.encode",
                     lambda: "encode: embed, the encoder blocks (with the padding mask), then encoder_norm")
            _compare(logits, expected["logits"], "EncoderDecoder's logits", lambda: explain_mismatch(logits, {
                "mask the padded source tokens in every cross-attention (memory_mask=source_mask)": reference_transformer(
                    "EncoderDecoder", state, mistake="memory not masked", **settings)["logits"],
                "apply encoder_norm and decoder_norm": reference_transformer(
                    "EncoderDecoder", state, mistake="no final norm", **settings)["logits"],
            }, rtol=1e-4, atol=1e-4))
        return run

    def two_inputs():
        model = EncoderDecoder(vocab_size=10, d_model=8, n_layers=1, n_heads=2, d_ff=16).double()
        _randomize(model, 2)
        source, target = _tokens(g, 10, 2, 5), _tokens(g, 10, 2, 6)
        if torch.allclose(model(source, target), model((source + 1) % 10, target)):
            raise AssertionError("changing the source did not change the logits: the decoder must read the "
                                 "encoder's output through cross-attention")
        _leak_check(lambda t: model(source, t), target, "EncoderDecoder's decoder", 3, vocab=10)

    run_checks("EncoderDecoder", [
        ("one layer each, padded source", values(dict(vocab_size=12, d_model=8, n_layers=1, n_heads=2, d_ff=16),
                                                 2, 5, 4, 0)),
        ("two encoder layers, one decoder layer",
         values(dict(vocab_size=9, d_model=12, n_layers=2, n_decoder_layers=1, n_heads=3, d_ff=16), 3, 4, 6, 1)),
        ("the decoder reads the source and not the target's future", two_inputs),
    ])


def check_generate(generate: Callable, DecoderOnly: type, EncoderDecoder: type | None = None) -> None:
    """Your ``generate``: greedy decoding equal to picking the most likely token after each full
    forward pass; the same tokens with and without the KV cache; the prompt kept; 1-d prompts;
    sampling reproducible with a seeded generator; an encoder-decoder's source."""
    g = _seeded(23)

    def model_of(seed, cls=DecoderOnly, **extra):
        model = cls(vocab_size=13, d_model=8, n_layers=2, n_heads=2, d_ff=16, tie_embeddings=False, **extra).double()
        _randomize(model, seed)
        return model.eval()

    def greedy_reference(model, prompt, steps, source=None):
        tokens = prompt
        with torch.no_grad():
            for _ in range(steps):
                logits = model(tokens) if source is None else model(source, tokens)
                tokens = torch.cat([tokens, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
        return tokens

    def greedy():
        model = model_of(0)
        prompt = _tokens(g, 13, 2, 3)
        expected = greedy_reference(model, prompt, 6)
        for use_cache in (False, True):
            got = assert_not_modified(generate, model, prompt, 6, use_cache=use_cache)
            assert_shape(got, expected.shape, what=f"generate(..., use_cache={use_cache})",
                         meaning="(batch, n_prompt + max_new_tokens)")
            if not torch.equal(got[:, :3], prompt):
                raise AssertionError("the returned tokens must start with the prompt")
            if not torch.equal(got, expected):
                hint = ("with the cache, feed only the newest token at each step (the cache holds the others)"
                        if use_cache else "pick the argmax of the logits at the last position")
                raise AssertionError(f"generate(..., use_cache={use_cache}) wrote {got.tolist()}, greedy decoding "
                                     f"writes {expected.tolist()}: {hint}")

    def one_dimensional():
        model = model_of(1)
        prompt = _tokens(g, 13, 4)
        got = generate(model, prompt, 3)
        assert_shape(got, (7,), what="generate with a 1-d prompt", meaning="(n_prompt + max_new_tokens,)")

    def sampling_reference(model, prompt, steps, temperature, generator):
        tokens = prompt
        with torch.no_grad():
            for _ in range(steps):
                probabilities = torch.softmax(model(tokens)[:, -1] / temperature, dim=-1)
                tokens = torch.cat([tokens, torch.multinomial(probabilities, 1, generator=generator)], dim=1)
        return tokens

    def sampling():
        model = model_of(2)
        prompt = _tokens(g, 13, 1, 2)
        first = generate(model, prompt, 8, temperature=1.0, generator=_seeded(5))
        second = generate(model, prompt, 8, temperature=1.0, generator=_seeded(5))
        if not torch.equal(first, second):
            raise AssertionError("sampling with two generators seeded alike gave different tokens: draw with "
                                 "torch.multinomial(probabilities, 1, generator=generator)")
        cold = generate(model, prompt, 8, temperature=1e-6, generator=_seeded(5))
        if not torch.equal(cold, generate(model, prompt, 8)):
            raise AssertionError("with a tiny temperature, sampling must pick the most likely token: divide "
                                 "the logits by the temperature before the softmax")
        for temperature in (1.0, 2.5):
            expected = sampling_reference(model, prompt, 8, temperature, _seeded(5))
            got = generate(model, prompt, 8, temperature=temperature, generator=_seeded(5))
            if not torch.equal(got, expected):
                raise AssertionError(
                    f"with temperature={temperature} generate wrote {got.tolist()}, sampling writes "
                    f"{expected.tolist()}: above 0, draw each token with torch.multinomial(torch.softmax(logits "
                    "/ temperature, dim=-1), 1, generator=generator), once per step")
        with_cache = generate(model, prompt, 8, temperature=1.0, generator=_seeded(5), use_cache=True)
        without = generate(model, prompt, 8, temperature=1.0, generator=_seeded(5), use_cache=False)
        if not torch.equal(with_cache, without):
            raise AssertionError("sampling gave different tokens with and without the cache")

    cases = [("greedy, with and without the cache", greedy), ("a 1-d prompt", one_dimensional),
             ("sampling with a seeded generator", sampling)]
    if EncoderDecoder is not None:
        def translate():
            model = model_of(3, EncoderDecoder)
            source, prompt = _tokens(g, 13, 2, 5), torch.ones(2, 1, dtype=torch.long)
            expected = greedy_reference(model, prompt, 5, source)
            for use_cache in (False, True):
                got = generate(model, prompt, 5, use_cache=use_cache, source=source)
                if not torch.equal(got, expected):
                    raise AssertionError(f"with an EncoderDecoder (use_cache={use_cache}) generate wrote "
                                         f"{got.tolist()}, greedy decoding writes {expected.tolist()}")
        cases.append(("an encoder-decoder's source", translate))
    run_checks("generate", cases)
