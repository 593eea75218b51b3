"""Lesson 01's support code: the synthetic tasks (attnlab.data), the training loop (attnlab.train)
and the GRU encoder-decoders (attnlab.seq2seq), on tiny settings so that they run in seconds."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from torch import nn

import attnlab
from attnlab import data, seq2seq
from attnlab.train import seeded, torch_threads, train

TINY = seq2seq.Seq2SeqConfig(min_len=2, max_len=6, d_embed=8, d_enc=12, d_hidden=10, d_attn=6,
                             batch_size=16, steps=40, lr=1e-2)


@pytest.fixture(scope="module")
def reference_additive():
    """The attention model is built from attnlab.additive: use the course's reference here."""
    was_reference = attnlab.source_of("additive") == "reference"
    attnlab.use_reference("additive")
    yield
    if not was_reference:
        attnlab.use_own("additive")


# ------------------------------------------------------------------------------- attnlab.data


def test_reverse_batches_are_padded_masked_and_reversed():
    batch = data.make_batch("reverse", 32, 3, 9, torch.Generator().manual_seed(0))
    assert batch.source.shape == batch.target.shape == batch.mask.shape
    assert len(batch) == 32 and batch.source.shape[1] == int(batch.lengths.max())
    assert torch.equal(batch.mask, data.padding_mask(batch.lengths, batch.source.shape[1]))
    assert ((batch.lengths >= 3) & (batch.lengths <= 9)).all()
    for source, target, n in zip(batch.source, batch.target, batch.lengths.tolist()):
        assert source[:n].tolist() == target[:n].flip(0).tolist()
        assert (source[n:] == data.PAD).all() and (target[n:] == data.PAD).all()
        assert ((source[:n] >= 2) & (source[:n] < data.VOCAB_SIZE)).all()  # digits only, no PAD/BOS
    assert batch.mask[:, 0].all()


def test_copy_task_and_text():
    batch = data.make_batch("copy", 4, 5, 5, torch.Generator().manual_seed(1))
    assert torch.equal(batch.source, batch.target) and batch.mask.all()
    assert data.to_text([4, 3, 11, 0, 0]) == "2 1 9"
    assert data.to_text(torch.tensor([4, 3, 11]), mask=torch.tensor([True, False, True])) == "2 9"
    assert data.VOCAB[data.PAD] == "<pad>" and data.VOCAB[data.BOS] == "<bos>" and data.VOCAB_SIZE == 12


def test_batches_are_reproducible_and_evaluation_sets_have_one_length_each():
    a = data.make_batch("reverse", 8, 2, 7, torch.Generator().manual_seed(5))
    b = data.make_batch("reverse", 8, 2, 7, torch.Generator().manual_seed(5))
    assert torch.equal(a.source, b.source) and torch.equal(a.lengths, b.lengths)
    sets = data.evaluation_set("reverse", [3, 6], per_length=10, seed=2)
    assert list(sets) == [3, 6]
    assert all((batch.lengths == n).all() and batch.mask.all() and len(batch) == 10 for n, batch in sets.items())
    assert torch.equal(sets[6].source, data.evaluation_set("reverse", [3, 6], per_length=10, seed=2)[6].source)


def test_bad_task_arguments_are_clear_errors():
    g = torch.Generator().manual_seed(0)
    with pytest.raises(ValueError, match="unknown task 'sort'; choose from reverse, copy"):
        data.make_batch("sort", 4, 2, 3, g)
    with pytest.raises(ValueError, match="need 1 <= min_len <= max_len"):
        data.make_batch("copy", 4, 5, 3, g)
    with pytest.raises(ValueError, match="batch_size must be at least 1"):
        data.make_batch("copy", 0, 2, 3, g)


# ------------------------------------------------------------------------------- attnlab.train


def _regression(seed=0):
    with seeded(seed):
        model = nn.Linear(3, 1)
    true = torch.tensor([[1.0, -2.0, 0.5]])

    def make_batch(generator):
        x = torch.randn(32, 3, generator=generator)
        return x, x @ true.T

    def loss_fn(model, batch):
        x, y = batch
        return nn.functional.mse_loss(model(x), y)

    return model, make_batch, loss_fn


def test_train_reduces_the_loss_and_is_reproducible():
    model, make_batch, loss_fn = _regression()
    losses = train(model, make_batch, loss_fn, steps=150, lr=0.05, progress=False)
    assert len(losses) == 150 and losses[-1] < 0.05 * losses[0]
    assert not model.training
    again, *_ = _regression()
    assert train(again, make_batch, loss_fn, steps=150, lr=0.05, progress=False) == losses
    assert torch.equal(model.weight, again.weight)


