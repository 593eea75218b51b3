"""The mutation table: classic mistakes, one per row, written into the reference of an exercise.

``tests/test_mutation_parity.py`` runs every row through the lesson's visible checks and through
its trusted cases (``tests/parity.py``) and asserts that they agree cell by cell (a visible ✓
exactly when every trusted case of that cell passes), that the mistake costs points, and that the
visible message matches ``says`` (it names the mistake, not another one).

A row: ``M(lesson, cell, name, old, new, says)``; ``old`` is text that occurs exactly once in
``solutions/attnlab/<module>.py``, ``new`` replaces it. Rows are grouped by lesson, then by cell
(the grade-id prefix: cell ``softmax`` is graded by ``softmax_visible`` and ``softmax_hidden``).
Text that several rows of a lesson replace is named once, ``_Lnn_NAME``, at the top of its section.
"""

from __future__ import annotations

from tests.parity import Mutation as M


# ------------------------------------------------------------------------------------------------
# Mutation rows of lesson 01 (additive.py)
# ------------------------------------------------------------------------------------------------
_L01_SCORES = "hidden = torch.tanh((query @ W_q).unsqueeze(-2) + keys @ W_k)  # (..., n, d_attn)\n    return hidden @ v"
_L01_MASKED = "usable = scores if mask is None else scores.masked_fill(~mask, -math.inf)"
_L01_SOFTMAX = "weights = torch.softmax(usable, dim=-1)"
_L01_CONTEXT = "context = (weights.unsqueeze(-2) @ values).squeeze(-2)"
_L01_RETURN = "return context, weights  #"
_L01_PARAMETERS = ("        self.W_q = nn.Parameter(torch.empty(d_q, d_attn))\n"
               "        self.W_k = nn.Parameter(torch.empty(d_k, d_attn))\n"
               "        self.v = nn.Parameter(torch.empty(d_attn))\n"
               "        ### END SOLUTION\n"
               "        self.reset_parameters()\n")
_L01_FORWARD = "return additive_attention(query, keys, values, self.W_q, self.W_k, self.v, mask)"
_L01_ATTEND = "context, weights = self.attention(hidden, encoder_states, encoder_states, mask)"
_L01_CELL = "cell_input = torch.cat([self.embedding(prev_tokens), context], dim=-1)"
_L01_OUTPUT = "logits = self.output(torch.cat([new_hidden, context], dim=-1))"
_L01_STEP_RETURN = "return logits, new_hidden, weights  #"

_LESSON01: list[M] = [
    # ---------------------------------------------------------------- additive_scores
    M("01", "additive_scores", "no tanh", _L01_SCORES,
      "hidden = (query @ W_q).unsqueeze(-2) + keys @ W_k\n    return hidden @ v",
      r"you left out the tanh"),
    M("01", "additive_scores", "tanh after v", _L01_SCORES,
      "hidden = (query @ W_q).unsqueeze(-2) + keys @ W_k\n    return torch.tanh(hidden @ v)",
      r"you applied tanh after multiplying by v"),
    M("01", "additive_scores", "sigmoid instead of tanh", _L01_SCORES,
      "hidden = torch.sigmoid((query @ W_q).unsqueeze(-2) + keys @ W_k)\n    return hidden @ v",
      r"sigmoid or another nonlinearity"),
    M("01", "additive_scores", "swapped matrices", _L01_SCORES,
      "hidden = torch.tanh((query @ W_k).unsqueeze(-2) + keys @ W_q)\n    return hidden @ v",
      r"you swapped the matrices"),
    M("01", "additive_scores", "sum instead of v", _L01_SCORES,
      "hidden = torch.tanh((query @ W_q).unsqueeze(-2) + keys @ W_k)\n    return hidden.sum(-1)",
      r"you summed over the attention axis"),
    M("01", "additive_scores", "attention axis not reduced", _L01_SCORES,
      "hidden = torch.tanh((query @ W_q).unsqueeze(-2) + keys @ W_k)\n    return hidden",
      r"you did not reduce the attention axis"),
    M("01", "additive_scores", "squeeze without an axis", _L01_SCORES,
      "hidden = torch.tanh((query @ W_q).unsqueeze(-2) + keys @ W_k)\n    return (hidden @ v.unsqueeze(-1)).squeeze()",
      r"size-1 dimension went missing.*squeeze\(\) without an axis"),
    M("01", "additive_scores", "query unsqueezed in place", _L01_SCORES,
      "hidden = torch.tanh(query.unsqueeze_(-2) @ W_q + keys @ W_k)\n    return hidden @ v",
      r"changed its input in place: query"),
    M("01", "additive_scores", "float64 result", _L01_SCORES,
      "hidden = torch.tanh((query @ W_q).unsqueeze(-2) + keys @ W_k)\n    return (hidden @ v).double()",
      r"scores of float32 inputs has dtype torch\.float64"),
    M("01", "additive_scores", "one batch axis only (einsum)", _L01_SCORES,
      "hidden = torch.tanh(torch.einsum('bd,da->ba', query, W_q)[:, None] + torch.einsum('bnd,da->bna', keys, W_k))\n"
      "    return hidden @ v",
      r"case 'batch dimensions \(2, 3\)'"),
    M("01", "additive_scores", "query reshaped to the keys' batch", _L01_SCORES,
      "hidden = torch.tanh((query @ W_q).reshape(*keys.shape[:-2], 1, W_q.shape[1]) + keys @ W_k)\n"
      "    return hidden @ v",
      r"case 'several queries scoring shared keys'"),
    M("01", "additive_scores", "key axis inserted at 1", _L01_SCORES,
      "hidden = torch.tanh((query @ W_q).unsqueeze(1) + keys @ W_k)\n    return hidden @ v",
      r"case 'batch dimensions \(2, 3\)'"),

    # ---------------------------------------------------------------- additive_attention
    M("01", "additive_attention", "mask ignored", _L01_MASKED, "usable = scores",
      r"the mask is ignored"),
    M("01", "additive_attention", "mask after the softmax", f"{_L01_MASKED}\n    {_L01_SOFTMAX}",
      "weights = torch.softmax(scores, dim=-1) * (1 if mask is None else mask)",
      r"you zeroed the padding weights after the softmax"),
    M("01", "additive_attention", "inverted mask", "masked_fill(~mask, -math.inf)", "masked_fill(mask, -math.inf)",
      r"True means 'may be used'"),
    M("01", "additive_attention", "finite fill value", "masked_fill(~mask, -math.inf)", "masked_fill(~mask, -50.0)",
      r"large negative number.*Fill them with -inf"),
    M("01", "additive_attention", "softmax over the batch axis", _L01_SOFTMAX, "weights = torch.softmax(usable, dim=0)",
      r"your softmax runs over the batch axis"),
    M("01", "additive_attention", "scores returned as weights", _L01_RETURN, "return context, scores  #",
      r"you returned the scores, not the weights"),
    M("01", "additive_attention", "keys averaged instead of values", _L01_CONTEXT,
      "context = (weights.unsqueeze(-2) @ keys).squeeze(-2)",
      r"the context averages the values"),
    M("01", "additive_attention", "(weights, context) returned", _L01_RETURN, "return weights, context  #",
      r"did you return \(weights, context\) instead of \(context, weights\)"),
    M("01", "additive_attention", "squeeze without an axis", _L01_CONTEXT,
      "context = (weights.unsqueeze(-2) @ values).squeeze()",
      r"size-1 dimension went missing.*squeeze\(\) without an axis"),
    M("01", "additive_attention", "exp without the max shift", _L01_SOFTMAX,
      "weights = usable.exp() / usable.exp().sum(dim=-1, keepdim=True)",
      r"exp overflows"),
    M("01", "additive_attention", "weights detached", _L01_CONTEXT,
      "context = (weights.detach().unsqueeze(-2) @ values).squeeze(-2)",
      r"W_q got no gradient from a loss on the context"),
    M("01", "additive_attention", "mask read as lengths", "masked_fill(~mask, -math.inf)",
      "masked_fill(torch.arange(mask.shape[-1]) >= mask.sum(-1, keepdim=True), -math.inf)",
      r"case 'a scattered boolean mask'.*you read the mask as a padding mask"),
    M("01", "additive_attention", "boolean indexing needs the full mask", _L01_MASKED,
      "usable = scores.clone()\n    if mask is not None:\n        usable[~mask] = -math.inf",
      r"case 'one mask broadcast over the batch'"),
    M("01", "additive_attention", "mask inverted in place", "masked_fill(~mask, -math.inf)",
      "masked_fill(mask.logical_not_(), -math.inf)",
      r"changed its input in place: mask"),

    # ---------------------------------------------------------------- AdditiveAttention
    M("01", "additive_module", "transposed parameters", "self.W_q = nn.Parameter(torch.empty(d_q, d_attn))",
      "self.W_q = nn.Parameter(torch.empty(d_attn, d_q))",
      r"the transpose of an nn\.Linear weight"),
    M("01", "additive_module", "plain tensor, not a parameter", "self.W_q = nn.Parameter(torch.empty(d_q, d_attn))",
      "self.W_q = torch.empty(d_q, d_attn)",
      r"has no parameter named W_q.*as nn\.Parameter attributes"),
    M("01", "additive_module", "parameter without gradient", "self.v = nn.Parameter(torch.empty(d_attn))",
      "self.v = nn.Parameter(torch.empty(d_attn), requires_grad=False)",
      r"parameter v does not require a gradient"),
    M("01", "additive_module", "zeros instead of reset_parameters", _L01_PARAMETERS,
      _L01_PARAMETERS.replace("torch.empty", "torch.zeros").replace("        self.reset_parameters()\n", ""),
      r"not initialised by reset_parameters"),
    M("01", "additive_module", "randn instead of reset_parameters", _L01_PARAMETERS,
      _L01_PARAMETERS.replace("torch.empty", "torch.randn").replace("        self.reset_parameters()\n", ""),
      r"not initialised by reset_parameters.*uniformly in ±1/sqrt"),
    M("01", "additive_module", "a generator of its own", "parameter.uniform_(-bound, bound)",
      "parameter.uniform_(-bound, bound, generator=torch.Generator().manual_seed(0))",
      r"modules built with different seeds have identical parameters"),
    M("01", "additive_module", "an unused extra parameter", "        self.v = nn.Parameter(torch.empty(d_attn))\n",
      "        self.v = nn.Parameter(torch.empty(d_attn))\n        self.bias = nn.Parameter(torch.zeros(d_attn))\n",
      r"has parameters bias besides W_q, W_k and v"),
    M("01", "additive_module", "mask not passed on", _L01_FORWARD,
      "return additive_attention(query, keys, values, self.W_q, self.W_k, self.v)",
      r"pass the mask on to additive_attention"),
    M("01", "additive_module", "W_q and W_k swapped in forward", _L01_FORWARD,
      "return additive_attention(query, keys, values, self.W_k, self.W_q, self.v, mask)",
      r"W_q must be \(d_q, d_attn\)"),
    M("01", "additive_module", "float32 forced in forward", _L01_FORWARD,
      "return additive_attention(query.float(), keys.float(), values.float(), self.W_q.float(), "
      "self.W_k.float(), self.v.float(), mask)",
      r"context of the float64 module has dtype torch\.float32"),

    # ---------------------------------------------------------------- AttentionDecoderStep
    M("01", "decoder_step", "cell input swapped", _L01_CELL,
      "cell_input = torch.cat([context, self.embedding(prev_tokens)], dim=-1)",
      r"the cell's input is \(embedding, context\), in that order"),
    M("01", "decoder_step", "output input swapped", _L01_OUTPUT,
      "logits = self.output(torch.cat([context, new_hidden], dim=-1))",
      r"the output layer reads \(new_hidden, context\), in that order"),
    M("01", "decoder_step", "output from the old state", _L01_OUTPUT,
      "logits = self.output(torch.cat([hidden, context], dim=-1))",
      r"the output layer must read the new state"),
    M("01", "decoder_step", "mask not passed on", _L01_ATTEND,
      "context, weights = self.attention(hidden, encoder_states, encoder_states)",
      r"pass the mask on to self\.attention"),
    M("01", "decoder_step", "old state returned", _L01_STEP_RETURN, "return logits, hidden, weights  #",
      r"your new_hidden is the hidden state you were given"),
    M("01", "decoder_step", "wrong return order", _L01_STEP_RETURN, "return weights, new_hidden, logits  #",
      r"in the order \(logits, new_hidden, weights\)"),
    M("01", "decoder_step", "context detached", _L01_ATTEND, f"{_L01_ATTEND}\n        context = context.detach()",
      r"parameter attention\.W_q got no gradient"),
    M("01", "decoder_step", "embedding squeezed", _L01_CELL,
      "cell_input = torch.cat([self.embedding(prev_tokens.unsqueeze(1)).squeeze(), context], dim=-1)",
      r"case 'size-1 dimensions: a batch of one"),
    M("01", "decoder_step", "float32 forced in the cell", "new_hidden = self.cell(cell_input, hidden)",
      "new_hidden = self.cell(cell_input.float(), hidden.float())",
      r"case 'float64 module and inputs'"),
]


