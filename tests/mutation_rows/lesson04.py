"""Mutation rows of lesson 04 (multihead.py); merged into tests/mutation_table.py when done."""

from tests.parity import Mutation as M

_SPLIT = "    return x.reshape(*lead, n, n_heads, width // n_heads).transpose(-3, -2)"
_MERGE = "    return x.transpose(-3, -2).reshape(*lead, n, n_heads * h)"
_REPEAT = "    return k.repeat_interleave(n_rep, dim=-3)"
_ATTEND = "        out, weights = masking.masked_attention(q, repeat_kv(k, n_rep), repeat_kv(v, n_rep), allowed)"
_ROTATE = ('                q = rotary.apply_rope(q, positions, base=self.rope_base, layout="half")\n'
           '                k = rotary.apply_rope(k, positions, base=self.rope_base, layout="half")')
_BYTES = "    return 2 * n_layers * n_kv_heads * head_dim * seq_len * dtype_bytes * batch"


def _own_attention(scale: str) -> str:
    """The attention written out instead of lesson 03's masked_attention, dividing by ``scale``."""
    return ("        kk, vv = repeat_kv(k, n_rep), repeat_kv(v, n_rep)\n"
            f"        scores = q @ kk.transpose(-2, -1) / math.sqrt({scale})\n"
            "        if allowed is not None:\n"
            "            scores = scores.masked_fill(~allowed, float('-inf'))\n"
            "        weights = torch.softmax(scores, dim=-1)\n"
            "        out = weights @ vv")


ROWS: list[M] = [
    # split_heads, merge_heads
    M("04", "split_merge", "split in one reshape", _SPLIT,
      "    return x.reshape(*lead, n_heads, n, width // n_heads)",
      r"in one step.*transpose\(-3, -2\)"),
    M("04", "split_merge", "split gives every H-th feature", _SPLIT,
      "    return x.reshape(*lead, n, width // n_heads, n_heads).movedim(-1, -3)",
      r"every n_heads-th feature"),
    M("04", "split_merge", "split keeps the token axis first", _SPLIT,
      "    return x.reshape(*lead, n, n_heads, width // n_heads)",
      r"head axis must come before the token axis"),
    M("04", "split_merge", "split assumes a batch dimension", _SPLIT,
      "    return x.reshape(x.shape[0], x.shape[1], n_heads, -1).transpose(1, 2)",
      r"split_heads.*raised RuntimeError"),
    M("04", "split_merge", "merge without swapping back", _MERGE,
      "    return x.reshape(*lead, n, n_heads * h)",
      r"merge_heads.*swapping the head and token axes back"),
    M("04", "split_merge", "merge with view after transpose", _MERGE,
      "    return x.transpose(-3, -2).view(*lead, n, n_heads * h)",
      r"merge_heads.*raised RuntimeError.*view"),
    M("04", "split_merge", "merge assumes four dimensions", _MERGE,
      "    return x.transpose(1, 2).reshape(*lead, n, n_heads * h)",
      r"merge_heads.*put every feature back"),

    # repeat_kv
    M("04", "repeat_kv", "tiles the heads", _REPEAT,
      "    return k.repeat(*([1] * (k.dim() - 3)), n_rep, 1, 1)",
      r"tiled the heads.*repeat_interleave"),
    M("04", "repeat_kv", "repeats along the tokens", _REPEAT,
      "    return k.repeat_interleave(n_rep, dim=-2)",
      r"has shape.*dim=-3"),
    M("04", "repeat_kv", "repeats along dim 1", _REPEAT,
      "    return k.repeat_interleave(n_rep, dim=1)",
      r"repeat_kv.*(has shape|disagree).*dim=-3|repeat_kv.*has shape"),
    M("04", "repeat_kv", "four dimensions only (expand)", _REPEAT,
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
    M("04", "mha", "rotates with the default base", _ROTATE,
      "                q = rotary.apply_rope(q, positions)\n"
      "                k = rotary.apply_rope(k, positions)",
      r"default base 10000.*base=self.rope_base"),
    M("04", "mha", "rotates the values too", _ROTATE,
      _ROTATE + '\n                v = rotary.apply_rope(v, positions, base=self.rope_base, layout="half")',
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
    M("04", "mha", "tiles the key/value heads", _ATTEND,
      "        out, weights = masking.masked_attention(q, k.repeat(1, n_rep, 1, 1), v.repeat(1, n_rep, 1, 1), allowed)",
      r"tiled \(0, 1, 0, 1\)"),
    M("04", "mha", "ignores head_mask",
      "            out = out * head_mask.to(out.dtype)[:, None, None]", "            pass",
      r"head_mask was ignored"),
    M("04", "mha", "divides by sqrt(d_model)", _ATTEND, _own_attention("self.d_model"),
      r"divided the scores by sqrt\(d_model\)"),
    M("04", "mha", "own softmax gives nan for a query without keys", _ATTEND, _own_attention("self.head_dim"),
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
      _ROTATE + "\n            if cache is not None:\n                k, v = cache.append(k, v)"
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
    M("04", "kv_cache_bytes", "keys only", _BYTES,
      "    return n_layers * n_kv_heads * head_dim * seq_len * dtype_bytes * batch", r"keys only"),
    M("04", "kv_cache_bytes", "no layers", _BYTES,
      "    return 2 * n_kv_heads * head_dim * seq_len * dtype_bytes * batch", r"left out n_layers"),
    M("04", "kv_cache_bytes", "no batch", _BYTES,
      "    return 2 * n_layers * n_kv_heads * head_dim * seq_len * dtype_bytes", r"left out the batch"),
    M("04", "kv_cache_bytes", "numbers, not bytes", _BYTES,
      "    return 2 * n_layers * n_kv_heads * head_dim * seq_len * batch", r"left out dtype_bytes"),
    M("04", "kv_cache_bytes", "a float", _BYTES,
      "    return 2.0 * n_layers * n_kv_heads * head_dim * seq_len * dtype_bytes * batch", r"expected an int"),
    M("04", "kv_cache_bytes", "bits, not bytes", _BYTES,
      "    return 16 * n_layers * n_kv_heads * head_dim * seq_len * dtype_bytes * batch",
      r"take \d+ bytes"),
]
