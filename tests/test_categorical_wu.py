"""The WU restructure and schedule with a categorical feature and missing cells
(:mod:`bdtree_jax.kernels.wu`) against :func:`bdtree_jax.exact.categorical.enumerate_mixed_trees`,
an independent implementation of the rule prior of docs/categorical-missing.md.

* On a fixed leaf partition ("fibre": the enumerated trees with that partition, routed by the
  enumerator's own :func:`~bdtree_jax.exact.categorical.string_leaf_partition`): the replayed
  proposal ``q(. | P)`` sums to 1 over the fibre (less the trees deeper than the heap), drawn
  proposals follow it, and the MH chain's stationary law (from its transition matrix) is the prior
  on the fibre -- not so without ``W(S)`` (negative control).  Also with missing cells only (no
  categorical feature).
* Design note test 4: restructure alone (the likelihood never enters its ratio) visits the fibre
  with the prior's frequencies.
* The WU schedule within TV 0.04 of the exact posterior on the 7 rows of
  tests/test_categorical_cgm.py.
"""

import collections
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.special import logsumexp
from scipy.stats import chisquare

from bdtree_jax.driver import run_chains
from bdtree_jax.exact.categorical import enumerate_mixed_trees, string_leaf_partition
from bdtree_jax.kernels import _moves, cgm, wu
from bdtree_jax.priors import TreePrior
from bdtree_jax.tree import from_string, to_string

from helpers import stationary_tv
from test_categorical_cgm import CATEGORICAL, LEVELS, LIK, X, Y, _exact, _frequencies, _kernel_data, _tv

# groups {0} {1,4} {2,5} {3,6}: level 0 shared by {0} and {3,6}; row 2 misses x0 beside row 5
CAT_START = "x0<=1.5|NA=R(L,x1in{1}|NA=L(L,x0<=3.5|NA=L(L,L)))"
CAT_START_2 = "x1in{1}|NA=L(x0<=2.5|NA=L(L,L),x1in{2}|NA=L(L,L))"
# x1 ordered: groups {0} {1} {2,3,5} {4,6} (row 2 misses x0 beside rows 3, 5); at depth 2 most of
# the fibre's trees are deeper than the heap (the capacity rule)
MISSING_START_2 = "x0<=2.5|NA=R(x0<=1.5|NA=L(L,L),x0<=4.5|NA=L(L,L))"
# groups {0} {1,2} {3,5} {4} {6}
MISSING_START = "x0<=1.5|NA=R(L,x0<=4.5|NA=L(x0<=2.5|NA=L(L,L),x0<=5.5|NA=L(L,L)))"


@functools.lru_cache(maxsize=None)
def _enumerated(max_depth: int, categorical: bool):
    prior = TreePrior(alpha=0.95, beta=1.0, max_depth=max_depth)
    cat = CATEGORICAL if categorical else np.zeros(2, bool)
    trees = enumerate_mixed_trees(X, LIK.point_stats(Y), prior, LIK, categorical=cat, missing_bits=True)
    partitions = [string_leaf_partition(s, X) for s, _, _ in trees]
    return prior, trees, partitions


def _setup(max_depth: int, start: str, categorical: bool = True):
    """Data, the general CGM state at ``start`` and its fibre: names, prior on the fibre."""
    prior, trees, partitions = _enumerated(max_depth, categorical)
    grid, data = _kernel_data(X, prior)
    if not categorical:  # x1 read as an ordered feature (bins 0, 1, 2 are its values' ranks)
        grid.level_count, grid.n_cuts = np.array([0, 0]), np.array([grid.n_cuts[0], 2])
        grid.thresholds = np.full((2, 5), np.inf)
        grid.thresholds[0] = [1.5, 2.5, 3.5, 4.5, 5.5]
        grid.thresholds[1, :2] = [0.5, 1.5]
        from bdtree_jax.priors import make_tree_data

        codes = np.asarray(data.bins)
        data = make_tree_data(codes, Y, prior, LIK, grid=grid)
    target = string_leaf_partition(start, X)
    fibre = [(s, lp) for (s, lp, _), part in zip(trees, partitions) if part == target]
    names = [s for s, _ in fibre]
    log_prior = np.array([lp for _, lp in fibre])
    config = cgm.CGMConfig.from_prior(prior, general_rules=True)
    state = jax.jit(lambda t: cgm.init(None, data, config, tree=t))(_tree(start, grid, max_depth))
    return grid, data, config, state, names, np.exp(log_prior - logsumexp(log_prior))


def _tree(s: str, grid, max_depth: int):
    return jax.tree.map(jnp.asarray, from_string(s, grid.thresholds, max_depth, grid.level_count))


def _levels(grid):
    return LEVELS if np.any(grid.level_count) else None


