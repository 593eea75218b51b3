"""The reference of lesson 07 (solutions/attnlab/stacks.py) against PyTorch's own transformer layers
(float64, weights copied across), against the float64 functional reference of the checks, and on
its contract: parameter names, tied embeddings, the KV cache, generation, clear errors."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from attnlab.checks.lesson07 import reference_transformer
from tests.helpers import borrowed_reference


@pytest.fixture(scope="module")
def stacks():
    for module in ("attention", "masking", "positions", "multihead", "feedforward"):
        import attnlab

        attnlab.use_reference(module, quiet=True)
    yield from borrowed_reference("stacks")


def _randomize(module: nn.Module, seed: int) -> None:
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            noise = torch.randn(p.shape, generator=generator, dtype=torch.float64)
            p.copy_(1 + 0.3 * noise if name.endswith("norm.weight") else noise * (0.5 if p.dim() < 2 else p.shape[-1] ** -0.5))


def _copy_attention(ours, theirs) -> None:
    """torch.nn.MultiheadAttention's packed projections from ours (q_proj, k_proj, v_proj, o_proj)."""
    with torch.no_grad():
        theirs.in_proj_weight.copy_(torch.cat([ours.q_proj.weight, ours.k_proj.weight, ours.v_proj.weight]))
        theirs.in_proj_bias.copy_(torch.cat([ours.q_proj.bias, ours.k_proj.bias, ours.v_proj.bias]))
        theirs.out_proj.weight.copy_(ours.o_proj.weight)
        theirs.out_proj.bias.copy_(ours.o_proj.bias)


def _copy_norm(ours, theirs) -> None:
    with torch.no_grad():
        theirs.weight.copy_(ours.weight)
        theirs.bias.copy_(ours.bias)


def _copy_ffn(ours, linear1, linear2) -> None:
    with torch.no_grad():
        linear1.weight.copy_(ours.up.weight)
        linear1.bias.copy_(ours.up.bias)
        linear2.weight.copy_(ours.down.weight)
        linear2.bias.copy_(ours.down.bias)


def _torch_encoder_layer(block, d, n_heads, d_ff, placement):
    layer = nn.TransformerEncoderLayer(d, n_heads, d_ff, dropout=0.0, activation="gelu", batch_first=True,
                                       norm_first=placement == "pre", dtype=torch.float64).eval()
    _copy_attention(block.self_attn, layer.self_attn)
    _copy_norm(block.attn_norm, layer.norm1)
    _copy_norm(block.ffn_norm, layer.norm2)
    _copy_ffn(block.ffn, layer.linear1, layer.linear2)
    return layer


def _torch_decoder_layer(block, d, n_heads, d_ff, placement):
    layer = nn.TransformerDecoderLayer(d, n_heads, d_ff, dropout=0.0, activation="gelu", batch_first=True,
                                       norm_first=placement == "pre", dtype=torch.float64).eval()
    _copy_attention(block.self_attn, layer.self_attn)
    _copy_attention(block.cross_attn, layer.multihead_attn)
    _copy_norm(block.attn_norm, layer.norm1)
    _copy_norm(block.cross_norm, layer.norm2)
    _copy_norm(block.ffn_norm, layer.norm3)
    _copy_ffn(block.ffn, layer.linear1, layer.linear2)
    return layer


