"""Trusted cases of lesson 01 (additive_scores, additive_attention, AdditiveAttention,
AttentionDecoderStep).

Besides values on random shapes, every property the notebook's visible checks show has a case
here, so that a ✗ there costs points here: size-1 dimensions, keys shared by a batch of queries,
scattered and broadcast masks, scores in the thousands, weights exactly 0 at padding (not merely
tiny), inputs (the mask included) left unchanged, gradients, how a module draws its parameters,
float64 modules and several decoder steps in a row."""

from __future__ import annotations

import numpy as np

from autograder.cases import Case, Inputs


def _problem(rng, batch, n, d_q, d_k, d_v, d_a, dtype=np.float64, key_batch=None, v_scale=1.0):
    """query (*batch, d_q), keys (*key_batch, n, d_k), values (*key_batch, n, d_v), W_q, W_k, v;
    key_batch defaults to batch; v_scale makes scores large."""
    draw = lambda *shape: rng.standard_normal(shape).astype(dtype)  # noqa: E731
    key_batch = batch if key_batch is None else key_batch
    return (draw(*batch, d_q), draw(*key_batch, n, d_k), draw(*key_batch, n, d_v), draw(d_q, d_a),
            draw(d_k, d_a), (v_scale * draw(d_a)).astype(dtype))


def _mask(rng, batch, n, kind="padding"):
    """A boolean mask (True: may attend) of shape (*batch, n): "padding" (a prefix of each row),
    "scattered" (any pattern), "shared" (one scattered row (n,) for the whole batch); every row
    allows at least one key."""
    if kind == "shared":
        return _mask(rng, (), n, "scattered")
    if kind == "scattered":
        mask = rng.random((*batch, n)) < 0.5
        rows = mask.reshape(-1, n)
        rows[np.arange(len(rows)), rng.integers(0, n, size=len(rows))] = True
        return rows.reshape(*batch, n)
    lengths = rng.integers(1, n + 1, size=batch or (1,))
    mask = np.arange(n) < lengths[..., None]
    return mask.reshape(*batch, n)


def _scores(grade_id, rng, batch, n, d_q, d_k, d_a, dtype=np.float64, key_batch=None, label=""):
    inputs = Inputs()
    query, keys, _, W_q, W_k, v = _problem(rng, batch, n, d_q, d_k, 1, d_a, dtype, key_batch)
    args = [inputs.add(a) for a in (query, keys, W_q, W_k, v)]
    return Case(grade_id, "additive_scores", args, {}, inputs.arrays, label=label)


def _attention(grade_id, rng, batch, n, d_q, d_k, d_v, d_a, masked, dtype=np.float64, mask="padding",
               v_scale=1.0, recipe="call", positional=False, label=""):
    """additive_attention on a random problem; ``masked``: with a mask of kind ``mask`` (see
    ``_mask``), as the keyword ``mask=`` or, ``positional``, as the 7th argument (then the grader
    also sees whether it was changed in place). ``recipe="exact_zeros"``: the weights must be
    exactly 0 where the mask is False."""
    inputs = Inputs()
    query, keys, values, W_q, W_k, v = _problem(rng, batch, n, d_q, d_k, d_v, d_a, dtype, v_scale=v_scale)
    args = [inputs.add(a) for a in (query, keys, values, W_q, W_k, v)]
    kwargs = {}
    if masked:
        allowed = inputs.add(_mask(rng, batch, n, mask))
        args, kwargs = (args + [allowed], {}) if positional else (args, {"mask": allowed})
    options = {"weights_at": 1} if recipe == "exact_zeros" else {}
    return Case(grade_id, "additive_attention", args, kwargs, inputs.arrays, recipe=recipe, options=options,
                label=label)


def _attention_gradients(grade_id, rng, batch, n, d_q, d_k, d_v, d_a, label=""):
    """Gradients of sum(context * cotangent) for query, keys, values, W_q, W_k and v, padding masked."""
    inputs = Inputs()
    arrays = _problem(rng, batch, n, d_q, d_k, d_v, d_a)
    args = [inputs.add(a) for a in arrays] + [inputs.add(_mask(rng, batch, n))]
    cotangent = inputs.add(rng.standard_normal((*batch, d_v)))["array"]
    return Case(grade_id, "additive_attention", args, {}, inputs.arrays, recipe="grad",
                grad_args=[0, 1, 2, 3, 4, 5], cotangents=[cotangent, None], label=label)


