"""Mutation rows of lesson 07 (stacks.py); merged into tests/mutation_table.py when done."""

from tests.parity import Mutation as M

# Unique anchors in solutions/attnlab/stacks.py.
_ENC_INIT = "        self.placement = placement\n        ### BEGIN SOLUTION\n"
_ENC_SELF_ATTN = ("        self.attn_norm = make_norm(norm, d_model)\n        self.self_attn = "
                  "multihead.MultiHeadAttention(d_model, n_heads, n_kv_heads, bias=bias, rope_base=rope_base)")
_ENC_FFN = ("        self.ffn = feedforward.FeedForward(d_model, d_ff, activation)\n        ### END SOLUTION\n\n"
            "    def forward(self, x: torch.Tensor, mask")
_ENC_SELF = ("x, weights = _sublayer(self.placement, x, self.attn_norm, self.self_attn, mask,\n"
             "                               positions=positions")
_ENC_FFN_STEP = ("        x, _ = _sublayer(self.placement, x, self.ffn_norm, self.ffn)\n"
                 "        return (x, weights) if return_weights else x")
_DEC_FFN = ("        self.ffn = feedforward.FeedForward(d_model, d_ff, activation)\n        ### END SOLUTION\n\n"
            "    def forward(self, x: torch.Tensor, memory")
_DEC_SELF = ("        x, self_weights = _sublayer(self.placement, x, self.attn_norm, self.self_attn, causal=True,\n"
             "                                    cache=cache, positions=positions, return_weights=return_weights)\n")
_DEC_CROSS = ("        cross_weights = None\n        if self.cross_attention:\n"
              "            padding = None if memory_mask is None else memory_mask[:, None, None, :]\n"
              "            x, cross_weights = _sublayer(self.placement, x, self.cross_norm, self.cross_attn, padding,\n"
              "                                         memory=memory, return_weights=return_weights)\n")
_EO_FINAL = 'self.final_norm = make_norm(norm, d_model) if placement == "pre" else nn.Identity()\n        if n_classes'
_DO_FINAL = 'self.final_norm = make_norm(norm, d_model) if placement == "pre" else nn.Identity()\n        self.lm_head'
_BLOCKS_ARGS = "                         placement=placement, rope_base=rope_base, bias=bias)"
_DO_TIE = ("        if tie_embeddings:\n            self.lm_head.weight = self.embed.weight\n        ### END SOLUTION\n"
           "        initialize(self, n_layers)\n")
_ED_TIE = ("        if tie_embeddings:\n            self.lm_head.weight = self.embed.weight\n        ### END SOLUTION\n"
           "        initialize(self, n_layers + n_decoder_layers)")

