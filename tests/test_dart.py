"""DART (kernels/dart.py, priors/feature_weights.py, ``sparse=True`` on the BART estimators).

Fast (the default job): the weighted feature draw against its density; the weighted tree prior
with equal weights against the unweighted one; the ``s`` step alone on fixed trees against its
exact conditional (a Beta, by the renormalisation over each node's available features) with the
correction dropped as the planted error; the ``theta`` steps against their exact conditional by
quadrature; the estimators end to end and their input errors.  Slow: Geweke's "getting it right"
of the whole sparse sweep (trees, leaves, sigma, s, theta) with the grow-prune, CGM and Particle
Gibbs tree samplers, and three planted errors."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest
from scipy.special import gammaln
from scipy.stats import beta as beta_law
from scipy.stats import kstest

import bdtree_jax as bd
from bdtree_jax.data import make_split_grid
from bdtree_jax.kernels import bart, dart, smc
from bdtree_jax.kernels._moves import score
from bdtree_jax.likelihoods import BARTLeafNormal
from bdtree_jax.priors import TreePrior, log_tree_prior, make_tree_data, node_bounds
from bdtree_jax.priors.feature_weights import log_feature_prob, pick_feature
from bdtree_jax.tree import Tree, n_leaves, tree_depth


def _factorial_data(levels=(2, 2, 3), valid_cuts="ancestors", n_trees=3, max_depth=3, sampler="grow-prune"):
    """Every combination of the features' levels once (no box of the ancestors' rules is empty,
    so the truncation to non-empty leaves never binds and s's prior is exactly the Dirichlet)."""
    X = np.array(list(itertools.product(*[np.arange(k, dtype=float) for k in levels])))
    n = len(X)
    grid = make_split_grid(X)
    prior = TreePrior(max_depth=max_depth, alpha=0.95, beta=1.0, valid_cuts=valid_cuts)
    td = make_tree_data(grid.bin(X), np.zeros(n), prior, BARTLeafNormal(np.float32(1.0), np.float32(1.0)), grid=grid)
    f32 = lambda v: jnp.asarray(v, jnp.float32)  # noqa: E731
    data = bart.BARTData(td, jnp.zeros(n, jnp.float32), f32(10.0), f32(1.0), f32(1.0), f32(1.0))
    # Particle Gibbs with 4 particles: exact for any number, and its run is the test's cost
    config = bart.BARTConfig(n_trees, max_depth, sampler, num_particles=4, incremental=False, record_trees=False)
    return data, config


# ----------------------------------------------------------------------------------------------
# the weighted rule prior


def test_weighted_feature_draw_matches_its_density():
    """pick_feature's frequencies (200,000 uniforms) against exp(log_feature_prob), for weights
    spanning 1e-30..1 and a node lacking two features; always an available feature."""
    log_w = jnp.log(jnp.asarray([0.5, 1e-30, 0.2, 0.25, 0.05], jnp.float32))
    available = jnp.asarray([True, True, False, True, False])
    u = jax.random.uniform(jax.random.key(0), (200_000,))
    picks = np.asarray(pick_feature(jnp.broadcast_to(available, (len(u), 5)), log_w, u))
    freq = np.bincount(picks, minlength=5) / len(u)
    probs = np.exp(np.asarray(log_feature_prob(jnp.broadcast_to(available, (5, 5)), log_w, jnp.arange(5))))
    np.testing.assert_allclose(probs, [0.5 / 0.75, 1e-30 / 0.75, 0.0, 0.25 / 0.75, 0.0], rtol=1e-5)
    np.testing.assert_allclose(freq, probs, atol=4e-3)
    assert not np.any(~np.asarray(available)[picks])