# ------------------------------------------------------------------------------------------------
# Mutation rows of lesson 02 (attention.py)
# ------------------------------------------------------------------------------------------------
_L02_SOFTMAX_BODY = ("    shifted = x - x.amax(dim=dim, keepdim=True)\n    exps = torch.exp(shifted)\n"
                 "    return exps / exps.sum(dim=dim, keepdim=True)")
_L02_NUMPY_SOFTMAX = ("    scores = scores - scores.max(axis=-1, keepdims=True)\n    weights = np.exp(scores)\n"
                  "    weights = weights / weights.sum(axis=-1, keepdims=True)")
_L02_SDPA_MASK = "        scores = scores.masked_fill(~mask, float(\"-inf\"))\n"

_LESSON02: list[M] = [
    # softmax
    M("02", "softmax", "PyTorch's softmax", _L02_SOFTMAX_BODY, "    return torch.softmax(x, dim)",
      r"calls softmax \(torch\.softmax"),
    M("02", "softmax", "no max shift",
      "    shifted = x - x.amax(dim=dim, keepdim=True)",
      "    shifted = x",
      r"subtract the maximum"),
    M("02", "softmax", "fixed last dim", _L02_SOFTMAX_BODY, _L02_SOFTMAX_BODY.replace("dim=dim", "dim=-1"),
      r"wrong dimension"),
    M("02", "softmax", "maximum of the whole tensor", "x - x.amax(dim=dim, keepdim=True)", "x - x.max()",
      r"maximum of each row along dim.*not the maximum of the whole tensor"),
    M("02", "softmax", "shifts x in place", "shifted = x - x.amax(dim=dim, keepdim=True)",
      "shifted = x.sub_(x.amax(dim=dim, keepdim=True))", r"changed its input in place: x"),
    M("02", "softmax", "float64 always", "exps = torch.exp(shifted)", "exps = torch.exp(shifted.double())",
      r"dtype torch\.float64, expected torch\.float32"),
    M("02", "softmax", "divided by the largest exp", "return exps / exps.sum(dim=dim, keepdim=True)",
      "return exps / exps.amax(dim=dim, keepdim=True)", r"divided by the largest exp, not by the sum"),
    M("02", "softmax", "exp of log_softmax", _L02_SOFTMAX_BODY, "    return torch.log_softmax(x, dim).exp()",
      r"calls log_softmax"),
    # attention_numpy
    M("02", "attention_numpy", "no scale", "/ math.sqrt(d)  #", "#", r"did not divide the scores by sqrt\(d\)"),
    M("02", "attention_numpy", "divided by d", "/ math.sqrt(d)  #", "/ d  #", r"divided the scores by d instead"),
    M("02", "attention_numpy", "top-left causal", "np.tril(np.ones((n_q, n_k), dtype=bool), k=n_k - n_q)",
      "np.tril(np.ones((n_q, n_k), dtype=bool))", r"aligned to the top-left corner"),
    M("02", "attention_numpy", "causal ignored", "    if causal:\n        n_q, n_k", "    if False:\n        n_q, n_k",
      r"causal=True is ignored"),
    M("02", "attention_numpy", "softmax over the query axis", _L02_NUMPY_SOFTMAX, _L02_NUMPY_SOFTMAX.replace("axis=-1", "axis=-2"),
      r"do not sum to 1 along the key axis.*wrong dimension"),
    M("02", "attention_numpy", "no max shift", "    scores = scores - scores.max(axis=-1, keepdims=True)\n", "",
      r"subtract the maximum"),
    M("02", "attention_numpy", "K.T", "np.swapaxes(K, -1, -2)", "K.T", r"swapaxes\(K, -1, -2\)\), not K\.T"),
    M("02", "attention_numpy", "returns torch tensors", "    return weights @ V, weights\n",
      "    return torch.from_numpy(weights @ V), torch.from_numpy(weights)\n", r"must return numpy arrays"),
    M("02", "attention_numpy", "(weights, out)", "    return weights @ V, weights\n", "    return weights, weights @ V\n",
      r"\(weights, out\) instead of \(out, weights\)"),
    # scaled_dot_product_attention
    M("02", "sdpa", "PyTorch's softmax", "weights = softmax(scores, dim=-1)", "weights = torch.softmax(scores, dim=-1)",
      r"calls softmax \(torch\.softmax"),
    M("02", "sdpa", "PyTorch's attention", "    return weights @ v, weights\n",
      "    return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale), weights\n",
      r"calls F\.scaled_dot_product_attention"),
    M("02", "sdpa", "no scale", "scale = 1.0 / math.sqrt(q.shape[-1])", "scale = 1.0",
      r"did not divide the scores by sqrt\(d\)"),
    M("02", "sdpa", "scale argument ignored", "    if scale is None:\n        scale = 1.0 / math.sqrt(q.shape[-1])",
      "    scale = 1.0 / math.sqrt(q.shape[-1])", r"ignored the scale argument"),
    M("02", "sdpa", "sqrt(d_v)", "scale = 1.0 / math.sqrt(q.shape[-1])", "scale = 1.0 / math.sqrt(v.shape[-1])",
      r"sqrt\(d_v\) \(the value size\)"),
    M("02", "sdpa", "masks the allowed keys", "scores.masked_fill(~mask,", "scores.masked_fill(mask,",
      r"you masked the allowed keys"),
    M("02", "sdpa", "weights times mask after softmax", _L02_SDPA_MASK + "    weights = softmax(scores, dim=-1)\n",
      "        pass\n    weights = softmax(scores, dim=-1)\n    if mask is not None:\n        weights = weights * mask\n",
      r"do not sum to 1.*mask to the scores before the softmax"),
    M("02", "sdpa", "mask ignored", _L02_SDPA_MASK, "        pass\n", r"the mask is ignored"),
    M("02", "sdpa", "fill -100", _L02_SDPA_MASK, _L02_SDPA_MASK.replace("float(\"-inf\")", "-100.0"),
      r"not exactly 0.*fill -inf, not a large negative number"),
    M("02", "sdpa", "k.transpose(1, 2)", "(q @ k.transpose(-2, -1)) * scale", "(q @ k.transpose(1, 2)) * scale",
      r"2-D inputs.*k\.transpose\(-2, -1\)"),
    M("02", "sdpa", "float64 always", "    return weights @ v, weights\n",
      "    return (weights @ v).double(), weights.double()\n", r"dtype torch\.float64, expected torch\.float32"),
]


# ------------------------------------------------------------------------------------------------
# Mutation rows of lesson 03 (masking.py)
# ------------------------------------------------------------------------------------------------
_L03_CAUSAL = "return key_position <= query_position"
_L03_PADDING = "return positions < lengths.unsqueeze(-1)"
_L03_DOCUMENTS = "return doc_ids.unsqueeze(-1) == doc_ids.unsqueeze(-2)"
_L03_WINDOW = "return (distance >= 0) & (distance < window)"
_L03_SCORES = "scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])"
_L03_FILL = "    scores = torch.where(mask, scores, float(\"-inf\"))\n"
_L03_ZEROED = "    weights = torch.where(mask, _softmax(scores, dim=-1), 0.0)\n"
_L03_MASKED = (_L03_FILL
           + "    # A row with no visible key would be softmax(-inf, ..., -inf) = 0/0 = nan. Give it finite\n"
           "    # scores instead: its weights are set to 0 below, and where() sends no gradient through them.\n"
           "    scores = torch.where(sees_something, scores, 0.0)\n" + _L03_ZEROED)
_L03_RETURN = _L03_ZEROED + "    return weights @ v, weights"

_LESSON03: list[M] = [
    # causal_mask
    M("03", "causal_mask", "top-left corner", "torch.arange(n_q).unsqueeze(1) + (n_k - n_q)  # where",
      "torch.arange(n_q).unsqueeze(1)  # where", r"aligned to the top-left corner.*bottom-right"),
    M("03", "causal_mask", "diagonal missing", _L03_CAUSAL, "return key_position < query_position",
      r"the diagonal is missing"),
    M("03", "causal_mask", "masks the past", _L03_CAUSAL, "return key_position > query_position",
      r"you masked the allowed keys"),
    M("03", "causal_mask", "upper triangle", _L03_CAUSAL, "return key_position >= query_position",
      r"this is the transpose"),
    M("03", "causal_mask", "float mask", _L03_CAUSAL, "return (key_position <= query_position).float()",
      r"dtype torch\.float32, expected torch\.bool"),
    # padding_mask
    M("03", "padding_mask", "one too many", _L03_PADDING, "return positions <= lengths.unsqueeze(-1)",
      r"one position too many"),
    M("03", "padding_mask", "marks the padding", _L03_PADDING, "return positions >= lengths.unsqueeze(-1)",
      r"marked the padding instead of the real tokens"),
    M("03", "padding_mask", "adds a query axis", _L03_PADDING, "return (positions < lengths.unsqueeze(-1)).unsqueeze(-2)",
      r"return shape \(\.\.\., max_len\)"),
    M("03", "padding_mask", "padding on the left", _L03_PADDING, "return positions >= max_len - lengths.unsqueeze(-1)",
      r"the real tokens come first"),
    # document_mask
    M("03", "document_mask", "masks its own document", _L03_DOCUMENTS, "return doc_ids.unsqueeze(-1) != doc_ids.unsqueeze(-2)",
      r"masked each token's own document"),
    M("03", "document_mask", "causal too", _L03_DOCUMENTS, "return (doc_ids.unsqueeze(-1) == doc_ids.unsqueeze(-2)).tril()",
      r"your mask is causal too"),
    M("03", "document_mask", "one row only", _L03_DOCUMENTS, "return doc_ids[:, None] == doc_ids[None, :]",
      r"compare every pair of positions"),
    # sliding_window_mask
    M("03", "sliding_window_mask", "window + 1 keys", _L03_WINDOW, "return (distance >= 0) & (distance <= window)",
      r"each query sees \d+ keys"),
    M("03", "sliding_window_mask", "no lower bound", _L03_WINDOW, "return distance < window",
      r"keys after the query are visible.*>= 0"),
    M("03", "sliding_window_mask", "symmetric window", _L03_WINDOW, "return distance.abs() < window",
      r"keys after the query are visible.*looks only back"),
    M("03", "sliding_window_mask", "window missing", _L03_WINDOW, "return distance >= 0", r"the window is missing"),
    M("03", "sliding_window_mask", "own position missing", _L03_WINDOW, "return (distance > 0) & (distance <= window)",
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
      "    scores = torch.where(sees_something, scores, 0.0)\n" + _L03_ZEROED, "    weights = _softmax(scores, dim=-1)\n",
      r"0/0 = nan"),
    M("03", "masked_attention", "additive -inf, then nan_to_num", _L03_MASKED,
      "    scores = scores + torch.zeros_like(scores).masked_fill(~mask, float(\"-inf\"))\n"
      "    weights = _softmax(scores, dim=-1).nan_to_num(0.0)\n",
      r"gradient.*contains nan.*torch\.where or masked_fill"),
    M("03", "masked_attention", "large negative fill, rows not zeroed", _L03_MASKED,
      "    weights = _softmax(torch.where(mask, scores, -1e4), dim=-1)\n", r"equal weights 1/n_k"),
    M("03", "masked_attention", "rows not zeroed", _L03_ZEROED, "    weights = _softmax(scores, dim=-1)\n",
      r"equal weights 1/n_k.*set the weights of such rows to 0"),
    # issue 25: "weights × mask after softmax" is told that its rows no longer sum to 1
    M("03", "masked_attention", "weights times mask after softmax", _L03_FILL, "",
      r"do not sum to 1.*the softmax must see the mask"),
    M("03", "masked_attention", "fill -100, then zeroed", _L03_FILL, _L03_FILL.replace("float(\"-inf\")", "-100.0"),
      r"do not sum to 1.*set the scores to -inf"),
    M("03", "masked_attention", "fill -100", _L03_MASKED, "    weights = _softmax(torch.where(mask, scores, -100.0), dim=-1)\n",
      r"not exactly 0.*fill -inf, not a large negative number"),
    M("03", "masked_attention", "masked_fill -1e9", _L03_FILL, "    scores = scores.masked_fill(~mask, -1e9)\n",
      r"does not fit in float16"),
    M("03", "masked_attention", "no scale", _L03_SCORES, "scores = q @ k.transpose(-2, -1)",
      r"did not divide the scores by sqrt\(d\)"),
    M("03", "masked_attention", "sqrt(d_v)", _L03_SCORES, _L03_SCORES.replace("q.shape[-1]", "v.shape[-1]"),
      r"sqrt\(d_v\) \(the value size\)"),
    M("03", "masked_attention", "PyTorch's attention", _L03_RETURN,
      _L03_ZEROED + "    out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)\n"
      "    return out * sees_something, weights", r"calls F\.scaled_dot_product_attention"),
    M("03", "masked_attention", "(weights, out)", _L03_RETURN, _L03_ZEROED + "    return weights, weights @ v",
      r"\(weights, out\) instead of \(out, weights\)"),
    M("03", "masked_attention", "float64 always", _L03_RETURN,
      _L03_ZEROED.replace("scores, dim", "scores.double(), dim") + "    return weights @ v.double(), weights",
      r"dtype torch\.float64, expected torch\.float32"),
    M("03", "masked_attention", "mask=None not handled",
      "    if mask is None:\n        weights = _softmax(scores, dim=-1)\n        return weights @ v, weights\n", "",
      r"mask=None means no mask at all"),
]


