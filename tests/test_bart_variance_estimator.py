"""BARTRegressor(variance_trees=J): bad input (a ValueError naming the argument before anything
compiles), sigma(x) and predictive intervals that widen where the data are noisier, ArviZ export
with the heteroskedastic log-likelihood, same seed same draws, checkpoint and resume, categorical
and missing X; variance_trees=0 is the homoskedastic model."""

import numpy as np
import pandas as pd
import pytest
from scipy.stats import norm

import bdtree_jax as bd
from bdtree_jax import driver
from bdtree_jax.posterior.bart_variance import BARTVariancePosterior

# one small configuration shared by the tests (one compiled program per data shape)
FAST = dict(num_trees=8, variance_trees=4, max_depth=3, num_warmup=40, num_samples=30, num_chains=2, progress=False)
pytestmark = pytest.mark.filterwarnings("ignore::bdtree_jax.ConvergenceWarning")


def _data(n=120, seed=0):
    """x0 drives the mean, x1 the noise sd (0.05 to 0.85)."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(size=(n, 2))
    sd = 0.05 + 0.8 * (X[:, 1] > 0.5)
    return X, np.where(X[:, 0] > 0.5, 1.0, -1.0) + sd * rng.normal(size=n), sd


@pytest.fixture(scope="module")
def fitted(tmp_path_factory):
    X, y, _ = _data()
    path = str(tmp_path_factory.mktemp("variance") / "run.npz")
    return bd.BARTRegressor(**FAST, checkpoint=path).fit(X, y), path


def test_sigma_and_predictive_intervals_follow_the_noise(fitted):
    """sigma(x) is larger where x1 > 0.5 (true 0.85 vs 0.05); its interval brackets its mean;
    predictive intervals are wider there and contain the function's intervals; draws' shapes."""
    est, _ = fitted
    X, y, sd = _data()
    s = est.predict_sigma(X)
    noisy = sd > 0.5
    assert s[noisy].mean() > 3 * s[~noisy].mean()
    lo, hi = est.predict_sigma_interval(X, prob=0.8)
    assert np.all(lo <= s) and np.all(s <= hi)
    flo, fhi = est.predict_interval(X)
    plo, phi = est.predict_interval(X, predictive=True)
    assert np.all(plo <= flo + 1e-9) and np.all(phi >= fhi - 1e-9)
    assert np.median((phi - plo)[noisy]) > 3 * np.median((phi - plo)[~noisy])
    assert est.posterior_.predict_sigma_draws(X[:5]).shape == (60, 5)
    assert isinstance(est.posterior_, BARTVariancePosterior)
    lpd = est.posterior_.log_predictive_density(X, y)
    assert lpd.shape == (len(y),) and np.all(np.isfinite(lpd))


def test_arviz_log_likelihood(fitted):
    """``log_likelihood`` is ``N(y_i; f(x_i), sigma(x_i)**2)`` per draw."""
    est, _ = fitted
    X, y, _ = _data()
    idata = est.posterior_.to_arviz()
    ll = np.asarray(idata["log_likelihood"]["y"])
    assert ll.shape == (2, 30, len(y))
    post = est.posterior_
    want = norm.logpdf(y, post.train_draws(), np.exp(0.5 * post.variance.train_draws()))
    np.testing.assert_allclose(ll, want)
    assert "sigma" in idata["posterior"] and "sigma_sd" in idata["posterior"]


def test_same_seed_same_draws_and_resume(fitted):
    """A second fit with the checkpoint of the first resumes it: the same draws of both forests;
    another seed gives other draws."""
    est, path = fitted
    X, y, _ = _data()
    again = bd.BARTRegressor(**FAST, checkpoint=path).fit(X, y)
    np.testing.assert_array_equal(again.posterior_.leaf_values, est.posterior_.leaf_values)
    np.testing.assert_array_equal(again.posterior_.variance.leaf_values, est.posterior_.variance.leaf_values)
    other = bd.BARTRegressor(**{**FAST, "seed": 1}).fit(X, y)
    assert not np.array_equal(other.posterior_.variance.leaf_values, est.posterior_.variance.leaf_values)


def test_save_load(fitted, tmp_path):
    """The posterior round-trips through the file format, sigma(x) included."""
    est, _ = fitted
    X, _, _ = _data()
    path = tmp_path / "variance.bdt"
    est.posterior_.save(path)
    loaded = bd.load(path)
    assert isinstance(loaded, BARTVariancePosterior)
    np.testing.assert_array_equal(loaded.predict_sigma(X), est.predict_sigma(X))
    np.testing.assert_array_equal(loaded.predict(X), est.predict(X))


@pytest.mark.slow
def test_fresh_fit_equals_first():
    """Same seed, no checkpoint: the same draws of both forests."""
    X, y, _ = _data()
    a = bd.BARTRegressor(**FAST).fit(X, y)
    b = bd.BARTRegressor(**FAST).fit(X, y)
    np.testing.assert_array_equal(a.posterior_.variance.leaf_values, b.posterior_.variance.leaf_values)
    np.testing.assert_array_equal(a.posterior_.leaf_values, b.posterior_.leaf_values)


@pytest.mark.slow
def test_categorical_and_missing_X():
    """A categorical column (pandas category) and missing cells go through the general-rule
    kernels in both forests: the noisy level gets the larger sigma."""
    rng = np.random.default_rng(2)
    n = 150
    df = pd.DataFrame({"g": pd.Categorical(rng.choice(["a", "b", "c"], n)), "x": rng.uniform(size=n)})
    df.loc[::10, "x"] = np.nan
    y = np.nan_to_num(df.x.to_numpy()) + np.where(df.g == "b", 1.0, 0.1) * rng.normal(size=n)
    est = bd.BARTRegressor(**FAST).fit(df, y)
    s = est.predict_sigma(df)
    assert s[(df.g == "b").to_numpy()].mean() > 2 * s[(df.g != "b").to_numpy()].mean()


@pytest.mark.parametrize("params,match", [
    (dict(variance_trees=-1), "variance_trees must be an integer >= 0"),
    (dict(variance_trees=2.5), "variance_trees must be an integer >= 0"),
    (dict(variance_trees=True), "variance_trees must be an integer >= 0"),
    (dict(variance_trees=3, sparse=True, sparse_theta=-1.0), "sparse_theta must be"),
    (dict(variance_trees=3, data_shards=2), "data_shards must be 1"),
], ids=["negative", "float", "bool", "sparse", "shards"])
def test_bad_input_raises_before_compiling(params, match):
    X, y, _ = _data(20)
    before = driver.trace_count()
    with pytest.raises(ValueError, match=match):
        bd.BARTRegressor(**{**FAST, **params}).fit(X, y)
    assert driver.trace_count() == before


def test_predict_sigma_needs_a_variance_forest():
    """variance_trees=0 keeps BART's posterior (one sigma); predict_sigma says why it cannot."""
    est = bd.BARTRegressor(num_trees=3)
    assert est.get_params()["variance_trees"] == 0
    with pytest.raises(Exception, match="not fitted"):
        est.predict_sigma(np.zeros((2, 2)))
