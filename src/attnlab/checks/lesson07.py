"""Visible checks of lesson 07: ``check_encoder_block``, ``check_decoder_block``,
``check_encoder_only``, ``check_decoder_only``, ``check_encoder_decoder``, ``check_generate``.

Each check builds your class, first compares its parameters with the course's contract (every name
and shape a saved model has, ``contract_parameters``: a model is loaded by name), gives every
parameter random values (norms included, so that a missing norm shows), and compares what it
computes with a float64 reference written here from PyTorch's functions (``F.layer_norm``,
``F.rms_norm``, ``F.gelu``, ``F.silu``) reading the same parameters by name, for the arrangement
the arguments ask for (placement, norm, activation, rope_base). Then the properties any correct
arrangement has: no token of a decoder sees a later one (lesson 03's perturbation test), decoding
token by token with the KV cache gives what one full pass gives, cross-attention reads the source,
padding is not attended to, and ``generate`` writes what greedy decoding or seeded sampling writes,
with and without the cache.
"""

from __future__ import annotations

import math
from typing import Callable, Sequence

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
    "check_pronoun_ablation",
    "contract_parameters",
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
FINAL_NORMS = ("final_norm", "encoder_norm", "decoder_norm")


# --------------------------------------------------------------------------------------------
# The contract: every parameter's name and shape (attnlab.stacks's docstring)
# --------------------------------------------------------------------------------------------


def contract_parameters(kind: str, init: dict) -> dict[str, tuple[int, ...]]:
    """Name -> shape of every parameter of ``kind`` ("EncoderBlock", ..., "EncoderDecoder") built
    with the keyword arguments ``init``, as the course's contract fixes them: norms LayerNorm
    (weight, bias) or RMSNorm (weight); attention projections with biases only when ``bias``; the
    feed-forward block with its biases (and a gate for SwiGLU); no final norm after post-norm
    blocks; ``lm_head.weight`` only when untied (a tied one is ``embed.weight``)."""
    d, n_heads, d_ff = init["d_model"], init["n_heads"], init["d_ff"]
    n_kv, h = init.get("n_kv_heads") or n_heads, d // n_heads
    norm, bias = init.get("norm", "layer"), init.get("bias", False)
    found: dict[str, tuple[int, ...]] = {}

    def linear(prefix, n_out, n_in, with_bias):
        found[f"{prefix}.weight"] = (n_out, n_in)
        if with_bias:
            found[f"{prefix}.bias"] = (n_out,)

    def norm_(prefix):
        found[f"{prefix}.weight"] = (d,)
        if norm == "layer":
            found[f"{prefix}.bias"] = (d,)

    def attention(prefix):
        for name, n_out in (("q_proj", n_heads * h), ("k_proj", n_kv * h), ("v_proj", n_kv * h)):
            linear(f"{prefix}.{name}", n_out, d, bias)
        linear(f"{prefix}.o_proj", d, n_heads * h, bias)

    def block(prefix, cross):
        norm_(f"{prefix}attn_norm")
        attention(f"{prefix}self_attn")
        if cross:
            norm_(f"{prefix}cross_norm")
            attention(f"{prefix}cross_attn")
        norm_(f"{prefix}ffn_norm")
        if init.get("activation", "gelu") == "swiglu":
            linear(f"{prefix}ffn.gate", d_ff, d, True)
        linear(f"{prefix}ffn.up", d_ff, d, True)
        linear(f"{prefix}ffn.down", d, d_ff, True)

    if kind in ("EncoderBlock", "DecoderBlock"):
        block("", kind == "DecoderBlock" and init.get("cross_attention", False))
        return found
    pre, n_layers = init.get("placement", "pre") == "pre", init["n_layers"]
    found["embed.weight"] = (init["vocab_size"], d)
    if kind == "EncoderDecoder":
        for i in range(n_layers):
            block(f"encoder.{i}.", False)
        if pre:
            norm_("encoder_norm")
        for i in range(init.get("n_decoder_layers") or n_layers):
            block(f"decoder.{i}.", True)
        if pre:
            norm_("decoder_norm")
    else:
        for i in range(n_layers):
            block(f"blocks.{i}.", False)
        if pre:
            norm_("final_norm")
    if kind == "EncoderOnly" and init.get("n_classes"):
        linear("classifier", init["n_classes"], d, True)
    if kind != "EncoderOnly" and not init.get("tie_embeddings", True):
        found["lm_head.weight"] = (init["vocab_size"], d)
    return found


def _why(name: str, problem: str, init: dict) -> str:
    """What a missing ("missing"), unexpected ("extra") or misshapen ("shape") parameter means."""
    part = ["", *name.split(".")]  # part[-2]: the submodule that holds the parameter ("" at the top)
    if problem == "shape":
        if part[-2] in ("k_proj", "v_proj"):
            return (f"n_kv_heads={init.get('n_kv_heads')}: pass n_kv_heads on to MultiHeadAttention "
                    "(and to every block)")
        return "build every submodule with the sizes the arguments give"
    if "gate" in part:
        return (f"activation={init.get('activation', 'gelu')!r}: "
                + ("SwiGLU has a gate" if problem == "missing" else "only SwiGLU has a gate")
                + ", so pass activation on to FeedForward (and to every block)")
    if "lm_head" in part and part[-1] == "weight":
        return ("with tie_embeddings=True, lm_head must share the embedding's weight: "
                "self.lm_head.weight = self.embed.weight" if problem == "extra" else
                "with tie_embeddings=False, lm_head must have a weight of its own")
    if "lm_head" in part:
        return "lm_head has no bias: nn.Linear(d_model, vocab_size, bias=False)"
    if part[1] in FINAL_NORMS:
        if problem == "missing":
            return (f"a pre-norm model normalizes once more after its last block: {part[1]} = "
                    "make_norm(norm, d_model); only a post-norm model's is nn.Identity()")
        if problem == "extra" and init.get("placement", "pre") == "post":
            return (f"with placement='post', {part[1]} must be nn.Identity() (no parameters): the last "
                    "block already normalized")
    if part[-2].endswith("norm") and part[-1] == "bias":
        return ("norm='layer' is a LayerNorm, with a weight and a bias" if problem == "missing" else
                "norm='rms' is an RMSNorm, with a weight and no bias") + ": pass norm on to make_norm"
    if part[-2].endswith("_proj") and part[-1] == "bias":
        return f"bias={init.get('bias', False)} is for the attention's projections: pass it on to MultiHeadAttention"
    if "ffn" in part and part[-1] == "bias":
        return ("the feed-forward block keeps its biases (FeedForward's default, bias=True); the block's bias "
                "argument is for the attention's projections only")
    if name == "classifier.bias":
        return "the classifier is nn.Linear(d_model, n_classes), with a bias"
    if part[1] in CROSS_NAMES and problem == "extra":
        return ("DecoderBlock(cross_attention=False) must not create cross_norm and cross_attn: their weights "
                "would be missing from a saved decoder-only model")
    return "create the submodules with exactly the documented names and sizes"


