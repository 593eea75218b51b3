"""The course corpus: English-like passages generated from a small grammar, and their tokenizer.

Nothing is downloaded: every passage comes from a seeded ``random.Random``, so the same seed gives
the same text on every machine. The grammar carries what the later lessons look for:

- **two senses of "bank"**: a passage is about money (the bank approved the loan, the teller, the
  account) or about a river (the muddy bank, the water, a fish), never both, and the word "bank"
  itself reads the same in both; the words around it tell them apart. ``bank_sentences`` makes
  single sentences of either sense, the cue before or after "bank";
- **who did what**: "the customer paid the baker" against "the baker charged the customer", where
  only the word order says who paid (``who_paid``);
- **names and phrases that recur within a passage**: each passage has its own cast ("nora hale")
  and its own things ("a green kite"), introduced in full and mentioned again later, so copying an
  earlier occurrence pays (a model that has learnt to copy predicts "hale" after the second
  "nora"), while the cast of the next passage is new;
- **a pronoun and its noun**: "mia bought a green kite . it was fun ." The word after "it was"
  depends on what kind of thing the kite is, so predicting it means looking back at the noun;
- variety: hundreds of words in many combinations, far more passages than a small model could
  memorize.

The tokenizer is word-level with a fixed vocabulary (``VOCAB``: every word the grammar can write,
plus ``<pad>``, ``<unk>`` and ``<eos>``); unknown words become ``<unk>``. The training and
validation splits are drawn from different seeds (``splits``), and a passage of one never appears
in the other (checked when they are built).

Typical use (what the course model was trained on)::

    from attnlab import corpus
    data = corpus.splits()                       # {"train": [...], "validation": [...]}
    stream = corpus.token_stream(data["train"])  # passages joined by <eos>, one long tensor
    x, y = corpus.lm_batch(stream, 32, 64, generator)
"""

from __future__ import annotations

import functools
import random
import re
from dataclasses import dataclass
from typing import Callable, Sequence

import torch

__all__ = [
    "CATEGORIES", "CORPUS_SEED", "EOS", "PAD", "SENSES", "SPECIALS", "TOKENIZER", "TOPICS", "UNK",
    "VOCAB", "BankSentence", "Passage", "Tokenizer", "WhoPaid", "bank_sentences", "generate",
    "lm_batch", "passage", "splits", "token_stream", "unigram_entropy", "who_paid",
]

CORPUS_SEED = 2024
PAD, UNK, EOS = "<pad>", "<unk>", "<eos>"
SPECIALS: tuple[str, ...] = (PAD, UNK, EOS)
TOPICS: tuple[str, ...] = ("money", "river", "market", "home")
SENSES: tuple[str, ...] = ("money", "river")  # the two senses of "bank", named by their topic

# -- word lists (disjoint: a word belongs to one category only; a test checks it) ----------------

FIRST_NAMES = (
    "anna", "ben", "clara", "dan", "eva", "finn", "grace", "hugo", "ida", "jack", "kate", "leo",
    "mia", "nick", "olga", "paul", "rosa", "sam", "tina", "umar", "vera", "will", "yara", "zoe",
    "adam", "bella", "carl", "dora", "emil", "faye", "gus", "hana", "ivan", "june", "kai", "lena",
)
SURNAMES = (
    "hale", "moss", "reed", "stone", "wood", "fox", "lane", "marsh", "park", "cole", "dunn",
    "frost", "hill", "knox", "lowe", "nash", "pike", "rowe", "shaw", "tate", "vance", "wade",
    "york", "blake", "drake", "ford", "hayes", "kent", "lamb", "moore", "nye", "price", "quinn",
    "ross", "grant", "webb",
)
COLORS = ("red", "blue", "green", "yellow", "black", "white", "brown", "orange", "purple", "pink")
NUMBERS = ("two", "three", "four", "five", "six", "seven", "eight", "ten", "twenty", "fifty")
# Things and what "it was ..." says about each kind: the pronoun sentences pick the word after
# "it was" from the kind of the noun, so a model has to look back at the noun to predict it.
THINGS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "food": (("bread", "cake", "soup", "apple", "cheese", "pie"), ("fresh", "tasty", "sweet")),
    "tool": (("hammer", "knife", "saw", "axe", "spade"), ("sharp", "heavy", "rusty")),
    "clothes": (("coat", "hat", "scarf", "shirt", "boots"), ("warm", "soft", "woolen")),
    "toy": (("ball", "kite", "doll", "drum", "puzzle"), ("fun", "loud", "colorful")),
}
ROLES = ("customer", "baker", "tailor", "farmer", "grocer", "landlord", "tenant", "butcher",
         "painter", "driver")