def test_train_restores_threads_and_reports_bad_losses():
    before = torch.get_num_threads()
    model, make_batch, _ = _regression()
    with pytest.raises(FloatingPointError, match="the loss became nan at step 0"):
        train(model, make_batch, lambda m, b: m(b[0]).sum() * math.nan, steps=3, progress=False)
    assert torch.get_num_threads() == before
    with pytest.raises(ValueError, match="steps must be at least 1"):
        train(model, make_batch, lambda m, b: m(b[0]).sum(), steps=0)
    with torch_threads(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before


def test_seeded_fixes_weights_without_touching_the_global_stream():
    torch.manual_seed(123)
    expected_next = torch.rand(3)
    torch.manual_seed(123)
    with seeded(7):
        first = nn.Linear(4, 2).weight.detach().clone()
    assert torch.equal(torch.rand(3), expected_next)
    with seeded(7):
        assert torch.equal(nn.Linear(4, 2).weight, first)


# ------------------------------------------------------------------------------- attnlab.seq2seq


def test_the_two_models_share_their_sizes(reference_additive):
    plain, attention = seq2seq.build_model("plain", TINY), seq2seq.build_model("attention", TINY)
    extra = TINY.d_hidden * TINY.d_attn + TINY.d_enc * TINY.d_attn + TINY.d_attn  # W_q, W_k, v
    assert seq2seq.count_parameters(attention) - seq2seq.count_parameters(plain) == extra
    assert torch.equal(seq2seq.build_model("plain", TINY).bridge.weight, plain.bridge.weight)
    with pytest.raises(ValueError, match="kind must be one of"):
        seq2seq.Seq2Seq("transformer", TINY)
    with pytest.raises(ValueError, match="d_enc must be even"):
        dataclasses.replace(TINY, d_enc=11)


def test_forward_shapes_and_attention_weights(reference_additive):
    batch = data.make_batch("reverse", 5, 2, 6, torch.Generator().manual_seed(3))
    model = seq2seq.build_model("attention", TINY)
    logits, weights = model(batch)
    n = batch.source.shape[1]
    assert logits.shape == (5, n, data.VOCAB_SIZE) and weights.shape == (5, n, n)
    padding = ~batch.mask[:, None, :].expand_as(weights)
    assert (weights[padding] == 0).all()
    torch.testing.assert_close(weights.sum(-1), torch.ones(5, n))
    plain_logits, none = seq2seq.build_model("plain", TINY)(batch)
    assert plain_logits.shape == logits.shape and none is None


def test_encoder_ignores_padding():
    encoder = seq2seq.build_model("plain", TINY).encoder
    short = torch.tensor([[5, 6, 7]])
    padded = torch.tensor([[5, 6, 7, data.PAD, data.PAD]])
    states, summary = encoder(short, torch.tensor([3]))
    padded_states, padded_summary = encoder(padded, torch.tensor([3]))
    torch.testing.assert_close(padded_states[:, :3], states)
    torch.testing.assert_close(padded_summary, summary)
    assert (padded_states[:, 3:] == 0).all()


@pytest.mark.parametrize("kind", seq2seq.KINDS)
def test_training_is_reproducible_and_evaluation_is_complete(reference_additive, kind):
    model, losses = seq2seq.train_model(kind, TINY, progress=False)
    assert losses[-1] < losses[0]
    again, losses_again = seq2seq.train_model(kind, TINY, progress=False)
    assert losses == losses_again
    held_out = data.evaluation_set(TINY.task, [2, 4, 6], per_length=20)
    result = seq2seq.accuracy_by_length(model, held_out)
    assert set(result) == {"token", "sequence"} and list(result["token"]) == [2, 4, 6]
    assert all(0 <= a <= 1 for part in result.values() for a in part.values())
    assert all(result["sequence"][n] <= result["token"][n] + 1e-12 for n in (2, 4, 6))
    by_position = seq2seq.accuracy_by_position(model, held_out[6])
    assert len(by_position) == 6 and all(0 <= a <= 1 for a in by_position)


def test_save_load_and_the_command_line(reference_additive, tmp_path, capsys):
    path = tmp_path / "attention.pt"
    assert seq2seq.main(["train", "--kind", "attention", "--out", str(path), "--steps", "2"]) == 0
    model = seq2seq.load(path)
    assert model.kind == "attention" and model.config.steps == 2
    assert seq2seq.main(["evaluate", "--weights", str(path), "--per-length", "3"]) == 0
    out = capsys.readouterr().out
    assert "saved" in out and f"length {model.config.max_len:3d}: token accuracy" in out


def test_the_attention_model_is_built_from_the_learner_module(tmp_path, monkeypatch):
    # with the blank stub (the learner's file), building the attention model says what to finish
    monkeypatch.chdir(tmp_path)
    was_reference = attnlab.source_of("additive") == "reference"
    attnlab.use_own("additive")
    try:
        with pytest.raises(NotImplementedError, match="Lesson 01: AdditiveAttention"):
            seq2seq.build_model("attention", TINY)
    finally:
        if was_reference:
            attnlab.use_reference("additive")


# ------------------------------------------------------------------------------- the lesson's picture


def test_encoder_decoder_diagram_is_titled_and_checks_its_weights():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from attnlab import plots

    fig = plots.encoder_decoder_diagram(source=("3", "1", "4"), weights=[0.2, 0.3, 0.5], step=2)
    left, right = fig.axes
    assert left.get_title().startswith("(a) Without attention") and right.get_title().startswith("(b) With attention")
    texts = [t.get_text() for t in right.texts]
    assert "α1=0.20" in texts and "α3=0.50" in texts and "query: s1" in texts
    assert fig.get_suptitle()
    with pytest.raises(ValueError, match="one weight per source token"):
        plots.encoder_decoder_diagram(source=("3", "1"), weights=[1.0])
    with pytest.raises(ValueError, match="at least 2 tokens"):
        plots.encoder_decoder_diagram(source=("3",))
    plt.close("all")


def test_alignment_summary_reads_where_each_step_peaks():
    n = 4
    weights = torch.zeros(2, n, n)
    for step in range(n):                                  # string 0: every peak on the mirrored position
        weights[0, step, n - 1 - step] = 1.0
    for step in range(n):                                  # string 1: one to the right where there is one
        weights[1, step, min(n - step, n - 1)] = 0.7
        weights[1, step, 0 if step == n - 1 else n - 1 - step] += 0.3
    summary = seq2seq.alignment_summary(weights)
    assert summary["right"] == pytest.approx(3 / 8) and summary["on"] == pytest.approx(5 / 8)
    assert summary["left"] == 0.0 and summary["band weight"] == pytest.approx(1.0)
    with pytest.raises(ValueError, match=r"\(strings, n, n\)"):
        seq2seq.alignment_summary(torch.zeros(2, 3, 4))
