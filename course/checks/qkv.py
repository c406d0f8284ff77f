"""Probes for assignment 02: attention(queries, keys, values) and SelfAttentionQKV, judged in course/judges/qkv.py
(F.scaled_dot_product_attention with scale 1, nn.MultiheadAttention with one head) from the cases declared here."""

from functools import partial

import torch

from course.checks import kinds
from course.checks.check import when_graded  # noqa: F401 - hidden-test cells call it
from course.checks.compare import randn
from course.checks.kinds import Built, Case, Runs, builds_and_runs, calls, calls_backward, random_case
from course.checks.modules import sharing

ROLES = ("to_queries", "to_keys", "to_values")

# (b, tq, tk, k, v): batch > 1, tq != tk, v != k, so swapped axes and roles change the shape
ATTENTION_SHAPES = ((3, 4, 6, 5, 2), (2, 7, 3, 4, 6), (1, 1, 5, 3, 3), (4, 5, 5, 2, 7))
MODULE_SHAPES = ((3, 5, 4), (2, 7, 6), (1, 1, 3))  # (b, t, k)
AVERAGE = (2, 3, 6, 4, 5)  # (b, tq, tk, k, v) of the weighted-average cases
SMALL = (2, 3, 4, 4, 2)  # (b, tq, tk, k, v) of the small case against PyTorch
SECRET = (2, 3, 5, 4, 3)  # (b, tq, tk, k, v) of the secret case added to the case worked by hand under grading
STRUCTURE_K = 6
PERMUTATION = (5, 2, 0, 4, 1, 3)


# ---------------------------------------------------------------- attention: the cases

def hand_inputs() -> dict[str, torch.Tensor]:
    """The notebook's example: one query, two keys, the values 10 and 20."""
    return {"queries": torch.tensor([[[1.0, 0.0]]]),  # (1, 1, 2)
            "keys": torch.tensor([[[1.0, 0.0], [0.0, 1.0]]]),  # (1, 2, 2)
            "values": torch.tensor([[[10.0], [20.0]]])}  # (1, 2, 1)


def _random_qkv(shape: tuple[int, ...], seeds: tuple[int, int, int]) -> dict[str, torch.Tensor]:
    b, tq, tk, k, v = shape
    return {"queries": randn(b, tq, k, seed=seeds[0]), "keys": randn(b, tk, k, seed=seeds[1]),
            "values": randn(b, tk, v, seed=seeds[2])}


def qkv_case(key: str, shape: tuple[int, ...], seeds: tuple[int, int, int], *, secret: bool = False,
             upstream_seed: int | None = None) -> Case:
    """Random queries (b, tq, k), keys (b, tk, k), values (b, tk, v) from seeds; an upstream (b, tq, v) too."""
    b, tq, tk, k, v = shape
    upstream = partial(randn, b, tq, v, seed=upstream_seed) if upstream_seed is not None else None
    return Case(key, partial(_random_qkv, shape, seeds), f"b={b}, tq={tq}, tk={tk}, k={k}, v={v}", secret, upstream)


def _identical_values() -> dict[str, torch.Tensor]:
    """The queries (2, 3, 4) and keys (2, 6, 4) of the AVERAGE case over six identical values (2, 6, 5)."""
    return {**_random_qkv(AVERAGE, (530, 531, 532)), "values": randn(2, 1, 5, seed=532).expand(2, 6, 5).contiguous()}


def lookup_inputs() -> dict[str, torch.Tensor]:
    """Orthonormal keys, and queries that are long copies of keys 2 and 0: scores of 100, past where float32's exp
    overflows (about 88), which a softmax survives (it subtracts each row's maximum first)."""
    keys = torch.eye(4).unsqueeze(0)  # (1, 4, 4): orthonormal keys
    queries = 100.0 * keys[:, [2, 0]]  # (1, 2, 4): look up keys 2 and 0
    return {"queries": queries, "keys": keys, "values": randn(1, 4, 3, seed=540)}


# ---------------------------------------------------------------- attention: the checks

attention_by_hand = calls("attention_by_hand", (
    Case("y", hand_inputs, "q=[1,0], keys=[1,0],[0,1], values=10,20"),
    qkv_case("y_secret", SECRET, (570, 571, 572), secret=True)))
#: the same queries and keys over identical values (y), then over different ones (y_anchor)
attention_weighted_average = calls("attention_weighted_average", (
    Case("y", _identical_values, "all values equal"), qkv_case("y_anchor", AVERAGE, (530, 531, 533))))
attention_vs_pytorch = calls_backward("attention_vs_pytorch",
                                      (qkv_case("y", SMALL, (560, 561, 562), upstream_seed=563),))
attention_oracle = calls("attention_oracle", (
    *(qkv_case(f"y{i}", shape, (500 + i, 510 + i, 520 + i)) for i, shape in enumerate(ATTENTION_SHAPES)),
    Case("lookup", lookup_inputs, "queries = 100·key 2, 100·key 0")))


# ---------------------------------------------------------------- the module

def _gradient_case(seed: int, shape: tuple[int, int, int]) -> Runs:
    """A k = 4 module (weights from seed) on x of shape (seed + 1), with an upstream gradient (seed + 2)."""
    return Runs(Built(key="grad_module", args=(4,), seed=seed),
                (random_case("y_grad", shape, seed + 1, upstream=(shape, seed + 2)),))


def _permuted(inputs: partial) -> dict[str, torch.Tensor]:
    return {"x": inputs()["x"][:, list(PERMUTATION)]}  # (b, t, k), positions permuted


self_attention_qkv_structure = builds_and_runs("self_attention_qkv_structure", (
    Runs(Built(key="module", args=(STRUCTURE_K,), seed=200),
         (random_case("y", (2, 4, STRUCTURE_K), 201),)),), facts=sharing(ROLES))
self_attention_qkv_vs_pytorch = kinds.builds_and_runs_backward(
    "self_attention_qkv_vs_pytorch", (_gradient_case(750, (2, 3, 4)),), facts=sharing(ROLES))
self_attention_qkv_oracle = kinds.builds_and_runs_backward("self_attention_qkv_oracle", (
    *(Runs(Built(key=f"module{i}", args=(k,), seed=600 + i), (random_case(f"y{i}", (b, t, k), 650 + i),))
      for i, (b, t, k) in enumerate(MODULE_SHAPES)),
    _gradient_case(700, (2, 5, 4))), facts=sharing(ROLES))

EQUIVARIANCE_X = random_case("y", (2, 6, 4), 801)
PERMUTED_X = Case("y_perm", partial(_permuted, EQUIVARIANCE_X.inputs), f"permutation {list(PERMUTATION)}")
#: one module, run on x (y) and on x with its positions permuted (y_perm)
self_attention_qkv_equivariance = builds_and_runs("self_attention_qkv_equivariance", (
    Runs(Built(key="module", args=(4,), seed=800), (EQUIVARIANCE_X, PERMUTED_X)),), facts=sharing(ROLES))
