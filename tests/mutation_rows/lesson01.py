"""Mutation rows of lesson 01 (additive.py); merged into tests/mutation_table.py when done."""

from tests.parity import Mutation as M

_SCORES = "hidden = torch.tanh((query @ W_q).unsqueeze(-2) + keys @ W_k)  # (..., n, d_attn)\n    return hidden @ v"
_MASKED = "usable = scores if mask is None else scores.masked_fill(~mask, -math.inf)"
_SOFTMAX = "weights = torch.softmax(usable, dim=-1)"
_CONTEXT = "context = (weights.unsqueeze(-2) @ values).squeeze(-2)"
_RETURN = "return context, weights  #"
_PARAMETERS = ("        self.W_q = nn.Parameter(torch.empty(d_q, d_attn))\n"
               "        self.W_k = nn.Parameter(torch.empty(d_k, d_attn))\n"
               "        self.v = nn.Parameter(torch.empty(d_attn))\n"
               "        ### END SOLUTION\n"
               "        self.reset_parameters()\n")
_FORWARD = "return additive_attention(query, keys, values, self.W_q, self.W_k, self.v, mask)"
_ATTEND = "context, weights = self.attention(hidden, encoder_states, encoder_states, mask)"
_CELL = "cell_input = torch.cat([self.embedding(prev_tokens), context], dim=-1)"
_OUTPUT = "logits = self.output(torch.cat([new_hidden, context], dim=-1))"
_STEP_RETURN = "return logits, new_hidden, weights  #"

