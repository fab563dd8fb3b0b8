import jax.numpy as jnp
import numpy as np
from scipy import integrate, stats
from scipy.special import gammaln

from bdtree_jax.likelihoods import DirichletMultinomial, NormalMeanShift, default_normal_hyperparameters


def test_dirichlet_multinomial_closed_form():
    lik = DirichletMultinomial(3, 0.7)
    counts = np.array([[4.0, 0.0, 2.0], [1.0, 1.0, 1.0]])
    got = np.asarray(lik.leaf_log_lik(jnp.asarray(counts)))
    # Beta-function form: B(n + a) / B(a) for the ordered sequence.
    def logB(v):
        return gammaln(v).sum() - gammaln(v.sum())
    want = [logB(c + 0.7) - logB(np.full(3, 0.7)) for c in counts]
    np.testing.assert_allclose(got, want, rtol=1e-5)
    # sequential predictive (Polya urn) gives the same probability of one ordering
    seq = [0, 0, 2, 0, 2, 0]
    lp, c = 0.0, np.zeros(3)
    for k in seq:
        lp += np.log((c[k] + 0.7) / (c.sum() + 2.1))
        c[k] += 1
    np.testing.assert_allclose(got[0], lp, rtol=1e-5)


def test_normal_mean_shift_against_numerical_integration():
    y_leaves = [np.array([0.3, -0.1, 0.5]), np.array([2.0, 2.4])]
    lik = NormalMeanShift(nu=3.0, lam=0.5, a=0.4, mu_bar=0.2)
    stats_ = np.stack([lik.point_stats(y).sum(0) for y in y_leaves])
    got = float(lik.log_lik(jnp.asarray(stats_), jnp.array([True, True])))

    def integrand(s2):
        # integrate the leaf means analytically given sigma^2, then sigma^2 numerically
        total = stats.invgamma.logpdf(s2, lik.nu / 2, scale=lik.nu * lik.lam / 2)
        for y in y_leaves:
            n = len(y)
            cov = s2 * np.eye(n) + s2 / lik.a * np.ones((n, n))
            total += stats.multivariate_normal.logpdf(y, np.full(n, lik.mu_bar), cov)
        return np.exp(total)

    want = np.log(integrate.quad(integrand, 1e-6, 50, limit=200)[0])
    np.testing.assert_allclose(got, want, rtol=1e-4)


def test_default_hyperparameters_calibration():
    y = np.random.default_rng(0).normal(3.0, 2.0, 500)
    hp = default_normal_hyperparameters(y)
    assert hp["mu_bar"] == float(np.mean(y)) and hp["nu"] == 3.0 and np.isclose(hp["a"], 1 / 3)
    # P(sigma^2 <= var(y)) = 0.9 under IG(nu/2, nu*lam/2)
    p = stats.invgamma.cdf(np.var(y), hp["nu"] / 2, scale=hp["nu"] * hp["lam"] / 2)
    np.testing.assert_allclose(p, 0.9, rtol=1e-6)


def test_count_tables_equal_lgamma():
    """``prepare`` swaps lgamma of the class counts for table lookups: same values."""
    rng = np.random.default_rng(0)
    stats = rng.integers(0, 40, size=(127, 3)).astype(np.float32)
    for a in (0.3, 1.0, 2.5):
        lik = DirichletMultinomial(3, a)
        direct = np.asarray(lik.leaf_log_lik(jnp.asarray(stats)))
        tabled = np.asarray(lik.prepare(120).leaf_log_lik(jnp.asarray(stats)))
        np.testing.assert_allclose(tabled, direct, rtol=2e-6, atol=1e-4)


def test_weighted_normal_leaf_is_the_multivariate_normal_marginal():
    """BARTLeafWeightedNormal: a leaf's log marginal is that of r ~ N(0, sigma2 diag(1/w) +
    tau2 b b^T) (scipy, float64) up to 1/2 sum log w; the leaf posterior is the conjugate one;
    with w = b = 1 it equals BARTLeafNormal (log marginal, split gain, posterior)."""
    from scipy.stats import multivariate_normal

    from bdtree_jax.likelihoods import BARTLeafNormal, BARTLeafWeightedNormal

    rng = np.random.default_rng(3)
    r, w, b = rng.normal(size=6), rng.uniform(0.3, 3.0, 6), rng.normal(size=6)
    sigma2, tau2 = 0.7, 0.4
    lik = BARTLeafWeightedNormal(sigma2, tau2)
    stats = lik.row_stats(jnp.asarray(r), jnp.asarray(w), jnp.asarray(b)).sum(0)
    cov = sigma2 * np.diag(1 / w) + tau2 * np.outer(b, b)
    exact = multivariate_normal(np.zeros(6), cov).logpdf(r) - 0.5 * np.sum(np.log(w))
    np.testing.assert_allclose(float(lik.leaf_log_lik(stats)), exact, rtol=1e-5)
    precision = 1 / tau2 + np.sum(w * b * b) / sigma2
    mean, sd = lik.leaf_posterior(stats)
    np.testing.assert_allclose([float(mean), float(sd)],
                               [np.sum(w * b * r) / sigma2 / precision, precision ** -0.5], rtol=1e-5)

    ones = jnp.ones(6)
    plain = BARTLeafNormal(sigma2, tau2)
    unit = lik.row_stats(jnp.asarray(r), ones, ones)
    both = jnp.stack([unit[:3].sum(0), unit[3:].sum(0), unit.sum(0)])
    plain_stats = jnp.asarray(plain.point_stats(r))
    plain_both = jnp.stack([plain_stats[:3].sum(0), plain_stats[3:].sum(0), plain_stats.sum(0)])
    np.testing.assert_allclose(lik.leaf_log_lik(both), plain.leaf_log_lik(plain_both), rtol=1e-5)
    is_leaf = jnp.array([False, False, True])
    np.testing.assert_allclose(lik.split_gain(both, is_leaf, 2, both[0]),
                               plain.split_gain(plain_both, is_leaf, 2, plain_both[0]), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(lik.leaf_posterior(both), plain.leaf_posterior(plain_both), rtol=1e-5)
