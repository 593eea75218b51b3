"""Trusted cases of lesson 07 (EncoderBlock, DecoderBlock, EncoderOnly, DecoderOnly, EncoderDecoder,
generate).

Every case builds the learner's class with random sizes and arrangements (placement, norm,
activation, rope_base, tied or untied embeddings), sets every parameter by the names the course
fixes (``attnlab.stacks``'s docstring; a renamed, missing or extra parameter fails here, as it
would fail to load a saved model), and calls it in float64 through the recipes ``stacks_model``,
``stacks_cache`` and ``stacks_generate`` of ``autograder.recipes``. The parameter names are listed
here from the contract, not read from any implementation.
"""

from __future__ import annotations

import numpy as np

from autograder.cases import Case, Inputs


def _draw(rng, *shape, spread=1.0):
    return (spread * rng.standard_normal(shape)).astype(np.float64)


def _norm_parameters(prefix: str, d: int, norm: str) -> dict[str, tuple]:
    found = {f"{prefix}.weight": ("norm", d)}
    if norm == "layer":
        found[f"{prefix}.bias"] = ("bias", d)
    return found


def _block_parameters(prefix: str, d: int, n_heads: int, n_kv: int, d_ff: int, *, cross: bool = False,
                      norm: str = "layer", activation: str = "gelu") -> dict[str, tuple]:
    """Names and shapes of one block's parameters (attention without biases, FFN with biases)."""
    h = d // n_heads
    found: dict[str, tuple] = {}

    def attention(name):
        found.update({f"{prefix}{name}.q_proj.weight": (n_heads * h, d), f"{prefix}{name}.k_proj.weight": (n_kv * h, d),
                      f"{prefix}{name}.v_proj.weight": (n_kv * h, d), f"{prefix}{name}.o_proj.weight": (d, n_heads * h)})

    found.update(_norm_parameters(f"{prefix}attn_norm", d, norm))
    attention("self_attn")
    if cross:
        found.update(_norm_parameters(f"{prefix}cross_norm", d, norm))
        attention("cross_attn")
    found.update(_norm_parameters(f"{prefix}ffn_norm", d, norm))
    if activation == "swiglu":
        found.update({f"{prefix}ffn.gate.weight": (d_ff, d), f"{prefix}ffn.gate.bias": ("bias", d_ff)})
    found.update({f"{prefix}ffn.up.weight": (d_ff, d), f"{prefix}ffn.up.bias": ("bias", d_ff),
                  f"{prefix}ffn.down.weight": (d, d_ff), f"{prefix}ffn.down.bias": ("bias", d)})
    return found


def _model_parameters(kind: str, init: dict) -> dict[str, tuple]:
    d, vocab = init["d_model"], init["vocab_size"]
    n_heads, n_kv = init["n_heads"], init.get("n_kv_heads") or init["n_heads"]
    common = dict(norm=init.get("norm", "layer"), activation=init.get("activation", "gelu"))
    found: dict[str, tuple] = {"embed.weight": ("embedding", vocab, d)}
    post = init.get("placement", "pre") == "post"
    if kind in ("EncoderOnly", "DecoderOnly"):
        for i in range(init["n_layers"]):
            found.update(_block_parameters(f"blocks.{i}.", d, n_heads, n_kv, init["d_ff"], **common))
        if not post:
            found.update(_norm_parameters("final_norm", d, common["norm"]))
    if kind == "EncoderOnly" and init.get("n_classes"):
        found.update({"classifier.weight": (init["n_classes"], d), "classifier.bias": ("bias", init["n_classes"])})
    if kind == "EncoderDecoder":
        for i in range(init["n_layers"]):
            found.update(_block_parameters(f"encoder.{i}.", d, n_heads, n_kv, init["d_ff"], **common))
        for i in range(init.get("n_decoder_layers") or init["n_layers"]):
            found.update(_block_parameters(f"decoder.{i}.", d, n_heads, n_kv, init["d_ff"], cross=True, **common))
        if not post:
            found.update(_norm_parameters("encoder_norm", d, common["norm"]))
            found.update(_norm_parameters("decoder_norm", d, common["norm"]))
    if kind in ("DecoderOnly", "EncoderDecoder") and not init.get("tie_embeddings", True):
        found["lm_head.weight"] = (vocab, d)
    return found


