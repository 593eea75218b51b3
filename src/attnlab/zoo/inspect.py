"""Looking inside the course model: what its heads attend to, what "bank" means to it, what its
feed-forward neurons respond to. Every score is computed over the validation passages, which the
model never trained on.

- ``head_scores(model, windows)``: for every head, how much weight it puts on the previous token,
  on earlier occurrences of the current token, and on the token right after an earlier occurrence
  (the "induction" pattern that lets a model copy: at the second "cake" of a list read back, it
  looks at what followed "cake" the first time); ``uniform_scores(windows)``, what a head that
  attends evenly would score.
- ``bank_states(model, layer)`` and ``bank_probe(model)``: the hidden vector of every "bank" in the
  validation passages, labelled by the passage's sense (money or river), and a linear probe's
  held-out accuracy at telling them apart.
- ``neuron_activations``, ``top_contexts`` and ``neuron_patterns``: the contexts that make a
  feed-forward neuron fire most, and how much they have in common (Geva et al., 2021).

Hidden states are read with forward hooks on the model's own submodules (``blocks[i]``,
``blocks[i].ffn.down``), so these work on any ``DecoderOnly`` with the course's names.
"""

from __future__ import annotations

from collections import Counter

import torch
from torch import nn

from attnlab import corpus

__all__ = ["COPYABLE", "INDUCTION_QUERIES", "SCORES", "bank_probe", "bank_states", "head_scores", "measurements",
           "neuron_activations", "neuron_patterns", "probe_accuracy", "residual_stream", "top_contexts",
           "uniform_scores", "word_category"]

_CATEGORY = {word: name for name, words in corpus.CATEGORIES.items() for word in words}


def word_category(word: str) -> str:
    """The grammar's category of ``word`` ("first name", "river word", ...), or the word itself."""
    return _CATEGORY.get(word, word)


@torch.no_grad()
def residual_stream(model: nn.Module, tokens: torch.Tensor) -> list[torch.Tensor]:
    """The residual stream of ``tokens`` (b, n): [embeddings, after block 0, ..., after the last
    block], each (b, n, d_model) (before the final norm)."""
    found: list[torch.Tensor] = []
    hooks = [model.embed.register_forward_hook(lambda m, i, out: found.append(out))]
    hooks += [block.register_forward_hook(lambda m, i, out: found.append(out[0] if isinstance(out, tuple) else out))
              for block in model.blocks]
    try:
        model.eval()
        model(tokens)
    finally:
        for hook in hooks:
            hook.remove()
    return found


# The words that recur within a passage and that only an earlier occurrence predicts: the cast's
# names and the items of a list written and read back. Queries for the "duplicate_token" score.
COPYABLE = corpus.FIRST_NAMES + corpus.SURNAMES + corpus.LIST_ITEMS
# Queries for the "induction" score: the same less the first names, because after a first name
# comes its surname, and a head that attends to every surname in sight (without knowing which one
# followed this name before) would score as if it copied.
INDUCTION_QUERIES = corpus.SURNAMES + corpus.LIST_ITEMS
SCORES = ("previous_token", "duplicate_token", "induction")


def _patterns(tokens: torch.Tensor) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """For each score, (which keys count (b, n, n), which queries count (b, n)) in ``tokens`` (b, n)."""
    n = tokens.shape[1]
    earlier = torch.ones(n, n, dtype=torch.bool).tril(-1)                 # key j < query i
    previous = torch.zeros(n, n, dtype=torch.bool)
    previous[torch.arange(1, n), torch.arange(n - 1)] = True              # key j = i - 1
    same = (tokens[:, :, None] == tokens[:, None, :]) & earlier            # an earlier occurrence
    after_same = torch.zeros_like(same)
    after_same[:, :, 1:] = same[:, :, :-1]                                # right after one
    after_same &= earlier
    copyable = torch.isin(tokens, torch.tensor(corpus.TOKENIZER.encode(list(COPYABLE))))
    inducible = torch.isin(tokens, torch.tensor(corpus.TOKENIZER.encode(list(INDUCTION_QUERIES))))
    first = torch.arange(n) >= 1
    return {"previous_token": (previous.expand_as(same), first.expand(tokens.shape)),
            "duplicate_token": (same, same.any(dim=-1) & copyable),
            "induction": (after_same, after_same.any(dim=-1) & inducible)}