def _need_parameters(module: nn.Module, kind: str, init: dict) -> None:
    """``module``'s parameters are exactly ``contract_parameters(kind, init)``, names and shapes."""
    have = {name: tuple(p.shape) for name, p in module.named_parameters()}
    want = contract_parameters(kind, init)
    problems = ([(n, "missing", f"has no parameter {n!r}") for n in want if n not in have]
                + [(n, "shape", f"has {n!r} of shape {have[n]}, expected {want[n]}")
                   for n in want if n in have and have[n] != want[n]]
                + [(n, "extra", f"has a parameter {n!r} the contract does not name") for n in have if n not in want])
    if problems:
        name, problem, said = problems[0]
        more = f" (and {len(problems) - 1} more such problems)" if len(problems) > 1 else ""
        raise AssertionError(f"{kind} built with {_arguments(init)} {said}{more}: {_why(name, problem, init)}. "
                             "A saved model, such as the course model, is loaded by name: it must fit exactly")


def _arguments(init: dict) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in init.items())


def _settings(init: dict) -> dict:
    """The reference's arrangement settings for a block or model built with ``init``."""
    return dict(n_heads=init["n_heads"], n_kv_heads=init.get("n_kv_heads"), placement=init.get("placement", "pre"),
                norm=init.get("norm", "layer"), activation=init.get("activation", "gelu"),
                rope_base=init.get("rope_base", 10000.0))


# --------------------------------------------------------------------------------------------
# Trusted references (float64, functional, reading a state dict by name)
# --------------------------------------------------------------------------------------------


def _get(state: dict, name: str) -> torch.Tensor | None:
    value = state.get(name)
    return None if value is None else _as_float64(value)


def _norm(state: dict, prefix: str, x: torch.Tensor, kind: str) -> torch.Tensor:
    """kind "layer": LayerNorm (eps 1e-5); "rms": RMSNorm (eps 1e-6), the course's defaults."""
    weight = _get(state, f"{prefix}.weight")
    if kind == "layer":
        return F.layer_norm(x, x.shape[-1:], weight, _get(state, f"{prefix}.bias"), 1e-5)
    return F.rms_norm(x, x.shape[-1:], weight, 1e-6)


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


def _ffn(state: dict, prefix: str, x: torch.Tensor, activation: str) -> torch.Tensor:
    if activation == "swiglu":
        hidden = F.silu(_linear(state, f"{prefix}.gate", x)) * _linear(state, f"{prefix}.up", x)
    else:
        hidden = F.gelu(_linear(state, f"{prefix}.up", x))
    return _linear(state, f"{prefix}.down", hidden)


