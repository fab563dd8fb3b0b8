"""The JAX prior and likelihood evaluated on every enumerated tree equal the independent
enumeration's values, and the truncated prior sums to one."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.special import logsumexp

from bdtree_jax.data import make_split_grid
from bdtree_jax.exact import enumerate_trees
from bdtree_jax.kernels.cgm import CGMConfig, init
from bdtree_jax.likelihoods import DirichletMultinomial, NormalMeanShift
from bdtree_jax.priors import TreePrior, make_tree_data
from bdtree_jax.tree import Tree, from_string


@pytest.mark.parametrize(
    "task,min_leaf_size,max_depth", [("class", 1, 2), ("class", 2, 3), ("reg", 1, 2)]
)
def test_prior_and_likelihood_match_enumeration(toy_data, task, min_leaf_size, max_depth):
    X, y_class, y_reg = toy_data
    prior = TreePrior(max_depth=max_depth, alpha=0.8, beta=0.7, min_leaf_size=min_leaf_size)
    lik = DirichletMultinomial(2, 0.5) if task == "class" else NormalMeanShift(3.0, 0.3, 0.5, 0.6)
    ps = lik.point_stats(y_class if task == "class" else y_reg)
    trees = enumerate_trees(X, ps, prior, lik)
    # the truncated prior is a probability distribution over the enumerated trees
    np.testing.assert_allclose(logsumexp([lp for _, lp, _ in trees]), 0.0, atol=1e-9)
    grid = make_split_grid(X)
    data = make_tree_data(grid.bin(X), y_class if task == "class" else y_reg, prior, lik)
    config = CGMConfig.from_prior(prior)
    parsed = [from_string(s, grid.thresholds, max_depth) for s, _, _ in trees]
    stacked = Tree(*(jnp.asarray(np.stack(a)) for a in zip(*parsed)))
    states = jax.jit(jax.vmap(lambda t: init(None, data, config, t)))(stacked)
    np.testing.assert_allclose(np.asarray(states.log_prior), [lp for _, lp, _ in trees], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(states.log_lik), [ll for _, _, ll in trees], rtol=1e-5, atol=1e-4)


def test_invalid_rule_has_zero_prior(toy_data):
    X, y_class, _ = toy_data
    prior = TreePrior(max_depth=2, min_leaf_size=2)
    lik = DirichletMultinomial(2)
    grid = make_split_grid(X)
    data = make_tree_data(grid.bin(X), y_class, prior, lik)
    # x0 <= 1.5 leaves one row on the left: invalid with min_leaf_size=2
    t = Tree(*(jnp.asarray(a) for a in from_string("x0<=1.5(L,L)", grid.thresholds, 2)))
    assert np.isneginf(float(init(None, data, CGMConfig.from_prior(prior), t).log_prior))
    ok = Tree(*(jnp.asarray(a) for a in from_string("x0<=2.5(L,L)", grid.thresholds, 2)))
    assert np.isfinite(float(init(None, data, CGMConfig.from_prior(prior), ok).log_prior))


@pytest.mark.parametrize("min_leaf_size,n_values", [(1, 5), (3, 5), (3, None)])
def test_node_bounds_equal_per_node_masked_bounds(min_leaf_size, n_values):
    """Every node's bounds (per-node bin histograms when features have few bins, a grouped sort
    per level otherwise) equal one masked pass per node, on random trees of heavily tied bins
    (where order statistics are easy to get wrong) and of continuous features; so do the bounds
    that regrowing a subtree returns."""
    from bdtree_jax.priors import mask_bounds, node_bounds, node_stats, regrow_subtree

    rng = np.random.default_rng(1)
    n = 100
    X = rng.integers(0, n_values, size=(n, 3)).astype(float) if n_values else rng.normal(size=(n, 3))
    prior = TreePrior(max_depth=4, alpha=0.99, beta=0.0, min_leaf_size=min_leaf_size)
    lik = DirichletMultinomial(2)
    grid = make_split_grid(X)
    data = make_tree_data(grid.bin(X), rng.integers(0, 2, n), prior, lik)
    assert (data.bin_onehot is None) == (n_values is None or min_leaf_size == 1)
    state = init(None, data, CGMConfig.from_prior(prior))
    regrow = jax.jit(lambda s, node, u, data: regrow_subtree(s.tree, s.leaf_id, s.lo, s.hi, node, u, data,
                                                            min_leaf_size))
    score = jax.jit(lambda tree, data: init(None, data, CGMConfig.from_prior(prior), tree))
    per_node = jax.jit(jax.vmap(lambda mask, data: mask_bounds(mask, data, min_leaf_size), in_axes=(0, None)))
    for seed in range(6):
        u = jax.random.uniform(jax.random.PRNGKey(seed), (31, 3))
        node = jnp.int32(0) if seed < 3 else jnp.int32(int(np.flatnonzero(np.asarray(state.tree.is_split))[-1]))
        tree, leaf_id, lo_new, hi_new = regrow(state, node, u, data)
        state = score(tree, data)
        assert int(tree.is_split.sum()) >= 2  # a real tree, not the stump
        # regrowing also returns the new tree's leaves and bounds (seeds >= 3: below the root)
        np.testing.assert_array_equal(leaf_id, state.leaf_id)
        np.testing.assert_array_equal(lo_new, state.lo)
        np.testing.assert_array_equal(hi_new, state.hi)
        lo, hi = state.lo, state.hi  # node_bounds of the rescored tree
        depth = np.asarray([int(np.log2(i + 1)) for i in range(31)])
        leaf = np.asarray(leaf_id)
        masks = np.stack([
            (((leaf + 1) >> np.maximum(depth[leaf] - depth[node], 0)) - 1 == node) & (depth[leaf] >= depth[node])
            for node in range(31)
        ])
        lo_ref, hi_ref = per_node(jnp.asarray(masks), data)
        np.testing.assert_array_equal(lo, lo_ref)
        np.testing.assert_array_equal(hi, hi_ref)


@pytest.mark.parametrize("n,n_values", [(70, 6), (64, 32), (45, None)])
def test_child_bounds_from_row_bitsets_equal_masked_pass(n, n_values):
    """A grow's children's valid cuts read from the row bitsets (features with at most
    ``MAX_BITSET_BINS`` bins; row counts that do and do not fill the last 32-bit word) equal a
    masked min and max over the children's rows, for random nodes (empty, one row, all rows) and
    rules; data with more bins keep no bitsets."""
    from bdtree_jax.data import MAX_BITSET_BINS
    from bdtree_jax.priors import child_bounds, mask_bounds

    rng = np.random.default_rng(n)
    X = rng.integers(0, n_values, size=(n, 4)).astype(float) if n_values else rng.normal(size=(n, 4))
    prior = TreePrior(max_depth=3)
    grid = make_split_grid(X)
    data = make_tree_data(grid.bin(X), rng.integers(0, 2, n), prior, DirichletMultinomial(2))
    n_bins = int(grid.n_cuts.max()) + 1
    assert (data.bin_bits is None) == (n_bins > MAX_BITSET_BINS)
    assert make_tree_data(grid.bin(X), np.zeros(n, int), TreePrior(max_depth=3, min_leaf_size=2),
                          DirichletMultinomial(2)).bin_bits is None
    plain = data._replace(bin_bits=None)
    bounds = jax.jit(lambda f, c, rows, data: child_bounds(jnp.zeros(4, jnp.int32), jnp.zeros(4, jnp.int32), f, c,
                                                           rows, data.bins[:, f] <= c, data, 1))
    masked = jax.jit(jax.vmap(lambda m, data: mask_bounds(m, data, 1), in_axes=(0, None)))
    for trial in range(12):
        rows = rng.random(n) < [0.0, 1.0, 0.5, 0.1][trial % 4]
        if trial == 4:
            rows = np.arange(n) == n - 1
        f, c = int(rng.integers(4)), int(rng.integers(max(1, grid.n_cuts.min())))
        goes_left = np.asarray(data.bins)[:, f] <= c
        lo_ref, hi_ref = masked(jnp.asarray(np.stack([rows & goes_left, rows & ~goes_left])), plain)
        for d in (data, plain):
            lo, hi = bounds(jnp.int32(f), jnp.int32(c), jnp.asarray(rows), d)
            np.testing.assert_array_equal(lo, lo_ref)
            np.testing.assert_array_equal(hi, hi_ref)


def test_a_huge_max_depth_is_refused_at_once():
    """``TreePrior(max_depth=10**9)`` (e.g. from a damaged file) is the cap's ValueError, not Python's
    digit limit after seconds spent writing out ``2**(10**9 + 1)``."""
    with pytest.raises(ValueError, match=r"max_depth=1000000000 is over the cap of 14.*about 10\*\*3010"):
        TreePrior(max_depth=10**9)
