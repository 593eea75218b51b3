"""The ownership manifest: the one place that says which lesson owns what.

Every tool reads it: the stub generator (to name the lesson in a stub's error), the reference
switch (to name the lesson in its notice), ``python -m autograder build`` (one nbgrader assignment
per graded lesson, ``Autograde.exclude_overwriting``) and the tests.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Lesson:
    """One lesson of the course.

    number:   two-digit string, also the prefix of the notebook name ("02").
    slug:     the nbgrader assignment name ("02_attention").
    title:    the lesson's title as learners see it.
    notebook: file name of the notebook, the same in solutions/ and notebooks/.
    modules:  exercise modules of ``attnlab`` this lesson owns (learners fill them in).
    points:   total points of the lesson's graded cells; ``build`` checks the notebook agrees.
    budget_s: seconds the solution notebook may take to execute top to bottom on a 2-core CPU.
    builds_on: exercise modules of EARLIER lessons that this lesson's module or notebook uses (its
              set-up cell, ``attnlab.start_lesson``, makes sure they run; a test derives them
              from the sources).
    """

    number: str
    slug: str
    title: str
    notebook: str
    modules: tuple[str, ...] = ()
    points: float = 0.0
    budget_s: float = 60.0
    builds_on: tuple[str, ...] = ()

    @property
    def graded(self) -> bool:
        return self.points > 0


LESSONS: tuple[Lesson, ...] = (
    Lesson("00", "00_start_here", "Start here", "00_start_here.ipynb", budget_s=30.0),
    Lesson(
        "01",
        "01_bahdanau",
        "Bahdanau attention and the fixed-length bottleneck",
        "01_bahdanau_attention.ipynb",
        modules=("additive",),
        points=14.0,
        budget_s=120.0,
    ),
    Lesson(
        "02",
        "02_attention",
        "Scaled dot-product attention",
        "02_scaled_dot_product_attention.ipynb",
        modules=("attention",),
        points=14.0,
        budget_s=60.0,
    ),
    Lesson(
        "03",
        "03_masking",
        "Masking: causal, padding, packed documents, and rows with nothing to see",
        "03_masking.ipynb",
        modules=("masking",),
        points=18.0,
        budget_s=60.0,
        builds_on=("attention",),
    ),
    Lesson(
        "04",
        "04_multihead",
        "Multi-head and grouped-query attention, head pruning and the KV cache",
        "04_multi_head_attention.ipynb",
        modules=("multihead",),
        points=17.0,
        budget_s=120.0,
        builds_on=("attention", "masking"),
    ),
    Lesson(
        "05",
        "05_positions",
        "Word order: permutation equivariance, sinusoidal encodings and RoPE",
        "05_word_order.ipynb",
        modules=("positions",),
        points=14.0,
        budget_s=90.0,
        builds_on=("attention", "masking", "multihead"),
    ),
    Lesson(
        "06",
        "06_feedforward",
        "The feed-forward block as memory, residual connections and normalization",
        "06_feed_forward.ipynb",
        modules=("feedforward",),
        points=14.0,
        budget_s=150.0,
        builds_on=("attention", "masking", "multihead", "positions"),
    ),
    Lesson(
        "07",
        "07_stacks",
        "Three ways to stack: encoder-only, decoder-only, encoder-decoder",
        "07_three_ways_to_stack.ipynb",
        modules=("stacks",),
        points=22.0,
        budget_s=180.0,
        builds_on=("additive", "attention", "masking", "multihead", "positions", "feedforward"),
    ),
    Lesson(
        "08",
        "08_cost",
        "The quadratic cost, tokens that are not words, and the limits of the transformer",
        "08_quadratic_cost.ipynb",
        modules=("cost",),
        points=16.0,
        budget_s=120.0,
        builds_on=("attention", "masking", "multihead", "positions"),
    ),
    Lesson(
        "09",
        "09_flash",
        "FlashAttention, from online softmax to a Triton kernel",
        "09_flash_attention.ipynb",
        modules=("flash",),
        points=18.0,
        budget_s=180.0,
        builds_on=("cost",),
    ),
)


def lesson(key: str) -> Lesson:
    """Look a lesson up by number ("02"), slug ("02_attention") or owned module ("attention")."""
    for item in LESSONS:
        if key in (item.number, item.slug) or key in item.modules:
            return item
    known = ", ".join(item.slug for item in LESSONS)
    raise KeyError(f"no lesson {key!r} in the course manifest; known lessons: {known}")


def exercise_modules() -> tuple[str, ...]:
    """Names of all exercise modules (``attnlab.<name>``), in lesson order."""
    return tuple(name for item in LESSONS for name in item.modules)


def owner(module: str) -> Lesson:
    """The lesson that owns exercise module ``module``."""
    for item in LESSONS:
        if module in item.modules:
            return item
    raise KeyError(
        f"{module!r} is not an exercise module of attnlab; exercise modules: "
        + ", ".join(exercise_modules())
    )
