"""Lesson 05: word order, from sinusoidal encodings to rotary positions (RoPE).

You fill in three functions here; the notebook ``05_word_order.ipynb`` explains each one and checks
it. Shapes use ``...`` for any number of leading batch dimensions; ``h`` is the size of one
attention head.

- ``sinusoidal_encoding(n_positions, d_model)``: the fixed position vectors of Vaswani et al.
  (2017, section 3.5), added to the token embeddings once, before the first layer.
- ``rope_angles(positions, head_dim, base=10000.0)``: the rotation angle of every pair of
  dimensions at every position, ``position * base ** (-2i / head_dim)``.
- ``apply_rope(x, positions, base=10000.0, layout="half")``: rotate queries or keys by those
  angles (Su et al., 2021), in every layer. Lesson 04's ``MultiHeadAttention(rope_base=...)``
  calls it.

Positions are integers: token indices, which need not start at 0 (a KV cache continues from its
length) or be contiguous. Angles are computed in float64: near position 100,000 float32 angles are
off by several thousandths of a radian.
"""

from __future__ import annotations

import numbers

import torch

LAYOUTS = ("half", "interleaved")


def _check_size(name: str, value, even: bool) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    if even and value % 2:
        raise ValueError(
            f"{name} must be even, got {value}: the dimensions come in pairs (a sine and a cosine, "
            "or the two coordinates of a rotation)"
        )
    return int(value)


def _check_base(base) -> float:
    if isinstance(base, bool) or not isinstance(base, numbers.Real) or not base > 1:
        raise ValueError(f"base must be a number greater than 1, got {base!r}")
    return float(base)


def _as_positions(positions) -> torch.Tensor:
    """``positions`` as an integer tensor; lists and ranges of integers are accepted."""
    if not isinstance(positions, torch.Tensor):
        try:
            positions = torch.as_tensor(positions)
        except (TypeError, ValueError, RuntimeError):
            raise TypeError(
                f"positions must be an integer tensor (or a list of integers), got {type(positions).__name__}"
            ) from None
    if positions.is_floating_point() or positions.is_complex() or positions.dtype == torch.bool:
        raise TypeError(
            f"positions must hold integers (token indices), got dtype {positions.dtype}; "
            "round or convert them with .long() if you really mean whole positions"
        )
    if positions.dim() == 0:
        raise ValueError("positions must have at least one dimension: (n,) or (..., n)")
    return positions


def sinusoidal_encoding(n_positions: int, d_model: int) -> torch.Tensor:
    """The sinusoidal position encodings of Vaswani et al. (2017), section 3.5.

    Returns a float32 tensor of shape (n_positions, d_model) whose row ``pos`` encodes position
    ``pos`` (0, 1, ..., n_positions - 1):

        PE[pos, 2i]     = sin(pos / 10000 ** (2i / d_model))
        PE[pos, 2i + 1] = cos(pos / 10000 ** (2i / d_model))

    so columns ``2i`` and ``2i + 1`` share one frequency, and the wavelengths grow geometrically
    from 2π (i = 0) toward 10000·2π. Compute in float64 and convert the result to float32 at the
    end. d_model must be even.
    """
    _check_size("n_positions", n_positions, even=False)
    _check_size("d_model", d_model, even=True)
    ### BEGIN SOLUTION
    pos = torch.arange(n_positions, dtype=torch.float64)[:, None]            # (n, 1)
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)                 # (d/2,)
    angles = pos / 10000.0 ** (two_i / d_model)                              # (n, d/2)
    encoding = torch.empty(n_positions, d_model, dtype=torch.float64)
    encoding[:, 0::2] = torch.sin(angles)
    encoding[:, 1::2] = torch.cos(angles)
    return encoding.float()
    ### END SOLUTION


