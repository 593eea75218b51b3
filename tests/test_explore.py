"""attnlab.explore without a browser: the weights it shows are the model's, choosing a word (from
the dropdown or by clicking it) redraws once with that word's row in every head, the head and
model selectors work, and the static twin carries the figure. The browser tests choose a word in
JupyterLab (tests/browser/test_figures.py)."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

import attnlab  # noqa: E402
from attnlab import corpus, explore  # noqa: E402

WORDS = "anna ross wrote a list : kite pie saw . anna ross read the list : kite pie".split()


@pytest.fixture(scope="module")
def model():
    names = ("attention", "masking", "positions", "multihead", "feedforward", "stacks")
    before = {name: attnlab.source_of(name) == "reference" for name in names}
    attnlab.use_reference(*names, quiet=True)
    from attnlab import stacks

    torch.manual_seed(0)
    built = stacks.DecoderOnly(len(corpus.VOCAB), d_model=16, n_layers=2, n_heads=2, d_ff=32).eval()
    yield built
    for name in names:
        if not before[name]:
            attnlab.use_own(name)


def test_attention_of_gives_the_models_weights(model):
    w = explore.attention_of(model, WORDS)
    assert w.shape == (2, 2, len(WORDS), len(WORDS))
    np.testing.assert_allclose(w.sum(-1), 1.0, atol=1e-5)
    assert np.allclose(np.triu(w, k=1), 0.0)                      # a decoder: nothing on later words
    with torch.no_grad():
        _, weights = model(torch.tensor([corpus.TOKENIZER.encode(WORDS)]), return_weights=True)
    np.testing.assert_allclose(w[1, 0], weights[1][0, 0].double().numpy())


def test_a_model_without_weights_is_refused():
    class Plain(torch.nn.Module):
        def forward(self, tokens, return_weights=False):
            return tokens.float()
    with pytest.raises(TypeError, match="return_weights=True"):
        explore.attention_of(Plain(), WORDS)


def test_the_figure_shows_the_chosen_words_row_in_every_head_and_the_chosen_heads_pattern(model):
    w = explore.attention_of(model, WORDS)
    token = 15
    fig = explore.explorer_figure(w, WORDS, token=token, head=(1, 0), title="t", names={(1, 0): "induction"})
    strip, every, pattern = fig.axes[:3]
    shown = every.images[0].get_array()
    assert shown.shape == (4, len(WORDS))
    np.testing.assert_allclose(shown[:, :token + 1], w[:, :, token, :token + 1].reshape(4, -1))
    assert np.isnan(np.ma.filled(shown[:, token + 1:], np.nan)).all()   # later words: blank
    assert [t.get_text() for t in every.get_yticklabels()] == ["L0H0", "L0H1", "L1H0", "L1H1"]
    framed = [p for p in every.patches if p.get_edgecolor()[0] > 0.5]
    assert framed and framed[0].get_y() == pytest.approx(2 - 0.5)         # L1H0's row is framed
    np.testing.assert_allclose(np.ma.filled(pattern.images[0].get_array(), 0.0), w[1, 0])
    assert "L1H0 (induction)" in strip.get_title() and "':'" in strip.get_title()
    words = [t.get_text() for t in strip.texts]
    assert words == WORDS
    for ax in (every, pattern):
        assert ax.get_xlabel() and ax.get_ylabel() and ax.get_title()
    plt.close(fig)


def test_the_view_redraws_for_a_word_a_head_and_a_model(model, capsys):
    other = type(model)(len(corpus.VOCAB), d_model=16, n_layers=2, n_heads=2, d_ff=32).eval()
    view = explore.attention_explorer({"first": model, "second": other}, " ".join(WORDS), title="explorer",
                                      token=5, head=(1, 1))
    explorer = view.explorer
    assert view.values == {"token": "5: :", "head": "L1H1", "model": "first"}
    assert explorer.head_of("L1H0 (induction)") == (1, 0) and explorer.token_index("12: the") == 12
    with pytest.raises(ValueError, match="no head L2H0"):
        explorer.head_of("L2H0")
    fig = view.redraw(token="16: kite")
    assert "'kite' (position 16)" in fig.axes[0].get_title()
    plt.close(fig)
    fig = view.redraw(model="second")
    np.testing.assert_allclose(np.ma.filled(fig.axes[2].images[0].get_array(), 0.0),
                               explore.attention_of(other, WORDS)[1, 1])
    plt.close(fig)
    assert "word = 16: kite" in view.caption() and view.redraws == 2


def test_choosing_a_word_by_clicking_it_redraws_once(model, monkeypatch):
    shown = []
    monkeypatch.setattr("IPython.display.display", lambda bundle, raw=False: shown.append(bundle))
    view = explore.attention_explorer(model, WORDS, title="clicks", token=3)   # outside IPython: no widgets yet
    plt.close("all")
    explore._show(view, view.explorer)                                # what a notebook shows
    assert len(shown) == 1 and "image/png" in shown[0] and "application/vnd.jupyter.widget-view+json" in shown[0]
    assert "shown at word = 3: a, head = L0H0" in shown[0]["text/plain"]   # the static twin and its caption
    before = view.widgets["picture"].value
    view.widgets["words"][16].click()                               # the word "kite", read back
    assert view.widgets["inputs"]["token"].value == "16: kite" and view.redraws == 1
    assert view.widgets["picture"].value != before and "16: kite" in view.widgets["picture"].value
    assert plt.get_fignums() == []
    view.widgets["inputs"]["head"].value = "L0H1"
    assert view.redraws == 2 and "L0H1" in view.caption()
    assert explore.CSS_CLASS in view.widgets["box"]._dom_classes
    # The browser tests change the first control of the first row: the word dropdown.
    first_row = view.widgets["box"].children[1]
    assert first_row.children[0] is view.widgets["inputs"]["token"]