def test_equal_weights_give_the_uniform_tree_prior():
    """log_tree_prior with every log weight equal is the unweighted prior (1/|A| per split)."""
    data, config = _factorial_data(valid_cuts="data")
    td = data.tree_data

    @jax.jit
    def both(k):
        trees = bart.prior_draw(k, data, config).trees

        def one(tree, lo, hi):
            plain = log_tree_prior(tree, lo, hi, td.split_prob, td.cut_cumwidth)
            weighted = log_tree_prior(tree, lo, hi, td.split_prob, td.cut_cumwidth,
                                      log_weight=jnp.full(3, -7.0, jnp.float32))
            return plain, weighted

        return jax.vmap(one)(trees.tree, trees.lo, trees.hi)

    plain, weighted = jax.vmap(both)(jax.random.split(jax.random.key(3), 200))
    assert np.all(np.isfinite(np.asarray(plain))) and np.ptp(np.asarray(plain)) > 1.0
    np.testing.assert_allclose(np.asarray(weighted), np.asarray(plain), rtol=1e-6, atol=1e-5)


# ----------------------------------------------------------------------------------------------
# the s and theta steps against their exact conditionals


def _fixed_tree_state(theta):
    """One tree on features (x0: 2 levels, x1: 4 levels): the root splits x0, both children x1.
    Below the root x0 has no cut left, so p(T | s) = s0 * (s1 / s1)**2 (times the cut terms) and
    ``s0 | T ~ Beta(theta/2 + 1, theta/2)``, while the Dirichlet proposal with the split counts
    (1, 2) is Beta(theta/2 + 1, theta/2 + 2)."""
    data, config = _factorial_data(levels=(2, 4), valid_cuts="data", n_trees=1, max_depth=2)
    tree = Tree(jnp.asarray([True, True, True, False, False, False, False]),
                jnp.asarray([0, 1, 1, 0, 0, 0, 0], jnp.int32), jnp.asarray([0, 1, 1, 0, 0, 0, 0], jnp.int32))
    trees = score(tree, data.tree_data, config.cgm, 1.0)
    lo, hi = node_bounds(tree, trees.leaf_id, data.tree_data, 1)
    assert bool(jnp.all(hi[1:3, 0] <= lo[1:3, 0])) and bool(jnp.all(hi[1:3, 1] > lo[1:3, 1]))
    trees = jax.tree.map(lambda a: a[None], trees)
    state = bart.init(None, data, config)._replace(trees=trees)
    return dart.DARTState(state, jnp.log(jnp.asarray([0.5, 0.5], jnp.float32)), jnp.float32(theta))


@pytest.mark.parametrize("theta,correct", [(0.3, True), (1.0, True), (3.0, True), (1.0, False)])
def test_s_step_leaves_the_exact_conditional_invariant(theta, correct):
    """20,000 independent chains started from the exact conditional s0 ~ Beta(theta/2 + 1,
    theta/2) of the fixed tree, 10 s steps each (the augmented Gibbs draw, then the independence
    MH step): still that Beta (KS of s1 = 1 - s0 from its log, p > 1e-3; mean within 0.005).
    Planted error (``correct=False``: the plain Dirichlet(theta/2 + counts) draw, the
    renormalisation ignored): KS p < 1e-10.

    (Started from s0 = 1/2 instead, small theta needs many more steps: the exact conditional
    has a heavy tail at s1 -> 0, 3 % of its mass below 1e-10 at theta = 0.3, which the
    augmentation reaches by a random walk in log s1 and the Dirichlet proposal not at all; a
    tree whose nodes lack a feature that often is the extreme case.)"""
    exact = beta_law(theta / 2, theta / 2 + 1)  # of s1 = 1 - s0, kept in logs (s0 rounds to 1 in float32)
    config = dart.DARTConfig(theta=theta, correct=correct)
    start = _fixed_tree_state(theta)

    def chain(key):
        k0, k1 = jax.random.split(key)
        state = start._replace(log_s=dart.log_dirichlet_draw(k0, jnp.asarray([theta / 2 + 1, theta / 2])))

        def body(s, k):
            return s._replace(log_s=dart._s_step(k, s, config)[0]), None

        return jax.lax.scan(body, state, jax.random.split(k1, 10))[0].log_s[1]

    s1 = np.exp(np.asarray(jax.jit(jax.vmap(chain))(jax.random.split(jax.random.key(1), 20_000)), np.float64))
    p = kstest(s1, exact.cdf).pvalue
    if correct:
        assert p > 1e-3 and abs(s1.mean() - exact.mean()) < 0.005, (p, s1.mean(), exact.mean())
    else:
        assert p < 1e-10, p


