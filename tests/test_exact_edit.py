"""The exact EDITTREE prior / posterior (:func:`bdtree_jax.exact.enumerate_edit_prior`): hand-computed
cases, support against :func:`enumerate_trees`, and a Monte Carlo simulation of the edit process
written independently of the exact forward pass."""

import math

import numpy as np
import pytest

from bdtree_jax.data import make_split_grid
from bdtree_jax.exact import (
    enumerate_edit_posterior,
    enumerate_edit_prior,
    enumerate_posterior,
    enumerate_trees,
    tv_distance,
)
from bdtree_jax.likelihoods import DirichletMultinomial
from bdtree_jax.priors import TreePrior
from bdtree_jax.tree import Tree, from_string, to_string

from helpers import TOY_X, TOY_Y_CLASS

X, Y = TOY_X, TOY_Y_CLASS
LIK = DirichletMultinomial(2, 1.0)
PS = np.asarray(LIK.point_stats(Y), float)
PRIOR = TreePrior(max_depth=2)


def _p_k(mean_edits, max_edits):
    q = mean_edits / (1 + mean_edits)
    w = np.array([q**k for k in range(max_edits + 1)])
    return w / w.sum()


def test_zero_edits_is_the_initial_tree():
    for t0 in ["L", "x0<=3.5(L,L)", "x0<=3.5(L,x1<=2.5(L,L))"]:
        assert enumerate_edit_prior(X, PRIOR, t0, mean_edits=2.0, max_edits=0) == {t0: 1.0}


def test_one_edit_from_the_stump_is_a_grow():
    mean_edits = 0.7
    p0, p1 = _p_k(mean_edits, 1)
    got = enumerate_edit_prior(X, PRIOR, "L", mean_edits=mean_edits, max_edits=1)
    grid = make_split_grid(X)
    # every value distinct, m = 1: both features have all their n_cuts cuts valid at the root
    n_feat = int((grid.n_cuts > 0).sum())
    expected = {"L": p0}
    for f in range(X.shape[1]):
        for c in range(grid.n_cuts[f]):
            t = Tree(np.array([True, False, False]), np.array([f, 0, 0]), np.array([c, 0, 0]))
            expected[to_string(t, grid.thresholds)] = p1 / n_feat / grid.n_cuts[f]
    assert set(got) == set(expected)
    for s, p in expected.items():
        assert got[s] == pytest.approx(p, rel=1e-12), s
    # the one-split trees of enumerate_trees are exactly those reached
    one_split = {s for s, _, _ in enumerate_trees(X, PS, PRIOR, LIK) if s.count("<=") == 1}
    assert one_split == set(got) - {"L"}


def test_support_and_normalisation():
    got = enumerate_edit_prior(X, PRIOR, "x0<=3.5(L,L)", mean_edits=1.5, max_edits=4)
    assert sum(got.values()) == pytest.approx(1.0, abs=1e-12)
    assert all(p > 0 for p in got.values())
    support = {s for s, _, _ in enumerate_trees(X, PS, PRIOR, LIK)}
    assert set(got) <= support
    assert any(s.count("<=") == 3 for s in got)  # four edits reach full depth-2 trees


def test_boxes_are_respected():
    boxes = [{"x0": (2.0, 4.5), "x1": (0.0, 2.2)}]  # x0<=2.5, x0<=3.5, x1<=1.5 cut it at the root
    free = enumerate_edit_prior(X, PRIOR, "x1<=3.5(L,L)", mean_edits=1.5, max_edits=4)
    got = enumerate_edit_prior(X, PRIOR, "x1<=3.5(L,L)", mean_edits=1.5, max_edits=4, boxes=boxes)
    assert sum(got.values()) == pytest.approx(1.0, abs=1e-12)
    allowed = {s for s, _, _ in enumerate_trees(X, PS, PRIOR, LIK, boxes=boxes)}
    assert set(got) <= allowed
    assert set(free) - allowed  # without the box some reached trees cut it
    assert "x0<=3.5(L,L)" in free and "x0<=3.5(L,L)" not in got
    with pytest.raises(ValueError, match="initial_tree"):
        enumerate_edit_prior(X, PRIOR, "x0<=3.5(L,L)", mean_edits=1.0, max_edits=2, boxes=boxes)


def test_invalid_initial_tree_raises():
    m2 = TreePrior(max_depth=2, min_leaf_size=2)
    with pytest.raises(ValueError, match="initial_tree"):  # one row on the left
        enumerate_edit_prior(X, m2, "x0<=1.5(L,L)", mean_edits=1.0, max_edits=2)
    with pytest.raises(ValueError, match="initial_tree"):  # left child empty
        enumerate_edit_prior(X, PRIOR, "x0<=3.5(x0<=4.5(L,L),L)", mean_edits=1.0, max_edits=2)
    with pytest.raises(ValueError, match="initial_tree"):  # deeper than max_depth
        enumerate_edit_prior(X, TreePrior(max_depth=1), "x0<=3.5(x1<=2.5(L,L),L)", mean_edits=1.0, max_edits=2)


# ----------------------------------------------------------------------------------------------
# Monte Carlo simulation of the edit process, written directly from the definition