# ------------------------------------------------------------------------------------------------
# Mutation rows of lesson 04 (multihead.py)
# ------------------------------------------------------------------------------------------------
_L04_SPLIT = "    return x.reshape(*lead, n, n_heads, width // n_heads).transpose(-3, -2)"
_L04_MERGE = "    return x.transpose(-3, -2).reshape(*lead, n, n_heads * h)"
_L04_REPEAT = "    return k.repeat_interleave(n_rep, dim=-3)"
_L04_ATTEND = "        out, weights = masking.masked_attention(q, repeat_kv(k, n_rep), repeat_kv(v, n_rep), allowed)"
_L04_ROTATE = ('                q = rotary.apply_rope(q, positions, base=self.rope_base, layout="half")\n'
           '                k = rotary.apply_rope(k, positions, base=self.rope_base, layout="half")')
_L04_BYTES = "    return 2 * n_layers * n_kv_heads * head_dim * seq_len * dtype_bytes * batch"


def _L04_own_attention(scale: str) -> str:
    """The attention written out instead of lesson 03's masked_attention, dividing by ``scale``."""
    return ("        kk, vv = repeat_kv(k, n_rep), repeat_kv(v, n_rep)\n"
            f"        scores = q @ kk.transpose(-2, -1) / math.sqrt({scale})\n"
            "        if allowed is not None:\n"
            "            scores = scores.masked_fill(~allowed, float('-inf'))\n"
            "        weights = torch.softmax(scores, dim=-1)\n"
            "        out = weights @ vv")


_LESSON04: list[M] = [
    # split_heads, merge_heads
    M("04", "split_merge", "split in one reshape", _L04_SPLIT,
      "    return x.reshape(*lead, n_heads, n, width // n_heads)",
      r"in one step.*transpose\(-3, -2\)"),
    M("04", "split_merge", "split gives every H-th feature", _L04_SPLIT,
      "    return x.reshape(*lead, n, width // n_heads, n_heads).movedim(-1, -3)",
      r"every n_heads-th feature"),
    M("04", "split_merge", "split keeps the token axis first", _L04_SPLIT,
      "    return x.reshape(*lead, n, n_heads, width // n_heads)",
      r"head axis must come before the token axis"),
    M("04", "split_merge", "split assumes a batch dimension", _L04_SPLIT,
      "    return x.reshape(x.shape[0], x.shape[1], n_heads, -1).transpose(1, 2)",
      r"split_heads.*raised RuntimeError"),
    M("04", "split_merge", "merge without swapping back", _L04_MERGE,
      "    return x.reshape(*lead, n, n_heads * h)",
      r"merge_heads.*swapping the head and token axes back"),
    M("04", "split_merge", "merge with view after transpose", _L04_MERGE,
      "    return x.transpose(-3, -2).view(*lead, n, n_heads * h)",
      r"merge_heads.*raised RuntimeError.*view"),
    M("04", "split_merge", "merge assumes four dimensions", _L04_MERGE,
      "    return x.transpose(1, 2).reshape(*lead, n, n_heads * h)",
      r"merge_heads.*put every feature back"),

    # repeat_kv
    M("04", "repeat_kv", "tiles the heads", _L04_REPEAT,
      "    return k.repeat(*([1] * (k.dim() - 3)), n_rep, 1, 1)",
      r"tiled the heads.*repeat_interleave"),
    M("04", "repeat_kv", "repeats along the tokens", _L04_REPEAT,
      "    return k.repeat_interleave(n_rep, dim=-2)",
      r"has shape.*dim=-3"),
    M("04", "repeat_kv", "repeats along dim 1", _L04_REPEAT,
      "    return k.repeat_interleave(n_rep, dim=1)",
      r"repeat_kv.*(has shape|disagree).*dim=-3|repeat_kv.*has shape"),
    M("04", "repeat_kv", "four dimensions only (expand)", _L04_REPEAT,
      "    b, g, n, h = k.shape\n    return k[:, :, None].expand(b, g, n_rep, n, h).reshape(b, g * n_rep, n, h)",
      r"two batch dimensions.*raised ValueError"),

    # MultiHeadAttention
    M("04", "mha", "no output projection",
      "        out = self.o_proj(merge_heads(out))", "        out = merge_heads(out)",
      r"o_proj is missing"),
    M("04", "mha", "ignores rope_base",
      "            if self.rope_base is not None:\n                if positions is None:",
      "            if False:\n                if positions is None:",
      r"rope_base is ignored"),
    M("04", "mha", "rotates with the default base", _L04_ROTATE,
      "                q = rotary.apply_rope(q, positions)\n"
      "                k = rotary.apply_rope(k, positions)",
      r"default base 10000.*base=self.rope_base"),
    M("04", "mha", "rotates the values too", _L04_ROTATE,
      _L04_ROTATE + '\n                v = rotary.apply_rope(v, positions, base=self.rope_base, layout="half")',
      r"rope_base=100.*nothing else \(not v\)"),
    M("04", "mha", "ignores the positions argument",
      "                if positions is None:\n                    start = 0",
      "                if True:\n                    start = 0",
      r"positions argument is ignored"),
    M("04", "mha", "(b, n) positions not broadcast over the heads",
      "                if positions.dim() == 2:", "                if False:",
      r"raised ValueError: positions of shape \(2, 6\) do not fit"),
    M("04", "mha", "ignores the mask", "        allowed = mask\n", "        allowed = None\n",
      r"the mask is ignored"),
    M("04", "mha", "ignores causal", "        if causal and memory is None:", "        if False:",
      r"causal=True is ignored"),
    M("04", "mha", "causal cross-attention", "        if causal and memory is None:", "        if causal:",
      r"causal must be ignored in cross-attention"),
    M("04", "mha", "tiles the key/value heads", _L04_ATTEND,
      "        out, weights = masking.masked_attention(q, k.repeat(1, n_rep, 1, 1), v.repeat(1, n_rep, 1, 1), allowed)",
      r"tiled \(0, 1, 0, 1\)"),
    M("04", "mha", "ignores head_mask",
      "            out = out * head_mask.to(out.dtype)[:, None, None]", "            pass",
      r"head_mask was ignored"),
    M("04", "mha", "divides by sqrt(d_model)", _L04_ATTEND, _L04_own_attention("self.d_model"),
      r"divided the scores by sqrt\(d_model\)"),
    M("04", "mha", "own softmax gives nan for a query without keys", _L04_ATTEND, _L04_own_attention("self.head_dim"),
      r"row 2 allows no key.*nan.*masked_attention"),
    M("04", "mha", "no check that n_kv_heads divides n_heads",
      "        if n_heads % n_kv_heads:\n            raise", "        if False:\n            raise",
      r"did not raise ValueError.*not a multiple"),

    # KVCache and decoding
    M("04", "kv_cache", "new tokens first",
      "            self.keys = torch.cat([self.keys, k], dim=-2)", "            self.keys = torch.cat([k, self.keys], dim=-2)",
      r"old tokens come first"),
    M("04", "kv_cache", "length from the head size",
      "        return 0 if self.keys is None else int(self.keys.shape[-2])",
      "        return 0 if self.keys is None else int(self.keys.shape[-1])",
      r"length is.*keys\.shape\[-2\]"),
    M("04", "kv_cache", "causal mask aligned top-left",
      "            lower = masking.causal_mask(n, k.shape[-2]).to(x.device)",
      "            lower = torch.ones(n, k.shape[-2], dtype=torch.bool, device=x.device).tril()",
      r"top-left corner"),
    M("04", "kv_cache", "rotary positions restart at 0",
      "                    start = 0 if cache is None else cache.length", "                    start = 0",
      r"restart at 0.*cache\.length"),
    M("04", "kv_cache", "attends to the new keys only",
      "                k, v = cache.append(k, v)                                   # (b, G, n_k, h)",
      "                cache.append(k, v)",
      r"saw only itself"),
    M("04", "kv_cache", "caches keys before rotating them",
      _L04_ROTATE + "\n            if cache is not None:\n                k, v = cache.append(k, v)"
      "                                   # (b, G, n_k, h)",
      "                q = rotary.apply_rope(q, positions, base=self.rope_base, layout=\"half\")\n"
      "            if cache is not None:\n"
      "                k, v = cache.append(k, v)\n"
      "            if self.rope_base is not None:\n"
      "                every = positions if cache is None else torch.arange(k.shape[-2])\n"
      "                k = rotary.apply_rope(k, every, base=self.rope_base, layout=\"half\")",
      r"cache holds keys before their rotation"),
    M("04", "kv_cache", "cross-attention recomputes the memory",
      "            if cache is not None and cache.length:", "            if False:",
      r"holds the memory's 5 keys once"),

    # kv_cache_bytes
    M("04", "kv_cache_bytes", "keys only", _L04_BYTES,
      "    return n_layers * n_kv_heads * head_dim * seq_len * dtype_bytes * batch", r"keys only"),
    M("04", "kv_cache_bytes", "no layers", _L04_BYTES,
      "    return 2 * n_kv_heads * head_dim * seq_len * dtype_bytes * batch", r"left out n_layers"),
    M("04", "kv_cache_bytes", "no batch", _L04_BYTES,
      "    return 2 * n_layers * n_kv_heads * head_dim * seq_len * dtype_bytes", r"left out the batch"),
    M("04", "kv_cache_bytes", "numbers, not bytes", _L04_BYTES,
      "    return 2 * n_layers * n_kv_heads * head_dim * seq_len * batch", r"left out dtype_bytes"),
    M("04", "kv_cache_bytes", "a float", _L04_BYTES,
      "    return 2.0 * n_layers * n_kv_heads * head_dim * seq_len * dtype_bytes * batch", r"expected an int"),
    M("04", "kv_cache_bytes", "bits, not bytes", _L04_BYTES,
      "    return 16 * n_layers * n_kv_heads * head_dim * seq_len * dtype_bytes * batch",
      r"take \d+ bytes"),
]