FIBRES = [  # (max_depth, start, categorical, fibre size, q's mass inside the heap)
    (2, "x1in{1}|NA=L(x0<=2.5|NA=R(L,L),L)", True, 12, 1.0),
    pytest.param(3, CAT_START, True, 114, 1.0, marks=pytest.mark.slow),
    pytest.param(3, CAT_START_2, True, 92, 1.0, marks=pytest.mark.slow),
    (2, MISSING_START_2, False, None, None),
    pytest.param(3, MISSING_START, False, None, None, marks=pytest.mark.slow),
]


@pytest.mark.parametrize("max_depth,start,categorical,size,mass", FIBRES)
def test_restructure_is_exact_on_the_fibre(max_depth, start, categorical, size, mass):
    """Replayed ``q`` over the fibre, the stationary law of the MH transition matrix, drawn
    proposals against ``q``; negative control: ``W(S)`` dropped from ``Φ``."""
    grid, data, config, state, names, pi = _setup(max_depth, start, categorical)
    if size is not None:
        assert len(names) == size
    g = wu.group_codes(state, data)
    K = int(g.is_group.sum())
    assert K == len(string_leaf_partition(start, X))
    heaps = jax.tree.map(lambda *a: jnp.stack(a), *[_tree(s, grid, max_depth) for s in names])
    N = heaps.is_split.shape[1]
    scores = jax.device_get(jax.jit(jax.vmap(lambda t: _moves.score(t, data, config, 1.0)))(heaps))
    index = {s: i for i, s in enumerate(names)}
    for weights in ("prior", "uniform"):
        rc = wu.RestructureConfig(max_depth, 1, weights)
        replay = jax.jit(jax.vmap(lambda t, rc=rc: wu._sweep(jnp.zeros(2 * N), jax.random.key(0), t, jnp.array([False]),
                                                              state, g, data, rc)))
        rep = jax.device_get(jax.tree.map(lambda a: a[:, 0], replay(heaps)))
        assert rep.valid.all() and not rep.overflow.any()
        q = np.exp(np.asarray(rep.log_q, float))
        if mass is not None:
            np.testing.assert_allclose(q.sum(), mass, atol=1e-5)
        else:
            assert 0.05 < q.sum() <= 1 + 1e-5
        phi = np.asarray(scores.log_prior, float) - rep.log_q
        assert stationary_tv(q, phi, pi) < 1e-4
        if weights == "prior":
            if max_depth == 3:  # negative control: Φ without Σ log W (at depth 2 every W is equal)
                assert stationary_tv(q, phi - rep.log_W, pi) > 0.05
            prior_q = q
    # drawn proposals follow q; the proposed state is the re-scored tree
    rc = wu.RestructureConfig(max_depth, 1)
    n = 4000
    draws = jax.vmap(lambda k: wu.draw_restructure(k, max_depth, general=True))(jax.random.split(jax.random.key(1), n))
    proposed, phi_new, phi_old, ok, Ks, _ = jax.device_get(
        jax.jit(jax.vmap(lambda d: wu.propose(d, state, data, rc)))(draws))
    assert (Ks == K).all()
    counts = collections.Counter(to_string(jax.tree.map(lambda a: a[i], proposed.tree), grid.thresholds, _levels(grid))
                                 for i in np.flatnonzero(ok))
    assert set(counts) <= set(names), "left the fibre"
    # Pearson's chi-square of the drawn trees against n q (cells of expected count < 5 pooled, and the
    # trees beyond the heap as one more cell)
    expected = n * np.append(prior_q, max(1.0 - prior_q.sum(), 0.0))
    observed = np.append([counts.get(s, 0) for s in names], n - ok.sum())
    small = expected < 5
    expected = np.append(expected[~small], expected[small].sum())
    observed = np.append(observed[~small], observed[small].sum())
    keep = expected > 0
    assert chisquare(observed[keep], expected[keep] * observed.sum() / expected[keep].sum()).pvalue > 1e-4
    np.testing.assert_allclose(proposed.log_lik[ok], float(state.log_lik), rtol=1e-5, atol=1e-5)  # ratio 1
    i = int(np.flatnonzero(ok)[0])
    k = index[to_string(jax.tree.map(lambda a: a[i], proposed.tree), grid.thresholds, _levels(grid))]
    np.testing.assert_allclose(proposed.log_prior[i], scores.log_prior[k], atol=1e-5)


@functools.lru_cache(maxsize=None)
def _restructure_chains(rc, n_steps: int):
    def run(key, state, data):
        draws = jax.vmap(lambda k: wu.draw_restructure(k, rc.max_depth, general=True))(jax.random.split(key, n_steps))

        def body(s, d):
            s, info = wu.restructure_step(d, s, data, rc)
            return s, (s.tree, info.accepted)

        return jax.lax.scan(body, state, draws)[1]

    return jax.jit(jax.vmap(run, in_axes=(0, None, None)))


