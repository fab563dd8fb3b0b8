"""BCART-PCFG with a categorical feature and missing cells, against an exact reference.

The reference takes every tree of :func:`bdtree_jax.exact.categorical.enumerate_mixed_trees`
(the rules of docs/categorical-missing.md under valid_cuts="data": ordered cuts, level
partitions, both values of every missing-value bit) and weighs it by the PCFG prior with the
bits, written here from the docs alone (plain recursion over the rows of each node, no grammar
code): ``φ^-b 2^-(b-1) Π L(leaves)`` when each node's rule is the one PCFG writes for its split
(of the rules giving the node's two row sets, the first in (feature, threshold or level mask)
order among those giving them with the most bit values), 0 otherwise."""

import collections
import math
from itertools import combinations

import jax
import numpy as np
import pytest
from scipy.special import gammaln, logsumexp

from bdtree_jax import pcfg
from bdtree_jax.features import SUPPORTS_CATEGORICAL
from bdtree_jax.exact.categorical import enumerate_mixed_trees, parse_tree_string, string_leaf_partition
from bdtree_jax.likelihoods import DirichletMultinomial
from bdtree_jax.priors import TreePrior
from bdtree_jax.tree import MISSING_CODE, distinct_trees, from_string, to_string

nan = np.nan
# x0 ordered with a missing cell, x1 categorical (levels 0, 1, 2) with a missing cell, x2 ordered:
# x2 <= 0.5 splits the rows as x1 in {1, 2} with the missing row left, so that pair is written
# with x2 (both bits give it) although x1 comes first
X = np.array([[1, 0, 0], [2, 1, 1], [nan, 2, 1], [4, 0, 0], [5, nan, 1], [3, 2, 1], [6, 0, 0]], float)
Y = np.array([0, 1, 1, 0, 0, 1, 1])
CATEGORICAL = np.array([False, True, False])
LEVEL_COUNT = np.array([0, 3, 0])
LEVELS = [None, np.array(["a", "b", "c"]), None]
LIK = DirichletMultinomial(2, 1.0)
LOG_PHI = 1.0
NUM_DRAWS = 100_000


def _grid(X):
    """Thresholds (F, C) and grid bins of ``X`` as the input layer makes them (ordered: midpoints
    of the distinct non-missing values; bin = thresholds strictly below; categorical: the level)."""
    mids = [np.diff(u) / 2 + u[:-1] for u in (np.unique(X[~np.isnan(X[:, f]), f]) for f in range(X.shape[1]))]
    thresholds = np.full((X.shape[1], max(len(m) for m in mids)), np.inf)
    for f, m in enumerate(mids):
        thresholds[f, : len(m)] = m
    return thresholds, mids


def _bins(X, mids):
    bins = np.full(X.shape, MISSING_CODE, np.int64)
    for f in range(X.shape[1]):
        ok = ~np.isnan(X[:, f])
        bins[ok, f] = X[ok, f] if CATEGORICAL[f] else np.searchsorted(mids[f], X[ok, f], side="left")
    return bins


