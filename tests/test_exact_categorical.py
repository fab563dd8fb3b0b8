"""The exact enumerator with categorical features and missing values (docs/categorical-missing.md):
the prior normalises, a categorical root has 2^(k-1) - 1 equally likely rules, missing-value bits
with no missing cell are prior draws, missing rows follow the bit, and availability follows the
``valid_cuts`` mode.  Likelihoods are recomputed here by hand (factorials of the leaves' counts)."""

import collections
import math
import re

import numpy as np
import pytest

from bdtree_jax.exact import (
    enumerate_mixed_trees, enumerate_posterior, enumerate_trees, leaf_partition, parse_tree_string,
    string_leaf_partition,
)
from bdtree_jax.likelihoods import DirichletMultinomial
from bdtree_jax.priors import TreePrior

nan = np.nan
LIK = DirichletMultinomial(2, 1.0)
# one categorical column of 3 / 4 levels (level codes), one ordered column with missing cells, and a
# mixed table whose rows hold every (level, value) pair of {0, 1, 2} x {1, 3} plus two rows with a
# missing cell, so that no node of any tree is empty (no min_leaf_size truncation under "ancestors")
CAT3 = np.array([[0], [1], [2], [0], [1], [2]], float)
CAT4 = np.array([[0], [1], [2], [3], [1], [2]], float)
CAT3_NAN = np.array([[0], [1], [2], [nan], [1], [2]], float)
ORD_NAN = np.array([[1], [2], [nan], [4], [7], [nan]], float)
MIXED = np.array([[0, 1], [1, 1], [2, 1], [0, 3], [1, 3], [2, 3], [nan, 1], [1, nan]], float)
Y = np.array([0, 1, 1, 0, 1, 0, 1, 0])
CASES = {
    "cat3": (CAT3, [True]),
    "cat4": (CAT4, [True]),
    "cat3_nan": (CAT3_NAN, [True]),
    "ordered_nan": (ORD_NAN, [False]),
    "mixed": (MIXED, [True, False]),
}


def prior(valid_cuts="data", max_depth=2, min_leaf_size=1, split_prior="uniform"):
    return TreePrior(max_depth=max_depth, alpha=0.95, beta=1.0, min_leaf_size=min_leaf_size,
                     split_prior=split_prior, valid_cuts=valid_cuts)


def enumerate_case(X, cat, **kw):
    y = Y[: len(X)]
    return enumerate_trees(X, LIK.point_stats(y), prior(**kw), LIK, categorical=np.array(cat))


def hand_log_lik(groups, y) -> float:
    """Dirichlet-multinomial(2 classes, concentration 1) marginal: a leaf with class counts
    (a, b) contributes log(a! b! / (a + b + 1)!)."""
    total = 0.0
    for g in groups:
        a = sum(y[i] == 0 for i in g)
        b = len(g) - a
        total += math.lgamma(a + 1) + math.lgamma(b + 1) - math.lgamma(a + b + 2)
    return total


def strip_bits(s: str) -> str:
    return re.sub(r"\|NA=[LR]", "", s)


def root_rule(s: str) -> str:
    return s[: s.index("(")] if s != "L" else "L"


