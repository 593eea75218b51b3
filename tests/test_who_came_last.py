"""Lesson 05's "who came last?" task (``attnlab.tasks.who_came_last``) and the ungraded check of its
design exercise (``checks.check_length_bias``): the data say what they claim, the model's one-row
attention equals a full causal layer computed independently, and the check accepts, refuses and
explains as it says."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from attnlab import checks
from attnlab.checks.lesson05 import LENGTH_BIAS_PASS, _why_not
from attnlab.tasks import who_came_last as task
from tests.helpers import borrowed_reference


@pytest.fixture(scope="module")
def positions():
    yield from borrowed_reference("positions")


def test_streams_end_with_a_question_and_answer_the_last_party():
    tokens, answers = task.make_batch(300, 20, torch.Generator().manual_seed(0))
    assert tokens.shape == (300, 20) and (tokens[:, -1] == task.VOCAB.index("?")).all()
    for row, answer in zip(tokens, answers):
        words = task.decode(row).split()[:-1]
        parties = [w for w in words if w in task.PARTIES]
        assert parties and task.VOCAB[int(answer)] == parties[-1]
    share = np.mean([task.VOCAB[int(t)] in task.PARTIES for t in tokens[:, :-1].flatten()])
    # each word a party with probability 1/5, and one word of each stream forced to be one
    assert abs(share - (task.PARTY_RATE + (1 - task.PARTY_RATE) / 19)) < 0.02
    same = task.test_set(32)
    assert torch.equal(same[0], task.test_set(32)[0])               # fixed: the same for every model
    with pytest.raises(ValueError, match="length must be at least 2"):
        task.make_batch(4, 1)


def test_alibi_slopes_are_the_papers():
    assert task.alibi_slopes(8).tolist() == [2.0 ** -k for k in range(1, 9)]   # Press et al.: 1/2 ... 1/256
    assert task.alibi_slopes(4).tolist() == [1 / 4, 1 / 16, 1 / 64, 1 / 256]


def _full_causal_last_row(model, tokens):
    """The model's logits computed with a full causal attention layer, every row, in float64."""
    m = model.double()
    n = tokens.shape[1]
    x = m.embed(tokens)
    if m.kind == "learned":
        x = x + m.position.weight[:n]
    elif m.kind == "sinusoidal":
        x = x + torch.from_numpy(checks.reference_sinusoidal(n, x.shape[-1])).float().double()  # float32, as returned
    a = m.attn
    h = a.head_dim
    normed = m.attn_norm(x)
    q = (normed @ a.query.weight.T).view(1, n, a.n_heads, h).transpose(1, 2)
    kv = (normed @ a.key_value.weight.T).view(1, n, 2, a.n_heads, h)
    k, v = kv[:, :, 0].transpose(1, 2), kv[:, :, 1].transpose(1, 2)
    if m.kind == "rope":
        q = checks.reference_rope(q, list(range(n)))
        k = checks.reference_rope(k, list(range(n)))
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    scores = q @ k.transpose(-2, -1) / math.sqrt(h)
    if m.kind == "alibi":
        scores = scores - a.slopes.double()[:, None, None] * (i - j)
    scores = scores.masked_fill(j > i, float("-inf"))
    mixed = (torch.softmax(scores, -1) @ v).transpose(1, 2).reshape(1, n, -1) @ a.out.weight.T
    x = x + mixed
    x = x + m.mlp(m.mlp_norm(x))
    return m.readout(m.final_norm(x[:, -1]))