def _parameter_arrays(rng, inputs: Inputs, shapes: dict[str, tuple]) -> dict[str, str]:
    """Random values for every parameter: norm scales near 1, biases and embeddings spread,
    matrices scaled by 1/sqrt(fan-in)."""
    found = {}
    for name, shape in shapes.items():
        if shape[0] == "norm":
            value = 1.0 + _draw(rng, shape[1], spread=0.3)
        elif shape[0] == "bias":
            value = _draw(rng, shape[1], spread=0.3)
        elif shape[0] == "embedding":
            value = _draw(rng, *shape[1:])
        else:
            value = _draw(rng, *shape, spread=shape[1] ** -0.5)
        found[name] = inputs.add(value)["array"]
    return found


def _padding(rng, b: int, n: int) -> np.ndarray:
    lengths = rng.integers(1, n + 1, size=b)
    lengths[0] = n
    return np.arange(n) < lengths[:, None]


def _block(grade_id, rng, kind, b, n, d, n_heads, n_kv=None, d_ff=None, *, placement="pre", norm="layer",
           activation="gelu", rope_base=10000.0, cross=False, m=None, padded=False, weights=False, label=""):
    inputs = Inputs()
    d_ff = d_ff or 2 * d
    init = {"d_model": d, "n_heads": n_heads, "d_ff": d_ff, "n_kv_heads": n_kv, "placement": placement,
            "norm": norm, "activation": activation, "rope_base": rope_base}
    if kind == "DecoderBlock":
        init["cross_attention"] = cross
    parameters = _parameter_arrays(rng, inputs, _block_parameters(
        "", d, n_heads, n_kv or n_heads, d_ff, cross=cross, norm=norm, activation=activation))
    args = [inputs.add(_draw(rng, b, n, d))]
    kwargs: dict = {"return_weights": weights}
    if kind == "EncoderBlock" and padded:
        args.append(inputs.add(_padding(rng, b, n)[:, None, None, :]))
    if kind == "DecoderBlock" and cross:
        args.append(inputs.add(_draw(rng, b, m, d)))
        if padded:
            kwargs["memory_mask"] = inputs.add(_padding(rng, b, m))
    return Case(grade_id, kind, args, kwargs, inputs.arrays, recipe="stacks_model", init=init,
                parameters=parameters, options={"dtype": "float64"}, label=label)


def _model(grade_id, rng, kind, b, n, *, vocab, d, n_layers, n_heads, n_kv=None, method="forward", m=None,
           padded=False, weights=False, tie=True, placement="pre", norm="layer", activation="gelu",
           rope_base=10000.0, n_decoder_layers=None, n_classes=None, label=""):
    inputs = Inputs()
    init = {"vocab_size": vocab, "d_model": d, "n_layers": n_layers, "n_heads": n_heads, "d_ff": 2 * d,
            "n_kv_heads": n_kv, "placement": placement, "norm": norm, "activation": activation,
            "rope_base": rope_base}
    if kind == "EncoderOnly":
        init["n_classes"] = n_classes
    if kind in ("DecoderOnly", "EncoderDecoder"):
        init["tie_embeddings"] = tie
    if kind == "EncoderDecoder":
        init["n_decoder_layers"] = n_decoder_layers
    parameters = _parameter_arrays(rng, inputs, _model_parameters(kind, init))
    kwargs: dict = {}
    if kind == "EncoderDecoder":
        args = [inputs.add(rng.integers(0, vocab, size=(b, m)))]
        if method != "encode":
            args.append(inputs.add(rng.integers(0, vocab, size=(b, n))))
        if padded:
            args.append(inputs.add(_padding(rng, b, m)))
        if weights:
            kwargs["return_weights"] = True
    else:
        args = [inputs.add(rng.integers(0, vocab, size=(b, n)))]
        if kind == "EncoderOnly" and padded:
            args.append(inputs.add(_padding(rng, b, n)))
        if weights:
            kwargs["return_weights"] = True
    return Case(grade_id, kind, args, kwargs, inputs.arrays, recipe="stacks_model", init=init,
                parameters=parameters, options={"dtype": "float64", "method": method}, label=label)


