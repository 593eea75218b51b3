# Generated from solutions/attnlab/feedforward.py by `python -m autograder release`; maintainers edit that file, not this one.
# Learners: fill in the bodies marked YOUR CODE HERE (lesson 06).
"""Lesson 06: the feed-forward block, normalization and residual connections.

You fill in four pieces here; the notebook ``06_feed_forward.ipynb`` explains each one and checks it.
Every module works on tensors of shape ``(..., d)``: any number of leading dimensions (batch,
sequence), features last. Each token's vector is transformed on its own.

- ``FeedForward(d_model, d_ff, activation="gelu", bias=True)``: two linear maps around a GELU, or
  three with a gate (``"swiglu"``, as in LLaMA and Qwen2.5).
- ``LayerNorm(d, eps=1e-5)``: subtract each vector's mean, divide by its standard deviation, then
  scale and shift (equal to ``torch.nn.LayerNorm``).
- ``RMSNorm(d, eps=1e-6)``: divide each vector by its root mean square, then scale (equal to
  ``torch.nn.RMSNorm``).
- ``Residual(sublayer, d, placement="pre", norm="layer")``: a sublayer with its skip connection and
  its normalization, placed before the sublayer ("pre") or after the addition ("post").

``parameter_count(module)`` (given) counts a module's parameters.

Lesson 07 and the course model build their blocks from these classes, so keep the names of the
submodules and parameters exactly as the docstrings say: a trained state dict is loaded by name.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

ACTIVATIONS = ("gelu", "swiglu")
PLACEMENTS = ("pre", "post")
NORMS = ("layer", "rms")


def parameter_count(module: nn.Module) -> int:
    """The number of numbers in ``module``'s parameters (a parameter shared by two submodules, such
    as tied embeddings, counts once; frozen parameters count too). Works on modules built on the ``meta`` device, which hold no
    memory, so even a 3-billion-parameter layout can be counted."""
    return sum(p.numel() for p in module.parameters())


def _check_size(name: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")


def _check_features(x: torch.Tensor, d: int, who: str) -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{who} expects a torch.Tensor, got {type(x).__name__}")
    if x.ndim == 0 or x.shape[-1] != d:
        raise ValueError(f"{who} expects x of shape (..., {d}), got {tuple(x.shape)}")
    if not x.is_floating_point():
        raise TypeError(f"{who} expects a floating-point tensor, got {x.dtype}")


def _check_eps(eps: float) -> None:
    if not isinstance(eps, (int, float)) or isinstance(eps, bool) or not eps >= 0:
        raise ValueError(f"eps must be a number >= 0, got {eps!r}")


class FeedForward(nn.Module):
    """The position-wise feed-forward block: the same small network applied to every token.

    d_model: size of each token's vector; d_ff: the hidden size (4 * d_model in the 2017
    transformer). activation:

    - ``"gelu"``: submodules ``up`` (``nn.Linear(d_model, d_ff)``) and ``down``
      (``nn.Linear(d_ff, d_model)``); ``forward(x) = down(gelu(up(x)))`` with the exact GELU,
      ``x * Phi(x)`` (``F.gelu`` with its default ``approximate="none"``);
    - ``"swiglu"``: submodules ``gate`` and ``up`` (each ``nn.Linear(d_model, d_ff)``) and ``down``
      (``nn.Linear(d_ff, d_model)``); ``forward(x) = down(silu(gate(x)) * up(x))``.

    bias: whether the linear maps have biases (LLaMA and Qwen2.5 use none).
    x: (..., d_model) -> (..., d_model), in the dtype of the module's weights.
    Create the submodules in ``__init__`` with exactly these names (``self.up = nn.Linear(...)``):
    lesson 07 and the course model load trained weights into them by name.
    """

    def __init__(self, d_model: int, d_ff: int, activation: str = "gelu", bias: bool = True):
        super().__init__()
        _check_size("d_model", d_model)
        _check_size("d_ff", d_ff)
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {ACTIVATIONS}, got {activation!r}")
        self.d_model, self.d_ff, self.activation = d_model, d_ff, activation
        # YOUR CODE HERE
        raise NotImplementedError(
            "Lesson 06: FeedForward.__init__() in attnlab/feedforward.py is not written yet. "
            "Fill in its body, or borrow the course's reference with attnlab.use_reference('feedforward')"
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _check_features(x, self.d_model, "FeedForward")
        # YOUR CODE HERE
        raise NotImplementedError(
            "Lesson 06: FeedForward.forward() in attnlab/feedforward.py is not written yet. "
            "Fill in its body, or borrow the course's reference with attnlab.use_reference('feedforward')"
        )

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, d_ff={self.d_ff}, activation={self.activation!r}"


def _statistics_dtype(x: torch.Tensor) -> torch.dtype:
    """float32 for half-precision inputs (their squares overflow above 256), else x's dtype."""
    return torch.promote_types(x.dtype, torch.float32)


