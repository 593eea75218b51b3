"""Recording the phase change (attnlab.zoo.phase): measuring the course model while it trains does
not change its training (the same losses and weights, bit for bit), the record holds a point every
``every`` steps, its checkpoints round-trip through float16, ``formation`` reads the rise of the
strongest induction head, ``python -m attnlab.zoo phase`` refuses to write a record into the
package unless the retrained weights are the shipped ones, and the shipped record's first points
come out again from a short retraining."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

import attnlab
from attnlab import zoo
from attnlab.zoo import phase
from attnlab.zoo.loading import CHAIN

pytestmark = pytest.mark.timeout(900)
STEPS = 40


@pytest.fixture(scope="module")
def references():
    before = {name: attnlab.source_of(name) == "reference" for name in CHAIN}
    attnlab.use_reference(*CHAIN, quiet=True)
    yield
    for name in CHAIN:
        if not before[name]:
            attnlab.use_own(name)


@pytest.fixture(scope="module")
def config():
    return zoo.ZooConfig.from_dict(zoo.metadata()["config"])


@pytest.fixture(scope="module")
def recorded(references, config):
    return phase.record_phase_change(config, stop_after=STEPS, progress=False)


def test_measuring_while_training_changes_nothing(recorded, config):
    model, record, _ = recorded
    plain, run = zoo.train_course_model(config, stop_after=STEPS, progress=False)
    assert zoo.training.state_sha256(model.state_dict()) == zoo.training.state_sha256(plain.state_dict())
    every = record["phase"]["every"]
    assert [p["step"] for p in record["points"]] == list(range(0, STEPS + 1, every))
    assert record["points"][0]["train_loss"] is None
    for point in record["points"][1:]:
        window = run["losses"][point["step"] - every:point["step"]]
        assert point["train_loss"] == pytest.approx(sum(window) / len(window), abs=1e-5)
    assert record["weights_sha256"] == zoo.training.state_sha256(plain.state_dict())


def _numbers(value):
    """Every number of a record's point, flattened in a fixed order."""
    if isinstance(value, dict):
        return [x for key in sorted(value) for x in _numbers(value[key])]
    if isinstance(value, list):
        return [x for item in value for x in _numbers(item)]
    return [] if value is None else [float(value)]


def test_a_short_retraining_reproduces_the_shipped_record(recorded):
    """The first 40 steps retrained here give the shipped record's first points: every loss, score
    and share (to 1e-3, which rounding in another processor's sums stays within early on; on the
    machine that made the record they came out equal), and the same probes."""
    _, record, _ = recorded
    shipped = phase.load_record()
    assert shipped["probes_sha256"] == record["probes_sha256"]
    assert phase.PhaseConfig.from_dict(shipped["phase"]) == phase.PhaseConfig.from_dict(record["phase"])
    for mine, theirs in zip(record["points"], shipped["points"]):
        assert mine["step"] == theirs["step"]
        a, b = _numbers(mine), _numbers(theirs)
        assert len(a) == len(b) and max(abs(x - y) for x, y in zip(a, b)) <= 1e-3, mine["step"]
    assert len(record["points"]) == STEPS // record["phase"]["every"] + 1


def test_a_point_holds_every_measurement(recorded):
    _, record, _ = recorded
    point = record["points"][-1]
    for probe in ("random", "lists"):
        assert {"first_half_loss", "second_half_loss", "induction", "previous_token"} <= set(point[probe])
        assert len(point[probe]["induction"]) == 4 and len(point[probe]["induction"][0]) == 4
    assert 0 <= point["lists"]["copied"] <= 1
    assert set(point["validation"]) == {"loss", "in_context_score", "induction", "previous_token"}
    assert record["probes_sha256"] == zoo.training.state_sha256(phase.probes(phase.PhaseConfig()))


def test_checkpoints_round_trip_in_float16(recorded, config, tmp_path):
    _, record, states = recorded
    assert sorted(states) == [p["step"] for p in record["points"]]
    chosen = {step: {k: v.to(torch.float16) for k, v in states[step].items() if k != "lm_head.weight"}
              for step in (20, 40)}
    paths = tmp_path / "phase_change.json", tmp_path / "phase_checkpoints.pt"
    phase.save_record(record, chosen, *paths)
    loaded = phase.load_record(paths[0])
    assert loaded["checkpoints"] == [20, 40] and loaded["points"] == record["points"]
    model = phase.checkpoint_model(40, paths[1], record=loaded)
    for name, value in model.state_dict().items():         # float16 rounding, the tied head restored
        assert torch.allclose(value, states[40][name], rtol=1e-3, atol=1e-4), name
    windows = zoo.validation_windows(config)[:8]
    measured = phase.measure(model, phase.probes(), windows)
    recorded_at_40 = record["points"][-1]["lists"]
    assert measured["lists"]["second_half_loss"] == pytest.approx(recorded_at_40["second_half_loss"], abs=0.02)


