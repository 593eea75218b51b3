"""The visible checks of lesson 05 pass on the reference and fail, with the right diagnostic, on
the mistakes learners make."""

from __future__ import annotations

import pytest
import torch

from attnlab import checks
from tests.helpers import borrowed_reference, fails, load_stub


@pytest.fixture(scope="module")
def ref():
    yield from borrowed_reference("positions")


@pytest.fixture(scope="module")
def stub():
    return load_stub("positions")


def test_all_checks_pass_on_the_reference(ref, capsys):
    checks.check_sinusoidal_encoding(ref.sinusoidal_encoding)
    checks.check_rope_angles(ref.rope_angles)
    checks.check_apply_rope(ref.apply_rope)
    assert capsys.readouterr().out.strip().splitlines()[-3:] == [
        "✓ sinusoidal_encoding: 4 checks passed",
        "✓ rope_angles: 6 checks passed",
        "✓ apply_rope: 12 checks passed",
    ]


@pytest.mark.parametrize("check, name", [(checks.check_sinusoidal_encoding, "sinusoidal_encoding"),
                                         (checks.check_rope_angles, "rope_angles"),
                                         (checks.check_apply_rope, "apply_rope")])
def test_stub_not_implemented_error_passes_through_unchanged(stub, check, name):
    with pytest.raises(NotImplementedError, match=rf"^Lesson 05: {name}\(\)"):
        check(getattr(stub, name))


# ------------------------------------------------------------------------ sinusoidal_encoding


