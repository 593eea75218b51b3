"""The reference of lesson 04 (solutions/attnlab/multihead.py) against PyTorch and float64
computations written out here, its input errors, its stub, and the two-facts task built on it.

PyTorch's ``torch.nn.MultiheadAttention`` (weights copied across) and
``F.scaled_dot_product_attention(..., enable_gqa=True)`` are the references for multi-head and
grouped-query attention; rotary positions are checked with complex numbers; decoding with a
``KVCache`` must equal the full causal pass. The masking and positions modules are the references
of lessons 03 and 05, so these tests do not depend on the learner's blank stubs.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import attnlab
from tests.helpers import load_stub


@pytest.fixture(scope="module")
def ref():
    """attnlab.multihead and the modules it uses as the course's references, restored afterwards."""
    names = ("multihead", "masking", "attention", "positions")  # attention: masking's softmax
    before = {name: attnlab.source_of(name) == "reference" for name in names}
    attnlab.use_reference(*names, quiet=True)
    import attnlab.multihead as module

    yield module
    for name in names:
        if not before[name]:
            attnlab.use_own(name)


@pytest.fixture(scope="module")
def stub():
    return load_stub("multihead")


def randn(seed, *shape, dtype=torch.float64):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64).to(dtype)


def build(ref, seed, *args, **kwargs):
    torch.manual_seed(seed)
    return ref.MultiHeadAttention(*args, **kwargs).double()


def copy_from_torch(module, torch_mha, bias):
    with torch.no_grad():
        for name, weight in zip(("q_proj", "k_proj", "v_proj"), torch_mha.in_proj_weight.chunk(3)):
            getattr(module, name).weight.copy_(weight)
        module.o_proj.weight.copy_(torch_mha.out_proj.weight)
        if bias:
            for name, b in zip(("q_proj", "k_proj", "v_proj"), torch_mha.in_proj_bias.chunk(3)):
                getattr(module, name).bias.copy_(b)
            module.o_proj.bias.copy_(torch_mha.out_proj.bias)


# ------------------------------------------------------------------ split, merge, repeat


@pytest.mark.parametrize("lead", [(), (2,), (2, 3)])
def test_split_heads_gives_consecutive_slices_and_merge_undoes_it(ref, lead):
    x = randn(0, *lead, 5, 12)
    split = ref.split_heads(x, 3)
    assert split.shape == (*lead, 3, 5, 4)
    for head in range(3):
        torch.testing.assert_close(split[..., head, :, :], x[..., 4 * head: 4 * head + 4], rtol=0, atol=0)
    torch.testing.assert_close(ref.merge_heads(split), x, rtol=0, atol=0)


def test_repeat_kv_matches_hugging_face_layout(ref):
    k = randn(1, 2, 3, 5, 4)
    got = ref.repeat_kv(k, 4)
    # Hugging Face's repeat_kv: expand a new axis after the heads, then fold it in.
    hf = k[:, :, None].expand(2, 3, 4, 5, 4).reshape(2, 12, 5, 4)
    torch.testing.assert_close(got, hf, rtol=0, atol=0)
    assert ref.repeat_kv(k, 1) is k