def reference_transformer_block(state: dict, x, *, n_heads: int, n_kv_heads: int | None = None, causal: bool = False,
                                memory=None, memory_mask=None, mask=None, placement: str = "pre",
                                norm: str = "layer", activation: str = "gelu", rope_base: float | None = 10000.0,
                                prefix: str = "", mistake: str = "") -> dict:
    """One block (encoder block, or decoder block when ``causal``, with cross-attention when
    ``memory`` is given), in float64, from the parameters in ``state`` (names as in
    ``attnlab.stacks``, after ``prefix``). mask: boolean, broadcastable to (b, H, n, n).
    norm: "layer" or "rms"; activation: "gelu" or "swiglu"; rope_base: None for no positions.
    mistake: "" or one of the usual errors ("post" for "pre" and the reverse, "no residual",
    "no causal mask", "causal", "ffn reads x", "mask ignored", "memory not masked",
    "cross before self").
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
            update = sublayer(_norm(state, p + norm_name, x, norm) if reads_norm else x)
            return update if skip else x + update
        update = sublayer(x)
        return _norm(state, p + norm_name, update if skip else x + update, norm)

    allowed = None if mask is None or mistake == "mask ignored" else torch.as_tensor(mask, dtype=torch.bool)
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
    x = step(x, "ffn_norm", lambda h: _ffn(state, p + "ffn", h, activation), reads_norm=mistake != "ffn reads x")
    found["out"] = x
    found.setdefault("cross_weights", None)
    return found


def reference_transformer(kind: str, state: dict, *, n_heads: int, n_kv_heads: int | None = None,
                          tokens=None, mask=None, source=None, target=None, source_mask=None,
                          placement: str = "pre", norm: str = "layer", activation: str = "gelu",
                          rope_base: float | None = 10000.0, mistake: str = "") -> dict:
    """A whole model in float64 from its state dict: kind "EncoderOnly" (tokens, mask: hidden
    states, the self-attention weights of every layer, and mean-pooled class logits),
    "DecoderOnly" (tokens: logits and weights) or "EncoderDecoder" (source, target, source_mask:
    logits, memory, self and cross weights). A pre-norm model ends with its final norm(s), a
    post-norm model has none. mistake: "" or "pool padding" (EncoderOnly's mean over every
    position), "padding not masked" (no padding mask in the encoder's blocks), "no final norm" (the
    norm before the head or the classifier: final_norm, decoder_norm), or a block mistake (in every
    block)."""
    model_mistakes = ("pool padding", "padding not masked", "no final norm")
    block_mistake = "" if mistake in model_mistakes else mistake
    settings = dict(n_heads=n_heads, n_kv_heads=n_kv_heads, placement=placement, norm=norm, activation=activation,
                    rope_base=rope_base, mistake=block_mistake)
    embed = _get(state, "embed.weight")

    def final(name, x):
        skipped = mistake == "no final norm" and name != "encoder_norm"  # the norm before the head
        return x if placement == "post" or skipped else _norm(state, name, x, norm)

    def layers(prefix):
        return sorted({int(k.split(".")[1]) for k in state if k.startswith(prefix + ".")})

    def padding(keep):
        return None if keep is None or mistake == "padding not masked" else keep[:, None, None, :]

    if kind == "EncoderOnly":
        x, weights = embed[torch.as_tensor(tokens)], []
        keep = None if mask is None else torch.as_tensor(mask, dtype=torch.bool)
        for i in layers("blocks"):
            result = reference_transformer_block(state, x, mask=padding(keep), prefix=f"blocks.{i}.", **settings)
            x = result["out"]
            weights.append(result["self_weights"])
        hidden = final("final_norm", x)
        found = {"hidden": hidden, "weights": weights}
        if "classifier.weight" in state:
            # Mean over the real positions, written as a weighted sum (independent of the reference).
            real = (torch.ones(hidden.shape[:2], dtype=torch.float64) if mask is None or mistake == "pool padding"
                    else torch.as_tensor(mask, dtype=torch.float64))
            pooled = torch.einsum("bn,bnd->bd", real / real.sum(dim=1, keepdim=True).clamp(min=1.0), hidden)
            found["classes"] = _linear(state, "classifier", pooled)
        return found
    head = _get(state, "lm_head.weight")
    head = embed if head is None else head
    if kind == "DecoderOnly":
        x, weights = embed[torch.as_tensor(tokens)], []
        for i in layers("blocks"):
            result = reference_transformer_block(state, x, causal=True, prefix=f"blocks.{i}.", **settings)
            x = result["out"]
            weights.append(result["self_weights"])
        return {"logits": final("final_norm", x) @ head.T, "weights": weights}
    if kind == "EncoderDecoder":
        x = embed[torch.as_tensor(source)]
        keep = None if source_mask is None else torch.as_tensor(source_mask, dtype=torch.bool)
        for i in layers("encoder"):
            x = reference_transformer_block(state, x, mask=padding(keep), prefix=f"encoder.{i}.", **settings)["out"]
        memory = final("encoder_norm", x)
        y, self_weights, cross_weights = embed[torch.as_tensor(target)], [], []
        for i in layers("decoder"):
            result = reference_transformer_block(state, y, causal=True, memory=memory, memory_mask=keep,
                                                 prefix=f"decoder.{i}.", **settings)
            y = result["out"]
            self_weights.append(result["self_weights"])
            cross_weights.append(result["cross_weights"])
        return {"logits": final("decoder_norm", y) @ head.T, "memory": memory, "self_weights": self_weights,
                "cross_weights": cross_weights}
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


def _build(cls: type, kind: str, init: dict, names: tuple[str, ...], seed: int):
    """``cls(**init)`` in float64, its submodules and parameters checked against the contract,
    every parameter random: (module, its state dict)."""
    module = cls(**init).double()
    _need(module, names, kind)
    _need_parameters(module, kind, init)
    return module, _randomize(module, seed)


def _tokens(generator: torch.Generator, vocab: int, *shape: int) -> torch.Tensor:
    return torch.randint(0, vocab, shape, generator=generator)


def _padding(generator: torch.Generator, b: int, n: int) -> torch.Tensor:
    """(b, n) boolean, True at the real tokens: random lengths from 1 to n, the first row full."""
    lengths = torch.randint(1, n + 1, (b,), generator=generator)
    lengths[0] = n
    return torch.arange(n) < lengths[:, None]


def _the_matching_hint(actual, candidates: dict[str, Callable[[], torch.Tensor]]) -> str:
    """The hint of the one candidate (a function computing what that mistake gives) that
    ``actual`` matches; "" if none does, or if several do (on this input those mistakes look
    alike, and naming one could name a mistake that was not made)."""
    found = [hint for hint, make in candidates.items()
             if explain_mismatch(actual, {hint: make()}, rtol=1e-4, atol=1e-4)]
    return found[0] if len(found) == 1 else ""


_BLOCK_MISTAKES = {
    "post": "you placed the norms the other way round (pre-norm is x + sublayer(norm(x)); post-norm is "
            "norm(x + sublayer(x)))",
    "no residual": "you forgot the residual connections: add each sublayer's output to x",
    "no residual around attn": "you forgot the residual connection around the self-attention: x + self_attn(...)",
    "no residual around ffn": "you forgot the residual connection around the feed-forward block: x + ffn(...)",
    "no residual around cross": "you forgot the residual connection around the cross-attention: x + cross_attn(...)",
    "ffn reads x": "the feed-forward block must read ffn_norm(x), not x",
    "causal": "an encoder block has no causal mask: every token sees every other token",
    "mask ignored": "pass mask on to self_attn: no token may attend to a padded one",
    "no causal mask": "a decoder's self-attention must be causal: pass causal=True to self_attn",
    "memory not masked": "the cross-attention must not attend to padded source tokens: pass memory_mask as "
                         "a mask of shape (b, 1, 1, m)",
    "cross before self": "the decoder block runs self-attention first, then cross-attention, then the "
                         "feed-forward block",
}
_RESIDUALS = ("no residual", "no residual around attn", "no residual around ffn")
_ROPE_HINTS = {
    10000.0: "rope_base={} asks for {}, not the default 10000",
    None: "rope_base={} asks for {}, but your self-attention has no positions (MultiHeadAttention's default is "
          "rope_base=None)",
}


def _rope_candidates(settings: dict, compute: Callable[[dict], torch.Tensor]) -> dict:
    """The "rope_base not passed on" candidates: the self-attention with rope_base 10000 (a
    hard-coded default) or None (MultiHeadAttention's default), when that is not what was asked."""
    base = settings["rope_base"]
    meaning = "no positions at all" if base is None else "rotary positions with that base"
    return {"pass rope_base on to the self-attention (MultiHeadAttention, in every block): "
            + hint.format(base, meaning): (lambda used=used: compute({**settings, "rope_base": used}))
            for used, hint in _ROPE_HINTS.items() if used != base}


def _block_hint(actual, state, x, mistakes, settings) -> str:
    def compute(changed):
        return reference_transformer_block(state, x, **changed)["out"]

    candidates = {_BLOCK_MISTAKES[m]: (lambda m=m: compute({**settings, "mistake": m})) for m in mistakes}
    return _the_matching_hint(actual, candidates | _rope_candidates(settings, compute))


_MODEL_MISTAKES = {
    "no final norm": "apply {} (a pre-norm model normalizes once more after its last block)",
    "padding not masked": "no token may attend to padding: pass mask[:, None, None, :] to every block",
    "no causal mask": "the self-attention of every block must be causal",
    "memory not masked": "mask the padded source tokens in every cross-attention (memory_mask=source_mask)",
    "post": "pass placement on to every block (and keep the final norm only for pre-norm)",
}


def _model_hint(actual, kind, state, settings, output, mistakes, final_norm: str) -> str:
    def compute(changed):
        return reference_transformer(kind, state, **changed)[output]

    if settings["placement"] == "post":
        mistakes = tuple(m for m in mistakes if m != "no final norm")
    candidates = {_MODEL_MISTAKES[m].format(final_norm): (lambda m=m: compute({**settings, "mistake": m}))
                  for m in mistakes}
    return _the_matching_hint(actual, candidates | _rope_candidates(settings, compute))


def _compare(actual, expected, what, hint_fn=None):
    try:
        assert_close(actual, expected, what=what, rtol=1e-4, atol=1e-5)
    except AssertionError:
        hint = hint_fn() if hint_fn else ""
        if hint:
            raise AssertionError(f"{what} differs from the reference: {hint}") from None
        raise


def _compare_layers(result, expected: list, what: str, n_values: int, call: str) -> None:
    """``result`` = (output, [weights of each layer], ...) with ``n_values`` items; every layer's
    weights equal to ``expected``'s."""
    if not isinstance(result, tuple) or len(result) != n_values or any(
            not isinstance(part, (list, tuple)) or len(part) != len(expected) for part in result[1:]):
        raise AssertionError(f"{call} must return {n_values} values: the output, then "
                             + ("a list" if n_values == 2 else "lists") +
                             f" with the weights of each of the {len(expected)} layers")
    for index, (got, want) in enumerate(zip(result[1], expected)):
        _compare(got, want, f"{what} of layer {index}")


# --------------------------------------------------------------------------------------------
# Checks
# --------------------------------------------------------------------------------------------


def check_encoder_block(EncoderBlock: type) -> None:
    """Your ``EncoderBlock`` against the float64 reference: names, pre- and post-norm, padding,
    grouped-query attention, RMSNorm, SwiGLU, rope_base, the attention weights it returns, inputs
    unchanged."""
    g = _seeded(7)

    def case(init, b, n, padded=False, seed=0):
        def run():
            block, state = _build(EncoderBlock, "EncoderBlock", init, BLOCK_NAMES, seed)
            x = torch.randn(b, n, init["d_model"], generator=g, dtype=torch.float64)
            mask = _padding(g, b, n)[:, None, None, :] if padded else None
            settings = dict(_settings(init), mask=mask)
            out, weights = assert_not_modified(block, x, mask, return_weights=True)
            expected = reference_transformer_block(state, x, **settings)
            mistakes = ("post", "ffn reads x", "causal", *_RESIDUALS) + (("mask ignored",) if padded else ())
            _compare(out, expected["out"], "EncoderBlock's output",
                     lambda: _block_hint(out, state, x, mistakes, settings))
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
        ("SwiGLU, one key/value head, rope_base=500",
         case(dict(d_model=12, n_heads=3, n_kv_heads=1, d_ff=10, activation="swiglu", rope_base=500.0), 2, 4,
              seed=4)),
        ("post-norm, RMSNorm, no positions (rope_base=None), padding, one token",
         case(dict(d_model=8, n_heads=2, d_ff=8, placement="post", norm="rms", rope_base=None), 3, 1, padded=True,
              seed=5)),
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
    future leak), cross-attention that reads the memory (and not its padding), RMSNorm, SwiGLU,
    rope_base, decoding with a KV cache equal to one full pass."""
    import importlib

    multihead = importlib.import_module("attnlab.multihead")
    g = _seeded(11)

    def values(init, b, n, m=None, padded=False, seed=0):
        def run():
            names = BLOCK_NAMES + (CROSS_NAMES if init.get("cross_attention") else ())
            block, state = _build(DecoderBlock, "DecoderBlock", init, names, seed)
            d = init["d_model"]
            x = torch.randn(b, n, d, generator=g, dtype=torch.float64)
            memory = None if m is None else torch.randn(b, m, d, generator=g, dtype=torch.float64)
            memory_mask = _padding(g, b, m) if padded else None
            settings = dict(_settings(init), causal=True, memory=memory, memory_mask=memory_mask)
            result = assert_not_modified(block, x, memory, memory_mask=memory_mask, return_weights=True)
            if not isinstance(result, tuple) or len(result) != 3:
                raise AssertionError("DecoderBlock(..., return_weights=True) must return (x, self_weights, "
                                     "cross_weights), cross_weights None without cross-attention")
            out, self_weights, cross_weights = result
            expected = reference_transformer_block(state, x, **settings)
            mistakes = ("post", "ffn reads x", "no causal mask", *_RESIDUALS) + (
                ("memory not masked", "cross before self", "no residual around cross") if m is not None else ())
            _compare(out, expected["out"], "DecoderBlock's output",
                     lambda: _block_hint(out, state, x, mistakes, settings))
            _compare(self_weights, expected["self_weights"], "DecoderBlock's self-attention weights")
            if m is None:
                if cross_weights is not None:
                    raise AssertionError("without cross-attention, the third value returned must be None")
            else:
                _compare(cross_weights, expected["cross_weights"], "DecoderBlock's cross-attention weights")
        return run

    def no_leak():
        block, _ = _build(DecoderBlock, "DecoderBlock", dict(d_model=8, n_heads=2, d_ff=16), BLOCK_NAMES, 4)
        x = torch.randn(2, 7, 8, generator=g, dtype=torch.float64)
        _leak_check(lambda t: block(t), x, "DecoderBlock", 4)

    def reads_memory():
        init = dict(d_model=8, n_heads=2, d_ff=16, cross_attention=True)
        block, _ = _build(DecoderBlock, "DecoderBlock", init, BLOCK_NAMES + CROSS_NAMES, 5)
        x = torch.randn(2, 4, 8, generator=g, dtype=torch.float64)
        memory = torch.randn(2, 6, 8, generator=g, dtype=torch.float64)
        if torch.allclose(block(x, memory), block(x, memory + 1.0)):
            raise AssertionError("changing the memory (the encoder's output) did not change the decoder "
                                 "block's output: the cross-attention must take its keys and values from memory")
        _leak_check(lambda t: block(t, memory), x, "DecoderBlock with cross-attention", 2)

    def with_cache():
        block, _ = _build(DecoderBlock, "DecoderBlock", dict(d_model=12, n_heads=3, d_ff=16), BLOCK_NAMES, 6)
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
        ("RMSNorm, SwiGLU, one key/value head, no positions (rope_base=None), padded memory",
         values(dict(d_model=8, n_heads=2, n_kv_heads=1, d_ff=12, norm="rms", activation="swiglu", rope_base=None,
                     cross_attention=True), 2, 3, m=4, padded=True, seed=3)),
        ("post-norm, RMSNorm, rope_base=500, one token",
         values(dict(d_model=8, n_heads=2, d_ff=10, placement="post", norm="rms", rope_base=500.0), 3, 1, seed=7)),
        ("no token sees a later one", no_leak),
        ("the cross-attention reads the memory", reads_memory),
        ("the KV cache gives the same outputs", with_cache),
    ])


def check_encoder_only(EncoderOnly: type) -> None:
    """Your ``EncoderOnly`` against the float64 reference: names, hidden states (a final norm
    after pre-norm blocks, none after post-norm ones), the weights of every layer, padding
    ignored, class logits from the mean of the real tokens."""
    g = _seeded(13)

    def case(init, b, n, padded, seed, weights=False):
        def run():
            model, state = _build(EncoderOnly, "EncoderOnly", init, MODEL_NAMES["EncoderOnly"] + ("classifier",), seed)
            tokens = _tokens(g, init["vocab_size"], b, n)
            mask = _padding(g, b, n) if padded else None
            settings = dict(_settings(init), tokens=tokens, mask=mask)
            hidden = assert_not_modified(model, tokens, mask)
            expected = reference_transformer("EncoderOnly", state, **settings)
            mistakes = ("no final norm", "post") + (("padding not masked",) if padded else ())
            _compare(hidden, expected["hidden"], "EncoderOnly's hidden states",
                     lambda: _model_hint(hidden, "EncoderOnly", state, settings, "hidden", mistakes,
                                         "final_norm after the last block"))
            if weights:
                _compare_layers(model(tokens, mask, return_weights=True), expected["weights"],
                                "EncoderOnly's attention weights", 2, "model(tokens, mask, return_weights=True)")
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
        ("two layers, padding, the weights of every layer",
         case(dict(vocab_size=13, d_model=12, n_layers=2, n_heads=3, d_ff=16, n_classes=2), 3, 6, True, 1,
              weights=True)),
        ("post-norm (no final norm), padding",
         case(dict(vocab_size=10, d_model=8, n_layers=2, n_heads=2, d_ff=12, n_classes=3, placement="post"),
              2, 5, True, 2)),
        ("RMSNorm, SwiGLU, one key/value head, no positions (rope_base=None)",
         case(dict(vocab_size=9, d_model=8, n_layers=2, n_heads=2, n_kv_heads=1, d_ff=12, n_classes=2, norm="rms",
                   activation="swiglu", rope_base=None), 2, 4, True, 3)),
    ])


def check_decoder_only(DecoderOnly: type) -> None:
    """Your ``DecoderOnly`` against the float64 reference: names, tied embeddings, logits (a final
    norm after pre-norm blocks, none after post-norm ones), no token sees a later one, the KV
    cache, the attention weights of every layer."""
    g = _seeded(17)

    def values(init, b, n, seed, weights=False):
        def run():
            model, state = _build(DecoderOnly, "DecoderOnly", init, MODEL_NAMES["DecoderOnly"], seed)
            tokens = _tokens(g, init["vocab_size"], b, n)
            settings = dict(_settings(init), tokens=tokens)
            logits = assert_not_modified(model, tokens)
            expected = reference_transformer("DecoderOnly", state, **settings)
            _compare(logits, expected["logits"], "DecoderOnly's logits", lambda: _model_hint(
                logits, "DecoderOnly", state, settings, "logits", ("no final norm", "no causal mask", "post"),
                "final_norm before lm_head"))
            if weights:
                _compare_layers(model(tokens, return_weights=True), expected["weights"],
                                "DecoderOnly's attention weights", 2, "model(tokens, return_weights=True)")
        return run

    def no_leak():
        model, _ = _build(DecoderOnly, "DecoderOnly", dict(vocab_size=10, d_model=8, n_layers=2, n_heads=2, d_ff=16),
                          MODEL_NAMES["DecoderOnly"], 3)
        tokens = _tokens(g, 10, 2, 7)
        _leak_check(lambda t: model(t), tokens, "DecoderOnly", 3, vocab=10)

    def with_cache():
        model, _ = _build(DecoderOnly, "DecoderOnly", dict(vocab_size=10, d_model=12, n_layers=2, n_heads=3, d_ff=16),
                          MODEL_NAMES["DecoderOnly"], 4)
        tokens = _tokens(g, 10, 2, 7)
        full = model(tokens)
        cache = model.new_cache()
        pieces = [model(tokens[:, :4], cache), model(tokens[:, 4:5], cache), model(tokens[:, 5:], cache)]
        _compare(torch.cat(pieces, dim=1), full, "DecoderOnly in pieces with a cache",
                 lambda: "give block i the cache of layer i (cache[i])")

    run_checks("DecoderOnly", [
        ("tied embeddings, two layers", values(dict(vocab_size=11, d_model=8, n_layers=2, n_heads=2, d_ff=16), 2, 5, 0)),
        ("untied, grouped-query attention, RMSNorm, the weights of every layer",
         values(dict(vocab_size=9, d_model=16, n_layers=1, n_heads=4, n_kv_heads=2, d_ff=20, norm="rms",
                     tie_embeddings=False), 3, 4, 1, weights=True)),
        ("post-norm (no final norm)",
         values(dict(vocab_size=10, d_model=8, n_layers=2, n_heads=2, d_ff=12, placement="post"), 2, 5, 2)),
        ("SwiGLU, rope_base=500, the weights of every layer",
         values(dict(vocab_size=12, d_model=12, n_layers=2, n_heads=3, d_ff=20, activation="swiglu", rope_base=500.0),
                2, 4, 5, weights=True)),
        ("no token sees a later one", no_leak),
        ("the KV cache gives the same logits", with_cache),
    ])


def check_encoder_decoder(EncoderDecoder: type) -> None:
    """Your ``EncoderDecoder`` against the float64 reference: names, tied or untied embeddings,
    pre- and post-norm, logits with a padded source, the weights of every layer, decoding with a
    KV cache; changing the source changes the result, changing the target's future does not
    change the past."""
    g = _seeded(19)
    names = MODEL_NAMES["EncoderDecoder"]

    def values(init, b, m, n, seed, padded=True, weights=False):
        def run():
            model, state = _build(EncoderDecoder, "EncoderDecoder", init, names, seed)
            source, target = _tokens(g, init["vocab_size"], b, m), _tokens(g, init["vocab_size"], b, n)
            source_mask = _padding(g, b, m) if padded else None
            settings = dict(_settings(init), source=source, target=target, source_mask=source_mask)
            logits = assert_not_modified(model, source, target, source_mask)
            expected = reference_transformer("EncoderDecoder", state, **settings)
            _compare(model.encode(source, source_mask), expected["memory"], "EncoderDecoder.encode",
                     lambda: "encode: embed, the encoder blocks (with the padding mask), then encoder_norm "
                             "(nn.Identity after post-norm blocks)")
            mistakes = ("memory not masked", "no final norm", "post")
            _compare(logits, expected["logits"], "EncoderDecoder's logits", lambda: _model_hint(
                logits, "EncoderDecoder", state, settings, "logits", mistakes, "decoder_norm before lm_head"))
            if weights:
                result = model(source, target, source_mask, return_weights=True)
                call = "model(source, target, source_mask, return_weights=True)"
                _compare_layers(result, expected["self_weights"], "EncoderDecoder's self-attention weights", 3, call)
                _compare_layers(result[:1] + result[2:], expected["cross_weights"],
                                "EncoderDecoder's cross-attention weights", 2, call)
        return run

    def with_cache():
        init = dict(vocab_size=10, d_model=8, n_layers=1, n_decoder_layers=2, n_heads=2, d_ff=16)
        model, _ = _build(EncoderDecoder, "EncoderDecoder", init, names, 4)
        source, target = _tokens(g, 10, 2, 5), _tokens(g, 10, 2, 6)
        memory = model.encode(source)
        full = model.decode(target, memory)
        cache = model.new_cache()
        pieces = [model.decode(target[:, :2], memory, None, cache), model.decode(target[:, 2:3], memory, None, cache),
                  model.decode(target[:, 3:], memory, None, cache)]
        _compare(torch.cat(pieces, dim=1), full, "EncoderDecoder.decode in pieces with a cache",
                 lambda: "give decoder block i the cache of layer i (cache[i])")

    def two_inputs():
        model, _ = _build(EncoderDecoder, "EncoderDecoder",
                          dict(vocab_size=10, d_model=8, n_layers=1, n_heads=2, d_ff=16), names, 2)
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
        ("untied embeddings, post-norm (no final norms), no padding",
         values(dict(vocab_size=11, d_model=8, n_layers=2, n_heads=2, d_ff=12, tie_embeddings=False,
                     placement="post"), 2, 4, 5, 2, padded=False)),
        ("RMSNorm, SwiGLU, one key/value head, no positions, the weights of every layer",
         values(dict(vocab_size=9, d_model=8, n_layers=1, n_decoder_layers=2, n_heads=2, n_kv_heads=1, d_ff=12,
                     norm="rms", activation="swiglu", rope_base=None), 2, 5, 3, 3, weights=True)),
        ("decoding with a KV cache", with_cache),
        ("the decoder reads the source and not the target's future", two_inputs),
    ])


# The models generate is checked with (as the trusted grading builds them): untied, because with tied
# embeddings a random model mostly repeats its last token, whatever generate does.
_GENERATE_MODEL = dict(vocab_size=13, d_model=8, n_layers=2, n_heads=2, d_ff=16, tie_embeddings=False)


def check_generate(generate: Callable, DecoderOnly: type, EncoderDecoder: type | None = None) -> None:
    """Your ``generate`` against decoding with the float64 reference's logits: greedy decoding
    picks the most likely token after each step, with and without the KV cache; the prompt kept;
    1-d prompts; no new tokens; sampling draws from softmax(logits / temperature) with a seeded
    generator, at several temperatures, with and without the cache; an encoder-decoder's source.
    generate runs your ``DecoderOnly`` and ``EncoderDecoder``, so the first case checks them."""
    g = _seeded(23)
    vocab = _GENERATE_MODEL["vocab_size"]
    classes = {"DecoderOnly": DecoderOnly, "EncoderDecoder": EncoderDecoder}

    def model_of(seed, kind="DecoderOnly"):
        """(your model in float64 with random weights, a function tokens -> the reference's logits,
        the source tokens of an encoder-decoder or None)."""
        model, state = _build(classes[kind], kind, _GENERATE_MODEL, MODEL_NAMES[kind], seed)
        settings = _settings(_GENERATE_MODEL)
        source = _tokens(g, vocab, 2, 5) if kind == "EncoderDecoder" else None

        def reference_logits(tokens):
            if source is None:
                return reference_transformer(kind, state, tokens=tokens, **settings)["logits"]
            return reference_transformer(kind, state, source=source, target=tokens, **settings)["logits"]
        return model.eval(), reference_logits, source

    def models_are_right():
        for kind, cls in classes.items():
            if cls is None:
                continue
            model, reference_logits, source = model_of(9, kind)
            tokens = _tokens(g, vocab, 2, 4)
            blame = (f"generate runs your {kind}, so it cannot write the right tokens before {kind} is right: "
                     "fix it first (its own check says what is wrong)")
            with torch.no_grad():
                logits = model(tokens) if source is None else model(source, tokens)
                _compare(logits, reference_logits(tokens), f"your {kind}'s logits", lambda: blame)
                memory = None if source is None else model.encode(source)
                cache = model.new_cache()
                pieces = [model(piece, cache) if source is None else model.decode(piece, memory, None, cache)
                          for piece in (tokens[:, :2], tokens[:, 2:3], tokens[:, 3:])]
            _compare(torch.cat(pieces, dim=1), logits, f"your {kind}'s logits in pieces with a KV cache",
                     lambda: blame)

    def greedy_reference(reference_logits, prompt, steps):
        tokens = prompt
        for _ in range(steps):
            tokens = torch.cat([tokens, reference_logits(tokens)[:, -1].argmax(-1, keepdim=True)], dim=1)
        return tokens

    def greedy():
        model, reference_logits, _ = model_of(0)
        prompt = _tokens(g, vocab, 2, 3)
        expected = greedy_reference(reference_logits, prompt, 6)
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

    def no_new_tokens():
        model, _, _ = model_of(4)
        prompt = _tokens(g, vocab, 2, 3)
        for use_cache in (False, True):
            got = generate(model, prompt, 0, use_cache=use_cache)
            if not (isinstance(got, torch.Tensor) and torch.equal(got, prompt)):
                raise AssertionError(f"generate(model, prompt, 0, use_cache={use_cache}) must return the prompt "
                                     f"unchanged, got {got.tolist() if isinstance(got, torch.Tensor) else got!r}: "
                                     "max_new_tokens=0 writes no new token (loop exactly max_new_tokens times)")

    def one_dimensional():
        model, reference_logits, _ = model_of(1)
        prompt = _tokens(g, vocab, 4)
        got = generate(model, prompt, 3)
        assert_shape(got, (7,), what="generate with a 1-d prompt", meaning="(n_prompt + max_new_tokens,)")
        expected = greedy_reference(reference_logits, prompt[None], 3)[0]
        if not torch.equal(got, expected):
            raise AssertionError(f"with a 1-d prompt generate wrote {got.tolist()}, greedy decoding writes "
                                 f"{expected.tolist()}")

    def sampling_reference(reference_logits, prompt, steps, temperature, generator):
        tokens = prompt
        for _ in range(steps):
            probabilities = torch.softmax(reference_logits(tokens)[:, -1] / temperature, dim=-1)
            tokens = torch.cat([tokens, torch.multinomial(probabilities, 1, generator=generator)], dim=1)
        return tokens

    def sampling():
        model, reference_logits, _ = model_of(2)
        prompt = _tokens(g, vocab, 3, 2)
        first = generate(model, prompt, 8, temperature=1.0, generator=_seeded(5))
        second = generate(model, prompt, 8, temperature=1.0, generator=_seeded(5))
        if not torch.equal(first, second):
            raise AssertionError("sampling with two generators seeded alike gave different tokens: draw with "
                                 "torch.multinomial(probabilities, 1, generator=generator)")

        def samples_like_the_reference(temperature):
            expected = sampling_reference(reference_logits, prompt, 8, temperature, _seeded(5))
            for use_cache in (True, False):
                got = generate(model, prompt, 8, temperature=temperature, generator=_seeded(5), use_cache=use_cache)
                if not torch.equal(got, expected):
                    raise AssertionError(
                        f"with temperature={temperature} (use_cache={use_cache}) generate wrote {got.tolist()}, "
                        f"sampling writes {expected.tolist()}: above 0, draw each token with torch.multinomial("
                        "torch.softmax(logits / temperature, dim=-1), 1, generator=generator), once per step, for "
                        "every sequence of the batch at once")

        samples_like_the_reference(1.0)
        cold = generate(model, prompt, 8, temperature=1e-6, generator=_seeded(5))
        if not torch.equal(cold, greedy_reference(reference_logits, prompt, 8)):
            raise AssertionError("with a tiny temperature, sampling must pick the most likely token: divide "
                                 "the logits by the temperature before the softmax")
        for temperature in (2.5, 0.5):
            samples_like_the_reference(temperature)

    cases = [("your models compute the reference's logits (generate runs them)", models_are_right),
             ("greedy, with and without the cache", greedy), ("no new tokens (max_new_tokens=0)", no_new_tokens),
             ("a 1-d prompt", one_dimensional), ("sampling with a seeded generator, three temperatures", sampling)]
    if EncoderDecoder is not None:
        def translate():
            model, reference_logits, source = model_of(3, "EncoderDecoder")
            prompt = _tokens(g, vocab, 2, 2)
            expected = greedy_reference(reference_logits, prompt, 5)
            for use_cache in (False, True):
                got = generate(model, prompt, 5, use_cache=use_cache, source=source)
                if not torch.equal(got, expected):
                    raise AssertionError(f"with an EncoderDecoder (use_cache={use_cache}) generate wrote "
                                         f"{got.tolist()}, greedy decoding writes {expected.tolist()}: run "
                                         "model.decode on the encoder's output (memory) at every step")
        cases.append(("an encoder-decoder's source", translate))
    run_checks("generate", cases)


# --------------------------------------------------------------------------------------------
# The pronoun head (a thinking exercise, not graded)
# --------------------------------------------------------------------------------------------

# The share of the predictions a head must cost to count as needed, and the share a control may
# cost at most (where the model gets at least ``_RELIABLE`` of the sentences right with every head).
_NEEDED, _CONTROL, _RELIABLE = 0.6, 0.05, 0.9
VERDICTS = ("content", "position")


def _pronoun_measure(model, distance: int, n: int, heads: Sequence[tuple[int, int]] = (),
                     weights: bool = False):
    """The course's own count: how many of the ``n`` sentences at ``distance`` still get a word that
    fits with ``heads`` switched off; with ``weights``, also the attention weights of every layer."""
    from attnlab.tasks import pronoun

    found = pronoun.sentences(n, distance, seed=0)
    n_layers, n_heads = len(model.blocks), model.blocks[0].self_attn.n_heads
    masks = torch.ones(n_layers, n_heads)
    for layer, head in heads:
        masks[layer, head] = 0.0
    with torch.no_grad(), pronoun.head_masks(model, masks):
        logits, attention = model(pronoun.token_ids(found), return_weights=True)
    fits = pronoun.count_fits(logits[:, -1], found)
    return (fits, attention) if weights else fits


def _pair(value, what: str, n_layers: int, n_heads: int) -> tuple[int, int]:
    if (not isinstance(value, (tuple, list)) or len(value) != 2
            or not all(isinstance(v, int) and not isinstance(v, bool) for v in value)):
        raise AssertionError(f"{what} must be a pair (layer, head) of whole numbers, got {value!r}")
    layer, head = value
    if not (0 <= layer < n_layers and 0 <= head < n_heads):
        raise AssertionError(f"{what} = {value!r} is not a head of the course model: layers 0 to {n_layers - 1}, "
                             f"heads 0 to {n_heads - 1} (counting from 0)")
    return int(layer), int(head)


def check_pronoun_ablation(surviving_predictions: Callable, decisions: Callable, model: nn.Module,
                           n_sentences: int = 200) -> dict | None:
    """Lesson 07's pronoun exercise (not graded): is the head that reads the noun from "was" needed,
    and does it find the noun by what it is or by where it is?

    decisions() returns (head, control, distances, verdict): the (layer, head) to switch off, a
    control head, the noun-to-"was" distances to measure (from ``attnlab.tasks.pronoun.DISTANCES``)
    and "content" or "position". surviving_predictions(head, distance) returns how many of
    ``pronoun.sentences(200, distance)`` still get a word that fits with ``head`` switched off.

    Any head the model needs, any control it does not need, any distances that include one the
    corpus never has, and the verdict the measurement supports all pass. Prints the measurements
    and returns them ({distance: {...}}), or prints that it waits and returns None while either
    function raises NotImplementedError.
    """
    from attnlab.tasks import pronoun

    try:
        chosen = decisions()
        surviving_predictions((0, 0), 6)
    except NotImplementedError:
        print("… pronoun exercise: waiting for your pronoun_decisions() and surviving_predictions() "
              "(this exercise is not graded)")
        return None
    n_layers, n_heads = len(model.blocks), model.blocks[0].self_attn.n_heads
    measured: dict = {}
    memo: dict = {}

    def _measure(_model, distance, n, heads=(), weights=False):
        # The course's count, each (distance, heads) computed once.
        key = (distance, tuple(sorted(heads)), weights)
        if key not in memo:
            memo[key] = _pronoun_measure(model, distance, n, heads, weights)
        return memo[key]

    def well_formed():
        if not isinstance(chosen, (tuple, list)) or len(chosen) != 4:
            raise AssertionError(f"pronoun_decisions() must return (head, control, distances, verdict), got {chosen!r}")
        head, control, distances, verdict = chosen
        measured["head"] = _pair(head, "the head to switch off", n_layers, n_heads)
        measured["control"] = _pair(control, "the control head", n_layers, n_heads)
        if isinstance(distances, int) or not distances or any(d not in pronoun.DISTANCES for d in distances):
            raise AssertionError(f"distances must be a list of distances from {pronoun.DISTANCES}, got {distances!r}")
        if verdict not in VERDICTS:
            raise AssertionError(f"the verdict must be 'content' (the head finds the noun by what it is) or "
                                 f"'position' (it looks a fixed number of words back), got {verdict!r}")
        measured["distances"] = sorted(set(distances) | {6})
        measured["verdict"] = verdict

    def counts_like_the_course():
        head, control = measured["head"], measured["control"]
        for distance in measured["distances"]:
            full = _measure(model, distance, n_sentences)
            for which in (head, control):
                expected = _measure(model, distance, n_sentences, [which])
                got = surviving_predictions(which, distance)
                if got == expected:
                    continue
                layer, h = which
                hint = "recount with pronoun.count_fits(logits[:, -1], sentences)"
                if got == full:
                    hint = ("that is the count with every head on: nothing was switched off (the mask needs a 0 at "
                            "[layer, head], passed with pronoun.head_masks)")
                elif h < n_layers and layer < n_heads and got == _measure(model, distance, n_sentences, [(h, layer)]):
                    hint = f"that is the count with head {layer} of layer {h} off: the mask is indexed [layer, head]"
                elif got == _measure(model, distance, n_sentences, [(layer, i) for i in range(n_heads)]):
                    hint = f"that is the count with every head of layer {layer} off: switch off one head"
                raise AssertionError(f"surviving_predictions({which}, {distance}) returned {got!r}; with layer {layer} "
                                     f"head {h} switched off, {expected} of {n_sentences} predictions still fit: {hint}")

    def the_head_is_needed():
        layer, head = measured["head"]
        full = _measure(model, 6, n_sentences)
        off = _measure(model, 6, n_sentences, [measured["head"]])
        if off > _NEEDED * full:
            raise AssertionError(f"with layer {layer} head {head} switched off, {off} of the {full} predictions that fit "
                                 "still fit: the model does not need that head to find the noun. Switch off the head "
                                 "whose attention from 'was' lands on the noun")

    def the_control_is_not():
        if measured["control"] == measured["head"]:
            raise AssertionError("the control must be another head: it shows what switching off *a* head costs, "
                                 "so that the cost of yours means something")
        layer, head = measured["control"]
        for distance in measured["distances"]:
            full = _measure(model, distance, n_sentences)
            if full < _RELIABLE * n_sentences:
                continue   # the model itself fails here: nothing to control
            off = _measure(model, distance, n_sentences, [measured["control"]])
            if off < full - _CONTROL * n_sentences:
                raise AssertionError(f"with your control (layer {layer} head {head}) switched off, only {off} of {full} "
                                     f"predictions fit at distance {distance}: it is needed too, so it cannot show that "
                                     "the cost is specific to your head. Choose a head the model does without")

    def a_distance_the_corpus_never_has():
        if measured["distances"] == [6]:
            raise AssertionError("the corpus always puts the noun 6 words before 'was', so there a head that finds the "
                                 "noun and a head that always looks 6 words back do the same thing. Measure at least one "
                                 f"other distance ({', '.join(str(d) for d in pronoun.DISTANCES if d != 6)})")

    def the_verdict_follows():
        layer, head = measured["head"]
        table = {}
        for distance in measured["distances"]:
            full, attention = _measure(model, distance, n_sentences, weights=True)
            w = attention[layer][:, head, -1]                 # (sentences, keys): from "was"
            table[distance] = {
                "fit": full, "head_off": _measure(model, distance, n_sentences, [measured["head"]]),
                "control_off": _measure(model, distance, n_sentences, [measured["control"]]),
                "on_noun": w[:, pronoun.NOUN].mean().item(), "six_back": w[:, -7].mean().item()}
        measured["table"] = table
        others = [d for d in measured["distances"] if d != 6]
        by_content = all(table[d]["on_noun"] > table[d]["six_back"] for d in others)
        right = "content" if by_content else "position"
        if measured["verdict"] != right:
            d = others[0]
            raise AssertionError(
                f"at distance {d}, head {head} of layer {layer} puts {table[d]['on_noun']:.0%} of its attention from 'was' "
                f"on the noun and {table[d]['six_back']:.0%} on the word 6 words back: "
                + ("it follows the noun wherever it stands, by what it is ('content')" if by_content else
                   "it keeps looking 6 words back, wherever the noun is ('position')"))

    report = run_checks("pronoun ablation (not graded)",
                        [("your decisions are well formed", well_formed),
                         ("your surviving_predictions counts what the course counts", counts_like_the_course),
                         ("the head you switch off is one the model needs", the_head_is_needed),
                         ("the control is a head the model does without", the_control_is_not),
                         ("a distance the corpus never has", a_distance_the_corpus_never_has),
                         ("the verdict follows from the measurement", the_verdict_follows)])
    (layer, head), (c_layer, c_head) = measured["head"], measured["control"]
    print(f"{'distance':>8} {'fit, every head':>16} {f'L{layer}H{head} off':>10} {f'L{c_layer}H{c_head} off':>10} "
          f"{'attention on the noun':>22} {'on the word 6 back':>19}")
    for distance, row in measured["table"].items():
        print(f"{distance:>8} {row['fit']:>12}/{n_sentences} {row['head_off']:>6}/{n_sentences} "
              f"{row['control_off']:>6}/{n_sentences} {row['on_noun']:>22.0%} {row['six_back']:>19.0%}")
    return {"report_passed": report.passed, **measured}
