"""More ways for the grading worker to call a learner's library: recipes beyond the worker's own
``call``, ``module`` and ``grad`` (see ``autograder.worker``).

A recipe is a function ``name(module, call, args, kwargs, arrays) -> result`` registered in
``RECIPES`` under the name a ``Case`` gives as its ``recipe``. ``module`` is the learner's
exercise module (the lesson being graded), ``args``/``kwargs`` the case's arguments already turned
into tensors or arrays, ``arrays`` every input array by name; ``call`` is the whole call spec (its
``init``, ``parameters`` and any extra fields a case puts in ``options``). The result is what
``worker.flatten`` accepts: a tensor, an array, a number, or tuples and lists of them. It runs
inside the sandbox with the learner's code: it holds no expected answer, only a way of calling.

Lessons add their recipes under their own heading.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np


def build_module(module, call: dict, arrays: dict[str, np.ndarray]):
    """An instance of ``call["target"]`` built with ``call["init"]``, its parameters (and buffers)
    set from arrays by name, in evaluation mode."""
    import torch

    instance = getattr(module, call["target"])(**call.get("init", {}))
    state = dict(instance.named_parameters()) | dict(instance.named_buffers())
    with torch.no_grad():
        for name, array_name in call.get("parameters", {}).items():
            if name not in state:
                raise KeyError(f"{call['target']} has no parameter {name!r}; it has {sorted(state)}")
            state[name].copy_(torch.from_numpy(arrays[array_name]))
    return instance.eval()


# -- lesson 01 --
def exact_zeros(module, call, args, kwargs, arrays):
    """Lesson 01: ``target(*args, **kwargs)`` (with ``init``: the module ``build_module`` builds,
    called), its outputs, then where its weights (output ``options["weights_at"]``) are exactly 0
    (a large negative fill instead of -inf leaves weights within any tolerance of 0, but not 0)."""
    target = build_module(module, call, arrays) if call.get("init") else getattr(module, call["target"])
    result = target(*args, **kwargs)
    return (*result, result[call["options"]["weights_at"]] == 0)


def module_float64(module, call, args, kwargs, arrays):
    """Lesson 01: the module ``build_module`` builds, after ``.double()``, called with ``args``."""
    return build_module(module, call, arrays).double()(*args, **kwargs)


def module_gradients(module, call, args, kwargs, arrays):
    """Lesson 01: the module ``build_module`` builds, called with ``args``; its first output, then
    the gradient of sum(first output * the case's cotangent) for each parameter the case sets."""
    import torch

    instance = build_module(module, call, arrays)
    output = instance(*args, **kwargs)[0]
    loss = (output * torch.from_numpy(arrays[call["cotangents"][0]])).sum()
    named = dict(instance.named_parameters())
    return (output, *torch.autograd.grad(loss, [named[name] for name in call["parameters"]]))


def module_initialisation(module, call, args, kwargs, arrays):
    """Lesson 01: how ``target(**init)`` draws its parameters, built after ``torch.manual_seed(s)``
    for the seeds (s, s, t) of ``options["seeds"]``. 1 (yes) or 0 (no) for: per parameter named
    in ``options["bounds"]``, drawn (finite, not all 0, within ±bound), a float32 parameter that
    requires a gradient; then: no other parameters, seed s twice gives the same parameters, seed
    t other ones."""
    import torch

    bounds = call["options"]["bounds"]
    built = []
    for seed in call["options"]["seeds"]:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            built.append(dict(getattr(module, call["target"])(**call["init"]).named_parameters()))
    first, again, other = built
    found = []
    for name, bound in bounds.items():
        p = first[name]
        values = p.detach()
        found += [bool(torch.isfinite(values).all() and (values != 0).any() and values.abs().max() <= bound + 1e-6),
                  p.dtype == torch.float32 and p.requires_grad]
    found += [sorted(first) == sorted(bounds),
              all(torch.equal(first[name], again[name]) for name in bounds),
              not all(torch.equal(first[name], other[name]) for name in bounds)]
    return np.array(found, dtype=np.int64)


def decoder_steps(module, call, args, kwargs, arrays):
    """Lesson 01: the decoder step ``build_module`` builds, run once per row of ``args[0]`` (steps,
    batch) of tokens, each step reading the state the step before returned; the logits of every
    step stacked, and the last state."""
    import torch

    step = build_module(module, call, arrays)
    tokens, hidden, states, *rest = args
    logits = []
    for prev in tokens:
        out, hidden, _ = step(prev, hidden, states, *rest, **kwargs)
        logits.append(out)
    return torch.stack(logits), hidden


# -- lesson 02 --
def numpy_result(module, call, args, kwargs, arrays):
    """Lesson 02: ``target(*args, **kwargs)`` of a numpy exercise; an output that is not a numpy
    array (a torch tensor) raises TypeError."""
    result = getattr(module, call["target"])(*args, **kwargs)
    for value in result if isinstance(result, (tuple, list)) else (result,):
        if not isinstance(value, np.ndarray):
            raise TypeError(f"{call['target']} returned a {type(value).__name__}, not a numpy array "
                            "(use numpy only, no torch)")
    return result


# -- lesson 03 --
def returns_none(module, call, args, kwargs, arrays):
    """Lesson 03: 1 if ``target(*args, **kwargs)`` returns None, else 0 (the worker cannot send
    None back)."""
    return int(getattr(module, call["target"])(*args, **kwargs) is None)


def result_then_overwritten(module, call, args, kwargs, arrays):
    """Lesson 03: a copy of the mask ``target(*args, **kwargs)`` returns; the result itself is then
    inverted in place, as a caller may do with a mask it owns: a result that is one of the inputs,
    not a new tensor, shows as that input changed in place."""
    result = getattr(module, call["target"])(*args, **kwargs)
    kept = result.clone()
    result.logical_not_()
    return kept


def masking_bfloat16(module, call, args, kwargs, arrays):
    """Lesson 03: ``target(*args, **kwargs)`` with its floating-point tensor arguments cast to
    bfloat16 (numpy has no bfloat16, so they travel as float32). With ``options["grad"]``, the
    gradients of q, k and v (the first three arguments) of sum(out * cotangent) instead, the
    cotangent being the case's first ``cotangents`` array."""
    import torch

    def cast(value):
        return value.to(torch.bfloat16) if isinstance(value, torch.Tensor) and value.is_floating_point() else value

    args, kwargs = [cast(a) for a in args], {key: cast(value) for key, value in kwargs.items()}
    options = call.get("options", {})
    if not options.get("grad"):
        return getattr(module, call["target"])(*args, **kwargs)
    wanted = [args[index].requires_grad_() for index in range(3)]
    out = getattr(module, call["target"])(*args, **kwargs)[0]
    loss = (out.float() * torch.from_numpy(arrays[call["cotangents"][0]])).sum()
    return tuple(torch.autograd.grad(loss, wanted))


# -- lesson 04 --
def kv_cache_appends(module, call: dict, args: list, kwargs: dict, arrays: dict[str, np.ndarray]):
    """A fresh ``KVCache``, appended ``(args[0], args[1])``, then ``(args[2], args[3])``, ...; for
    each append, the (keys, values) it returned and the cache's length after it."""
    cache = module.KVCache()
    found = [cache.length]
    for k, v in zip(args[::2], args[1::2]):
        keys, values = cache.append(k, v)
        found.append((keys, values, cache.length))
    return found


def decode_with_cache(module, call: dict, args: list, kwargs: dict, arrays: dict[str, np.ndarray]):
    """A ``MultiHeadAttention`` (``init``, ``parameters``) called on ``args[0]`` (b, n, d_model) in
    consecutive chunks of ``options["chunks"]`` tokens with one ``KVCache`` and ``kwargs`` (e.g.
    ``causal`` or ``memory``); the outputs side by side, then the cache's keys, values and length."""
    import torch

    attention = build_module(module, call, arrays)
    cache, outputs, start = module.KVCache(), [], 0
    with torch.no_grad():
        for size in call["options"]["chunks"]:
            outputs.append(attention(args[0][:, start:start + size], cache=cache, **kwargs))
            start += size
    return torch.cat(outputs, dim=1), cache.keys, cache.values, cache.length


def raises_value_error(module, call: dict, args: list, kwargs: dict, arrays: dict[str, np.ndarray]):
    """1 if ``target(*args, **init)`` raises ValueError (a clear error for bad input), else 0."""
    try:
        getattr(module, call["target"])(*args, **call.get("init", {}))
    except ValueError:
        return 1
    return 0


# -- lesson 05 --
def positions_bfloat16(module, call, args, kwargs, arrays):
    """Lesson 05: ``target(*args, **kwargs)`` with its floating-point tensor arguments cast to
    bfloat16 (numpy has no bfloat16, so they travel as float32)."""
    import torch

    def cast(value):
        return value.to(torch.bfloat16) if isinstance(value, torch.Tensor) and value.is_floating_point() else value

    return getattr(module, call["target"])(*[cast(a) for a in args], **{k: cast(v) for k, v in kwargs.items()})


def rope_attention_with_cache(module, call, args, kwargs, arrays):
    """Lesson 05: the course's ``attnlab.multihead.MultiHeadAttention`` (``init`` with a
    ``rope_base``, ``parameters`` by name), whose rotation is the learner's ``apply_rope``, called
    on ``args[0]`` (b, n, d_model) in chunks of ``options["chunks"]`` tokens with one ``KVCache``
    and a causal mask; the outputs side by side, then the cached (rotated) keys."""
    import importlib

    import torch

    multihead = importlib.import_module("attnlab.multihead")
    attention = multihead.MultiHeadAttention(**call["init"]).double()
    state = dict(attention.named_parameters())
    with torch.no_grad():
        for name, array_name in call.get("parameters", {}).items():
            state[name].copy_(torch.from_numpy(arrays[array_name]))
    cache, outputs, start = multihead.KVCache(), [], 0
    with torch.no_grad():
        for size in call["options"]["chunks"]:
            outputs.append(attention(args[0][:, start:start + size], causal=True, cache=cache))
            start += size
    return torch.cat(outputs, dim=1), cache.keys


# -- lesson 06 --
def _lesson06_prepare(instance, call: dict, arrays: dict[str, np.ndarray], args: list, kwargs: dict):
    """Cast ``instance`` and the floating-point tensor arguments to ``options["dtype"]`` (bfloat16
    arrays travel as float32), then set its parameters by name; returns (instance, args, kwargs)."""
    import torch

    dtype = getattr(torch, call.get("options", {}).get("dtype", "float32"))
    instance = instance.to(dtype)
    state = dict(instance.named_parameters())
    with torch.no_grad():
        for name, array_name in call.get("parameters", {}).items():
            if name not in state:
                raise KeyError(f"{call['target']} has no parameter {name!r}; it has {sorted(state)}")
            state[name].copy_(torch.from_numpy(arrays[array_name]))

    def cast(value):
        return value.to(dtype) if isinstance(value, torch.Tensor) and value.is_floating_point() else value

    return instance.eval(), [cast(a) for a in args], {k: cast(v) for k, v in kwargs.items()}


def feedforward_module(module, call, args, kwargs, arrays):
    """Lesson 06: ``FeedForward``, ``LayerNorm`` or ``RMSNorm`` built with ``init``, cast to the
    case's dtype, parameters set by name, called on ``args``."""
    instance = getattr(module, call["target"])(**call.get("init", {}))
    instance, args, kwargs = _lesson06_prepare(instance, call, arrays, args, kwargs)
    return instance(*args, **kwargs)


def feedforward_residual(module, call, args, kwargs, arrays):
    """Lesson 06: ``Residual(sublayer, **init)`` around a fixed sublayer, ``tanh(linear(x)) * scale
    (+ shift)``, whose extra arguments the wrapper must pass on; then as ``feedforward_module``."""
    import torch
    from torch import nn

    class Sublayer(nn.Module):
        def __init__(self, d: int):
            super().__init__()
            self.linear = nn.Linear(d, d)

        def forward(self, x, scale=1.0, shift=None):
            y = torch.tanh(self.linear(x)) * scale
            return y if shift is None else y + shift

    init = dict(call.get("init", {}))
    instance = module.Residual(Sublayer(init["d"]), **init)
    instance, args, kwargs = _lesson06_prepare(instance, call, arrays, args, kwargs)
    return instance(*args, **kwargs)


def feedforward_parameters(module, call, args, kwargs, arrays):
    """Lesson 06: the parameters of ``target(**init)``: the number of entries of each parameter
    named in ``options["names"]`` (-1 where it has none of that name), then the number of entries
    of every other parameter (lesson 07 loads trained weights by exactly these names)."""
    own = {name: p.numel() for name, p in getattr(module, call["target"])(**call.get("init", {})).named_parameters()}
    names = call["options"]["names"]
    return [own.get(name, -1) for name in names] + [sum(n for name, n in own.items() if name not in names)]


# -- lesson 07 --
def _stacks_build(module, call: dict, arrays: dict[str, np.ndarray], target: str | None = None):
    """Lesson 07: ``target`` (default ``call["target"]``) built with ``init``, cast to
    ``options["dtype"]``, every parameter set by name, in evaluation mode. Its parameters must be
    exactly the ones the case names (a missing or extra one fails: a saved model, such as the
    course model, would not load into it)."""
    import torch

    dtype = getattr(torch, call.get("options", {}).get("dtype", "float32"))
    instance = getattr(module, target or call["target"])(**call.get("init", {})).to(dtype)
    state = dict(instance.named_parameters())
    extra = sorted(set(state) - set(call.get("parameters", {})))
    if extra:
        raise KeyError(f"{type(instance).__name__} has parameters the course's models do not have: {extra}")
    with torch.no_grad():
        for name, array_name in call.get("parameters", {}).items():
            if name not in state:
                raise KeyError(f"{type(instance).__name__} has no parameter {name!r}; it has {sorted(state)}")
            state[name].copy_(torch.from_numpy(arrays[array_name]))
    return instance.eval(), dtype


def _stacks_cast(value, dtype):
    import torch

    return value.to(dtype) if isinstance(value, torch.Tensor) and value.is_floating_point() else value


def _stacks_plain(value):
    """None (no cross-attention weights) becomes an empty tuple, which the worker can send."""
    if value is None:
        return ()
    if isinstance(value, (tuple, list)):
        return tuple(_stacks_plain(v) for v in value)
    return value


def stacks_model(module, call, args, kwargs, arrays):
    """Lesson 07: a block or model (``stacks_build``) called with ``options["method"]`` ("forward",
    "classify", "encode") on ``args``/``kwargs`` (floating ones cast to the case's dtype)."""
    import torch

    instance, dtype = _stacks_build(module, call, arrays)
    method = call.get("options", {}).get("method", "forward")
    function = instance if method == "forward" else getattr(instance, method)
    with torch.no_grad():
        result = function(*[_stacks_cast(a, dtype) for a in args],
                          **{k: _stacks_cast(v, dtype) for k, v in kwargs.items()})
    return _stacks_plain(result)


def stacks_cache(module, call, args, kwargs, arrays):
    """Lesson 07: decoding ``args[0]`` in chunks of ``options["chunks"]`` tokens with a KV cache:
    a DecoderBlock (one ``attnlab.multihead.KVCache``), a DecoderOnly (``new_cache()``) or an
    EncoderDecoder (``decode`` after ``encode(args[1])``); the outputs side by side."""
    import importlib

    import torch

    instance, dtype = _stacks_build(module, call, arrays)
    inputs = _stacks_cast(args[0], dtype)
    if call["target"] == "DecoderBlock":
        cache = importlib.import_module("attnlab.multihead").KVCache()
        step = lambda piece: instance(piece, cache=cache)  # noqa: E731
    elif call["target"] == "DecoderOnly":
        cache = instance.new_cache()
        step = lambda piece: instance(piece, cache)  # noqa: E731
    else:
        cache = instance.new_cache()
        with torch.no_grad():
            memory = instance.encode(args[1])
        step = lambda piece: instance.decode(piece, memory, None, cache)  # noqa: E731
    outputs, start = [], 0
    with torch.no_grad():
        for size in call["options"]["chunks"]:
            outputs.append(step(inputs[:, start:start + size]))
            start += size
    return torch.cat(outputs, dim=1)


def stacks_generate(module, call, args, kwargs, arrays):
    """Lesson 07: ``generate(model, *args, **kwargs)`` with a ``options["model"]`` built as in
    ``stacks_model``. check "tokens": the tokens (greedy, or sampled with a seeded generator);
    check "reproducible": three flags (two runs with generators seeded alike agree, every id is in
    the vocabulary, the prompt is kept)."""
    import torch

    model, _ = _stacks_build(module, call, arrays, target=call["options"]["model"])
    prompt, steps = args[0], args[1]

    def run():
        return module.generate(model, prompt, steps, generator=torch.Generator().manual_seed(3), **kwargs)

    first = run()
    if call["options"].get("check", "tokens") == "tokens":
        return first
    vocab = call["init"]["vocab_size"]
    kept = first[..., :prompt.shape[-1]]
    return (int(torch.equal(first, run())), int(bool(((first >= 0) & (first < vocab)).all())),
            int(torch.equal(kept, prompt)))


# -- lesson 08 --
def cost_count(module, call, args, kwargs, arrays):
    """Lesson 08: a count (FLOPs, bytes, tokens) as a float64; a dict of counts (``layer_flops``)
    as a tuple in the order of ``options["keys"]``. A count must be an int (a Python int, a NumPy
    integer or a 0-d integer tensor), as the lesson asks and the visible check checks: anything
    else, a float holding a whole number included, fails the case."""
    import numbers

    def number(value, what):
        if getattr(value, "ndim", None) == 0 and hasattr(value, "item"):  # NumPy scalars, 0-d tensors
            value = value.item()
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise TypeError(f"{what} must be an int (a count), got {type(value).__name__}")
        return np.float64(value)

    result = getattr(module, call["target"])(*args, **kwargs)
    keys = call.get("options", {}).get("keys")
    if keys is None:
        return number(result, f"{call['target']}(...)")
    if not isinstance(result, dict):
        raise TypeError(f"{call['target']}(...) must return a dict with keys {keys}, got {type(result).__name__}")
    missing = [key for key in keys if key not in result]
    if missing:
        raise KeyError(f"{call['target']}(...) returned no {missing}")
    return tuple(number(result[key], f"{call['target']}(...)[{key!r}]") for key in keys)


# -- lesson 09 --
def flash_peak_memory(module, call, args, kwargs, arrays):
    """Lesson 09: whether ``target(*args, **kwargs)`` stays under ``options["limit_bytes"]`` of CPU
    memory allocated at one time (``attnlab.bench.peak_memory``, which runs it on one thread): a
    tiled forward pass holds blocks of scores, never the whole n_q x n_k matrix. A boolean tensor."""
    import torch

    from attnlab.bench import peak_memory

    peak = peak_memory(lambda: getattr(module, call["target"])(*args, **kwargs), "cpu")
    return torch.tensor(peak < call["options"]["limit_bytes"])


RECIPES: dict[str, Callable[..., Any]] = {
    # "name": function,
    "exact_zeros": exact_zeros,
    "module_float64": module_float64,
    "module_gradients": module_gradients,
    "module_initialisation": module_initialisation,
    "decoder_steps": decoder_steps,
    "numpy_result": numpy_result,
    "returns_none": returns_none,
    "result_then_overwritten": result_then_overwritten,
    "masking_bfloat16": masking_bfloat16,
    "kv_cache_appends": kv_cache_appends,
    "decode_with_cache": decode_with_cache,
    "raises_value_error": raises_value_error,
    "positions_bfloat16": positions_bfloat16,
    "rope_attention_with_cache": rope_attention_with_cache,
    "feedforward_module": feedforward_module,
    "feedforward_residual": feedforward_residual,
    "feedforward_parameters": feedforward_parameters,
    "cost_count": cost_count,
    "stacks_model": stacks_model,
    "stacks_cache": stacks_cache,
    "stacks_generate": stacks_generate,
    "flash_peak_memory": flash_peak_memory,
}