def _module(grade_id, rng, batch, n, d_q, d_k, d_v, d_a, masked, recipe="module", dtype=np.float32, label=""):
    """AdditiveAttention(d_q, d_k, d_a) with parameters set, on a random problem, the mask (if
    ``masked``) passed positionally. recipes: "module"; "exact_zeros" (weights exactly 0 where
    masked); "module_float64" (the module after .double(), dtype float64); "module_gradients"
    (the context and the gradients of W_q, W_k and v)."""
    inputs = Inputs()
    query, keys, values, W_q, W_k, v = _problem(rng, batch, n, d_q, d_k, d_v, d_a, np.float32)
    parameters = {"W_q": inputs.add(W_q)["array"], "W_k": inputs.add(W_k)["array"], "v": inputs.add(v)["array"]}
    args = [inputs.add(a.astype(dtype)) for a in (query, keys, values)]
    if masked:
        args.append(inputs.add(_mask(rng, batch, n)))
    options, cotangents = {}, []
    if recipe == "exact_zeros":
        options = {"weights_at": 1}
    if recipe == "module_gradients":
        cotangents = [inputs.add(rng.standard_normal((*batch, d_v)).astype(dtype))["array"]]
    return Case(grade_id, "AdditiveAttention", args, {}, inputs.arrays, recipe=recipe,
                init={"d_q": d_q, "d_k": d_k, "d_attn": d_a}, parameters=parameters, options=options,
                cotangents=cotangents, label=label)


def _module_initialisation(grade_id, d_q, d_k, d_a, seeds, label=""):
    """How AdditiveAttention(d_q, d_k, d_a) draws W_q, W_k and v (see the recipe)."""
    bounds = {"W_q": 1 / np.sqrt(d_q), "W_k": 1 / np.sqrt(d_k), "v": 1 / np.sqrt(d_a)}
    return Case(grade_id, "AdditiveAttention", recipe="module_initialisation",
                init={"d_q": d_q, "d_k": d_k, "d_attn": d_a},
                options={"seeds": list(seeds), "bounds": {k: float(b) for k, b in bounds.items()}}, label=label)


def _decoder(grade_id, rng, batch, n, vocab, d_e, d_h, d_enc, d_a, masked, recipe="module", steps=1,
             dtype=np.float32, label=""):
    """AttentionDecoderStep with parameters set, one step (the mask, if ``masked``, passed
    positionally). recipes: "module"; "exact_zeros"; "module_float64"; "module_gradients" (logits
    and the gradient of every parameter); "decoder_steps" (``steps`` steps in a row, each reading
    the state the one before returned)."""
    inputs = Inputs()
    shapes = {
        "embedding.weight": (vocab, d_e), "attention.W_q": (d_h, d_a), "attention.W_k": (d_enc, d_a),
        "attention.v": (d_a,), "cell.weight_ih": (3 * d_h, d_e + d_enc), "cell.weight_hh": (3 * d_h, d_h),
        "cell.bias_ih": (3 * d_h,), "cell.bias_hh": (3 * d_h,), "output.weight": (vocab, d_h + d_enc),
        "output.bias": (vocab,),
    }
    parameters = {name: inputs.add((0.5 * rng.standard_normal(shape)).astype(np.float32))["array"]
                  for name, shape in shapes.items()}
    token_shape = (steps, batch) if recipe == "decoder_steps" else batch
    tokens = inputs.add(rng.integers(0, vocab, size=token_shape).astype(np.int64))
    hidden = inputs.add(rng.standard_normal((batch, d_h)).astype(dtype))
    states = inputs.add(rng.standard_normal((batch, n, d_enc)).astype(dtype))
    args = [tokens, hidden, states]
    if masked:
        args.append(inputs.add(_mask(rng, (batch,), n)))
    options, cotangents = {}, []
    if recipe == "exact_zeros":
        options = {"weights_at": 2}
    if recipe == "module_gradients":
        cotangents = [inputs.add(rng.standard_normal((batch, vocab)).astype(dtype))["array"]]
    return Case(grade_id, "AttentionDecoderStep", args, {}, inputs.arrays, recipe=recipe,
                init={"vocab_size": vocab, "d_embed": d_e, "d_hidden": d_h, "d_enc": d_enc, "d_attn": d_a},
                parameters=parameters, options=options, cotangents=cotangents, label=label)


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
    return found + _properties(np.random.default_rng(20260111))