def test_theta_steps_target_the_exact_conditional():
    """theta given a fixed s (p = 4): 4,000 chains of 25 random-walk steps on logit(lambda) against
    the quadrature CDF of  Beta(lambda; 1/2, 1) Dirichlet(s; theta/4)  (KS p > 1e-3)."""
    log_s = jnp.log(jnp.asarray([0.7, 0.25, 0.04, 0.01], jnp.float32))
    config = dart.DARTConfig()
    rho = 4.0

    def chain(key):
        def body(theta, k):
            return dart._theta_steps(k, theta, log_s, config)[0], None

        return jax.lax.scan(body, jnp.float32(rho), jax.random.split(key, 25))[0]

    theta = np.asarray(jax.jit(jax.vmap(chain))(jax.random.split(jax.random.key(2), 4000)), np.float64)
    lam = theta / (theta + rho)
    grid = np.linspace(1e-7, 1 - 1e-7, 400_001)
    th = rho * grid / (1 - grid)
    s = np.exp(np.asarray(log_s, np.float64))
    log_density = (-0.5 * np.log(grid) + gammaln(th) - 4 * gammaln(th / 4) + (th / 4 - 1) * np.log(s).sum())
    dens = np.exp(log_density - log_density.max())
    cdf = np.cumsum(dens)
    cdf /= cdf[-1]
    p = kstest(lam, lambda x: np.interp(x, grid, cdf)).pvalue
    assert p > 1e-3, p


# ----------------------------------------------------------------------------------------------
# Geweke's "getting it right" for the whole sparse sweep

G_CHAINS, G_ITERS, G_PRIOR = 32, 3000, 100_000
G_NAMES = ("s0", "s0^2", "s2", "features used", "lambda", "mean leaves", "mean depth", "log sigma2", "sum mu")


def _geweke_stats(state):
    t = state.bart.trees.tree
    s = jnp.exp(state.log_s)
    used = jnp.any((t.feature[..., None] == jnp.arange(s.shape[0])) & t.is_split[..., None], axis=(0, 1))
    lam = state.theta / (state.theta + s.shape[0])
    return jnp.stack([s[0], s[0] ** 2, s[2], jnp.sum(used).astype(jnp.float32), lam,
                      jnp.mean(jax.vmap(n_leaves)(t).astype(jnp.float32)),
                      jnp.mean(jax.vmap(tree_depth)(t).astype(jnp.float32)),
                      jnp.log(state.bart.sigma2), jnp.sum(state.bart.leaf_values)])


def geweke_z(dart_config, sampler="grow-prune", valid_cuts="ancestors", seed=0, n_chains=G_CHAINS, n_iters=G_ITERS):
    data, config = _factorial_data(valid_cuts=valid_cuts, sampler=sampler)

    def chain(key):
        k0, k1 = jax.random.split(key)
        state = dart.prior_draw(k0, data, config, dart_config)

        def body(carry, k):
            state, d, _ = dart.geweke_step(k, *carry, config, dart_config)
            return (state, d), _geweke_stats(state)

        return jax.lax.scan(body, (state, data), jax.random.split(k1, n_iters))[1]

    keys = jax.random.split(jax.random.key(seed), 2)
    sc = np.asarray(jax.jit(jax.vmap(chain))(jax.random.split(keys[0], n_chains)), np.float64)
    prior = jax.jit(jax.vmap(lambda k: _geweke_stats(dart.prior_draw(k, data, config, dart_config))))
    mc = np.asarray(prior(jax.random.split(keys[1], G_PRIOR)), np.float64)
    # the chains start at prior draws, so their means are independent: their spread is the standard
    # error whatever the autocorrelation (lambda and s mix slowly when theta is small)
    chain_means = sc.mean(1)
    se = np.sqrt(chain_means.var(0, ddof=1) / len(chain_means) + mc.var(0, ddof=1) / len(mc))
    se = np.where(se > 0, se, np.inf)  # a fixed theta: lambda has no spread
    z = (sc.mean((0, 1)) - mc.mean(0)) / se
    return z, ", ".join(f"{n}: z={v:+.2f} ({a:.3f} vs {b:.3f})" for n, v, a, b in zip(G_NAMES, z, sc.mean((0, 1)),
                                                                                       mc.mean(0)))