# ------------------------------------------------------------------------------------------------
# Mutation rows of lesson 05 (positions.py)
# apply_rope's trusted cases include RoPE inside the reference MultiHeadAttention decoding with a KV
# cache (recipe ``rope_attention_with_cache``), which reaches ``attnlab.positions`` through
# ``sys.modules``: the parity harness installs the mutant there, so those cases run the mutant too.
# ------------------------------------------------------------------------------------------------
_L05_SIN_COS = "    encoding[:, 0::2] = torch.sin(angles)\n    encoding[:, 1::2] = torch.cos(angles)"
_L05_FREQUENCIES = "    inverse_frequencies = base ** -exponents                                  # (h/2,)"
_L05_ANGLES = "    return positions.to(torch.float64)[..., None] * inverse_frequencies       # (..., n, h/2)"
_L05_COS_SIN = "    cos, sin = torch.cos(angles).to(x.dtype), torch.sin(angles).to(x.dtype)"
_L05_HALF = "        return torch.cat([first * cos - second * sin, first * sin + second * cos], dim=-1)"
_L05_INTERLEAVED = "    rotated = torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1)"

_LESSON05: list[M] = [
    # sinusoidal_encoding
    M("05", "sinusoidal", "sin and cos swapped", _L05_SIN_COS,
      "    encoding[:, 0::2] = torch.cos(angles)\n    encoding[:, 1::2] = torch.sin(angles)",
      r"sin in the odd columns"),
    M("05", "sinusoidal", "all sines first", _L05_SIN_COS + "\n    return encoding.float()",
      "    return torch.cat([torch.sin(angles), torch.cos(angles)], dim=1).float()",
      r"all the sines first"),
    M("05", "sinusoidal", "exponent i / d_model",
      "    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)",
      "    two_i = torch.arange(0, d_model // 2, dtype=torch.float64)",
      r"you used i / d_model"),
    M("05", "sinusoidal", "cosine with its own column index",
      "    encoding[:, 1::2] = torch.cos(angles)",
      "    encoding[:, 1::2] = torch.cos(pos / 10000.0 ** ((two_i + 1) / d_model))",
      r"its own index 2i \+ 1"),
    M("05", "sinusoidal", "positions from 1",
      "    pos = torch.arange(n_positions, dtype=torch.float64)[:, None]",
      "    pos = torch.arange(1, n_positions + 1, dtype=torch.float64)[:, None]",
      r"positions start at 0"),
    M("05", "sinusoidal", "returns float64", "    return encoding.float()", "    return encoding",
      r"dtype torch\.float64, expected torch\.float32"),
    M("05", "sinusoidal", "multiplies by the frequency's inverse",
      "    angles = pos / 10000.0 ** (two_i / d_model)", "    angles = pos * 10000.0 ** (two_i / d_model)",
      r"PE\[pos, 2i\] = sin"),

    # rope_angles
    M("05", "rope_angles", "exponent i / head_dim",
      "    exponents = torch.arange(0, head_dim, 2, dtype=torch.float64, device=positions.device) / head_dim",
      "    exponents = torch.arange(0, head_dim // 2, dtype=torch.float64, device=positions.device) / head_dim",
      r"you used -i / head_dim"),
    M("05", "rope_angles", "positive exponent", _L05_FREQUENCIES,
      "    inverse_frequencies = base ** exponents", r"exponent is negative"),
    M("05", "rope_angles", "ignores the positions", _L05_ANGLES,
      "    counted = torch.arange(positions.shape[-1], dtype=torch.float64, device=positions.device)\n"
      "    return counted.expand(positions.shape)[..., None] * inverse_frequencies",
      r"use the positions you were given"),
    M("05", "rope_angles", "float32 angles", _L05_ANGLES,
      "    return positions.float()[..., None] * inverse_frequencies.float()",
      r"dtype torch\.float32.*float64"),
    M("05", "rope_angles", "float32 frequencies", _L05_FREQUENCIES,
      "    inverse_frequencies = (base ** -exponents.float()).double()",
      r"float64 throughout"),
    M("05", "rope_angles", "ignores base", _L05_FREQUENCIES,
      "    inverse_frequencies = 10000.0 ** -exponents", r"used base 10000 although base=1e\+06 was given"),

    # apply_rope
    M("05", "apply_rope", "layouts swapped", '    if layout == "half":\n        first',
      '    if layout == "interleaved":\n        first',
      r"you rotated the pairs of the 'interleaved' layout"),
    M("05", "apply_rope", "rotates the wrong way", _L05_HALF,
      "        return torch.cat([first * cos + second * sin, second * cos - first * sin], dim=-1)",
      r"rotated the wrong way"),
    M("05", "apply_rope", "rotates the wrong way (interleaved)", _L05_INTERLEAVED,
      "    rotated = torch.stack([even * cos + odd * sin, odd * cos - even * sin], dim=-1)",
      r"interleaved.*rotated the wrong way"),
    M("05", "apply_rope", "ignores the positions",
      "    angles = rope_angles(positions, head_dim, base)",
      "    angles = rope_angles(torch.arange(x.shape[-2], device=x.device), head_dim, base)",
      r"40\.\.44.*use the positions you were given"),
    M("05", "apply_rope", "float64 cos and sin", _L05_COS_SIN,
      "    cos, sin = torch.cos(angles), torch.sin(angles)",
      r"float32 x.*convert cos and sin to x\.dtype"),
    M("05", "apply_rope", "angles in x's dtype", _L05_COS_SIN,
      "    angles = angles.to(x.dtype)\n    cos, sin = torch.cos(angles), torch.sin(angles)",
      r"float16 x.*computed the angles \(or the positions\) in float16"),
    M("05", "apply_rope", "float32 cos and sin", _L05_COS_SIN,
      "    cos, sin = torch.cos(angles).float(), torch.sin(angles).float()",
      r"not precise enough"),
    M("05", "apply_rope", "half precision computed in float32", _L05_COS_SIN,
      "    work = torch.promote_types(x.dtype, torch.float32)\n"
      "    cos, sin = torch.cos(angles).to(work), torch.sin(angles).to(work)",
      r"float16 x has dtype torch\.float32, expected torch\.float16"),
    M("05", "apply_rope", "interleaved pairs put back as halves",
      "    return rotated.flatten(-2)", "    return torch.cat([rotated[..., 0], rotated[..., 1]], dim=-1)",
      r"put them back as two halves"),
    M("05", "apply_rope", "positions broadcast against the wrong axes",
      "    angles = rope_angles(positions, head_dim, base)",
      "    angles = rope_angles(positions.reshape(-1, positions.shape[-1])[0], head_dim, base)",
      r"positions of shape \(batch, 1, n\).*broadcast"),
]


# ------------------------------------------------------------------------------------------------
# Mutation rows of lesson 06 (feedforward.py)
# ------------------------------------------------------------------------------------------------
_L06_LN_BODY = ("        work = x.to(_statistics_dtype(x))\n"
            "        centred = work - work.mean(dim=-1, keepdim=True)\n"
            "        variance = centred.pow(2).mean(dim=-1, keepdim=True)\n"
            "        normalized = centred * torch.rsqrt(variance + self.eps)\n"
            "        return normalized.to(x.dtype) * self.weight + self.bias\n")
_L06_RMS_BODY = ("        work = x.to(_statistics_dtype(x))\n"
             "        normalized = work * torch.rsqrt(work.pow(2).mean(dim=-1, keepdim=True) + self.eps)\n"
             "        return normalized.to(x.dtype) * self.weight\n")
_L06_RMS_NORMALIZED = "        normalized = work * torch.rsqrt(work.pow(2).mean(dim=-1, keepdim=True) + self.eps)\n"
_L06_RMS_RETURN = "keepdim=True) + self.eps)\n        return normalized.to(x.dtype) * self.weight\n"
_L06_PRE = "            return x + self.sublayer(self.norm(x), *args, **kwargs)\n"
_L06_POST = "        return self.norm(x + self.sublayer(x, *args, **kwargs))\n"
_L06_GATE = "            hidden = F.silu(self.gate(x)) * self.up(x)\n"
_L06_GELU = "            hidden = F.gelu(self.up(x))\n"

