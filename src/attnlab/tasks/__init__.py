"""Synthetic tasks of the later lessons, generated in code (nothing is downloaded).

One module per task family, named for what it generates; each draws everything from a
``torch.Generator`` (or a seed) the caller gives, so the same seed gives the same data everywhere.
Lesson 01's sequence-to-sequence tasks live in ``attnlab.data``; the course corpus in
``attnlab.corpus``.
"""
