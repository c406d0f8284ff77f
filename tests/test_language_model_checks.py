"""Assignment 08's checks beyond the catalogue and the generic forgeries (test_forged_records.py): forged records
specific to 08 fail (a record claiming that cached equals uncached earns nothing without the outputs of real code),
a failing generation names a failing sampler, the judge's own models are what they claim, and the training harness
works without the reference answers."""

import math

import forgery
import nbformat
import pytest
import torch
import torch.nn.functional as F

from autograder import course_dir
from course import language_model as reference
from course import language_model_training as harness
from course.checks import language_model as lm
from course.checks import seeds, weights
from course.checks.compare import CheckFailed
from course.corpus import CHARACTERS, sentences
from course.judges import language_model as judges
from course.judges import oracles
from course.judges.models import run_steps

A = "08_language_model"


def test_a_record_claiming_cached_equals_uncached_earns_nothing_without_real_logits():
    """Cached calls that agree exactly with the uncached call, and caches of the right shapes, all made up: the
    uncached logits are not what a language model with the check's weights computes."""
    forged = forgery.honest(A, "lm_cache")
    made_up = torch.randn(forged.tensors["full"].shape, generator=torch.Generator().manual_seed(0))
    forged.tensors["full"] = made_up
    start = 0
    for c, size in enumerate(lm.CACHE_CASE.chunks):
        forged.tensors[f"step{c}.0"] = made_up[:, start:start + size].clone()
        start += size
    with pytest.raises(CheckFailed, match="not a language model"):
        lm.lm_cache.judge(forged)


def test_right_logits_with_a_cache_of_other_numbers_fail():
    forged = forgery.forged(A, "lm_cache", lambda key, t: torch.zeros_like(t) if key.endswith((".1.0.0", ".1.0.1"))
                            else t)
    with pytest.raises(CheckFailed, match="cache"):
        lm.lm_cache.judge(forged)


def test_a_forged_call_log_does_not_make_an_uncached_generation_cached():
    """generate_cached reads the model's calls from the record; a log of perfect cached calls with the tokens of a
    wrong generation earns nothing, and the right tokens with a log of uncached calls are named."""
    wrong = forgery.forged(A, "generate_cached", lambda key, t: t.flip(-1) if key.startswith("tokens") and t.dim() == 2
                           else t)
    with pytest.raises(CheckFailed):
        lm.generate_cached.judge(wrong)
    uncached = forgery.honest(A, "generate_cached")
    for i, spec in enumerate(lm.CACHED_GENERATIONS):
        uncached.facts[f"tokens{i}.calls"] = [[spec.t0 + j, 0, False] for j in range(spec.new_tokens)]
    with pytest.raises(CheckFailed) as failure:
        lm.generate_cached.judge(uncached)
    assert failure.value.mistake == judges.WRITTEN["generate-cache-unused"].id


def test_the_oracles_drawn_once_are_handed_out_as_copies_and_redrawn_under_a_grading_seed():
    """generate's and sample_next_token's oracles keep their tokens per case (replays judge the same cases for every
    variant): a judge that changes them in place changes no later verdict, and a grading seed gets its own."""
    for oracle, spec in ((judges._oracle_generate, lm.GREEDY_GENERATION), (judges._draws, lm.SAMPLING_CASES[0])):
        first = oracle(spec)
        first[0].fill_(-1)
        assert not torch.equal(oracle(spec)[0], first[0]), oracle.__name__
        with seeds.grading_seed(11):
            graded = oracle(spec)
        assert not torch.equal(graded[0], oracle(spec)[0]), f"{oracle.__name__} under a grading seed"


def test_sampling_under_another_global_seed_is_named_as_the_global_generator():
    def from_global(logits, temperature=1.0, top_k=None, top_p=None, generator=None):
        return reference.sample_next_token(logits, temperature, top_k, top_p, None)

    with pytest.raises(CheckFailed) as failure:
        lm.sampling_generator(from_global)
    assert failure.value.mistake == judges.GLOBAL_RNG.id


GENERATE_WITH_THE_NOTEBOOKS_SAMPLER = """
def generate(model, prompt, max_new_tokens, temperature=1.0, top_k=None, top_p=None, generator=None):
    tokens = prompt
    for _ in range(max_new_tokens):
        next_token = sample_next_token(model(tokens)[:, -1], temperature, top_k, top_p, generator)
        tokens = torch.cat([tokens, next_token.unsqueeze(1)], dim=1)
    return tokens
"""