@pytest.mark.parametrize("call, message", [
    (lambda m: m.split_heads(torch.zeros(2, 5, 10), 3), "not divisible"),
    (lambda m: m.split_heads(torch.zeros(2, 5, 12), 0), "n_heads"),
    (lambda m: m.merge_heads(torch.zeros(5, 4)), "at least 3"),
    (lambda m: m.repeat_kv(torch.zeros(2, 3, 4, 5), 0), "n_rep"),
    (lambda m: m.MultiHeadAttention(10, 3), "not divisible by n_heads"),
    (lambda m: m.MultiHeadAttention(24, 6, 4), "not a multiple of n_kv_heads"),
    (lambda m: m.MultiHeadAttention(24, 6, 0), "n_kv_heads"),
    (lambda m: m.MultiHeadAttention(12, 4, rope_base=10000.0), "even head size"),
    (lambda m: m.MultiHeadAttention(12, 3)(torch.zeros(2, 5, 10)), "d_model=12"),
    (lambda m: m.MultiHeadAttention(12, 3)(torch.zeros(5, 12)), "at least 3"),
    (lambda m: m.MultiHeadAttention(12, 3)(torch.zeros(2, 5, 12), head_mask=torch.ones(4)), "head_mask"),
    (lambda m: m.MultiHeadAttention(12, 3)(torch.zeros(2, 5, 12), memory=torch.zeros(3, 5, 12)), "memory"),
    (lambda m: m.MultiHeadAttention(12, 3)(torch.zeros(2, 5, 12), torch.ones(5, 5)), "boolean"),
    (lambda m: m.KVCache().append(torch.zeros(2, 3, 4), torch.zeros(2, 3, 4)), "at least 4"),
    (lambda m: m.kv_cache_bytes(2, 2, 8, -1, 2), "seq_len"),
    (lambda m: m.kv_cache_bytes(2, 2, 8, 10, 0), "dtype_bytes"),
])
def test_bad_input_raises_a_clear_error(ref, call, message):
    with pytest.raises((ValueError, TypeError), match=message):
        call(ref)


def test_cache_refuses_keys_of_another_shape(ref):
    cache = ref.KVCache()
    cache.append(torch.zeros(2, 3, 4, 8), torch.zeros(2, 3, 4, 8))
    with pytest.raises(ValueError, match="must stay the same"):
        cache.append(torch.zeros(2, 2, 1, 8), torch.zeros(2, 2, 1, 8))


# ------------------------------------------------------------------ against PyTorch


def test_parameter_names_are_the_course_models(ref):
    module = ref.MultiHeadAttention(16, 4, 2, bias=True)
    shapes = {name: tuple(p.shape) for name, p in module.state_dict().items()}
    assert shapes == {"q_proj.weight": (16, 16), "q_proj.bias": (16,), "k_proj.weight": (8, 16),
                      "k_proj.bias": (8,), "v_proj.weight": (8, 16), "v_proj.bias": (8,),
                      "o_proj.weight": (16, 16), "o_proj.bias": (16,)}


@pytest.mark.parametrize("bias, padded, causal", [(False, False, False), (True, True, False), (True, False, True)])
def test_equals_torch_multihead_attention(ref, bias, padded, causal):
    torch.manual_seed(0)
    torch_mha = nn.MultiheadAttention(24, 6, bias=bias, batch_first=True).double()
    module = build(ref, 1, 24, 6, bias=bias)
    copy_from_torch(module, torch_mha, bias)
    x = randn(2, 3, 7, 24)
    keep = torch.arange(7)[None, :] < torch.tensor([7, 5, 2])[:, None]
    out, weights = module(x, keep[:, None, None, :] if padded else None, causal=causal, return_weights=True)
    want, want_weights = torch_mha(x, x, x, key_padding_mask=~keep if padded else None, average_attn_weights=False,
                                   attn_mask=~torch.ones(7, 7, dtype=torch.bool).tril() if causal else None)
    torch.testing.assert_close(out, want)
    torch.testing.assert_close(weights, want_weights)


def test_cross_attention_equals_torch(ref):
    torch.manual_seed(3)
    torch_mha = nn.MultiheadAttention(16, 4, batch_first=True).double()
    module = build(ref, 4, 16, 4, bias=True)
    copy_from_torch(module, torch_mha, True)
    x, memory = randn(5, 2, 3, 16), randn(6, 2, 8, 16)
    out, weights = module(x, memory=memory, causal=True, return_weights=True)  # causal is ignored
    want, want_weights = torch_mha(x, memory, memory, average_attn_weights=False)
    assert weights.shape == (2, 4, 3, 8)
    torch.testing.assert_close(out, want)
    torch.testing.assert_close(weights, want_weights)


