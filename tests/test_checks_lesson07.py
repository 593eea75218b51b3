"""Lesson 07's visible checks: the reference passes every one; typical wrong versions fail with a
message that says what to look at; a stub's NotImplementedError passes through."""

from __future__ import annotations

import functools

import pytest
import torch
from torch import nn

import attnlab
from attnlab.checks import lesson07 as checks
from tests.helpers import borrowed_reference, fails, load_stub


@pytest.fixture(scope="module")
def stacks():
    for module in ("attention", "masking", "positions", "multihead", "feedforward"):
        attnlab.use_reference(module, quiet=True)
    yield from borrowed_reference("stacks")


def test_the_reference_passes_every_check(stacks, capsys):
    checks.check_encoder_block(stacks.EncoderBlock)
    checks.check_decoder_block(stacks.DecoderBlock)
    checks.check_encoder_only(stacks.EncoderOnly)
    checks.check_decoder_only(stacks.DecoderOnly)
    checks.check_encoder_decoder(stacks.EncoderDecoder)
    checks.check_generate(stacks.generate, stacks.DecoderOnly, stacks.EncoderDecoder)
    assert capsys.readouterr().out.splitlines() == [
        "✓ EncoderBlock: 6 checks passed", "✓ DecoderBlock: 8 checks passed", "✓ EncoderOnly: 4 checks passed",
        "✓ DecoderOnly: 6 checks passed", "✓ EncoderDecoder: 6 checks passed", "✓ generate: 6 checks passed"]


@pytest.mark.parametrize("kind", ["EncoderBlock", "DecoderBlock", "EncoderOnly", "DecoderOnly", "EncoderDecoder"])
@pytest.mark.parametrize("settings", [{}, {"placement": "post", "norm": "rms", "activation": "swiglu", "n_kv_heads": 1},
                                      {"tie_embeddings": False, "bias": True, "rope_base": None}])
def test_the_contract_is_the_references_parameters(stacks, kind, settings):
    # The checks' list of names and shapes (the contract) against what the reference builds.
    init = dict(d_model=8, n_heads=2, d_ff=12, **settings)
    if kind in ("EncoderOnly", "DecoderOnly", "EncoderDecoder"):
        init |= dict(vocab_size=11, n_layers=2)
    if kind in ("EncoderBlock", "DecoderBlock", "EncoderOnly"):
        init.pop("tie_embeddings", None)
    init |= {"EncoderOnly": {"n_classes": 3}, "EncoderDecoder": {"n_decoder_layers": 1},
             "DecoderBlock": {"cross_attention": True}}.get(kind, {})
    built = {name: tuple(p.shape) for name, p in getattr(stacks, kind)(**init).named_parameters()}
    assert built == checks.contract_parameters(kind, init)


def test_stubs_raise_not_implemented_naming_the_lesson():
    stub = load_stub("stacks")
    for check, target in [(checks.check_encoder_block, stub.EncoderBlock),
                          (checks.check_decoder_block, stub.DecoderBlock),
                          (checks.check_encoder_only, stub.EncoderOnly),
                          (checks.check_decoder_only, stub.DecoderOnly),
                          (checks.check_encoder_decoder, stub.EncoderDecoder)]:
        with pytest.raises(NotImplementedError, match="Lesson 07"):
            check(target)


# -- wrong blocks -----------------------------------------------------------------------------


def _encoder_block(stacks, body):
    class Wrong(stacks.EncoderBlock):
        def forward(self, x, mask=None, *, positions=None, return_weights=False):
            out, weights = body(self, x, mask)
            return (out, weights) if return_weights else out
    return Wrong


def test_post_norm_in_place_of_pre_norm(stacks):
    def body(self, x, mask):
        h, w = self.self_attn(x, mask, return_weights=True)
        x = self.attn_norm(x + h)
        return self.ffn_norm(x + self.ffn(x)), w
    fails(checks.check_encoder_block, _encoder_block(stacks, body), "EncoderBlock", "norms the other way round")