def _simulate(prior, t0, mean_edits, max_edits, n_draws, seed):
    grid = make_split_grid(X)
    bins = grid.bin(X)
    n, F = bins.shape
    m, D = prior.min_leaf_size, prior.max_depth
    init = from_string(t0, grid.thresholds, D)
    start = {int(i): (int(init.feature[i]), int(init.cut[i])) for i in np.flatnonzero(init.is_split)}
    rng = np.random.default_rng(seed)
    p_k = _p_k(mean_edits, max_edits)

    def depth(i):
        return int(math.floor(math.log2(i + 1)))

    memo = {}

    def cuts_of(rows, f):  # brute force: both sides keep >= m rows
        key = (rows.tobytes(), f)
        if key not in memo:
            col = bins[rows, f]
            memo[key] = [c for c in range(grid.n_cuts[f]) if (col <= c).sum() >= m and (col > c).sum() >= m]
        return memo[key]

    def node_rows(tree):
        rows = {0: np.arange(n)}
        for i in sorted(tree):
            f, c = tree[i]
            r = rows[i]
            rows[2 * i + 1], rows[2 * i + 2] = r[bins[r, f] <= c], r[bins[r, f] > c]
        return rows

    def valid(tree):
        rows = node_rows(tree)
        return all(c in cuts_of(rows[i], f) for i, (f, c) in tree.items())

    def draw_rule(rows):
        feats = [f for f in range(F) if cuts_of(rows, f)]
        f = feats[rng.integers(len(feats))]
        cuts = cuts_of(rows, f)
        return f, cuts[rng.integers(len(cuts))]

    def one_edit(tree):
        rows = node_rows(tree)
        leaves = [j for j in rows if j not in tree]
        moves = {
            "grow": [j for j in leaves if depth(j) < D and any(cuts_of(rows[j], f) for f in range(F))],
            "prune": [i for i in tree if 2 * i + 1 not in tree and 2 * i + 2 not in tree],
            "change": list(tree),
        }
        moves = {k: v for k, v in moves.items() if v}
        if not moves:
            return tree
        kind = sorted(moves)[rng.integers(len(moves))]
        node = moves[kind][rng.integers(len(moves[kind]))]
        new = dict(tree)
        if kind == "prune":
            del new[node]
        else:
            new[node] = draw_rule(rows[node])
        return new if valid(new) else tree

    def string(tree):
        is_split = np.zeros(2 ** (D + 1) - 1, bool)
        feature = np.zeros_like(is_split, np.int32)
        cut = np.zeros_like(is_split, np.int32)
        for i, (f, c) in tree.items():
            is_split[i], feature[i], cut[i] = True, f, c
        return to_string(Tree(is_split, feature, cut), grid.thresholds)

    counts = {}
    for _ in range(n_draws):
        tree = dict(start)
        for _ in range(rng.choice(max_edits + 1, p=p_k)):
            tree = one_edit(tree)
        s = string(tree)
        counts[s] = counts.get(s, 0) + 1
    return {s: c / n_draws for s, c in counts.items()}


@pytest.mark.parametrize(
    "prior, tv_max",
    # sampling noise alone gives TV ~ 0.020 (256 trees) and ~ 0.008 (17 trees) at 20,000 draws;
    # treating invalid edits as rejected-and-redrawn instead of no-ops gives 0.025 in the second case
    [(TreePrior(max_depth=2), 0.03), (TreePrior(max_depth=3, min_leaf_size=2), 0.02)],
)
def test_matches_monte_carlo_simulation(prior, tv_max):
    t0 = "x0<=3.5(L,L)"
    n_draws = 20_000
    exact = enumerate_edit_prior(X, prior, t0, mean_edits=1.5, max_edits=5)
    empirical = _simulate(prior, t0, 1.5, 5, n_draws, seed=1)
    assert set(empirical) <= set(exact)
    assert tv_distance(exact, empirical) < tv_max
    # every tree of non-negligible mass within 5 binomial standard errors
    for s, p in exact.items():
        if p > 0.005:
            assert abs(empirical.get(s, 0.0) - p) < 5 * math.sqrt(p * (1 - p) / n_draws), (s, p, empirical.get(s))


def test_posterior():
    t0 = "x0<=3.5(L,L)"
    kw = dict(mean_edits=1.5, max_edits=3)
    prior_d = enumerate_edit_prior(X, PRIOR, t0, **kw)
    flat = enumerate_edit_posterior(X, PS, PRIOR, LIK, t0, beta=0.0, **kw)
    assert set(flat) == set(prior_d)
    for s in prior_d:
        assert flat[s] == pytest.approx(prior_d[s], rel=1e-10)
    # beta = 1: the edit prior times enumerate_trees' marginal likelihood
    post = enumerate_edit_posterior(X, PS, PRIOR, LIK, t0, **kw)
    log_lik = {s: ll for s, _, ll in enumerate_trees(X, PS, PRIOR, LIK)}
    w = {s: prior_d[s] * math.exp(log_lik[s]) for s in prior_d}
    z = sum(w.values())
    assert sum(post.values()) == pytest.approx(1.0, abs=1e-12)
    for s in post:
        assert post[s] == pytest.approx(w[s] / z, rel=1e-8)
    assert tv_distance(post, prior_d) > 0.01  # the likelihood matters
    # differs from the CGM98 posterior (a different prior)
    assert tv_distance(post, enumerate_posterior(X, PS, PRIOR, LIK)) > 0.01
