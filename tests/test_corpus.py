"""The course corpus (attnlab.corpus): deterministic, with the structure the lessons rely on, and a
word-level tokenizer with a fixed vocabulary."""

from __future__ import annotations

import random
from collections import Counter

import pytest
import torch

from attnlab import corpus


@pytest.fixture(scope="module")
def data():
    return corpus.splits()


def test_the_same_seed_gives_the_same_passages_and_another_seed_others():
    assert corpus.generate(20, seed=5) == corpus.generate(20, seed=5)
    assert corpus.generate(20, seed=5) != corpus.generate(20, seed=6)


def test_splits_never_share_a_passage(data):
    train = {p.words for p in data["train"]}
    assert len(data["train"]) == 8000 and len(data["validation"]) >= 490
    assert not any(p.words in train for p in data["validation"])


def test_categories_are_disjoint_and_in_the_vocabulary():
    words = [w for group in corpus.CATEGORIES.values() for w in group]
    repeated = [w for w, k in Counter(words).items() if k > 1]
    assert not repeated, repeated
    assert set(words) <= set(corpus.VOCAB)
    assert len(set(corpus.VOCAB)) == len(corpus.VOCAB)
    assert corpus.VOCAB[:3] == corpus.SPECIALS


def test_every_word_of_the_passages_is_in_the_vocabulary_and_every_word_is_used(data):
    stream = corpus.token_stream(data["train"])
    assert not (stream == corpus.TOKENIZER.unk_id).any()
    used = set(stream.tolist())
    unused = [w for i, w in enumerate(corpus.VOCAB) if i not in used and w not in (corpus.PAD, corpus.UNK)]
    assert not unused, unused


def test_tokenizer_round_trip_and_unknown_words():
    tokenizer = corpus.TOKENIZER
    ids = tokenizer.encode("The bank approved the loan.")
    assert tokenizer.decode(ids) == "the bank approved the loan ."
    assert tokenizer.encode(["the", "bank"]) == ids[:2]
    assert tokenizer.encode("the zeppelin") == [tokenizer.ids["the"], tokenizer.unk_id]
    assert tokenizer.decode(torch.tensor([tokenizer.pad_id, *ids[:2]])) == "the bank"
    with pytest.raises(ValueError, match="outside the vocabulary"):
        tokenizer.decode([len(tokenizer)])
    with pytest.raises(TypeError):
        tokenizer.words(3)


def test_bank_senses_never_mix_within_a_passage(data):
    money, river = set(corpus.MONEY_WORDS), set(corpus.RIVER_WORDS)
    counts = Counter()
    for p in data["train"][:2000]:
        words = set(p.words)
        if p.topic == "money":
            assert not words & river, p.text
        if p.topic == "river":
            assert not words & money, p.text
        if "bank" in words:
            counts[p.topic] += 1
            assert p.topic in corpus.SENSES, p.text
    assert counts["money"] > 300 and counts["river"] > 300


def test_names_recur_within_a_passage_and_are_introduced_in_full(data):
    repeated = 0
    for p in data["train"][:500]:
        firsts = [i for i, w in enumerate(p.words) if w in corpus.FIRST_NAMES]
        seen = set()
        for i in firsts:
            name = p.words[i]
            if name not in seen:  # the first mention carries the surname of the passage's cast
                assert (name, p.words[i + 1]) in p.cast, p.text
            seen.add(name)
        repeated += len(firsts) > len(set(p.words[i] for i in firsts))
    assert repeated > 400


def test_most_passages_write_a_list_and_read_it_back_word_for_word(data):
    with_list = 0
    for p in data["train"][:500]:
        text = p.text
        if " wrote a list : " in text:
            written = text.split(" wrote a list : ")[1].split(" .")[0]
            read = text.split(" read the list : ")[1].split(" .")[0]
            assert written == read and 3 <= len(written.split()) <= 6
            with_list += 1
    assert 0.5 < with_list / 500 < 0.7


def test_pronoun_sentences_say_what_fits_the_noun(data):
    kind_of = {noun: kind for kind, (nouns, _) in corpus.THINGS.items() for noun in nouns}
    seen = 0
    for p in data["train"][:500]:
        words = p.words
        for i in range(len(words) - 2):
            if words[i:i + 2] == ("it", "was"):
                noun = next(w for w in reversed(words[:i]) if w in kind_of)
                assert words[i + 2] in corpus.THINGS[kind_of[noun]][1], p.text
                seen += 1
    assert seen > 50


@pytest.mark.parametrize("cue", ["before", "after", "any"])
def test_bank_sentences(cue):
    sentences = corpus.bank_sentences(40, seed=3, cue=cue)
    assert [s.sense for s in sentences[:4]] == ["money", "river", "money", "river"]
    for s in sentences:
        assert s.words[s.index] == "bank" and set(s.words) <= set(corpus.VOCAB)
        if cue != "any":
            assert s.cue_before == (cue == "before")
        cues = set(corpus.MONEY_WORDS if s.sense == "money" else corpus.RIVER_WORDS)
        where = s.words[:s.index] if s.cue_before else s.words[s.index + 1:]
        assert cues & set(where), s.words
        if not s.cue_before:  # nothing before "bank" tells the senses apart
            assert s.words[:2] == ("the", "bank")
    with pytest.raises(ValueError):
        corpus.bank_sentences(2, cue="middle")


def test_who_paid_sentences_have_twins_in_the_other_order():
    sentences = corpus.who_paid(200, seed=1)
    for s in sentences:
        assert s.words == ("the", s.subject, s.verb, "the", s.object, ".")
        assert s.payer == (s.subject if s.verb == "paid" else s.object)
    assert {s.verb for s in sentences} == {"paid", "charged"}
    with pytest.raises(ValueError):
        corpus.who_paid(3, verbs=("ate",))


def test_lm_batch_shifts_by_one_and_unigram_entropy_is_a_lower_bound_for_context_free_models():
    stream = torch.arange(100)
    x, y = corpus.lm_batch(stream, 4, 10, torch.Generator().manual_seed(0))
    assert x.shape == y.shape == (4, 10) and torch.equal(y, x + 1)
    assert corpus.unigram_entropy(torch.tensor([0, 1, 0, 1]), 2) == pytest.approx(0.6931, abs=1e-4)
    with pytest.raises(ValueError):
        corpus.lm_batch(stream[:5], 2, 10)


def test_passages_are_reproducible_from_a_random_generator():
    first = corpus.passage(random.Random(9), topic="river")
    assert first == corpus.passage(random.Random(9), topic="river") and first.topic == "river"
    with pytest.raises(ValueError):
        corpus.passage(random.Random(0), topic="space")