def _reference(X, y, max_depth):
    """``{tree string: (is it PCFG's form?, log PCFG weight, leaves)}`` over every tree of the
    enumerator (module notes)."""
    F, miss = X.shape[1], np.isnan(X)
    values = [np.unique(X[~miss[:, f], f]) for f in range(F)]
    mids = [(u[:-1] + u[1:]) / 2 for u in values]
    ps = LIK.point_stats(y)

    def pairs_at(rows):
        """{row-set pair: {rule: how many of its bit values give the pair}} at a node."""
        out = collections.defaultdict(collections.Counter)
        for f in range(F):
            present, absent = rows[~miss[rows, f]], rows[miss[rows, f]]
            if not len(present):
                continue
            if CATEGORICAL[f]:
                avail = sorted(set(X[present, f].astype(int)))
                rules = [((f, sum(1 << s for s in S)), np.isin(X[present, f], S))
                         for k in range(1, len(avail)) for S in combinations(avail[1:], k)]
            else:
                c = np.searchsorted(values[f], X[present, f])
                rules = [((f, t), c <= t) for t in range(c.min(), c.max())]
            for rule, gl in rules:
                for bit in "LR":
                    left = frozenset(present[gl]) | frozenset(absent if bit == "L" else ())
                    right = frozenset(present[~gl]) | frozenset(absent if bit == "R" else ())
                    out[frozenset([left, right])][rule] += 1
        return out

    def leaf_log_lik(rows):
        s = ps[rows].sum(0)
        return float(gammaln(2.0) + gammaln(s + 1).sum() - gammaln(s.sum() + 2))

    def weigh(text):
        canonical, leaves, log_lik = True, 0, 0.0

        def rec(node, rows):
            nonlocal canonical, leaves, log_lik
            if node == "L":
                leaves += 1
                log_lik += leaf_log_lik(rows)
                return
            (f, op, arg, na), left, right = node
            x = X[rows, f]
            go_left = np.where(np.isnan(x), na == "L", (x <= arg) if op == "<=" else np.isin(x, list(arg)))
            rule = (f, int(np.argmin(np.abs(mids[f] - arg)))) if op == "<=" else (f, sum(1 << s for s in arg))
            counts = pairs_at(rows)[frozenset([frozenset(rows[go_left]), frozenset(rows[~go_left])])]
            most = max(counts.values())
            canonical &= rule == min(r for r, c in counts.items() if c == most)
            rec(left, rows[go_left])
            rec(right, rows[~go_left])

        rec(parse_tree_string(text), np.arange(len(X)))
        return canonical, -leaves * LOG_PHI - (leaves - 1) * math.log(2.0) + log_lik, leaves

    prior = TreePrior(alpha=0.95, beta=1.0, max_depth=max_depth)
    return {s: weigh(s) for s, _, _ in enumerate_mixed_trees(X, ps, prior, LIK, categorical=CATEGORICAL)}


# (rows, PCFG max_depth): 7 rows at depth <= 2 (608 of the enumerator's 1,363 trees are PCFG's);
# 5 rows unbounded (a tree on 5 rows is at most 4 deep, the enumerator's bound)
CASES = [(7, 2), (5, None)]


@pytest.fixture(scope="module", params=CASES, ids=lambda c: f"rows{c[0]}-depth{c[1]}")
def case(request):
    rows, max_depth = request.param
    x, y = X[:rows], Y[:rows]
    thresholds, mids = _grid(x)
    codes, cuts = pcfg.code_mixed_features(x, CATEGORICAL)
    g = pcfg.build_grammar(codes, LIK.point_stats(y), LIK, log_phi=LOG_PHI, max_depth=max_depth, boundary_cut=cuts,
                           categorical=CATEGORICAL, level_count=LEVEL_COUNT)
    ref = _reference(x, y, max_depth if max_depth is not None else rows - 1)
    weights = {s: w for s, (ok, w, _) in ref.items() if ok}
    log_z = logsumexp(list(weights.values()))
    probs = {s: math.exp(w - log_z) for s, w in weights.items()}
    return dict(X=x, y=y, g=g, ref=ref, probs=probs, log_z=log_z, thresholds=thresholds, mids=mids)


def _tree(case, s):
    return from_string(s, case["thresholds"], case["g"].heap_depth, level_count=LEVEL_COUNT)


def test_log_prob_of_every_tree_matches_exact(case):
    """log Pr[T | X, y] of every enumerated tree to 1e-4: PCFG's own trees, and the others (same
    row sets written with another rule) get the value of the tree PCFG writes for them."""
    g, bins, ps = case["g"], _bins(case["X"], case["mids"]), LIK.point_stats(case["y"])
    assert 50 < len(case["probs"]) < len(case["ref"])
    for s, (_, w, _) in case["ref"].items():
        np.testing.assert_allclose(pcfg.log_prob(g, _tree(case, s), bins, ps), w - case["log_z"], atol=1e-4)
    # a split on missingness alone is not a rule: x0 <= 6.5 sends every row with a value left
    split = _tree(case, "x0<=5.5|NA=R(L,L)")
    split.cut[0] = len(case["mids"][0])  # past the last threshold
    assert pcfg.log_prob(g, split, bins, ps) == -np.inf


def test_log_evidence_matches_exact(case):
    prior = [-b * LOG_PHI - (b - 1) * math.log(2.0) for ok, _, b in case["ref"].values() if ok]
    np.testing.assert_allclose(case["g"].log_evidence, case["log_z"] - logsumexp(prior), atol=1e-4)