ROWS: list[M] = [
    # ---------------------------------------------------------------- additive_scores
    M("01", "additive_scores", "no tanh", _SCORES,
      "hidden = (query @ W_q).unsqueeze(-2) + keys @ W_k\n    return hidden @ v",
      r"you left out the tanh"),
    M("01", "additive_scores", "tanh after v", _SCORES,
      "hidden = (query @ W_q).unsqueeze(-2) + keys @ W_k\n    return torch.tanh(hidden @ v)",
      r"you applied tanh after multiplying by v"),
    M("01", "additive_scores", "sigmoid instead of tanh", _SCORES,
      "hidden = torch.sigmoid((query @ W_q).unsqueeze(-2) + keys @ W_k)\n    return hidden @ v",
      r"sigmoid or another nonlinearity"),
    M("01", "additive_scores", "swapped matrices", _SCORES,
      "hidden = torch.tanh((query @ W_k).unsqueeze(-2) + keys @ W_q)\n    return hidden @ v",
      r"you swapped the matrices"),
    M("01", "additive_scores", "sum instead of v", _SCORES,
      "hidden = torch.tanh((query @ W_q).unsqueeze(-2) + keys @ W_k)\n    return hidden.sum(-1)",
      r"you summed over the attention axis"),
    M("01", "additive_scores", "attention axis not reduced", _SCORES,
      "hidden = torch.tanh((query @ W_q).unsqueeze(-2) + keys @ W_k)\n    return hidden",
      r"you did not reduce the attention axis"),
    M("01", "additive_scores", "squeeze without an axis", _SCORES,
      "hidden = torch.tanh((query @ W_q).unsqueeze(-2) + keys @ W_k)\n    return (hidden @ v.unsqueeze(-1)).squeeze()",
      r"size-1 dimension went missing.*squeeze\(\) without an axis"),
    M("01", "additive_scores", "query unsqueezed in place", _SCORES,
      "hidden = torch.tanh(query.unsqueeze_(-2) @ W_q + keys @ W_k)\n    return hidden @ v",
      r"changed its input in place: query"),
    M("01", "additive_scores", "float64 result", _SCORES,
      "hidden = torch.tanh((query @ W_q).unsqueeze(-2) + keys @ W_k)\n    return (hidden @ v).double()",
      r"scores of float32 inputs has dtype torch\.float64"),
    M("01", "additive_scores", "one batch axis only (einsum)", _SCORES,
      "hidden = torch.tanh(torch.einsum('bd,da->ba', query, W_q)[:, None] + torch.einsum('bnd,da->bna', keys, W_k))\n"
      "    return hidden @ v",
      r"case 'batch dimensions \(2, 3\)'"),
    M("01", "additive_scores", "query reshaped to the keys' batch", _SCORES,
      "hidden = torch.tanh((query @ W_q).reshape(*keys.shape[:-2], 1, W_q.shape[1]) + keys @ W_k)\n"
      "    return hidden @ v",
      r"case 'several queries scoring shared keys'"),
    M("01", "additive_scores", "key axis inserted at 1", _SCORES,
      "hidden = torch.tanh((query @ W_q).unsqueeze(1) + keys @ W_k)\n    return hidden @ v",
      r"case 'batch dimensions \(2, 3\)'"),

    # ---------------------------------------------------------------- additive_attention
    M("01", "additive_attention", "mask ignored", _MASKED, "usable = scores",
      r"the mask is ignored"),
    M("01", "additive_attention", "mask after the softmax", f"{_MASKED}\n    {_SOFTMAX}",
      "weights = torch.softmax(scores, dim=-1) * (1 if mask is None else mask)",
      r"you zeroed the padding weights after the softmax"),
    M("01", "additive_attention", "inverted mask", "masked_fill(~mask, -math.inf)", "masked_fill(mask, -math.inf)",
      r"True means 'may be used'"),
    M("01", "additive_attention", "finite fill value", "masked_fill(~mask, -math.inf)", "masked_fill(~mask, -50.0)",
      r"large negative number.*Fill them with -inf"),
    M("01", "additive_attention", "softmax over the batch axis", _SOFTMAX, "weights = torch.softmax(usable, dim=0)",
      r"your softmax runs over the batch axis"),
    M("01", "additive_attention", "scores returned as weights", _RETURN, "return context, scores  #",
      r"you returned the scores, not the weights"),
    M("01", "additive_attention", "keys averaged instead of values", _CONTEXT,
      "context = (weights.unsqueeze(-2) @ keys).squeeze(-2)",
      r"the context averages the values"),
    M("01", "additive_attention", "(weights, context) returned", _RETURN, "return weights, context  #",
      r"did you return \(weights, context\) instead of \(context, weights\)"),
    M("01", "additive_attention", "squeeze without an axis", _CONTEXT,
      "context = (weights.unsqueeze(-2) @ values).squeeze()",
      r"size-1 dimension went missing.*squeeze\(\) without an axis"),
    M("01", "additive_attention", "exp without the max shift", _SOFTMAX,
      "weights = usable.exp() / usable.exp().sum(dim=-1, keepdim=True)",
      r"exp overflows"),
    M("01", "additive_attention", "weights detached", _CONTEXT,
      "context = (weights.detach().unsqueeze(-2) @ values).squeeze(-2)",
      r"W_q got no gradient from a loss on the context"),
    M("01", "additive_attention", "mask read as lengths", "masked_fill(~mask, -math.inf)",
      "masked_fill(torch.arange(mask.shape[-1]) >= mask.sum(-1, keepdim=True), -math.inf)",
      r"case 'a scattered boolean mask'.*you read the mask as a padding mask"),
    M("01", "additive_attention", "boolean indexing needs the full mask", _MASKED,
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
    M("01", "additive_module", "zeros instead of reset_parameters", _PARAMETERS,
      _PARAMETERS.replace("torch.empty", "torch.zeros").replace("        self.reset_parameters()\n", ""),
      r"not initialised by reset_parameters"),
    M("01", "additive_module", "randn instead of reset_parameters", _PARAMETERS,
      _PARAMETERS.replace("torch.empty", "torch.randn").replace("        self.reset_parameters()\n", ""),
      r"not initialised by reset_parameters.*uniformly in ±1/sqrt"),
    M("01", "additive_module", "a generator of its own", "parameter.uniform_(-bound, bound)",
      "parameter.uniform_(-bound, bound, generator=torch.Generator().manual_seed(0))",
      r"modules built with different seeds have identical parameters"),
    M("01", "additive_module", "an unused extra parameter", "        self.v = nn.Parameter(torch.empty(d_attn))\n",
      "        self.v = nn.Parameter(torch.empty(d_attn))\n        self.bias = nn.Parameter(torch.zeros(d_attn))\n",
      r"has parameters bias besides W_q, W_k and v"),
    M("01", "additive_module", "mask not passed on", _FORWARD,
      "return additive_attention(query, keys, values, self.W_q, self.W_k, self.v)",
      r"pass the mask on to additive_attention"),
    M("01", "additive_module", "W_q and W_k swapped in forward", _FORWARD,
      "return additive_attention(query, keys, values, self.W_k, self.W_q, self.v, mask)",
      r"W_q must be \(d_q, d_attn\)"),
    M("01", "additive_module", "float32 forced in forward", _FORWARD,
      "return additive_attention(query.float(), keys.float(), values.float(), self.W_q.float(), "
      "self.W_k.float(), self.v.float(), mask)",
      r"context of the float64 module has dtype torch\.float32"),

    # ---------------------------------------------------------------- AttentionDecoderStep
    M("01", "decoder_step", "cell input swapped", _CELL,
      "cell_input = torch.cat([context, self.embedding(prev_tokens)], dim=-1)",
      r"the cell's input is \(embedding, context\), in that order"),
    M("01", "decoder_step", "output input swapped", _OUTPUT,
      "logits = self.output(torch.cat([context, new_hidden], dim=-1))",
      r"the output layer reads \(new_hidden, context\), in that order"),
    M("01", "decoder_step", "output from the old state", _OUTPUT,
      "logits = self.output(torch.cat([hidden, context], dim=-1))",
      r"the output layer must read the new state"),
    M("01", "decoder_step", "mask not passed on", _ATTEND,
      "context, weights = self.attention(hidden, encoder_states, encoder_states)",
      r"pass the mask on to self\.attention"),
    M("01", "decoder_step", "old state returned", _STEP_RETURN, "return logits, hidden, weights  #",
      r"your new_hidden is the hidden state you were given"),
    M("01", "decoder_step", "wrong return order", _STEP_RETURN, "return weights, new_hidden, logits  #",
      r"in the order \(logits, new_hidden, weights\)"),
    M("01", "decoder_step", "context detached", _ATTEND, f"{_ATTEND}\n        context = context.detach()",
      r"parameter attention\.W_q got no gradient"),
    M("01", "decoder_step", "embedding squeezed", _CELL,
      "cell_input = torch.cat([self.embedding(prev_tokens.unsqueeze(1)).squeeze(), context], dim=-1)",
      r"case 'size-1 dimensions: a batch of one"),
    M("01", "decoder_step", "float32 forced in the cell", "new_hidden = self.cell(cell_input, hidden)",
      "new_hidden = self.cell(cell_input.float(), hidden.float())",
      r"case 'float64 module and inputs'"),
]