def test_a_generation_failing_because_of_the_sampler_says_so():
    """generate is right, but the notebook's sample_next_token (exercise 3) takes the argmin: the failure says so."""
    namespace = {"torch": torch, "__name__": "notebook", "sample_next_token":
                 lambda logits, temperature=1.0, top_k=None, top_p=None, generator=None: logits.argmin(-1)}
    exec(GENERATE_WITH_THE_NOTEBOOKS_SAMPLER, namespace)  # noqa: S102 - a notebook namespace
    with pytest.raises(CheckFailed, match=r"your sample_next_token \(exercise 3\) does not pass its own tests"):
        lm.generate_greedy(namespace["generate"])


# ---------------------------------------------------------------- the judge's own models

def _weights(case, seed=1):
    model = reference.LanguageModel(case.vocab, case.k, case.heads, case.depth, case.max_len)
    weights.fill(model, seed)
    return model.eval(), weights.recreate([[n, list(p.shape)] for n, p in model.named_parameters()], seed)


def _stacked_encoder_layers(w, case, tokens):
    """PyTorch's nn.TransformerEncoderLayer (pre-norm, ReLU, causal mask) stacked, carrying the weights w."""
    t = tokens.shape[1]
    x = F.embedding(tokens, w["token_embedding.weight"]) + w["position_embedding.weight"][:t]  # (b, t, k)
    for i in range(case.depth):
        x = oracles.course_layer(w, f"blocks.{i}.", case.heads, x, causal=True, norm_first=True)
    return oracles.dense(w, "to_logits", oracles.layer_norm(w, "norm", x))


