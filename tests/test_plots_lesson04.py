"""The figures of lesson 04 draw what they are given, with titles and labelled axes, and the
interactive head viewer redraws when a control moves (built as the notebook builds it, from a
small stand-in model)."""

from __future__ import annotations

import io

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from attnlab import plots  # noqa: E402
from attnlab.interactive import FigureView, checkbox, choice, slider  # noqa: E402


def png(fig) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=40)
    plt.close(fig)
    return buffer.getvalue()


def labelled(fig) -> None:
    titled = [ax for ax in fig.axes if ax.get_title()]
    assert titled or fig._suptitle is not None, "the figure has no title"
    for ax in titled:
        assert ax.get_xlabel() or ax.get_ylabel() or not ax.get_xticks().size, f"unlabelled axes {ax.get_title()!r}"


def test_heads_diagram_shows_each_head_and_rejects_bad_sizes():
    fig = plots.heads_diagram(12, 3)
    labelled(fig)
    texts = " ".join(t.get_text() for t in fig.axes[0].texts)
    assert "head 2" in texts and "features 8–11" in texts
    plt.close(fig)
    with pytest.raises(ValueError, match="not divisible"):
        plots.heads_diagram(10, 3)


def log_labels(ax, axis="y") -> list[str]:
    """The labelled major ticks of a logarithmic axis, as the figure draws them."""
    fig = ax.figure
    fig.canvas.draw()
    low, high = sorted(getattr(ax, f"get_{axis}lim")())
    target = ax.yaxis if axis == "y" else ax.xaxis
    return [t.label1.get_text() for t in target.get_major_ticks()
            if t.label1.get_visible() and t.label1.get_text() and low <= t.get_loc() <= high]


def test_two_facts_figure_draws_bands_over_seeds_and_checks_lengths():
    curves = {"1 head": ([0, 50, 100], [[0, 0.1, 0.2], [0, 0.2, 0.3], [0, 0.1, 0.4]]),
              "2 heads": ([0, 50], [[0, 1], [0, 0.9], [0, 1]])}
    fig = plots.two_facts_figure(curves, {"1 head": [0, .5, 0, .45, 0]}, range(5), (1, 3))
    labelled(fig)
    left = fig.axes[0]
    assert [line.get_label() for line in left.get_lines()] == ["1 head (mean of 3 seeds)", "2 heads (mean of 3 seeds)"]
    assert list(left.get_lines()[0].get_ydata()) == pytest.approx([0, 0.4 / 3, 0.3])
    assert len(left.collections) == 2  # one band per model
    assert fig.get_size_inches()[0] <= 9.6
    plt.close(fig)
    with pytest.raises(ValueError, match="accuracies for 2 steps"):
        plots.two_facts_figure({"x": ([0, 1], [[0, 1, 2]])}, {}, range(3), (1, 2))


def test_kv_decode_and_pruning_figures_fit_and_label_their_log_axes():
    fig = plots.kv_cache_size_figure([4096, 32768], {"GQA": [0.14, 1.1], "MHA": [1.1, 9.0]}, model="M",
                                     reference=("weights", 5.8))
    labelled(fig)
    assert len(log_labels(fig.axes[0])) >= 3
    plt.close(fig)
    series = {"MHA": [4.1, 6.6, 25.0], "GQA": [4.3, 6.6, 28.4]}
    narrow = {"MHA": [1.0, 1.1, 1.2], "GQA": [1.05, 1.1, 1.15]}
    fig = plots.decode_time_figure([256, 2048, 16384], series, narrow, series, title="t")
    assert len([ax for ax in fig.axes if ax.get_yscale() == "log"]) == 3
    labelled(fig)
    for ax in fig.axes:
        assert len(log_labels(ax)) >= 3 and log_labels(ax, "x") == ["256", "2,048", "16,384"]
    assert fig.get_size_inches()[0] <= 9.6
    plt.close(fig)
    fig = plots.pruning_figure({"a": [0, 0.5, 1]}, {"a": [2.0, 2.1, 4.0]}, full_loss=2.0, title="p")
    labelled(fig)
    plt.close(fig)