@pytest.mark.parametrize("valid_cuts", ["data", "ancestors"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_prior_normalises(case, valid_cuts):
    X, cat = CASES[case]
    trees = enumerate_case(X, cat, valid_cuts=valid_cuts)
    assert len(trees) == len({s for s, _, _ in trees})  # every tree once
    assert all("|NA=" in s for s, _, _ in trees if s != "L")  # categorical or NaN: the model has bits
    np.testing.assert_allclose(np.exp([lp for _, lp, _ in trees]).sum(), 1.0, rtol=1e-12)


@pytest.mark.parametrize("valid_cuts", ["data", "ancestors"])
def test_range_split_prior_with_missing_cells(valid_cuts):
    trees = enumerate_case(ORD_NAN, [False], valid_cuts=valid_cuts, split_prior="range", max_depth=3)
    np.testing.assert_allclose(np.exp([lp for _, lp, _ in trees]).sum(), 1.0, rtol=1e-12)
    # a root cut weighs its gap between distinct non-missing values (1, 2, 4, 7): 1, 2, 3 over 6
    trees = enumerate_case(ORD_NAN, [False], valid_cuts=valid_cuts, split_prior="range", max_depth=1)
    got = {s: lp for s, lp, _ in trees}
    expected = {"L": math.log1p(-0.95)}
    for t, w in (("1.5", 1), ("3", 2), ("5.5", 3)):
        for bit in "LR":
            expected[f"x0<={t}|NA={bit}(L,L)"] = math.log(0.95) + math.log(w / 6) - math.log(2)
    assert got.keys() == expected.keys()
    for k in expected:
        assert got[k] == pytest.approx(expected[k], abs=1e-12)


@pytest.mark.parametrize("k", [2, 3, 4, 5])
@pytest.mark.parametrize("bits", [False, True])
def test_root_rules_on_k_levels(k, bits):
    X = np.arange(k, dtype=float)[:, None]
    trees = enumerate_trees(X, LIK.point_stats(np.arange(k) % 2), prior(max_depth=1), LIK,
                            categorical=np.array([True]), missing_bits=bits)
    splits = [(s, lp) for s, lp, _ in trees if s != "L"]
    assert len(splits) == (2 ** (k - 1) - 1) * (2 if bits else 1)
    lps = np.array([lp for _, lp in splits])
    expected = math.log(0.95) - math.log(2 ** (k - 1) - 1) - (math.log(2) if bits else 0.0)
    np.testing.assert_allclose(lps, expected, rtol=0, atol=1e-12)
    # every non-trivial two-way partition of the levels exactly once, level 0 always on the right
    partitions = set()
    for s, _ in splits:
        (f, op, S, nan_bit), _, _ = parse_tree_string(s)
        assert op == "in" and 0 not in S and S and nan_bit == ("L" if "|NA=L" in s else "R" if bits else None)
        partitions.add(frozenset([S, frozenset(range(k)) - S]))
    assert len(partitions) == 2 ** (k - 1) - 1


def _by_bit_free_string(trees):
    groups = collections.defaultdict(list)
    for s, lp, ll in trees:
        groups[strip_bits(s)].append((s, lp, ll))
    return groups


@pytest.mark.parametrize("valid_cuts", ["data", "ancestors"])
@pytest.mark.parametrize("case", ["numeric", "cat4", "mixed_no_nan"])
def test_bits_without_missing_cells_are_prior_draws(case, valid_cuts):
    X = {"numeric": np.array([[1, 5], [2, 3], [3, 6], [4, 1], [5, 2], [6, 4]], float), "cat4": CAT4,
         "mixed_no_nan": MIXED[:6]}[case]
    cat = np.array([False, False] if case == "numeric" else [True] if case == "cat4" else [True, False])
    ps = LIK.point_stats(Y[: len(X)])
    pr = prior(valid_cuts=valid_cuts, min_leaf_size=1)
    with_bits = enumerate_trees(X, ps, pr, LIK, categorical=cat, missing_bits=True)
    without = enumerate_trees(X, ps, pr, LIK, categorical=cat, missing_bits=False)
    assert all("|NA" not in s for s, _, _ in without)
    groups = _by_bit_free_string(with_bits)
    assert set(groups) == {s for s, _, _ in without}
    for s, lp, ll in without:
        n_splits = s.count("(")
        members = groups[s]
        assert len(members) == 2**n_splits
        for _, lp_bits, ll_bits in members:
            assert lp_bits == pytest.approx(lp - n_splits * math.log(2), abs=1e-12)
            assert ll_bits == pytest.approx(ll, abs=1e-12)
    # hence the same posterior over bit-free trees
    post = enumerate_posterior(X, ps, pr, LIK, categorical=cat, missing_bits=True)
    post0 = enumerate_posterior(X, ps, pr, LIK, categorical=cat, missing_bits=False)
    summed = collections.defaultdict(float)
    for s, p in post.items():
        summed[strip_bits(s)] += p
    for s, p in post0.items():
        assert summed[s] == pytest.approx(p, abs=1e-12)


@pytest.mark.parametrize("valid_cuts", ["data", "ancestors"])
@pytest.mark.parametrize("split_prior", ["uniform", "range"])
@pytest.mark.parametrize("min_leaf_size", [1, 2])
def test_ordered_without_bits_is_the_numeric_enumeration(valid_cuts, split_prior, min_leaf_size):
    """The mixed enumerator on numeric data without bits reproduces the original one."""
    X = np.array([[1, 5], [2, 3], [3, 6], [4, 1], [5, 2.5], [7, 4]], float)
    ps = LIK.point_stats(Y[:6])
    pr = prior(valid_cuts=valid_cuts, min_leaf_size=min_leaf_size, split_prior=split_prior)
    ours = enumerate_mixed_trees(X, ps, pr, LIK, categorical=np.array([False, False]), missing_bits=False)
    legacy = enumerate_trees(X, ps, pr, LIK)
    assert len(ours) == len(legacy) > (100 if min_leaf_size == 1 else 15)
    legacy = {s: (lp, ll) for s, lp, ll in legacy}
    for s, lp, ll in ours:
        assert legacy[s] == pytest.approx((lp, ll), abs=1e-12)
    boxes = [{0: (1.5, 3.5)}]
    ours = enumerate_mixed_trees(X, ps, pr, LIK, categorical=np.array([False, False]), missing_bits=False,
                                 boxes=boxes)
    legacy = {s: (lp, ll) for s, lp, ll in enumerate_trees(X, ps, pr, LIK, boxes=boxes)}
    assert len(ours) == len(legacy) < len(enumerate_trees(X, ps, pr, LIK))
    for s, lp, ll in ours:
        assert legacy[s] == pytest.approx((lp, ll), abs=1e-12)


def test_missing_rows_follow_the_bit():
    X = np.array([[1], [2], [nan], [4], [nan]], float)
    y = np.array([0, 0, 1, 1, 0])
    trees = {s: (lp, ll) for s, lp, ll in
             enumerate_trees(X, LIK.point_stats(y), prior(max_depth=1), LIK)}
    # cuts 1.5 and 3 (between the non-missing values 1, 2, 4), each with both bits; rows 2 and 4 are missing
    cases = {
        "x0<=1.5|NA=L(L,L)": [[0, 2, 4], [1, 3]],
        "x0<=1.5|NA=R(L,L)": [[0], [1, 2, 3, 4]],
        "x0<=3|NA=L(L,L)": [[0, 1, 2, 4], [3]],
        "x0<=3|NA=R(L,L)": [[0, 1], [2, 3, 4]],
    }
    assert set(trees) == {"L", *cases}
    for s, groups in cases.items():
        lp, ll = trees[s]
        assert ll == pytest.approx(hand_log_lik(groups, y), abs=1e-12)
        assert lp == pytest.approx(math.log(0.95) - math.log(2) - math.log(2), abs=1e-12)
    assert trees["L"] == pytest.approx((math.log1p(-0.95), hand_log_lik([range(5)], y)), abs=1e-12)


def test_categorical_routing_with_missing_level():
    X = np.array([[0], [1], [2], [nan], [1]], float)
    y = np.array([0, 1, 1, 0, 0])
    trees = {s: (lp, ll) for s, lp, ll in
             enumerate_trees(X, LIK.point_stats(y), prior(max_depth=1), LIK, categorical=np.array([True]))}
    lp, ll = trees["x0in{1,2}|NA=L(L,L)"]
    assert ll == pytest.approx(hand_log_lik([[1, 2, 3, 4], [0]], y), abs=1e-12)
    assert lp == pytest.approx(math.log(0.95) - math.log(3) - math.log(2), abs=1e-12)
    lp, ll = trees["x0in{2}|NA=R(L,L)"]
    assert ll == pytest.approx(hand_log_lik([[2], [0, 1, 3, 4]], y), abs=1e-12)


@pytest.mark.parametrize("valid_cuts", ["data", "ancestors"])
@pytest.mark.parametrize("case", ["cat3_nan", "ordered_nan", "mixed"])
def test_every_likelihood_matches_routing_the_string(case, valid_cuts):
    """Each enumerated tree's likelihood equals the one of its string's leaves (parsed and routed
    here, independently of the enumeration's bookkeeping)."""
    X, cat = CASES[case]
    y = Y[: len(X)]
    for s, _, ll in enumerate_case(X, cat, valid_cuts=valid_cuts):
        assert ll == pytest.approx(hand_log_lik(string_leaf_partition(s, X), y), abs=1e-10), s


def _child_rules(trees, root: str, side: int) -> set:
    """The rules ``(f, op, threshold or S, bit)`` at the ``side`` child (0 left, 1 right) of the trees
    whose root rule is ``root``."""
    out = set()
    for s, _, _ in trees:
        if s != "L" and root_rule(s) == root:
            child = parse_tree_string(s)[1 + side]
            if child != "L":
                out.add(child[0])
    return out


def test_availability_data_ignores_missing_rows():
    # min_leaf_size 2 counts non-missing rows only: of 1, 2, 3, 4 only the cut 2.5 keeps 2 on each side
    X = np.array([[1], [2], [3], [4], [nan], [nan]], float)
    trees = enumerate_trees(X, LIK.point_stats(Y[:6]), prior(max_depth=1, min_leaf_size=2), LIK)
    assert {root_rule(s) for s, _, _ in trees} == {"L", "x0<=2.5|NA=L", "x0<=2.5|NA=R"}
    # a node whose rows all miss a feature cannot split on it; categorical levels: those of the
    # node's non-missing rows.  x1 = 0 holds rows 0-2, with x0 missing on rows 0-1 and level 2 on row 2
    X = np.array([[nan, 0], [nan, 0], [2, 0], [0, 1], [1, 1], [2, 1], [3, 1]], float)
    y = np.array([0, 1, 0, 1, 1, 0, 0])
    cat = np.array([True, True])
    trees = enumerate_trees(X, LIK.point_stats(y), prior(max_depth=2), LIK, categorical=cat)
    assert _child_rules(trees, "x1in{1}|NA=L", 1) == set()  # right child: rows 0-2, one level of x0
    left = _child_rules(trees, "x1in{1}|NA=L", 0)  # rows 3-6: levels 0..3 of x0, all present
    assert {rule[:3] for rule in left} == {(0, "in", frozenset(S)) for S in powerset_nonempty({1, 2, 3})}
    # ancestors: every level of x0 stays available in the right child (S among the 7 subsets of
    # {1, 2, 3}), the children left empty being truncated (min_leaf_size 1): row 2 (level 2) must
    # be on the side the missing rows 0-1 do not take
    trees = enumerate_trees(X, LIK.point_stats(y), prior("ancestors", max_depth=2), LIK, categorical=cat)
    right = _child_rules(trees, "x1in{1}|NA=L", 1)
    assert right == {(0, "in", S, "L" if 2 not in S else "R") for S in powerset_nonempty({1, 2, 3})}


def powerset_nonempty(levels):
    levels = sorted(levels)
    return [frozenset(c for i, c in enumerate(levels) if mask >> i & 1) for mask in range(1, 2 ** len(levels))]


def test_availability_ancestors_follows_S():
    trees = enumerate_case(CAT4, [True], valid_cuts="ancestors", max_depth=2)
    for root, left_levels, right_levels in [("x0in{1,3}|NA=L", {1, 3}, {0, 2}), ("x0in{2}|NA=R", {2}, {0, 1, 3}),
                                             ("x0in{1,2,3}|NA=L", {1, 2, 3}, {0})]:
        for side, levels in ((0, left_levels), (1, right_levels)):
            rules = {r[:3] for r in _child_rules(trees, root, side)}  # no missing cell: both bits
            k = len(levels)
            assert len(rules) == (2 ** (k - 1) - 1 if k >= 2 else 0)
            assert all(S <= levels and min(levels) not in S for _, _, S in rules)
    # under "data" the same rules, as every level of CAT4 has rows in both children
    data = enumerate_case(CAT4, [True], valid_cuts="data", max_depth=2)
    assert {s for s, _, _ in data} == {s for s, _, _ in trees}


def test_availability_data_versus_ancestors_on_rows():
    """Under "data" a child's levels are its rows' levels; under "ancestors" they are S."""
    X = np.array([[0, 0], [1, 0], [2, 1], [3, 1], [1, 1], [2, 0]], float)
    cat = np.array([True, True])
    y = Y[:6]
    data = enumerate_trees(X, LIK.point_stats(y), prior("data"), LIK, categorical=cat)
    anc = enumerate_trees(X, LIK.point_stats(y), prior("ancestors"), LIK, categorical=cat)
    # root x1in{1}: left rows 2, 3, 4 (levels 1, 2, 3 of x0), right rows 0, 1, 5 (levels 0, 1, 2)
    assert {r[2] for r in _child_rules(data, "x1in{1}|NA=R", 0)} == set(powerset_nonempty({2, 3}))
    # ancestors: x0 keeps its 4 levels (7 rules) but those leaving a child empty are truncated;
    # the empty child is the one holding level 0 (and no other level of rows 2-4)
    got = {r[:3] for r in _child_rules(anc, "x1in{1}|NA=R", 0)}
    assert got == {(0, "in", frozenset(S)) for S in ({1}, {2}, {3}, {1, 2}, {1, 3}, {2, 3})}


def test_parse_and_leaf_partition_of_the_grammar():
    s = "x2in{0,2}|NA=R(L,x0<=1.5|NA=L(L,L))"
    assert parse_tree_string(s) == ((2, "in", frozenset({0, 2}), "R"), "L",
                                    ((0, "<=", 1.5, "L"), "L", "L"))
    X = np.array([[1, 0, 0], [2, 0, 1], [nan, 0, 1], [1, 0, nan], [3, 0, 2]], float)
    # x2 in {0, 2}: rows 0, 4 left; rows 1, 2 and the missing row 3 right, where x0 <= 1.5 sends
    # row 3 (x0 = 1) and the missing row 2 left and row 1 (x0 = 2) right
    assert string_leaf_partition(s, X) == frozenset([frozenset([0, 4]), frozenset([2, 3]), frozenset([1])])
    # the same tree as padded arrays (is_split, feature, cut, nan_left, levels_left: bit l of word
    # l // 32), missing code 9
    bins = np.array([[0, 0, 0], [1, 0, 1], [9, 0, 1], [0, 0, 9], [2, 0, 2]])
    arrays = (np.array([True, False, True]), np.array([2, 0, 0]), np.array([0, 0, 0]),
              np.array([False, False, True]), np.array([[0b101], [0], [0]], np.uint32))
    assert leaf_partition(arrays, bins, categorical=np.array([False, False, True]), missing_code=9) == \
        string_leaf_partition(s, X)
    for bad in ["x0<=1(L)", "x0in{1}(L,L", "x0in{1}(L,L)L", "y0<=1(L,L)"]:
        with pytest.raises(ValueError):
            parse_tree_string(bad)


def test_errors():
    ps = LIK.point_stats(Y[:6])
    with pytest.raises(ValueError, match="missing_bits=False"):
        enumerate_trees(ORD_NAN, ps, prior(), LIK, missing_bits=False)
    with pytest.raises(ValueError, match="box"):
        enumerate_trees(CAT3, ps, prior(), LIK, categorical=np.array([True]), boxes=[{0: (0.5, 1.5)}])
    with pytest.raises(ValueError, match="pinball"):
        enumerate_trees(ORD_NAN, ps, TreePrior(max_depth=2, structure="pinball"), LIK)
    with pytest.raises(ValueError, match="level codes"):
        enumerate_trees(CAT3 + 0.5, ps, prior(), LIK, categorical=np.array([True]))
    with pytest.raises(ValueError, match="mask"):
        enumerate_trees(CAT3, ps, prior(), LIK, categorical=[0])