@pytest.mark.parametrize("case", [*lm.ORACLE_CASES, *lm.HIDDEN_CASES])
def test_the_hand_written_model_is_pytorchs_layers_and_the_reference(case):
    model, w = _weights(case)
    tokens = lm.lm_tokens(case, 7)
    with torch.no_grad():
        oracle = _stacked_encoder_layers(w, case, tokens)
        torch.testing.assert_close(judges._lm(w, case, tokens)[0], oracle, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(model(tokens), oracle, rtol=1e-4, atol=1e-5)


def test_every_model_and_cache_mistake_changes_what_the_judge_sees():
    """On the visible cache case, each model mistake's variant gives other logits than the oracle, and each cache
    mistake's, fed chunk by chunk with its own cache, other logits or another cache than the oracle's, whose chunks
    give the logits of one call."""
    case, seed, sizes = lm.CACHE_CASE.case, lm.CACHE_CASE.seed, lm.CACHE_CASE.chunks
    _, w = _weights(case, seed)
    tokens = lm.lm_tokens(case, seed + 10)
    right = judges._lm(w, case, tokens)[0]
    for mistake, compute in judges._LM_MISTAKES:
        assert not torch.allclose(compute(w, case, tokens)[0], right, atol=1e-4), mistake.id
    right_logits, right_caches = run_steps(judges._lm, w, case, tokens, sizes)
    torch.testing.assert_close(torch.cat(right_logits, dim=1), right, rtol=1e-4, atol=1e-5)
    for mistake, compute in judges._CACHE_MISTAKES:
        logits, caches = run_steps(compute, w, case, tokens, sizes)
        same = all(torch.allclose(a, b) for a, b in zip(logits, right_logits, strict=True)) and all(
            torch.allclose(x, y) for c1, c2 in zip(caches, right_caches, strict=True)
            for p1, p2 in zip(c1, c2, strict=True) for x, y in zip(p1, p2, strict=True))
        assert not same, mistake.id


def test_the_stand_in_writes_the_same_logits_with_and_without_its_cache_to_the_last_bit():
    model, prompt = lm.stand_in(lm.CACHED_GENERATIONS[1])
    tokens = torch.cat([prompt, torch.randint(11, (prompt.shape[0], 9), generator=torch.Generator().manual_seed(3))], 1)
    full = model(tokens)
    logits, cache = model(tokens[:, :3], use_cache=True)
    steps = [logits]
    for i in range(3, tokens.shape[1]):
        logits, cache = model(tokens[:, i:i + 1], cache=cache, use_cache=True)
        steps.append(logits)
    assert torch.equal(torch.cat(steps, dim=1), full)
    assert model.calls[0] == [tokens.shape[1], 0, False] and model.calls[-1] == [1, tokens.shape[1] - 1, True]


def test_the_reference_generation_is_the_same_cached_and_uncached():
    torch.manual_seed(0)
    model = reference.CachedLanguageModel(11, 16, 2, 2, 30).eval()
    prompt = torch.randint(11, (3, 4))
    for temperature, top_k, top_p in ((0, None, None), (1.0, None, None), (0.8, 3, None), (1.3, None, 0.7)):
        outs = [generate(model, prompt, 20, temperature, top_k, top_p, torch.Generator().manual_seed(5))
                for generate in (reference.generate, reference.generate_cached)]
        assert torch.equal(*outs) and outs[0].shape == (3, 24)


def test_the_cached_model_takes_the_weights_of_the_plain_one_and_computes_what_it_does():
    torch.manual_seed(0)
    plain = reference.LanguageModel(11, 16, 2, 2, 30).eval()
    cached = reference.CachedLanguageModel(11, 16, 2, 2, 30).eval()
    cached.load_state_dict(plain.state_dict())
    tokens = torch.randint(11, (2, 9))
    with torch.no_grad():
        torch.testing.assert_close(cached(tokens), plain(tokens), rtol=1e-5, atol=1e-6)


def test_top_p_keeps_the_token_that_crosses_p_and_nothing_after_it():
    """Probabilities 0.5, 0.3, 0.15, 0.05: top_p = 0.85 keeps the first three (0.8 before the third is below 0.85),
    top_p = 0.45 the most likely alone; the judge's nucleus says the same."""
    logits = torch.tensor([[0.5, 0.3, 0.15, 0.05]]).log().expand(3000, 4)
    for top_p, kept in ((0.85, {0, 1, 2}), (0.45, {0})):
        draws = reference.sample_next_token(logits, top_p=top_p, generator=torch.Generator().manual_seed(0))
        assert set(draws.tolist()) == kept
        assert set(judges._nucleus(logits[:1].softmax(-1), top_p)[0].nonzero().flatten().tolist()) == kept
    shares = torch.bincount(reference.sample_next_token(logits, top_p=0.85, generator=torch.Generator().manual_seed(1)),
                            minlength=4) / 3000
    torch.testing.assert_close(shares, torch.tensor([0.5, 0.3, 0.15, 0.0]) / 0.95, atol=0.03, rtol=0)


def test_a_cached_model_on_a_broken_language_model_says_to_fix_exercise_1_first():
    """CachedLanguageModel inherits exercise 1's constructor: when that registers no blocks, the cache test fails
    and says that LanguageModel (exercise 1) fails its own tests."""

    class BrokenLanguageModel(reference.LanguageModel):
        def __init__(self, vocab_size, k, heads, depth, max_len):
            super().__init__(vocab_size, k, heads, depth, max_len)
            self.blocks = list(self.blocks)  # not registered

    BrokenLanguageModel.__name__ = "LanguageModel"

    class CachedLanguageModel(BrokenLanguageModel):
        forward = reference.CachedLanguageModel.forward
        run_block = reference.CachedLanguageModel.run_block

    with pytest.raises(CheckFailed, match=r"your LanguageModel \(exercise 1\) does not pass its own tests"):
        lm.lm_cache(CachedLanguageModel)


# ---------------------------------------------------------------- the harness

def test_nothing_the_kernel_needs_while_08_is_graded_imports_the_answers():
    """The checks, the corpus and the training harness work while course/language_model.py is hidden."""
    root = course_dir.ROOT
    assert course_dir.answer_modules(A) == ["language_model"]
    for path in (root / "course" / "language_model_training.py", root / "course" / "corpus.py",
                 root / "course" / "checks" / "language_model.py"):
        assert "language_model" not in course_dir.course_imports(path), path


def test_the_notebook_trains_with_the_settings_the_benchmark_uses():
    nb = nbformat.read(course_dir.source_dir() / A / "language_model.ipynb", as_version=4)
    code = "\n".join(cell.source for cell in nb.cells if cell.cell_type == "code")
    assert "model = new_model(LanguageModel, device)" in code
    assert "steps=STEPS, batch_size=TRAINING.batch_size" in code and "lr=TRAINING.lr, length=MODEL.max_len" in code
    assert 'STEPS = demo_size("steps", TRAINING.steps)' in code, "the benchmark's steps, cut short only while graded"
    with pytest.raises(AttributeError):
        harness.TRAINING.steps = 1  # frozen


def test_training_with_the_reference_parts_lowers_the_loss_and_evaluation_counts_every_character():
    torch.manual_seed(0)
    text = "".join(sentences(2000, seed=4))
    model = harness.new_model(reference.LanguageModel, config=harness.ModelConfig(k=32, heads=2, depth=1))
    history = harness.train(model, text, "cpu", loss_fn=reference.next_token_loss, steps=40, batch_size=16, lr=3e-3,
                            length=harness.MODEL.max_len, held_out=sentences(50, seed=9), evaluate_every=20)
    assert sum(history.losses[-5:]) / 5 < 0.8 * sum(history.losses[:5]) / 5
    assert [step for step, _ in history.held_out] == [20, 40]

    class Uniform(torch.nn.Module):
        def forward(self, tokens):
            return torch.zeros(*tokens.shape, len(CHARACTERS))

    held_out = sentences(30, seed=2)
    assert math.isclose(harness.bits_per_character(Uniform(), held_out, "cpu"), math.log2(len(CHARACTERS)),
                        rel_tol=1e-6)
    assert harness.sentence_bits(Uniform(), held_out, "cpu").shape == (30,)


def test_training_follows_07s_recipe_with_07s_own_parts(monkeypatch):
    """08 trains with the recipe students write in 07: AdamW with decay on the matrices, warm-up then cosine decay,
    the gradient norm clipped (the course's copies of 07's parts, with TRAINING's settings)."""
    seen = {"lrs": [], "max_norms": []}
    configure, step = harness.configure_optimizer, harness.train_step

    def configure_optimizer(model, lr, weight_decay):
        seen["optimizer"] = configure(model, lr, weight_decay)
        seen["weight_decay"] = weight_decay
        return seen["optimizer"]

    def train_step(model, optimizer, loss, lr, max_norm):
        seen["lrs"].append(lr)
        seen["max_norms"].append(max_norm)
        return step(model, optimizer, loss, lr, max_norm)

    monkeypatch.setattr(harness, "configure_optimizer", configure_optimizer)
    monkeypatch.setattr(harness, "train_step", train_step)
    model = harness.new_model(reference.LanguageModel, config=harness.ModelConfig(k=16, heads=2, depth=1))
    harness.train(model, "".join(sentences(200, seed=1)), "cpu", loss_fn=reference.next_token_loss, steps=20,
                  batch_size=4, lr=0.01, length=harness.MODEL.max_len)
    assert isinstance(seen["optimizer"], torch.optim.AdamW) and seen["weight_decay"] == harness.TRAINING.weight_decay
    groups = seen["optimizer"].param_groups
    assert {p.dim() >= 2 for group in groups if group["weight_decay"] for p in group["params"]} == {True}
    # 10% of 20 steps warm up: 0.005 then the peak, a cosine decay to 0 at the last step
    assert seen["lrs"][:2] == [0.005, 0.01] and seen["lrs"][-1] == 0.0
    assert all(a >= b for a, b in zip(seen["lrs"][1:-1], seen["lrs"][2:], strict=True))
    assert seen["max_norms"] == [harness.TRAINING.max_norm] * 20
    assert harness.TRAINING.warmup_steps == 80


def test_multiplication_counts_of_generation():
    k, depth = 8, 2
    # without a cache, step m computes m positions, each query scored against all m keys (the mask saves nothing):
    # steps of 1 and 2 positions; with it, one new position a step, reading 1 and then 2 keys
    assert harness.multiplies_to_generate(2, k, depth, use_cache=False) == depth * (12 * k * k * 3 + 2 * k * (1 + 4))
    assert harness.multiplies_to_generate(2, k, depth, use_cache=True) == depth * (12 * k * k * 2 + 2 * k * (1 + 2))
    # the notebook's section 2: without a cache about 6N²k² + (2/3)N³k, with it about 12Nk² + N²k
    n, wide = 512, 64
    naive, cached = 6 * n**2 * wide**2 + 2 / 3 * n**3 * wide, 12 * n * wide**2 + n**2 * wide
    assert abs(harness.multiplies_to_generate(n, wide, 1, use_cache=False) / naive - 1) < 0.01
    assert abs(harness.multiplies_to_generate(n, wide, 1, use_cache=True) / cached - 1) < 0.01
    assert harness.multiplies_to_generate(1, k, depth, True) == harness.multiplies_to_generate(1, k, depth, False)


def test_cache_bytes_counts_keys_and_values_of_every_block():
    model = reference.CachedLanguageModel(11, 16, 4, 3, 20).eval()
    with torch.no_grad():
        _, cache = model(torch.zeros(2, 7, dtype=torch.long), use_cache=True)
    assert harness.cache_bytes(cache) == 2 * 3 * 2 * 7 * 16 * 4
