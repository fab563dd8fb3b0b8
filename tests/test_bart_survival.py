"""Survival BART (kernels/bart_survival.py, estimators/bart_survival.py): the imputation's draws
against scipy's truncated normal, the observed-data log-likelihood against scipy, Geweke's test of
the whole sweep with censored data (and a planted error that fails it), the estimator's conventions
and input errors."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.special import log_ndtr
from scipy.stats import kstest, norm, truncnorm

import bdtree_jax as bd
from bdtree_jax.data import make_split_grid
from bdtree_jax.kernels import bart, bart_survival
from bdtree_jax.likelihoods import BARTLeafNormal
from bdtree_jax.posterior.bart_survival import concordance_index
from bdtree_jax.priors import TreePrior, make_tree_data
from bdtree_jax.tree import n_leaves, tree_depth


def _data(y, event, y_scale=1.0):
    n = len(y)
    X = np.linspace(0, 1, n)[:, None]
    grid = make_split_grid(X)
    prior = TreePrior(max_depth=2, alpha=0.95, beta=1.0)
    td = make_tree_data(grid.bin(X), np.zeros(n), prior, BARTLeafNormal(np.float32(1.0), np.float32(1.0)), grid=grid)
    f32 = lambda v: jnp.asarray(v, jnp.float32)  # noqa: E731
    b = bart.BARTData(td, f32(y), f32(3.0), f32(1.0), f32(1.0), f32(y_scale))
    return bart_survival.SurvivalData(b, jnp.asarray(event, bool))


@pytest.mark.parametrize("fit,bound,sigma", [(0.0, 0.5, 1.0), (2.0, -1.0, 0.5), (-3.0, 4.0, 0.7), (-30.0, 2.0, 1.5)])
def test_imputed_times_follow_the_truncated_normal(fit, bound, sigma):
    """A censored row's draws are N(fit, sigma2) truncated to > bound (KS test, 20,000 draws; the
    last case lies 21 sd below its bound); an event keeps its time."""
    n = 20_000
    data = _data(np.full(n, bound), np.zeros(n, bool))
    z = np.asarray(bart_survival.impute(jax.random.key(0), jnp.full(n, fit), jnp.float32(sigma**2), data), np.float64)
    a = (bound - fit) / sigma
    assert np.all(z > bound)
    assert kstest(z, truncnorm(a, np.inf, loc=fit, scale=sigma).cdf).pvalue > 1e-3
    kept = bart_survival.impute(jax.random.key(1), jnp.zeros(3), jnp.float32(1.0), _data([0.2, 0.4, 0.6], [True] * 3))
    np.testing.assert_array_equal(np.asarray(kept), np.float32([0.2, 0.4, 0.6]))


def test_observed_log_likelihood_matches_scipy():
    y = np.array([0.1, -0.3, 0.4, 0.2])
    event = np.array([True, False, True, False])
    fit, sigma2, scale = np.array([0.0, 0.2, 0.1, -0.5]), 0.3, 2.0
    got = bart_survival.observed_log_lik(jnp.asarray(fit, jnp.float32), jnp.float32(sigma2), _data(y, event, scale))
    s = np.sqrt(sigma2)
    want = np.where(event, norm.logpdf(y, fit, s) - np.log(scale), log_ndtr((fit - y) / s)).sum()
    assert float(got) == pytest.approx(want, rel=1e-5)


# ----------------------------------------------------------------------------------------------
# Geweke's successive-conditional test of the sweep on censored data

GEWEKE_NAMES = ("mean leaves", "mean depth", "log sigma2", "sigma2", "f(x_0)^2", "sum mu", "share censored")
G_CHAINS, G_ITERS, G_BATCHES, G_PRIOR = 32, 4000, 10, 200_000


def _tiny(n=12, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(size=(n, 2)).round(3)
    grid = make_split_grid(X)
    prior = TreePrior(max_depth=3, alpha=0.95, beta=1.0)
    td = make_tree_data(grid.bin(X), np.zeros(n), prior, BARTLeafNormal(np.float32(1.0), np.float32(1.0)), grid=grid)
    f32 = lambda v: jnp.asarray(v, jnp.float32)  # noqa: E731
    data = bart.BARTData(td, jnp.zeros(n, jnp.float32), f32(10.0), f32(1.0), f32(1.0), f32(1.0))
    config = bart.BARTConfig(3, 3, "grow-prune", incremental=False)
    bound = f32(rng.normal(0.0, 1.0, n))  # censoring bounds: about half the rows censored a priori
    return bart_survival.SurvivalData(data, jnp.ones(n, bool)), bound, config


def _stats(state, data):
    t = state.trees.tree
    s = jnp.sum(state.leaf_values)
    return jnp.stack([jnp.mean(jax.vmap(n_leaves)(t).astype(jnp.float32)),
                      jnp.mean(jax.vmap(tree_depth)(t).astype(jnp.float32)), jnp.log(state.sigma2), state.sigma2,
                      state.fit[0] ** 2, s, 1.0 - jnp.mean(data.event.astype(jnp.float32))])


def geweke_z(seed=0):
    data, bound, config = _tiny()

    def chain(key):
        k0, k1, k2 = jax.random.split(key, 3)
        state = bart.prior_draw(k0, data.bart, config)
        start = bart_survival.simulate(k1, state, bound, data)

        def body(carry, k):
            state, d, _ = bart_survival.geweke_step(k, *carry, bound, config)
            return (state, d), _stats(state, d)

        return jax.lax.scan(body, (state, start), jax.random.split(k2, G_ITERS))[1]

    def forward(key):
        k0, k1 = jax.random.split(key)
        state = bart.prior_draw(k0, data.bart, config)
        return _stats(state, bart_survival.simulate(k1, state, bound, data))

    key_chains, key_prior = jax.random.split(jax.random.key(seed))
    sc = np.asarray(jax.jit(jax.vmap(chain))(jax.random.split(key_chains, G_CHAINS)), np.float64)
    mc = np.asarray(jax.jit(jax.vmap(forward))(jax.random.split(key_prior, G_PRIOR)), np.float64)
    batches = sc.reshape(G_CHAINS * G_BATCHES, G_ITERS // G_BATCHES, -1).mean(1)
    se = np.sqrt(batches.var(0, ddof=1) / len(batches) + mc.var(0, ddof=1) / len(mc))
    z = (sc.mean((0, 1)) - mc.mean(0)) / se
    report = ", ".join(f"{n}: z={v:+.2f} ({a:.3f} vs {b:.3f})" for n, v, a, b in zip(GEWEKE_NAMES, z, sc.mean((0, 1)),
                                                                                     mc.mean(0)))
    print(report)
    return z, report


@pytest.mark.slow
def test_geweke_getting_it_right_with_censoring():
    """Geweke (2004): alternating censored data from the model (log times ~ N(f, sigma2),
    censored above fixed bounds: 12 rows, about half censored) with one survival sweep must leave
    the prior of trees, leaves and sigma2 invariant: 32 chains x 4,000 vs 200,000 forward draws,
    every |z| < 4."""
    z, report = geweke_z()
    assert np.all(np.abs(z) < 4.0), report


@pytest.mark.slow
def test_geweke_fails_when_censored_times_are_not_truncated(monkeypatch):
    """Planted error: censored rows imputed from N(f, sigma2) without the truncation."""
    def untruncated(key, fit, sigma2, data):
        z = fit + jnp.sqrt(sigma2) * jax.random.normal(key, fit.shape)
        return jnp.where(data.event, data.bart.y, z).astype(jnp.float32)

    monkeypatch.setattr(bart_survival, "impute", untruncated)
    z, report = geweke_z()
    assert np.any(np.abs(z) > 4.0), report


@pytest.mark.xla_optimized
@pytest.mark.slow
def test_geweke_fails_when_the_sigma2_step_drops_its_jacobian(monkeypatch):
    """Planted error: the sigma2 step's target written for sigma2 itself, not log sigma2."""
    def no_jacobian(log_sigma2, fit, data):
        sigma2 = jnp.exp(log_sigma2)
        nu, lam = data.bart.nu, data.bart.lam
        return bart_survival.observed_log_lik(fit, sigma2, data) - (0.5 * nu + 1.0) * log_sigma2 - 0.5 * nu * lam / sigma2

    monkeypatch.setattr(bart_survival, "_log_sigma2_target", no_jacobian)
    z, report = geweke_z()
    assert np.any(np.abs(z) > 4.0), report