def test_sampled_tree_frequencies_match_exact(case):
    g = case["g"]
    trees, log_lik, leaves = pcfg.sample_trees(g, jax.random.key(0), NUM_DRAWS)
    assert trees.nan_left is not None and trees.levels_left is not None
    first, _, counts = distinct_trees(trees)
    freq = {to_string(jax.tree.map(lambda a: a[i], trees), case["thresholds"], LEVELS): c / NUM_DRAWS
            for i, c in zip(first, counts)}
    assert set(freq) <= set(case["probs"])
    # expected Monte Carlo TV sum_T sqrt(p (1 - p) / (2 pi N)): 0.026 (7 rows), 0.024 (5 rows)
    tv = 0.5 * sum(abs(case["probs"].get(s, 0.0) - freq.get(s, 0.0)) for s in set(case["probs"]) | set(freq))
    assert tv < 0.035
    for i in first[:100]:  # per-draw log likelihood and leaf count
        s = to_string(jax.tree.map(lambda a: a[i], trees), case["thresholds"], LEVELS)
        _, w, b = case["ref"][s]
        assert leaves[i] == b
        np.testing.assert_allclose(log_lik[i] - LOG_PHI * b - (b - 1) * math.log(2.0), w, atol=1e-4)


def test_map_tree_is_the_exact_argmax(case):
    best = max(case["probs"], key=case["probs"].get)
    assert to_string(pcfg.map_tree(case["g"]), case["thresholds"], LEVELS) == best
    np.testing.assert_allclose(case["g"].log_qmax[-1, 0] - case["g"].log_q[-1, 0], math.log(case["probs"][best]),
                               atol=1e-4)


def test_predictive_is_the_exact_average(case):
    """Queries with missing values, each level and a value between training values: the
    predictive DP equals the average over the exact posterior of each query's leaf mean, and path
    sampling estimates it."""
    x, g = case["X"], case["g"]
    queries = np.array([[nan, 0, 0], [2.5, nan, 1], [nan, nan, 0], [4.5, 1, 1], [0.0, 2, 0], [9.0, 0, nan]])
    n, ps = len(x), LIK.point_stats(case["y"])
    expected = np.zeros((len(queries), 2))
    for s, p in case["probs"].items():
        for group in string_leaf_partition(s, np.vstack([x, queries])):
            train = [r for r in group if r < n]
            counts = ps[train].sum(0)
            for q in (r - n for r in group if r >= n):
                expected[q] += p * (counts + 1.0) / (counts.sum() + 2.0)
    q_codes = pcfg.query_codes(g, _bins(queries, case["mids"]))
    np.testing.assert_allclose(pcfg.predictive(g, q_codes), expected, atol=1e-5)
    boxes = pcfg.sample_paths(g, jax.random.key(1), q_codes, 20_000)
    np.testing.assert_allclose(np.asarray(LIK.leaf_mean(g.stats[boxes])).mean(0), expected, atol=0.01)


def test_without_missing_values_the_bits_are_prior_draws():
    """No missing cell: a 2-level categorical column splits the rows as the same column read as
    numbers, so the grammar has the plain one's boxes and evidence, and every bit is a fair coin."""
    x = np.array([[0, 1.0], [1, 3], [1, 2], [0, 5], [1, 4], [0, 0]])
    y = np.array([0, 1, 1, 0, 1, 1])
    ps = LIK.point_stats(y)
    categorical = np.array([True, False])
    codes, cuts = pcfg.code_mixed_features(x, categorical)
    mixed = pcfg.build_grammar(codes, ps, LIK, log_phi=LOG_PHI, max_depth=2, boundary_cut=cuts,
                               categorical=categorical, level_count=[2, 0])
    plain = pcfg.build_grammar(pcfg.code_features(x)[0], ps, LIK, log_phi=LOG_PHI, max_depth=2)
    assert plain.cand_nan_left is None and mixed.n_boxes == plain.n_boxes
    np.testing.assert_allclose(mixed.log_evidence, plain.log_evidence, atol=1e-5)
    trees, _, _ = pcfg.sample_trees(mixed, jax.random.key(2), 5_000)
    bits = np.asarray(trees.nan_left)[np.asarray(trees.is_split)]
    assert len(bits) > 2_000 and abs(bits.mean() - 0.5) < 0.03