def rope_angles(positions: torch.Tensor, head_dim: int, base: float = 10000.0) -> torch.Tensor:
    """Rotation angles of RoPE: one angle per position and pair of dimensions.

    positions: integer tensor (..., n) of token positions (any integers, not necessarily from 0).
    head_dim: the size h of a query or key vector; must be even, since dimensions rotate in pairs.
    base: sets the slowest rotation; 10000 in the RoFormer paper, 1,000,000 in Qwen2.5.
    Returns a **float64** tensor (..., n, head_dim // 2) with

        angles[..., m, i] = positions[..., m] * base ** (-2i / head_dim),    i = 0, ..., h/2 - 1

    computed in float64 throughout (convert the positions before multiplying): pair 0 turns by
    1 radian per position, each later pair more slowly. ``positions`` is left unchanged.
    """
    positions = _as_positions(positions)
    _check_size("head_dim", head_dim, even=True)
    base = _check_base(base)
    ### BEGIN SOLUTION
    exponents = torch.arange(0, head_dim, 2, dtype=torch.float64, device=positions.device) / head_dim
    inverse_frequencies = base ** -exponents                                  # (h/2,)
    return positions.to(torch.float64)[..., None] * inverse_frequencies       # (..., n, h/2)
    ### END SOLUTION


def apply_rope(x: torch.Tensor, positions: torch.Tensor, base: float = 10000.0, layout: str = "half") -> torch.Tensor:
    """Rotate each pair of dimensions of ``x`` by the RoPE angle of its position.

    x: (..., n, head_dim) queries or keys, floating point, head_dim even.
    positions: integer tensor (n,) or (..., n), broadcastable against x's leading dimensions,
       e.g. (batch, 1, n) for x of shape (batch, heads, n, head_dim).
    base: as in ``rope_angles``.
    layout: which dimensions form pair i (rotated by angle i of ``rope_angles``):
       "half":        (i, i + h/2), the first and second halves of the vector, as Qwen2.5, LLaMA
                      and most open models in Hugging Face transformers;
       "interleaved": (2i, 2i + 1), neighbours, as the RoFormer paper (Su et al., 2021).
    A pair (a, b) rotated by angle t becomes (a cos t - b sin t, a sin t + b cos t).
    Returns a new tensor of x's shape and dtype; x is left unchanged. Take cos and sin of the
    float64 angles, then convert them to x's dtype before multiplying.
    """
    if not isinstance(x, torch.Tensor) or not x.is_floating_point():
        raise TypeError(f"x must be a floating-point torch.Tensor, got {getattr(x, 'dtype', type(x).__name__)}")
    if x.dim() < 2:
        raise ValueError(f"x must have shape (..., n, head_dim), got {tuple(x.shape)}")
    positions = _as_positions(positions).to(x.device)
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    head_dim = _check_size("head_dim (the last dimension of x)", x.shape[-1], even=True)
    try:
        shape = torch.broadcast_shapes((*positions.shape, head_dim // 2), (*x.shape[:-1], head_dim // 2))
    except RuntimeError:
        shape = None
    if shape is None or shape[:-1] != x.shape[:-1]:
        raise ValueError(
            f"positions of shape {tuple(positions.shape)} do not fit x of shape {tuple(x.shape)}: "
            f"need one position per token, (n,) with n = {x.shape[-2]}, or (..., n) broadcasting "
            "against x's leading dimensions"
        )
    ### BEGIN SOLUTION
    angles = rope_angles(positions, head_dim, base)                          # (..., n, h/2), float64
    cos, sin = torch.cos(angles).to(x.dtype), torch.sin(angles).to(x.dtype)
    if layout == "half":
        first, second = x[..., : head_dim // 2], x[..., head_dim // 2:]
        return torch.cat([first * cos - second * sin, first * sin + second * cos], dim=-1)
    even, odd = x[..., 0::2], x[..., 1::2]
    rotated = torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1)  # (..., n, h/2, 2)
    return rotated.flatten(-2)
    ### END SOLUTION