# Who pays in "the A <verb> the B": the subject for these verbs ...
PAYER_VERBS = ("paid", "tipped", "refunded")
# ... the object for these.
PAYEE_VERBS = ("charged", "billed", "fined")
MONEY_WORDS = ("loan", "approved", "refused", "account", "teller", "money", "fee",
               "savings", "deposit", "interest", "clerk", "vault", "signed", "form")
RIVER_WORDS = ("river", "muddy", "water", "fish", "reeds", "steep", "ducks", "boat", "rain",
               "fished", "drifted", "swam", "current", "willow", "rod", "grassy", "flooded")
PLACES = ("market", "kitchen", "garden", "attic", "shed", "street", "village", "square")
LIST_ITEMS = tuple(noun for nouns, _ in THINGS.values() for noun in nouns)  # what a list may hold
LIST_SHARE = 0.6  # the share of passages with a list written and read back
LIST_LENGTHS = (3, 6)  # the fewest and most items of a list

CATEGORIES: dict[str, tuple[str, ...]] = {
    "first name": FIRST_NAMES,
    "surname": SURNAMES,
    "color": COLORS,
    "number": NUMBERS,
    **{f"{kind} noun": nouns for kind, (nouns, _) in THINGS.items()},
    **{f"{kind} adjective": adjectives for kind, (_, adjectives) in THINGS.items()},
    "role": ROLES,
    "payer verb": PAYER_VERBS,
    "payee verb": PAYEE_VERBS,
    "money word": MONEY_WORDS,
    "river word": RIVER_WORDS,
    "place": PLACES,
}

# The glue: function words and the rest of the grammar's words (not a category of their own).
_GLUE = (
    ".", "the", "a", "an", "to", "of", "and", "at", "in", "on", "for", "from", "near", "along",
    "over", "after", "with", "was", "it", "bank", "went", "open", "asked", "buy", "house", "farm",
    "shop", "smiled", "counted", "checked", "week", "later", "kept", "paid", "walked", "sat",
    "watched", "jumped", "caught", "rose", "grew", "toward", "by", "bought", "found", "gave",
    "sold", "put", "liked", "wanted", "lost", "made", "said", "thanked", "called", "helped",
    "visited", "morning", "evening", "sun", "wind", "day", "cold", "calm", "quiet", "busy", "hello",
    "met", "borrowed", "carried", "wrote", "read", "list", ":", "coins",
)


def _vocabulary() -> tuple[str, ...]:
    words: list[str] = []
    for group in (*CATEGORIES.values(), _GLUE):
        words.extend(w for w in group if w not in words and w != "paid")
    words.append("paid")  # both a payer verb and glue ("nora paid the bank"): listed once
    return SPECIALS + tuple(words)


VOCAB: tuple[str, ...] = _vocabulary()


# -- the tokenizer ---------------------------------------------------------------------------------