def test_more_than_max_levels_is_a_clear_error():
    codes = np.c_[np.arange(20) % (pcfg.MAX_LEVELS + 1), np.arange(20)]
    with pytest.raises(ValueError, match=f"at most {pcfg.MAX_LEVELS} levels; column 0 has 9.*One-hot"):
        pcfg.build_grammar(codes, LIK.point_stats(np.arange(20) % 2), LIK, categorical=np.array([True, False]))


def test_too_many_boxes_is_a_clear_error():
    codes, cuts = pcfg.code_mixed_features(X, CATEGORICAL)
    with pytest.raises(ValueError, match="max_boxes=10 distinct boxes.*num_buckets=.*max_depth="):
        pcfg.build_grammar(codes, LIK.point_stats(Y), LIK, max_depth=2, boundary_cut=cuts, categorical=CATEGORICAL,
                           max_boxes=10)
    with pytest.raises(ValueError, match="GiB.*over the max_bytes=.*num_buckets=.*max_depth="):
        pcfg.build_grammar(codes, LIK.point_stats(Y), LIK, max_depth=2, boundary_cut=cuts, categorical=CATEGORICAL,
                           max_bytes=1e4, max_boxes=10**6)


def _frame(x):
    import pandas as pd

    codes = np.where(np.isnan(x[:, 1]), -1, np.nan_to_num(x[:, 1])).astype(int)
    return pd.DataFrame({"x0": x[:, 0], "color": pd.Categorical.from_codes(codes, ["a", "b", "c"]), "x2": x[:, 2]})


@pytest.mark.filterwarnings("ignore::bdtree_jax.data.MissingValueRoutingWarning")  # routing tested here; the warning in test_missing_routing.py
@pytest.mark.skipif("pcfg" not in SUPPORTS_CATEGORICAL, reason="method='pcfg' not yet in SUPPORTS_CATEGORICAL")
def test_sample_takes_the_table_itself(case):
    """bd.sample on the DataFrame (a category column with a missing cell, NaN in x0): the same
    grammar as above, its exact predictive on new rows with missing cells, MixedTree draws."""
    import bdtree_jax as bd

    x, y = case["X"], case["y"]
    max_depth = case["g"].max_depth
    method = bd.PCFG(log_phi=LOG_PHI, unbounded=max_depth is None)
    post = bd.sample(_frame(x), y, method=method, prior=TreePrior(max_depth=max_depth or 6), num_samples=500,
                     num_chains=1)
    np.testing.assert_allclose(post.log_evidence, case["g"].log_evidence, atol=1e-5)
    queries = np.array([[nan, 0, 0], [2.5, nan, 1], [4.5, 1, 1], [9.0, 2, nan]])
    q_codes = pcfg.query_codes(case["g"], _bins(queries, case["mids"]))
    np.testing.assert_allclose(post.predictive(_frame(queries)), pcfg.predictive(case["g"], q_codes), atol=1e-5)
    assert post.trees.nan_left is not None
    best = max(case["probs"], key=case["probs"].get)
    np.testing.assert_allclose(post.log_prob(post.map_tree()), math.log(case["probs"][best]), atol=1e-4)
    np.testing.assert_allclose(post.stats["log_prior"] + post.stats["log_lik"],
                               [[case["ref"][to_string(jax.tree.map(lambda a: a[0, i], post.trees), case["thresholds"],
                                                       LEVELS)][1] for i in range(500)]], atol=1e-4)


@pytest.mark.skipif("pcfg" not in SUPPORTS_CATEGORICAL, reason="method='pcfg' not yet in SUPPORTS_CATEGORICAL")
def test_a_column_with_too_many_levels_is_named_before_any_work():
    import pandas as pd

    import bdtree_jax as bd

    df = pd.DataFrame({"x0": np.arange(20.0), "shade": pd.Categorical(list("abcdefghij") * 2)})
    with pytest.raises(ValueError, match="column 'shade' has 10.*One-hot encode it"):
        bd.sample(df, np.arange(20) % 2, method="pcfg")
