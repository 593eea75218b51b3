"""The mutation table: classic mistakes, one per row, written into the reference of an exercise.

``tests/test_mutation_parity.py`` runs every row through the lesson's visible checks and through
its trusted cases (``tests/parity.py``) and asserts that they agree cell by cell (a visible ✓
exactly when every trusted case of that cell passes), that the mistake costs points, and that the
visible message matches ``says`` (it names the mistake, not another one).

A row: ``M(lesson, cell, name, old, new, says)``; ``old`` is text that occurs exactly once in
``solutions/attnlab/<module>.py``, ``new`` replaces it. Rows are grouped by lesson, then by cell
(the grade-id prefix: cell ``softmax`` is graded by ``softmax_visible`` and ``softmax_hidden``).
"""

from __future__ import annotations

from tests.parity import Mutation as M

MUTATIONS: list[M] = [
    # ---------------------------------------------------------------- lesson 02: attention.py
    M("02", "softmax", "PyTorch's softmax",
      "    shifted = x - x.amax(dim=dim, keepdim=True)\n    exps = torch.exp(shifted)\n"
      "    return exps / exps.sum(dim=dim, keepdim=True)",
      "    return torch.softmax(x, dim)",
      r"calls softmax \(torch\.softmax"),
    M("02", "softmax", "no max shift",
      "    shifted = x - x.amax(dim=dim, keepdim=True)",
      "    shifted = x",
      r"subtract the maximum"),
    M("02", "softmax", "fixed last dim",
      "    shifted = x - x.amax(dim=dim, keepdim=True)\n    exps = torch.exp(shifted)\n"
      "    return exps / exps.sum(dim=dim, keepdim=True)",
      "    shifted = x - x.amax(dim=-1, keepdim=True)\n    exps = torch.exp(shifted)\n"
      "    return exps / exps.sum(dim=-1, keepdim=True)",
      r"wrong dimension"),
]