@torch.no_grad()
def head_scores(model: nn.Module, windows: torch.Tensor, batch_size: int = 64) -> dict[str, torch.Tensor]:
    """Three scores of every head, each a (n_layers, n_heads) tensor: the attention weight a head
    puts, on average over the queries that count, on the keys that count.

    windows: (N, n) token ids (``validation_windows``); the model reads each window.
    - "previous_token": the token just before (every query but the first);
    - "duplicate_token": earlier occurrences of the query's own token (queries: a name or a list
      item that occurred earlier in the window, ``COPYABLE``);
    - "induction": the tokens right after earlier occurrences of the query's token, where a head
      that copies finds what comes next (queries: a surname or a list item, ``INDUCTION_QUERIES``).
    ``uniform_scores(windows)`` gives what a head that spreads its weight evenly would score.
    """
    model.eval()
    totals = {key: 0.0 for key in SCORES}
    counts = dict.fromkeys(SCORES, 0)
    for start in range(0, windows.shape[0], batch_size):
        tokens = windows[start:start + batch_size]
        _, weights = model(tokens, return_weights=True)
        a = torch.stack(weights, dim=1)                                   # (b, L, H, n, n)
        for key, (keys, queries) in _patterns(tokens).items():
            mass = (a * keys[:, None, None].to(a.dtype)).sum(dim=-1)       # (b, L, H, n)
            totals[key] += (mass * queries[:, None, None].to(a.dtype)).sum(dim=(0, -1))
            counts[key] += int(queries.sum())
    return {key: totals[key] / max(counts[key], 1) for key in SCORES}


def uniform_scores(windows: torch.Tensor) -> dict[str, float]:
    """The scores of ``head_scores`` for a head that spreads its weight evenly over the keys it may
    see (1 / (i + 1) each, for query i): the baseline a head that does something must beat."""
    n = windows.shape[1]
    even = 1.0 / torch.arange(1, n + 1, dtype=torch.float64)               # weight per key of query i
    found = {}
    for key, (keys, queries) in _patterns(windows).items():
        mass = keys.sum(dim=-1).double() * even                            # (N, n)
        found[key] = float((mass * queries).sum() / max(int(queries.sum()), 1))
    return found


def _validation_passages() -> list[corpus.Passage]:
    from attnlab.zoo.training import ZooConfig

    config = ZooConfig()
    return corpus.splits(config.n_train_passages, config.n_validation_passages, config.corpus_seed)["validation"]


@torch.no_grad()
def bank_states(model: nn.Module, layer: int | None = None, passages=None) -> tuple[torch.Tensor, torch.Tensor]:
    """Hidden vectors of every "bank" in ``passages`` (default: the course's validation passages
    about money or a river), and their senses.

    layer: which point of the residual stream (0 = embeddings, i = after block i - 1; None = after
    the last block). Each passage is read on its own, from its start, so the vector of a "bank"
    holds what the passage said before it. Returns (states (k, d_model), senses (k,) with 0 = money,
    1 = river) and, third, the index of the passage of each "bank" (to split probes by passage).
    """
    if passages is None:
        passages = _validation_passages()
    passages = [p for p in passages if p.topic in corpus.SENSES]
    bank = corpus.TOKENIZER.ids["bank"]
    states, senses, owners = [], [], []
    for index, passage in enumerate(passages):
        tokens = torch.tensor([corpus.TOKENIZER.encode(passage.words)])
        where = (tokens[0] == bank).nonzero().flatten()
        if not len(where):
            continue
        stream = residual_stream(model, tokens)
        chosen = stream[-1 if layer is None else layer][0, where]
        states.append(chosen)
        senses += [corpus.SENSES.index(passage.topic)] * len(where)
        owners += [index] * len(where)
    return torch.cat(states), torch.tensor(senses), torch.tensor(owners)