def test_save_record_refuses_more_than_5_mb(recorded, tmp_path):
    _, record, states = recorded
    too_many = {step: states[step] for step in sorted(states)}    # float32, three of them: 10 MB
    with pytest.raises(ValueError, match="more than 5 MB"):
        phase.save_record(record, too_many, tmp_path / "r.json", tmp_path / "c.pt")
    assert not (tmp_path / "r.json").exists()


def test_formation_reads_the_rise_of_the_strongest_induction_head():
    def grid(value):
        return [[value if (layer, head) == (2, 3) else 0.01 for head in range(4)] for layer in range(4)]
    curve = [0.05, 0.05, 0.06, 0.1, 0.3, 0.4, 0.45, 0.45]
    record = {"phase": {"checkpoint_fractions": [0.2, 0.8]},
              "points": [{"step": 20 * i, "lists": {"induction": grid(v)}} for i, v in enumerate(curve)]}
    found = phase.formation(record)
    assert found["head"] == (2, 3) and found["start"] == 0.05 and found["end"] == 0.45
    assert found["steps"] == {0.2: 80, 0.8: 100}        # 0.05 + 0.2 * 0.4 = 0.13, 0.05 + 0.8 * 0.4 = 0.37


def test_the_checkpoints_bracket_the_stretch_in_which_copying_was_learned():
    copied = [0.0, 0.1, 0.3, 0.55, 0.7, 0.9, 0.96, 0.99]
    record = {"points": [{"step": 20 * i, "lists": {"copied": c}} for i, c in enumerate(copied)]}
    assert phase.copying_stretch(record) == (60, 120)    # the last step below 60%, the first at 95%
    states = {20 * i: {"w": torch.full((2,), float(i)), "lm_head.weight": torch.zeros(2)} for i in range(len(copied))}
    chosen = phase.checkpoint_states(record, states)
    assert sorted(chosen) == [60, 120] and chosen[60]["w"].dtype == torch.float16 and "lm_head.weight" not in chosen[60]
    assert phase.copying_stretch({"points": record["points"][:5]}) is None    # never reached 95%


def test_the_command_writes_nothing_into_the_package_for_other_weights(monkeypatch, recorded, capsys):
    from attnlab.zoo import __main__ as command

    _, record, states = recorded
    monkeypatch.setattr(command.phase, "record_phase_change",
                        lambda config: (None, {**record, "weights_sha256": "0" * 64}, states))
    monkeypatch.setattr(command.phase, "save_record", lambda *args: pytest.fail("wrote a record"))
    assert command.record_phase(None, None) == 1
    out = capsys.readouterr().out
    assert "DIFFERENT from the shipped course model's" in out and "not written" in out


def test_other_weights_writes_a_record_that_says_it_describes_a_retrain(monkeypatch, recorded, tmp_path, capsys):
    from attnlab.zoo import __main__ as command

    _, record, states = recorded
    monkeypatch.setattr(command.phase, "record_phase_change",
                        lambda config: (None, {**record, "weights_sha256": "0" * 64}, states))
    monkeypatch.setattr(command.phase, "RECORD", tmp_path / "phase_change.json")
    monkeypatch.setattr(command.phase, "CHECKPOINTS", tmp_path / "phase_checkpoints.pt")
    assert command.record_phase(None, None, other_weights=True) == 0
    written = phase.load_record(tmp_path / "phase_change.json")
    assert written["matches_course_model"] is False and written["weights_sha256"] == "0" * 64
    assert written["course_model_sha256"] == zoo.metadata()["weights_sha256"]
    assert "a record of a retrain whose weights differ" in capsys.readouterr().out


def test_the_settings_survive_json():
    settings = replace(phase.PhaseConfig(), every=10)
    import dataclasses
    import json

    assert phase.PhaseConfig.from_dict(json.loads(json.dumps(dataclasses.asdict(settings)))) == settings
