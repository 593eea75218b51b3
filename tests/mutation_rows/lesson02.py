"""Mutation rows of lesson 02 (attention.py); merged into tests/mutation_table.py when done."""

from tests.parity import Mutation as M

_SOFTMAX_BODY = ("    shifted = x - x.amax(dim=dim, keepdim=True)\n    exps = torch.exp(shifted)\n"
                 "    return exps / exps.sum(dim=dim, keepdim=True)")
_NUMPY_SOFTMAX = ("    scores = scores - scores.max(axis=-1, keepdims=True)\n    weights = np.exp(scores)\n"
                  "    weights = weights / weights.sum(axis=-1, keepdims=True)")
_SDPA_MASK = "        scores = scores.masked_fill(~mask, float(\"-inf\"))\n"

ROWS: list[M] = [
    # softmax
    M("02", "softmax", "PyTorch's softmax", _SOFTMAX_BODY, "    return torch.softmax(x, dim)",
      r"calls softmax \(torch\.softmax"),
    M("02", "softmax", "no max shift",
      "    shifted = x - x.amax(dim=dim, keepdim=True)",
      "    shifted = x",
      r"subtract the maximum"),
    M("02", "softmax", "fixed last dim", _SOFTMAX_BODY, _SOFTMAX_BODY.replace("dim=dim", "dim=-1"),
      r"wrong dimension"),
    M("02", "softmax", "maximum of the whole tensor", "x - x.amax(dim=dim, keepdim=True)", "x - x.max()",
      r"maximum of each row along dim.*not the maximum of the whole tensor"),
    M("02", "softmax", "shifts x in place", "shifted = x - x.amax(dim=dim, keepdim=True)",
      "shifted = x.sub_(x.amax(dim=dim, keepdim=True))", r"changed its input in place: x"),
    M("02", "softmax", "float64 always", "exps = torch.exp(shifted)", "exps = torch.exp(shifted.double())",
      r"dtype torch\.float64, expected torch\.float32"),
    M("02", "softmax", "divided by the largest exp", "return exps / exps.sum(dim=dim, keepdim=True)",
      "return exps / exps.amax(dim=dim, keepdim=True)", r"divided by the largest exp, not by the sum"),
    M("02", "softmax", "exp of log_softmax", _SOFTMAX_BODY, "    return torch.log_softmax(x, dim).exp()",
      r"calls log_softmax"),
    # attention_numpy
    M("02", "attention_numpy", "no scale", "/ math.sqrt(d)  #", "#", r"did not divide the scores by sqrt\(d\)"),
    M("02", "attention_numpy", "divided by d", "/ math.sqrt(d)  #", "/ d  #", r"divided the scores by d instead"),
    M("02", "attention_numpy", "top-left causal", "np.tril(np.ones((n_q, n_k), dtype=bool), k=n_k - n_q)",
      "np.tril(np.ones((n_q, n_k), dtype=bool))", r"aligned to the top-left corner"),
    M("02", "attention_numpy", "causal ignored", "    if causal:\n        n_q, n_k", "    if False:\n        n_q, n_k",
      r"causal=True is ignored"),
    M("02", "attention_numpy", "softmax over the query axis", _NUMPY_SOFTMAX, _NUMPY_SOFTMAX.replace("axis=-1", "axis=-2"),
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
    M("02", "sdpa", "weights times mask after softmax", _SDPA_MASK + "    weights = softmax(scores, dim=-1)\n",
      "        pass\n    weights = softmax(scores, dim=-1)\n    if mask is not None:\n        weights = weights * mask\n",
      r"do not sum to 1.*mask to the scores before the softmax"),
    M("02", "sdpa", "mask ignored", _SDPA_MASK, "        pass\n", r"the mask is ignored"),
    M("02", "sdpa", "fill -100", _SDPA_MASK, _SDPA_MASK.replace("float(\"-inf\")", "-100.0"),
      r"not exactly 0.*fill -inf, not a large negative number"),
    M("02", "sdpa", "k.transpose(1, 2)", "(q @ k.transpose(-2, -1)) * scale", "(q @ k.transpose(1, 2)) * scale",
      r"2-D inputs.*k\.transpose\(-2, -1\)"),
    M("02", "sdpa", "float64 always", "    return weights @ v, weights\n",
      "    return (weights @ v).double(), weights.double()\n", r"dtype torch\.float64, expected torch\.float32"),
]