@pytest.mark.xla_optimized
@pytest.mark.slow  # the default job keeps the fibre's exact test (test_restructure_is_exact_on_the_fibre, depth 2)
@pytest.mark.parametrize("start,drop_w", [(CAT_START, False), (CAT_START_2, False), (CAT_START, True)])
def test_restructure_alone_samples_the_prior_on_the_fibre(start, drop_w):
    """Design note test 4: 8 chains x 10,000 restructures from a 4-group tree (categorical
    components, a group with a missing row) at depth 3 visit only the fibre, with the prior's
    frequencies restricted to it (TV <= 0.035; observed 0.016 and 0.015, where 80,000 iid draws
    give 0.015 and 0.013); the W-dropping control fails (observed 0.068)."""
    grid, data, _, state, names, pi = _setup(3, start)
    rc = wu.RestructureConfig(3, 1, drop_w=drop_w)
    trees, accepted = jax.device_get(_restructure_chains(rc, 10_000)(jax.random.split(jax.random.key(5), 8),
                                                                     state, data))
    flat = jax.tree.map(lambda a: a.reshape((-1,) + a.shape[2:]), trees)
    counts = collections.Counter(to_string(jax.tree.map(lambda a: a[i], flat), grid.thresholds, LEVELS)
                                 for i in range(flat.is_split.shape[0]))
    total = sum(counts.values())
    assert set(counts) <= set(names), "left the fibre"
    tv = _tv({s: c / total for s, c in counts.items()}, dict(zip(names, pi)))
    if drop_w:
        assert tv > 0.05, tv
    else:
        assert tv <= 0.035, tv
        assert accepted.mean() > 0.1


@pytest.mark.xla_optimized
@pytest.mark.slow  # the default job keeps the restructure's exact fibre test and WU's numeric exact tests
@pytest.mark.parametrize("weights", ["prior", "uniform"])
def test_wu_matches_exact_posterior(weights):
    """The WU schedule (2 general CGM steps, one restructure, 2 general CGM steps) within TV 0.04
    of the exact posterior over the 1,089 trees of depth <= 2 (120,000 draws, whose iid floor is
    0.022; at 60,000 draws, floor 0.031, observed 0.034 and 0.032 for the two weights)."""
    prior = TreePrior(alpha=0.95, beta=1.0, max_depth=2)
    grid, data = _kernel_data(X, prior)
    config = wu.WUConfig(cgm.CGMConfig.from_prior(prior, general_rules=True), n_local=2, weights=weights)
    traces, _ = run_chains(wu.wu(config), data, key=jax.random.key(7), num_chains=4, num_iterations=30_000,
                           progress=False)
    assert np.asarray(traces["restructure_accepted"]).mean() > 0.05
    sampled, exact = _frequencies(traces, grid.thresholds), _exact(prior)
    assert set(sampled) <= set(exact)
    assert _tv(sampled, exact) < 0.04


def _penguin_rows():
    import bdtree_jax as bd

    X, y = bd.datasets.load("penguins")
    rows = np.r_[3, 0:344:6]
    return X.iloc[rows], y.iloc[rows]


def test_sample_wu_refuses_gibbs_for_categorical_columns_and_missing_cells():
    """``restructure="gibbs"`` is refused on raw penguins rows (strings, a row of NaN
    measurements) before anything is compiled."""
    import bdtree_jax as bd
    from bdtree_jax import driver

    X, y = _penguin_rows()
    before = driver.trace_count()
    with pytest.raises(ValueError, match=r"method='wu': restructure='gibbs' .* not available with categorical"):
        bd.sample(X, y, method=bd.WU(restructure="gibbs"), num_warmup=2, num_samples=2, num_chains=1)
    assert driver.trace_count() == before


@pytest.mark.slow
def test_sample_wu_on_a_table_with_categorical_columns_and_missing_cells():
    """``bd.sample(method="wu")`` on raw penguins rows draws trees with level sets and
    missing-value bits (the kernel's exactness on such rules: the tests above)."""
    import bdtree_jax as bd

    X, y = _penguin_rows()
    post = bd.sample(X, y, method=bd.WU(num_local_steps=2), prior=bd.TreePrior(max_depth=3), num_warmup=30, num_samples=30,
                     num_chains=1, seed=1)
    trees = post.trees
    assert trees.levels_left is not None and trees.nan_left is not None
    assert np.isfinite(np.asarray(post.stats["log_prior"])).all()
    assert np.asarray(trees.is_split)[:, -1, 0].all()  # the tree splits the three species


@pytest.mark.xla_optimized
@pytest.mark.slow
def test_tempered_wu_matches_exact_posterior():
    """Tempered WU (3 rungs): the cold chain within TV 0.04 of the exact posterior."""
    from bdtree_jax.kernels.tempering import ladder, tempered

    prior = TreePrior(alpha=0.95, beta=1.0, max_depth=2)
    grid, data = _kernel_data(X, prior)
    config = wu.WUConfig(cgm.CGMConfig.from_prior(prior, general_rules=True), n_local=2)
    traces, _ = run_chains(tempered(wu.wu(config), ladder(3)), data, key=jax.random.key(8), num_chains=4,
                           num_iterations=30_000, progress=False)
    sampled, exact = _frequencies(traces, grid.thresholds), _exact(prior)
    assert set(sampled) <= set(exact)
    assert _tv(sampled, exact) < 0.04