def _fit_logistic(x: torch.Tensor, y: torch.Tensor, l2: float = 1e-2, steps: int = 200) -> tuple[torch.Tensor, torch.Tensor]:
    """A logistic-regression probe (weights, bias) fitted with L-BFGS on standardized features."""
    w = torch.zeros(x.shape[1], dtype=torch.float64, requires_grad=True)
    b = torch.zeros((), dtype=torch.float64, requires_grad=True)
    optimizer = torch.optim.LBFGS([w, b], max_iter=steps, line_search_fn="strong_wolfe")

    def closure():
        optimizer.zero_grad()
        loss = nn.functional.binary_cross_entropy_with_logits(x @ w + b, y.double()) + l2 * w.pow(2).sum()
        loss.backward()
        return loss

    optimizer.step(closure)
    return w.detach(), b.detach()


def probe_accuracy(vectors: torch.Tensor, labels: torch.Tensor, train: torch.Tensor) -> float:
    """Held-out accuracy of a linear probe: a logistic regression fitted on ``vectors[train]``
    (standardized by the training rows' statistics) and scored on the other rows.
    vectors: (k, d); labels: (k,) of 0 and 1; train: (k,) boolean."""
    x = vectors.double()
    mean, std = x[train].mean(dim=0), x[train].std(dim=0).clamp(min=1e-6)
    x = (x - mean) / std
    w, b = _fit_logistic(x[train], labels[train])
    right = ((x @ w + b) > 0).long() == labels
    return float(right[~train].double().mean())


def bank_probe(model: nn.Module, layer: int | None = None) -> dict:
    """How well a linear probe tells the two senses of "bank" apart from the model's hidden vectors.

    The "bank"s of the validation passages (``bank_states``) are split by passage: even-numbered
    passages train the probe, odd-numbered ones test it, so no passage is in both. Returns
    {"accuracy": held-out accuracy, "n_train", "n_test", "layer"}.
    """
    states, senses, owners = bank_states(model, layer)
    train = owners % 2 == 0
    return {"accuracy": probe_accuracy(states, senses, train), "n_train": int(train.sum()),
            "n_test": int((~train).sum()), "layer": len(model.blocks) if layer is None else layer}


@torch.no_grad()
def neuron_activations(model: nn.Module, windows: torch.Tensor, layer: int, batch_size: int = 64) -> torch.Tensor:
    """Activations of the feed-forward neurons of block ``layer`` (what enters ``ffn.down``: the
    GELU of each neuron's key, Geva et al.'s memory coefficients) on ``windows`` (N, n):
    a (N, n, d_ff) tensor."""
    found: list[torch.Tensor] = []
    hook = model.blocks[layer].ffn.down.register_forward_pre_hook(lambda m, args: found.append(args[0]))
    try:
        model.eval()
        for start in range(0, windows.shape[0], batch_size):
            model(windows[start:start + batch_size])
    finally:
        hook.remove()
    return torch.cat(found)


def top_contexts(activations: torch.Tensor, windows: torch.Tensor, neuron: int, k: int = 10,
                 width: int = 6) -> list[dict]:
    """The ``k`` places in ``windows`` where ``neuron`` fires most (``activations`` from
    ``neuron_activations``): [{"context": the ``width`` words up to and including the token,
    "token", "previous", "activation"}, ...], strongest first."""
    top = activations[..., neuron].flatten().topk(k)
    return _contexts(windows, top.values.tolist(), top.indices.tolist(), width)


def _contexts(windows: torch.Tensor, values: list[float], flat_positions: list[int], width: int = 6) -> list[dict]:
    n, words = windows.shape[1], corpus.TOKENIZER.vocab
    found = []
    for value, flat in zip(values, flat_positions):
        row, position = divmod(flat, n)
        context = [words[int(t)] for t in windows[row, max(0, position - width + 1):position + 1]]
        found.append({"context": " ".join(context), "token": context[-1],
                      "previous": words[int(windows[row, position - 1])] if position else "",
                      "activation": value})
    return found