class Tokenizer:
    """A word-level tokenizer with a fixed vocabulary.

    ``encode("The bank approved the loan.")`` lowercases, splits into words and the punctuation
    marks "." and ",", and maps each to its id (``<unk>`` for a word outside the vocabulary);
    ``decode(ids)`` writes the words back, separated by spaces. ``vocab[i]`` is the word of id i.
    """

    _WORD = re.compile(r"<[a-z]+>|[a-z']+|[.,:]")

    def __init__(self, vocab: Sequence[str]):
        if len(set(vocab)) != len(vocab):
            raise ValueError("the vocabulary lists a word twice")
        for special in SPECIALS:
            if special not in vocab:
                raise ValueError(f"the vocabulary needs the special token {special}")
        self.vocab = tuple(vocab)
        self.ids = {word: i for i, word in enumerate(self.vocab)}
        self.pad_id, self.unk_id, self.eos_id = (self.ids[s] for s in SPECIALS)

    def __len__(self) -> int:
        return len(self.vocab)

    def words(self, text: str) -> list[str]:
        """The words of ``text`` as the tokenizer sees them (lowercased, punctuation split off)."""
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        return self._WORD.findall(text.lower())

    def encode(self, text: str | Sequence[str]) -> list[int]:
        """Ids of ``text`` (a string, or a list of words already split); unknown words -> <unk>."""
        words = self.words(text) if isinstance(text, str) else list(text)
        return [self.ids.get(word, self.unk_id) for word in words]

    def decode(self, ids: Sequence[int] | torch.Tensor) -> str:
        """The words of ``ids`` joined by spaces (padding left out)."""
        ids = ids.tolist() if isinstance(ids, torch.Tensor) else list(ids)
        bad = [i for i in ids if not 0 <= int(i) < len(self.vocab)]
        if bad:
            raise ValueError(f"ids {bad[:5]} are outside the vocabulary of {len(self.vocab)} words")
        return " ".join(self.vocab[int(i)] for i in ids if int(i) != self.pad_id)


TOKENIZER = Tokenizer(VOCAB)


# -- the grammar -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Passage:
    """One passage: its words (sentences end with "."), its topic, and its cast of people."""

    words: tuple[str, ...]
    topic: str
    cast: tuple[tuple[str, str], ...]

    @property
    def text(self) -> str:
        return " ".join(self.words)


class _Scene:
    """What one passage is about: its people and things, mentioned in full the first time."""

    def __init__(self, rng: random.Random, n_people: int):
        firsts = rng.sample(FIRST_NAMES, n_people)
        lasts = rng.sample(SURNAMES, n_people)
        self.rng = rng
        self.cast = tuple(zip(firsts, lasts))
        self.introduced: set[str] = set()
        kinds = rng.sample(sorted(THINGS), 2)
        # Each passage has its own things, each with its own color: "the green kite" recurs.
        self.things = [(rng.choice(COLORS), rng.choice(THINGS[kind][0]), kind) for kind in kinds]

    def person(self, avoid: str | None = None) -> list[str]:
        """A person of the cast: the full name the first time, then the first name or the full name."""
        first, last = self.rng.choice([p for p in self.cast if p[0] != avoid])
        if first not in self.introduced or self.rng.random() < 0.6:
            return [first, last]
        return [first]

    def said(self, sentence: list[str]) -> list[str]:
        """Note who ``sentence`` introduced (a template may draw a person it does not use)."""
        self.introduced.update(w for w in sentence if w in FIRST_NAMES)
        return sentence

    def other(self, who: list[str]) -> list[str]:
        return self.person(avoid=who[0])

    def thing(self) -> tuple[str, str, str]:
        return self.rng.choice(self.things)


def _choice(rng: random.Random, *options: str) -> list[str]:
    return rng.choice(options).split()


def _money(s: _Scene) -> list[str]:
    r, p = s.rng, s.person()
    templates: list[Callable[[], list[str]]] = [
        lambda: p + ["went", "to", "the", "bank", "to", "open", "an", "account", "."],
        lambda: p + ["asked", "the", "bank", "for", "a", "loan", "to", "buy", "a"]
        + _choice(r, "house", "farm", "shop") + ["."],
        lambda: ["the", "teller", "at", "the", "bank"]
        + _choice(r, "counted the money", "smiled", "checked the account", "signed the form") + ["."],
        lambda: ["the", "bank"] + _choice(r, "approved", "approved", "refused") + ["the", "loan", "."],
        lambda: ["a", "week", "later", "the", "bank", "approved", "the", "loan", "of"] + p + ["."],
        lambda: ["the", "bank", "charged"] + p + ["a", "fee", "of", r.choice(NUMBERS), "coins", "."],
        lambda: p + ["paid", "the", "bank", r.choice(NUMBERS), "coins", "of", "interest", "."],
        lambda: p + ["kept", "the", "savings", "in", "the", "vault", "of", "the", "bank", "."],
        lambda: ["the", "clerk", "at", "the", "bank", "helped"] + p + ["with", "the", "deposit", "."],
        lambda: p + ["borrowed", "money", "from", "the", "bank", "."],
        lambda: ["the", "bank", "was", "busy", "in", "the", "morning", "."],
        lambda: p + ["went", "to", "the", "bank", "."],
    ]
    return r.choice(templates)()


