"""The visible checks of lesson 04 pass on the reference and fail, with the right diagnostic, on
deliberately broken versions of split_heads, merge_heads, repeat_kv, MultiHeadAttention, KVCache
and kv_cache_bytes."""

from __future__ import annotations

import pytest
import torch

import attnlab
from attnlab import checks
from tests.helpers import ROOT, fails, load_stub


@pytest.fixture(scope="module")
def ref():
    names = ("multihead", "masking", "attention", "positions")  # attention: masking's softmax
    before = {name: attnlab.source_of(name) == "reference" for name in names}
    attnlab.use_reference(*names, quiet=True)
    import attnlab.multihead as module

    yield module
    for name in names:
        if not before[name]:
            attnlab.use_own(name)


def test_all_checks_pass_on_the_reference(ref, capsys):
    checks.check_split_heads(ref.split_heads)
    checks.check_merge_heads(ref.merge_heads)
    checks.check_repeat_kv(ref.repeat_kv)
    checks.check_multi_head_attention(ref.MultiHeadAttention)
    checks.check_kv_cache(ref.KVCache, ref.MultiHeadAttention)
    checks.check_kv_cache_bytes(ref.kv_cache_bytes)
    assert capsys.readouterr().out.strip().splitlines() == [
        "✓ split_heads: 5 checks passed",
        "✓ merge_heads: 5 checks passed",
        "✓ repeat_kv: 6 checks passed",
        "✓ MultiHeadAttention: 12 checks passed",
        "✓ KVCache: 7 checks passed",
        "✓ kv_cache_bytes: 4 checks passed",
    ]


def test_stub_errors_pass_through_unchanged():
    stub = load_stub("multihead")
    for check, args in [(checks.check_split_heads, (stub.split_heads,)), (checks.check_merge_heads, (stub.merge_heads,)),
                        (checks.check_repeat_kv, (stub.repeat_kv,)),
                        (checks.check_multi_head_attention, (stub.MultiHeadAttention,)),
                        (checks.check_kv_cache, (stub.KVCache, stub.MultiHeadAttention)),
                        (checks.check_kv_cache_bytes, (stub.kv_cache_bytes,))]:
        with pytest.raises(NotImplementedError, match="Lesson 04"):
            check(*args)


# ------------------------------------------------------------------ split, merge, repeat