_LESSON06: list[M] = [
    # ------------------------------------------------------------------ FeedForward
    M("06", "feedforward", "SwiGLU gate without bias",
      "self.gate = nn.Linear(d_model, d_ff, bias=bias)", "self.gate = nn.Linear(d_model, d_ff, bias=False)",
      r"gate\.bias"),
    M("06", "feedforward", "a gate for GELU too",
      '        if activation == "swiglu":\n            self.gate', "        if True:\n            self.gate",
      r"has parameters down\.bias .*gate\.weight.*; expected down\.bias"),
    M("06", "feedforward", "biases whatever bias says",
      "self.up = nn.Linear(d_model, d_ff, bias=bias)", "self.up = nn.Linear(d_model, d_ff)",
      r"pass bias=bias"),
    M("06", "feedforward", "tanh GELU", _L06_GELU, '            hidden = F.gelu(self.up(x), approximate="tanh")\n',
      r"tanh approximation"),
    M("06", "feedforward", "ReLU", _L06_GELU, "            hidden = torch.relu(self.up(x))\n", r"you used ReLU"),
    M("06", "feedforward", "no non-linearity", _L06_GELU, "            hidden = self.up(x)\n", r"no non-linearity"),
    M("06", "feedforward", "silu on up", _L06_GATE, "            hidden = F.silu(self.up(x)) * self.gate(x)\n",
      r"silu is applied to up"),
    M("06", "feedforward", "sigmoid gate", _L06_GATE, "            hidden = torch.sigmoid(self.gate(x)) * self.up(x)\n",
      r"you used sigmoid"),
    M("06", "feedforward", "GELU gate", _L06_GATE, "            hidden = F.gelu(self.gate(x)) * self.up(x)\n",
      r"GELU on the gate"),
    M("06", "feedforward", "gate unused", _L06_GATE, "            hidden = self.up(x)\n", r"gate is not used"),
    M("06", "feedforward", "silu as exp over one plus exp", _L06_GATE,
      "            gate = self.gate(x)\n"
      "            hidden = gate * torch.exp(gate) / (1 + torch.exp(gate)) * self.up(x)\n",
      r"overflows float32"),
    M("06", "feedforward", "squeezed output", "        return self.down(hidden)\n",
      "        return self.down(hidden).squeeze()\n", r"has shape .*squeeze"),
    M("06", "feedforward", "float32 output", "        return self.down(hidden)\n",
      "        return self.down(hidden).float()\n", r"dtype torch\.float32, expected torch\.float64"),

    # ------------------------------------------------------------------ LayerNorm
    M("06", "layer_norm", "F.layer_norm", _L06_LN_BODY,
      "        return F.layer_norm(x, (self.d,), self.weight, self.bias, self.eps)\n",
      r"calls F\.layer_norm \(or nn\.LayerNorm\)"),
    M("06", "layer_norm", "nn.LayerNorm", _L06_LN_BODY,
      "        norm = nn.LayerNorm(self.d, eps=self.eps).to(x.dtype)\n"
      "        norm.load_state_dict(self.state_dict())\n"
      "        return norm(x)\n",
      r"calls F\.layer_norm \(or nn\.LayerNorm\)"),
    M("06", "layer_norm", "F.group_norm of one group", _L06_LN_BODY,
      "        grouped = F.group_norm(x.reshape(-1, 1, self.d), 1, eps=self.eps)\n"
      "        return grouped.reshape(x.shape) * self.weight + self.bias\n",
      r"calls F\.group_norm"),
    M("06", "layer_norm", "unbiased variance",
      "        variance = centred.pow(2).mean(dim=-1, keepdim=True)\n",
      "        variance = work.var(dim=-1, keepdim=True)\n", r"unbiased variance"),
    M("06", "layer_norm", "eps outside the root",
      "        normalized = centred * torch.rsqrt(variance + self.eps)\n",
      "        normalized = centred / (variance.sqrt() + self.eps)\n", r"outside the square root"),
    M("06", "layer_norm", "eps of __init__ ignored", "torch.rsqrt(variance + self.eps)",
      "torch.rsqrt(variance + 1e-5)", r"eps given to __init__ is ignored"),
    M("06", "layer_norm", "no eps", "torch.rsqrt(variance + self.eps)", "torch.rsqrt(variance)",
      r"eps is missing"),
    M("06", "layer_norm", "bias not added",
      "        return normalized.to(x.dtype) * self.weight + self.bias\n",
      "        return normalized.to(x.dtype) * self.weight\n", r"the bias is not added"),
    M("06", "layer_norm", "weight not applied",
      "        return normalized.to(x.dtype) * self.weight + self.bias\n",
      "        return normalized.to(x.dtype) + self.bias\n", r"the weight is not applied"),
    M("06", "layer_norm", "statistics over the first dimension",
      "        centred = work - work.mean(dim=-1, keepdim=True)\n"
      "        variance = centred.pow(2).mean(dim=-1, keepdim=True)\n",
      "        centred = work - work.mean(dim=0, keepdim=True)\n"
      "        variance = centred.pow(2).mean(dim=0, keepdim=True)\n",
      r"normalized over the first dimension"),
    M("06", "layer_norm", "variance as mean of squares minus squared mean",
      "        variance = centred.pow(2).mean(dim=-1, keepdim=True)\n",
      "        variance = work.pow(2).mean(dim=-1, keepdim=True) - work.mean(dim=-1, keepdim=True).pow(2)\n",
      r"mean\(x\*\*2\) - mean\(x\)\*\*2 loses every digit"),
    M("06", "layer_norm", "statistics in half precision",
      "        work = x.to(_statistics_dtype(x))\n        centred",
      "        work = x\n        centred", r"overflow float16: compute the statistics in float32"),
    M("06", "layer_norm", "not cast back to half precision",
      "        return normalized.to(x.dtype) * self.weight + self.bias\n",
      "        return normalized * self.weight + self.bias\n", r"dtype torch\.float32, expected torch\.float16"),
    M("06", "layer_norm", "centres x in place",
      "        centred = work - work.mean(dim=-1, keepdim=True)\n",
      "        work -= work.mean(dim=-1, keepdim=True)\n        centred = work\n", r"changed its input in place"),

    # ------------------------------------------------------------------ RMSNorm
    M("06", "rms_norm", "F.rms_norm", _L06_RMS_BODY, "        return F.rms_norm(x, (self.d,), self.weight, self.eps)\n",
      r"calls F\.rms_norm \(or nn\.RMSNorm\)"),
    M("06", "rms_norm", "nn.RMSNorm", _L06_RMS_BODY,
      "        norm = nn.RMSNorm(self.d, eps=self.eps).to(x.dtype)\n"
      "        norm.load_state_dict(self.state_dict())\n"
      "        return norm(x)\n",
      r"calls F\.rms_norm \(or nn\.RMSNorm\)"),
    M("06", "rms_norm", "no eps", _L06_RMS_NORMALIZED,
      "        normalized = work * torch.rsqrt(work.pow(2).mean(dim=-1, keepdim=True))\n", r"eps is missing"),
    M("06", "rms_norm", "no eps, through vector_norm", _L06_RMS_NORMALIZED,
      "        normalized = work / (torch.linalg.vector_norm(work, dim=-1, keepdim=True) / self.d ** 0.5)\n",
      r"eps is missing"),
    M("06", "rms_norm", "mean subtracted", _L06_RMS_NORMALIZED,
      "        centred = work - work.mean(dim=-1, keepdim=True)\n"
      "        normalized = centred * torch.rsqrt(centred.pow(2).mean(dim=-1, keepdim=True) + self.eps)\n",
      r"you subtracted the mean"),
    M("06", "rms_norm", "eps outside the root", _L06_RMS_NORMALIZED,
      "        normalized = work / (work.pow(2).mean(dim=-1, keepdim=True).sqrt() + self.eps)\n",
      r"outside the square root"),
    M("06", "rms_norm", "sum of squares", _L06_RMS_NORMALIZED,
      "        normalized = work * torch.rsqrt(work.pow(2).sum(dim=-1, keepdim=True) + self.eps)\n",
      r"divided by the length of x"),
    M("06", "rms_norm", "weight not applied", _L06_RMS_RETURN,
      "keepdim=True) + self.eps)\n        return normalized.to(x.dtype)\n",
      r"the weight is not applied"),
    M("06", "rms_norm", "eps of __init__ ignored", "keepdim=True) + self.eps)", "keepdim=True) + 1e-6)",
      r"eps given to __init__ is ignored"),
    M("06", "rms_norm", "statistics in half precision",
      "        work = x.to(_statistics_dtype(x))\n        normalized",
      "        work = x\n        normalized", r"overflow float16: compute the statistics in float32"),
    M("06", "rms_norm", "not cast back to half precision", _L06_RMS_RETURN,
      "keepdim=True) + self.eps)\n        return normalized * self.weight\n",
      r"dtype torch\.float32, expected torch\.float16"),

    # ------------------------------------------------------------------ Residual
    M("06", "residual", "pre-norm normalizes the sum", _L06_PRE,
      "            return self.norm(x + self.sublayer(x, *args, **kwargs))\n", r"normalized after adding the residual"),
    M("06", "residual", "post-norm normalizes the input", _L06_POST,
      "        return x + self.sublayer(self.norm(x), *args, **kwargs)\n", r"normalized before the sublayer"),
    M("06", "residual", "normalized skip path", _L06_PRE,
      "            return self.norm(x) + self.sublayer(self.norm(x), *args, **kwargs)\n", r"skip path carries norm"),
    M("06", "residual", "pre-norm without the residual", _L06_PRE,
      "            return self.sublayer(self.norm(x), *args, **kwargs)\n", r"the residual is missing"),
    M("06", "residual", "post-norm without the residual", _L06_POST,
      "        return self.norm(self.sublayer(x, *args, **kwargs))\n", r"the residual is missing"),
    M("06", "residual", "pre-norm normalizes the output", _L06_PRE,
      "            return x + self.norm(self.sublayer(x, *args, **kwargs))\n", r"normalized the sublayer's output"),
    M("06", "residual", "post-norm normalizes only the output", _L06_POST,
      "        return x + self.norm(self.sublayer(x, *args, **kwargs))\n", r"normalized only the sublayer's output"),
    M("06", "residual", "norm never applied", _L06_PRE, "            return x + self.sublayer(x, *args, **kwargs)\n",
      r"the norm is never applied"),
    M("06", "residual", "positional arguments dropped", _L06_PRE + "        " + _L06_POST.lstrip(),
      "            return x + self.sublayer(self.norm(x), **kwargs)\n"
      "        return self.norm(x + self.sublayer(x, **kwargs))\n",
      r"positional arguments do not reach the sublayer"),
    M("06", "residual", "keyword arguments dropped", _L06_PRE + "        " + _L06_POST.lstrip(),
      "            return x + self.sublayer(self.norm(x), *args)\n"
      "        return self.norm(x + self.sublayer(x, *args))\n",
      r"keyword arguments do not reach the sublayer"),
    M("06", "residual", "extra arguments dropped", _L06_PRE + "        " + _L06_POST.lstrip(),
      "            return x + self.sublayer(self.norm(x))\n"
      "        return self.norm(x + self.sublayer(x))\n",
      r"the extra arguments do not reach the sublayer"),
]


# ------------------------------------------------------------------------------------------------
# Mutation rows of lesson 07 (stacks.py)
# ------------------------------------------------------------------------------------------------
# Unique anchors in solutions/attnlab/stacks.py.
_L07_ENC_INIT = "        self.placement = placement\n        ### BEGIN SOLUTION\n"
_L07_ENC_SELF_ATTN = ("        self.attn_norm = make_norm(norm, d_model)\n        self.self_attn = "
                  "multihead.MultiHeadAttention(d_model, n_heads, n_kv_heads, bias=bias, rope_base=rope_base)")
_L07_ENC_FFN = ("        self.ffn = feedforward.FeedForward(d_model, d_ff, activation)\n        ### END SOLUTION\n\n"
            "    def forward(self, x: torch.Tensor, mask")
_L07_ENC_SELF = ("x, weights = _sublayer(self.placement, x, self.attn_norm, self.self_attn, mask,\n"
             "                               positions=positions")
_L07_ENC_FFN_STEP = ("        x, _ = _sublayer(self.placement, x, self.ffn_norm, self.ffn)\n"
                 "        return (x, weights) if return_weights else x")
_L07_DEC_FFN = ("        self.ffn = feedforward.FeedForward(d_model, d_ff, activation)\n        ### END SOLUTION\n\n"
            "    def forward(self, x: torch.Tensor, memory")
_L07_DEC_SELF = ("        x, self_weights = _sublayer(self.placement, x, self.attn_norm, self.self_attn, causal=True,\n"
             "                                    cache=cache, positions=positions, return_weights=return_weights)\n")
_L07_DEC_CROSS = ("        cross_weights = None\n        if self.cross_attention:\n"
              "            padding = None if memory_mask is None else memory_mask[:, None, None, :]\n"
              "            x, cross_weights = _sublayer(self.placement, x, self.cross_norm, self.cross_attn, padding,\n"
              "                                         memory=memory, return_weights=return_weights)\n")
_L07_EO_FINAL = 'self.final_norm = make_norm(norm, d_model) if placement == "pre" else nn.Identity()\n        if n_classes'
_L07_DO_FINAL = 'self.final_norm = make_norm(norm, d_model) if placement == "pre" else nn.Identity()\n        self.lm_head'
_L07_BLOCKS_ARGS = "                         placement=placement, rope_base=rope_base, bias=bias)"
_L07_DO_TIE = ("        if tie_embeddings:\n            self.lm_head.weight = self.embed.weight\n        ### END SOLUTION\n"
           "        initialize(self, n_layers)\n")
_L07_ED_TIE = ("        if tie_embeddings:\n            self.lm_head.weight = self.embed.weight\n        ### END SOLUTION\n"
           "        initialize(self, n_layers + n_decoder_layers)")