def test_missing_residual(stacks):
    def body(self, x, mask):
        h, w = self.self_attn(self.attn_norm(x), mask, return_weights=True)
        x = x + h
        return self.ffn(self.ffn_norm(x)), w
    fails(checks.check_encoder_block, _encoder_block(stacks, body), "forgot the residual")


def test_feed_forward_reading_the_stream_instead_of_its_norm(stacks):
    def body(self, x, mask):
        h, w = self.self_attn(self.attn_norm(x), mask, return_weights=True)
        x = x + h
        return x + self.ffn(x), w
    fails(checks.check_encoder_block, _encoder_block(stacks, body), "ffn_norm")


def test_encoder_with_a_causal_mask(stacks):
    def body(self, x, mask):
        h, w = self.self_attn(self.attn_norm(x), mask, causal=True, return_weights=True)
        x = x + h
        return x + self.ffn(self.ffn_norm(x)), w
    fails(checks.check_encoder_block, _encoder_block(stacks, body), "no causal mask")


def test_renamed_submodules(stacks):
    class Renamed(stacks.EncoderBlock):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.attention = self.self_attn
            del self.self_attn
    fails(checks.check_encoder_block, Renamed, "no submodule 'self_attn'", "loaded by name")


def test_decoder_block_that_sees_the_future(stacks):
    class Wrong(stacks.DecoderBlock):
        def forward(self, x, memory=None, *, memory_mask=None, cache=None, positions=None, return_weights=False):
            h, w = self.self_attn(self.attn_norm(x), cache=cache, return_weights=True)
            x = x + h
            cross = None
            if self.cross_attention:
                pad = None if memory_mask is None else memory_mask[:, None, None, :]
                h, cross = self.cross_attn(self.cross_norm(x), pad, memory=memory, return_weights=True)
                x = x + h
            x = x + self.ffn(self.ffn_norm(x))
            return (x, w, cross) if return_weights else x
    fails(checks.check_decoder_block, Wrong, "must be causal")


def test_decoder_block_attending_to_padded_source_tokens(stacks):
    class Wrong(stacks.DecoderBlock):
        def forward(self, x, memory=None, *, memory_mask=None, cache=None, positions=None, return_weights=False):
            return super().forward(x, memory, memory_mask=None, cache=cache, positions=positions,
                                   return_weights=return_weights)
    fails(checks.check_decoder_block, Wrong, "padded source tokens")


def test_decoder_block_that_drops_the_cache(stacks):
    class Wrong(stacks.DecoderBlock):
        def forward(self, x, memory=None, *, memory_mask=None, cache=None, positions=None, return_weights=False):
            return super().forward(x, memory, memory_mask=memory_mask, cache=None, positions=positions,
                                   return_weights=return_weights)
    fails(checks.check_decoder_block, Wrong, "KV cache", "pass the cache on")


def test_decoder_block_that_creates_cross_attention_it_does_not_need(stacks):
    class Wrong(stacks.DecoderBlock):
        def __init__(self, d_model, n_heads, d_ff, **kwargs):
            super().__init__(d_model, n_heads, d_ff, **kwargs)
            if not self.cross_attention:
                self.cross_norm = nn.LayerNorm(d_model)
    fails(checks.check_decoder_block, Wrong, "must not create cross_norm")


# -- wrong models -----------------------------------------------------------------------------


def test_encoder_only_pooling_over_padding(stacks):
    class Wrong(stacks.EncoderOnly):
        def classify(self, tokens, mask=None):
            return self.classifier(self(tokens, mask).mean(dim=1))
    fails(checks.check_encoder_only, Wrong, "real tokens only")


def test_encoder_only_without_final_norm(stacks):
    class Wrong(stacks.EncoderOnly):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.final_norm.forward = lambda x: x
    fails(checks.check_encoder_only, Wrong, "final_norm")


def test_decoder_only_not_tied(stacks):
    class Wrong(stacks.DecoderOnly):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.lm_head.weight = nn.Parameter(self.embed.weight.detach().clone())
    fails(checks.check_decoder_only, Wrong, "share the embedding's weight")


