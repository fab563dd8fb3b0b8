"""Bayesian causal forests (:mod:`bdtree_jax.kernels.bcf`, :class:`bdtree_jax.BCFRegressor`).

Default suite (cheap): the treatment forest's leaf update is the conjugate Bayesian linear
regression of the partial residuals on the basis; the estimator end to end on a tiny problem
(shapes, same seed same draws, bad input refused before anything compiles).  Slow: Geweke's
"getting it right" for the whole sweep (both forests, b0/b1, sigma2) and its planted-error twin
(the basis left out of the treatment forest's rows), and categorical / missing inputs end to end.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import sbc

from bdtree_jax.data import make_split_grid
from bdtree_jax.estimators.bcf import BCFRegressor
from bdtree_jax.kernels import bart, bcf
from bdtree_jax.likelihoods import BARTLeafNormal, BARTLeafWeightedNormal
from bdtree_jax.priors import TreePrior, make_tree_data, subtree_sums
from bdtree_jax.tree import n_leaves

pytestmark = pytest.mark.filterwarnings("ignore::bdtree_jax.diagnostics.ConvergenceWarning")

G_N, G_NU, G_LAM = 12, 10.0, 1.0


def _tiny_bcf(sampler="grow-prune", n=G_N, seed=0, outcome="continuous"):
    """12 rows; mu on 3 features (3 trees), tau on the first 2 (2 trees); depth <= 3, beta 1; leaf
    variances 1; sigma2 ~ 10 / chi2_10; z alternating."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(size=(n, 3)).round(3)
    prior = TreePrior(max_depth=3, alpha=0.95, beta=1.0, valid_cuts="data")
    f32 = lambda v: jnp.asarray(v, jnp.float32)  # noqa: E731

    def forest(cols, lik, stats=None):
        grid = make_split_grid(X[:, cols])
        td = make_tree_data(grid.bin(X[:, cols]), np.zeros(n), prior, BARTLeafNormal(np.float32(1.0), np.float32(1.0)),
                            grid=grid)
        td = td._replace(likelihood=lik)
        if stats is not None:
            td = td._replace(point_stats=stats)
        return bart.BARTData(td, jnp.zeros(n, jnp.float32), f32(G_NU), f32(G_LAM), f32(1.0), f32(1.0))

    ones = jnp.ones(n, jnp.float32)
    mu = forest([0, 1, 2], BARTLeafNormal(np.float32(1.0), np.float32(1.0)))
    tau = forest([0, 1], BARTLeafWeightedNormal(np.float32(1.0), np.float32(1.0)),
                 BARTLeafWeightedNormal.row_stats(ones, ones, ones))
    if outcome == "binary":
        mu = mu._replace(offset=f32(0.3))
    data = bcf.BCFData(mu, tau, f32(np.arange(n) % 2))
    cfg = dict(num_particles=5, incremental=False, record_trees=False)
    config = bcf.BCFConfig(bart.BARTConfig(3, 3, sampler, **cfg), bart.BARTConfig(2, 3, sampler, **cfg),
                           outcome=outcome)
    return data, config


# ----------------------------------------------------------------------------------------------
# Default suite


