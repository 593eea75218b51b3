"""The reference of lesson 05 (solutions/attnlab/positions.py) against independent float64
computations, its stub, its use inside lesson 04's MultiHeadAttention, and the "who paid?" task.

Independent computations: the paper's sinusoidal formula in numpy, entry by entry; RoPE as
explicit 2x2 rotation matrices in numpy (not complex numbers, which the visible checks use), and
Hugging Face's ``rotate_half`` formulation of the "half" layout.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from tests import helpers
from tests.helpers import borrowed_reference, fails, load_stub

FUNCTIONS = ("sinusoidal_encoding", "rope_angles", "apply_rope")


@pytest.fixture(scope="module")
def ref():
    yield from borrowed_reference("positions")


@pytest.fixture(scope="module")
def stub():
    return load_stub("positions")


def rotation_matrix_rope(x: np.ndarray, positions: np.ndarray, base: float, layout: str) -> np.ndarray:
    """RoPE with one explicit 2x2 rotation matrix per pair and position, in float64."""
    x = np.asarray(x, dtype=np.float64)
    h = x.shape[-1]
    out = np.empty_like(x)
    pairs = [(i, i + h // 2) if layout == "half" else (2 * i, 2 * i + 1) for i in range(h // 2)]
    positions = np.broadcast_to(np.asarray(positions), x.shape[:-1])
    for index in np.ndindex(*x.shape[:-1]):
        for i, (a, b) in enumerate(pairs):
            t = positions[index] * base ** (-2 * i / h)
            rotation = np.array([[math.cos(t), -math.sin(t)], [math.sin(t), math.cos(t)]])
            out[index + (a,)], out[index + (b,)] = rotation @ np.array([x[index + (a,)], x[index + (b,)]])
    return out


def hf_rotate_half(x: torch.Tensor, positions: torch.Tensor, base: float) -> torch.Tensor:
    """The "half" layout as Hugging Face's Qwen2/LLaMA code writes it (rotate_half), in float64."""
    h = x.shape[-1]
    inv_freq = 1.0 / base ** (torch.arange(0, h, 2, dtype=torch.float64) / h)
    freqs = positions.double()[..., None] * inv_freq
    emb = torch.cat([freqs, freqs], dim=-1)
    rotated_half = torch.cat([-x[..., h // 2:], x[..., : h // 2]], dim=-1)
    return x * emb.cos() + rotated_half * emb.sin()


# ------------------------------------------------------------------------ sinusoidal_encoding


@pytest.mark.parametrize("n, d", [(1, 2), (7, 6), (50, 16), (128, 64)])
def test_sinusoidal_matches_the_formula_of_section_3_5(ref, n, d):
    table = ref.sinusoidal_encoding(n, d)
    assert table.dtype == torch.float32 and table.shape == (n, d)
    expected = np.array([[math.sin(p / 10000 ** (2 * (j // 2) / d)) if j % 2 == 0 else
                          math.cos(p / 10000 ** (2 * (j // 2) / d)) for j in range(d)] for p in range(n)])
    np.testing.assert_allclose(table.numpy(), expected, rtol=0, atol=1e-6)


def test_sinusoidal_dot_product_depends_only_on_the_distance(ref):
    table = ref.sinusoidal_encoding(80, 32).double()
    dots = table @ table.T
    for distance in (0, 3, 17, 40):
        along = torch.diagonal(dots, offset=distance)
        assert (along - along[0]).abs().max() < 1e-5


@pytest.mark.parametrize("args, message", [
    ((5, 7), "d_model must be even"), ((0, 4), "n_positions must be a positive"),
    ((3.0, 4), "n_positions must be a positive"), ((True, 4), "positive integer")])
def test_sinusoidal_bad_sizes_raise_clear_errors(ref, args, message):
    with pytest.raises(ValueError, match=message):
        ref.sinusoidal_encoding(*args)


# ------------------------------------------------------------------------ rope_angles


def test_rope_angles_values_shape_and_float64(ref):
    positions = torch.tensor([[0, 1, 5], [100, 101, 70000]])
    angles = ref.rope_angles(positions, 8, base=1e6)
    assert angles.dtype == torch.float64 and angles.shape == (2, 3, 4)
    expected = positions.numpy().astype(np.float64)[..., None] * np.array([1e6 ** (-2 * i / 8) for i in range(4)])
    np.testing.assert_allclose(angles.numpy(), expected, rtol=1e-15, atol=0)
    assert torch.equal(ref.rope_angles(torch.arange(3), 4)[:, 0], torch.arange(3, dtype=torch.float64))


def test_rope_angles_accept_int32_and_lists_and_leave_positions_unchanged(ref):
    positions = torch.tensor([3, 9], dtype=torch.int32)
    before = positions.clone()
    assert torch.equal(ref.rope_angles(positions, 6), ref.rope_angles([3, 9], 6))
    assert torch.equal(positions, before)


@pytest.mark.parametrize("positions, head_dim, base, error, message", [
    (torch.tensor([0.5, 1.0]), 8, 10000.0, TypeError, "positions must hold integers"),
    (torch.tensor([True, False]), 8, 10000.0, TypeError, "positions must hold integers"),
    (torch.tensor(3), 8, 10000.0, ValueError, "at least one dimension"),
    ("abc", 8, 10000.0, TypeError, "positions must be an integer tensor"),
    (torch.arange(3), 7, 10000.0, ValueError, "head_dim must be even"),
    (torch.arange(3), 8, 1.0, ValueError, "base must be a number greater than 1"),
    (torch.arange(3), 8, -5, ValueError, "base must be a number greater than 1"),
])
def test_rope_angles_bad_input_raises_clear_errors(ref, positions, head_dim, base, error, message):
    with pytest.raises(error, match=message):
        ref.rope_angles(positions, head_dim, base=base)


# ------------------------------------------------------------------------ apply_rope


@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("seed", range(4))
def test_apply_rope_matches_explicit_rotation_matrices(ref, layout, seed):
    g = torch.Generator().manual_seed(seed)
    pick = lambda low, high: int(torch.randint(low, high, (), generator=g))  # noqa: E731
    shape = (*[pick(1, 3) for _ in range(pick(0, 3))], pick(1, 7), 2 * pick(1, 7))
    x = torch.randn(*shape, generator=g, dtype=torch.float64)
    positions = torch.randint(0, 5000, (shape[-2],), generator=g)
    base = (10000.0, 1e6, 500.0, 10000.0)[seed]
    out = ref.apply_rope(x, positions, base=base, layout=layout)
    np.testing.assert_allclose(out.numpy(), rotation_matrix_rope(x.numpy(), positions.numpy(), base, layout),
                               rtol=1e-12, atol=1e-12)


def test_half_layout_equals_hugging_face_rotate_half(ref):
    g = torch.Generator().manual_seed(7)
    x = torch.randn(2, 16, 9, 128, generator=g, dtype=torch.float64)     # Qwen2.5's head size
    positions = torch.arange(30000, 30009)
    torch.testing.assert_close(ref.apply_rope(x, positions, base=1e6), hf_rotate_half(x, positions, 1e6),
                               rtol=1e-10, atol=1e-10)  # 1 / base**e and base**-e round differently


def test_layouts_differ_by_a_fixed_reordering(ref):
    x = torch.randn(4, 10, dtype=torch.float64)
    positions = torch.tensor([0, 3, 8, 200])
    order = torch.cat([torch.arange(0, 10, 2), torch.arange(1, 10, 2)])
    via_half = ref.apply_rope(x[..., order], positions, layout="half")[..., torch.argsort(order)]
    assert torch.equal(ref.apply_rope(x, positions, layout="interleaved"), via_half)
    assert not torch.allclose(ref.apply_rope(x, positions, layout="interleaved"), ref.apply_rope(x, positions))


def test_apply_rope_relative_property_norms_and_position_zero(ref):
    g = torch.Generator().manual_seed(3)
    q, k = torch.randn(5, 32, generator=g, dtype=torch.float64), torch.randn(6, 32, generator=g, dtype=torch.float64)
    scores = ref.apply_rope(q, torch.arange(5) + 2) @ ref.apply_rope(k, torch.arange(6)).T
    shifted = ref.apply_rope(q, torch.arange(5) + 99_999) @ ref.apply_rope(k, torch.arange(6) + 99_997).T
    torch.testing.assert_close(scores, shifted, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(ref.apply_rope(q, torch.arange(5) * 13).norm(dim=-1), q.norm(dim=-1))
    assert torch.equal(ref.apply_rope(q, torch.zeros(5, dtype=torch.long)), q)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_apply_rope_keeps_low_precision_dtypes(ref, dtype):
    x = torch.randn(3, 7, 8)
    out = ref.apply_rope(x.to(dtype), torch.arange(7) + 40)
    assert out.dtype == dtype and out.shape == x.shape
    torch.testing.assert_close(out.double(), ref.apply_rope(x.double(), torch.arange(7) + 40), rtol=2e-2, atol=2e-2)


def test_apply_rope_batched_positions_and_inputs_unchanged(ref):
    x = torch.randn(2, 3, 5, 8, dtype=torch.float64)
    before = x.clone()
    positions = torch.tensor([[[0, 1, 2, 3, 4]], [[7, 8, 9, 10, 11]]])
    out = ref.apply_rope(x, positions)
    assert torch.equal(x, before)
    assert torch.equal(out[1], ref.apply_rope(x[1], torch.arange(7, 12)))
    assert torch.equal(out[0, 2], ref.apply_rope(x[0, 2], torch.arange(5)))


@pytest.mark.parametrize("x, positions, layout, error, message", [
    (torch.randn(4, 7), torch.arange(4), "half", ValueError, "must be even"),
    (torch.randn(4, 8), torch.arange(5), "half", ValueError, "do not fit x"),
    (torch.randn(4, 8), torch.arange(4)[None, None].expand(3, 2, 4), "half", ValueError, "do not fit x"),
    (torch.randn(4, 8), torch.arange(4), "complex", ValueError, "layout must be one of"),
    (torch.randn(4, 8), torch.arange(4) + 0.5, "half", TypeError, "positions must hold integers"),
    (torch.arange(8).reshape(1, 8), torch.arange(1), "half", TypeError, "floating-point"),
    (torch.randn(8), torch.arange(1), "half", ValueError, r"\(\.\.\., n, head_dim\)"),
])
def test_apply_rope_bad_input_raises_clear_errors(ref, x, positions, layout, error, message):
    with pytest.raises(error, match=message):
        ref.apply_rope(x, positions, layout=layout)


# ------------------------------------------------------------------------ the stub


@pytest.mark.parametrize("name, args", [("sinusoidal_encoding", (4, 8)), ("rope_angles", (torch.arange(3), 8)),
                                        ("apply_rope", (torch.randn(3, 8), torch.arange(3)))])
def test_stub_raises_not_implemented_naming_lesson_05(stub, name, args):
    with pytest.raises(NotImplementedError, match=rf"^Lesson 05: {name}\(\)"):
        getattr(stub, name)(*args)


def test_stub_keeps_its_input_checks(stub):
    with pytest.raises(ValueError, match="head_dim must be even"):
        stub.rope_angles(torch.arange(3), 5)
    with pytest.raises(TypeError, match="positions must hold integers"):
        stub.apply_rope(torch.randn(3, 8), torch.tensor([0.0, 1.0, 2.0]))
    with pytest.raises(ValueError, match="d_model must be even"):
        stub.sinusoidal_encoding(4, 3)


# ------------------------------------------------------------------------ inside MultiHeadAttention


@pytest.fixture(scope="module")
def attention():
    yield from borrowed_reference("attention")


@pytest.fixture(scope="module")
def masking(attention):
    yield from borrowed_reference("masking")


@pytest.fixture(scope="module")
def multihead(masking):
    """Lesson 04's reference, running the references of lessons 02 and 03."""
    yield from borrowed_reference("multihead")


def test_rope_in_multihead_attention_continues_positions_from_the_cache(ref, multihead):
    torch.manual_seed(0)
    attention = multihead.MultiHeadAttention(24, 4, n_kv_heads=2, rope_base=10000.0).double()
    x = torch.randn(2, 9, 24, dtype=torch.float64)
    with torch.no_grad():
        full = attention(x, causal=True)
        cache, pieces, start = multihead.KVCache(), [], 0
        for size in (4, 1, 3, 1):
            pieces.append(attention(x[:, start:start + size], causal=True, cache=cache))
            start += size
        keys = multihead.split_heads(attention.k_proj(x), 2)
    torch.testing.assert_close(torch.cat(pieces, dim=1), full, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(cache.keys, ref.apply_rope(keys, torch.arange(9)), rtol=1e-12, atol=1e-12)


def test_attention_without_positions_is_permutation_equivariant_and_rope_breaks_it(ref, multihead):
    """Permute the tokens: without positions the outputs are permuted the same way (float64
    rounding only); with RoPE they are not."""
    g = torch.Generator().manual_seed(11)
    x = torch.randn(2, 13, 24, generator=g, dtype=torch.float64)
    shuffle = torch.randperm(13, generator=g)
    for rope_base, equivariant in ((None, True), (10000.0, False)):
        torch.manual_seed(1)
        attention = multihead.MultiHeadAttention(24, 4, n_kv_heads=2, rope_base=rope_base).double()
        with torch.no_grad():
            error = (attention(x[:, shuffle]) - attention(x)[:, shuffle]).abs().max().item()
        assert (error < 1e-12) == equivariant, (rope_base, error)


# ------------------------------------------------------------------------ the "who paid?" task


def test_who_paid_sentences_answers_and_symmetry():
    from attnlab.tasks import who_paid

    every = who_paid.all_sentences()
    assert every.tokens.shape == (12 * 11 * 8, 6)
    sentences = {who_paid.decode(t): who_paid.VOCAB[int(a)] for t, a in zip(every.tokens, every.answers)}
    assert sentences["the customer charged the store ?"] == "store"
    assert sentences["the store charged the customer ?"] == "customer"
    assert sentences["the guest tipped the hotel ?"] == "guest"
    assert sentences["the school fined the student ?"] == "student"
    batch = who_paid.make_batch(256, torch.Generator().manual_seed(0))
    assert (batch.tokens[:, 1] != batch.tokens[:, 4]).all()
    assert all(sentences[who_paid.decode(t)] == who_paid.VOCAB[int(a)] for t, a in zip(batch.tokens, batch.answers))
    with pytest.raises(ValueError, match="unknown words"):
        who_paid.encode("the bank charged the store ?")
    with pytest.raises(ValueError, match="positions must be one of"):
        who_paid.WhoPaidModel("learned")


def test_who_paid_model_without_positions_cannot_tell_mirror_images_apart(multihead, ref):
    from attnlab.tasks import who_paid

    torch.manual_seed(0)
    pair = torch.stack([who_paid.encode("the customer charged the store ?"),
                        who_paid.encode("the store charged the customer ?")])
    with torch.no_grad():
        blind = who_paid.WhoPaidModel("none")(pair)
        seeing = who_paid.WhoPaidModel("rope")(pair)
        sinusoidal = who_paid.WhoPaidModel("sinusoidal")(pair)
    torch.testing.assert_close(blind[0], blind[1], rtol=1e-5, atol=1e-6)
    assert (seeing[0] - seeing[1]).abs().max() > 1e-4
    assert (sinusoidal[0] - sinusoidal[1]).abs().max() > 1e-4


# ------------------------------------------------------------------------ the trusted cases of the grader


def trusted_case_verdicts(module) -> list[tuple[str, str, str]]:
    # The KV-cache cases run the reference MultiHeadAttention, which finds attnlab.positions at
    # each call: the module under test is put there while they run.
    return helpers.trusted_case_verdicts("05", module, installed_as="attnlab.positions")


def with_mistake(ref, **functions):
    """The reference positions module with some functions replaced."""
    return helpers.with_mistake(ref, FUNCTIONS, **functions)


def test_trusted_cases_pass_on_the_reference_and_cover_every_grade_cell(ref, multihead):
    verdicts = trusted_case_verdicts(ref)
    assert [v for v in verdicts if v[2]] == []
    assert {grade_id for grade_id, _, _ in verdicts} == {
        f"{name}_{kind}" for name in ("sinusoidal", "rope_angles", "apply_rope") for kind in ("visible", "hidden")}


def test_half_precision_returned_as_float32_fails_the_visible_check_and_the_trusted_cases(ref, multihead):
    from attnlab import checks

    def float32_for_half(x, positions, base=10000.0, layout="half"):
        if x.dtype in (torch.float16, torch.bfloat16):
            x = x.float()
        return ref.apply_rope(x, positions, base=base, layout=layout)

    fails(checks.check_apply_rope, float32_for_half, "float16 kept", "has dtype torch.float32, expected torch.float16")
    failing = {(grade_id, why) for grade_id, _, why in trusted_case_verdicts(with_mistake(ref, apply_rope=float32_for_half))
               if why}
    assert {grade_id for grade_id, _ in failing} == {"apply_rope_hidden"}
    assert {why for _, why in failing} == {"output has dtype float32, expected float16",
                                           "output has dtype float32, expected bfloat16"}


def test_trusted_cases_catch_positions_restarting_at_zero_in_a_kv_cache(ref, multihead):
    def from_zero(x, positions, base=10000.0, layout="half"):
        return ref.apply_rope(x, torch.arange(x.shape[-2]), base=base, layout=layout)

    failing = {label for grade_id, label, why in trusted_case_verdicts(with_mistake(ref, apply_rope=from_zero))
               if why and grade_id == "apply_rope_hidden"}
    assert {"attention decoding with a KV cache (GQA)", "attention decoding with a KV cache, base 1e6"} <= failing


def test_trusted_cases_catch_float32_angles(ref, multihead):
    def float32_angles(positions, head_dim, base=10000.0):
        inverse = base ** -(torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
        return (torch.as_tensor(positions).float()[..., None] * inverse).double()

    failing = {grade_id for grade_id, _, why in trusted_case_verdicts(with_mistake(ref, rope_angles=float32_angles))
               if why}
    assert "rope_angles_hidden" in failing
