"""Trusted cases of lesson 03 (causal_mask, padding_mask, document_mask, sliding_window_mask,
combine_masks, masked_attention)."""

from __future__ import annotations

import numpy as np

from attnlab.shortcuts import forbidden
from autograder.cases import Case, Inputs

# masked_attention is the learner's own: PyTorch's attention would do the masking for them. Its
# entry point, its kernels, and the safe softmax of its math path (all that a dispatch-level
# recorder sees of it on a CPU). The visible check polices the same table.
_NO_FUSED_ATTENTION = forbidden("masking.masked_attention")


def _causal(grade_id, n_q, n_k=None, label=""):
    args = [n_q] if n_k is None else [n_q, n_k]
    return Case(grade_id, "causal_mask", args, {}, {}, label=label)


def _padding(grade_id, rng, batch, max_len, dtype=np.int64, as_list=False, label=""):
    lengths = rng.integers(0, max_len + 1, size=batch)
    if lengths.size:
        lengths.flat[0] = max_len  # one full sequence
    if as_list:
        return Case(grade_id, "padding_mask", [lengths.tolist(), max_len], {}, {}, label=label)
    inputs = Inputs()
    return Case(grade_id, "padding_mask", [inputs.add(lengths.astype(dtype)), max_len], {}, inputs.arrays,
                label=label)


def _doc_ids(rng, n: int) -> np.ndarray:
    """Document ids of one packed row of length n: runs of random lengths, each run its own id."""
    cuts = np.sort(rng.choice(np.arange(1, n), size=int(rng.integers(0, min(4, n - 1) + 1)), replace=False)) if n > 1 else []
    run = np.zeros(n, dtype=np.int64)
    for cut in cuts:
        run[cut:] += 1
    ids = rng.permutation(20)[: run.max() + 1]  # arbitrary, not necessarily increasing
    return ids[run]


def _documents(grade_id, rng, batch, n, dtype=np.int64, label=""):
    inputs = Inputs()
    ids = np.stack([_doc_ids(rng, n) for _ in range(int(np.prod(batch, dtype=int)))]).reshape(*batch, n)
    return Case(grade_id, "document_mask", [inputs.add(ids.astype(dtype))], {}, inputs.arrays, label=label)


def _window(grade_id, n_q, n_k, window, label=""):
    return Case(grade_id, "sliding_window_mask", [n_q, n_k, window], {}, {}, label=label)


def _combine(grade_id, rng, shapes, recipe="call", label=""):
    """combine_masks over random boolean masks of ``shapes`` (None stays None). Recipes:
    "returns_none" (whether it returned None), "result_then_overwritten" (the result must be a new
    tensor: overwriting it must leave the inputs as they were)."""
    inputs = Inputs()
    args = [None if shape is None else inputs.add(rng.random(shape) < 0.6) for shape in shapes]
    return Case(grade_id, "combine_masks", args, {}, inputs.arrays, recipe=recipe, label=label)


def _mask(rng, kind, shape, n_q, n_k, empty_rows=0):
    """A boolean mask of ``shape`` (..., n_q, n_k): "causal" (bottom-right), "random" or "padding";
    then ``empty_rows`` rows of it (along the last batch entry) hidden entirely."""
    if kind == "causal":
        allowed = np.broadcast_to(np.tril(np.ones((n_q, n_k), dtype=bool), k=n_k - n_q), shape).copy()
    elif kind == "padding":
        lengths = rng.integers(1, n_k + 1, size=shape[:-2])
        allowed = np.broadcast_to((np.arange(n_k) < lengths[..., None])[..., None, :], shape).copy()
    else:
        allowed = rng.random(shape) < 0.5
    if empty_rows:
        rows = rng.choice(n_q, size=min(empty_rows, n_q), replace=False)
        allowed[..., rows, :] = False
    return allowed


