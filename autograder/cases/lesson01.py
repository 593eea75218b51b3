"""Trusted cases of lesson 01 (additive_scores, additive_attention, AdditiveAttention,
AttentionDecoderStep)."""

from __future__ import annotations

import numpy as np

from autograder.cases import Case, Inputs


def _problem(rng, batch, n, d_q, d_k, d_v, d_a, dtype=np.float64):
    draw = lambda *shape: rng.standard_normal(shape).astype(dtype)  # noqa: E731
    return draw(*batch, d_q), draw(*batch, n, d_k), draw(*batch, n, d_v), draw(d_q, d_a), draw(d_k, d_a), draw(d_a)


def _mask(rng, batch, n):
    lengths = rng.integers(1, n + 1, size=batch or (1,))
    mask = np.arange(n) < lengths[..., None]
    return mask.reshape(*batch, n)


def _scores(grade_id, rng, batch, n, d_q, d_k, d_a, dtype=np.float64, label=""):
    inputs = Inputs()
    query, keys, _, W_q, W_k, v = _problem(rng, batch, n, d_q, d_k, 1, d_a, dtype)
    args = [inputs.add(a) for a in (query, keys, W_q, W_k, v)]
    return Case(grade_id, "additive_scores", args, {}, inputs.arrays, label=label)


def _attention(grade_id, rng, batch, n, d_q, d_k, d_v, d_a, masked, dtype=np.float64, label=""):
    inputs = Inputs()
    query, keys, values, W_q, W_k, v = _problem(rng, batch, n, d_q, d_k, d_v, d_a, dtype)
    args = [inputs.add(a) for a in (query, keys, values, W_q, W_k, v)]
    kwargs = {"mask": inputs.add(_mask(rng, batch, n))} if masked else {}
    return Case(grade_id, "additive_attention", args, kwargs, inputs.arrays, label=label)


def _module(grade_id, rng, batch, n, d_q, d_k, d_v, d_a, masked, label=""):
    inputs = Inputs()
    query, keys, values, W_q, W_k, v = _problem(rng, batch, n, d_q, d_k, d_v, d_a, np.float32)
    parameters = {"W_q": inputs.add(W_q)["array"], "W_k": inputs.add(W_k)["array"], "v": inputs.add(v)["array"]}
    kwargs = {"mask": inputs.add(_mask(rng, batch, n))} if masked else {}
    return Case(grade_id, "AdditiveAttention", [inputs.add(a) for a in (query, keys, values)], kwargs,
                inputs.arrays, recipe="module", init={"d_q": d_q, "d_k": d_k, "d_attn": d_a},
                parameters=parameters, label=label)


def _decoder(grade_id, rng, batch, n, vocab, d_e, d_h, d_enc, d_a, masked, label=""):
    inputs = Inputs()
    shapes = {
        "embedding.weight": (vocab, d_e), "attention.W_q": (d_h, d_a), "attention.W_k": (d_enc, d_a),
        "attention.v": (d_a,), "cell.weight_ih": (3 * d_h, d_e + d_enc), "cell.weight_hh": (3 * d_h, d_h),
        "cell.bias_ih": (3 * d_h,), "cell.bias_hh": (3 * d_h,), "output.weight": (vocab, d_h + d_enc),
        "output.bias": (vocab,),
    }
    parameters = {name: inputs.add((0.5 * rng.standard_normal(shape)).astype(np.float32))["array"]
                  for name, shape in shapes.items()}
    tokens = inputs.add(rng.integers(0, vocab, size=batch).astype(np.int64))
    hidden = inputs.add(rng.standard_normal((batch, d_h)).astype(np.float32))
    states = inputs.add(rng.standard_normal((batch, n, d_enc)).astype(np.float32))
    kwargs = {"mask": inputs.add(_mask(rng, (batch,), n))} if masked else {}
    return Case(grade_id, "AttentionDecoderStep", [tokens, hidden, states], kwargs, inputs.arrays,
                recipe="module", init={"vocab_size": vocab, "d_embed": d_e, "d_hidden": d_h, "d_enc": d_enc,
                                       "d_attn": d_a}, parameters=parameters, label=label)


def cases() -> list[Case]:
    rng = np.random.default_rng(20260101)
    found = [
        _scores("additive_scores_visible", rng, (), 5, 3, 4, 6, label="one query"),
        _scores("additive_scores_visible", rng, (2,), 4, 5, 3, 2, label="batch"),
        _scores("additive_scores_visible", rng, (3,), 6, 4, 4, 5, dtype=np.float32, label="float32 kept"),
    ]
    for index in range(5):
        batch = tuple(int(b) for b in rng.integers(1, 4, size=int(rng.integers(0, 3))))
        found.append(_scores("additive_scores_hidden", rng, batch, *(int(x) for x in rng.integers(1, 9, size=4)),
                             dtype=(np.float64, np.float32)[index % 2], label=f"hidden {index}"))
    found += [
        _attention("additive_attention_visible", rng, (2,), 5, 3, 4, 6, 5, False, label="plain"),
        _attention("additive_attention_visible", rng, (3,), 6, 4, 4, 2, 3, True, label="padding mask"),
    ]
    for index in range(6):
        batch = (int(rng.integers(1, 5)),)
        n, d_q, d_k, d_v, d_a = (int(x) for x in rng.integers(1, 9, size=5))
        found.append(_attention("additive_attention_hidden", rng, batch, n, d_q, d_k, d_v, d_a, masked=index % 2 == 0,
                                dtype=(np.float64, np.float32)[index % 3 == 2], label=f"hidden {index}"))
    found += [
        _module("additive_module_visible", rng, (2,), 5, 3, 4, 6, 5, False, label="forward"),
        _module("additive_module_hidden", rng, (3,), 7, 5, 2, 3, 4, True, label="hidden masked"),
        _module("additive_module_hidden", rng, (1,), 2, 1, 6, 2, 7, False, label="hidden small"),
        _decoder("decoder_step_visible", rng, 2, 5, 7, 4, 6, 5, 3, False, label="one step"),
        _decoder("decoder_step_hidden", rng, 3, 6, 9, 3, 5, 4, 6, True, label="hidden masked"),
        _decoder("decoder_step_hidden", rng, 1, 2, 4, 2, 3, 3, 2, False, label="hidden small"),
    ]
    return found