_LESSON07: list[M] = [
    # -- EncoderBlock ---------------------------------------------------------------------------
    M("07", "encoder_block", "activation not passed on", _L07_ENC_FFN,
      _L07_ENC_FFN.replace("FeedForward(d_model, d_ff, activation)", "FeedForward(d_model, d_ff)"),
      r"activation='swiglu'.*pass activation on to FeedForward"),
    M("07", "encoder_block", "norms the other way round", _L07_ENC_INIT,
      _L07_ENC_INIT.replace("= placement", '= "post" if placement == "pre" else "pre"'),
      r"norms the other way round"),
    M("07", "encoder_block", "causal encoder", _L07_ENC_SELF, _L07_ENC_SELF.replace("mask,", "mask, causal=True,"),
      r"no causal mask"),
    M("07", "encoder_block", "padding mask ignored", _L07_ENC_SELF, _L07_ENC_SELF.replace("mask,", "None,"),
      r"pass mask on to self_attn"),
    M("07", "encoder_block", "feed-forward reads the stream", _L07_ENC_FFN_STEP,
      '        x = x + self.ffn(x) if self.placement == "pre" else self.ffn_norm(x + self.ffn(x))\n'
      "        return (x, weights) if return_weights else x",
      r"must read ffn_norm\(x\)"),
    M("07", "encoder_block", "no residual around the feed-forward block", _L07_ENC_FFN_STEP,
      '        x = self.ffn(self.ffn_norm(x)) if self.placement == "pre" else self.ffn_norm(self.ffn(x))\n'
      "        return (x, weights) if return_weights else x",
      r"residual connection around the feed-forward"),
    M("07", "encoder_block", "n_kv_heads not passed on",
      _L07_ENC_INIT + _L07_ENC_SELF_ATTN, _L07_ENC_INIT + _L07_ENC_SELF_ATTN.replace("n_heads, n_kv_heads,", "n_heads,"),
      r"pass n_kv_heads on"),
    M("07", "encoder_block", "rope_base not passed on",
      _L07_ENC_INIT + _L07_ENC_SELF_ATTN, _L07_ENC_INIT + _L07_ENC_SELF_ATTN.replace("rope_base=rope_base", "rope_base=10000.0"),
      r"pass rope_base on"),
    M("07", "encoder_block", "norm not passed on", "        self.ffn_norm = make_norm(norm, d_model)\n" + _L07_ENC_FFN,
      '        self.ffn_norm = make_norm("layer", d_model)\n' + _L07_ENC_FFN,
      r"norm='rms' is an RMSNorm.*pass norm on"),
    M("07", "encoder_block", "bias passed to the feed-forward block", _L07_ENC_FFN,
      _L07_ENC_FFN.replace("FeedForward(d_model, d_ff, activation)", "FeedForward(d_model, d_ff, activation, bias=bias)"),
      r"feed-forward block keeps its biases"),
    # -- DecoderBlock ---------------------------------------------------------------------------
    M("07", "decoder_block", "self-attention not causal",
      "self.attn_norm, self.self_attn, causal=True,", "self.attn_norm, self.self_attn, causal=False,",
      r"must be causal"),
    M("07", "decoder_block", "source padding ignored",
      "padding = None if memory_mask is None else memory_mask[:, None, None, :]", "padding = None",
      r"padded source tokens"),
    M("07", "decoder_block", "cache not passed on",
      "                                    cache=cache, positions=positions",
      "                                    cache=None, positions=positions",
      r"pass the cache on to self_attn"),
    M("07", "decoder_block", "cross-attention before self-attention",
      _L07_DEC_SELF + _L07_DEC_CROSS, _L07_DEC_CROSS.replace("        cross_weights = None\n", "")
      + _L07_DEC_SELF.replace("x, self_weights", "cross_weights = None\n        x, self_weights"),
      r"self-attention first, then cross-attention"),
    M("07", "decoder_block", "activation not passed on", _L07_DEC_FFN,
      _L07_DEC_FFN.replace("FeedForward(d_model, d_ff, activation)", "FeedForward(d_model, d_ff)"),
      r"activation='swiglu'.*pass activation on"),
    M("07", "decoder_block", "norm not passed on", "        self.ffn_norm = make_norm(norm, d_model)\n" + _L07_DEC_FFN,
      '        self.ffn_norm = make_norm("layer", d_model)\n' + _L07_DEC_FFN,
      r"norm='rms' is an RMSNorm"),
    M("07", "decoder_block", "cross-attention without n_kv_heads",
      "self.cross_attn = multihead.MultiHeadAttention(d_model, n_heads, n_kv_heads, bias=bias)",
      "self.cross_attn = multihead.MultiHeadAttention(d_model, n_heads, bias=bias)",
      r"pass n_kv_heads on"),
    M("07", "decoder_block", "cross-attention modules in every block",
      "        if cross_attention:\n            self.cross_norm = make_norm(norm, d_model)",
      "        if True:\n            self.cross_norm = make_norm(norm, d_model)",
      r"must not create cross_norm"),
    M("07", "decoder_block", "no residual around the cross-attention",
      "            x, cross_weights = _sublayer(self.placement, x, self.cross_norm, self.cross_attn, padding,\n"
      "                                         memory=memory, return_weights=return_weights)",
      "            update, cross_weights = self.cross_attn(self.cross_norm(x) if self.placement == 'pre' else x,\n"
      "                                                    padding, memory=memory, return_weights=True)\n"
      "            x = update if self.placement == 'pre' else self.cross_norm(update)",
      r"residual connection around the cross-attention"),
    M("07", "decoder_block", "rope_base not passed on",
      "self.self_attn = multihead.MultiHeadAttention(d_model, n_heads, n_kv_heads, bias=bias, rope_base=rope_base)\n"
      "        if cross_attention:",
      "self.self_attn = multihead.MultiHeadAttention(d_model, n_heads, n_kv_heads, bias=bias)\n"
      "        if cross_attention:",
      r"pass rope_base on"),

    # -- EncoderOnly ----------------------------------------------------------------------------
    M("07", "encoder_only", "final_norm kept for post-norm", _L07_EO_FINAL,
      "self.final_norm = make_norm(norm, d_model)\n        if n_classes",
      r"placement='post', final_norm must be nn\.Identity"),
    M("07", "encoder_only", "no final_norm for pre-norm", _L07_EO_FINAL,
      "self.final_norm = nn.Identity()\n        if n_classes",
      r"pre-norm model normalizes once more.*final_norm = make_norm"),
    M("07", "encoder_only", "mean over the padding too",
      "            pooled = (hidden * real).sum(dim=1) / real.sum(dim=1).clamp(min=1.0)",
      "            pooled = hidden.mean(dim=1)",
      r"real tokens only"),
    M("07", "encoder_only", "padding mask not passed to the blocks",
      "        allowed = None if mask is None else mask[:, None, None, :]\n        weights = []",
      "        allowed = None\n        weights = []",
      r"no token may attend to padding"),
    M("07", "encoder_only", "weights of the last layer only",
      "            weights.append(w)\n        x = self.final_norm(x)",
      "            weights = [w]\n        x = self.final_norm(x)",
      r"weights of each of the 2 layers"),
    M("07", "encoder_only", "classifier without a bias",
      "self.classifier = nn.Linear(d_model, n_classes)", "self.classifier = nn.Linear(d_model, n_classes, bias=False)",
      r"classifier is nn\.Linear\(d_model, n_classes\), with a bias"),
    M("07", "encoder_only", "activation not passed to the blocks",
      "EncoderBlock(d_model, n_heads, d_ff, n_kv_heads=n_kv_heads, activation=activation, norm=norm,",
      "EncoderBlock(d_model, n_heads, d_ff, n_kv_heads=n_kv_heads, norm=norm,",
      r"pass activation on"),
    M("07", "encoder_only", "placement not passed to the blocks",
      _L07_BLOCKS_ARGS + "\n            for _ in range(n_layers))\n        " + _L07_EO_FINAL,
      _L07_BLOCKS_ARGS.replace("placement=placement, ", "") + "\n            for _ in range(n_layers))\n        "
      + _L07_EO_FINAL,
      r"pass placement on to every block"),
    M("07", "encoder_only", "rope_base not passed to the blocks",
      _L07_BLOCKS_ARGS + "\n            for _ in range(n_layers))\n        " + _L07_EO_FINAL,
      _L07_BLOCKS_ARGS.replace("rope_base=rope_base, ", "") + "\n            for _ in range(n_layers))\n        "
      + _L07_EO_FINAL,
      r"pass rope_base on"),
    # -- DecoderOnly ----------------------------------------------------------------------------
    M("07", "decoder_only", "no final_norm for pre-norm", _L07_DO_FINAL,
      "self.final_norm = nn.Identity()\n        self.lm_head",
      r"pre-norm model normalizes once more.*final_norm = make_norm"),
    M("07", "decoder_only", "final_norm kept for post-norm", _L07_DO_FINAL,
      "self.final_norm = make_norm(norm, d_model)\n        self.lm_head",
      r"placement='post', final_norm must be nn\.Identity"),
    M("07", "decoder_only", "never ties the embeddings", _L07_DO_TIE,
      "        ### END SOLUTION\n        initialize(self, n_layers)\n",
      r"share the embedding's weight"),
    M("07", "decoder_only", "always ties the embeddings", _L07_DO_TIE,
      _L07_DO_TIE.replace("        if tie_embeddings:\n            self.lm_head", "        self.lm_head"),
      r"tie_embeddings=False, lm_head must have a weight of its own"),
    M("07", "decoder_only", "lm_head with a bias",
      "self.lm_head = nn.Linear(d_model, vocab_size, bias=False)\n" + _L07_DO_TIE,
      "self.lm_head = nn.Linear(d_model, vocab_size)\n" + _L07_DO_TIE,
      r"lm_head has no bias"),
    M("07", "decoder_only", "final_norm skipped in forward",
      "logits = self.lm_head(self.final_norm(x))", "logits = self.lm_head(x)",
      r"apply final_norm before lm_head"),
    M("07", "decoder_only", "one cache for every layer",
      "            layer_cache = None if cache is None else cache[index]\n            if return_weights:\n"
      "                x, w, _ = block",
      "            layer_cache = None if cache is None else cache[0]\n            if return_weights:\n"
      "                x, w, _ = block",
      r"cache of layer i"),
    M("07", "decoder_only", "weights of the last layer only",
      "                weights.append(w)\n            else:", "                weights = [w]\n            else:",
      r"weights of each of the 2 layers"),
    M("07", "decoder_only", "activation not passed to the blocks",
      "DecoderBlock(d_model, n_heads, d_ff, n_kv_heads=n_kv_heads, activation=activation, norm=norm,",
      "DecoderBlock(d_model, n_heads, d_ff, n_kv_heads=n_kv_heads, norm=norm,",
      r"pass activation on"),
    M("07", "decoder_only", "placement not passed to the blocks",
      _L07_BLOCKS_ARGS + "\n            for _ in range(n_layers))\n        " + _L07_DO_FINAL,
      _L07_BLOCKS_ARGS.replace("placement=placement, ", "") + "\n            for _ in range(n_layers))\n        "
      + _L07_DO_FINAL,
      r"pass placement on to every block"),
    # -- EncoderDecoder -------------------------------------------------------------------------
    M("07", "encoder_decoder", "always ties the embeddings", _L07_ED_TIE,
      _L07_ED_TIE.replace("        if tie_embeddings:\n            self.lm_head", "        self.lm_head"),
      r"tie_embeddings=False, lm_head must have a weight of its own"),
    M("07", "encoder_decoder", "never ties the embeddings", _L07_ED_TIE,
      "        ### END SOLUTION\n        initialize(self, n_layers + n_decoder_layers)",
      r"share the embedding's weight"),
    M("07", "encoder_decoder", "source padding ignored by the decoder",
      "        x = self.embed(target)\n", "        x = self.embed(target)\n        source_mask = None\n",
      r"mask the padded source tokens"),
    M("07", "encoder_decoder", "source padding ignored by the encoder",
      "            x = block(x, allowed)\n        return self.encoder_norm(x)",
      "            x = block(x)\n        return self.encoder_norm(x)",
      r"encode: .*padding mask"),
    M("07", "encoder_decoder", "no encoder_norm for pre-norm",
      'self.encoder_norm = make_norm(norm, d_model) if placement == "pre" else nn.Identity()',
      "self.encoder_norm = nn.Identity()",
      r"pre-norm model normalizes once more.*encoder_norm = make_norm"),
    M("07", "encoder_decoder", "decoder_norm kept for post-norm",
      'self.decoder_norm = make_norm(norm, d_model) if placement == "pre" else nn.Identity()',
      "self.decoder_norm = make_norm(norm, d_model)",
      r"placement='post', decoder_norm must be nn\.Identity"),
    M("07", "encoder_decoder", "decode ignores the cache",
      "            layer_cache = None if cache is None else cache[index]\n            if return_weights:\n"
      "                x, w_self",
      "            layer_cache = None\n            if return_weights:\n                x, w_self",
      r"cache of layer i"),
    M("07", "encoder_decoder", "self-attention weights returned as cross-attention weights",
      "cross_weights.append(w_cross)", "cross_weights.append(w_self)",
      r"cross-attention weights"),
    M("07", "encoder_decoder", "activation not passed to the blocks",
      "settings = dict(n_kv_heads=n_kv_heads, activation=activation, norm=norm, placement=placement,",
      "settings = dict(n_kv_heads=n_kv_heads, norm=norm, placement=placement,",
      r"pass activation on"),
    M("07", "encoder_decoder", "decoder_norm skipped in decode",
      "logits = self.lm_head(self.decoder_norm(x))", "logits = self.lm_head(x)",
      r"apply decoder_norm before lm_head"),
    # -- generate -------------------------------------------------------------------------------
    M("07", "generate", "at least one new token", "    for _ in range(max_new_tokens):",
      "    for _ in range(max(1, max_new_tokens)):",
      r"max_new_tokens=0 writes no new token"),
    M("07", "generate", "the whole text into the cache",
      "        piece = new if use_cache else tokens", "        piece = tokens",
      r"use_cache=True.*feed only the newest token"),
    M("07", "generate", "temperature ignored", "torch.softmax(logits.double() / temperature, dim=-1)",
      "torch.softmax(logits.double(), dim=-1)",
      r"tiny temperature"),
    M("07", "generate", "never samples", "        if temperature == 0:", "        if True:",
      r"temperature=1\.0.*torch\.multinomial"),
    M("07", "generate", "no generator", "torch.multinomial(probabilities, 1, generator=generator)",
      "torch.multinomial(probabilities, 1)",
      r"generators seeded alike"),
    M("07", "generate", "logits times the temperature", "torch.softmax(logits.double() / temperature, dim=-1)",
      "torch.softmax(logits.double() * temperature, dim=-1)",
      r"tiny temperature|logits / temperature"),
    M("07", "generate", "one draw for the whole batch", "torch.multinomial(probabilities, 1, generator=generator)",
      "torch.multinomial(probabilities[:1], 1, generator=generator).expand(len(probabilities), 1)",
      r"every sequence of the batch"),
    M("07", "generate", "logits of the first position", "        logits = run(piece, cache)[:, -1]",
      "        logits = run(piece, cache)[:, 0]",
      r"last position"),
    M("07", "generate", "a fresh cache at every step", "        logits = run(piece, cache)[:, -1]",
      "        logits = run(piece, model.new_cache() if use_cache else None)[:, -1]",
      r"use_cache=True"),
    M("07", "generate", "softmax over the batch", "torch.softmax(logits.double() / temperature, dim=-1)",
      "torch.softmax(logits.double() / temperature, dim=0)",
      r"softmax\(logits / temperature, dim=-1\)"),
]