def _angles(n, d, exponent=lambda i, d: 2 * i / d, start=0):
    pos = torch.arange(start, start + n, dtype=torch.float64)[:, None]
    i = torch.arange(d // 2, dtype=torch.float64)
    return pos / 10000.0 ** exponent(i, d)


def _interleave(even, odd):
    return torch.stack([even, odd], dim=-1).flatten(-2)


def test_sines_and_cosines_swapped():
    fails(checks.check_sinusoidal_encoding,
          lambda n, d: _interleave(torch.cos(_angles(n, d)), torch.sin(_angles(n, d))).float(),
          "50 positions", "you put sin in the odd columns")


def test_all_sines_first_then_all_cosines():
    def halves(n, d):
        a = _angles(n, d)
        return torch.cat([torch.sin(a), torch.cos(a)], dim=-1).float()

    fails(checks.check_sinusoidal_encoding, halves, "all the sines first")


def test_i_instead_of_2i_in_the_exponent():
    fails(checks.check_sinusoidal_encoding,
          lambda n, d: _interleave(*(f(_angles(n, d, lambda i, d: i / d)) for f in (torch.sin, torch.cos))).float(),
          "you used i / d_model")


def test_column_index_in_the_cosine_exponent():
    def own_exponent(n, d):
        even = torch.sin(_angles(n, d))
        odd = torch.cos(_angles(n, d, lambda i, d: (2 * i + 1) / d))
        return _interleave(even, odd).float()

    fails(checks.check_sinusoidal_encoding, own_exponent, "its own index 2i \\+ 1")


def test_positions_from_one():
    fails(checks.check_sinusoidal_encoding,
          lambda n, d: _interleave(*(f(_angles(n, d, start=1)) for f in (torch.sin, torch.cos))).float(),
          "positions start at 0")


def test_float64_returned(ref):
    fails(checks.check_sinusoidal_encoding, lambda n, d: ref.sinusoidal_encoding(n, d).double(),
          "dtype torch.float64, expected torch.float32", "return float32")


# ------------------------------------------------------------------------ rope_angles


def test_angles_in_float32():
    def float32_angles(positions, head_dim, base=10000.0):
        inverse = base ** -(torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
        return positions.float()[..., None] * inverse

    fails(checks.check_rope_angles, float32_angles, "dtype torch.float32, expected torch.float64", r"\.double\(\)")


def test_angles_computed_in_float32_then_converted():
    def converted(positions, head_dim, base=10000.0):
        inverse = base ** -(torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
        return (positions.float()[..., None] * inverse).double()

    fails(checks.check_rope_angles, converted, "disagree", "float64 throughout")


def test_angles_with_i_instead_of_2i():
    fails(checks.check_rope_angles,
          lambda p, h, base=10000.0: p.double()[..., None] * base ** -(torch.arange(h // 2, dtype=torch.float64) / h),
          "you used -i / head_dim")


def test_angles_with_a_positive_exponent():
    fails(checks.check_rope_angles,
          lambda p, h, base=10000.0: p.double()[..., None] * base ** (torch.arange(0, h, 2, dtype=torch.float64) / h),
          "the exponent is negative")


def test_angles_ignoring_the_positions(ref):
    fails(checks.check_rope_angles,
          lambda p, h, base=10000.0: ref.rope_angles(torch.arange(p.shape[-1]).expand(p.shape), h, base),
          "positions 7, 8, 9, 30", "use the positions you were given")


def test_angles_changing_positions_in_place(ref):
    def in_place(p, h, base=10000.0):
        angles = ref.rope_angles(p, h, base)
        p.add_(0)
        p[...] = 0
        return angles

    fails(checks.check_rope_angles, in_place, "changed its input in place", "positions")


# ------------------------------------------------------------------------ apply_rope


def test_apply_rope_with_the_other_layout(ref):
    fails(checks.check_apply_rope,
          lambda x, p, base=10000.0, layout="half": ref.apply_rope(
              x, p, base, "interleaved" if layout == "half" else "half"),
          "half layout", "you rotated the pairs of the 'interleaved' layout")


def test_apply_rope_rotating_the_wrong_way(ref):
    fails(checks.check_apply_rope,
          lambda x, p, base=10000.0, layout="half": ref.apply_rope(x, -torch.as_tensor(p), base, layout),
          "you rotated the wrong way")


def test_apply_rope_ignoring_the_positions(ref):
    fails(checks.check_apply_rope,
          lambda x, p, base=10000.0, layout="half": ref.apply_rope(x, torch.arange(x.shape[-2]), base, layout),
          "from a cache, 40..44", "use the positions you were given")


def test_apply_rope_returning_float64(ref):
    fails(checks.check_apply_rope,
          lambda x, p, base=10000.0, layout="half": ref.apply_rope(x.double(), p, base, layout),
          "float32 kept", "convert cos and sin to x.dtype")


def test_apply_rope_with_float32_angles(ref):
    def float32_angles(x, p, base=10000.0, layout="half"):
        angles = ref.rope_angles(p, x.shape[-1], base).float()
        cos, sin = torch.cos(angles).to(x.dtype), torch.sin(angles).to(x.dtype)
        h = x.shape[-1] // 2
        first, second = x[..., :h], x[..., h:]
        if layout == "interleaved":
            return ref.apply_rope(x, p, base, layout)
        return torch.cat([first * cos - second * sin, first * sin + second * cos], dim=-1)

    fails(checks.check_apply_rope, float32_angles, "positions 0..6", "not precise enough",
          "float64 angles")


def test_apply_rope_writing_into_x(ref):
    def in_place(x, p, base=10000.0, layout="half"):
        out = ref.apply_rope(x, p, base, layout)
        x.copy_(out)
        return x

    fails(checks.check_apply_rope, in_place, "changed its input in place", "x is different")


def test_apply_rope_sign_error_breaks_norms_and_values(ref):
    def plus_plus(x, p, base=10000.0, layout="half"):
        angles = ref.rope_angles(p, x.shape[-1], base)
        cos, sin = torch.cos(angles).to(x.dtype), torch.sin(angles).to(x.dtype)
        h = x.shape[-1] // 2
        if layout == "half":
            first, second = x[..., :h], x[..., h:]
        else:
            first, second = x[..., 0::2], x[..., 1::2]
        a, b = first * cos + second * sin, first * sin + second * cos   # not a rotation
        return torch.cat([a, b], -1) if layout == "half" else torch.stack([a, b], -1).flatten(-2)

    fails(checks.check_apply_rope, plus_plus, "disagree", "a cos t - b sin t")


def test_apply_rope_that_ignores_batched_positions(ref):
    def first_row_only(x, p, base=10000.0, layout="half"):
        p = torch.as_tensor(p)
        return ref.apply_rope(x, p.reshape(-1, p.shape[-1])[0], base, layout)

    fails(checks.check_apply_rope, first_row_only, r"positions of shape \(batch, 1, n\)", "broadcast")


def test_apply_rope_whose_angle_is_not_proportional_to_the_position(ref):
    """Angles that grow like position² still keep norms and position 0, but not the relative
    property; the first case already shows different values."""
    def squared(x, p, base=10000.0, layout="half"):
        p = torch.as_tensor(p)
        return ref.apply_rope(x, p * p, base, layout)

    fails(checks.check_apply_rope, squared, "half layout, positions 0..6", "disagree")


def test_a_mistake_only_at_large_positions_is_caught(ref):
    """Angles wrong only from position 100 on pass the small positions; the scattered positions
    (up to 900) catch them."""
    def wrong_far_away(x, p, base=10000.0, layout="half"):
        p = torch.as_tensor(p)
        return ref.apply_rope(x, p + (p >= 100).to(p.dtype) * 3, base, layout)

    fails(checks.check_apply_rope, wrong_far_away, "scattered positions", "disagree")