def test_split_in_one_reshape_is_explained():
    def split(x, n_heads):
        *lead, n, width = x.shape
        return x.reshape(*lead, n_heads, n, width // n_heads)

    fails(checks.check_split_heads, split, "split_heads", "in one step", r"transpose\(-3, -2\)")


def test_split_giving_every_hth_feature_is_explained():
    def split(x, n_heads):
        *lead, n, width = x.shape
        return x.reshape(*lead, n, width // n_heads, n_heads).movedim(-1, -3)

    fails(checks.check_split_heads, split, "every n_heads-th feature")


def test_split_without_moving_the_head_axis_is_explained():
    def split(x, n_heads):
        *lead, n, width = x.shape
        return x.reshape(*lead, n, n_heads, width // n_heads)

    fails(checks.check_split_heads, split, "has shape", "head axis must come before the token axis")


def test_merge_without_transposing_back_is_explained():
    def merge(x):
        *lead, n_heads, n, h = x.shape
        return x.reshape(*lead, n, n_heads * h)

    fails(checks.check_merge_heads, merge, "merge_heads", "swapping the head and token axes back")


def test_tiled_kv_heads_are_explained():
    def repeat(k, n_rep):
        reps = [1] * k.dim()
        reps[-3] = n_rep
        return k.repeat(*reps)

    fails(checks.check_repeat_kv, repeat, "tiled the heads", "repeat_interleave")


def test_repeat_along_the_wrong_axis_is_explained():
    fails(checks.check_repeat_kv, lambda k, n_rep: k.repeat_interleave(n_rep, dim=-2), "has shape", "dim=-3")


# ------------------------------------------------------------------ MultiHeadAttention


def broken_attention(ref, **mistakes):
    """A subclass of the reference whose forward makes the named mistakes."""
    masking = ref.masking

    class Broken(ref.MultiHeadAttention):
        def forward(self, x, mask=None, *, causal=False, memory=None, cache=None, positions=None,
                    return_weights=False, head_mask=None):
            n = x.shape[1]
            heads = 1 if mistakes.get("one_head") else self.n_heads
            kv_heads = 1 if mistakes.get("one_head") else self.n_kv_heads
            q = ref.split_heads(self.q_proj(x), heads)
            source = x if memory is None else memory
            k = ref.split_heads(self.k_proj(source), kv_heads)
            v = ref.split_heads(self.v_proj(source), kv_heads)
            if self.rope_base is not None and memory is None and not mistakes.get("no_rope"):
                if positions is None:
                    start = 0 if cache is None or mistakes.get("restart_positions") else cache.length
                    positions = torch.arange(start, start + n)
                q = ref.rotary.apply_rope(q, positions, base=self.rope_base)
                k = ref.rotary.apply_rope(k, positions, base=self.rope_base)
            if cache is not None and not mistakes.get("ignore_cache"):
                k, v = cache.append(k, v)
            allowed = None if mistakes.get("ignore_mask") else mask
            if causal and (memory is None or mistakes.get("causal_cross")) and not mistakes.get("ignore_causal"):
                n_k = k.shape[-2]
                lower = (torch.ones(n, n_k, dtype=torch.bool).tril() if mistakes.get("top_left")
                         else masking.causal_mask(n, n_k))
                allowed = lower if allowed is None else allowed & lower
            rep = heads // kv_heads
            if mistakes.get("tiled"):
                k, v = k.repeat(1, rep, 1, 1), v.repeat(1, rep, 1, 1)
            else:
                k, v = ref.repeat_kv(k, rep), ref.repeat_kv(v, rep)
            out, weights = masking.masked_attention(q, k, v, allowed)
            if head_mask is not None and not mistakes.get("ignore_head_mask"):
                out = out * head_mask[:, None, None]
            out = ref.merge_heads(out)
            if not mistakes.get("no_o_proj"):
                out = self.o_proj(out)
            return (out, weights) if return_weights else out

    return Broken


@pytest.mark.parametrize("mistake, patterns", [
    ("one_head", ["one wide head", "split_heads"]),
    ("no_o_proj", ["o_proj is missing"]),
    ("ignore_mask", ["the mask is ignored"]),
    ("ignore_causal", ["causal=True is ignored"]),
    ("tiled", ["grouped-query", "tiled"]),
    ("causal_cross", ["cross-attention", "causal must be ignored"]),
    ("ignore_head_mask", ["head_mask was ignored"]),
    ("no_rope", ["rope_base is ignored"]),
])
def test_attention_mistakes_are_explained(ref, mistake, patterns):
    fails(checks.check_multi_head_attention, broken_attention(ref, **{mistake: True}), *patterns)


def test_wrong_projection_names_are_explained(ref):
    class Renamed(ref.MultiHeadAttention):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.wq = self.q_proj
            del self.q_proj

    fails(checks.check_multi_head_attention, Renamed, "no nn.Linear called q_proj", "saved weights")


def test_kv_projections_with_query_heads_are_explained(ref):
    class TooWide(ref.MultiHeadAttention):
        def __init__(self, d_model, n_heads, n_kv_heads=None, bias=False, rope_base=None):
            super().__init__(d_model, n_heads, n_kv_heads, bias, rope_base)
            self.k_proj = torch.nn.Linear(d_model, d_model, bias=bias)

    fails(checks.check_multi_head_attention, TooWide, "k_proj.weight has shape", "n_kv_heads")


def test_missing_input_checks_are_explained(ref):
    class Unchecked(ref.MultiHeadAttention):
        def __init__(self, d_model, n_heads, n_kv_heads=None, bias=False, rope_base=None):
            try:
                super().__init__(d_model, n_heads, n_kv_heads, bias, rope_base)
            except ValueError:
                torch.nn.Module.__init__(self)

    fails(checks.check_multi_head_attention, Unchecked, "did not raise ValueError")


# ------------------------------------------------------------------ KVCache


def test_new_tokens_first_is_explained(ref):
    class Backwards(ref.KVCache):
        def append(self, k, v):
            if self.keys is None:
                self.keys, self.values = k, v
            else:
                self.keys, self.values = torch.cat([k, self.keys], -2), torch.cat([v, self.values], -2)
            return self.keys, self.values

    fails(lambda cls: checks.check_kv_cache(cls, ref.MultiHeadAttention), Backwards, "old tokens come first")


def test_wrong_length_is_explained(ref):
    class Counted(ref.KVCache):
        @property
        def length(self):
            return 0 if self.keys is None else int(self.keys.shape[-1])

    fails(lambda cls: checks.check_kv_cache(cls, ref.MultiHeadAttention), Counted, "length is", "keys.shape")


@pytest.mark.parametrize("mistake, patterns", [
    ("top_left", ["top-left corner", "causal_mask"]),
    ("restart_positions", ["restart at 0", "cache.length"]),
    ("ignore_cache", ["cache holds 0", "cache.append"]),
])
def test_decoding_mistakes_are_explained(ref, mistake, patterns):
    broken = broken_attention(ref, **{mistake: True})
    fails(lambda cls: checks.check_kv_cache(ref.KVCache, cls), broken, *patterns)


# ------------------------------------------------------------------ kv_cache_bytes


@pytest.mark.parametrize("wrong, pattern", [
    (lambda L, G, h, n, b, batch=1: L * G * h * n * b * batch, "keys only"),
    (lambda L, G, h, n, b, batch=1: 2 * G * h * n * b * batch, "n_layers"),
    (lambda L, G, h, n, b, batch=1: 2 * L * G * h * n * b, "batch"),
    (lambda L, G, h, n, b, batch=1: 2 * L * G * h * n * batch, "dtype_bytes"),
    (lambda L, G, h, n, b, batch=1: float(2 * L * G * h * n * b * batch), "expected an int"),
])
def test_cache_size_mistakes_are_explained(wrong, pattern):
    fails(checks.check_kv_cache_bytes, wrong, pattern)


# ------------------------------------------------------------------ cases that wait for lesson 05


@pytest.fixture
def positions_stub(ref, monkeypatch):
    """Lesson 05's stub as attnlab.positions (what a learner has before lesson 05), the reference of
    every other module."""
    import sys

    monkeypatch.setitem(sys.modules, "attnlab.positions", load_stub("positions"))
    monkeypatch.setattr(attnlab, "positions", sys.modules["attnlab.positions"], raising=False)
    return ref


def _lesson04_checks(module):
    return {"check_split_heads": (module.split_heads,), "check_merge_heads": (module.merge_heads,),
            "check_repeat_kv": (module.repeat_kv,), "check_multi_head_attention": (module.MultiHeadAttention,),
            "check_kv_cache": (module.KVCache, module.MultiHeadAttention),
            "check_kv_cache_bytes": (module.kv_cache_bytes,)}


def test_rotary_cases_wait_for_lesson_05_and_are_not_counted(positions_stub, capsys):
    checks.check_multi_head_attention(positions_stub.MultiHeadAttention)
    checks.check_kv_cache(positions_stub.KVCache, positions_stub.MultiHeadAttention)
    assert capsys.readouterr().out.strip().splitlines() == [
        "✓ MultiHeadAttention: 11 checks passed; 1 waits for lesson 05 ('rotary positions (rope_base)': not run, "
        "not counted; lesson 05 runs it again)",
        "✓ KVCache: 6 checks passed; 1 waits for lesson 05 ('with rotary positions, positions continue where the "
        "cache ends': not run, not counted; lesson 05 runs it again)",
    ]


def test_ignoring_rope_base_fails_even_before_lesson_05(positions_stub):
    # It never calls apply_rope, so nothing waits: the float64 reference rotates by itself.
    fails(checks.check_multi_head_attention, broken_attention(positions_stub, no_rope=True), "rope_base is ignored")


def test_positions_restarting_with_a_cache_wait_then_fail_in_lesson_05(ref, capsys):
    import sys

    class Restarting(ref.MultiHeadAttention):  # the reference, but positions restart at 0 in every call
        def forward(self, x, *args, memory=None, positions=None, **kwargs):
            if positions is None and memory is None:
                positions = torch.arange(x.shape[1])
            return super().forward(x, *args, memory=memory, positions=positions, **kwargs)

    broken = Restarting
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(sys.modules, "attnlab.positions", load_stub("positions"))
        checks.check_kv_cache(ref.KVCache, broken)
    assert "✓ KVCache: 6 checks passed; 1 waits for lesson 05" in capsys.readouterr().out
    fails(lambda cls: checks.check_kv_cache(ref.KVCache, cls), broken, "restart at 0", "cache.length")


def test_lesson_05_runs_the_waiting_checks_again(ref, capsys, monkeypatch):
    from attnlab import switch

    # The learner's own complete lesson 04 (the reference's code, not selected by the switch).
    monkeypatch.setattr(switch, "_selected", switch._selected - {"multihead"})
    reports = checks.rerun_waiting("05")
    assert [(r.name, r.passed, r.waiting) for r in reports] == [("MultiHeadAttention", 12, []), ("KVCache", 7, [])]
    assert capsys.readouterr().out.strip().splitlines() == [
        "✓ MultiHeadAttention: 12 checks passed", "✓ KVCache: 7 checks passed"]


def test_a_borrowed_lesson_04_is_not_run_again(ref, capsys):
    assert checks.rerun_waiting("05") == []
    assert capsys.readouterr().out.strip().splitlines() == [
        f"… {check} not run again: attnlab.multihead is the course's reference (you borrowed it)"
        for check in ("check_multi_head_attention", "check_kv_cache")]


def test_lesson_05_says_so_when_lesson_04_is_not_written_either(monkeypatch, capsys):
    import sys

    from attnlab import switch

    monkeypatch.setattr(switch, "_selected", switch._selected - {"multihead"})
    monkeypatch.setitem(sys.modules, "attnlab.multihead", load_stub("multihead"))
    assert checks.rerun_waiting("05") == []
    assert capsys.readouterr().out.strip().splitlines() == [
        f"… {check} not run again: Lesson 04: {what} in attnlab/multihead.py is not written yet. Fill in its "
        "body, or borrow the course's reference with attnlab.use_reference('multihead')"
        for check, what in (("check_multi_head_attention", "MultiHeadAttention.__init__()"),
                            ("check_kv_cache", "KVCache.length()"))]


def test_waits_for_lists_exactly_the_checks_with_waiting_cases(positions_stub):
    from attnlab.checks.common import LAST_REPORTS, WAITS_FOR

    waiting = set()
    for check, args in _lesson04_checks(positions_stub).items():
        getattr(checks, check)(*args)
        if list(LAST_REPORTS.values())[-1].waiting:
            waiting.add(("multihead", check))
    assert set(WAITS_FOR) == {"05"}
    assert {(module, check) for module, check, _ in WAITS_FOR["05"]} == waiting
    for module, check, names in WAITS_FOR["05"]:  # rerun_waiting passes these, in this order
        assert tuple(_lesson04_checks(positions_stub)[check]) == tuple(getattr(positions_stub, n) for n in names)


def test_only_the_modules_in_waits_for_reach_a_later_lesson():
    """Statically: the only exercise code (reference modules) or visible checks that reach an
    exercise module of a later lesson are those WAITS_FOR names, so no other check can wait."""
    import re

    from attnlab.checks.common import WAITS_FOR
    from attnlab.lessons import exercise_modules, owner
    from autograder import paths

    names = "|".join(exercise_modules())
    reach = re.compile(rf'_Library\("({names})"\)|attnlab\.({names})\b|from attnlab import ({names})\b')
    sources = {path: owner(path.stem).number for path in paths.REFERENCE_MODULES.glob("*.py")
               if path.stem in exercise_modules()}
    sources |= {path: path.stem[len("lesson"):] for path in (ROOT / "src" / "attnlab" / "checks").glob("lesson*.py")}
    later = {(number, owner(module).number) for path, number in sources.items()
             for match in reach.finditer(path.read_text()) for module in filter(None, match.groups())
             if owner(module).number > number}
    assert later == {(owner(module).number, lesson) for lesson, entries in WAITS_FOR.items()
                     for module, _, _ in entries}


# ------------------------------------------------------------------ exercise 6 (not graded): uptraining


def _sharing(build_kv):
    """A share_kv_heads that copies queries and outputs and builds each shared k/v weight with
    ``build_kv(old_weight, H, G, h)`` (old_weight: (H*h, d)), as the notebook's frame does."""
    def share(attention, n_kv_heads):
        H, G, h = attention.n_heads, n_kv_heads, attention.head_dim
        shared = type(attention)(attention.d_model, H, n_kv_heads=G, bias=attention.q_proj.bias is not None,
                                 rope_base=attention.rope_base).to(attention.q_proj.weight.dtype)
        with torch.no_grad():
            shared.q_proj.load_state_dict(attention.q_proj.state_dict())
            shared.o_proj.load_state_dict(attention.o_proj.state_dict())
            for name in ("k_proj", "v_proj"):
                old, new = getattr(attention, name), getattr(shared, name)
                new.weight.copy_(build_kv(old.weight, H, G, h))
                if old.bias is not None:
                    new.bias.copy_(build_kv(old.bias[:, None], H, G, h)[:, 0])
        return shared
    return share


MEAN = _sharing(lambda w, H, G, h: w.unflatten(0, (G, H // G, h)).mean(1).flatten(0, 1))
FIRST = _sharing(lambda w, H, G, h: w.unflatten(0, (G, H // G, h))[:, 0].flatten(0, 1))
WEIGHTED = _sharing(lambda w, H, G, h: (w.unflatten(0, (G, H // G, h))
                                        * torch.linspace(1, 2, H // G, dtype=w.dtype)[None, :, None, None]
                                        / torch.linspace(1, 2, H // G).sum()).sum(1).flatten(0, 1))


@pytest.mark.parametrize("share", [MEAN, FIRST, WEIGHTED], ids=["mean pooling", "first head", "weighted mean"])
def test_share_kv_heads_accepts_any_construction_within_the_group(ref, share, capsys):
    assert checks.check_share_kv_heads(share, ref.MultiHeadAttention) is True
    assert capsys.readouterr().out.strip() == "✓ share_kv_heads: 5 checks passed"


def test_share_kv_heads_says_what_is_wrong(ref):
    cls = ref.MultiHeadAttention
    tiled = _sharing(lambda w, H, G, h: w.unflatten(0, (H // G, G, h)).mean(0).flatten(0, 1))
    fails(lambda f: checks.check_share_kv_heads(f, cls), tiled, "belongs to group 0", "repeat_kv")
    summed = _sharing(lambda w, H, G, h: w.unflatten(0, (G, H // G, h)).sum(1).flatten(0, 1))
    fails(lambda f: checks.check_share_kv_heads(f, cls), summed, "larger", "average them")
    fresh = _sharing(lambda w, H, G, h: torch.randn(G * h, w.shape[-1], dtype=w.dtype))
    fails(lambda f: checks.check_share_kv_heads(f, cls), fresh, "nothing changes", "exactly what the trained one does")

    def in_place(attention, n_kv_heads):
        out = MEAN(attention, n_kv_heads)
        with torch.no_grad():
            attention.q_proj.weight.mul_(1.0001)
        return out
    fails(lambda f: checks.check_share_kv_heads(f, cls), in_place, "changed q_proj.weight of the layer it was given")

    def queries_pooled_too(attention, n_kv_heads):
        out = MEAN(attention, n_kv_heads)
        with torch.no_grad():
            out.q_proj.weight.mul_(0.5)
        return out
    fails(lambda f: checks.check_share_kv_heads(f, cls), queries_pooled_too, "q_proj differs", "only keys and values")
    fails(lambda f: checks.check_share_kv_heads(f, cls), lambda attention, g: attention, "returned the layer it was given")


def test_unwritten_exercise_6_waits_instead_of_failing(ref, capsys):
    def stub(*args):
        raise NotImplementedError()
    assert checks.check_share_kv_heads(stub, ref.MultiHeadAttention) is False
    assert checks.check_kv_heads_choice(stub, {4: {"cache_mib": 1, "loss": 1.0}}, budget_mib=1, tolerance=0.1) is None
    out = capsys.readouterr().out
    assert "share_kv_heads is not written yet (exercise 6, not graded)" in out
    assert "choose_kv_heads is not written yet" in out


MEASURED = {4: {"cache_mib": 32, "loss": 1.33}, 2: {"cache_mib": 16, "loss": 1.48, "converted": 2.10},
            1: {"cache_mib": 8, "loss": 1.60, "converted": 3.29}}


def test_kv_heads_choice_accepts_every_choice_within_both_limits(capsys):
    assert checks.check_kv_heads_choice(lambda m: 2, MEASURED, budget_mib=20, tolerance=0.2) == 2
    for choice in (2, 1):  # a looser tolerance: both qualify, either is right
        assert checks.check_kv_heads_choice(lambda m, c=choice: c, MEASURED, budget_mib=20, tolerance=0.3) == choice
    assert checks.check_kv_heads_choice(lambda m: None, MEASURED, budget_mib=4, tolerance=0.2) is None
    assert capsys.readouterr().out.count("✓ choose_kv_heads") == 4


def test_kv_heads_choice_says_which_limit_a_wrong_choice_breaks():
    def check(f):
        return checks.check_kv_heads_choice(f, MEASURED, budget_mib=20, tolerance=0.2)
    fails(check, lambda m: 4, "32 MiB, is over the budget of 20 MiB", "Meeting both limits: 2")
    fails(check, lambda m: 1, "0.270 nats above", "more than the 0.2 you accept")
    fails(check, lambda m: None, "you chose none", "the loss before the fine-tune does not count")
    fails(check, lambda m: "2", "choose one of")


# ------------------------------------------------------------------ exercise 7 (not graded): the induction test


@pytest.fixture(scope="module")
def course_model():
    from attnlab import zoo
    from attnlab.zoo.loading import CHAIN

    before = {name: attnlab.source_of(name) == "reference" for name in CHAIN}
    attnlab.use_reference(*CHAIN, quiet=True)
    model = zoo.build_model(zoo.ZooConfig.from_dict(zoo.metadata()["config"]))
    model.load_state_dict(zoo.load_state())
    yield model.eval()
    for name in CHAIN:
        if not before[name]:
            attnlab.use_own(name)


INDUCTION_HEADS = [(2, 0), (2, 3)]


def _repeated_tokens(n_sequences, half, generator):
    from attnlab.zoo.induction import WORDS

    first = WORDS[torch.randint(len(WORDS), (n_sequences, half), generator=generator)]
    return torch.cat([first, first], dim=1)


def _per_word_loss(model, tokens):
    with torch.no_grad():
        logits = model(tokens)
    return torch.nn.functional.cross_entropy(logits[:, :-1].transpose(1, 2), tokens[:, 1:], reduction="none")


def _half_losses(model, tokens):
    T = tokens.shape[1] // 2
    losses = _per_word_loss(model, tokens)
    return losses[:, :T - 1].mean().item(), losses[:, T:].mean().item()


def _weights(model, tokens):
    with torch.no_grad():
        _, weights = model(tokens, return_weights=True)
    return torch.stack(weights, dim=1)


def _induction_scores(model, tokens, offset=1, transpose=False):
    T = tokens.shape[1] // 2
    q = torch.arange(T, 2 * T)
    scores = _weights(model, tokens)[..., q, q - T + offset].mean(dim=(0, -1))
    return scores.T if transpose else scores


def test_induction_test_passes_a_right_answer_and_returns_its_measurements(course_model, capsys):
    found = checks.check_induction_test(_repeated_tokens, _half_losses, _induction_scores, course_model,
                                        INDUCTION_HEADS)
    assert capsys.readouterr().out.strip() == "✓ induction test: 6 checks passed"
    model, knocked = found["model"], found["knocked out"]
    # What the lesson reads: the course model copies, and stops copying with its induction heads knocked out.
    assert model["second"] < 0.5 * model["first"] and knocked["second"] > 2 * model["second"]
    top_two = sorted(divmod(int(i), 4) for i in model["scores"].flatten().argsort(descending=True)[:2])
    assert top_two == INDUCTION_HEADS and all(model["scores"][l, h] > 0.3 for l, h in INDUCTION_HEADS)
    assert all(knocked["scores"][layer, head] < 0.1 for layer, head in INDUCTION_HEADS)


def test_induction_test_says_what_is_wrong(course_model):
    def check(tokens=_repeated_tokens, losses=_half_losses, scores=_induction_scores):
        return checks.check_induction_test(tokens, losses, scores, course_model, INDUCTION_HEADS)

    fails(lambda f: check(tokens=f), lambda n, half, g: torch.randint(3, 250, (n, 2 * half), generator=g),
          "second half of each sequence must repeat the first")
    fails(lambda f: check(tokens=f), lambda n, half, g: (torch.arange(n * half).reshape(n, half) % 257).repeat(1, 2),
          "not among zoo.induction.WORDS", "<eos>")             # the whole vocabulary, <pad> <unk> <eos> too
    fails(lambda f: check(tokens=f), lambda n, half, g: _repeated_tokens(n, half, None),      # torch's global one
          "draw with the generator you are given")
    fails(lambda f: check(tokens=f), lambda n, half, g: _repeated_tokens(n, half, torch.Generator()),
          "different seeds gave the same words")
    fails(lambda f: check(tokens=f), lambda n, half, g: _repeated_tokens(n, half, g).float(), "torch.long")

    def unshifted(model, tokens):
        T = tokens.shape[1] // 2
        with torch.no_grad():
            logits = model(tokens)
        losses = torch.nn.functional.cross_entropy(logits.transpose(1, 2), tokens, reduction="none")
        return losses[:, 1:T].mean().item(), losses[:, T + 1:].mean().item()
    fails(lambda f: check(losses=f), unshifted, "half_losses on model", "predict word i \\+ 1")

    def with_word_t(model, tokens):
        T = tokens.shape[1] // 2
        losses = _per_word_loss(model, tokens)
        return losses[:, :T].mean().item(), losses[:, T - 1:].mean().item()
    fails(lambda f: check(losses=f), with_word_t, "belongs to neither half")
    fails(lambda f: check(losses=f), lambda m, t: _half_losses(m, t)[::-1], "swapped")
    fails(lambda f: check(losses=f), lambda m, t: _half_losses(m, t)[0], "return two numbers")
    fails(lambda f: check(scores=f), lambda m, t: _induction_scores(m, t, offset=0), "earlier copy", "i - T \\+ 1")
    fails(lambda f: check(scores=f), lambda m, t: _induction_scores(m, t, transpose=True), "not \\(n_heads, n_layers\\)")


def test_induction_test_is_checked_on_the_knocked_out_model_too(course_model):
    intact = {}

    def remembers(model, tokens):
        # Right on the first model it is given, then repeats that answer whatever model it gets.
        key = tokens.shape
        if key not in intact:
            intact[key] = _induction_scores(model, tokens)
        return intact[key]
    fails(lambda f: checks.check_induction_test(_repeated_tokens, _half_losses, f, course_model, INDUCTION_HEADS),
          remembers, "knocked out")


def test_unwritten_exercise_7_waits_instead_of_failing(course_model, capsys):
    def stub(*args):
        raise NotImplementedError()
    assert checks.check_induction_test(stub, _half_losses, _induction_scores, course_model, INDUCTION_HEADS) is None
    assert checks.check_induction_test(_repeated_tokens, _half_losses, stub, course_model, INDUCTION_HEADS) is None
    out = capsys.readouterr().out
    assert "repeated_tokens is not written yet (exercise 7, not graded)" in out
    assert "induction_scores is not written yet (exercise 7, not graded)" in out