def _river(s: _Scene) -> list[str]:
    r, p = s.rng, s.person()
    templates: list[Callable[[], list[str]]] = [
        lambda: p + ["walked", "along", "the", "river", "to", "the", "bank", "."],
        lambda: ["the", "bank", "of", "the", "river", "was"] + _choice(r, "muddy", "steep", "grassy") + ["."],
        lambda: p + ["sat", "on", "the", "bank", "and", "watched", "the", "water", "."],
        lambda: ["a", "fish", "jumped", "near", "the", "bank", "."],
        lambda: p + ["caught", "a", "fish", "from", "the"] + _choice(r, "muddy bank", "bank", "boat") + ["."],
        lambda: ["the", "water", "rose", "over", "the", "bank", "after", "the", "rain", "."],
        lambda: ["reeds", "grew", "along", "the", "bank", "by", "the", "willow", "."],
        lambda: p + ["fished", "with", "a", "rod", "from", "the", "bank", "."],
        lambda: ["the", "boat", "drifted", "toward", "the", "bank", "with", "the", "current", "."],
        lambda: ["ducks", "swam", "near", "the", "bank", "."],
        lambda: ["the", "bank", "was", _choice(r, "muddy", "flooded", "steep", "quiet")[0], "."],
        lambda: p + ["went", "to", "the", "bank", "."],
    ]
    return r.choice(templates)()


def _market(s: _Scene) -> list[str]:
    r = s.rng
    a, b = r.sample(ROLES, 2)
    p = s.person()
    color, noun, _ = s.thing()
    templates: list[Callable[[], list[str]]] = [
        lambda: ["the", a, r.choice(PAYER_VERBS + PAYEE_VERBS), "the", b, "."],
        lambda: ["the", a] + _choice(r, "thanked", "called", "helped", "visited") + ["the", b, "."],
        lambda: p + ["paid"] + s.other(p) + [r.choice(NUMBERS), "coins", "for", "the", color, noun, "."],
        lambda: p + ["sold", "the", color, noun, "to"] + s.other(p) + ["."],
        lambda: p + ["charged"] + s.other(p) + [r.choice(NUMBERS), "coins", "."],
        lambda: ["at", "the", "market"] + p + ["met", "the", a, "."],
    ]
    return r.choice(templates)()


def _home(s: _Scene) -> list[str]:
    r = s.rng
    p = s.person()
    color, noun, kind = s.thing()
    adjective = r.choice(THINGS[kind][1])
    templates: list[Callable[[], list[str]]] = [
        lambda: p + ["bought", "a", color, noun, "at", "the", "market", ".", "it", "was", adjective, "."],
        lambda: p + ["found", "the", color, noun, "in", "the", r.choice(PLACES), ".", "it", "was", adjective, "."],
        lambda: p + ["gave", "the", color, noun, "to"] + s.other(p) + ["."],
        lambda: p + _choice(r, "liked", "wanted", "lost", "made", "carried") + ["the", color, noun, "."],
        lambda: p + ["put", "the", color, noun, "in", "the", r.choice(PLACES), "."],
        lambda: ["the", noun, "was", adjective, "."],
    ]
    return r.choice(templates)()


def _weather(s: _Scene) -> list[str]:
    r = s.rng
    if r.random() < 0.5:
        return (["the"] + _choice(r, "sun", "wind", "day", "evening", "morning") + ["was"]
                + _choice(r, "cold", "calm", "quiet") + ["."])
    p = s.person()
    return p + ["said", "hello", "to"] + s.other(p) + ["."]


_TOPIC_SENTENCES: dict[str, Callable[[_Scene], list[str]]] = {
    "money": _money, "river": _river, "market": _market, "home": _home,
}


