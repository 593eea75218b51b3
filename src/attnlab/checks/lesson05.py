"""Visible checks of lesson 05: ``check_sinusoidal_encoding``, ``check_rope_angles``,
``check_apply_rope``; and ``check_length_bias``, the ungraded check of the design exercise (a bias
of the distance with which a model trained on short inputs still works on long ones).

The references are independent of the exercise: the paper's formula evaluated entry by entry in
numpy float64 (sinusoidal encodings, angles), and RoPE as complex multiplication in float64 (each
pair of dimensions is a complex number, a rotation by t is a product with e^{it}). Invariants any
correct rotation satisfies are checked too: norms unchanged, position 0 changes nothing, and the
score of a rotated query and key depends only on the distance between their positions.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import torch

from attnlab.checks.common import (
    CheckFailed,
    _as_float64,
    _seeded,
    assert_close,
    assert_dtype,
    assert_not_modified,
    assert_shape,
    explain_mismatch,
    run_checks,
)

__all__ = [
    "check_apply_rope",
    "check_length_bias",
    "check_rope_angles",
    "check_sinusoidal_encoding",
    "reference_rope",
    "reference_rope_angles",
    "reference_sinusoidal",
]


# --------------------------------------------------------------------------------------------
# Float64 references, written differently from the exercise
# --------------------------------------------------------------------------------------------


def reference_sinusoidal(n_positions: int, d_model: int) -> np.ndarray:
    """Vaswani et al. (2017), section 3.5, entry by entry in float64: (n_positions, d_model)."""
    table = np.empty((n_positions, d_model))
    for pos in range(n_positions):
        for column in range(d_model):
            angle = pos / 10000.0 ** (2 * (column // 2) / d_model)
            table[pos, column] = np.sin(angle) if column % 2 == 0 else np.cos(angle)
    return table


def reference_rope_angles(positions, head_dim: int, base: float = 10000.0) -> np.ndarray:
    """positions (..., n) -> float64 angles (..., n, head_dim // 2), position * base^(-2i/head_dim)."""
    positions = np.asarray(positions.cpu() if isinstance(positions, torch.Tensor) else positions, dtype=np.float64)
    inverse = np.array([base ** (-2.0 * i / head_dim) for i in range(head_dim // 2)])
    return positions[..., None] * inverse


def _pairs_as_complex(x: np.ndarray, layout: str) -> np.ndarray:
    half = x.shape[-1] // 2
    if layout == "half":
        return x[..., :half] + 1j * x[..., half:]
    return x[..., 0::2] + 1j * x[..., 1::2]


def _complex_as_pairs(z: np.ndarray, layout: str) -> np.ndarray:
    if layout == "half":
        return np.concatenate([z.real, z.imag], axis=-1)
    return np.stack([z.real, z.imag], axis=-1).reshape(*z.shape[:-1], 2 * z.shape[-1])


def reference_rope(x, positions, base: float = 10000.0, layout: str = "half",
                   angle_dtype: torch.dtype | None = None) -> torch.Tensor:
    """RoPE as complex multiplication in float64: each pair (a, b) is a + ib, times e^{i·angle}.

    layout "half" pairs dimension i with i + h/2; "interleaved" pairs 2i with 2i + 1.
    angle_dtype: round the angles to this dtype first (the mistake of computing them in half
    precision); None keeps them in float64.
    """
    values = _as_float64(x).numpy()
    angles = reference_rope_angles(positions, values.shape[-1], base)
    if angle_dtype is not None:
        angles = torch.from_numpy(angles).to(angle_dtype).double().numpy()
    rotated = _pairs_as_complex(values, layout) * np.exp(1j * angles)
    return torch.from_numpy(_complex_as_pairs(rotated, layout))


# --------------------------------------------------------------------------------------------
# Lesson 05: sinusoidal_encoding, rope_angles, apply_rope
# --------------------------------------------------------------------------------------------


def _sinusoidal_mistakes(n: int, d: int) -> dict[str, np.ndarray]:
    pos = np.arange(n, dtype=np.float64)[:, None]
    right = reference_sinusoidal(n, d)
    i = np.arange(d // 2)
    angles = pos / 10000.0 ** (2 * i / d)
    halves = np.concatenate([np.sin(angles), np.cos(angles)], axis=1)
    swapped = np.empty_like(right)
    swapped[:, 0::2], swapped[:, 1::2] = right[:, 1::2], right[:, 0::2]
    no_two = np.empty_like(right)
    no_two[:, 0::2] = np.sin(pos / 10000.0 ** (i / d))
    no_two[:, 1::2] = np.cos(pos / 10000.0 ** (i / d))
    column_exponent = np.empty_like(right)
    column_exponent[:, 0::2] = np.sin(pos / 10000.0 ** (2 * i / d))
    column_exponent[:, 1::2] = np.cos(pos / 10000.0 ** ((2 * i + 1) / d))
    from_one = reference_sinusoidal(n + 1, d)[1:]
    return {
        "you put sin in the odd columns and cos in the even ones: PE[pos, 2i] is the sine": swapped,
        "you put all the sines first, then all the cosines; the paper interleaves them: column 2i is "
        "sin, column 2i + 1 is cos, of the same angle": halves,
        "the exponent is 2i / d_model, where i indexes the pair (columns 2i and 2i + 1 share it); you "
        "used i / d_model": no_two,
        "columns 2i and 2i + 1 share one angle, pos / 10000^(2i / d_model); your cosine column used "
        "its own index 2i + 1 in the exponent": column_exponent,
        "positions start at 0: row 0 is sin(0) = 0 and cos(0) = 1 in alternate columns": from_one,
    }


def check_sinusoidal_encoding(fn: Callable) -> None:
    """Check ``sinusoidal_encoding(n_positions, d_model)`` against the formula of section 3.5."""

    def values(n, d):
        def case():
            table = fn(n, d)
            assert isinstance(table, torch.Tensor), (
                f"sinusoidal_encoding must return a torch.Tensor, got {type(table).__name__}")
            assert_shape(table, (n, d), what=f"sinusoidal_encoding({n}, {d})", meaning="(n_positions, d_model)")
            assert_dtype(table, torch.float32, what=f"sinusoidal_encoding({n}, {d})",
                         hint="compute in float64 if you like, but return float32 (.float())")
            expected = reference_sinusoidal(n, d)
            hint = explain_mismatch(table, _sinusoidal_mistakes(n, d), rtol=1e-4, atol=1e-4)
            assert_close(table, expected, what=f"sinusoidal_encoding({n}, {d})", rtol=1e-4, atol=2e-5,
                         hint=hint or "PE[pos, 2i] = sin(pos / 10000^(2i/d_model)), "
                                      "PE[pos, 2i+1] = cos(the same angle)")
        return case

    def first_row():
        table = fn(3, 8)
        expected = torch.tensor([0.0, 1.0] * 4)
        assert_close(table[0], expected, what="row 0 (position 0)", atol=1e-6,
                     hint="at position 0 every angle is 0: sin gives 0 in the even columns, "
                          "cos gives 1 in the odd ones")

    run_checks("sinusoidal_encoding", [
        ("50 positions, d_model=16", values(50, 16)),
        ("d_model=6, not a multiple of 4", values(9, 6)),
        ("one position, d_model=2", values(1, 2)),
        ("position 0", first_row),
    ])


def check_rope_angles(fn: Callable) -> None:
    """Check ``rope_angles(positions, head_dim, base)``: shape, float64, values, positions unchanged."""

    def mistakes(positions, h, base):
        p = np.asarray(positions, dtype=np.float64)[..., None]
        i = np.arange(h // 2)
        return {
            "the exponent is -2i / head_dim for pair i = 0, ..., head_dim/2 - 1; you used -i / head_dim":
                p * base ** (-i / h),
            "the exponent is negative: base ** (-2i / head_dim), so pair 0 turns fastest (1 radian per position)":
                p * base ** (2 * i / h),
            "use the positions you were given (they need not start at 0), not 0, 1, ..., n-1":
                np.broadcast_to(np.arange(p.shape[-2], dtype=np.float64)[:, None], p.shape[:-1] + (1,))
                * base ** (-2 * i / h),
            f"you used base 10000 although base={base:g} was given: use the base argument":
                p * 10000.0 ** (-2 * i / h),
        }

    def values(positions, h, base, label, dtype=torch.int64):
        def case():
            positions_tensor = torch.tensor(positions, dtype=dtype)
            angles = (assert_not_modified(fn, positions_tensor, h) if base is None
                      else assert_not_modified(fn, positions_tensor, h, base=base))
            base_used = 10000.0 if base is None else base
            assert isinstance(angles, torch.Tensor), (
                f"rope_angles must return a torch.Tensor, got {type(angles).__name__}")
            expected = reference_rope_angles(positions, h, base_used)
            assert_shape(angles, expected.shape, what=f"rope_angles ({label})", meaning="(..., n, head_dim // 2)")
            assert_dtype(angles, torch.float64, what=f"rope_angles ({label})",
                         hint="return float64 angles: convert the positions with .double() before multiplying, "
                              "so that large positions keep their precision")
            hint = explain_mismatch(angles, _differing(mistakes(positions, h, base_used), expected),
                                    rtol=1e-9, atol=1e-9)
            assert_close(angles, expected, what=f"rope_angles ({label})", rtol=1e-12, atol=1e-12,
                         hint=hint or "angles[..., m, i] = positions[..., m] * base ** (-2i / head_dim), computed "
                                      "in float64 throughout (float32 powers are not precise enough here)")
        return case

    run_checks("rope_angles", [
        ("positions 0..5, head_dim=8", values(list(range(6)), 8, 10000.0, "positions 0..5")),
        ("positions that do not start at 0", values([7, 8, 9, 30], 6, 10000.0, "positions 7, 8, 9, 30")),
        ("a batch of positions, base 1,000,000", values([[0, 1, 2], [40, 41, 42]], 16, 1e6, "batched")),
        ("large positions", values([0, 1000, 65535], 128, 1e6, "positions up to 65535")),
        ("int32 positions", values([[5, 6, 7, 8]], 10, 500000.0, "int32 positions", dtype=torch.int32)),
        ("the default base, 10000", values([0, 3, 11], 12, None, "default base")),
    ])


def _differing(candidates: dict, expected) -> dict:
    """The candidates that differ from the right answer (a mistake that changes nothing here, such
    as ignoring positions that are 0, 1, 2, ... anyway, must not be named)."""
    right = _as_float64(expected)
    return {hint: c for hint, c in candidates.items()
            if not torch.allclose(_as_float64(c), right, rtol=1e-4, atol=1e-4)}


def _rope_mistakes(x, positions, base, layout):
    other = "interleaved" if layout == "half" else "half"
    n = x.shape[-2]
    found = {
        f"you rotated the pairs of the '{other}' layout; layout='{layout}' pairs "
        + ("dimension i with i + head_dim/2 (the two halves)" if layout == "half" else "dimensions 2i and 2i+1")
        : reference_rope(x, positions, base, other),
        "you rotated the wrong way: (a, b) becomes (a cos t - b sin t, a sin t + b cos t)":
            reference_rope(x, -np.asarray(positions), base, layout),
        "use the positions you were given, not 0, 1, ..., n-1":
            reference_rope(x, np.broadcast_to(np.arange(n), np.shape(positions)), base, layout),
    }
    if layout == "interleaved":  # rotated the right pairs, then put them back as two halves
        rotated = _pairs_as_complex(_as_float64(x).numpy(), layout) * np.exp(
            1j * reference_rope_angles(positions, x.shape[-1], base))
        found["you rotated the right pairs, then put them back as two halves: for 'interleaved' each pair goes "
              "back to its own dimensions 2i, 2i+1 (torch.stack([...], dim=-1).flatten(-2))"] = (
            torch.from_numpy(_complex_as_pairs(rotated, "half")))
    return found


def _score_matrix(q, k):
    return q @ k.transpose(-2, -1)


def check_apply_rope(fn: Callable) -> None:
    """Check ``apply_rope(x, positions, base, layout)`` against complex multiplication in float64,
    and the properties of a rotation."""
    g = _seeded(5)

    def values(shape, positions, base, layout, dtype=torch.float64):
        def case():
            x = torch.randn(*shape, generator=g, dtype=torch.float64).to(dtype)
            positions_tensor = torch.as_tensor(positions)
            out = assert_not_modified(fn, x, positions_tensor, base=base, layout=layout)
            assert isinstance(out, torch.Tensor), f"apply_rope must return a torch.Tensor, got {type(out).__name__}"
            assert_shape(out, x.shape, what="apply_rope(x, ...)", meaning="x.shape")
            assert_dtype(out, dtype, what=f"apply_rope of a {str(dtype)[6:]} x",
                         hint="convert cos and sin to x.dtype before multiplying")
            expected = reference_rope(x, positions, base, layout)
            half = dtype in (torch.float16, torch.bfloat16)
            rtol, atol = (3e-2, 3e-2) if dtype == torch.bfloat16 else (None, None)  # bfloat16 keeps 8 bits
            if dtype == torch.float64:
                hint = explain_mismatch(out, _differing(_rope_mistakes(x, positions, base, layout), expected),
                                        rtol=1e-6, atol=1e-6)
            elif half:
                hint = explain_mismatch(out, {
                    f"you computed the angles (or the positions) in {str(dtype)[6:]}, which cannot hold "
                    "angles like these precisely: take cos and sin of the float64 angles of rope_angles, "
                    "and convert only cos and sin to x.dtype": reference_rope(x, positions, base, layout, dtype),
                }, rtol=2e-2, atol=2e-2)
            else:
                hint = ""
            close = torch.allclose(_as_float64(out), expected, rtol=1e-2, atol=1e-2)
            if not hint and close and not half:
                hint = ("you are close but not precise enough: take cos and sin of the float64 angles of "
                        "rope_angles, with no float32 on the way, then convert them to x.dtype")
            assert_close(out, expected, what=f"apply_rope of a {str(dtype)[6:]} x (layout='{layout}')",
                         rtol=rtol, atol=atol,
                         hint=hint or "pair (a, b) at angle t becomes (a cos t - b sin t, a sin t + b cos t)")
        return case

    def norms_kept():
        x = torch.randn(3, 10, 8, generator=g, dtype=torch.float64)
        for layout in ("half", "interleaved"):
            out = fn(x, torch.arange(10) * 7, layout=layout)
            assert_close(out.norm(dim=-1), x.norm(dim=-1), what=f"the norms of the rotated vectors ({layout})",
                         hint="a rotation never changes a vector's length: check the signs of the sin terms")

    def position_zero():
        x = torch.randn(4, 6, generator=g, dtype=torch.float64)
        out = fn(x, torch.zeros(4, dtype=torch.long))
        assert_close(out, x, what="apply_rope at position 0",
                     hint="at position 0 every angle is 0, so nothing may change")

    def relative():
        h = 16
        q = torch.randn(5, h, generator=g, dtype=torch.float64)
        k = torch.randn(7, h, generator=g, dtype=torch.float64)
        q_pos, k_pos = torch.arange(5) + 3, torch.arange(7)
        for layout in ("half", "interleaved"):
            scores = _score_matrix(fn(q, q_pos, layout=layout), fn(k, k_pos, layout=layout))
            for shift in (1, 100, 12345):
                shifted = _score_matrix(fn(q, q_pos + shift, layout=layout), fn(k, k_pos + shift, layout=layout))
                assert_close(shifted, scores, what=f"scores with both positions shifted by {shift} ({layout})",
                             rtol=1e-9, atol=1e-9,
                             hint="the query and the key must be rotated with the same angles per pair, "
                                  "so that only the difference of their positions is left in the score")

    def batched_positions():
        x = torch.randn(2, 3, 5, 8, generator=g, dtype=torch.float64)
        positions = torch.tensor([[[0, 1, 2, 3, 4]], [[10, 11, 12, 13, 14]]])  # (batch, 1, n)
        out = fn(x, positions)
        assert_close(out, reference_rope(x, positions), what="apply_rope with positions (batch, 1, n)",
                     hint="positions broadcast against x's leading dimensions: index the angles as "
                          "(..., n, head_dim/2), not (n, head_dim/2)")

    run_checks("apply_rope", [
        ("half layout, positions 0..6", values((7, 8), list(range(7)), 10000.0, "half")),
        ("interleaved layout, positions 0..6", values((7, 8), list(range(7)), 10000.0, "interleaved")),
        ("heads and positions from a cache, 40..44", values((2, 3, 5, 12), list(range(40, 45)), 10000.0, "half")),
        ("base 1,000,000, scattered positions", values((4, 16), [3, 0, 900, 17], 1e6, "interleaved")),
        ("float32 kept", values((2, 6, 8), list(range(6)), 10000.0, "half", torch.float32)),
        ("float32 at positions near 5000", values((3, 16), [5000, 5001, 5003], 10000.0, "half", torch.float32)),
        ("float16 kept, positions 100 ... 105", values((2, 6, 16), list(range(100, 106)), 10000.0, "half",
                                                       torch.float16)),
        ("bfloat16 kept", values((3, 5, 8), [0, 1, 2, 3, 200], 500000.0, "interleaved", torch.bfloat16)),
        ("position 0 changes nothing", position_zero),
        ("norms are unchanged", norms_kept),
        ("the score depends only on the distance", relative),
        ("positions of shape (batch, 1, n)", batched_positions),
    ])


# --------------------------------------------------------------------------------------------
# The design exercise (not graded): a bias that extrapolates
# --------------------------------------------------------------------------------------------

LENGTH_BIAS_PASS = 0.85   # mean accuracy the model must reach at the training length and at 128 tokens


def _bias_values(bias_fn: Callable, longest: int) -> np.ndarray:
    """bias_fn at distances 0 .. longest - 1 (float64, -inf allowed), with clear errors."""
    from attnlab.checks.common import your_line
    from attnlab.tasks.who_came_last import bias_values

    try:
        return bias_values(bias_fn, longest).double().numpy()   # validates shape, nan, +inf, distance 0
    except NotImplementedError:
        raise
    except ValueError as error:
        raise CheckFailed(f"my_bias: {error}") from None
    except Exception as error:  # noqa: BLE001 (the learner's code crashed: say where)
        raise CheckFailed(f"my_bias(distance) raised {type(error).__name__}: {error}. It gets an int64 tensor of "
                          "distances and must return a float tensor of the same shape",
                          your_line(error.__traceback__)) from None


def _why_not(bias: np.ndarray, short: float, long: float, low: int, high: int) -> str:
    """What in a bias of these values (at distances 0, 1, 2, ...) is likely to blame for a model that
    did not reach ``LENGTH_BIAS_PASS`` at the training length ``high`` (``short``) or at ``len(bias)``
    tokens (``long``): one or more sentences."""
    if np.all(bias == bias[0]):
        return ("it gives the same number at every distance, which is no position at all: the model "
                "cannot tell the last party from an earlier one.")
    if short >= LENGTH_BIAS_PASS:
        near = np.exp(bias[:high] - bias[0]).sum()
        far = np.exp(bias[high:] - bias[0]).sum()
        return (f"it works at the training length but the far keys add up: keys {high} to {len(bias) - 1} "
                f"tokens back together keep weight {far:.3g} (relative to distance 0), against {near:.3g} for "
                f"the nearest {high}. A bias must fall fast enough that this sum stays small however long "
                "the input.")
    within = bias[:high]                                # distances seen in training: 0 .. high - 1
    finite = np.isfinite(within)
    reasons = []
    rising = [d for d in range(high - 1) if finite[d + 1] and within[d + 1] > within[d] + 1e-9]
    if rising:
        d = rising[0]
        reasons.append(f"it grows from distance {d} to {d + 1} ({within[d]:.3g} to {within[d + 1]:.3g}): a key "
                       "farther back gets more weight, so an older party can outweigh the last one.")
    flat = [d for d in range(high - 1) if finite[d + 1] and abs(within[d + 1] - within[d]) < 1e-9]
    if flat:
        d = flat[0]
        reasons.append(f"distances {d} and {d + 1} get the same bias: of two parties there the model cannot "
                       "tell which came later.")
    if not finite.all():
        d = int(np.flatnonzero(~finite)[0])
        reasons.append(f"it is -inf from distance {d}: the '?' cannot see a party that far back, yet streams "
                       f"of up to {high} tokens put the last party there.")
    if not reasons:
        reasons.append(f"it falls by only {within[0] - within[1]:.3g} from distance 0 to 1: the weights of two "
                       "older parties together can outweigh the last one. Make it fall faster.")
    return " Also, ".join(reasons)


def check_length_bias(bias_fn: Callable, *, seeds=(0, 1, 2), steps: int = 150, long: int = 128,
                      progress: bool = True) -> dict | None:
    """Design check of lesson 05 (not graded): train the "who came last?" model with ``bias_fn``
    added to its scores (``attnlab.tasks.who_came_last``, kind "bias") on streams of 8 to 16 tokens,
    once per seed, and test it at 16 and at ``long`` tokens.

    Any bias passes with which the mean accuracy over the seeds is at least ``LENGTH_BIAS_PASS`` at
    both lengths; otherwise the message says what in the bias is likely to blame. Returns the
    accuracies, {"short": [...], "long": [...]} (one per seed), or None while ``bias_fn`` is not written.
    """
    from attnlab.tasks import who_came_last as task

    low, high = task.TRAIN_LENGTHS
    try:
        bias = _bias_values(bias_fn, long)
    except NotImplementedError:
        print("Exercise 4 is not written yet: write my_bias in the cell above, run it, then run this cell. "
              "(This exercise is not graded.)")
        return None
    measured = {"short": [], "long": []}
    for seed in seeds:
        model, _ = task.train_length_model("bias", seed, steps=steps, bias_fn=bias_fn, progress=progress)
        measured["short"].append(task.accuracy(model, high))
        measured["long"].append(task.accuracy(model, long))
    short, long_ = float(np.mean(measured["short"])), float(np.mean(measured["long"]))
    summary = (f"trained on {low} to {high} tokens: accuracy {short:.0%} at {high} tokens, {long_:.0%} at {long} "
               f"(mean of seeds {', '.join(map(str, seeds))}; "
               f"{', '.join(f'{a:.0%}' for a in measured['long'])} at {long})")
    if short >= LENGTH_BIAS_PASS and long_ >= LENGTH_BIAS_PASS:
        print(f"✓ my_bias extrapolates: {summary}.")
        return measured
    raise CheckFailed(f"my_bias does not extrapolate yet ({summary}; {LENGTH_BIAS_PASS:.0%} needed at both): "
                      + _why_not(bias, short, long_, low, high))
