"""BART's ArviZ export: the ``posterior_predictive`` and ``log_likelihood`` groups that
``az.plot_ppc`` and ``az.loo`` read (ArviZ 0.2x and 1.x).  The posteriors are built from made-up
draws (two depth-1 trees per draw, random rules and leaf values): the export depends on the draws,
not on how they were sampled, and no sampler is compiled (the fitted models' exports are checked
in tests/test_bart*.py)."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import arviz as az  # noqa: E402
import jax  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from scipy.special import ndtr  # noqa: E402

import bdtree_jax as bd  # noqa: E402
from bdtree_jax._arviz import arviz_major_version  # noqa: E402
from bdtree_jax.data import make_split_grid  # noqa: E402
from bdtree_jax.tree import Tree  # noqa: E402

C, S, M, n = 2, 30, 2, 40


def _posterior(cls, y, **extra):
    """A ``cls`` posterior of made-up draws at ``n`` training rows of 2 features."""
    rng = np.random.default_rng(0)
    X = rng.uniform(size=(n, 2))
    grid = make_split_grid(X)
    is_split = np.zeros((C, S, M, 3), bool)
    is_split[..., 0] = True
    trees = Tree(is_split, np.where(is_split, rng.integers(0, 2, is_split.shape), 0).astype(np.int32),
                 np.where(is_split, rng.integers(0, n - 1, is_split.shape), 0).astype(np.int32))
    values = np.where(is_split, 0.0, rng.normal(size=is_split.shape)).astype(np.float32)
    stats = dict(sigma=0.5 + rng.random((C, S)), fit_mean=rng.normal(size=(C, S)), fit_sd=rng.random((C, S)))
    return cls(trees=trees, leaf_values=values, stats=stats, warmup_stats={}, grid=grid, y_offset=0.1, y_scale=1.0,
               config=None, train_bins=grid.codes(X), y_train=y, feature_names=["a", "b"], **extra)


@pytest.fixture(scope="module")
def reg():
    y = np.random.default_rng(1).normal(size=n)
    post = _posterior(bd.BARTPosterior, y)
    return post, post.to_arviz(seed=3), y


def test_regression_posterior_predictive_is_the_function_plus_noise(reg):
    post, idata, y = reg
    rep = np.asarray(idata["posterior_predictive"]["y"].values)
    assert rep.shape == (C, S, n) and idata["posterior_predictive"]["y"].dims == ("chain", "draw", "obs")
    # y_rep = f + sigma * eps with eps the standard normals of key(seed)
    eps = np.asarray(jax.random.normal(jax.random.key(3), rep.shape), np.float64)
    np.testing.assert_allclose(rep, post.train_draws() + post.sigma[..., None] * eps, rtol=1e-12)
    np.testing.assert_array_equal(post.to_arviz(seed=3)["posterior_predictive"]["y"].values, rep)  # same seed
    assert not np.array_equal(post.to_arviz(seed=4)["posterior_predictive"]["y"].values, rep)
    np.testing.assert_allclose(np.asarray(idata["observed_data"]["y"].values), y)
    assert "posterior_predictive" not in (set(post.to_arviz(pointwise=False).children) if arviz_major_version() >= 1
                                          else set(post.to_arviz(pointwise=False).groups()))


def _loo_and_plot_ppc(idata) -> None:
    """``az.loo`` gives a finite negative elpd and ``az.plot_ppc`` draws a figure (Agg)."""
    loo = az.loo(idata)
    elpd = float(loo.elpd if arviz_major_version() >= 1 else loo["elpd_loo"])
    assert np.isfinite(elpd) and elpd < 0
    plt.close("all")
    try:
        if arviz_major_version() >= 1:
            az.plot_ppc_dist(idata)  # ArviZ 1.x (arviz-plots) names it so
        else:
            az.plot_ppc(idata, num_pp_samples=10, random_seed=0)
        assert plt.get_fignums()
    finally:
        plt.close("all")


def test_regression_loo_and_plot_ppc(reg):
    _loo_and_plot_ppc(reg[1])


def test_classifier_posterior_predictive_codes_loo_and_plot_ppc():
    y = (np.random.default_rng(1).random(n) < 0.5).astype(np.int64)
    post = _posterior(bd.BARTClassifierPosterior, y, classes=np.array(["no", "yes"]))
    idata = post.to_arviz()
    rep = np.asarray(idata["posterior_predictive"]["y"].values)
    assert rep.shape == (C, S, n) and set(np.unique(rep)) <= {0.0, 1.0}
    # rep = 1 where the uniform of key(seed) falls below Phi(f)
    u = np.asarray(jax.random.uniform(jax.random.key(0), rep.shape), np.float64)
    np.testing.assert_array_equal(rep, (u < ndtr(post.train_draws())).astype(float))
    _loo_and_plot_ppc(idata)


def test_survival_has_a_log_likelihood_but_no_replicates():
    """Survival BART: ``log_likelihood`` for LOO, no ``posterior_predictive`` (a replicated log time
    is not comparable with a censored row's censoring time)."""
    rng = np.random.default_rng(1)
    post = _posterior(bd.BARTSurvivalPosterior, rng.normal(size=n), event=rng.random(n) < 0.7)
    idata = post.to_arviz()
    groups = set(idata.children) if arviz_major_version() >= 1 else set(idata.groups())
    assert "posterior_predictive" not in groups and {"log_likelihood", "observed_data"} <= groups
    np.testing.assert_allclose(idata["log_likelihood"]["y"].values, post.pointwise_log_likelihood())
