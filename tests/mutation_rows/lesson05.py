"""Mutation rows of lesson 05 (positions.py); merged into tests/mutation_table.py when done.

apply_rope's trusted cases include RoPE inside the reference MultiHeadAttention decoding with a KV
cache (recipe ``rope_attention_with_cache``), which reaches ``attnlab.positions`` through
``sys.modules``: the parity harness installs the mutant there, so those cases run the mutant too.
"""

from tests.parity import Mutation as M

_SIN_COS = "    encoding[:, 0::2] = torch.sin(angles)\n    encoding[:, 1::2] = torch.cos(angles)"
_FREQUENCIES = "    inverse_frequencies = base ** -exponents                                  # (h/2,)"
_ANGLES = "    return positions.to(torch.float64)[..., None] * inverse_frequencies       # (..., n, h/2)"
_COS_SIN = "    cos, sin = torch.cos(angles).to(x.dtype), torch.sin(angles).to(x.dtype)"
_HALF = "        return torch.cat([first * cos - second * sin, first * sin + second * cos], dim=-1)"
_INTERLEAVED = "    rotated = torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1)"

ROWS: list[M] = [
    # sinusoidal_encoding
    M("05", "sinusoidal", "sin and cos swapped", _SIN_COS,
      "    encoding[:, 0::2] = torch.cos(angles)\n    encoding[:, 1::2] = torch.sin(angles)",
      r"sin in the odd columns"),
    M("05", "sinusoidal", "all sines first", _SIN_COS + "\n    return encoding.float()",
      "    return torch.cat([torch.sin(angles), torch.cos(angles)], dim=1).float()",
      r"all the sines first"),
    M("05", "sinusoidal", "exponent i / d_model",
      "    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)",
      "    two_i = torch.arange(0, d_model // 2, dtype=torch.float64)",
      r"you used i / d_model"),
    M("05", "sinusoidal", "cosine with its own column index",
      "    encoding[:, 1::2] = torch.cos(angles)",
      "    encoding[:, 1::2] = torch.cos(pos / 10000.0 ** ((two_i + 1) / d_model))",
      r"its own index 2i \+ 1"),
    M("05", "sinusoidal", "positions from 1",
      "    pos = torch.arange(n_positions, dtype=torch.float64)[:, None]",
      "    pos = torch.arange(1, n_positions + 1, dtype=torch.float64)[:, None]",
      r"positions start at 0"),
    M("05", "sinusoidal", "returns float64", "    return encoding.float()", "    return encoding",
      r"dtype torch\.float64, expected torch\.float32"),
    M("05", "sinusoidal", "multiplies by the frequency's inverse",
      "    angles = pos / 10000.0 ** (two_i / d_model)", "    angles = pos * 10000.0 ** (two_i / d_model)",
      r"PE\[pos, 2i\] = sin"),

    # rope_angles
    M("05", "rope_angles", "exponent i / head_dim",
      "    exponents = torch.arange(0, head_dim, 2, dtype=torch.float64, device=positions.device) / head_dim",
      "    exponents = torch.arange(0, head_dim // 2, dtype=torch.float64, device=positions.device) / head_dim",
      r"you used -i / head_dim"),
    M("05", "rope_angles", "positive exponent", _FREQUENCIES,
      "    inverse_frequencies = base ** exponents", r"exponent is negative"),
    M("05", "rope_angles", "ignores the positions", _ANGLES,
      "    counted = torch.arange(positions.shape[-1], dtype=torch.float64, device=positions.device)\n"
      "    return counted.expand(positions.shape)[..., None] * inverse_frequencies",
      r"use the positions you were given"),
    M("05", "rope_angles", "float32 angles", _ANGLES,
      "    return positions.float()[..., None] * inverse_frequencies.float()",
      r"dtype torch\.float32.*float64"),
    M("05", "rope_angles", "float32 frequencies", _FREQUENCIES,
      "    inverse_frequencies = (base ** -exponents.float()).double()",
      r"float64 throughout"),
    M("05", "rope_angles", "ignores base", _FREQUENCIES,
      "    inverse_frequencies = 10000.0 ** -exponents", r"used base 10000 although base=1e\+06 was given"),

    # apply_rope
    M("05", "apply_rope", "layouts swapped", '    if layout == "half":\n        first',
      '    if layout == "interleaved":\n        first',
      r"you rotated the pairs of the 'interleaved' layout"),
    M("05", "apply_rope", "rotates the wrong way", _HALF,
      "        return torch.cat([first * cos + second * sin, second * cos - first * sin], dim=-1)",
      r"rotated the wrong way"),
    M("05", "apply_rope", "rotates the wrong way (interleaved)", _INTERLEAVED,
      "    rotated = torch.stack([even * cos + odd * sin, odd * cos - even * sin], dim=-1)",
      r"interleaved.*rotated the wrong way"),
    M("05", "apply_rope", "ignores the positions",
      "    angles = rope_angles(positions, head_dim, base)",
      "    angles = rope_angles(torch.arange(x.shape[-2], device=x.device), head_dim, base)",
      r"40\.\.44.*use the positions you were given"),
    M("05", "apply_rope", "float64 cos and sin", _COS_SIN,
      "    cos, sin = torch.cos(angles), torch.sin(angles)",
      r"float32 x.*convert cos and sin to x\.dtype"),
    M("05", "apply_rope", "angles in x's dtype", _COS_SIN,
      "    angles = angles.to(x.dtype)\n    cos, sin = torch.cos(angles), torch.sin(angles)",
      r"float16 x.*computed the angles \(or the positions\) in float16"),
    M("05", "apply_rope", "float32 cos and sin", _COS_SIN,
      "    cos, sin = torch.cos(angles).float(), torch.sin(angles).float()",
      r"not precise enough"),
    M("05", "apply_rope", "half precision computed in float32", _COS_SIN,
      "    work = torch.promote_types(x.dtype, torch.float32)\n"
      "    cos, sin = torch.cos(angles).to(work), torch.sin(angles).to(work)",
      r"float16 x has dtype torch\.float32, expected torch\.float16"),
    M("05", "apply_rope", "interleaved pairs put back as halves",
      "    return rotated.flatten(-2)", "    return torch.cat([rotated[..., 0], rotated[..., 1]], dim=-1)",
      r"put them back as two halves"),
    M("05", "apply_rope", "positions broadcast against the wrong axes",
      "    angles = rope_angles(positions, head_dim, base)",
      "    angles = rope_angles(positions.reshape(-1, positions.shape[-1])[0], head_dim, base)",
      r"positions of shape \(batch, 1, n\).*broadcast"),
]