def _features(context: dict) -> list[str]:
    """What a context may share with others, in a fixed order of preference: the token, its
    category, the previous token, its category."""
    found = [f"token is '{context['token']}'"]
    if word_category(context["token"]) != context["token"]:
        found.append(f"token is a {word_category(context['token'])}")
    found.append(f"after '{context['previous']}'")
    if word_category(context["previous"]) != context["previous"]:
        found.append(f"after a {word_category(context['previous'])}")
    return found


_PREFERENCE = ("token is '", "token is a ", "after '", "after a ")


def _pattern(contexts: list[dict]) -> tuple[str, float]:
    """The most shared feature of ``contexts`` (the token, its category, the previous token or
    its category) and the fraction of contexts that have it. Ties go to the earlier kind of
    ``_PREFERENCE``, then alphabetically, so the answer never depends on hashing."""
    features: Counter = Counter()
    for c in contexts:
        features.update(_features(c))
    kind = lambda feature: next(i for i, prefix in enumerate(_PREFERENCE) if feature.startswith(prefix))  # noqa: E731
    feature = min(features, key=lambda f: (-features[f], kind(f), f))
    return feature, features[feature] / len(contexts)


def neuron_patterns(activations: torch.Tensor, windows: torch.Tensor, k: int = 20) -> list[dict]:
    """For every neuron of one layer (``activations`` (N, n, d_ff)): the pattern its top ``k``
    contexts share most and how many of them share it. Returns [{"neuron", "pattern", "share",
    "examples"}], the most consistent neurons first (ties: the stronger top activation first)."""
    top = activations.reshape(-1, activations.shape[-1]).topk(k, dim=0)  # every neuron at once
    values, positions = top.values.T.tolist(), top.indices.T.tolist()
    found = []
    for neuron in range(activations.shape[-1]):
        contexts = _contexts(windows, values[neuron], positions[neuron])
        pattern, share = _pattern(contexts)
        found.append({"neuron": neuron, "pattern": pattern, "share": share,
                      "peak": contexts[0]["activation"], "examples": [c["context"] for c in contexts[:3]]})
    return sorted(found, key=lambda item: (-item["share"], -item["peak"]))


def _best(scores: torch.Tensor) -> dict:
    layer, head = divmod(int(scores.argmax()), scores.shape[1])
    return {"score": round(float(scores.max()), 4), "layer": layer, "head": head}


def measurements(model: nn.Module, windows: torch.Tensor, neuron_k: int = 20, share: float = 0.9) -> dict:
    """What the course model was measured to do, on the validation ``windows`` (N, n + 1):

    {"heads": {score name: {"score", "layer", "head"} of the best head, and "all": every head's
    scores}, "bank_probe": held-out accuracy at each point of the residual stream (0 = embeddings),
    "neurons": per layer, how many neurons have top-``neuron_k`` contexts of which at least
    ``share`` share a pattern, and the five most consistent}.
    """
    inputs = windows[:, :-1]
    scores = head_scores(model, inputs)
    heads = {key: _best(value) for key, value in scores.items()}
    heads["all"] = {key: [[round(float(v), 4) for v in row] for row in value] for key, value in scores.items()}
    heads["uniform"] = {key: round(value, 4) for key, value in uniform_scores(inputs).items()}
    probe = [round(bank_probe(model, layer)["accuracy"], 4) for layer in range(len(model.blocks) + 1)]
    neurons = []
    for layer in range(len(model.blocks)):
        patterns = neuron_patterns(neuron_activations(model, inputs, layer), inputs, k=neuron_k)
        neurons.append({"layer": layer, "consistent": sum(p["share"] >= share for p in patterns),
                        "of": len(patterns),
                        "best": [{key: p[key] for key in ("neuron", "pattern", "share", "examples")}
                                 for p in patterns[:5]]})
    return {"heads": heads, "bank_probe": probe, "neurons": neurons, "neuron_k": neuron_k, "share": share}