class LayerNorm(nn.Module):
    """Layer normalization (Ba et al., 2016) over the last dimension; equal to ``torch.nn.LayerNorm(d, eps)``.

    For each vector x of size d: ``(x - mean) / sqrt(var + eps) * weight + bias``, where mean and
    var are taken over the d features and var divides by d (not d - 1). Parameters ``weight``
    (ones) and ``bias`` (zeros), each of shape (d,), are created for you.
    x: (..., d) -> (..., d). For float16 and bfloat16 inputs, compute the statistics in float32
    (``x.float()``) and cast the normalized vector back before scaling: squares of numbers above
    256 overflow float16.
    """

    def __init__(self, d: int, eps: float = 1e-5):
        super().__init__()
        _check_size("d", d)
        _check_eps(eps)
        self.d, self.eps = d, float(eps)
        self.weight = nn.Parameter(torch.ones(d))
        self.bias = nn.Parameter(torch.zeros(d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _check_features(x, self.d, "LayerNorm")
        # YOUR CODE HERE
        raise NotImplementedError(
            "Lesson 06: LayerNorm.forward() in attnlab/feedforward.py is not written yet. "
            "Fill in its body, or borrow the course's reference with attnlab.use_reference('feedforward')"
        )

    def extra_repr(self) -> str:
        return f"{self.d}, eps={self.eps:g}"


class RMSNorm(nn.Module):
    """Root-mean-square normalization (Zhang and Sennrich, 2019); equal to ``torch.nn.RMSNorm(d, eps)``.

    For each vector x of size d: ``x / sqrt(mean(x**2) + eps) * weight``. Nothing is subtracted:
    the mean of the features is kept. Parameter ``weight`` (ones, shape (d,)) is created for you.
    x: (..., d) -> (..., d). For float16 and bfloat16 inputs, compute in float32 and cast back
    before scaling, as in ``LayerNorm``.
    """

    def __init__(self, d: int, eps: float = 1e-6):
        super().__init__()
        _check_size("d", d)
        _check_eps(eps)
        self.d, self.eps = d, float(eps)
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _check_features(x, self.d, "RMSNorm")
        # YOUR CODE HERE
        raise NotImplementedError(
            "Lesson 06: RMSNorm.forward() in attnlab/feedforward.py is not written yet. "
            "Fill in its body, or borrow the course's reference with attnlab.use_reference('feedforward')"
        )

    def extra_repr(self) -> str:
        return f"{self.d}, eps={self.eps:g}"


class Residual(nn.Module):
    """A sublayer (attention or feed-forward) with its skip connection and its normalization.

    sublayer: any module mapping (..., d) to (..., d); extra arguments of ``forward`` are passed
       on to it (a mask, a cache). d: the feature size.
    placement: ``"pre"`` (pre-norm, as in GPT-2, LLaMA, Qwen2.5 and the course model):
       ``x + sublayer(norm(x))``; ``"post"`` (post-norm, as in the 2017 transformer):
       ``norm(x + sublayer(x))``.
    norm: ``"layer"`` (``LayerNorm``) or ``"rms"`` (``RMSNorm``); eps: its epsilon (None: that
       class's default).
    Submodules ``norm`` and ``sublayer`` are created for you. x: (..., d) -> (..., d).
    """

    def __init__(self, sublayer: nn.Module, d: int, placement: str = "pre", norm: str = "layer",
                 eps: float | None = None):
        super().__init__()
        _check_size("d", d)
        if placement not in PLACEMENTS:
            raise ValueError(f"placement must be one of {PLACEMENTS}, got {placement!r}")
        if norm not in NORMS:
            raise ValueError(f"norm must be one of {NORMS}, got {norm!r}")
        if not isinstance(sublayer, nn.Module):
            raise TypeError(f"sublayer must be an nn.Module, got {type(sublayer).__name__}")
        norm_class = LayerNorm if norm == "layer" else RMSNorm
        self.norm = norm_class(d) if eps is None else norm_class(d, eps)
        self.sublayer = sublayer
        self.d, self.placement = d, placement

    def forward(self, x: torch.Tensor, *args, **kwargs) -> torch.Tensor:
        _check_features(x, self.d, "Residual")
        # YOUR CODE HERE
        raise NotImplementedError(
            "Lesson 06: Residual.forward() in attnlab/feedforward.py is not written yet. "
            "Fill in its body, or borrow the course's reference with attnlab.use_reference('feedforward')"
        )

    def extra_repr(self) -> str:
        return f"placement={self.placement!r}"
