"""attnlab.zoo.induction (the reference of lesson 04's exercise 7 and what the phase-change record
measures) against plain loops in float64 over the weights and logits of a small model, and the
sequences it draws."""

from __future__ import annotations

import math

import pytest
import torch

import attnlab
from attnlab import corpus
from attnlab.zoo import induction

CHAIN = ("attention", "masking", "positions", "multihead", "feedforward", "stacks")


@pytest.fixture(scope="module")
def model():
    before = {name: attnlab.source_of(name) == "reference" for name in CHAIN}
    attnlab.use_reference(*CHAIN, quiet=True)
    from attnlab import stacks

    torch.manual_seed(0)
    built = stacks.DecoderOnly(len(corpus.VOCAB), d_model=16, n_layers=3, n_heads=2, d_ff=32).eval()
    yield built
    for name in CHAIN:
        if not before[name]:
            attnlab.use_own(name)


def _outputs(model, tokens):
    with torch.no_grad():
        logits, weights = model(tokens, return_weights=True)
    return logits.double(), torch.stack(weights, dim=1).double()


def test_repeated_random_tokens_are_random_words_twice():
    tokens = induction.repeated_random_tokens(5, 30, torch.Generator().manual_seed(1))
    assert tokens.shape == (5, 60) and tokens.dtype == torch.long
    assert torch.equal(tokens[:, :30], tokens[:, 30:])
    assert torch.isin(tokens, induction.WORDS).all()
    assert not torch.isin(tokens, torch.tensor(corpus.TOKENIZER.encode(list(corpus.SPECIALS)))).any()
    again = induction.repeated_random_tokens(5, 30, torch.Generator().manual_seed(1))
    other = induction.repeated_random_tokens(5, 30, torch.Generator().manual_seed(2))
    assert torch.equal(tokens, again) and not torch.equal(tokens, other)
    assert len(induction.WORDS) == len(corpus.VOCAB) - 3


def test_random_lists_are_written_and_read_back_in_the_corpus_words():
    lists = induction.random_lists(4, 5, torch.Generator().manual_seed(0))
    assert lists.shape == (4, 24)
    for row in lists.tolist():
        words = corpus.TOKENIZER.decode(row).split()
        first, second = words[:12], words[12:]
        assert first[0] in corpus.FIRST_NAMES and first[1] in corpus.SURNAMES and second[:2] == first[:2]
        assert first[2:6] == ["wrote", "a", "list", ":"] and second[2:6] == ["read", "the", "list", ":"]
        items = first[6:11]
        assert second[6:11] == items and first[11] == second[11] == "."
        assert len(set(items)) == 5 and set(items) <= set(corpus.LIST_ITEMS)
    # two halves of n_items + 7 words that differ only in "wrote a" / "read the"
    differ = (lists[:, :12] != lists[:, 12:]).any(dim=0).nonzero().flatten().tolist()
    assert differ == [2, 3]


def test_repeated_loss_is_the_mean_next_word_loss_of_each_half(model):
    tokens = induction.repeated_random_tokens(3, 8, torch.Generator().manual_seed(3))
    logits, _ = _outputs(model, tokens)
    T = 8
    first, second = [], []
    for b in range(3):
        for i in range(2 * T - 1):                   # the logits at i predict word i + 1
            log_p = logits[b, i] - torch.logsumexp(logits[b, i], dim=0)
            loss = -float(log_p[tokens[b, i + 1]])
            if 1 <= i + 1 <= T - 1:
                first.append(loss)
            elif i + 1 >= T + 1:
                second.append(loss)
    got = induction.repeated_loss(model, tokens)
    assert len(first) == len(second) == 3 * (T - 1)
    assert got.first == pytest.approx(sum(first) / len(first), abs=1e-5)
    assert got.second == pytest.approx(sum(second) / len(second), abs=1e-5)


def test_induction_and_previous_token_scores_read_the_right_weights(model):
    tokens = induction.random_lists(4, 4, torch.Generator().manual_seed(4))
    _, weights = _outputs(model, tokens)
    T, (L, H) = tokens.shape[1] // 2, weights.shape[1:3]
    induction_loop = torch.zeros(L, H, dtype=torch.float64)
    previous_loop = torch.zeros(L, H, dtype=torch.float64)
    for layer in range(L):
        for head in range(H):
            induction_loop[layer, head] = sum(float(weights[b, layer, head, i, i - T + 1])
                                              for b in range(4) for i in range(T, 2 * T)) / (4 * T)
            previous_loop[layer, head] = sum(float(weights[b, layer, head, i, i - 1])
                                             for b in range(4) for i in range(1, 2 * T)) / (4 * (2 * T - 1))
    torch.testing.assert_close(induction.induction_scores(model, tokens).double(), induction_loop, atol=1e-6, rtol=0)
    torch.testing.assert_close(induction.previous_token_scores(model, tokens).double(), previous_loop, atol=1e-6, rtol=0)


def test_copied_counts_the_items_read_back_predicted_right(model):
    lists = induction.random_lists(6, 3, torch.Generator().manual_seed(5))
    logits, _ = _outputs(model, lists)
    T = lists.shape[1] // 2
    right = total = 0
    for b in range(6):
        read = lists[b, T:].tolist()
        colon = T + read.index(corpus.TOKENIZER.ids[":"])
        for i in range(colon, colon + 3):            # ":" and each item but the last predict the next item
            right += int(int(logits[b, i].argmax()) == int(lists[b, i + 1]))
            total += 1
    assert induction.copied(model, lists, 3) == pytest.approx(right / total)


def test_ablated_heads_attend_evenly_and_write_nothing(model):
    tokens = induction.repeated_random_tokens(2, 6, torch.Generator().manual_seed(6))
    knocked = induction.ablated(model, [(1, 0), (2, 1)])
    _, weights = _outputs(knocked, tokens)
    n = tokens.shape[1]
    even = torch.tril(torch.ones(n, n, dtype=torch.float64)) / torch.arange(1, n + 1, dtype=torch.float64)[:, None]
    for layer, head in [(1, 0), (2, 1)]:
        torch.testing.assert_close(weights[:, layer, head], even.expand(2, n, n), atol=1e-6, rtol=0)
        attention = knocked.blocks[layer].self_attn
        h = attention.head_dim
        assert not attention.o_proj.weight[:, head * h:(head + 1) * h].any()
    # the other heads of the first layer are untouched, and so is the model given
    _, before = _outputs(model, tokens)
    torch.testing.assert_close(weights[:, 0], before[:, 0])
    assert model.blocks[1].self_attn.q_proj.weight[:8].abs().sum() > 0
    assert not math.isclose(float(before[:, 1, 0].std()), float(weights[:, 1, 0].std()))