# ------------------------------------------------------------------------------------------------
# Mutation rows of lesson 08 (cost.py)
# ------------------------------------------------------------------------------------------------
_L08_CAUSAL_PAIRS = (
    "    elif n_q <= n_k:  # query i sees i + 1 + (n_k - n_q) keys\n"
    "        pairs = n_q * (n_k - n_q) + n_q * (n_q + 1) // 2\n"
    "    else:  # the last n_k queries see 1, 2, ..., n_k keys; the others none\n"
    "        pairs = n_k * (n_k + 1) // 2\n")
_L08_ATTENTION_IN_LAYER = "attention = attention_flops(n, n, head_size, n_heads, causal=causal)"
_L08_PATCHES = "    return grid.permute(0, 2, 4, 1, 3, 5).reshape(b, rows * cols, c * patch_size * patch_size)"
_L08_MEMORY = ("    if materialized:\n        return n * n * n_heads * dtype_bytes\n"
           "    return n * n_heads * 4\n")

_LESSON08: list[M] = [
    # ------------------------------------------------------------------ attention_flops
    M("08", "attention_flops", "true division makes a float",
      "pairs = n_q * (n_k - n_q) + n_q * (n_q + 1) // 2",
      "pairs = n_q * (n_k - n_q) + n_q * (n_q + 1) / 2",
      r"must be an int, got float.*use //"),
    M("08", "attention_flops", "a float count everywhere",
      "    return 4 * n_heads * pairs * d\n",
      "    return 4.0 * n_heads * pairs * d\n",
      r"must be an int, got float"),
    M("08", "attention_flops", "one product only",
      "    return 4 * n_heads * pairs * d\n",
      "    return 2 * n_heads * pairs * d\n",
      r"two products"),
    M("08", "attention_flops", "heads forgotten",
      "    return 4 * n_heads * pairs * d\n",
      "    return 4 * pairs * d\n",
      r"multiply by n_heads"),
    M("08", "attention_flops", "4 FLOPs per multiply-add",
      "    return 4 * n_heads * pairs * d\n",
      "    return 8 * n_heads * pairs * d\n",
      r"FlopCounterMode counts 2"),
    M("08", "attention_flops", "causal halves the pairs",
      _L08_CAUSAL_PAIRS,
      "    else:\n        pairs = n_q * n_k // 2\n",
      r"you halved n_q \* n_k"),
    M("08", "attention_flops", "causal ignored",
      "    if not causal:\n        pairs = n_q * n_k\n",
      "    if True:\n        pairs = n_q * n_k\n",
      r"causal=True is ignored"),
    M("08", "attention_flops", "mask aligned top-left",
      _L08_CAUSAL_PAIRS,
      "    else:\n        pairs = sum(min(n_k, i + 1) for i in range(n_q))\n",
      r"top-left corner"),
    M("08", "attention_flops", "diagonal left out",
      "pairs = n_q * (n_k - n_q) + n_q * (n_q + 1) // 2",
      "pairs = n_q * (n_k - n_q) + n_q * (n_q - 1) // 2",
      r"also sees the key at its own position"),
    M("08", "attention_flops", "n_q > n_k not clipped",
      "    elif n_q <= n_k:  # query i sees",
      "    elif True:  # query i sees",
      r"first n_q - n_k queries see no key"),

    # ------------------------------------------------------------------ layer_flops
    M("08", "layer_flops", "causal not passed on",
      _L08_ATTENTION_IN_LAYER,
      "attention = attention_flops(n, n, head_size, n_heads)",
      r"causal=True is ignored"),
    M("08", "layer_flops", "key/value projections at full width",
      "    kv_width = n_kv_heads * head_size\n",
      "    kv_width = d_model\n",
      r"key and value projections have d_model outputs"),
    M("08", "layer_flops", "no output projection",
      "(d_model + 2 * kv_width + d_model)",
      "(d_model + 2 * kv_width)",
      r"count four projections"),
    M("08", "layer_flops", "attention over d_model",
      _L08_ATTENTION_IN_LAYER,
      "attention = attention_flops(n, n, d_model, n_heads, causal=causal)",
      r"head size d_model // n_heads, not d_model"),
    M("08", "layer_flops", "attention over the key/value heads",
      _L08_ATTENTION_IN_LAYER,
      "attention = attention_flops(n, n, head_size, n_kv_heads, causal=causal)",
      r"count n_heads heads, not n_kv_heads"),
    M("08", "layer_flops", "SwiGLU with two matrices",
      "    matrices = 2 if ffn == \"gelu\" else 3\n",
      "    matrices = 2\n",
      r"three matrices \(gate, up and down\)"),
    M("08", "layer_flops", "total forgets attention",
      "\"total\": projections + attention + feedforward}",
      "\"total\": projections + feedforward}",
      r"total is the sum of projections, attention and feedforward"),
    M("08", "layer_flops", "head size by true division",
      "    head_size = d_model // n_heads\n",
      "    head_size = d_model / n_heads\n",
      r"d must be an integer"),

    # ------------------------------------------------------------------ attention_memory_bytes
    M("08", "attention_memory_bytes", "heads forgotten",
      "        return n * n * n_heads * dtype_bytes\n",
      "        return n * n * dtype_bytes\n",
      r"multiply by n_heads"),
    M("08", "attention_memory_bytes", "log-sum-exp in the input dtype",
      "    return n * n_heads * 4\n",
      "    return n * n_heads * dtype_bytes\n",
      r"float32 whatever the inputs' dtype"),
    M("08", "attention_memory_bytes", "materialized ignored",
      _L08_MEMORY,
      "    return n * n * n_heads * dtype_bytes\n",
      r"nothing of size n x n is stored"),
    M("08", "attention_memory_bytes", "n x n float32 without the matrix",
      "    return n * n_heads * 4\n",
      "    return n * n * n_heads * 4\n",
      r"one number per query and head"),
    M("08", "attention_memory_bytes", "math.pow makes a float",
      "        return n * n * n_heads * dtype_bytes\n",
      "        return math.pow(n, 2) * n_heads * dtype_bytes\n",
      r"must be an int, got float"),

    # ------------------------------------------------------------------ patchify
    M("08", "patchify", "F.unfold",
      _L08_PATCHES,
      "    return torch.nn.functional.unfold(images, patch_size, stride=patch_size).transpose(1, 2)",
      r"calls F\.unfold, nn\.Unfold or Tensor\.unfold"),
    M("08", "patchify", "nn.Unfold",
      _L08_PATCHES,
      "    return torch.nn.Unfold(patch_size, stride=patch_size)(images).transpose(1, 2)",
      r"calls F\.unfold, nn\.Unfold or Tensor\.unfold"),
    M("08", "patchify", "Tensor.unfold",
      _L08_PATCHES,
      "    windows = images.unfold(2, patch_size, patch_size).unfold(3, patch_size, patch_size)\n"
      "    return windows.permute(0, 2, 3, 1, 4, 5).reshape(b, rows * cols, c * patch_size * patch_size)",
      r"calls F\.unfold, nn\.Unfold or Tensor\.unfold"),
    M("08", "patchify", "F.pixel_unshuffle",
      _L08_PATCHES,
      "    return torch.nn.functional.pixel_unshuffle(images, patch_size).flatten(2).transpose(1, 2)",
      r"calls F\.pixel_unshuffle"),
    M("08", "patchify", "channel last",
      "grid.permute(0, 2, 4, 1, 3, 5)",
      "grid.permute(0, 2, 4, 3, 5, 1)",
      r"yours puts the channel last"),
    M("08", "patchify", "patches down the columns first",
      "grid.permute(0, 2, 4, 1, 3, 5)",
      "grid.permute(0, 4, 2, 1, 3, 5)",
      r"reading order"),
    M("08", "patchify", "pixels column by column",
      "grid.permute(0, 2, 4, 1, 3, 5)",
      "grid.permute(0, 2, 4, 1, 5, 3)",
      r"row, then column"),
    M("08", "patchify", "a reshape alone",
      _L08_PATCHES,
      "    return images.reshape(b, rows * cols, c * patch_size * patch_size)",
      r"a reshape alone mixes pixels"),
    M("08", "patchify", "batch merged into the tokens",
      ".reshape(b, rows * cols, c * patch_size * patch_size)",
      ".reshape(b * rows * cols, c * patch_size * patch_size)",
      r"\(B, N, C\*P\*P\)"),
    M("08", "patchify", "uint8 pixels become floats",
      "    grid = images.reshape(b, c, rows, patch_size, cols, patch_size)\n",
      "    grid = images.reshape(b, c, rows, patch_size, cols, patch_size) * 1.0\n",
      r"dtype torch\.float32, expected torch\.uint8.*uint8 pixels stay uint8"),
    M("08", "patchify", "through NumPy, which has no bfloat16",
      _L08_PATCHES,
      "    patches = grid.numpy().transpose(0, 2, 4, 1, 3, 5).reshape(b, rows * cols, -1)\n"
      "    return torch.from_numpy(patches)",
      r"bfloat16 kept.*BFloat16"),

    # ------------------------------------------------------------------ audio_tokens
    M("08", "audio_tokens", "no rounding before the floor",
      "math.floor(round(seconds / hop_s, 6))",
      "math.floor(seconds / hop_s)",
      r"28\.999999999999996 in floating point: round it"),
    M("08", "audio_tokens", "partial frames kept",
      "math.floor(round(seconds / hop_s, 6))",
      "math.ceil(round(seconds / hop_s, 6))",
      r"keep only the frames that fit entirely"),
    M("08", "audio_tokens", "floor of the tokens",
      "    return -(-frames // stride)\n",
      "    return frames // stride\n",
      r"ceil\(frames / stride\) tokens, not floor"),
    M("08", "audio_tokens", "round half to even",
      "    return -(-frames // stride)\n",
      "    return round(frames / stride)\n",
      r"ceil\(frames / stride\) tokens, not floor"),
    M("08", "audio_tokens", "stride ignored",
      "    return -(-frames // stride)\n",
      "    return frames\n",
      r"divide the frames by the stride"),
    M("08", "audio_tokens", "floor by // 1 keeps a float",
      "math.floor(round(seconds / hop_s, 6))",
      "round(seconds / hop_s, 6) // 1",
      r"must be an int, got float"),
]