def passage(rng: random.Random, topic: str | None = None) -> Passage:
    """One passage drawn from ``rng``: 6 to 10 sentences, most of them on its topic.

    A money or river passage has no sentence of the other bank sense; the rest of its sentences
    come from the market, home and weather families, which never mention a bank.
    """
    topic = rng.choice(TOPICS) if topic is None else topic
    if topic not in TOPICS:
        raise ValueError(f"topic must be one of {TOPICS}, got {topic!r}")
    scene = _Scene(rng, n_people=rng.choice((2, 3)))
    others = [t for t in ("market", "home") if t != topic]
    n_sentences = rng.randint(6, 10)
    # Most passages write a list and read it back later, word for word: only copying predicts it.
    lists = sorted(rng.sample(range(n_sentences), 2)) if rng.random() < LIST_SHARE else []
    items = rng.sample(LIST_ITEMS, rng.randint(*LIST_LENGTHS))
    words: list[str] = []
    for index in range(n_sentences):
        roll = rng.random()
        if index in lists:
            p = scene.person()
            verb = ["wrote", "a"] if index == lists[0] else ["read", "the"]
            sentence = p + verb + ["list", ":"] + items + ["."]
        elif roll < 0.65:
            sentence = _TOPIC_SENTENCES[topic](scene)
        elif roll < 0.9:
            sentence = _TOPIC_SENTENCES[rng.choice(others)](scene)
        else:
            sentence = _weather(scene)
        words += scene.said(sentence)
    return Passage(tuple(words), topic, scene.cast)


def generate(n_passages: int, seed: int = CORPUS_SEED) -> list[Passage]:
    """``n_passages`` passages drawn from ``random.Random(seed)`` (the same on every machine)."""
    if n_passages < 0:
        raise ValueError(f"n_passages must be >= 0, got {n_passages}")
    rng = random.Random(seed)
    return [passage(rng) for _ in range(n_passages)]


@functools.lru_cache(maxsize=4)
def _splits(n_train: int, n_validation: int, seed: int) -> tuple[tuple[Passage, ...], tuple[Passage, ...]]:
    train = generate(n_train, seed)
    validation = generate(n_validation, seed + 1)
    seen = {p.words for p in train}
    # Passages are long enough that a repeat is rare; drop any so the splits share none.
    validation = [p for p in validation if p.words not in seen]
    return tuple(train), tuple(validation)


def splits(n_train: int = 8000, n_validation: int = 500, seed: int = CORPUS_SEED) -> dict[str, list[Passage]]:
    """The course's training and validation passages: {"train": [...], "validation": [...]}.

    Drawn from two different seeds (``seed`` and ``seed + 1``); a validation passage that happens to
    equal a training passage is dropped, so the splits never share a passage. Cached per arguments.
    """
    train, validation = _splits(int(n_train), int(n_validation), int(seed))
    return {"train": list(train), "validation": list(validation)}


def token_stream(passages: Sequence[Passage], tokenizer: Tokenizer = TOKENIZER) -> torch.Tensor:
    """All passages as one 1-d int64 tensor of ids, each passage followed by ``<eos>``."""
    ids: list[int] = []
    for p in passages:
        ids += tokenizer.encode(p.words)
        ids.append(tokenizer.eos_id)
    return torch.tensor(ids, dtype=torch.long)