@pytest.mark.parametrize("n_heads, n_kv_heads", [(8, 2), (8, 1), (6, 3), (4, 4)])
def test_grouped_query_equals_sdpa_enable_gqa(ref, n_heads, n_kv_heads):
    d_model, h = 8 * n_heads, 8
    module = build(ref, 7, d_model, n_heads, n_kv_heads)
    x = randn(8, 2, 9, d_model)
    out = module(x, causal=True)
    state = module.state_dict()
    heads = lambda t, n: t.reshape(2, 9, n, h).transpose(1, 2)  # noqa: E731
    q = heads(x @ state["q_proj.weight"].T, n_heads)
    k = heads(x @ state["k_proj.weight"].T, n_kv_heads)
    v = heads(x @ state["v_proj.weight"].T, n_kv_heads)
    merged = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    want = merged.transpose(1, 2).reshape(2, 9, d_model) @ state["o_proj.weight"].T
    torch.testing.assert_close(out, want)


def test_rotary_positions_match_a_complex_number_rotation(ref):
    module = build(ref, 9, 16, 2, rope_base=100.0)
    x = randn(10, 1, 5, 16)
    positions = torch.tensor([3, 4, 5, 6, 7])
    _, weights = module(x, positions=positions, return_weights=True)
    state = module.state_dict()

    def rotate(t):  # (1, H, n, 8): pairs (i, i + 4) as complex numbers, times e^{i * position * theta_i}
        theta = 100.0 ** (-torch.arange(4, dtype=torch.float64) * 2 / 8)
        z = torch.complex(t[..., :4], t[..., 4:]) * torch.polar(torch.ones(5, 4, dtype=torch.float64),
                                                                positions[:, None] * theta)
        return torch.cat([z.real, z.imag], -1)

    q = rotate((x @ state["q_proj.weight"].T).reshape(1, 5, 2, 8).transpose(1, 2))
    k = rotate((x @ state["k_proj.weight"].T).reshape(1, 5, 2, 8).transpose(1, 2))
    want = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(8), -1)
    torch.testing.assert_close(weights, want)
    # Only distances matter: shifting every position by 10 changes nothing.
    _, shifted = module(x, positions=positions + 10, return_weights=True)
    torch.testing.assert_close(shifted, weights)


def test_head_mask_equals_zeroing_the_heads_columns_of_o_proj(ref):
    module = build(ref, 11, 12, 3)
    x = randn(12, 2, 4, 12)
    out = module(x, head_mask=torch.tensor([1.0, 0.0, 1.0]))
    with torch.no_grad():
        module.o_proj.weight[:, 4:8] = 0
    torch.testing.assert_close(out, module(x))


def test_a_query_that_may_see_nothing_gives_the_bias_and_finite_gradients(ref):
    module = build(ref, 13, 12, 3, bias=True)
    x = randn(14, 1, 4, 12).requires_grad_()
    allowed = torch.ones(4, 4, dtype=torch.bool)
    allowed[2] = False
    out, weights = module(x, allowed, return_weights=True)
    assert torch.equal(weights[0, :, 2], torch.zeros(3, 4, dtype=torch.float64))
    torch.testing.assert_close(out[0, 2], module.o_proj.bias)
    out.sum().backward()
    assert torch.isfinite(x.grad).all()


# ------------------------------------------------------------------ the cache