def _properties(rng) -> list[Case]:
    """The cases of every property the visible checks show (a stream of draws of their own, so the
    cases above keep theirs)."""
    scores, attention = "additive_scores", "additive_attention"
    module, decoder = "additive_module", "decoder_step"
    return [
        _scores(f"{scores}_visible", rng, (4,), 6, 5, 3, 2, key_batch=(), label="keys shared by queries"),
        _scores(f"{scores}_hidden", rng, (2, 3), 5, 4, 2, 3, np.float32, key_batch=(), label="shared keys, (2, 3)"),
        _scores(f"{scores}_hidden", rng, (1,), 1, 3, 2, 1, label="size 1: batch, n, d_attn"),
        _scores(f"{scores}_hidden", rng, (1, 2), 3, 1, 1, 4, np.float32, label="size 1: d_q, d_k"),

        _attention(f"{attention}_visible", rng, (3,), 5, 4, 3, 5, 3, True, mask="scattered", label="scattered mask"),
        _attention(f"{attention}_visible", rng, (3,), 5, 4, 3, 5, 3, True, mask="shared", label="mask (n,)"),
        _attention(f"{attention}_visible", rng, (2, 3), 5, 4, 6, 3, 2, True, label="batch (2, 3)"),
        _attention(f"{attention}_visible", rng, (3,), 6, 4, 4, 5, 2, True, v_scale=1000.0,
                   label="scores in the thousands"),
        _attention(f"{attention}_visible", rng, (2,), 5, 4, 3, 6, 2, True, np.float32, label="float32 masked"),
        _attention(f"{attention}_visible", rng, (4,), 6, 5, 4, 3, 2, True, recipe="exact_zeros",
                   positional=True, label="exactly 0 at padding"),
        _attention(f"{attention}_visible", rng, (3,), 5, 4, 3, 5, 3, True, np.float32, mask="scattered",
                   recipe="exact_zeros", positional=True, label="exactly 0, float32"),
        _attention_gradients(f"{attention}_visible", rng, (3,), 5, 4, 3, 6, 2, label="gradients"),
        _attention(f"{attention}_hidden", rng, (1,), 1, 3, 2, 1, 2, True, positional=True,
                   label="size 1: batch, n, d_v"),
        _attention(f"{attention}_hidden", rng, (1,), 4, 2, 1, 1, 1, True, np.float32, recipe="exact_zeros",
                   positional=True, label="size 1: d_k, d_v, d_attn"),
        _attention(f"{attention}_hidden", rng, (2, 1), 3, 1, 2, 2, 3, False, label="size 1: (2, 1), d_q"),

        _module(f"{module}_visible", rng, (2, 3), 5, 5, 4, 3, 6, False, label="batch (2, 3), no mask"),
        _module(f"{module}_visible", rng, (4,), 6, 5, 4, 3, 6, True, recipe="exact_zeros",
                label="exactly 0 at padding"),
        _module(f"{module}_visible", rng, (3,), 5, 5, 4, 3, 6, True, recipe="module_gradients", label="gradients"),
        _module(f"{module}_visible", rng, (2,), 4, 5, 4, 3, 6, False, recipe="module_float64", dtype=np.float64,
                label="module.double()"),
        _module_initialisation(f"{module}_visible", 5, 4, 6, (7, 7, 8), label="initialisation"),
        _module_initialisation(f"{module}_hidden", 1, 6, 7, (3, 3, 4), label="initialisation, d_q = 1"),
        _module(f"{module}_hidden", rng, (1,), 1, 1, 2, 1, 3, True, label="size 1: batch, n, d_q, d_v"),

        _decoder(f"{decoder}_visible", rng, 4, 7, 9, 3, 5, 6, 4, True, recipe="exact_zeros",
                 label="exactly 0 at padding"),
        _decoder(f"{decoder}_visible", rng, 4, 7, 9, 3, 5, 6, 4, True, recipe="module_float64", dtype=np.float64,
                 label="float64 module"),
        _decoder(f"{decoder}_visible", rng, 4, 7, 9, 3, 5, 6, 4, True, recipe="module_gradients", label="gradients"),
        _decoder(f"{decoder}_visible", rng, 4, 7, 9, 3, 5, 6, 4, True, recipe="decoder_steps", steps=3,
                 label="three steps"),
        _decoder(f"{decoder}_hidden", rng, 1, 3, 5, 2, 3, 4, 2, True, label="size 1: batch"),
        _decoder(f"{decoder}_hidden", rng, 1, 1, 4, 1, 2, 1, 1, True, recipe="decoder_steps", steps=2,
                 label="size 1: batch, n, d_embed, d_enc, d_attn"),
    ]