def _attention(grade_id, rng, q_batch, k_batch, n_q, n_k, d, d_v, mask=None, mask_shape=None, empty_rows=0,
               dtype=np.float64, spread=1.0, grad=False, bfloat16=False, exact_zeros=False, label=""):
    """A call of masked_attention: its (out, weights); with ``grad``, the gradients of q, k, v; in
    bfloat16 through the recipe "masking_bfloat16"; with ``exact_zeros``, also where the weights are
    exactly 0 (masked weights must be 0, not merely within a tolerance of it)."""
    inputs = Inputs()
    travel = np.float32 if bfloat16 else dtype
    q = (spread * rng.standard_normal((*q_batch, n_q, d))).astype(travel)
    k = (spread * rng.standard_normal((*k_batch, n_k, d))).astype(travel)
    v = rng.standard_normal((*k_batch, n_k, d_v)).astype(travel)
    args = [inputs.add(q), inputs.add(k), inputs.add(v)]
    if mask is None:
        args.append(None)
    else:
        args.append(inputs.add(_mask(rng, mask, mask_shape or (n_q, n_k), n_q, n_k, empty_rows)))
    batch = np.broadcast_shapes(q_batch, k_batch, (mask_shape or (n_q, n_k))[:-2])
    recipe, options, cotangents, grad_args = "call", {}, [], []
    if grad:
        d_out = inputs.add(rng.standard_normal((*batch, n_q, d_v)).astype(travel))["array"]
        if bfloat16:
            recipe, options, cotangents = "masking_bfloat16", {"grad": True}, [d_out]
        else:
            d_weights = inputs.add(rng.standard_normal((*batch, n_q, n_k)).astype(travel))["array"]
            recipe, grad_args, cotangents = "grad", [0, 1, 2], [d_out, d_weights]
    elif bfloat16:
        recipe = "masking_bfloat16"
    elif exact_zeros:
        recipe, options = "exact_zeros", {"weights_at": 1}
    return Case(grade_id, "masked_attention", args, {}, inputs.arrays, recipe=recipe, options=options,
                grad_args=grad_args, cotangents=cotangents, label=label, forbidden=_NO_FUSED_ATTENTION)