@pytest.mark.parametrize("n_heads, n_kv, rope, chunks", [
    (4, None, False, (1,) * 7), (4, 2, False, (3, 1, 2, 1)), (4, 1, True, (4, 1, 1, 1)), (8, 2, True, (1, 5, 1)),
])
def test_decoding_with_a_cache_equals_the_full_causal_pass(ref, n_heads, n_kv, rope, chunks):
    module = build(ref, 15, 32, n_heads, n_kv, bias=True, rope_base=10000.0 if rope else None)
    x = randn(16, 2, sum(chunks), 32)
    full = module(x, causal=True)
    cache, outputs, start = ref.KVCache(), [], 0
    for size in chunks:
        outputs.append(module(x[:, start:start + size], causal=True, cache=cache))
        start += size
        assert cache.length == start
    torch.testing.assert_close(torch.cat(outputs, 1), full)
    assert cache.keys.shape == (2, n_kv or n_heads, sum(chunks), 32 // n_heads)


def test_cross_attention_cache_holds_the_memory_once(ref):
    module = build(ref, 17, 16, 4, 2)
    x, memory = randn(18, 2, 3, 16), randn(19, 2, 6, 16)
    cache = ref.KVCache()
    steps = [module(x[:, i:i + 1], memory=memory, cache=cache) for i in range(3)]
    assert cache.length == 6
    torch.testing.assert_close(torch.cat(steps, 1), module(x, memory=memory))


def test_empty_cache_and_append(ref):
    cache = ref.KVCache()
    assert (cache.length, cache.keys, cache.values) == (0, None, None)
    k, v = randn(20, 1, 2, 3, 4), randn(21, 1, 2, 3, 4)
    keys, values = cache.append(k, v)
    assert keys is k and values is v and cache.length == 3
    keys, values = cache.append(k[:, :, :1], v[:, :, :1])
    torch.testing.assert_close(keys, torch.cat([k, k[:, :, :1]], -2), rtol=0, atol=0)
    assert cache.length == 4


def test_kv_cache_bytes_equals_the_tensors_nbytes_and_qwen_numbers(ref):
    for layers, heads, h, n, dtype, batch in [(3, 2, 8, 10, torch.float32, 1), (2, 4, 16, 7, torch.bfloat16, 3)]:
        one = torch.zeros(batch, heads, n, h, dtype=dtype)
        assert ref.kv_cache_bytes(layers, heads, h, n, one.element_size(), batch=batch) == 2 * layers * one.nbytes
    # Qwen2.5-3B (config.json: 36 layers, 2 key/value heads, head size 2048 / 16 = 128), bfloat16.
    assert ref.kv_cache_bytes(36, 2, 128, 32768, 2) == 1_207_959_552  # 1.125 GiB
    assert ref.kv_cache_bytes(36, 16, 128, 32768, 2) == 8 * 1_207_959_552


# ------------------------------------------------------------------ the stub


def test_stub_raises_naming_lesson_04_and_keeps_its_input_checks(stub):
    calls = [
        lambda: stub.split_heads(torch.zeros(2, 4, 6), 2),
        lambda: stub.merge_heads(torch.zeros(2, 3, 4, 2)),
        lambda: stub.repeat_kv(torch.zeros(2, 3, 4, 2), 2),
        lambda: stub.MultiHeadAttention(12, 3),
        lambda: stub.KVCache().length,
        lambda: stub.KVCache().append(torch.zeros(1, 2, 3, 4), torch.zeros(1, 2, 3, 4)),
        lambda: stub.kv_cache_bytes(1, 2, 3, 4, 2),
    ]
    for call in calls:
        with pytest.raises(NotImplementedError, match="Lesson 04"):
            call()
    with pytest.raises(ValueError, match="not divisible"):
        stub.split_heads(torch.zeros(2, 4, 5), 2)
    with pytest.raises(ValueError, match="not a multiple"):
        stub.MultiHeadAttention(24, 6, 4)


# ------------------------------------------------------------------ the two-facts task


def test_two_facts_targets_are_the_tokens_at_both_offsets(ref):
    from attnlab.tasks import two_facts

    batch = two_facts.make_batch(4, length=10, vocab=7, offsets=(1, 3), generator=torch.Generator().manual_seed(0))
    assert batch.tokens.shape == (4, 10) and batch.targets.shape == (4, 10, 2)
    assert torch.equal(batch.targets[:, 3:, 0], batch.tokens[:, 2:-1])
    assert torch.equal(batch.targets[:, 3:, 1], batch.tokens[:, :-3])
    assert (batch.targets[:, :1] == two_facts.IGNORE).all() and (batch.targets[:, :3, 1] == two_facts.IGNORE).all()
    with pytest.raises(ValueError, match="offsets"):
        two_facts.make_batch(2, length=5, offsets=(1, 5))


def test_two_facts_models_have_the_same_size_whatever_the_heads(ref):
    from attnlab.tasks import two_facts

    sizes = {sum(p.numel() for p in two_facts.TwoFactsModel(n_heads=h).parameters()) for h in (1, 2, 4)}
    assert len(sizes) == 1