def lm_batch(stream: torch.Tensor, batch_size: int, length: int,
             generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """A language-modelling batch: ``batch_size`` windows of ``length`` tokens at random offsets.

    Returns (inputs, targets), each (batch_size, length) int64; targets are the inputs shifted by
    one token (the next word at every position).
    """
    if stream.dim() != 1 or stream.numel() < length + 2:
        raise ValueError(f"stream must be a 1-d tensor longer than length + 1 = {length + 1} tokens")
    if batch_size < 1 or length < 1:
        raise ValueError(f"batch_size and length must be >= 1, got {batch_size} and {length}")
    starts = torch.randint(0, stream.numel() - length - 1, (batch_size,), generator=generator)
    windows = stream[starts[:, None] + torch.arange(length + 1)]
    return windows[:, :-1], windows[:, 1:]


def unigram_entropy(stream: torch.Tensor, vocab_size: int = len(VOCAB)) -> float:
    """Entropy (nats per token) of the words' frequencies in ``stream``: the loss of the best model
    that ignores context. A language model that uses context must do better."""
    counts = torch.bincount(stream.flatten(), minlength=vocab_size).double()
    p = counts[counts > 0] / counts.sum()
    return float(-(p * p.log()).sum())


# -- single sentences for the lessons' small tasks -------------------------------------------------


@dataclass(frozen=True)
class BankSentence:
    """A sentence with "bank" in one sense: words, sense ("money" or "river"), where "bank" is, and
    whether the words that give the sense away come before "bank" (``cue_before``) or after it."""

    words: tuple[str, ...]
    sense: str
    index: int
    cue_before: bool


# Sentences the grammar itself writes, so a model trained on the corpus knows every word of them.
_BANK_FRAMES: dict[tuple[str, bool], tuple[str, ...]] = {
    ("money", True): (
        "the teller at the bank counted the money .",
        "the teller at the bank smiled .",
        "the clerk at the bank helped {p} with the deposit .",
        "{p} borrowed money from the bank .",
        "{p} kept the savings in the vault of the bank .",
    ),
    # With the cue after "bank", every sentence begins "the bank": nothing before "bank" tells.
    ("money", False): (
        "the bank approved the loan .",
        "the bank refused the loan .",
        "the bank charged {p} a fee of {n} coins .",
        "the bank approved the loan of {p} .",
    ),
    ("river", True): (
        "{p} walked along the river to the bank .",
        "a fish jumped near the bank .",
        "ducks swam near the bank .",
        "the water rose over the bank after the rain .",
        "the boat drifted toward the bank with the current .",
        "{p} fished with a rod from the bank .",
    ),
    ("river", False): (
        "the bank of the river was muddy .",
        "the bank was muddy .",
        "the bank was flooded .",
        "the bank of the river was grassy .",
        "the bank was steep .",
    ),
}


def bank_sentences(n: int, seed: int = 0, cue: str = "any") -> list[BankSentence]:
    """``n`` sentences with the word "bank", half of each sense (alternating money, river).

    cue: "before" (the words that give the sense away come before "bank": a left-to-right model
    can know the sense at "bank"), "after" (only later words tell: it cannot), or "any" (both).
    The frames are the grammar's own sentences, with a random person.
    """
    if cue not in ("before", "after", "any"):
        raise ValueError(f"cue must be 'before', 'after' or 'any', got {cue!r}")
    rng = random.Random(seed)
    out = []
    for i in range(n):
        sense = SENSES[i % 2]
        before = {"before": True, "after": False}.get(cue, rng.random() < 0.5)
        frame = rng.choice(_BANK_FRAMES[(sense, before)])
        name = " ".join(rng.choice(list(zip(FIRST_NAMES, SURNAMES))))
        words = tuple(frame.format(p=name, n=rng.choice(NUMBERS)).split())
        out.append(BankSentence(words, sense, words.index("bank"), before))
    return out


@dataclass(frozen=True)
class WhoPaid:
    """"the A <verb> the B ." with ``payer`` A or B: only the word order and the verb say which."""

    words: tuple[str, ...]
    subject: str
    verb: str
    object: str
    payer: str


def who_paid(n: int, seed: int = 0, verbs: Sequence[str] = ("paid", "charged")) -> list[WhoPaid]:
    """``n`` who-did-what sentences of the grammar: "the customer paid the baker ." (the customer
    paid) or "the baker charged the customer ." (the customer paid). With the default verbs, every
    sentence has a twin with the same words in another order and the other payer."""
    unknown = [v for v in verbs if v not in PAYER_VERBS + PAYEE_VERBS]
    if unknown or not verbs:
        raise ValueError(f"verbs must be among {PAYER_VERBS + PAYEE_VERBS}, got {list(verbs)}")
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        a, b = rng.sample(ROLES, 2)
        verb = rng.choice(tuple(verbs))
        payer = a if verb in PAYER_VERBS else b
        out.append(WhoPaid(("the", a, verb, "the", b, "."), a, verb, b, payer))
    return out