def test_gqa_uptraining_figure_shows_losses_and_caches():
    fig = plots.gqa_uptraining_figure({"2": {"converted": 2.1, "fine-tuned": 1.5}, "1": {"converted": 3.3, "fine-tuned": 1.6}},
                                      {"4": 32, "2": 16, "1": 8}, full_loss=1.33, title="up")
    labelled(fig)
    losses, caches = fig.axes
    assert len(losses.patches) == 4 and len(caches.patches) == 3
    assert [t.get_text() for t in caches.texts] == ["32", "16", "8"]
    plt.close(fig)


def test_head_grid_draws_every_head_and_checks_shapes():
    weights = torch.softmax(torch.randn(2, 3, 4, 4), -1)
    fig = plots.head_grid(weights, list("abcd"), title="grid", names={(1, 2): "copies"})
    titles = [ax.get_title() for ax in fig.axes if ax.get_title()]
    assert "layer 1, head 2\ncopies" in titles and len([t for t in titles if t.startswith("layer")]) == 6
    panels = [ax for ax in fig.axes if ax.get_title().startswith("layer")]
    assert all((ax.get_xlabel(), ax.get_ylabel()) == ("key", "query") for ax in panels)  # positions, counting from 0
    assert panels[0].get_xticks().tolist() == [0]
    plt.close(fig)
    fig = plots.head_grid(torch.softmax(torch.randn(1, 1, 32, 32), -1), [str(i) for i in range(32)], title="long")
    assert fig.axes[0].get_xticks().tolist() == [0, 8, 16, 24]   # about four ticks, multiples of 4
    plt.close(fig)
    with pytest.raises(ValueError, match="n_layers, n_heads"):
        plots.head_grid(weights[0], list("abcd"), title="bad")


class StandIn:
    """A two-layer, two-head 'model': weights depend on the mask, the loss counts the pruned heads."""

    n_layers, n_heads = 2, 2

    def weights_of(self, tokens, mask):
        n = len(tokens)
        base = torch.eye(n).roll(-1, 1).tril() + 0.1  # mostly the previous token
        w = base / base.sum(-1, keepdim=True)
        return torch.stack([torch.stack([w * m + (1 - m) * torch.full((n, n), 1 / n) for m in row]) for row in mask])

    def loss_of(self, mask):
        return 2.0 + float((1 - mask).sum())


def test_head_viewer_redraws_and_prunes_the_heads_shown_so_far():
    model = StandIn()
    sentences = {"one": (torch.arange(5), list("abcde")), "two": (torch.arange(3), list("xyz"))}
    draw = plots.head_viewer(model.weights_of, model.loss_of, sentences, 2, 2, roles={(0, 1): "previous token"})
    view = FigureView(draw, {"layer": slider("layer", 0, 1, value=0), "head": slider("head", 0, 1, value=1),
                             "sentence": choice("passage", list(sentences)),
                             "prune": checkbox("prune the heads shown so far")}, "Heads")
    first = png(view.figure())
    assert view.error == "" and draw.shown == [(0, 1)]
    moved = view.redraw(head=0)
    assert draw.shown == [(0, 1), (0, 0)]
    assert png(moved) != first
    pruned = view.redraw(prune=True)
    label = pruned.axes[0].get_xlabel()
    assert "heads pruned: L0H1, L0H0" in label and "validation loss 4.000" in label and "(all heads: 2.000)" in label
    plt.close(pruned)
    other = view.redraw(sentence="two", prune=False)
    assert [t.get_text() for t in other.axes[0].get_xticklabels()] == list("xyz")
    assert "heads pruned: none" in other.axes[0].get_xlabel()
    plt.close(other)
    assert view.redraw(layer=1) is not None and view.redraws == 4
    with pytest.raises(ValueError, match="layer must be"):
        draw(layer=5, head=0, sentence="one", prune=False)


def test_head_scores_figure_writes_every_score_and_its_baseline():
    scores = {"previous_token": torch.tensor([[0.1, 0.4], [0.05, 0.2]]), "induction": torch.zeros(2, 2)}
    fig = plots.head_scores_figure(scores, {"previous_token": 0.035, "induction": 0.024}, title="scores")
    labelled(fig)
    assert len(fig.axes) == 2
    first = fig.axes[0]
    assert [t.get_text() for t in first.texts] == ["0.10", "0.40", "0.05", "0.20"]
    assert "previous token" in first.get_title() and "attending evenly: 0.035" in first.get_title()
    assert (first.get_xlabel(), first.get_ylabel()) == ("head", "layer")
    plt.close(fig)
    with pytest.raises(ValueError, match="n_layers, n_heads"):
        plots.head_scores_figure({"x": torch.zeros(3)}, {"x": 0.1}, title="bad")