ROWS: list[M] = [
    # -- EncoderBlock ---------------------------------------------------------------------------
    M("07", "encoder_block", "activation not passed on", _ENC_FFN,
      _ENC_FFN.replace("FeedForward(d_model, d_ff, activation)", "FeedForward(d_model, d_ff)"),
      r"activation='swiglu'.*pass activation on to FeedForward"),
    M("07", "encoder_block", "norms the other way round", _ENC_INIT,
      _ENC_INIT.replace("= placement", '= "post" if placement == "pre" else "pre"'),
      r"norms the other way round"),
    M("07", "encoder_block", "causal encoder", _ENC_SELF, _ENC_SELF.replace("mask,", "mask, causal=True,"),
      r"no causal mask"),
    M("07", "encoder_block", "padding mask ignored", _ENC_SELF, _ENC_SELF.replace("mask,", "None,"),
      r"pass mask on to self_attn"),
    M("07", "encoder_block", "feed-forward reads the stream", _ENC_FFN_STEP,
      '        x = x + self.ffn(x) if self.placement == "pre" else self.ffn_norm(x + self.ffn(x))\n'
      "        return (x, weights) if return_weights else x",
      r"must read ffn_norm\(x\)"),
    M("07", "encoder_block", "no residual around the feed-forward block", _ENC_FFN_STEP,
      '        x = self.ffn(self.ffn_norm(x)) if self.placement == "pre" else self.ffn_norm(self.ffn(x))\n'
      "        return (x, weights) if return_weights else x",
      r"residual connection around the feed-forward"),
    M("07", "encoder_block", "n_kv_heads not passed on",
      _ENC_INIT + _ENC_SELF_ATTN, _ENC_INIT + _ENC_SELF_ATTN.replace("n_heads, n_kv_heads,", "n_heads,"),
      r"pass n_kv_heads on"),
    M("07", "encoder_block", "rope_base not passed on",
      _ENC_INIT + _ENC_SELF_ATTN, _ENC_INIT + _ENC_SELF_ATTN.replace("rope_base=rope_base", "rope_base=10000.0"),
      r"pass rope_base on"),
    M("07", "encoder_block", "norm not passed on", "        self.ffn_norm = make_norm(norm, d_model)\n" + _ENC_FFN,
      '        self.ffn_norm = make_norm("layer", d_model)\n' + _ENC_FFN,
      r"norm='rms' is an RMSNorm.*pass norm on"),
    M("07", "encoder_block", "bias passed to the feed-forward block", _ENC_FFN,
      _ENC_FFN.replace("FeedForward(d_model, d_ff, activation)", "FeedForward(d_model, d_ff, activation, bias=bias)"),
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
      _DEC_SELF + _DEC_CROSS, _DEC_CROSS.replace("        cross_weights = None\n", "")
      + _DEC_SELF.replace("x, self_weights", "cross_weights = None\n        x, self_weights"),
      r"self-attention first, then cross-attention"),
    M("07", "decoder_block", "activation not passed on", _DEC_FFN,
      _DEC_FFN.replace("FeedForward(d_model, d_ff, activation)", "FeedForward(d_model, d_ff)"),
      r"activation='swiglu'.*pass activation on"),
    M("07", "decoder_block", "norm not passed on", "        self.ffn_norm = make_norm(norm, d_model)\n" + _DEC_FFN,
      '        self.ffn_norm = make_norm("layer", d_model)\n' + _DEC_FFN,
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
    M("07", "encoder_only", "final_norm kept for post-norm", _EO_FINAL,
      "self.final_norm = make_norm(norm, d_model)\n        if n_classes",
      r"placement='post', final_norm must be nn\.Identity"),
    M("07", "encoder_only", "no final_norm for pre-norm", _EO_FINAL,
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
      _BLOCKS_ARGS + "\n            for _ in range(n_layers))\n        " + _EO_FINAL,
      _BLOCKS_ARGS.replace("placement=placement, ", "") + "\n            for _ in range(n_layers))\n        "
      + _EO_FINAL,
      r"pass placement on to every block"),
    M("07", "encoder_only", "rope_base not passed to the blocks",
      _BLOCKS_ARGS + "\n            for _ in range(n_layers))\n        " + _EO_FINAL,
      _BLOCKS_ARGS.replace("rope_base=rope_base, ", "") + "\n            for _ in range(n_layers))\n        "
      + _EO_FINAL,
      r"pass rope_base on"),
    # -- DecoderOnly ----------------------------------------------------------------------------
    M("07", "decoder_only", "no final_norm for pre-norm", _DO_FINAL,
      "self.final_norm = nn.Identity()\n        self.lm_head",
      r"pre-norm model normalizes once more.*final_norm = make_norm"),
    M("07", "decoder_only", "final_norm kept for post-norm", _DO_FINAL,
      "self.final_norm = make_norm(norm, d_model)\n        self.lm_head",
      r"placement='post', final_norm must be nn\.Identity"),
    M("07", "decoder_only", "never ties the embeddings", _DO_TIE,
      "        ### END SOLUTION\n        initialize(self, n_layers)\n",
      r"share the embedding's weight"),
    M("07", "decoder_only", "always ties the embeddings", _DO_TIE,
      _DO_TIE.replace("        if tie_embeddings:\n            self.lm_head", "        self.lm_head"),
      r"tie_embeddings=False, lm_head must have a weight of its own"),
    M("07", "decoder_only", "lm_head with a bias",
      "self.lm_head = nn.Linear(d_model, vocab_size, bias=False)\n" + _DO_TIE,
      "self.lm_head = nn.Linear(d_model, vocab_size)\n" + _DO_TIE,
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
      _BLOCKS_ARGS + "\n            for _ in range(n_layers))\n        " + _DO_FINAL,
      _BLOCKS_ARGS.replace("placement=placement, ", "") + "\n            for _ in range(n_layers))\n        "
      + _DO_FINAL,
      r"pass placement on to every block"),
    # -- EncoderDecoder -------------------------------------------------------------------------
    M("07", "encoder_decoder", "always ties the embeddings", _ED_TIE,
      _ED_TIE.replace("        if tie_embeddings:\n            self.lm_head", "        self.lm_head"),
      r"tie_embeddings=False, lm_head must have a weight of its own"),
    M("07", "encoder_decoder", "never ties the embeddings", _ED_TIE,
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