def _cached(grade_id, rng, kind, b, chunks, *, d, n_heads, n_kv=None, vocab=11, n_layers=2, m=None, label=""):
    """Decoding in ``chunks`` with a cache: a DecoderBlock (float inputs), a DecoderOnly or an
    EncoderDecoder (token ids; ``m`` source tokens)."""
    inputs = Inputs()
    n = sum(chunks)
    if kind == "DecoderBlock":
        init = {"d_model": d, "n_heads": n_heads, "d_ff": 2 * d, "n_kv_heads": n_kv}
        shapes = _block_parameters("", d, n_heads, n_kv or n_heads, 2 * d)
        args = [inputs.add(_draw(rng, b, n, d))]
    else:
        init = {"vocab_size": vocab, "d_model": d, "n_layers": n_layers, "n_heads": n_heads, "d_ff": 2 * d,
                "n_kv_heads": n_kv}
        shapes = _model_parameters(kind, init)
        args = [inputs.add(rng.integers(0, vocab, size=(b, n)))]
        if kind == "EncoderDecoder":
            args.append(inputs.add(rng.integers(0, vocab, size=(b, m))))
    parameters = _parameter_arrays(rng, inputs, shapes)
    return Case(grade_id, kind, args, {}, inputs.arrays, recipe="stacks_cache", init=init, parameters=parameters,
                options={"dtype": "float64", "chunks": list(chunks)}, label=label)


def _generate(grade_id, rng, b, n_prompt, steps, *, use_cache, kind="DecoderOnly", d=8, n_heads=2, n_layers=2,
              vocab=13, m=None, check="tokens", temperature=0.0, one_d=False, label=""):
    """``generate`` on a random model. check "tokens" compares the tokens themselves with the
    reference's, also when sampling (temperature above 0: both draw from a generator seeded alike);
    "reproducible" only asks that two runs agree, the ids stay in the vocabulary and the prompt is kept."""
    inputs = Inputs()
    # Untied: with tied embeddings a random model mostly repeats its last token, whatever generate does.
    init = {"vocab_size": vocab, "d_model": d, "n_layers": n_layers, "n_heads": n_heads, "d_ff": 2 * d,
            "tie_embeddings": False}
    parameters = _parameter_arrays(rng, inputs, _model_parameters(kind, init))
    prompt = rng.integers(0, vocab, size=(n_prompt,) if one_d else (b, n_prompt))
    args = [inputs.add(prompt), steps]
    kwargs: dict = {"use_cache": use_cache, "temperature": temperature}
    if kind == "EncoderDecoder":
        kwargs["source"] = inputs.add(rng.integers(0, vocab, size=(b, m)))
    return Case(grade_id, "generate", args, kwargs, inputs.arrays, recipe="stacks_generate", init=init,
                parameters=parameters, options={"dtype": "float64", "model": kind, "check": check}, label=label)


