"""Mutation rows of lesson 03 (masking.py); merged into tests/mutation_table.py when done."""

from tests.parity import Mutation as M

_CAUSAL = "return key_position <= query_position"
_PADDING = "return positions < lengths.unsqueeze(-1)"
_DOCUMENTS = "return doc_ids.unsqueeze(-1) == doc_ids.unsqueeze(-2)"
_WINDOW = "return (distance >= 0) & (distance < window)"
_SCORES = "scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])"
_FILL = "    scores = torch.where(mask, scores, float(\"-inf\"))\n"
_ZEROED = "    weights = torch.where(mask, _softmax(scores, dim=-1), 0.0)\n"
_MASKED = (_FILL
           + "    # A row with no visible key would be softmax(-inf, ..., -inf) = 0/0 = nan. Give it finite\n"
           "    # scores instead: its weights are set to 0 below, and where() sends no gradient through them.\n"
           "    scores = torch.where(sees_something, scores, 0.0)\n" + _ZEROED)
_RETURN = _ZEROED + "    return weights @ v, weights"

ROWS: list[M] = [
    # causal_mask
    M("03", "causal_mask", "top-left corner", "torch.arange(n_q).unsqueeze(1) + (n_k - n_q)  # where",
      "torch.arange(n_q).unsqueeze(1)  # where", r"aligned to the top-left corner.*bottom-right"),
    M("03", "causal_mask", "diagonal missing", _CAUSAL, "return key_position < query_position",
      r"the diagonal is missing"),
    M("03", "causal_mask", "masks the past", _CAUSAL, "return key_position > query_position",
      r"you masked the allowed keys"),
    M("03", "causal_mask", "upper triangle", _CAUSAL, "return key_position >= query_position",
      r"this is the transpose"),
    M("03", "causal_mask", "float mask", _CAUSAL, "return (key_position <= query_position).float()",
      r"dtype torch\.float32, expected torch\.bool"),
    # padding_mask
    M("03", "padding_mask", "one too many", _PADDING, "return positions <= lengths.unsqueeze(-1)",
      r"one position too many"),
    M("03", "padding_mask", "marks the padding", _PADDING, "return positions >= lengths.unsqueeze(-1)",
      r"marked the padding instead of the real tokens"),
    M("03", "padding_mask", "adds a query axis", _PADDING, "return (positions < lengths.unsqueeze(-1)).unsqueeze(-2)",
      r"return shape \(\.\.\., max_len\)"),
    M("03", "padding_mask", "padding on the left", _PADDING, "return positions >= max_len - lengths.unsqueeze(-1)",
      r"the real tokens come first"),
    # document_mask
    M("03", "document_mask", "masks its own document", _DOCUMENTS, "return doc_ids.unsqueeze(-1) != doc_ids.unsqueeze(-2)",
      r"masked each token's own document"),
    M("03", "document_mask", "causal too", _DOCUMENTS, "return (doc_ids.unsqueeze(-1) == doc_ids.unsqueeze(-2)).tril()",
      r"your mask is causal too"),
    M("03", "document_mask", "one row only", _DOCUMENTS, "return doc_ids[:, None] == doc_ids[None, :]",
      r"compare every pair of positions"),
    # sliding_window_mask
    M("03", "sliding_window_mask", "window + 1 keys", _WINDOW, "return (distance >= 0) & (distance <= window)",
      r"each query sees \d+ keys"),
    M("03", "sliding_window_mask", "no lower bound", _WINDOW, "return distance < window",
      r"keys after the query are visible.*>= 0"),
    M("03", "sliding_window_mask", "symmetric window", _WINDOW, "return distance.abs() < window",
      r"keys after the query are visible.*looks only back"),
    M("03", "sliding_window_mask", "window missing", _WINDOW, "return distance >= 0", r"the window is missing"),
    M("03", "sliding_window_mask", "own position missing", _WINDOW, "return (distance > 0) & (distance <= window)",
      r"own position is missing"),
    M("03", "sliding_window_mask", "top-left corner",
      "torch.arange(n_q).unsqueeze(1) + (n_k - n_q) - torch.arange(n_k)",
      "torch.arange(n_q).unsqueeze(1) - torch.arange(n_k)", r"aligned to the top-left corner"),
    # combine_masks
    M("03", "combine_masks", "OR", "combined = torch.logical_and(combined, mask)",
      "combined = torch.logical_or(combined, mask)", r"you combined with OR"),
    M("03", "combine_masks", "returns the mask itself", "combined = present[0].clone()", "combined = present[0]",
      r"returned the mask itself"),
    M("03", "combine_masks", "AND in place",
      "combined = present[0].clone()\n    for mask in present[1:]:\n        combined = torch.logical_and(combined, mask)",
      "combined = present[0]\n    for mask in present[1:]:\n        combined &= mask", r"changed its input in place"),
    M("03", "combine_masks", "no None for no mask", "    if not present:\n        return None\n", "",
      r"combine_masks\(None, None\) raised.*return None"),
    M("03", "combine_masks", "first two masks only", "    for mask in present[1:]:\n        combined = torch.logical_and",
      "    for mask in present[1:2]:\n        combined = torch.logical_and", r"combined only the first two masks"),
    # masked_attention
    M("03", "masked_attention", "softmax of rows with nothing to see",
      "    scores = torch.where(sees_something, scores, 0.0)\n" + _ZEROED, "    weights = _softmax(scores, dim=-1)\n",
      r"0/0 = nan"),
    M("03", "masked_attention", "additive -inf, then nan_to_num", _MASKED,
      "    scores = scores + torch.zeros_like(scores).masked_fill(~mask, float(\"-inf\"))\n"
      "    weights = _softmax(scores, dim=-1).nan_to_num(0.0)\n",
      r"gradient.*contains nan.*torch\.where or masked_fill"),
    M("03", "masked_attention", "large negative fill, rows not zeroed", _MASKED,
      "    weights = _softmax(torch.where(mask, scores, -1e4), dim=-1)\n", r"equal weights 1/n_k"),
    M("03", "masked_attention", "rows not zeroed", _ZEROED, "    weights = _softmax(scores, dim=-1)\n",
      r"equal weights 1/n_k.*set the weights of such rows to 0"),
    # issue 25: "weights × mask after softmax" is told that its rows no longer sum to 1
    M("03", "masked_attention", "weights times mask after softmax", _FILL, "",
      r"do not sum to 1.*the softmax must see the mask"),
    M("03", "masked_attention", "fill -100, then zeroed", _FILL, _FILL.replace("float(\"-inf\")", "-100.0"),
      r"do not sum to 1.*set the scores to -inf"),
    M("03", "masked_attention", "fill -100", _MASKED, "    weights = _softmax(torch.where(mask, scores, -100.0), dim=-1)\n",
      r"not exactly 0.*fill -inf, not a large negative number"),
    M("03", "masked_attention", "masked_fill -1e9", _FILL, "    scores = scores.masked_fill(~mask, -1e9)\n",
      r"does not fit in float16"),
    M("03", "masked_attention", "no scale", _SCORES, "scores = q @ k.transpose(-2, -1)",
      r"did not divide the scores by sqrt\(d\)"),
    M("03", "masked_attention", "sqrt(d_v)", _SCORES, _SCORES.replace("q.shape[-1]", "v.shape[-1]"),
      r"sqrt\(d_v\) \(the value size\)"),
    M("03", "masked_attention", "PyTorch's attention", _RETURN,
      _ZEROED + "    out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)\n"
      "    return out * sees_something, weights", r"calls F\.scaled_dot_product_attention"),
    M("03", "masked_attention", "(weights, out)", _RETURN, _ZEROED + "    return weights, weights @ v",
      r"\(weights, out\) instead of \(out, weights\)"),
    M("03", "masked_attention", "float64 always", _RETURN,
      _ZEROED.replace("scores, dim", "scores.double(), dim") + "    return weights @ v.double(), weights",
      r"dtype torch\.float64, expected torch\.float32"),
    M("03", "masked_attention", "mask=None not handled",
      "    if mask is None:\n        weights = _softmax(scores, dim=-1)\n        return weights @ v, weights\n", "",
      r"mask=None means no mask at all"),
]
