"""FLOP and byte counts of attention: the bytes-against-FLOPs model of lesson 09.

- ``attention_flops``: lesson 08's ``attnlab.cost.attention_flops`` (see ``cost_function``: the
  learner's own once written, the course's reference until then).
- ``attention_traffic``: bytes moved between main memory and fast on-chip memory, naive against
  tiled.
"""

from __future__ import annotations

import importlib
import math
import sys
from typing import Callable


_reference_cost = None  # the course's attnlab.cost, loaded on first need (see cost_function)


def cost_function(name: str) -> Callable:
    """``attnlab.cost.<name>`` (lesson 08's counts) as it is at the moment of each call.

    The learner's own function when it is written ("you built this"); while it still raises the
    stub's ``NotImplementedError``, the course's reference, with a one-time notice, so that lesson
    09's benchmark does not wait for lesson 08. Where no reference can be borrowed (a class before
    lesson 08's deadline, or while lesson 08 is being graded), the learner's error is raised.
    ``attnlab.cost`` is imported at the call, not with this module: ``import attnlab.bench``
    works whatever state the exercise module is in.
    """

    def call(*args, **kwargs):
        global _reference_cost
        cost = importlib.import_module("attnlab.cost")
        try:
            return getattr(cost, name)(*args, **kwargs)
        except NotImplementedError as unwritten:
            if _reference_cost is None:
                _reference_cost = _load_reference_cost(unwritten)
            return getattr(_reference_cost, name)(*args, **kwargs)

    call.__name__ = name
    return call


def _load_reference_cost(unwritten: NotImplementedError):
    import importlib.util

    from attnlab import switch

    try:
        path = switch.reference_path("cost")
    except ImportError:
        raise unwritten from None
    spec = importlib.util.spec_from_file_location("attnlab._bench_reference_cost", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # a module must be registered while it runs (dataclasses look it up)
    spec.loader.exec_module(module)
    print(f"Note: attnlab.bench counts FLOPs with the course's reference of attnlab.cost until you "
          f"write yours (lesson 08): {unwritten}")
    return module


def attention_flops(batch_heads: int, n_q: int, n_k: int, d: int, causal: bool = False) -> int:
    """Floating-point operations of an attention forward pass over ``batch_heads`` heads (all
    sequences of the batch together): ``attnlab.cost.attention_flops`` of lesson 08.

    Two matrix products (scores q k^T, then weights times v), each 2 * n_q * n_k * d operations
    (a multiply and an add), as FlashAttention's authors count: 4 * B*H * n_q * n_k * d; causal
    counts only the query-key pairs the mask allows, a little over half when n_q == n_k. The
    softmax's exponentials are not counted.
    """
    return cost_function("attention_flops")(n_q, n_k, d, n_heads=batch_heads, causal=causal)


def attention_traffic(n_q: int, n_k: int, d: int, *, element_bytes: int, block_q: int,
                      batch_heads: int = 1) -> dict:
    """Bytes moved between main memory and the fast on-chip memory, naive against tiled.

    naive (each step reads its inputs from memory and writes its result back):
       S = q k^T reads q and k, writes S (n_q x n_k); P = softmax(S) reads S and writes P;
       O = P v reads P and v, writes O: (2 n_q d + 2 n_k d + 4 n_q n_k) elements.
    tiled (FlashAttention): each block of ``block_q`` queries is read once and reads all of k and v
       once; O is written once, and the float32 log-sum-exp (n_q numbers):
       (2 n_q d + ceil(n_q / block_q) * 2 n_k d) elements + 4 n_q bytes.
    Returns a dict: ``flops``, ``naive_bytes``, ``tiled_bytes``, ``naive_flops_per_byte``,
    ``tiled_flops_per_byte``. A model: caches between the two levels can only lower the traffic.
    """
    flops = attention_flops(batch_heads, n_q, n_k, d)
    naive = batch_heads * element_bytes * (2 * n_q * d + 2 * n_k * d + 4 * n_q * n_k)
    tiled = batch_heads * (element_bytes * (2 * n_q * d + math.ceil(n_q / block_q) * 2 * n_k * d)
                           + 4 * n_q)
    return {"flops": flops, "naive_bytes": naive, "tiled_bytes": tiled,
            "naive_flops_per_byte": flops / naive, "tiled_flops_per_byte": flops / tiled}
