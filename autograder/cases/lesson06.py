"""Trusted cases of lesson 06 (FeedForward, LayerNorm, RMSNorm, Residual).

Every module is built inside the worker by the recipes ``feedforward_module`` and
``feedforward_residual`` (``autograder.recipes``): constructed with ``init``, cast to the case's
dtype, its parameters set by name from random arrays (so a module that ignores its weights, or
names them differently, fails), then called; ``feedforward_parameters`` lists a ``FeedForward``'s
parameters by name (a missing bias, or a gate the GELU block should not have, fails). LayerNorm and
RMSNorm must not call PyTorch's norms (``attnlab.shortcuts.FORBIDDEN``, which the visible checks
police too).
"""

from __future__ import annotations

import numpy as np

from attnlab.shortcuts import forbidden
from autograder.cases import Case, Inputs

_NUMPY = {"float16": np.float16, "bfloat16": np.float32, "float32": np.float32, "float64": np.float64}


def _array(rng: np.random.Generator, shape, dtype: str, scale: float = 1.0, offset: float = 0.0) -> np.ndarray:
    """Random normal entries; bfloat16 arrays travel as float32 and are cast inside the worker."""
    return (offset + scale * rng.standard_normal(shape)).astype(_NUMPY[dtype])


def _x(inputs: Inputs, rng, batch, d, dtype, scale=1.0, offset=0.0, equal_rows=False) -> dict:
    x = _array(rng, (*batch, d), dtype, scale, offset)
    if equal_rows:  # every other vector has all its entries equal: zero variance
        flat = x.reshape(-1, d)
        flat[::2] = flat[::2, :1]
    return inputs.add(x)


def _feedforward(grade_id, rng, batch, d_model, d_ff, activation, bias, dtype="float64", scale=1.0, label=""):
    inputs = Inputs()
    x = _x(inputs, rng, batch, d_model, dtype, scale)
    shapes = {"up": (d_ff, d_model), "down": (d_model, d_ff)}
    if activation == "swiglu":
        shapes["gate"] = (d_ff, d_model)
    parameters = {}
    for name, shape in shapes.items():
        parameters[f"{name}.weight"] = inputs.add(_array(rng, shape, dtype, shape[1] ** -0.5))["array"]
        if bias:
            parameters[f"{name}.bias"] = inputs.add(_array(rng, shape[:1], dtype, 0.5))["array"]
    return Case(grade_id, "FeedForward", [x], {}, inputs.arrays, recipe="feedforward_module",
                init={"d_model": d_model, "d_ff": d_ff, "activation": activation, "bias": bias},
                parameters=parameters, options={"dtype": dtype}, label=label)


def _norm(grade_id, rng, target, batch, d, dtype="float64", eps=None, scale=1.0, offset=0.0,
          equal_rows=False, label=""):
    inputs = Inputs()
    x = _x(inputs, rng, batch, d, dtype, scale, offset, equal_rows)
    parameters = {"weight": inputs.add(_array(rng, (d,), dtype, 0.5, 1.0))["array"]}
    if target == "LayerNorm":
        parameters["bias"] = inputs.add(_array(rng, (d,), dtype, 0.5))["array"]
    init = {"d": d} if eps is None else {"d": d, "eps": eps}
    return Case(grade_id, target, [x], {}, inputs.arrays, recipe="feedforward_module", init=init,
                parameters=parameters, options={"dtype": dtype}, label=label,
                forbidden=forbidden(f"feedforward.{target}"))


def _feedforward_parameters(grade_id, d_model, d_ff, activation, bias):
    """The parameters of ``FeedForward(d_model, d_ff, activation, bias)``, by name."""
    names = [f"{layer}.{kind}" for layer in ("gate", "up", "down") for kind in ("weight", "bias")]
    return Case(grade_id, "FeedForward", recipe="feedforward_parameters",
                init={"d_model": d_model, "d_ff": d_ff, "activation": activation, "bias": bias},
                options={"names": names}, label=f"parameters of {activation}, bias={bias}")


def _residual(grade_id, rng, batch, d, placement, norm, dtype="float64", eps=None, extra=False, scale=1.0,
              label=""):
    """Residual around the worker's trusted sublayer ``tanh(linear(x)) * scale (+ shift)``; with
    ``extra``, ``scale`` is passed positionally and ``shift`` by keyword (they must reach it)."""
    inputs = Inputs()
    x = _x(inputs, rng, batch, d, dtype, scale)
    parameters = {
        "sublayer.linear.weight": inputs.add(_array(rng, (d, d), dtype, 1.5 * d ** -0.5))["array"],
        "sublayer.linear.bias": inputs.add(_array(rng, (d,), dtype, 0.3))["array"],
        "norm.weight": inputs.add(_array(rng, (d,), dtype, 0.5, 1.0))["array"],
    }
    if norm == "layer":
        parameters["norm.bias"] = inputs.add(_array(rng, (d,), dtype, 0.5))["array"]
    args, kwargs = [x], {}
    if extra:
        args.append(float(rng.uniform(0.5, 3.0)))
        kwargs["shift"] = _x(inputs, rng, (), d, dtype)
    init = {"d": d, "placement": placement, "norm": norm}
    if eps is not None:
        init["eps"] = eps
    return Case(grade_id, "Residual", args, kwargs, inputs.arrays, recipe="feedforward_residual", init=init,
                parameters=parameters, options={"dtype": dtype}, label=label)