# ----------------------------------------------------------------------------------------------
# the estimator

def _survival_table(n=160, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(size=(n, 3))
    f = np.where(X[:, 0] > 0.5, 1.0, 0.0)
    log_t, log_c = f + 0.3 * rng.standard_normal(n), rng.uniform(0.0, 1.8, n)
    return X, np.exp(np.minimum(log_t, log_c)), log_t <= log_c


@pytest.fixture(scope="module")
def fitted():
    X, t, event = _survival_table()
    model = bd.BARTSurvival(num_trees=20, num_warmup=100, num_samples=100, seed=0, progress=False)
    with pytest.warns(bd.ConvergenceWarning):  # short chains
        model.fit(X[:120], t[:120], event[:120])
    return model, X, t, event


def test_estimator_fits_censored_times(fitted):
    model, X, t, event = fitted
    assert 0.75 < model.score(X[120:], t[120:], event[120:]) <= 1.0
    mean, lo, hi = model.predict_survival_function(X[120:], [0.5, 1.0, 2.0, 4.0], prob=0.9)
    assert mean.shape == lo.shape == hi.shape == (40, 4)
    assert np.all(np.diff(mean, axis=1) <= 0) and np.all(np.diff(hi, axis=1) <= 0) and np.all(lo <= hi)
    assert np.all((lo >= 0) & (hi <= 1) & (mean >= 0) & (mean <= 1))  # (a skewed mean may leave its band)
    median = model.predict(X[120:])
    lower, upper = model.predict_interval(X[120:])
    assert np.all((lower <= median) & (median <= upper))
    assert np.mean(median[X[120:, 0] > 0.5]) > 2.0 * np.mean(median[X[120:, 0] <= 0.5])
    ll = model.posterior_.pointwise_log_likelihood()
    assert ll.shape == (2, 100, 120) and np.all(np.isfinite(ll))
    np.testing.assert_allclose(ll.sum(-1), model.posterior_.stats["train_log_lik"], rtol=1e-3)


def test_survival_curves_streamed_in_row_chunks_match_all_draws_at_once(fitted, monkeypatch):
    """A small prediction budget splits the rows into chunks; the curves and bands are those of
    every draw at every row at once."""
    from scipy.special import ndtr

    from bdtree_jax.posterior import streaming

    model, X, t, event = fitted
    times = [0.5, 1.0, 2.0]
    monkeypatch.setattr(streaming, "PREDICT_BUDGET_BYTES", 3000)
    mean, lo, hi = model.predict_survival_function(X[120:], times, prob=0.9)
    post = model.posterior_
    s = ndtr((post.predict_draws(X[120:])[:, :, None] - np.log(times)) / post.sigma.reshape(-1)[:, None, None])
    np.testing.assert_allclose(mean, s.mean(0))
    np.testing.assert_allclose(lo, np.quantile(s, 0.05, axis=0))
    np.testing.assert_allclose(hi, np.quantile(s, 0.95, axis=0))


def test_structured_times_equal_two_arrays(fitted):
    """scikit-survival's (event, time) records are read as the two arrays."""
    model, X, t, event = fitted
    with pytest.raises(ValueError, match="event=None"):
        model.score(X[120:], np.rec.fromarrays([event[120:], t[120:]], names="event,time"), event[120:])
    assert model.score(X[120:], np.rec.fromarrays([event[120:], t[120:]], names="event,time")) == \
        model.score(X[120:], t[120:], event[120:])


@pytest.mark.parametrize("y,event,match", [
    (-np.ones(10), None, "survival times > 0"), (np.ones(10), np.ones(9), "one entry per time"),
    (np.ones(10), np.full(10, 2), "booleans or 0/1"), (np.ones(10), np.zeros(10, bool), "at least one observed"),
    (np.ones(9), None, "one time per row"),
])
def test_bad_times_are_refused_before_compiling(y, event, match):
    with pytest.raises(ValueError, match=match):
        bd.BARTSurvival().fit(np.zeros((10, 2)), y, event)


def test_concordance_index_by_hand():
    time, event = np.array([1.0, 2.0, 3.0, 4.0]), np.array([True, True, False, True])
    # comparable pairs (i fails before j's time): (0,1) (0,2) (0,3) (1,2) (1,3); risk ties count 1/2
    risk = np.array([4.0, 3.0, 3.0, 1.0])
    assert concordance_index(time, event, risk) == pytest.approx((1 + 1 + 1 + 0.5 + 1) / 5)
    # a censored row tied in time with an event was still at risk: (0, 1) is comparable here
    assert concordance_index(np.array([1.0, 1.0, 2.0]), np.array([True, False, True]),
                             np.array([2.0, 1.0, 0.0])) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="comparable"):
        concordance_index(time, np.zeros(4, bool), risk)
