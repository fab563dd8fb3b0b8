"""Tests for ``Posterior.to_arviz`` and ``bdtree_jax._arviz`` with ArviZ 0.2x (``InferenceData``,
Python 3.11) and ArviZ 1.x (``xarray.DataTree``, Python 3.12+).

The checks compare the ArviZ data with the sampler's own arrays and with quantities computed
independently from the training data; one small posterior per task is fitted (JAX compilation
dominates the run time) and shared by the module.
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import arviz as az  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402
import xarray as xr  # noqa: E402

import bdtree_jax as bd  # noqa: E402
from bdtree_jax._arviz import arviz_major_version, make_inference_data  # noqa: E402

ARVIZ_1 = arviz_major_version() >= 1

pytestmark = [
    # ArviZ's R-hat (0.2x: arviz.stats.diagnostics, 1.x: arviz_stats.base.diagnostics) divides the
    # between- by the within-chain variance.  A tree-size variable that never changes within a
    # chain (``depth`` stays at ``max_depth`` in these short runs) makes numpy warn about 0/0 or
    # x/0; ArviZ returns NaN / inf for it, which is the correct answer, not an error.
    pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning:arviz"),
    pytest.mark.filterwarnings("ignore:divide by zero encountered:RuntimeWarning:arviz"),
]

POINTWISE_GROUPS = {"log_likelihood", "posterior_predictive", "observed_data"}
NOISE_SD = 0.2  # sd of the noise of make_cgm


def _groups(data) -> set[str]:
    return set(data.children) if ARVIZ_1 else set(data.groups())


def _values(data, group: str, var: str) -> np.ndarray:
    return np.asarray(data[group][var].values)


def _loo(data) -> tuple[float, float, int, int]:
    """(elpd_loo, p_loo, n_samples, n_data_points) of az.loo in either ArviZ."""
    res = az.loo(data)
    if ARVIZ_1:
        return float(res.elpd), float(res.p), int(res.n_samples), int(res.n_data_points)
    return float(res["elpd_loo"]), float(res["p_loo"]), int(res["n_samples"]), int(res["n_data_points"])


def _logmeanexp(a: np.ndarray, axis) -> np.ndarray:
    m = np.max(a, axis=axis, keepdims=True)
    return np.squeeze(m, axis) + np.log(np.mean(np.exp(a - m), axis=axis))


# -- fixtures ------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def clf():
    X, y = bd.datasets.load("iris")
    X, y = X.iloc[::3].reset_index(drop=True), y.iloc[::3].reset_index(drop=True)  # 50 rows
    post = bd.sample(X, y, num_warmup=50, num_samples=100, num_chains=2, max_depth=2, progress=False)
    return post, post.to_arviz(), X, y


@pytest.fixture(scope="module")
def reg():
    X, y = bd.datasets.make_cgm(60, seed=1)
    # A weak prior on the noise and the leaf means: with the data-based defaults (lam from
    # var(y) ~ 9 and leaf-mean prior sd = sigma * sqrt(3)) the exact posterior of sigma on 60
    # rows sits near 0.6, i.e. it measures the prior rather than the noise sd (0.2).
    post = bd.sample(
        X, y, task="regression", max_depth=3, a=0.01, lam=0.01,
        num_warmup=1000, num_samples=500, num_chains=2, progress=False,
    )
    return post, post.to_arviz(), X, y


# -- make_inference_data (no sampling) -------------------------------------------------------------
def test_make_inference_data_roundtrip():
    rng = np.random.default_rng(0)
    theta = rng.normal(size=(2, 5))
    ll = -rng.random((2, 5, 3))
    obs = np.array([1.0, 2.0, 3.0])
    data = make_inference_data(
        {"posterior": {"theta": theta}, "log_likelihood": {"y": ll}, "observed_data": {"y": obs}},
        dims={"y": ["obs"]},
    )
    if ARVIZ_1:
        assert isinstance(data, xr.DataTree)
    else:
        assert isinstance(data, az.InferenceData)
    assert _groups(data) == {"posterior", "log_likelihood", "observed_data"}
    np.testing.assert_array_equal(_values(data, "posterior", "theta"), theta)
    np.testing.assert_array_equal(_values(data, "log_likelihood", "y"), ll)
    np.testing.assert_array_equal(_values(data, "observed_data", "y"), obs)
    assert data["log_likelihood"]["y"].dims == ("chain", "draw", "obs")
    assert data["observed_data"]["y"].dims == ("obs",)
    np.testing.assert_array_equal(data["observed_data"]["y"].coords["obs"].values, [0, 1, 2])
    np.testing.assert_array_equal(data["posterior"]["theta"].coords["chain"].values, [0, 1])
    np.testing.assert_array_equal(data["posterior"]["theta"].coords["draw"].values, np.arange(5))


def test_make_inference_data_rejects_inconsistent_dims():
    ll = np.zeros((2, 5, 3))
    with pytest.raises(ValueError, match="obs"):
        make_inference_data(
            {"log_likelihood": {"y": ll}, "observed_data": {"y": np.zeros(4)}}, dims={"y": ["obs"]}
        )
    with pytest.raises(ValueError, match="event shape"):
        make_inference_data({"posterior": {"y": ll}}, dims={"y": ["obs", "extra"]})
    with pytest.raises(ValueError, match="chain, draw"):
        make_inference_data({"posterior": {"theta": np.zeros(5)}})


def test_arviz_major_version_parsing():
    assert arviz_major_version("0.23.4") == 0
    assert arviz_major_version("1.3.0") == 1
    assert arviz_major_version("1.0.0rc1") == 1
    assert arviz_major_version() == int(az.__version__.split(".")[0])


# -- classification --------------------------------------------------------------------------------
def test_groups_and_type(clf):
    post, idata, _, _ = clf
    assert isinstance(idata, xr.DataTree if ARVIZ_1 else az.InferenceData)
    assert _groups(idata) == {"posterior", "sample_stats"} | POINTWISE_GROUPS
    assert set(idata["posterior"].data_vars) == {"n_leaves", "depth"}  # no sigma: classification
    assert idata["posterior"]["n_leaves"].dims == ("chain", "draw")
    assert idata["posterior"]["n_leaves"].shape == (2, 100)
    for group in ("log_likelihood", "posterior_predictive"):
        assert idata[group]["y"].dims == ("chain", "draw", "obs")
        assert idata[group]["y"].shape == (2, 100, 50)
    np.testing.assert_array_equal(idata["observed_data"]["y"].coords["obs"].values, np.arange(50))


def test_posterior_and_sample_stats_equal_the_sampler_stats(clf):
    post, idata, _, _ = clf
    for var, key in [("n_leaves", "n_leaves"), ("depth", "depth")]:
        np.testing.assert_array_equal(_values(idata, "posterior", var), post.stats[key])
    expected = {
        "lp": post.stats["log_posterior"],
        "log_marginal_likelihood": post.stats["log_lik"],
        "log_prior": post.stats["log_prior"],
        "accepted": post.stats["accepted"],
        "move": post.stats["move"],
    }
    assert set(idata["sample_stats"].data_vars) == set(expected)
    for var, arr in expected.items():
        np.testing.assert_array_equal(_values(idata, "sample_stats", var), arr)
    np.testing.assert_allclose(
        _values(idata, "sample_stats", "lp"),
        post.stats["log_lik"] + post.stats["log_prior"], rtol=1e-6,
    )


def test_observed_data_are_the_training_label_codes(clf):
    post, idata, _, y = clf
    obs = _values(idata, "observed_data", "y")
    codes = pd.Categorical(y, categories=post.classes).codes
    assert (codes >= 0).all()
    np.testing.assert_array_equal(obs, codes)
    np.testing.assert_array_equal(post.classes[obs.astype(int)], y.to_numpy())


def test_log_likelihood_classification(clf):
    post, idata, X, y = clf
    ll = _values(idata, "log_likelihood", "y")
    assert np.isfinite(ll).all()
    assert (ll <= 0).all()
    # exp(ll) is the drawn probability of the observed class; over the draws it averages to the
    # posterior-mean probability of that class, which predict_proba computes independently.
    codes = pd.Categorical(y, categories=post.classes).codes
    expected = post.predict_proba(X)[np.arange(len(y)), codes]
    np.testing.assert_allclose(np.exp(ll).mean(axis=(0, 1)), expected, atol=0.1)


def test_posterior_predictive_classification(clf):
    post, idata, _, y = clf
    rep = _values(idata, "posterior_predictive", "y")
    assert set(np.unique(rep)) <= {0.0, 1.0, 2.0}
    # P(replicate == observed | draw) is the drawn probability of the observed class.
    obs = _values(idata, "observed_data", "y")
    ll = _values(idata, "log_likelihood", "y")
    np.testing.assert_allclose((rep == obs).mean(), np.exp(ll).mean(), atol=0.03)


def test_summary_and_rhat(clf):
    post, idata, _, _ = clf
    summary = az.summary(idata, round_to="none")
    assert list(summary.index) == ["n_leaves", "depth"]
    for var in ("n_leaves", "depth"):
        arr = np.asarray(post.stats[var], float)
        np.testing.assert_allclose(summary.loc[var, "mean"], arr.mean(), rtol=1e-12)
        np.testing.assert_allclose(summary.loc[var, "sd"], arr.std(ddof=1), rtol=1e-10)
    rhat = az.rhat(idata)
    assert set(rhat.data_vars) == {"n_leaves", "depth"}
    # rhat on the Posterior's (chain, draw) array: chains and draws are laid out as ArviZ expects
    reference = az.rhat(np.asarray(post.stats["n_leaves"], float))
    np.testing.assert_allclose(float(rhat["n_leaves"]), float(reference), rtol=1e-12)
    np.testing.assert_allclose(summary.loc["n_leaves", "r_hat"], float(reference), rtol=1e-12)


def test_loo_classification(clf):
    post, idata, _, _ = clf
    elpd, p_loo, n_samples, n_obs = _loo(idata)
    assert (n_samples, n_obs) == (200, 50)
    ll = _values(idata, "log_likelihood", "y").reshape(200, 50)
    lppd = _logmeanexp(ll, axis=0).sum()
    assert np.isfinite(elpd) and elpd < 0
    np.testing.assert_allclose(elpd + p_loo, lppd, rtol=1e-5)


def test_plot_trace(clf):
    post, idata, _, _ = clf
    plt.close("all")
    try:
        az.plot_trace(idata, var_names=["n_leaves", "depth"])
        assert plt.get_fignums()
        traces = [
            np.asarray(line.get_ydata(), float)
            for num in plt.get_fignums()
            for ax in plt.figure(num).axes
            for line in ax.get_lines()
            if len(line.get_ydata()) == post.num_draws
        ]
        # one trace line per chain and variable, with the draws in order
        for var in ("n_leaves", "depth"):
            for chain in range(post.num_chains):
                draws = np.asarray(post.stats[var][chain], float)
                assert any(np.array_equal(t, draws) for t in traces), (var, chain)
    finally:
        plt.close("all")


def test_without_pointwise_groups(clf):
    post, _, _, _ = clf
    idata = post.to_arviz(pointwise=False)
    assert _groups(idata) == {"posterior", "sample_stats"}
    np.testing.assert_array_equal(_values(idata, "posterior", "n_leaves"), post.stats["n_leaves"])


def test_max_draws_pointwise_thins_every_group_alike(clf):
    post, full, _, _ = clf
    idata = post.to_arviz(max_draws_pointwise=50)  # 25 of 100 draws per chain: every 4th
    keep = np.arange(0, 100, 4)
    for group in ("posterior", "sample_stats", "log_likelihood", "posterior_predictive"):
        assert idata[group].sizes["draw"] == 25, group
    np.testing.assert_array_equal(_values(idata, "posterior", "n_leaves"), post.stats["n_leaves"][:, keep])
    np.testing.assert_array_equal(_values(idata, "sample_stats", "lp"), post.stats["log_posterior"][:, keep])
    np.testing.assert_array_equal(_values(idata, "observed_data", "y"), _values(full, "observed_data", "y"))
    ll = _values(idata, "log_likelihood", "y")
    assert np.isfinite(ll).all() and (ll <= 0).all()
    with pytest.raises(ValueError, match="max_draws_pointwise"):
        post.to_arviz(max_draws_pointwise=1)


# -- regression ------------------------------------------------------------------------------------
def test_regression_groups_and_stats(reg):
    post, idata, _, y = reg
    assert _groups(idata) == {"posterior", "sample_stats"} | POINTWISE_GROUPS
    assert set(idata["posterior"].data_vars) == {"n_leaves", "depth", "sigma"}
    assert idata["posterior"]["sigma"].shape == (2, 500)
    np.testing.assert_array_equal(_values(idata, "posterior", "n_leaves"), post.stats["n_leaves"])
    np.testing.assert_array_equal(_values(idata, "sample_stats", "lp"), post.stats["log_posterior"])
    np.testing.assert_allclose(_values(idata, "observed_data", "y"), y.to_numpy(), rtol=1e-6)


def test_regression_sigma(reg):
    post, idata, _, y = reg
    sigma = _values(idata, "posterior", "sigma")
    assert np.isfinite(sigma).all() and (sigma > 0).all()
    assert NOISE_SD / 3 < sigma.mean() < 3 * NOISE_SD

    # Each sigma is a draw of the noise sd given the draw's tree: sigma^2 | tree is inverse gamma
    # with shape (n + nu)/2 and rate (q + nu lam)/2, q = sum over leaves of s2 - s1^2/(n_i + a)
    # on y - mu_bar, so E[sigma^2] is the average of rate / (shape - 1) over the draws.
    lik = post.likelihood
    r = y.to_numpy() - lik.mu_bar
    n = len(r)
    cache: dict = {}
    expected = np.empty(sigma.shape)
    for c in range(post.num_chains):
        for d in range(post.num_draws):
            tree = post.tree(c, d)
            key = (tree.is_split.tobytes(), tree.feature.tobytes(), tree.cut.tobytes())
            if key not in cache:
                leaf = np.asarray(bd.tree.leaf_index(tree, post.train_bins))
                q = 0.0
                for node in np.unique(leaf):
                    ri = r[leaf == node]
                    q += np.sum(ri**2) - np.sum(ri) ** 2 / (len(ri) + lik.a)
                cache[key] = (q + lik.nu * lik.lam) / 2 / ((n + lik.nu) / 2 - 1)
            expected[c, d] = cache[key]
    np.testing.assert_allclose(np.mean(sigma**2), expected.mean(), rtol=0.05)


def test_regression_log_likelihood_and_predictive(reg):
    post, idata, X, _ = reg
    sigma = _values(idata, "posterior", "sigma")
    ll = _values(idata, "log_likelihood", "y")
    assert np.isfinite(ll).all()
    # normal log density: at most its value at the mean, -log(2 pi sigma^2)/2, for the same sigma
    bound = -0.5 * np.log(2 * np.pi * sigma.astype(float) ** 2)
    assert (ll <= bound[..., None] + 1e-4).all()
    rep = _values(idata, "posterior_predictive", "y")
    assert np.isfinite(rep).all()
    np.testing.assert_allclose(rep.mean(axis=(0, 1)), post.predict(X), atol=0.1)


def test_regression_summary_rhat_loo_plot(reg):
    post, idata, _, _ = reg
    summary = az.summary(idata, var_names=["n_leaves", "depth", "sigma"], round_to="none")
    sigma = _values(idata, "posterior", "sigma").astype(float)
    np.testing.assert_allclose(summary.loc["sigma", "mean"], sigma.mean(), rtol=1e-6)
    np.testing.assert_allclose(summary.loc["n_leaves", "mean"], np.mean(post.stats["n_leaves"]), rtol=1e-12)
    rhat = az.rhat(idata, var_names=["sigma"])
    # (sigma is float32 in the data; ArviZ 1.x keeps that precision)
    np.testing.assert_allclose(float(rhat["sigma"]), float(az.rhat(sigma)), rtol=1e-6)
    elpd, p_loo, n_samples, n_obs = _loo(idata)
    assert (n_samples, n_obs) == (1000, 60)
    ll = _values(idata, "log_likelihood", "y").reshape(1000, 60)
    np.testing.assert_allclose(elpd + p_loo, _logmeanexp(ll.astype(float), axis=0).sum(), rtol=1e-5)
    plt.close("all")
    try:
        az.plot_trace(idata, var_names=["sigma"])
        assert plt.get_fignums()
    finally:
        plt.close("all")
