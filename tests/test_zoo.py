"""The shipped course model (attnlab.zoo): its files, its metadata, what it was trained to show, a
short retraining that follows the recorded losses, and loading into the learner's classes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import attnlab
from attnlab import corpus, zoo
from attnlab.zoo import inspect
from attnlab.zoo.training import state_sha256

ROOT = Path(__file__).resolve().parents[1]
CHAIN = ("attention", "masking", "positions", "multihead", "feedforward", "stacks")


@pytest.fixture(scope="module")
def meta():
    return zoo.metadata()


@pytest.fixture(scope="module")
def model(meta):
    for module in CHAIN:
        attnlab.use_reference(module, quiet=True)
    built = zoo.build_model(zoo.ZooConfig.from_dict(meta["config"]))
    built.load_state_dict(zoo.load_state())
    return built.eval()


@pytest.fixture(scope="module")
def windows(meta):
    return zoo.validation_windows(zoo.ZooConfig.from_dict(meta["config"]))


def test_weights_are_a_small_state_dict_loaded_with_weights_only(meta):
    assert zoo.WEIGHTS.stat().st_size <= 5_000_000
    state = torch.load(zoo.WEIGHTS, weights_only=True)
    assert all(isinstance(v, torch.Tensor) for v in state.values())
    assert state["lm_head.weight"].shape == (len(corpus.VOCAB), meta["config"]["d_model"])


def test_metadata_matches_the_weights(meta, model, windows):
    state = zoo.load_state()
    assert state_sha256(state) == meta["weights_sha256"]
    assert meta["vocab_size"] == len(corpus.VOCAB)
    assert meta["parameters"] == sum(p.numel() for p in model.parameters())
    assert meta["steps"] == meta["config"]["steps"] == len(meta["losses"])
    assert meta["corpus"]["validation_windows"] == windows.shape[0]
    for key in ("torch", "python", "seconds", "command", "unigram_entropy", "validation_loss"):
        assert key in meta
    assert zoo.validation_loss(model, windows) == pytest.approx(meta["validation_loss"], abs=2e-4)
    assert zoo.loading.probe_loss(model, meta["probe"]["tokens"]) == pytest.approx(meta["probe"]["loss"], abs=1e-4)


def test_validation_loss_is_well_below_the_unigram_entropy(meta):
    stream = corpus.token_stream(corpus.splits()["train"])
    entropy = corpus.unigram_entropy(stream)
    print(f"validation loss {meta['validation_loss']:.3f} nats, unigram entropy {entropy:.3f} nats")
    assert entropy == pytest.approx(meta["unigram_entropy"], abs=1e-4)
    assert meta["validation_loss"] < 0.5 * entropy


def test_a_previous_token_head_and_a_head_that_finds_earlier_occurrences(model, windows, meta):
    scores = inspect.head_scores(model, windows[:, :-1])
    uniform = inspect.uniform_scores(windows[:, :-1])
    best = {k: (float(v.max()), divmod(int(v.argmax()), v.shape[1])) for k, v in scores.items()}
    for key, (score, (layer, head)) in best.items():
        print(f"{key}: layer {layer} head {head} scores {score:.3f}; attending evenly scores {uniform[key]:.3f}")
    assert best["previous_token"][0] > 0.3 and best["previous_token"][0] > 5 * uniform["previous_token"]
    assert best["duplicate_token"][0] > 3 * uniform["duplicate_token"]
    # An induction head: it looks at what followed the earlier occurrence, far more than attending
    # evenly would, and sits above the previous-token head whose output it needs (Olsson et al., 2022).
    assert best["induction"][0] > 5 * uniform["induction"]
    assert best["induction"][1][0] > best["previous_token"][1][0]
    for key, (score, (layer, head)) in best.items():
        assert meta["measurements"]["heads"][key] == {"score": pytest.approx(score, abs=1e-3), "layer": layer,
                                                      "head": head}
        assert meta["measurements"]["heads"]["uniform"][key] == pytest.approx(uniform[key], abs=1e-4)


def test_the_two_senses_of_bank_are_linearly_separable(model, meta):
    probe = inspect.bank_probe(model)
    untrained = inspect.bank_probe(zoo.build_model(zoo.ZooConfig.from_dict(meta["config"])))
    print(f"bank probe: held-out accuracy {probe['accuracy']:.3f} on {probe['n_test']} occurrences "
          f"(trained on {probe['n_train']}); the same probe on the untrained model: {untrained['accuracy']:.3f}")
    assert probe["n_test"] > 100 and probe["accuracy"] > 0.9
    assert probe["accuracy"] > untrained["accuracy"] + 0.05
    assert meta["measurements"]["bank_probe"][-1] == pytest.approx(probe["accuracy"], abs=1e-3)


def test_some_neurons_have_top_contexts_that_share_a_pattern(model, windows, meta):
    inputs = windows[:, :-1]
    consistent = 0
    for layer in range(len(model.blocks)):
        patterns = inspect.neuron_patterns(inspect.neuron_activations(model, inputs, layer), inputs, k=20)
        consistent += sum(p["share"] >= 0.9 for p in patterns)
        print(f"layer {layer}: {patterns[0]['pattern']} ({patterns[0]['share']:.0%}), e.g. {patterns[0]['examples'][0]!r}")
        assert patterns[0]["share"] == pytest.approx(meta["measurements"]["neurons"][layer]["best"][0]["share"])
    assert consistent >= 20


def test_top_contexts_read_the_windows():
    windows = torch.tensor([[1, 2, 3], [4, 5, 6]])
    activations = torch.zeros(2, 3, 2)
    activations[1, 2, 0] = 5.0
    top = inspect.top_contexts(activations, windows, neuron=0, k=1, width=2)
    assert top[0]["context"] == f"{corpus.VOCAB[5]} {corpus.VOCAB[6]}" and top[0]["activation"] == 5.0


def test_a_short_retraining_follows_the_recorded_losses(meta):
    for module in CHAIN:
        attnlab.use_reference(module, quiet=True)
    config = zoo.ZooConfig.from_dict(meta["config"])
    steps = 30
    _, record = zoo.train_course_model(config, stop_after=steps, progress=False)
    recorded = meta["losses"][:steps]
    print("retrained:", [round(v, 3) for v in record["losses"][::5]], "recorded:", recorded[::5])
    assert record["losses"][0] == pytest.approx(recorded[0], abs=1e-3)
    assert max(abs(a - b) for a, b in zip(record["losses"], recorded)) < 0.05
    assert sum(record["losses"][-5:]) / 5 < record["losses"][0] - 0.5


def _load_in_subprocess(env_extra: dict[str, str]) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ATTNLAB_")}
    env.update(env_extra)
    code = ("from attnlab import zoo, corpus\nimport torch\nmodel, meta = zoo.load()\n"
            "ids = torch.tensor([corpus.TOKENIZER.encode('anna went to the')])\n"
            "print('LOGITS', tuple(model(ids).shape))\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT,
                            timeout=300)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_load_borrows_the_reference_with_a_notice_when_the_learners_code_is_blank():
    out = _load_in_subprocess({})
    assert "Note: your code cannot run the course model yet" in out and "Lesson 0" in out
    assert f"LOGITS (1, 4, {len(corpus.VOCAB)})" in out


def test_load_uses_the_selected_classes_when_they_work():
    out = _load_in_subprocess({"ATTNLAB_REFERENCE": "all"})
    assert "Loaded the course model" in out and "cannot run the course model" not in out