def test_gamma_rates_keep_every_features_node_terms():
    """The s step's rates ``log(G + V_j)`` against float64: one splitting node whose available
    features all have tiny s (its ``v = E / S_A(s)`` is e^9000) must not round the other features'
    ``V_j``, comparable to a tiny ``G``, to 0.  The planted error, every feature's sum scaled by
    the largest node term (the form before 2026-11-30, which biased theta's hyperprior upwards:
    lambda's Geweke mean 0.359 against 0.333, z = +4.1 at 64 chains), loses them."""
    log_scale = np.float32(-40.0)  # G = e^-40: theta tiny
    log_v = np.array([[9000.0, 1.0, 2.0, 0.0]], np.float32)  # (1, 4) one tree's nodes
    is_split = np.array([[True, True, True, False]])
    available = np.array([[[True, False, False], [False, True, True], [False, False, True], [True, True, True]]])
    rates = np.asarray(dart.log_gamma_rates(log_scale, log_v, is_split, available), np.float64)
    expected = np.logaddexp(-40.0, [9000.0, 1.0, np.logaddexp(1.0, 2.0)])
    np.testing.assert_allclose(rates, expected, rtol=1e-6)
    top = log_v[is_split].max()  # the planted error
    scaled = np.einsum("mn,mnf->f", np.where(is_split, np.exp(log_v - top), 0.0), available)
    with np.errstate(divide="ignore"):
        planted = np.logaddexp(log_scale, np.log(scaled) + top)
    assert np.abs(planted - expected).max() > 30


@pytest.mark.slow
@pytest.mark.parametrize("sampler,valid_cuts,theta", [("cgm", "ancestors", None),
                                                      pytest.param("pg", "ancestors", None, marks=pytest.mark.xla_optimized),
                                                      ("grow-prune", "data", 0.5)])
def test_geweke_sparse_sweep(sampler, valid_cuts, theta):
    """32 chains x 3,000 sparse sweeps from prior draws vs 100,000 prior draws of (theta, s,
    trees, leaves, sigma2) on 12 full-factorial rows of features with 1, 1 and 2 cuts (nodes often
    lack a feature, so the renormalisation matters): every |z| < 4, the standard errors from the
    independent chains' means.  With 64 chains at seed 1 (grow-prune, theta's hyperprior): |z| <= 1.77,
    lambda's mean 0.329 vs 0.333; before the s step's rates were summed per feature
    (:func:`~bdtree_jax.kernels.dart.log_gamma_rates`) the same run gave 0.359, z = +4.12.  Particle
    Gibbs (4 particles): |z| <= 1.55 at seed 0, 2.60 at seed 1 (the sum of the leaf values)."""
    z, report = geweke_z(dart.DARTConfig(theta=theta), sampler, valid_cuts)
    print(sampler, valid_cuts, theta, report)
    assert np.all(np.abs(z) < 4.0), report


@pytest.mark.slow
@pytest.mark.parametrize("planted", ["no correction", "one tree's counts",
                                     pytest.param("pg's rules unweighted", marks=pytest.mark.xla_optimized)])
def test_geweke_sparse_sweep_planted_errors(planted, monkeypatch):
    """The same test (theta = 0.5) fails with the s step's renormalisation ignored (the plain
    Dirichlet(theta/p + c) draw: observed z(s0^2) = -67, z(s2) = +33), with the split counts of
    the first tree only (z(features used) = +17, z(s2) = -8), or, Particle Gibbs, with its
    particles' rules drawn from the unweighted prior (run at 16 x 1,500, 4 particles: z(features
    used) = +53, z(s0^2) = -14)."""
    theta, sampler, size = 0.5, "grow-prune", {}
    if planted == "no correction":
        config = dart.DARTConfig(theta=theta, correct=False)
    elif planted == "one tree's counts":
        config = dart.DARTConfig(theta=theta)
        counts = dart.split_counts
        monkeypatch.setattr(dart, "split_counts", lambda trees, n: counts(jax.tree.map(lambda a: a[:1], trees), n))
    else:
        config, sampler, size = dart.DARTConfig(theta=theta), "pg", dict(n_chains=16, n_iters=1500)
        draw_rule = smc.draw_rule
        monkeypatch.setattr(smc, "draw_rule", lambda u1, u2, lo, hi, widths, log_w: draw_rule(u1, u2, lo, hi, widths,
                                                                                             None))
    z, report = geweke_z(config, sampler, **size)
    print(planted, report)
    assert np.max(np.abs(z)) > 6.0, report