def _batch(rng) -> tuple[int, ...]:
    return tuple(int(b) for b in rng.integers(1, 5, size=int(rng.integers(0, 3))))


def cases() -> list[Case]:
    rng = np.random.default_rng(20260606)
    found: list[Case] = [
        _feedforward("feedforward_visible", rng, (2, 5), 6, 10, "gelu", True, label="GELU with biases"),
        _feedforward("feedforward_visible", rng, (3,), 4, 7, "swiglu", False, dtype="float32",
                     label="SwiGLU, float32"),
    ]
    for index in range(8):
        d_model, d_ff = int(rng.integers(1, 13)), int(rng.integers(1, 40))
        found.append(_feedforward(
            "feedforward_hidden", rng, _batch(rng), d_model, d_ff, ("gelu", "swiglu")[index % 2], bool(index % 3),
            dtype=("float64", "float32", "float64", "bfloat16")[index % 4], scale=(1.0, 1e3)[index == 5],
            label=f"hidden {index}"))

    found += [
        _norm("layer_norm_visible", rng, "LayerNorm", (2, 3), 8, label="weight and bias"),
        _norm("layer_norm_visible", rng, "LayerNorm", (5,), 6, dtype="float32", equal_rows=True,
              label="all-equal rows, float32"),
    ]
    for index in range(8):
        d = int(rng.integers(1, 40))
        found.append(_norm(
            "layer_norm_hidden", rng, "LayerNorm", _batch(rng), d,
            dtype=("float64", "float32", "float16", "float64", "bfloat16", "float32", "float64", "float64")[index],
            eps=(None, 1e-3, None, 0.5, None, 1e-8, 1e-5, None)[index],
            scale=(1.0, 0.05, 300.0, 0.2, 1.0, 1e6, 1.0, 3.0)[index],
            offset=(0.0, 0.0, 0.0, 0.0, 2.0, 0.0, 0.0, 50.0)[index],
            equal_rows=index in (1, 6), label=f"hidden {index}"))

    found += [
        _norm("rms_norm_visible", rng, "RMSNorm", (2, 3), 8, label="weight"),
        _norm("rms_norm_visible", rng, "RMSNorm", (4,), 5, dtype="float32", offset=3.0, label="mean kept, float32"),
    ]
    for index in range(7):
        d = int(rng.integers(1, 40))
        found.append(_norm(
            "rms_norm_hidden", rng, "RMSNorm", _batch(rng), d,
            dtype=("float64", "float32", "float16", "float64", "bfloat16", "float32", "float64")[index],
            eps=(None, 1e-2, None, 0.5, None, 1e-9, 1e-6)[index],
            scale=(1.0, 0.05, 300.0, 0.2, 1.0, 1e6, 1.0)[index],
            equal_rows=index in (3, 6), label=f"hidden {index}"))

    found += [
        _residual("residual_visible", rng, (2, 3), 6, "pre", "layer", label="pre-norm"),
        _residual("residual_visible", rng, (2, 3), 6, "post", "layer", label="post-norm"),
    ]
    for index in range(8):
        found.append(_residual(
            "residual_hidden", rng, _batch(rng), int(rng.integers(2, 20)), ("pre", "post")[index % 2],
            ("layer", "rms")[(index // 2) % 2], dtype=("float64", "float32")[index // 4],
            eps=(None, 1e-3, None, 0.25)[index % 4], extra=index in (2, 5, 7), scale=(1.0, 4.0)[index == 6],
            label=f"hidden {index}"))

    # Drawn last, so that the cases above keep their numbers.
    found += [_feedforward_parameters("feedforward_hidden", 5, 9, activation, bias)
              for activation in ("gelu", "swiglu") for bias in (True, False)]
    found += [
        _norm("layer_norm_hidden", rng, "LayerNorm", (3, 4), 9, offset=1e5,
              label="entries near 100000: the variance from x - mean"),
        _norm("rms_norm_hidden", rng, "RMSNorm", (3, 4), 9, offset=1e5, label="entries near 100000"),
    ]
    return found
