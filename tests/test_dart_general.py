"""DART (``sparse=True``) with a categorical feature and missing cells (kernels/dart.py, the
weighted rule prior of priors/categorical.py).

The exact answer: the weighted tree prior ``p(T | s)`` of docs/categorical-missing.md's rule prior
with the feature picked by ``s_f / sum_{k in A} s_k`` over the node's available features ``A``
(an ordered cut, or two levels of the categorical feature), written out here on its own: the
tree table of :func:`bdtree_jax.exact.categorical.enumerate_mixed_trees` (7 rows, ``x0`` ordered
with a missing cell, ``x1`` categorical with 3 levels, depth <= 2: 1,089 trees with level sets
and missing-value bits) gives each tree's uniform-feature log prior and each splitting node's
``A``; the weighted log prior swaps each node's ``-log |A|`` for ``log s_f - log S_A(s)``.  It sums
to 1 over the table for every ``s`` (checked), so DART's joint prior is drawn exactly: ``s`` from
its Dirichlet, each tree from the table.  Geweke's test of the sparse sweep against those draws,
with three planted errors that fail it, run in the same program (:func:`sbc.planted`): the ``s``
step's availability read from the ordered cuts alone (a categorical feature never available: the
step before it served general rules), the plain ``Dirichlet(theta/p + c)`` draw, and rules drawn
with uniform features under a weighted density."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest

import bdtree_jax as bd
import helpers
from bdtree_jax.kernels import bart, dart, smc
from bdtree_jax.likelihoods import BARTLeafNormal
from bdtree_jax.priors import TreePrior, categorical
from bdtree_jax.priors.categorical import rule_available
from bdtree_jax.tree import leaf_nodes, make_tree
from sbc import MixedTreeTable, planted
from test_categorical_cgm import CATEGORICAL, X, _kernel_data

PRIOR = TreePrior(max_depth=2, alpha=0.95, beta=1.0, valid_cuts="data")
M, TAU2, NU, LAM = 2, 0.5, 6.0, 0.5
F = X.shape[1]
G_CHAINS, G_ITERS, G_PRIOR = 128, 1000, 50_000
G_NAMES = ("s0", "s0^2", "splits on x1", "mean leaves", "root NA left", "f_0", "f_0^2", "log sigma2")


def _problem(sampler: str = "grow-prune"):
    """The BART data and configuration, and the table's trees (T, ...) with their
    uniform-feature log priors (T,), splitting nodes (T, N), features (T, N) and available
    features (T, N, F)."""
    f32 = lambda v: jnp.asarray(v, jnp.float32)  # noqa: E731
    grid, td = _kernel_data(X, PRIOR)
    td = td._replace(likelihood=BARTLeafNormal(f32(1.0), f32(TAU2)))
    data = bart.BARTData(td, jnp.zeros(len(X), jnp.float32), f32(NU), f32(LAM), f32(1.0), f32(1.0))
    config = bart.BARTConfig(M, PRIOR.max_depth, sampler, incremental=False, record_trees=False, general_rules=True)
    t = MixedTreeTable(X, PRIOR, CATEGORICAL, grid.thresholds, grid.level_count)
    trees = make_tree(*(jnp.asarray(a if a.dtype != np.int64 else a.astype(np.int32))
                        for a in (t.is_split, t.feature, t.cut, t.nan_left, t.levels_left)))
    scored = jax.vmap(lambda tr: smc.init_state(td, config.cgm, tr))(trees)
    table = SimpleNamespace(trees=trees, log_prior=scored.log_prior, is_split=scored.tree.is_split,
                            feature=scored.tree.feature.astype(jnp.int32),
                            available=rule_available(scored.lo, scored.hi, scored.levels), probs=t.probs)
    return data, config, table


def weighted_log_prior(table, log_s):
    """(T,) every table tree's log prior with the features weighted by ``s`` (``log_s`` (F,)),
    from the uniform one: per splitting node ``-log |A|`` replaced by ``log s_f - log S_A(s)``."""
    n_avail = jnp.sum(table.available, axis=-1)
    log_total = jax.scipy.special.logsumexp(jnp.where(table.available, log_s, -jnp.inf), axis=-1)
    change = log_s[table.feature] - log_total + jnp.log(jnp.maximum(n_avail, 1).astype(jnp.float32))
    return table.log_prior + jnp.sum(jnp.where(table.is_split, change, 0.0), axis=-1)


def _prior_draw(key, data, config, table, dart_config):
    """DART's joint prior: theta (fixed or from its prior), ``s ~ Dirichlet(theta/p)``, M trees
    from the weighted table, leaves ``N(0, tau2)``, ``sigma2 ~ IG(nu/2, nu lam/2)``."""
    k_theta, k_s, k_trees, k_leaves, k_sigma = jax.random.split(key, 5)
    if dart_config.theta is None:
        lam = jax.random.beta(k_theta, dart_config.a, dart_config.b)
        theta = jnp.maximum(F * lam / (1.0 - lam), 1e-30)
    else:
        theta = jnp.float32(dart_config.theta)
    log_s = dart.log_dirichlet_draw(k_s, jnp.full((F,), theta / F))
    idx = jax.random.categorical(k_trees, weighted_log_prior(table, log_s), shape=(M,))
    td = dart.weighted(data, log_s).tree_data
    trees = bart._narrow_ids(jax.vmap(lambda i: smc.init_state(td, config.cgm, jax.tree.map(lambda a: a[i],
                                                                                              table.trees)))(idx))
    normals = jax.random.normal(k_leaves, trees.tree.is_split.shape)
    values = jnp.where(jax.vmap(leaf_nodes)(trees.tree), jnp.sqrt(TAU2) * normals, 0.0).astype(jnp.float32)
    sigma2 = (0.5 * NU * LAM) / jax.random.gamma(k_sigma, 0.5 * NU)
    state = bart.BARTState(trees, values, jnp.zeros(len(X), jnp.float32), jnp.asarray(sigma2, jnp.float32),
                           jnp.int32(0), bart._can_split(trees, data))
    state = state._replace(fit=bart._fit_from_trees(state))
    return dart.DARTState(state, log_s, jnp.asarray(theta, jnp.float32))


def _stats(state: dart.DARTState):
    t = state.bart.trees.tree
    s0 = jnp.exp(state.log_s[0])
    f0 = state.bart.fit[0]
    return jnp.stack([s0, s0 * s0, jnp.mean(jnp.sum(t.is_split & (t.feature == 1), axis=-1).astype(jnp.float32)),
                      jnp.mean(jnp.sum(t.is_split, axis=-1).astype(jnp.float32)) + 1.0,
                      jnp.mean((t.is_split[:, 0] & t.nan_left[:, 0]).astype(jnp.float32)), f0, f0 * f0,
                      jnp.log(state.bart.sigma2)])


def sweep_geweke(dart_config, sampler="grow-prune", variants=1, seed=0, chains=G_CHAINS):
    """Per variant (:func:`sbc.planted`; variant 0 the library as it is) the z-scores and a report
    of the sparse sweep's successive-conditional chains from exact joint-prior draws
    (:func:`helpers.geweke_variants`)."""
    data, config, table = _problem(sampler)
    return helpers.geweke_variants(lambda key: _prior_draw(key, data, config, table, dart_config),
                                   lambda key, state, d: dart.geweke_step(key, state, d, config, dart_config),
                                   _stats, data, chains, G_ITERS, G_PRIOR, variants, seed, G_NAMES)


def test_weighted_table_prior_is_the_librarys_and_sums_to_one():
    """For uniform ``s`` the weighted log prior is the table's own (the enumeration's
    probabilities); for random ``s`` it sums to 1 over the 1,089 trees and equals the cached log
    prior the library scores under ``feature_log_weight = log s`` (priors/categorical.py)."""
    data, config, table = _problem()
    uniform = weighted_log_prior(table, jnp.full((F,), -np.log(F), jnp.float32))
    np.testing.assert_allclose(np.exp(uniform), table.probs, rtol=2e-4, atol=1e-9)
    for log_s in dart.log_dirichlet_draw(jax.random.key(3), jnp.full((5, F), 0.4)):
        lp = weighted_log_prior(table, log_s)
        assert abs(float(jax.scipy.special.logsumexp(lp))) < 1e-4
        td = dart.weighted(data, log_s).tree_data
        ours = jax.vmap(lambda tr: smc.init_state(td, config.cgm, tr).log_prior)(table.trees)
        np.testing.assert_allclose(np.asarray(ours), np.asarray(lp), rtol=1e-5, atol=1e-4)


def test_weighted_rule_draws_follow_their_density():
    """At the root, 20,000 rules drawn by the library (``draw_rule_general`` under weights
    ``s = (0.9, 0.1)``): the share on the categorical feature within 0.01 of ``0.1``."""
    from bdtree_jax.kernels._moves import draw_prior_rule

    data, config, table = _problem()
    log_s = jnp.log(jnp.asarray([0.9, 0.1], jnp.float32))
    td = dart.weighted(data, log_s).tree_data
    stump = smc.init_state(td, config.cgm)
    keys = jax.random.split(jax.random.key(0), 20_000)

    def one(key):
        u = jax.random.uniform(key, (3,))
        rule = draw_prior_rule(u[0], u[1], u[2], key, stump.lo[0], stump.hi[0], stump.levels[0], td, nan_bits=True)
        return rule.feature

    share = float(jnp.mean(jax.vmap(one)(keys) == 1))
    assert abs(share - 0.1) < 0.01, share


@pytest.mark.xla_optimized
@pytest.mark.slow
def test_geweke_sparse_sweep_general_rules_and_planted_errors(monkeypatch):
    """128 chains x 1,000 sparse sweeps (grow-prune, theta = 0.5, 2 trees) from the exact joint
    prior vs 50,000 forward draws: every |z| < 4 (observed <= 1.06).  In the same program three
    planted errors, each on its own 128 chains, fail it (max |z| > 6): the ``s`` step's
    availability read from the ordered cuts alone (observed z(s0) = -263), the plain
    ``Dirichlet(theta/p + c)`` draw (z(s0) = +10.2, z(splits on x1) = -5.8), and the grow
    proposals' rules drawn with uniform features (the draw before it served weights) while their
    density is weighted (z(s0^2) = -17.3, z(splits on x1) = +7.6)."""
    planted(monkeypatch, dart, "rule_available", lambda orig, lo, hi, levels: hi > lo, 1)
    planted(monkeypatch, dart, "_s_step",
            lambda orig, key, state, config: orig(key, state, dataclasses.replace(config, correct=False)), 2)
    planted(monkeypatch, categorical, "pick_feature",
            lambda orig, available, log_w, u: orig(available, jnp.zeros_like(log_w), u), 3)
    helpers.check_geweke_variants(sweep_geweke(dart.DARTConfig(theta=0.5), variants=4),
                                  ("ordered cuts only", "no correction", "uniform rule draws"))


@pytest.mark.xla_optimized
@pytest.mark.slow
def test_geweke_sparse_sweep_general_rules_cgm_hyperprior():
    """The same with CGM's four moves and theta's hyperprior: every |z| < 4 (observed <= 0.84)."""
    helpers.check_geweke_variants(sweep_geweke(dart.DARTConfig(), "cgm"))


@pytest.mark.xla_optimized
@pytest.mark.slow
def test_geweke_sparse_sweep_general_rules_pg_and_planted_error(monkeypatch):
    """Particle Gibbs (10 particles, whose rules come from ``draw_rule_general``) with theta's
    hyperprior, 64 chains: every |z| < 4; in the same program its rules drawn with uniform features
    fail it.  Observed: |z| <= 2.47; planted z(s0^2) = -38.1."""
    planted(monkeypatch, categorical, "pick_feature",
            lambda orig, available, log_w, u: orig(available, jnp.zeros_like(log_w), u), 1)
    helpers.check_geweke_variants(sweep_geweke(dart.DARTConfig(), "pg", variants=2, chains=64),
                                  ("uniform rule draws",))


def test_estimator_sparse_with_categorical_and_missing():
    """``BARTRegressor(sparse=True)`` on a table with a categorical column and missing cells:
    same seed, same draws; ``s`` on the simplex, one entry per column."""
    rng = np.random.default_rng(0)
    n = 80
    Xf = pd.DataFrame(rng.uniform(size=(n, 3)), columns=["a", "b", "c"])
    Xf["g"] = pd.Categorical(rng.choice(list("pqr"), n))
    Xf.loc[rng.uniform(size=n) < 0.15, "b"] = np.nan
    y = 3 * Xf.a.to_numpy() + 2 * (Xf.g == "p").to_numpy() + rng.normal(size=n)
    kw = dict(num_trees=5, num_warmup=10, num_samples=10, num_chains=2, sparse=True, seed=1)
    m = bd.BARTRegressor(**kw).fit(Xf, y)
    assert m.split_probs_.shape == (2, 10, 4)
    np.testing.assert_allclose(m.split_probs_.sum(-1), 1.0, rtol=1e-5)
    again = bd.BARTRegressor(**kw).fit(Xf, y)
    np.testing.assert_array_equal(again.split_probs_, m.split_probs_)
    assert m.predict(Xf).shape == (n,)
