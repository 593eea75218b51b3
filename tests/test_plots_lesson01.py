"""Lesson 01's figures (attnlab.plots.lesson01) and the data they draw: the bidirectional diagram,
the bottleneck figure, and the interactive alignment of a string the learner types."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from attnlab import data, plots, seq2seq  # noqa: E402
from attnlab.interactive import FigureView, text  # noqa: E402
from tests.cpu_timing import cpu_seconds  # noqa: E402
from tests.helpers import borrowed_reference  # noqa: E402


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


@pytest.fixture(scope="module")
def attention_model():
    # An untrained model is enough to draw: the figure shows whatever weights it has.
    reference = borrowed_reference("additive")
    next(reference)
    yield seq2seq.build_model("attention", seq2seq.Seq2SeqConfig(max_len=8))
    next(reference, None)  # back to the learner's module if it was in use


def texts(ax) -> list[str]:
    return [t.get_text() for t in ax.texts]


def test_the_diagram_draws_both_directions_of_the_encoder_and_c_from_their_last_states():
    fig = plots.encoder_decoder_diagram(source=("3", "1", "4", "1"), step=2)
    left, right = fig.axes
    for ax in (left, right):
        shown = texts(ax)
        for j in range(1, 5):
            assert f"→h{j}" in shown and f"←h{j}" in shown
    assert "c = [→h4 ; ←h1]: one fixed-length vector" in texts(left)
    assert "query: s1" in texts(right) and "α3=0.90" in texts(right)  # reversal: step 2 reads position 3
    assert plots.encoder_decoder_diagram is plots.lesson01.encoder_decoder_diagram


def test_bottleneck_figure_panels_and_line_styles():
    by_position = {"plain": {"greedy": [1.0, 0.5, 0.3], "teacher forcing": [1.0, 0.6, 0.7]},
                   "attention": {"greedy": [1.0, 1.0, 0.9]}}
    fig = plots.bottleneck_figure([4, 6], {"plain": [1.0, 0.8], "attention": [1.0, 1.0]}, by_position,
                                  position_length=3, steps=600)
    left, right = fig.axes
    assert left.get_title().startswith("(a)") and right.get_title() == "(b) Where the errors are, 3-digit sources"
    assert "source length" in left.get_xlabel() and "output position" in right.get_xlabel()
    styles = {line.get_label(): line.get_linestyle() for line in right.lines}
    assert styles["plain, teacher forcing"] == "--" and styles["plain, greedy"] == "-"
    colours = {line.get_label(): line.get_color() for line in right.lines}
    assert colours["plain, greedy"] == colours["plain, teacher forcing"] != colours["attention, greedy"]
    assert "600 training steps" in fig.get_suptitle()
    with pytest.raises(ValueError, match="need 3 positions"):
        plots.bottleneck_figure([4], {"plain": [1.0]}, {"plain": {"greedy": [1.0]}}, position_length=3, steps=1)


def test_batch_from_text_reverses_and_rejects_what_is_not_a_digit():
    batch = data.batch_from_text("3 1 4")
    assert data.to_text(batch.source[0]) == "3 1 4" and data.to_text(batch.target[0]) == "4 1 3"
    assert batch.mask.all() and batch.lengths.tolist() == [3]
    with pytest.raises(ValueError, match="only the digits 0 to 9 can be used, not 'a', 'x'"):
        data.batch_from_text("12ax")
    with pytest.raises(ValueError, match="at least one digit"):
        data.batch_from_text("  ")


def test_teacher_forcing_accuracy_scores_each_position_on_its_own(attention_model):
    batch = data.evaluation_set("reverse", [5], per_length=20)[5]
    greedy = seq2seq.accuracy_by_position(attention_model, batch)
    forced = seq2seq.accuracy_by_position(attention_model, batch, teacher_forcing=True)
    assert len(greedy) == len(forced) == 5 and greedy[0] == forced[0]  # the first step sees no earlier token
    logits, _ = attention_model(batch, teacher_forcing=True)
    expected = (logits.argmax(-1) == batch.target).double().mean(0).tolist()
    assert forced == pytest.approx(expected)


def test_the_interactive_alignment_redraws_for_a_new_string(attention_model):
    view = FigureView(lambda digits: plots.reversal_alignment(attention_model, digits),
                      {"digits": text("digits to reverse", "3141")}, "alignment")
    first = view.figure()
    (ax, _colorbar) = first.axes
    assert ax.get_title().startswith("Reversing 3141\nwrote ") and len(ax.get_yticklabels()) == 4
    assert ax.get_xlabel() and ax.get_ylabel()
    second = view.redraw(digits="271828182845")
    ax2 = second.axes[0]
    assert ax2.get_title().startswith("Reversing 271828182845") and len(ax2.get_xticklabels()) == 12
    assert "longer than any training string (8)" in ax2.get_title()
    assert view.redraw(digits="12a") is None and "only the digits" in view.error


def test_reversal_alignment_needs_a_trained_attention_model():
    with pytest.raises(ValueError, match="run the training cell"):
        plots.reversal_alignment(None, "123")


def test_every_figure_fits_the_notebook_and_a_string_too_long_to_fit_is_refused(attention_model):
    """968 px is the notebook's width in JupyterLab (tests/test_figures_readable.py); interactive
    figures are drawn at 90 dpi, the others at 100."""
    import io

    from PIL import Image

    def width(fig, dpi):
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png", dpi=dpi, bbox_inches="tight")
        return Image.open(buffer).size[0]

    by_position = {"without attention (fixed-length vector)": {"greedy": [0.5] * 16, "teacher forcing": [0.6] * 16},
                   "with additive attention": {"greedy": [0.9] * 16, "teacher forcing": [0.95] * 16}}
    by_length = {name: [0.9, 0.5] for name in by_position}
    assert width(plots.encoder_decoder_diagram(), 100) <= 968
    assert width(plots.bottleneck_figure([4, 16], by_length, by_position, position_length=16, steps=600), 100) <= 968
    longest = "7" * plots.lesson01.MAX_DIGITS
    assert width(plots.reversal_alignment(attention_model, longest), 90) <= 968
    with pytest.raises(ValueError, match=f"at most {plots.lesson01.MAX_DIGITS} digits .*got {len(longest) + 1}"):
        plots.reversal_alignment(attention_model, longest + "1")


def test_the_interactive_alignment_is_quick(attention_model):
    seconds = cpu_seconds(plots.reversal_alignment, attention_model, "31415926535")[1]
    assert seconds < 2.0  # CPU time, so other programs do not count: well under a second