# ----------------------------------------------------------------------------------------------
# the estimators


def _friedman_frame(n=120, p=8, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(size=(n, p))
    y = 10 * np.sin(np.pi * X[:, 0] * X[:, 1]) + 20 * (X[:, 2] - 0.5) ** 2 + rng.normal(size=n)
    return pd.DataFrame(X, columns=[f"c{i}" for i in range(p)]), y


_END_TO_END = dict(num_trees=10, num_warmup=20, num_samples=15, num_chains=2, seed=4)


@pytest.mark.filterwarnings("ignore::bdtree_jax.ConvergenceWarning")
def test_estimators_sparse_end_to_end(tmp_path):
    """sparse=True on the regressor: the kept draws of s (C, S, F) on the simplex, theta > 0,
    the summary indexed by the DataFrame's columns; a checkpoint resumed gives the same draws;
    sparse=False has no s."""
    X, y = _friedman_frame()
    path = str(tmp_path / "dart.npz")
    reg = bd.BARTRegressor(sparse=True, checkpoint=path, **_END_TO_END).fit(X, y)
    assert reg.split_probs_.shape == (2, 15, 8) and np.allclose(reg.split_probs_.sum(-1), 1.0, atol=1e-4)
    assert np.all(reg.theta_ > 0) and 0 <= reg.theta_acceptance_ <= 1
    summary = reg.sparsity_summary(prob=0.8)
    assert list(summary.index) == list(X.columns)
    assert {"inclusion", "split_share", "split_prob", "split_prob_lo", "split_prob_hi"} <= set(summary.columns)
    assert np.all((summary.split_prob_lo <= summary.split_prob) & (summary.split_prob <= summary.split_prob_hi))
    resumed = bd.BARTRegressor(sparse=True, checkpoint=path, **_END_TO_END).fit(X, y)
    np.testing.assert_array_equal(resumed.split_probs_, reg.split_probs_)
    plain = bd.BARTRegressor(**_END_TO_END).fit(X, y)
    assert not hasattr(plain, "split_probs_") and plain.variable_inclusion_.shape == (8,)
    assert "split_prob" not in plain.sparsity_summary().columns


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::bdtree_jax.ConvergenceWarning")
@pytest.mark.parametrize("tree_sampler", ["grow-prune", "pg"])
def test_classifier_sparse_end_to_end(tree_sampler):
    """sparse=True on the classifier, theta fixed: same seed, same draws; s on the simplex."""
    X, y = _friedman_frame()
    kwargs = dict(sparse=True, sparse_theta=1.0, tree_sampler=tree_sampler, **_END_TO_END)
    clf = bd.BARTClassifier(**kwargs).fit(X, y > np.median(y))
    assert clf.split_probs_.shape == (2, 15, 8) and np.all(clf.theta_ == 1.0)
    assert clf.predict_proba(X).shape == (len(y), 2)
    again = bd.BARTClassifier(**kwargs).fit(X, y > np.median(y))
    np.testing.assert_array_equal(again.split_probs_, clf.split_probs_)


@pytest.mark.parametrize("kwargs,match", [
    (dict(sparse="yes"), "sparse must be True or False"),
    (dict(sparse=True, sparse_theta=0.0), "sparse_theta must be None or a finite number > 0"),
    (dict(sparse=True, sparse_a=-1.0), "sparse_a must be a finite number > 0"),
    (dict(sparse=True, sparse_rho=float("nan")), "sparse_rho must be None or a finite number > 0"),
])
def test_sparse_input_errors(kwargs, match):
    X, y = _friedman_frame(n=30)
    with pytest.raises(ValueError, match=match):
        bd.BARTRegressor(num_trees=2, num_warmup=1, num_samples=1, **kwargs).fit(X, y)