def test_decoder_only_without_final_norm(stacks):
    class Wrong(stacks.DecoderOnly):
        def forward(self, tokens, cache=None, *, return_weights=False):
            x = self.embed(tokens)
            weights = []
            for index, block in enumerate(self.blocks):
                x, w, _ = block(x, cache=None if cache is None else cache[index], return_weights=True)
                weights.append(w)
            logits = self.lm_head(x)
            return (logits, weights) if return_weights else logits
    fails(checks.check_decoder_only, Wrong, "final_norm before lm_head")


def test_decoder_only_sharing_one_cache_between_layers(stacks):
    class Wrong(stacks.DecoderOnly):
        def forward(self, tokens, cache=None, *, return_weights=False):
            if cache is None:
                return super().forward(tokens, return_weights=return_weights)
            x = self.embed(tokens)
            for block in self.blocks:
                x = block(x, cache=cache[0])
            return self.lm_head(self.final_norm(x))
    fails(checks.check_decoder_only, Wrong, "cache")


def test_encoder_decoder_ignoring_the_source_padding(stacks):
    class Wrong(stacks.EncoderDecoder):
        def decode(self, target, memory, source_mask=None, cache=None, *, return_weights=False):
            return super().decode(target, memory, None, cache, return_weights=return_weights)
    fails(checks.check_encoder_decoder, Wrong, "padded source tokens")


def test_encoder_decoder_that_does_not_read_the_source(stacks):
    class Wrong(stacks.EncoderDecoder):
        def decode(self, target, memory, source_mask=None, cache=None, *, return_weights=False):
            return super().decode(target, torch.zeros_like(memory), source_mask, cache, return_weights=return_weights)
    fails(checks.check_encoder_decoder, Wrong, "EncoderDecoder")


# -- wrong generate ---------------------------------------------------------------------------


def test_generate_feeding_the_whole_text_to_the_cache(stacks):
    def wrong(model, prompt, max_new_tokens, use_cache=True, temperature=0.0, generator=None, **kwargs):
        tokens = prompt[None] if prompt.dim() == 1 else prompt
        cache = model.new_cache() if use_cache else None
        for _ in range(max_new_tokens):
            logits = model(tokens, cache)[:, -1]
            tokens = torch.cat([tokens, logits.argmax(-1, keepdim=True)], dim=1)
        return tokens[0] if prompt.dim() == 1 else tokens
    fails(lambda g: checks.check_generate(g, stacks.DecoderOnly), wrong, "use_cache=True", "newest token")


def test_generate_that_drops_the_prompt(stacks):
    def wrong(model, prompt, max_new_tokens, use_cache=True, temperature=0.0, generator=None, **kwargs):
        return stacks.generate(model, prompt, max_new_tokens, use_cache, temperature, generator)[..., prompt.shape[-1]:]
    fails(lambda g: checks.check_generate(g, stacks.DecoderOnly), wrong, "shape")


def test_generate_ignoring_the_temperature(stacks):
    def wrong(model, prompt, max_new_tokens, use_cache=True, temperature=0.0, generator=None, **kwargs):
        return stacks.generate(model, prompt, max_new_tokens, use_cache, 1.0 if temperature else 0.0, generator)
    fails(lambda g: checks.check_generate(g, stacks.DecoderOnly), wrong, "tiny temperature")


def test_generate_that_never_samples(stacks):
    def wrong(model, prompt, max_new_tokens, use_cache=True, temperature=0.0, generator=None, **kwargs):
        return stacks.generate(model, prompt, max_new_tokens, use_cache, 0.0, generator, **kwargs)
    fails(lambda g: checks.check_generate(g, stacks.DecoderOnly), wrong, "temperature=1.0", "torch.multinomial")


def test_generate_that_samples_at_temperature_one_whatever_the_temperature(stacks):
    def wrong(model, prompt, max_new_tokens, use_cache=True, temperature=0.0, generator=None, **kwargs):
        return stacks.generate(model, prompt, max_new_tokens, use_cache, 1.0 if temperature > 1e-3 else 0.0,
                               generator, **kwargs)
    fails(lambda g: checks.check_generate(g, stacks.DecoderOnly), wrong, "temperature=2.5", "/ temperature")


