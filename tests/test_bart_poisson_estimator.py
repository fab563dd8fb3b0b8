"""BARTPoissonRegressor: scikit-learn conventions, bad input (a ValueError naming the argument
before anything compiles), exposure in fit and predict, reproducibility, categorical and missing
X, ArviZ export with the Poisson log-likelihood."""

import numpy as np
import pandas as pd
import pytest
from scipy.stats import poisson
from sklearn.base import clone
from sklearn.model_selection import GridSearchCV

import bdtree_jax as bd
from bdtree_jax import driver

# one small configuration shared by the tests (one compiled program per data shape)
FAST = dict(num_trees=10, max_depth=3, num_warmup=30, num_samples=30, num_chains=2, progress=False)
pytestmark = pytest.mark.filterwarnings("ignore::bdtree_jax.ConvergenceWarning")


def _data(n=120, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(size=(n, 2))
    exposure = rng.uniform(0.5, 3.0, n)
    rate = np.exp(0.5 + 1.5 * (X[:, 0] > 0.5))
    return X, rng.poisson(exposure * rate), exposure, rate


@pytest.fixture(scope="module")
def fitted():
    X, y, e, _ = _data()
    return bd.BARTPoissonRegressor(**FAST).fit(X, y, exposure=e)


def test_predictions_exposure_and_intervals(fitted):
    """The expected count scales with the exposure given to predict; the fitted rate separates the
    two halves of x0 (rates e^0.5 and e^2); intervals bracket the mean; draws have (draws, n)."""
    X, y, e, rate = _data()
    p1 = fitted.predict(X)
    np.testing.assert_allclose(fitted.predict(X, exposure=e), e * p1, rtol=1e-12)
    assert np.mean(p1[X[:, 0] > 0.5]) > 3 * np.mean(p1[X[:, 0] <= 0.5])
    assert np.mean(np.abs(np.log(p1 / rate))) < 0.3
    lo, hi = fitted.predict_interval(X, exposure=e)
    assert np.all(lo <= e * p1) and np.all(e * p1 <= hi)
    plo, phi = fitted.predict_interval(X, exposure=e, predictive=True)
    assert np.all(plo <= lo + 1e-9) and np.all(phi >= hi - 1e-9)
    assert np.all(plo == np.round(plo))  # counts
    draws = fitted.predict_draws(X[:5], exposure=e[:5])
    assert draws.shape == (60, 5)
    np.testing.assert_allclose(draws.mean(0), e[:5] * p1[:5], rtol=1e-10)


def test_exposure_in_fit_is_a_rate_offset():
    """Multiplying every exposure by 2 halves the fitted rate per unit exposure: the rows' rates
    ``exposure exp(offset)`` (offset = log(sum y / sum exposure)) do not change, so the draws are
    the same and only the offset moves by log 2."""
    X, y, e, _ = _data()
    a = bd.BARTPoissonRegressor(**FAST).fit(X, y, exposure=e)
    b = bd.BARTPoissonRegressor(**FAST).fit(X, y, exposure=2 * e)
    np.testing.assert_allclose(b.predict(X), a.predict(X) / 2, rtol=1e-4)
    np.testing.assert_allclose(b.predict(X, exposure=2 * e), a.predict(X, exposure=e), rtol=1e-4)


def test_exposure_explains_counts():
    """Counts proportional to the exposure and a constant rate: with the exposure the fitted rate is
    flat; without it (the exposure a function of x0) the model must put it in the trees."""
    rng = np.random.default_rng(3)
    X = rng.uniform(size=(120, 2))  # the fixture's shape: its compiled program serves
    e = np.exp(2.0 * X[:, 0])
    y = rng.poisson(2.0 * e)
    with_e = bd.BARTPoissonRegressor(**FAST).fit(X, y, exposure=e).predict(X)
    without = bd.BARTPoissonRegressor(**FAST).fit(X, y).predict(X)
    spread = lambda p: np.log(p[X[:, 0] > 0.8].mean() / p[X[:, 0] < 0.2].mean())  # noqa: E731
    assert abs(spread(with_e)) < 0.3
    assert spread(without) > 1.0


def test_reproducible(fitted):
    X, y, e, _ = _data()
    again = bd.BARTPoissonRegressor(**FAST).fit(X, y, exposure=e)
    np.testing.assert_array_equal(again.posterior_.leaf_values, fitted.posterior_.leaf_values)
    other = bd.BARTPoissonRegressor(**{**FAST, "seed": 1}).fit(X, y, exposure=e)
    assert not np.array_equal(other.posterior_.leaf_values, fitted.posterior_.leaf_values)


def test_arviz_log_likelihood(fitted):
    """``log_likelihood`` holds the Poisson log pmf of every training row per draw."""
    X, y, e, _ = _data()
    idata = fitted.posterior_.to_arviz()
    ll = np.asarray(idata["log_likelihood"]["y"])
    assert ll.shape == (2, 30, len(y))
    mu = e * np.exp(fitted.posterior_.train_draws())
    np.testing.assert_allclose(ll, poisson.logpmf(y, mu))
    rep = np.asarray(idata["posterior_predictive"]["y"].values)  # replicated counts (az.plot_ppc)
    assert rep.shape == ll.shape and np.all(rep >= 0) and np.all(rep == np.round(rep))
    np.testing.assert_allclose(rep.mean((0, 1)).sum(), mu.mean((0, 1)).sum(), rtol=0.05)
    assert "fit_mean" in idata["posterior"] and "sigma" not in idata["posterior"]
    with pytest.raises(AttributeError, match="no noise"):
        fitted.posterior_.sigma


def test_sklearn_conventions():
    X, y, e, _ = _data()
    est = bd.BARTPoissonRegressor(k=1.5, **FAST)
    assert clone(est).get_params()["k"] == 1.5
    assert est.set_params(alpha=0.9).alpha == 0.9
    assert "exposure" not in est.get_params()
    with pytest.raises(Exception, match="not fitted"):
        est.predict(X)


@pytest.mark.slow
def test_grid_search_splits_the_exposure():
    X, y, e, _ = _data()
    search = GridSearchCV(bd.BARTPoissonRegressor(**FAST), {"k": [1.0, 2.0]}, cv=2)
    search.fit(X, y, exposure=e)  # the exposure split with the rows
    assert search.best_params_["k"] in (1.0, 2.0)
    assert search.predict(X[:3]).shape == (3,)


@pytest.mark.slow
def test_categorical_and_missing_X():
    """A categorical column (pandas category) and missing cells go through the general-rule kernels."""
    rng = np.random.default_rng(2)
    n = 120
    df = pd.DataFrame({"g": pd.Categorical(rng.choice(["a", "b", "c"], n)), "x": rng.uniform(size=n)})
    df.loc[::10, "x"] = np.nan
    y = rng.poisson(np.where(df.g == "b", 8.0, 1.0))
    est = bd.BARTPoissonRegressor(**FAST).fit(df, y)
    p = est.predict(df)
    assert p[(df.g == "b").to_numpy()].mean() > 3 * p[(df.g != "b").to_numpy()].mean()


def _bad_inputs():
    X, y, e, _ = _data(20)
    return [
        ("negative y", dict(X=X, y=np.r_[-1, y[1:]]), "y must hold non-negative integer counts; got a negative"),
        ("non-integer y", dict(X=X, y=np.r_[0.5, y[1:]]), "y must hold non-negative integer counts; got the non-int"),
        ("nan y", dict(X=X, y=np.r_[np.nan, y[1:]]), "y contains NaN"),
        ("string y", dict(X=X, y=np.array(["a"] * 20)), "y must hold non-negative integer counts; got dtype"),
        ("all zero", dict(X=X, y=np.zeros(20)), "every count in y is 0"),
        ("y length", dict(X=X, y=y[:-1]), "y"),
        ("zero exposure", dict(X=X, y=y, exposure=np.r_[0.0, e[1:]]), "exposure must be finite numbers > 0"),
        ("negative exposure", dict(X=X, y=y, exposure=-e), "exposure must be finite numbers > 0"),
        ("nan exposure", dict(X=X, y=y, exposure=np.r_[np.nan, e[1:]]), "exposure must be finite numbers > 0"),
        ("exposure length", dict(X=X, y=y, exposure=e[:-1]), "exposure"),
        ("exposure 2-D", dict(X=X, y=y, exposure=np.ones((20, 2))), "exposure"),
        ("1-D X", dict(X=X[:, 0], y=y), "2-D"),
        ("k", dict(X=X, y=y, k=0.0), "k must be > 0"),
        ("data_shards", dict(X=X, y=y, data_shards=2), "data_shards must be 1"),
    ]


@pytest.mark.parametrize("case", _bad_inputs(), ids=lambda c: c[0])
def test_bad_input_raises_before_compiling(case):
    _, data, match = case
    params = {k: data.pop(k) for k in ("k", "data_shards") if k in data}
    before = driver.trace_count()
    with pytest.raises(ValueError, match=match):
        bd.BARTPoissonRegressor(**{**FAST, **params}).fit(**data)
    assert driver.trace_count() == before


def test_predict_bad_exposure(fitted):
    X, _, _, _ = _data()
    for bad in (np.zeros(len(X)), np.ones(3)):
        with pytest.raises(ValueError, match="exposure"):
            fitted.predict(X, exposure=bad)


def test_save_load_and_score(fitted, tmp_path):
    """The posterior round-trips through the file format; ``score`` is R^2 with the exposure."""
    X, y, e, _ = _data()
    path = tmp_path / "counts.bdt"
    fitted.posterior_.save(path)
    loaded = bd.load(path)
    assert isinstance(loaded, bd.BARTPoissonPosterior)
    np.testing.assert_array_equal(loaded.predict(X, exposure=e), fitted.predict(X, exposure=e))
    np.testing.assert_array_equal(loaded.exposure_train, e)
    assert fitted.score(X, y, exposure=e) > fitted.score(X, y) and fitted.score(X, y, exposure=e) > 0.5