@pytest.mark.parametrize("placement", ["pre", "post"])
def test_encoder_block_equals_torch_transformer_encoder_layer(stacks, placement):
    d, n_heads, d_ff = 12, 3, 20
    block = stacks.EncoderBlock(d, n_heads, d_ff, placement=placement, rope_base=None, bias=True).double().eval()
    _randomize(block, 0)
    layer = _torch_encoder_layer(block, d, n_heads, d_ff, placement)
    x = torch.randn(3, 7, d, dtype=torch.float64)
    padding = torch.arange(7) < torch.tensor([7, 4, 1])[:, None]
    ours = block(x, padding[:, None, None, :])
    theirs = layer(x, src_key_padding_mask=~padding)
    torch.testing.assert_close(ours[padding], theirs[padding], rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("placement", ["pre", "post"])
def test_decoder_block_equals_torch_transformer_decoder_layer(stacks, placement):
    d, n_heads, d_ff = 8, 2, 16
    block = stacks.DecoderBlock(d, n_heads, d_ff, cross_attention=True, placement=placement, rope_base=None,
                                bias=True).double().eval()
    _randomize(block, 1)
    layer = _torch_decoder_layer(block, d, n_heads, d_ff, placement)
    x, memory = torch.randn(2, 5, d, dtype=torch.float64), torch.randn(2, 6, d, dtype=torch.float64)
    source = torch.arange(6) < torch.tensor([6, 3])[:, None]
    ours = block(x, memory, memory_mask=source)
    causal = nn.Transformer.generate_square_subsequent_mask(5, dtype=torch.float64)
    theirs = layer(x, memory, tgt_mask=causal, tgt_is_causal=True, memory_key_padding_mask=~source)
    torch.testing.assert_close(ours, theirs, rtol=1e-10, atol=1e-10)


def test_encoder_decoder_equals_torch_transformer(stacks):
    d, n_heads, d_ff, vocab = 8, 2, 16, 11
    model = stacks.EncoderDecoder(vocab, d, 2, n_heads, d_ff, rope_base=None, bias=True,
                                  tie_embeddings=False).double().eval()
    _randomize(model, 2)
    transformer = nn.Transformer(d, n_heads, 2, 2, d_ff, dropout=0.0, activation="gelu", batch_first=True,
                                 norm_first=True, dtype=torch.float64).eval()
    for ours, theirs in zip(model.encoder, transformer.encoder.layers):
        fresh = _torch_encoder_layer(ours, d, n_heads, d_ff, "pre")
        theirs.load_state_dict(fresh.state_dict())
    for ours, theirs in zip(model.decoder, transformer.decoder.layers):
        fresh = _torch_decoder_layer(ours, d, n_heads, d_ff, "pre")
        theirs.load_state_dict(fresh.state_dict())
    _copy_norm(model.encoder_norm, transformer.encoder.norm)
    _copy_norm(model.decoder_norm, transformer.decoder.norm)
    source, target = torch.randint(0, vocab, (2, 6)), torch.randint(0, vocab, (2, 4))
    causal = nn.Transformer.generate_square_subsequent_mask(4, dtype=torch.float64)
    hidden = transformer(model.embed(source), model.embed(target), tgt_mask=causal, tgt_is_causal=True)
    torch.testing.assert_close(model(source, target), model.lm_head(hidden), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("kind", ["EncoderOnly", "DecoderOnly", "EncoderDecoder"])
@pytest.mark.parametrize("settings", [{}, {"n_kv_heads": 1, "norm": "rms", "activation": "swiglu"},
                                      {"placement": "post"}])
def test_models_equal_the_float64_functional_reference_with_rope(stacks, kind, settings):
    vocab, d, n_heads = 13, 16, 4
    extra = {"n_classes": 3} if kind == "EncoderOnly" else {}
    model = getattr(stacks, kind)(vocab, d, 2, n_heads, 24, **settings, **extra).double().eval()
    _randomize(model, 3)
    state = model.state_dict()
    common = dict(n_heads=n_heads, n_kv_heads=settings.get("n_kv_heads"), placement=settings.get("placement", "pre"),
                  norm=settings.get("norm", "layer"), activation=settings.get("activation", "gelu"))
    if kind == "EncoderOnly":
        tokens = torch.randint(0, vocab, (3, 6))
        mask = torch.arange(6) < torch.tensor([6, 2, 5])[:, None]
        expected = reference_transformer(kind, state, tokens=tokens, mask=mask, **common)
        torch.testing.assert_close(model(tokens, mask)[mask], expected["hidden"][mask], rtol=1e-9, atol=1e-9)
        torch.testing.assert_close(model.classify(tokens, mask), expected["classes"], rtol=1e-9, atol=1e-9)
    elif kind == "DecoderOnly":
        tokens = torch.randint(0, vocab, (2, 7))
        expected = reference_transformer(kind, state, tokens=tokens, **common)["logits"]
        torch.testing.assert_close(model(tokens), expected, rtol=1e-9, atol=1e-9)
    else:
        source, target = torch.randint(0, vocab, (2, 5)), torch.randint(0, vocab, (2, 4))
        mask = torch.arange(5) < torch.tensor([5, 3])[:, None]
        expected = reference_transformer(kind, state, source=source, target=target, source_mask=mask, **common)["logits"]
        torch.testing.assert_close(model(source, target, mask), expected, rtol=1e-9, atol=1e-9)


def test_parameter_names_are_the_documented_ones(stacks):
    model = stacks.DecoderOnly(20, 8, 2, 2, 16)
    names = list(model.state_dict())
    block = ["attn_norm.weight", "attn_norm.bias", "self_attn.q_proj.weight", "self_attn.k_proj.weight",
             "self_attn.v_proj.weight", "self_attn.o_proj.weight", "ffn_norm.weight", "ffn_norm.bias",
             "ffn.up.weight", "ffn.up.bias", "ffn.down.weight", "ffn.down.bias"]
    assert names == ["embed.weight", *(f"blocks.{i}.{n}" for i in range(2) for n in block),
                     "final_norm.weight", "final_norm.bias", "lm_head.weight"]
    cross = stacks.DecoderBlock(8, 2, 16, cross_attention=True)
    assert [n for n, _ in cross.named_children()] == ["attn_norm", "self_attn", "cross_norm", "cross_attn",
                                                      "ffn_norm", "ffn"]
    encoder = stacks.EncoderOnly(20, 8, 1, 2, 16, n_classes=2)
    assert [n for n, _ in encoder.named_children()] == ["embed", "blocks", "final_norm", "classifier"]
    pair = stacks.EncoderDecoder(20, 8, 1, 2, 16)
    assert [n for n, _ in pair.named_children()] == ["embed", "encoder", "encoder_norm", "decoder",
                                                     "decoder_norm", "lm_head"]


def test_tied_embeddings_share_one_tensor_and_untied_do_not(stacks):
    tied = stacks.DecoderOnly(20, 8, 1, 2, 16)
    assert tied.lm_head.weight is tied.embed.weight
    untied = stacks.DecoderOnly(20, 8, 1, 2, 16, tie_embeddings=False)
    assert untied.lm_head.weight is not untied.embed.weight
    assert sum(p.numel() for p in tied.parameters()) + 20 * 8 == sum(p.numel() for p in untied.parameters())


def test_post_norm_models_have_no_final_norm_parameters(stacks):
    model = stacks.DecoderOnly(20, 8, 1, 2, 16, placement="post")
    assert isinstance(model.final_norm, nn.Identity)
    assert not any(name.startswith("final_norm") for name in model.state_dict())


def test_state_dicts_are_interchangeable_between_two_builds(stacks):
    first = stacks.DecoderOnly(20, 8, 2, 2, 16).eval()
    second = stacks.DecoderOnly(20, 8, 2, 2, 16).eval()
    second.load_state_dict(first.state_dict())
    tokens = torch.randint(0, 20, (2, 5))
    torch.testing.assert_close(first(tokens), second(tokens), rtol=0, atol=0)


def test_decoding_with_the_cache_equals_the_full_pass(stacks):
    model = stacks.DecoderOnly(20, 16, 2, 4, 32, n_kv_heads=2).double().eval()
    _randomize(model, 4)
    tokens = torch.randint(0, 20, (2, 9))
    cache = model.new_cache()
    pieces = torch.cat([model(tokens[:, :5], cache), model(tokens[:, 5:6], cache), model(tokens[:, 6:], cache)], 1)
    torch.testing.assert_close(pieces, model(tokens), rtol=1e-10, atol=1e-10)
    assert [c.length for c in cache] == [9, 9]


def test_no_token_of_a_decoder_sees_a_later_one(stacks):
    model = stacks.DecoderOnly(20, 8, 2, 2, 16).double().eval()
    _randomize(model, 5)
    tokens = torch.randint(0, 20, (1, 8))
    changed = tokens.clone()
    changed[:, 5:] = (changed[:, 5:] + 3) % 20
    torch.testing.assert_close(model(tokens)[:, :5], model(changed)[:, :5], rtol=0, atol=0)
    assert not torch.allclose(model(tokens)[:, 5:], model(changed)[:, 5:])


def test_an_encoder_sees_the_whole_sentence(stacks):
    model = stacks.EncoderOnly(20, 8, 1, 2, 16).double().eval()
    _randomize(model, 6)
    tokens = torch.randint(0, 20, (1, 6))
    changed = tokens.clone()
    changed[0, -1] = (changed[0, -1] + 1) % 20
    assert not torch.allclose(model(tokens)[:, 0], model(changed)[:, 0])


def test_generate_with_and_without_the_cache_and_greedy(stacks):
    model = stacks.DecoderOnly(20, 16, 2, 4, 32).double().eval()
    _randomize(model, 7)
    prompt = torch.randint(0, 20, (3, 4))
    fast = stacks.generate(model, prompt, 10)
    slow = stacks.generate(model, prompt, 10, use_cache=False)
    assert torch.equal(fast, slow) and fast.shape == (3, 14) and torch.equal(fast[:, :4], prompt)
    tokens = prompt
    for _ in range(10):
        tokens = torch.cat([tokens, model(tokens)[:, -1].argmax(-1, keepdim=True)], dim=1)
    assert torch.equal(fast, tokens)
    single = stacks.generate(model, prompt[0], 3)
    assert single.shape == (7,) and torch.equal(single, fast[0, :7])
    assert stacks.generate(model, prompt, 0).shape == (3, 4)


def test_sampling_is_reproducible_and_follows_the_temperature(stacks):
    model = stacks.DecoderOnly(20, 16, 1, 4, 32).double().eval()
    _randomize(model, 8)
    prompt = torch.randint(0, 20, (1, 3))
    draw = lambda **kw: stacks.generate(model, prompt, 12, generator=torch.Generator().manual_seed(0), **kw)  # noqa: E731
    assert torch.equal(draw(temperature=1.0), draw(temperature=1.0))
    assert torch.equal(draw(temperature=1.0), draw(temperature=1.0, use_cache=False))
    assert torch.equal(draw(temperature=1e-8), stacks.generate(model, prompt, 12))
    assert not torch.equal(draw(temperature=50.0), stacks.generate(model, prompt, 12))


def test_sampled_tokens_follow_softmax_of_the_logits_over_the_temperature(stacks):
    # 20,000 independent draws of one token (a batch of copies of one prompt) against the float64
    # distribution softmax(logits / T): every frequency within 5 standard errors.
    model = stacks.DecoderOnly(9, 8, 1, 2, 16).double().eval()
    _randomize(model, 10)
    prompt = torch.randint(0, 9, (1, 3)).expand(20_000, 3)
    for temperature in (0.5, 2.0):
        drawn = stacks.generate(model, prompt, 1, temperature=temperature,
                                generator=torch.Generator().manual_seed(1))[:, -1]
        expected = torch.softmax(model(prompt[:1])[0, -1] / temperature, dim=-1)
        frequency = torch.bincount(drawn, minlength=9).double() / len(drawn)
        error = (expected * (1 - expected) / len(drawn)).sqrt()
        assert ((frequency - expected).abs() <= 5 * error + 1e-4).all(), (frequency, expected)


def test_generate_with_an_encoder_decoder(stacks):
    model = stacks.EncoderDecoder(12, 8, 1, 2, 16).double().eval()
    _randomize(model, 9)
    source, prompt = torch.randint(0, 12, (2, 5)), torch.ones(2, 1, dtype=torch.long)
    fast = stacks.generate(model, prompt, 5, source=source)
    assert torch.equal(fast, stacks.generate(model, prompt, 5, use_cache=False, source=source))
    first = model.decode(prompt, model.encode(source))
    assert not torch.allclose(first, model.decode(prompt, model.encode((source + 1) % 12)))


def test_bad_input_raises_clear_errors(stacks):
    model = stacks.DecoderOnly(20, 8, 1, 2, 16)
    with pytest.raises(ValueError, match="integer ids"):
        model(torch.randn(2, 3))
    with pytest.raises(ValueError, match="outside the vocabulary"):
        model(torch.tensor([[0, 20]]))
    with pytest.raises(ValueError, match="one KVCache per layer"):
        model(torch.tensor([[1]]), cache=[])
    with pytest.raises(ValueError, match="placement"):
        stacks.EncoderBlock(8, 2, 16, placement="middle")
    with pytest.raises(ValueError, match="norm"):
        stacks.DecoderBlock(8, 2, 16, norm="batch")
    with pytest.raises(ValueError, match="memory"):
        stacks.DecoderBlock(8, 2, 16, cross_attention=True)(torch.randn(1, 3, 8))
    with pytest.raises(ValueError, match="no cross-attention"):
        stacks.DecoderBlock(8, 2, 16)(torch.randn(1, 3, 8), torch.randn(1, 2, 8))
    with pytest.raises(ValueError, match="n_layers"):
        stacks.DecoderOnly(20, 8, 0, 2, 16)
    with pytest.raises(ValueError, match="mask"):
        stacks.EncoderOnly(20, 8, 1, 2, 16)(torch.tensor([[1, 2]]), torch.tensor([[1, 0]]))
    with pytest.raises(ValueError, match="classification head"):
        stacks.EncoderOnly(20, 8, 1, 2, 16).classify(torch.tensor([[1, 2]]))
    with pytest.raises(ValueError, match="prompt"):
        stacks.generate(model, torch.tensor([], dtype=torch.long), 3)
    with pytest.raises(ValueError, match="temperature"):
        stacks.generate(model, torch.tensor([1]), 3, temperature=-1.0)
    with pytest.raises(ValueError, match="source"):
        stacks.generate(stacks.EncoderDecoder(20, 8, 1, 2, 16), torch.tensor([1]), 3)