def cases() -> list[Case]:
    rng = np.random.default_rng(20260303)
    found: list[Case] = [
        _causal("causal_mask_visible", 4, label="square, n_k omitted"),
        _causal("causal_mask_visible", 3, 6, label="n_q < n_k"),
        _causal("causal_mask_visible", 5, 2, label="n_q > n_k"),
    ]
    for index in range(6):
        n_q, n_k = (int(n) for n in rng.integers(1, 14, size=2))
        found.append(_causal("causal_mask_hidden", n_q, None if index == 0 else n_k, label=f"hidden {index}"))
    found.append(_causal("causal_mask_hidden", 1, 1, label="one token"))

    found += [
        _padding("padding_mask_visible", rng, (3,), 5, label="three sequences"),
        _padding("padding_mask_visible", rng, (4,), 6, as_list=True, label="lengths as a list"),
        _padding("padding_mask_hidden", rng, (2, 3), 7, label="lengths of shape (2, 3)"),
        _padding("padding_mask_hidden", rng, (5,), 11, dtype=np.int32, label="int32 lengths"),
        _padding("padding_mask_hidden", rng, (1,), 1, label="max_len 1"),
        Case("padding_mask_hidden", "padding_mask", [[0, 0, 3], 3], {}, {}, label="empty sequences"),
    ]

    found += [
        _documents("document_mask_visible", rng, (), 7, label="one packed row"),
        _documents("document_mask_visible", rng, (2,), 6, label="a batch of rows"),
        _documents("document_mask_hidden", rng, (3,), 13, label="hidden, batch"),
        _documents("document_mask_hidden", rng, (2, 2), 5, dtype=np.int32, label="int32, 2 batch dims"),
        _documents("document_mask_hidden", rng, (), 1, label="one token"),
        Case("document_mask_hidden", "document_mask", [[5, 5, 2, 2, 2, 9]], {}, {}, label="ids as a list"),
    ]

    found += [
        _window("sliding_window_mask_visible", 6, 6, 3, label="square, window 3"),
        _window("sliding_window_mask_visible", 3, 7, 2, label="n_q < n_k"),
    ]
    for index in range(5):
        n_q, n_k = (int(n) for n in rng.integers(1, 13, size=2))
        found.append(_window("sliding_window_mask_hidden", n_q, n_k, int(rng.integers(1, 9)), label=f"hidden {index}"))
    found += [
        _window("sliding_window_mask_hidden", 4, 4, 1, label="window 1"),
        _window("sliding_window_mask_hidden", 5, 3, 10, label="window wider than n_k, n_q > n_k"),
    ]

    found += [
        _combine("combine_masks_visible", rng, [(4, 4), (4, 4)], label="two masks"),
        _combine("combine_masks_visible", rng, [(5, 5), None, (2, 1, 5)], label="broadcast, with None"),
        _combine("combine_masks_hidden", rng, [(3, 1, 6), (1, 4, 6), (6,)], label="three masks broadcast"),
        _combine("combine_masks_hidden", rng, [(2, 3)], label="one mask"),
        _combine("combine_masks_hidden", rng, [None, (4, 4), None], label="one mask among None"),
        _combine("combine_masks_hidden", rng, [(2, 1, 1, 5), (3, 5, 1)], label="rank 4 and rank 3"),
    ]

    found += [
        _attention("masked_attention_visible", rng, (2,), (2,), 4, 6, 5, 3, mask="causal", label="causal, n_q < n_k"),
        _attention("masked_attention_visible", rng, (2,), (2,), 5, 5, 4, 2, mask="random", empty_rows=2,
                   label="fully masked rows"),
        _attention("masked_attention_visible", rng, (), (), 3, 4, 4, 4, label="mask None"),
        _attention("masked_attention_visible", rng, (2,), (2,), 5, 3, 4, 3, mask="causal", grad=True,
                   label="gradients, n_q > n_k"),
    ]
    for index in range(6):
        n_q, n_k = (int(n) for n in rng.integers(1, 11, size=2))
        q_batch = tuple(int(b) for b in rng.integers(1, 4, size=int(rng.integers(1, 3))))
        k_batch = (1,) * len(q_batch) if index == 2 else q_batch  # broadcasting
        kind = ("random", "causal", "padding")[index % 3]
        mask_shape = (*q_batch, n_q, n_k) if kind != "causal" else (n_q, n_k)
        found.append(_attention(
            "masked_attention_hidden", rng, q_batch, k_batch, n_q, n_k, int(rng.integers(1, 17)),
            int(rng.integers(1, 9)), mask=kind, mask_shape=mask_shape, empty_rows=index % 2,
            dtype=(np.float64, np.float32)[index % 2], spread=(1.0, 20.0)[index == 4], label=f"hidden {index}"))
    found += [
        _attention("masked_attention_hidden", rng, (2, 3), (2, 3), 4, 4, 8, 8, mask="causal",
                   mask_shape=(2, 1, 4, 4), empty_rows=1, label="mask with a head axis of 1"),
        _attention("masked_attention_hidden", rng, (2,), (2,), 7, 9, 8, 4, mask="random", mask_shape=(2, 7, 9),
                   empty_rows=2, dtype=np.float16, label="float16, fully masked rows"),
        _attention("masked_attention_hidden", rng, (2,), (2,), 6, 6, 8, 4, mask="causal", empty_rows=1,
                   bfloat16=True, label="bfloat16, fully masked row"),
        _attention("masked_attention_hidden", rng, (2,), (2,), 6, 4, 4, 3, mask="causal", grad=True,
                   label="gradients, rows with nothing to see"),
        _attention("masked_attention_hidden", rng, (3,), (3,), 5, 7, 6, 2, mask="padding", mask_shape=(3, 5, 7),
                   empty_rows=2, dtype=np.float32, grad=True, label="gradients, float32, padding"),
        _attention("masked_attention_hidden", rng, (2,), (2,), 5, 5, 4, 4, mask="random", empty_rows=1,
                   dtype=np.float16, grad=True, label="gradients, float16"),
        _attention("masked_attention_hidden", rng, (2,), (2,), 5, 5, 4, 4, mask="causal", empty_rows=1,
                   grad=True, bfloat16=True, label="gradients, bfloat16"),
    ]
    # What the visible checks assert besides values: None for no mask at all, a new tensor,
    # masked weights exactly 0.
    found += [
        _combine("combine_masks_hidden", rng, [None, None], recipe="returns_none", label="only None: None"),
        _combine("combine_masks_hidden", rng, [(3, 3)], recipe="result_then_overwritten",
                 label="one mask: a new tensor"),
        _combine("combine_masks_hidden", rng, [None, (4, 4), (4, 4)], recipe="result_then_overwritten",
                 label="two masks: a new tensor"),
        _attention("masked_attention_hidden", rng, (2,), (2,), 5, 6, 4, 3, mask="random", empty_rows=1,
                   exact_zeros=True, label="masked weights exactly 0"),
    ]
    return found