def test_generate_blames_a_wrong_model_not_generate(stacks):
    class NoFinalNorm(stacks.DecoderOnly):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.final_norm.forward = lambda x: x
    fails(lambda g: checks.check_generate(g, NoFinalNorm), stacks.generate, "your DecoderOnly's logits",
          "fix it first")


def test_a_pre_norm_model_without_final_norm_is_told_to_add_it(stacks):
    class Identity(stacks.DecoderOnly):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.final_norm = nn.Identity()
    fails(checks.check_decoder_only, Identity, "has no parameter 'final_norm.weight'", "pre-norm model normalizes")


def test_a_hard_coded_rope_base_is_named(stacks):
    class Hardcoded(stacks.EncoderBlock):
        def __init__(self, *args, rope_base=10000.0, **kwargs):
            super().__init__(*args, rope_base=10000.0, **kwargs)
    fails(checks.check_encoder_block, Hardcoded, "rope_base=500.0 asks for rotary positions", "not the default")


# ------------------------------------------------------------------ the pronoun exercise (not graded)


@pytest.fixture(scope="module")
def course(stacks):
    from attnlab import zoo

    model, meta = zoo.load()
    return model


def _surviving(model, mistake=None):
    from attnlab.tasks import pronoun

    def surviving_predictions(head, distance):
        found = pronoun.sentences(200, distance)
        masks = torch.ones(4, 4)
        if mistake == "whole layer":
            masks[head[0]] = 0.0
        elif mistake != "no mask":
            masks[head] = 0.0
        with torch.no_grad(), pronoun.head_masks(model, masks):
            logits = model(pronoun.token_ids(found))
        return pronoun.count_fits(logits[:, -1], found)
    return surviving_predictions


def test_the_pronoun_check_accepts_any_right_design(course, capsys):
    for decisions in [((0, 3), (0, 1), (3, 9, 12), "content"), ((0, 3), (2, 2), [9], "content"),
                      ((0, 3), (3, 0), (3, 6), "content")]:
        found = checks.check_pronoun_ablation(_surviving(course), lambda: decisions, course)
        assert found["report_passed"] == 6 and found["verdict"] == "content"
        assert 6 in found["table"] and found["table"][6]["head_off"] < 0.6 * found["table"][6]["fit"]
    out = capsys.readouterr().out
    assert "✓ pronoun ablation (not graded): 6 checks passed" in out and "attention on the noun" in out


@pytest.mark.parametrize("decisions, message", [
    (((0, 1), (0, 2), (3,), "content"), "does not need that head"),
    (((0, 3), (0, 3), (3,), "content"), "must be another head"),
    (((0, 3), (0, 1), (6,), "content"), "Measure at least one\\s+other distance"),
    (((0, 3), (0, 1), (3,), "position"), "by what it is \\('content'\\)"),
    (((0, 3), (4, 0), (3,), "content"), "not a head of the course model"),
    (((0, 3), (0, 1), (5,), "content"), "distances must be a list"),
    (((0, 3), (0, 1), (3,), "meaning"), "'content'.*or\\s+'position'"),
])
def test_the_pronoun_check_says_why_a_design_does_not_work(course, decisions, message):
    check = functools.partial(checks.check_pronoun_ablation, decisions=lambda: decisions, model=course)
    fails(check, _surviving(course), message)


@pytest.mark.parametrize("mistake, message", [("no mask", "nothing was switched off"),
                                              ("whole layer", "every head of layer 0 off")])
def test_the_pronoun_check_names_a_wrong_count(course, mistake, message):
    check = functools.partial(checks.check_pronoun_ablation, decisions=lambda: ((0, 3), (0, 1), (3,), "content"),
                              model=course)
    fails(check, _surviving(course, mistake), message)


def test_the_pronoun_check_waits_while_nothing_is_written(course, capsys):
    def stub(*args):
        raise NotImplementedError("not written")
    assert checks.check_pronoun_ablation(stub, stub, course) is None
    assert "waiting" in capsys.readouterr().out
