"""attnlab.plots draws labelled figures (Agg backend, nothing shown)."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from attnlab import plots  # noqa: E402


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def texts(fig) -> list[str]:
    return [t.get_text() for ax in fig.axes for t in ax.texts]


@pytest.mark.parametrize("n_q, n_k", [(5, 5), (3, 7)])
def test_attention_heatmap_is_labelled_and_annotated(n_q, n_k):
    weights = torch.softmax(torch.randn(n_q, n_k), dim=-1)
    fig = plots.attention_heatmap(weights, [f"q{i}" for i in range(n_q)],
                                  [f"k{j}" for j in range(n_k)], title="Toy weights")
    main, colorbar = fig.axes
    assert main.get_title() == "Toy weights"
    assert main.get_xlabel() == "key (attended to)"
    assert main.get_ylabel() == "query (attending)"
    assert colorbar.get_ylabel() == "attention weight"
    assert len(main.texts) == n_q * n_k
    assert main.texts[0].get_text() == f"{weights[0, 0].item():.2f}"
    assert [t.get_text() for t in main.get_xticklabels()] == [f"k{j}" for j in range(n_k)]


def test_attention_heatmap_into_given_axes_and_without_annotations():
    fig, (left, right) = plt.subplots(1, 2)
    returned = plots.attention_heatmap(np.eye(3), list("abc"), list("xyz"), ax=right,
                                       annotate=False)
    assert returned is fig
    assert right.get_title() == "Attention weights" and not right.texts and not left.images


def test_attention_heatmap_rejects_bad_shapes():
    with pytest.raises(ValueError, match="one \\(n_q, n_k\\) matrix"):
        plots.attention_heatmap(np.ones((2, 3, 3)), list("abc"), list("abc"))
    with pytest.raises(ValueError, match="2 query labels"):
        plots.attention_heatmap(np.ones((3, 3)), list("ab"), list("abc"))


def test_line_plot_mean_and_band():
    x = [4, 16, 64]
    runs = np.array([[1.0, 2.0, 3.0], [3.0, 4.0, 5.0]])
    fig = plots.line_plot(x, {"runs": runs, "single": [1, 1, 1]}, title="T", xlabel="d_k",
                          ylabel="value", xscale="log")
    (ax,) = fig.axes
    assert (ax.get_title(), ax.get_xlabel(), ax.get_ylabel()) == ("T", "d_k", "value")
    assert ax.get_xscale() == "log"
    np.testing.assert_allclose(ax.lines[0].get_ydata(), [2.0, 3.0, 4.0])
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels == ["runs (mean of 2 runs)", "single"]


def test_sqrt_dk_figure_has_two_labelled_log_panels():
    d_k = [4, 16, 64, 256]
    rng = np.random.default_rng(0)
    series = {"scaled by 1/√d_k": rng.random((3, 4)), "unscaled": rng.random((3, 4))}
    fig = plots.sqrt_dk_figure(d_k, series, {k: v + 0.1 for k, v in series.items()}, n_keys=16)
    left, right = fig.axes
    assert fig.get_suptitle()
    for ax in (left, right):
        assert ax.get_title() and ax.get_ylabel() and "d_k" in ax.get_xlabel()
        assert ax.get_xscale() == "log"
        assert len(ax.get_legend().get_texts()) == 2
    assert right.get_yscale() == "log"
    assert "16 keys" in left.get_title()


def test_qkv_diagram_shows_the_computed_trace():
    fig = plots.qkv_diagram()
    (ax,) = fig.axes
    assert ax.get_title() == "One query attending over three keys"
    shown = " ".join(texts(fig))
    for expected in ("score 3", "weight 0.84", "weight 0.11", "weight 0.04", "value 30",
                     "output ≈ 12.0"):
        assert expected in shown


def test_qkv_diagram_other_inputs_and_errors():
    fig = plots.qkv_diagram([0.0, 0.0], [1.0, 3.0], key_labels=["a", "b"])
    shown = " ".join(texts(fig))
    assert "weight 0.50" in shown and "output ≈ 2.0" in shown and "over 2 keys" in fig.axes[0].get_title()
    with pytest.raises(ValueError, match="one score and one value per key"):
        plots.qkv_diagram([1.0, 2.0], [1.0])