def test_induction_figure_draws_its_four_panels():
    copied = {"all heads": 0.99, "induction heads masked": 0.15, "control": 0.98}
    weights = torch.eye(3, 4).roll(1, 1)
    fig = plots.induction_figure(copied, weights, [":", "a", "b"], [":", "a", "b", "c"], head="L2H3",
                                 removed_fraction=[0, 0.5, 1], copied_when_pruned=[0.99, 0.5, 0.0],
                                 loss_when_pruned=[1.2, 1.5, 3.5], title="circuit")
    labelled(fig)
    bars, heatmap, pruning = fig.axes[:3]
    assert [t.get_text() for t in bars.get_yticklabels()] == list(copied)
    assert [p.get_facecolor()[:3] for p in bars.patches][1] != [p.get_facecolor()[:3] for p in bars.patches][2]
    assert "L2H3" in heatmap.get_title() and [t.get_text() for t in heatmap.get_xticklabels()] == [":", "a", "b", "c"]
    assert "fraction of heads removed" in pruning.get_xlabel()
    assert any(ax.get_ylabel().startswith("validation loss") for ax in fig.axes)  # the twin axis
    assert fig._suptitle.get_text() == "circuit"
    plt.close(fig)


def test_induction_test_figure_shows_each_cases_scores_and_halves():
    scores = {"random tokens": torch.zeros(2, 3), "lists": torch.tensor([[0.1, 0.2, 0.3], [0.0, 0.9, 0.0]])}
    halves = {"random tokens": (5.0, 5.1), "lists": (2.2, 0.3)}
    fig = plots.induction_test_figure(scores, halves, title="test")
    labelled(fig)
    heat = fig.axes[1]
    assert heat.images[0].get_array()[1, 1] == pytest.approx(0.9) and "(b) lists" in heat.get_title()
    assert "0.90" in [t.get_text() for t in heat.texts]
    bars = next(ax for ax in fig.axes if "each half" in ax.get_title())
    heights = sorted(round(p.get_height(), 2) for p in bars.patches)
    assert heights == [0.3, 2.2, 5.0, 5.1]
    assert [t.get_text() for t in bars.get_xticklabels()] == ["random tokens", "lists"]
    png(fig)


def _record(n_points=5, every=20):
    points = []
    for k in range(n_points):
        grid = [[0.1 * k if (l, h) == (2, 3) else 0.01 for h in range(4)] for l in range(4)]
        probe = {"first_half_loss": 3.0, "second_half_loss": 3.0 - 0.5 * k, "induction": grid, "previous_token": grid}
        points.append({"step": k * every, "train_loss": None if k == 0 else 5.0 - k,
                       "random": dict(probe), "lists": dict(probe, copied=0.2 * k),
                       "validation": {"loss": 5.0 - k, "in_context_score": -0.1 * k, "induction": grid,
                                      "previous_token": grid}})
    return {"points": points, "phase": {"every": every}}


def test_phase_change_figure_plots_the_record_against_step():
    record = _record()
    fig = plots.phase_change_figure(record, induction_heads=[(2, 3)], previous_heads=[(1, 1)], span=(20, 60),
                                    title="phase")
    labelled(fig)
    loss_ax, halves_ax, ind_ax, prev_ax = fig.axes[:4]
    induction = next(line for line in ind_ax.lines if line.get_label() == "L2H3")
    assert list(induction.get_xdata()) == [0, 20, 40, 60, 80]
    assert list(induction.get_ydata()) == pytest.approx([0, 0.1, 0.2, 0.3, 0.4])
    assert len(ind_ax.lines) == 16 + 1                          # every head, and the legend's grey line
    second = [line for line in halves_ax.lines if line.get_label() == "random lists: second half"]
    assert list(second[0].get_ydata()) == pytest.approx([3.0, 2.5, 2.0, 1.5, 1.0])
    assert len(loss_ax.lines[0].get_xdata()) == 4                # no training loss before the first step
    assert all(ax.patches for ax in (loss_ax, halves_ax, ind_ax, prev_ax))   # the formation span, shaded
    png(fig)