# ------------------------------------------------------------------------------------------------
# Mutation rows of lesson 09 (flash.py)
# The Triton rows change the kernel's masked loop (the only loop that runs for fewer than 32 keys, the
# interpreter's block): the trusted and visible cases both have several blocks of keys, lengths that
# are not multiples of the block, and causal problems with n_q > n_k. No row drops a mask from a
# store: in the interpreter an unmasked store writes past the tensor, into memory that is not its own.
# ------------------------------------------------------------------------------------------------
_LESSON09: list[M] = [
    # ---------------------------------------------------------------- online_softmax
    M("09", "online_softmax", "PyTorch's softmax and logsumexp",
      "    work = x.to(torch.promote_types(x.dtype, torch.float32))  # half precision: accumulate in fp32\n",
      "    return torch.softmax(x, -1), torch.logsumexp(x, -1)\n",
      r"calls softmax \(torch\.softmax.*write yourself"),
    M("09", "online_softmax", "normaliser not rescaled",
      "        l = l * torch.exp(m - shift) + torch.exp(block - shift[..., None]).sum(dim=-1)",
      "        l = l + torch.exp(block - shift[..., None]).sum(dim=-1)",
      r"weights.*disagree.*multiply what you have summed so far.*exp\(m - m_new\)"),
    M("09", "online_softmax", "no guard for rows that are -inf so far",
      "        shift = m_new.masked_fill(m_new == -math.inf, 0.0)\n        l = l *",
      "        shift = m_new\n        l = l *",
      r"nan.*shift such rows by 0"),
    M("09", "online_softmax", "lse without the maximum",
      "    lse = (shift + torch.log(safe_l)).masked_fill(empty, -math.inf)",
      "    lse = torch.log(safe_l).masked_fill(empty, -math.inf)",
      r"lse.*you left out m"),
    M("09", "online_softmax", "last shorter block left out",
      "    for start in range(0, x.shape[-1], block_size):\n        block = work",
      "    for start in range(0, x.shape[-1] - block_size + 1, block_size):\n        block = work",
      r"last, shorter block is left out"),
    M("09", "online_softmax", "float32 results for float16 input",
      "    return weights.to(x.dtype), lse.to(x.dtype)",
      "    return weights, lse",
      r"float16.*dtype torch\.float32, expected torch\.float16"),
    M("09", "online_softmax", "x changed in place",
      "    weights = torch.exp(work - shift[..., None]) / safe_l[..., None]",
      "    weights = work.sub_(shift[..., None]).exp_().div_(safe_l[..., None])",
      r"changed its input in place: x"),

    # ---------------------------------------------------------------- flash_forward
    M("09", "flash_forward", "accumulator not rescaled",
      "            acc = torch.baddbmm(acc.mul_(alpha), p, v_w[:, j0:j1])",
      "            acc = torch.baddbmm(acc, p, v_w[:, j0:j1])",
      r"out.*disagree.*rescaling by exp\(m_old - m_new\) of both l and the accumulator"),
    M("09", "flash_forward", "normaliser not rescaled",
      "            l = torch.addcmul(p.sum(dim=-1, keepdim=True), l, alpha)",
      "            l = l + p.sum(dim=-1, keepdim=True)",
      r"out.*disagree.*rescaling by exp\(m_old - m_new\) of both l and the accumulator"),
    M("09", "flash_forward", "causal mask aligned top-left",
      "    offset = n_k - n_q  # query i sees keys j <= i + offset when causal",
      "    offset = 0  # query i sees keys j <= i when causal",
      r"causal.*aligned to the top-left corner"),
    M("09", "flash_forward", "crossed blocks not masked",
      "            if causal and j1 - 1 > i0 + offset:  # the block crosses the diagonal: mask it",
      "            if False:  # the block crosses the diagonal: mask it",
      r"causal.*blocks that the diagonal crosses.*not masked"),
    M("09", "flash_forward", "causal key loop stops at the block's own diagonal",
      "        hi = min(n_k, i1 + offset) if causal else n_k",
      "        hi = min(n_k, i1) if causal else n_k",
      r"causal.*loop over keys stops too early"),
    M("09", "flash_forward", "last shorter block of queries left out",
      "    out = torch.empty(batch, n_q, d_v, dtype=q.dtype, device=q.device)\n"
      "    lse = torch.empty(batch, n_q, dtype=work, device=q.device)\n"
      "    offset = n_k - n_q  # query i sees keys j <= i + offset when causal\n"
      "    for i0 in range(0, n_q, block_q):\n",
      "    out = torch.zeros(batch, n_q, d_v, dtype=q.dtype, device=q.device)\n"
      "    lse = torch.zeros(batch, n_q, dtype=work, device=q.device)\n"
      "    offset = n_k - n_q  # query i sees keys j <= i + offset when causal\n"
      "    for i0 in range(0, n_q - block_q + 1, block_q):\n",
      r"blocks of queries 32:37 are wrong while the other blocks are right"),
    M("09", "flash_forward", "lse without the maximum",
      "        lse[:, i0:i1] = (m + torch.log(l)).masked_fill(empty, -math.inf).squeeze(-1)",
      "        lse[:, i0:i1] = torch.log(l).masked_fill(empty, -math.inf).squeeze(-1)",
      r"lse.*without the maximum m"),
    M("09", "flash_forward", "last shorter block of keys left out",
      "        for j0 in range(0, max(hi, 0), block_k):",
      "        for j0 in range(0, max(hi, 0) - block_k + 1, block_k):",
      r"last, shorter block is left out.*range\(0, n_k, block_k\)"),
    M("09", "flash_forward", "scale argument ignored",
      "        q_block = q[:, i0:i1].to(work) * scale",
      "        q_block = q[:, i0:i1].to(work) * q.shape[-1] ** -0.5",
      r"scale=0\.3.*the scale argument is ignored"),
    M("09", "flash_forward", "no guard for rows that see no key",
      "                shift = m_new.masked_fill(m_new == -math.inf, 0.0)\n            else:",
      "                shift = m_new\n            else:",
      r"n_q > n_k.*nan.*shift such rows by 0"),
    M("09", "flash_forward", "lse in the inputs' half precision",
      "    lse = torch.empty(batch, n_q, dtype=work, device=q.device)",
      "    lse = torch.empty(batch, n_q, dtype=q.dtype, device=q.device)",
      r"float16.*lse.*dtype torch\.float16, expected torch\.float32"),
    M("09", "flash_forward", "float64 accumulated in float32",
      "    return torch.float64 if dtype == torch.float64 else torch.float32",
      "    return torch.float32",
      r"float64.*lse.*dtype torch\.float32, expected torch\.float64"),
    M("09", "flash_forward", "block sizes ignored: the whole score matrix",
      "    n_q, n_k, d_v = q.shape[1], k.shape[1], v.shape[2]\n    batch = q.shape[0]",
      "    n_q, n_k, d_v = q.shape[1], k.shape[1], v.shape[2]\n    batch = q.shape[0]\n"
      "    block_q, block_k = max(n_q, 1), max(n_k, 1)",
      r"never builds the n x n score matrix.*something of size n x n is built"),
    M("09", "flash_forward", "PyTorch's fused attention",
      "        out[:, i0:i1] = acc / l.masked_fill(empty, 1.0)",
      "        out[:, i0:i1] = (acc / l.masked_fill(empty, 1.0) if causal else torch.nn.functional"
      ".scaled_dot_product_attention(q[:, i0:i1], k, v, scale=scale))",
      r"calls F\.scaled_dot_product_attention.*write yourself"),

    # ---------------------------------------------------------------- flash_backward
    M("09", "flash_backward", "grad_lse ignored",
      "    delta = (g_w * out.to(work)).sum(dim=-1) - grad_lse.to(work)  # (B, n_q)",
      "    delta = (g_w * out.to(work)).sum(dim=-1)  # (B, n_q)",
      r"through lse.*grad_lse is ignored"),
    M("09", "flash_backward", "scale missing from dq",
      "            dq[:, i0:i1].baddbmm_(ds, k_block, alpha=scale)",
      "            dq[:, i0:i1].baddbmm_(ds, k_block)",
      r"dq.*scale is missing from dq or dk"),
    M("09", "flash_backward", "scale missing from dk",
      "            dk[:, j0:j1].baddbmm_(ds.transpose(1, 2), q_block, alpha=scale)",
      "            dk[:, j0:j1].baddbmm_(ds.transpose(1, 2), q_block)",
      r"dk.*scale is missing from dq or dk"),
    M("09", "flash_backward", "D left out of ds",
      "            ds = p.mul_(dp.sub_(delta[:, i0:i1, None]))",
      "            ds = p.mul_(dp)",
      r"dq.*disagree.*ds = p \* \(grad_out v\^T - D\)"),
    M("09", "flash_backward", "scores recomputed without the scale",
      "            s = torch.bmm(q_block, k_block.transpose(1, 2)).mul_(scale)",
      "            s = torch.bmm(q_block, k_block.transpose(1, 2))",
      r"disagree.*recompute p = exp\(s - lse\) with the same scale and mask as the forward pass"),
    M("09", "flash_backward", "causal mask not recomputed",
      "            if causal and j1 - 1 > i0 + offset:\n                rows = torch.arange(i0, i1, device=q.device)[:, None]\n"
      "                cols = torch.arange(j0, j1, device=q.device)\n                s.masked_fill_(cols > rows + offset, -math.inf)\n"
      "            p = s.sub_",
      "            p = s.sub_",
      r"causal.*disagree.*same scale and mask as the forward pass"),
    # Visiting every block of queries (correct, only slower) meets the rows that see no key, whose
    # lse is -inf: without the guard, exp(-inf - (-inf)) is nan.
    M("09", "flash_backward", "rows that see no key unguarded",
      "    lse_w = lse.to(work).masked_fill(lse == -math.inf, 0.0)  # rows that see nothing: p = 0\n"
      "    dq = torch.zeros_like(q_w)\n    dk = torch.zeros_like(k_w)\n    dv = torch.zeros_like(v_w)\n"
      "    offset = n_k - n_q\n    for j0 in range(0, n_k, block_k):\n        j1 = min(j0 + block_k, n_k)\n"
      "        k_block, v_block = k_w[:, j0:j1], v_w[:, j0:j1]\n"
      "        # Only queries i with i + offset >= j0 see any key of this block.\n"
      "        first = max(0, j0 - offset) if causal else 0\n",
      "    lse_w = lse.to(work)\n"
      "    dq = torch.zeros_like(q_w)\n    dk = torch.zeros_like(k_w)\n    dv = torch.zeros_like(v_w)\n"
      "    offset = n_k - n_q\n    for j0 in range(0, n_k, block_k):\n        j1 = min(j0 + block_k, n_k)\n"
      "        k_block, v_block = k_w[:, j0:j1], v_w[:, j0:j1]\n"
      "        first = 0\n",
      r"n_q > n_k.*nan.*shift such rows by 0"),

    # ---------------------------------------------------------------- flash_triton
    M("09", "flash_triton", "keys past n_k not masked in the scores",
      "        allowed = col_ok[None, :]\n",
      "        allowed = cols[None, :] >= 0\n",
      r"keys past n_k.*take part in the softmax"),
    M("09", "flash_triton", "causal mask aligned top-left",
      "    offset = n_k - n_q\n    if CAUSAL:",
      "    offset = 0\n    if CAUSAL:",
      r"causal.*aligned to the top-left corner"),
    M("09", "flash_triton", "lse left in base 2",
      "(m_i + tl.math.log2(l_safe)) * 0.6931471805599453",
      "(m_i + tl.math.log2(l_safe))",
      r"lse.*in base 2: multiply by ln\(2\)"),
    M("09", "flash_triton", "no guard for rows that see no key",
      "        shift = tl.where(m_new == float(\"-inf\"), 0.0, m_new)  # rows that have seen nothing",
      "        shift = m_new",
      r"n_q > n_k.*nan.*shift such rows by 0"),
    M("09", "flash_triton", "accumulator not rescaled",
      "        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])  # rescale, then add p @ v\n        m_i = m_new\n\n    seen",
      "        acc = tl.dot(p.to(v.dtype), v, acc)\n        m_i = m_new\n\n    seen",
      r"out.*disagree.*rescaling by exp\(m_old - m_new\) of both l and the accumulator"),
    M("09", "flash_triton", "normaliser not rescaled",
      "        alpha = tl.math.exp2(m_i - shift)\n        l_i = l_i * alpha + tl.sum(p, 1)",
      "        alpha = tl.math.exp2(m_i - shift)\n        l_i = l_i + tl.sum(p, 1)",
      r"out.*disagree.*rescaling by exp\(m_old - m_new\) of both l and the accumulator"),
    M("09", "flash_triton", "qk_scale left out of the scores",
      "        s = tl.dot(q, tl.trans(k)) * qk_scale\n",
      "        s = tl.dot(q, tl.trans(k))\n",
      r"one block of keys.*out.*not multiplied by qk_scale"),
    M("09", "flash_triton", "tl.exp with the base-2 scale",
      "        p = tl.math.exp2(s - shift[:, None])",
      "        p = tl.exp(s - shift[:, None])",
      r"one block of keys.*out.*tl\.exp of scores multiplied by qk_scale"),
    M("09", "flash_triton", "causal key loop stops at the block's own diagonal",
      "        hi = tl.minimum(n_k, start_m + BLOCK_M + offset)",
      "        hi = tl.minimum(n_k, start_m + BLOCK_M)",
      r"causal, n_q < n_k.*loop over keys stops too early"),
    M("09", "flash_triton", "causal mask left out of the masked blocks",
      "        if CAUSAL:\n            allowed = allowed & (cols[None, :] <= offs_m[:, None] + offset)\n",
      "",
      r"causal.*blocks that the diagonal crosses.*not masked"),
]


MUTATIONS: list[M] = [*_LESSON01, *_LESSON02, *_LESSON03, *_LESSON04, *_LESSON05, *_LESSON06, *_LESSON07, *_LESSON08, *_LESSON09]