def cases() -> list[Case]:
    rng = np.random.default_rng(20260707)
    found: list[Case] = [
        _block("encoder_block_visible", rng, "EncoderBlock", 2, 5, 8, 2, label="pre-norm"),
        _block("encoder_block_visible", rng, "EncoderBlock", 2, 4, 8, 2, placement="post", label="post-norm"),
        _block("encoder_block_visible", rng, "EncoderBlock", 3, 6, 12, 3, padded=True, weights=True, label="padding"),
        _block("encoder_block_visible", rng, "EncoderBlock", 2, 5, 16, 4, 2, norm="rms", label="GQA, RMSNorm"),
        _block("encoder_block_visible", rng, "EncoderBlock", 2, 3, 8, 2, 1, 12, activation="swiglu", rope_base=500.0,
               label="SwiGLU, one KV head, rope_base=500"),
        _block("encoder_block_visible", rng, "EncoderBlock", 2, 1, 12, 3, placement="post", norm="rms", rope_base=None,
               padded=True, label="post-norm, RMSNorm, no positions, one token"),
    ]
    for index in range(6):
        n_heads = int(rng.choice([1, 2, 3, 4]))
        n_kv = [None, 1, n_heads][index % 3]
        h = int(rng.choice([2, 4, 6]))
        found.append(_block(
            "encoder_block_hidden", rng, "EncoderBlock", int(rng.integers(1, 4)), int(rng.integers(1, 10)),
            n_heads * h, n_heads, n_kv, int(rng.integers(3, 20)), placement=("pre", "post")[index % 2],
            norm=("layer", "rms")[index // 3], activation=("gelu", "swiglu")[index == 4], padded=index in (1, 3, 5),
            rope_base=(10000.0, 300.0, None)[index % 3], weights=index % 2 == 0, label=f"hidden {index}"))

    found += [
        _block("decoder_block_visible", rng, "DecoderBlock", 2, 5, 8, 2, weights=False, label="no cross-attention"),
        _block("decoder_block_visible", rng, "DecoderBlock", 3, 4, 12, 3, cross=True, m=6, padded=True,
               weights=True, label="cross-attention, padded memory"),
        _block("decoder_block_visible", rng, "DecoderBlock", 2, 5, 16, 4, 2, placement="post", cross=True, m=3,
               label="post-norm, GQA, cross-attention"),
        _block("decoder_block_visible", rng, "DecoderBlock", 2, 3, 8, 2, 1, 12, norm="rms", activation="swiglu",
               rope_base=None, cross=True, m=4, padded=True, label="RMSNorm, SwiGLU, one KV head, no positions"),
        _block("decoder_block_visible", rng, "DecoderBlock", 3, 1, 8, 2, d_ff=10, placement="post", norm="rms",
               rope_base=500.0, label="post-norm, RMSNorm, rope_base=500, one token"),
        _cached("decoder_block_visible", rng, "DecoderBlock", 2, (3, 1, 2), d=12, n_heads=3, label="KV cache"),
    ]
    for index in range(6):
        n_heads = int(rng.choice([1, 2, 4]))
        h = int(rng.choice([2, 4]))
        cross = index % 2 == 1
        found.append(_block(
            "decoder_block_hidden", rng, "DecoderBlock", int(rng.integers(1, 4)), int(rng.integers(1, 9)),
            n_heads * h, n_heads, [None, 1][index % 2 == 0 and n_heads > 1], int(rng.integers(3, 17)),
            placement=("pre", "post")[index // 3], cross=cross, m=int(rng.integers(1, 8)), padded=cross,
            weights=index in (1, 2), norm=("layer", "rms")[index == 4], activation=("gelu", "swiglu")[index == 3],
            rope_base=(10000.0, None, 200.0)[index % 3], label=f"hidden {index}"))
    for index, chunks in enumerate([(1, 1, 1, 1), (4, 3), (2, 5, 1)]):
        found.append(_cached("decoder_block_hidden", rng, "DecoderBlock", int(rng.integers(1, 3)), chunks, d=8,
                             n_heads=2, n_kv=(None, 1, 2)[index], label=f"hidden cache {index}"))

    found += [
        _model("encoder_only_visible", rng, "EncoderOnly", 2, 5, vocab=11, d=8, n_layers=1, n_heads=2, n_classes=3,
               label="hidden states"),
        _model("encoder_only_visible", rng, "EncoderOnly", 3, 6, vocab=13, d=12, n_layers=2, n_heads=3, n_classes=2,
               padded=True, method="classify", label="classify, padding"),
        _model("encoder_only_visible", rng, "EncoderOnly", 3, 6, vocab=13, d=12, n_layers=2, n_heads=3, n_classes=2,
               padded=True, weights=True, label="padding, the weights of every layer"),
        _model("encoder_only_visible", rng, "EncoderOnly", 2, 5, vocab=10, d=8, n_layers=2, n_heads=2, n_classes=3,
               padded=True, placement="post", label="post-norm, padding"),
        _model("encoder_only_visible", rng, "EncoderOnly", 2, 4, vocab=9, d=8, n_layers=2, n_heads=2, n_kv=1,
               n_classes=2, padded=True, norm="rms", activation="swiglu", rope_base=None, method="classify",
               label="RMSNorm, SwiGLU, one KV head, no positions"),
    ]
    for index in range(5):
        found.append(_model(
            "encoder_only_hidden", rng, "EncoderOnly", int(rng.integers(1, 4)), int(rng.integers(2, 9)),
            vocab=int(rng.integers(5, 30)), d=8, n_layers=int(rng.integers(1, 3)), n_heads=(1, 2, 4)[index % 3],
            n_classes=int(rng.integers(2, 5)), padded=index % 2 == 0, method=("forward", "classify")[index % 2],
            weights=index == 2, placement=("pre", "post")[index in (1, 3)], norm=("layer", "rms")[index == 4],
            activation=("gelu", "swiglu")[index == 1], rope_base=(10000.0, 400.0, None)[index % 3],
            label=f"hidden {index}"))

    found += [
        _model("decoder_only_visible", rng, "DecoderOnly", 2, 5, vocab=11, d=8, n_layers=2, n_heads=2,
               label="tied embeddings"),
        _model("decoder_only_visible", rng, "DecoderOnly", 3, 4, vocab=9, d=16, n_layers=1, n_heads=4, n_kv=2,
               tie=False, norm="rms", weights=True, label="untied, GQA, weights"),
        _model("decoder_only_visible", rng, "DecoderOnly", 2, 5, vocab=10, d=8, n_layers=2, n_heads=2,
               placement="post", label="post-norm"),
        _model("decoder_only_visible", rng, "DecoderOnly", 2, 4, vocab=12, d=12, n_layers=2, n_heads=3,
               activation="swiglu", rope_base=500.0, weights=True, label="SwiGLU, rope_base=500, weights"),
        _cached("decoder_only_visible", rng, "DecoderOnly", 2, (4, 1, 2), d=12, n_heads=3, vocab=10,
                label="KV cache"),
    ]
    for index in range(5):
        found.append(_model(
            "decoder_only_hidden", rng, "DecoderOnly", int(rng.integers(1, 4)), int(rng.integers(1, 10)),
            vocab=int(rng.integers(5, 40)), d=(8, 16, 16)[index % 3], n_layers=int(rng.integers(1, 4)),
            n_heads=(2, 4, 4)[index % 3], n_kv=(None, None, 1)[index % 3], tie=index != 1,
            weights=index == 3, placement=("pre", "post")[index in (1, 4)], activation=("gelu", "swiglu")[index == 2],
            rope_base=(10000.0, None, 250.0)[index % 3], label=f"hidden {index}"))
    for index, chunks in enumerate([(1, 1, 1), (3, 4), (5, 1, 2)]):
        found.append(_cached("decoder_only_hidden", rng, "DecoderOnly", int(rng.integers(1, 3)), chunks, d=8,
                             n_heads=2, n_kv=(None, 1, None)[index], vocab=int(rng.integers(5, 20)),
                             label=f"hidden cache {index}"))

    found += [
        _model("encoder_decoder_visible", rng, "EncoderDecoder", 2, 4, m=5, padded=True, vocab=12, d=8, n_layers=1,
               n_heads=2, label="padded source"),
        _model("encoder_decoder_visible", rng, "EncoderDecoder", 3, 6, m=4, padded=True, vocab=9, d=12, n_layers=2,
               n_decoder_layers=1, n_heads=3, method="encode", label="encode"),
        _model("encoder_decoder_visible", rng, "EncoderDecoder", 2, 5, m=4, vocab=11, d=8, n_layers=2, n_heads=2,
               tie=False, placement="post", label="untied, post-norm, no padding"),
        _model("encoder_decoder_visible", rng, "EncoderDecoder", 2, 3, m=5, padded=True, vocab=9, d=8, n_layers=1,
               n_decoder_layers=2, n_heads=2, n_kv=1, norm="rms", activation="swiglu", rope_base=None, weights=True,
               label="RMSNorm, SwiGLU, one KV head, no positions, weights"),
        _cached("encoder_decoder_visible", rng, "EncoderDecoder", 2, (2, 1, 3), d=8, n_heads=2, vocab=10, m=5,
                label="KV cache"),
    ]
    for index in range(5):
        m, n = (int(v) for v in rng.integers(1, 9, size=2))
        found.append(_model(
            "encoder_decoder_hidden", rng, "EncoderDecoder", int(rng.integers(1, 4)), n, m=m, padded=index % 2 == 0,
            vocab=int(rng.integers(5, 25)), d=8, n_layers=int(rng.integers(1, 3)),
            n_decoder_layers=(None, 1, 2)[index % 3], n_heads=(1, 2, 4)[index % 3], tie=index != 2,
            weights=index == 1, placement=("pre", "post")[index in (1, 3)], norm=("layer", "rms")[index == 4],
            activation=("gelu", "swiglu")[index == 0], rope_base=(10000.0, None, 600.0)[index % 3],
            label=f"hidden {index}"))
    found.append(_cached("encoder_decoder_hidden", rng, "EncoderDecoder", 2, (2, 1, 3), d=8, n_heads=2, vocab=12,
                         m=5, label="hidden cache"))

    found += [
        _generate("generate_visible", rng, 2, 3, 6, use_cache=False, label="greedy, no cache"),
        _generate("generate_visible", rng, 2, 3, 6, use_cache=True, label="greedy, cache"),
        _generate("generate_visible", rng, 1, 4, 3, use_cache=True, one_d=True, label="1-d prompt"),
        _generate("generate_visible", rng, 1, 2, 8, use_cache=True, temperature=1.0, check="reproducible",
                  label="sampling with a seeded generator"),
        _generate("generate_visible", rng, 1, 2, 8, use_cache=True, temperature=1.0,
                  label="sampling: the reference's tokens from the same seeded generator"),
        _generate("generate_visible", rng, 2, 3, 0, use_cache=True, label="no new tokens, cache"),
        _generate("generate_visible", rng, 2, 3, 0, use_cache=False, label="no new tokens, no cache"),
        _generate("generate_visible", rng, 3, 2, 8, use_cache=False, temperature=0.5,
                  label="sampling at 0.5, no cache: the reference's tokens"),
        _generate("generate_visible", rng, 3, 2, 8, use_cache=True, temperature=2.5,
                  label="sampling at 2.5, cache: the reference's tokens"),
    ]
    for index in range(6):
        found.append(_generate(
            "generate_hidden", rng, int(rng.integers(1, 4)), int(rng.integers(1, 6)), int(rng.integers(0, 9)),
            use_cache=index % 2 == 0, vocab=int(rng.integers(5, 30)), n_layers=int(rng.integers(1, 3)),
            n_heads=(1, 2, 4)[index % 3], d=8, label=f"hidden {index}"))
    found += [
        _generate("generate_hidden", rng, 2, 1, 5, use_cache=True, kind="EncoderDecoder", m=4,
                  label="hidden encoder-decoder, cache"),
        _generate("generate_hidden", rng, 2, 1, 5, use_cache=False, kind="EncoderDecoder", m=6,
                  label="hidden encoder-decoder, no cache"),
        _generate("generate_hidden", rng, 3, 2, 6, use_cache=True, temperature=1e-6, label="hidden tiny temperature"),
        _generate("generate_hidden", rng, 2, 3, 7, use_cache=False, temperature=0.8, check="reproducible",
                  label="hidden sampling, no cache"),
        _generate("generate_hidden", rng, 3, 2, 9, use_cache=True, temperature=0.7, n_layers=1,
                  vocab=int(rng.integers(8, 30)), label="hidden sampling at 0.7: the reference's tokens"),
        _generate("generate_hidden", rng, 2, 1, 6, use_cache=False, temperature=2.0,
                  vocab=int(rng.integers(8, 30)), label="hidden sampling at 2.0, no cache: the reference's tokens"),
    ]
    return found