@pytest.mark.parametrize("kind", ["learned", "sinusoidal", "rope", "alibi"])
def test_the_last_row_is_a_full_causal_layer(kind, positions):
    torch.manual_seed(0)
    model = task.LengthModel(kind)
    tokens, _ = task.make_batch(1, 11, torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = _full_causal_last_row(model, tokens)
        got = model(tokens)
    torch.testing.assert_close(got, expected, rtol=1e-9, atol=1e-9)


def test_a_custom_bias_is_added_to_every_head():
    torch.manual_seed(0)
    plain = task.LengthModel("bias", bias_fn=lambda d: torch.zeros(d.shape))
    biased = task.LengthModel("bias", bias_fn=lambda d: -1.0 * d)
    biased.load_state_dict(plain.state_dict())
    tokens, _ = task.make_batch(2, 9, torch.Generator().manual_seed(3))
    with torch.no_grad():
        _, flat = plain(tokens, return_weights=True)
        _, steep = biased(tokens, return_weights=True)
    expected = flat * torch.exp(-torch.arange(8, -1, -1.0))
    torch.testing.assert_close(steep, expected / expected.sum(-1, keepdim=True))


def test_bad_input_gets_a_clear_error():
    with pytest.raises(ValueError, match="kind must be one of"):
        task.LengthModel("relative")
    with pytest.raises(ValueError, match="bias_fn exactly when"):
        task.LengthModel("bias")
    with pytest.raises(ValueError, match="has 8 rows"):
        task.LengthModel("learned", max_len=8)(torch.zeros(1, 9, dtype=torch.long))
    with pytest.raises(ValueError, match="one number per distance"):
        task.bias_values(lambda d: d[:2].float(), 5)
    with pytest.raises(ValueError, match="nan or \\+inf"):
        task.bias_values(lambda d: d / 0.0, 5)
    with pytest.raises(ValueError, match="distance 0 must be finite"):
        task.bias_values(lambda d: torch.full(d.shape, float("-inf")), 5)


def test_far_weight_counts_keys_beyond_the_training_distances(positions):
    torch.manual_seed(0)
    model = task.LengthModel("alibi")
    shares = task.far_weight(model, 20)
    tokens, _ = task.test_set(20)
    with torch.no_grad():
        _, weights = model(tokens, return_weights=True)
    assert len(shares) == 4
    np.testing.assert_allclose(shares, weights[..., :4].sum(-1).mean(0).numpy(), rtol=1e-6)   # keys 16..19 back


def test_the_design_check_waits_for_a_blank_answer(capsys):
    def blank(distance):
        raise NotImplementedError()

    assert checks.check_length_bias(blank) is None
    assert "not written yet" in capsys.readouterr().out


def test_the_design_check_names_unusable_answers():
    with pytest.raises(AssertionError, match="one number per distance"):
        checks.check_length_bias(lambda d: -d[0].float())
    with pytest.raises(AssertionError, match="raised AttributeError"):
        checks.check_length_bias(lambda d: d.nonsense)


def test_the_design_check_explains_each_kind_of_failure():
    d = np.arange(128.0)
    assert "no position at all" in _why_not(0 * d, 0.4, 0.2, 8, 16)
    assert "grows from distance 0 to 1" in _why_not(0.25 * d, 0.4, 0.1, 8, 16)
    window = _why_not(np.where(d < 8, 0.0, -np.inf), 0.6, 0.6, 8, 16)
    assert "distances 0 and 1 get the same bias" in window and "-inf from distance 8" in window
    assert "falls by only 0.1" in _why_not(-0.1 * d, 0.8, 0.78, 8, 16)
    tail = _why_not(-np.log1p(d), 0.9, 0.81, 8, 16)
    assert "far keys add up" in tail and "2.05" in tail      # Σ 1/(1+d) for d = 16..127


def test_the_design_check_trains_and_accepts_a_good_bias(capsys):
    measured = checks.check_length_bias(lambda distance: -1.0 * distance.float(), seeds=(0,), progress=False)
    assert measured["short"][0] >= LENGTH_BIAS_PASS and measured["long"][0] >= LENGTH_BIAS_PASS
    assert "✓ my_bias extrapolates" in capsys.readouterr().out


def test_the_design_check_trains_and_refuses_a_bias_that_rewards_distance():
    with pytest.raises(AssertionError, match="does not extrapolate yet.*grows from distance 0 to 1"):
        checks.check_length_bias(lambda distance: 0.25 * distance.float(), seeds=(0,), progress=False)