def test_tau_leaf_update_is_conjugate_regression_on_the_basis():
    """Given mu, b, sigma2 and the other treatment trees, tree m's leaf values are the Bayesian
    linear regression of ``y - mu - b_z (tau - g_m)`` on the design ``D_ij = b_{z_i} 1{i in leaf
    j}`` with prior ``N(0, tau2 I)``: the rows of :func:`bcf._tau_rows` summed over the leaves give
    that posterior's mean and sd (numpy's dense solve), and leaving the basis out does not."""
    data, _ = _tiny_bcf()
    rng = np.random.default_rng(1)
    leaves = np.array([2, 3, 4])  # a tree whose root's left child splits: leaves at heap slots 2, 3, 4
    ids = rng.choice(leaves, G_N)
    leaf_id = jnp.asarray(ids, jnp.int32)
    partial = jnp.asarray(rng.normal(size=G_N), jnp.float32)  # the other treatment trees' sum
    basis = bcf._basis(jnp.array([-0.7, 1.3], jnp.float32), data.z)
    r = jnp.asarray(rng.normal(size=G_N), jnp.float32)  # y - mu
    s2, t2 = 0.6, 1.0
    td = bcf._tau_rows(data, r, basis, jnp.float32(s2), partial)
    N = 7
    stats = subtree_sums(td.point_stats, leaf_id, N)
    mean, sd = td.likelihood.leaf_posterior(stats)
    D = np.asarray(basis, np.float64)[:, None] * (ids[:, None] == leaves[None, :])
    target = np.asarray(r - basis * partial, np.float64)
    cov = np.linalg.inv(D.T @ D / s2 + np.eye(len(leaves)) / t2)
    want_mean = cov @ D.T @ target / s2
    np.testing.assert_allclose(np.asarray(mean)[leaves], want_mean, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(np.asarray(sd)[leaves], np.sqrt(np.diag(cov)), rtol=1e-4)
    # the planted twin: rows without the basis give another posterior
    bad = td._replace(point_stats=BARTLeafWeightedNormal.row_stats(target.astype(np.float32), np.ones(G_N),
                                                                   np.ones(G_N)))
    bad_mean, _ = bad.likelihood.leaf_posterior(subtree_sums(bad.point_stats, leaf_id, N))
    assert np.max(np.abs(np.asarray(bad_mean)[leaves] - want_mean)) > 0.05


def _tiny_data(n=40, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1, 1, size=(n, 3))
    z = (rng.uniform(size=n) < 0.5).astype(int)
    z[:2] = (0, 1)
    y = X[:, 0] + (1.0 + X[:, 1]) * z + 0.3 * rng.normal(size=n)
    return X, y, z, np.full(n, 0.5)


def _tiny_model(**kw):
    options = dict(num_trees_mu=5, num_trees_tau=3, num_warmup=10, num_samples=20, num_chains=1, progress=False)
    return BCFRegressor(**{**options, **kw})


def test_bcf_regressor_end_to_end_tiny():
    """Shapes of CATE / ATE / ATT draws and intervals, the same seed's draws twice, predict."""
    X, y, z, p = _tiny_data()
    a = _tiny_model(seed=3).fit(X, y, z, propensity=p)
    e = a.effect(X[:7], prob=0.9)
    assert e.draws.shape == (20, 7) and e.mean.shape == (7,) and np.all(e.lower <= e.upper)
    ate, att = a.ate(), a.att()
    assert ate.draws.shape == (20,) and ate.lower <= ate.mean <= ate.upper and np.isfinite(att.mean)
    # the trace's ATE is the mean CATE over the training rows
    np.testing.assert_allclose(a.effect(X).draws.mean(1), ate.draws, rtol=1e-4, atol=1e-4)
    b = _tiny_model(seed=3).fit(X, y, z, propensity=p)
    np.testing.assert_array_equal(b.effect(X[:7]).draws, e.draws)
    assert a.predict(X[:5], 1, propensity=p[:5]).shape == (5,)


@pytest.mark.parametrize("bad,match", [
    (dict(z=np.full(40, 2)), "z must hold 0/1"),
    (dict(z=np.zeros(40, int)), "treated"),
    (dict(propensity=np.ones(40)), "propensity"),
    (dict(num_trees_tau=0), "num_trees_tau"),
])
def test_bcf_regressor_refuses_bad_input(bad, match):
    X, y, z, p = _tiny_data()
    args = dict(z=bad.get("z", z), propensity=bad.get("propensity", p))
    model = _tiny_model(**{k: v for k, v in bad.items() if k not in args})
    with pytest.raises(ValueError, match=match):
        model.fit(X, y, **args)


# ----------------------------------------------------------------------------------------------
# Slow: Geweke's "getting it right" and its planted-error twin

GEWEKE_NAMES = ("mu mean leaves", "tau mean leaves", "log sigma2", "sigma2", "mu f(x_0)", "tau f(x_1)^2", "b0",
                "b1", "b0 b1", "(b1-b0) tau(x_3)", "sum tau leaves^2")


def _geweke_stats(state):
    tau_leaves = jnp.sum(state.tau.leaf_values ** 2)
    b0, b1 = state.b[0], state.b[1]
    return jnp.stack([
        jnp.mean(jax.vmap(n_leaves)(state.mu.trees.tree).astype(jnp.float32)),
        jnp.mean(jax.vmap(n_leaves)(state.tau.trees.tree).astype(jnp.float32)),
        jnp.log(state.sigma2), state.sigma2, state.mu.fit[0], state.tau.fit[1] ** 2, b0, b1, b0 * b1,
        (b1 - b0) * state.tau.fit[3], tau_leaves])


def geweke_z(sampler, chains, iters, n_prior, seed=0, outcome="continuous"):
    """z per statistic (:func:`sbc.geweke_z`): ``chains`` successive-conditional chains of
    ``iters`` sweeps started at prior draws against ``n_prior`` forward prior draws."""
    data, config = _tiny_bcf(sampler, outcome=outcome)

    def chain(key):
        k_start, k_steps = jax.random.split(key)

        def body(carry, k):
            state, d, _ = bcf.geweke_step(k, *carry, config)
            return (state, d), _geweke_stats(state)

        start = (bcf.prior_draw(k_start, data, config), data)
        return jax.lax.scan(body, start, jax.random.split(k_steps, iters))[1]

    k_chains, k_prior = jax.random.split(jax.random.key(seed))
    successive = jax.jit(jax.vmap(chain))(jax.random.split(k_chains, chains))
    forward = jax.jit(jax.vmap(lambda k: _geweke_stats(bcf.prior_draw(k, data, config))))(
        jax.random.split(k_prior, n_prior))
    return sbc.geweke_z(np.asarray(successive), np.asarray(forward))[0]


def _report(z):
    return ", ".join(f"{n}: z={v:+.2f}" for n, v in zip(GEWEKE_NAMES, z))


@pytest.mark.slow
@pytest.mark.parametrize("sampler", ["grow-prune", pytest.param("pg", marks=pytest.mark.xla_optimized)])
def test_geweke_getting_it_right(sampler):
    """Alternating a sweep with ``y ~ N(mu + b_z tau, sigma2)`` leaves the prior of (both
    forests, b0, b1, sigma2) invariant: 32 chains x 2,000 sweeps from prior draws vs 200,000
    forward draws, every |z| < 4 (observed max |z|: grow-prune 1.73, pg 1.98)."""
    z = geweke_z(sampler, 32, 2000, 200_000)
    print(sampler, _report(z))
    assert np.all(np.abs(z) < 4.0), _report(z)


@pytest.mark.slow
def test_geweke_probit_getting_it_right():
    """Probit BCF (latents, both forests, b0, b1; sigma2 = 1): 32 chains x 4,000 sweeps vs
    200,000 forward draws, every |z| < 4 (sigma2's two statistics, constant 1, give z = 0;
    observed max |z| 2.30)."""
    z = geweke_z("grow-prune", 32, 4000, 200_000, outcome="binary")
    print("probit", _report(z))
    assert np.all(np.abs(z) < 4.0), _report(z)


@pytest.mark.slow
def test_bcf_classifier_end_to_end():
    """Probit BCF end to end, propensity fitted: the effect on the probability scale follows a
    planted step in x1 (0 below 0, about +0.3 above), and ATE's interval covers its truth."""
    from scipy.stats import norm

    from bdtree_jax import BCFClassifier

    rng = np.random.default_rng(0)
    n = 600
    X = rng.normal(size=(n, 3))
    z = rng.binomial(1, norm.cdf(0.5 * X[:, 0]))
    f0 = 0.5 * X[:, 0]
    p1, p0 = norm.cdf(f0 + 1.0 * (X[:, 1] > 0)), norm.cdf(f0)
    y = rng.binomial(1, np.where(z == 1, p1, p0))
    model = BCFClassifier(50, 20, num_warmup=300, num_samples=300, num_chains=2, progress=False).fit(X, y, z)
    e = model.effect(X)
    assert e.mean[X[:, 1] > 0.3].mean() > 0.15 and abs(e.mean[X[:, 1] < -0.3].mean()) < 0.1
    ate = model.ate()
    assert ate.lower <= (p1 - p0).mean() <= ate.upper, (ate.mean, (p1 - p0).mean())
    assert set(model.classes_) == {0, 1} and model.predict(X[:4], 1).shape == (4,)


def _rows_without_basis(data, r, basis, sigma2, partial):
    return _saved_tau_rows(data, r, jnp.ones_like(basis), sigma2, partial)


_saved_tau_rows = bcf._tau_rows


@pytest.mark.slow
def test_geweke_planted_error_fails(monkeypatch):
    """The same (16 chains x 1,000 sweeps, 50,000 prior draws) with the basis left out of the
    treatment forest's rows (``b_z = 1`` there, the rest unchanged): some |z| >= 4 (observed
    z(b1) = +59.7, z(b0) = +51.0, z(sum tau leaves^2) = -14.8)."""
    monkeypatch.setattr(bcf, "_tau_rows", _rows_without_basis)
    z = geweke_z("grow-prune", 16, 1000, 50_000, seed=1)
    assert np.max(np.abs(z)) >= 4.0, "planted: " + _report(z)


@pytest.mark.slow
def test_bcf_categorical_and_missing_inputs():
    """A DataFrame with a categorical column and missing cells fits (the general-rule kernels for
    both forests), and the CATE follows the categorical effect modifier."""
    import pandas as pd

    rng = np.random.default_rng(0)
    n = 200
    g = rng.choice(["a", "b"], n)
    x = rng.normal(size=n)
    x[rng.uniform(size=n) < 0.1] = np.nan
    z = rng.integers(0, 2, n)
    tau = np.where(g == "a", 2.0, -1.0)
    y = np.nan_to_num(x) + tau * z + 0.3 * rng.normal(size=n)
    X = pd.DataFrame({"g": pd.Categorical(g), "x": x})
    model = BCFRegressor(20, 10, num_warmup=150, num_samples=150, num_chains=1, progress=False)
    model.fit(X, y, z, propensity=np.full(n, 0.5))
    e = model.effect(pd.DataFrame({"g": pd.Categorical(["a", "b"], categories=["a", "b"]), "x": [0.0, np.nan]}))
    assert e.mean[0] > 1.0 and e.mean[1] < 0.0, e.mean
