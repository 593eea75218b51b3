"""The course model: a small decoder-only transformer, built from the course's own library, trained
on the course corpus (``attnlab.corpus``) and shipped with the course, so that lessons can look
inside a trained model without downloading one.

    from attnlab import zoo
    model, meta = zoo.load()          # an attnlab.stacks.DecoderOnly, in your own classes if they work
    meta["validation_loss"], meta["unigram_entropy"]

It is ``attnlab.stacks.DecoderOnly`` with 4 layers of 4 heads (d_model 128, d_ff 512), rotary
positions, pre-norm LayerNorm, a GELU feed-forward block and tied embeddings (``ZooConfig``), trained
for 1600 steps on windows of 128 words. ``course_model.pt`` holds its state dict;
``course_model.json`` its configuration, corpus, training run (the loss of every step, the time it
took, the torch version) and what it was measured to do (``zoo.inspect``: a previous-token head in
layer 1 and induction heads in layer 2 that copy what followed an earlier occurrence, the two senses
of "bank" told apart by a linear probe, neurons whose strongest contexts share a pattern).

Retrain it (seeded, on one CPU thread, so the same machine and torch give the same weights; under
ten minutes on an idle two-core machine; writes both files)::

    python -m attnlab.zoo train
    python -m attnlab.zoo evaluate      # the measurements of the shipped files
    python -m attnlab.zoo phase         # the same training, measured every 20 steps (zoo.phase)

``zoo.induction`` is the repeated-sequences test of induction (ARENA's repeated random tokens, and
random lists written and read back in the corpus's words); ``zoo.phase`` records the induction
heads forming while the model trains (``python -m attnlab.zoo phase``: ``phase_change.json`` and the
weights at two steps of the change, written only when the retrained weights are the shipped ones).
"""

from attnlab.zoo import induction, inspect, phase
from attnlab.zoo.inspect import (
    bank_probe, bank_states, head_scores, neuron_activations, neuron_patterns, residual_stream, top_contexts,
    uniform_scores,
)
from attnlab.zoo.loading import METADATA, WEIGHTS, load, load_state, metadata
from attnlab.zoo.training import ZooConfig, build_model, train_course_model, validation_loss, validation_windows

__all__ = [
    "METADATA", "WEIGHTS", "ZooConfig", "bank_probe", "bank_states", "build_model", "head_scores", "induction",
    "inspect", "phase",
    "load", "load_state", "metadata", "neuron_activations", "neuron_patterns", "residual_stream",
    "top_contexts", "train_course_model", "uniform_scores", "validation_loss", "validation_windows",
]
