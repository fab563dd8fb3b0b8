"""Estimators: scikit-learn conventions, predictions, bad input, persistence."""

import numpy as np
import pandas as pd
import pytest
from sklearn.base import clone
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

import bdtree_jax as bd
from bdtree_jax import driver

# One small configuration shared by the tests so they reuse one compiled program per data shape.
FAST = dict(max_depth=3, num_warmup=100, num_samples=200, num_chains=2)


@pytest.fixture(scope="module")
def iris():
    return bd.datasets.load("iris")


@pytest.fixture(scope="module")
def fitted(iris):
    X, y = iris
    return bd.BayesianTreeClassifier(**FAST).fit(X, y)


def test_classifier_predictions(fitted, iris):
    X, y = iris
    proba = fitted.predict_proba(X)
    np.testing.assert_allclose(proba.sum(1), 1.0, rtol=1e-5)
    assert list(fitted.classes_) == ["Iris-setosa", "Iris-versicolor", "Iris-virginica"]
    assert fitted.score(X, y) > 0.93
    assert list(fitted.feature_names_in_) == list(X.columns) and fitted.n_features_in_ == 4
    # the posterior's MAP tree is the draw with the highest log posterior
    post = fitted.posterior_
    lp = post.stats["log_posterior"]
    c, d = np.unravel_index(np.argmax(lp), lp.shape)
    assert bd.tree.to_string(post.map_tree(), post.grid.thresholds) == post.tree_strings()[c * post.num_draws + d]
    text, freq = post.most_visited_tree()
    assert freq == max(post.tree_frequencies().values()) and text in post.tree_strings(names=True)
    assert "petal" in text and post.most_visited_tree(names=False)[0] in post.tree_strings()
    assert "petal" in fitted.map_tree_text()


def test_regressor_predictions_and_intervals():
    X, y = bd.datasets.make_cgm(200, seed=2)
    # CGM needs a few hundred iterations to find the 5-leaf structure from the stump
    reg = bd.BayesianTreeRegressor(**{**FAST, "max_depth": 4, "num_warmup": 500, "num_samples": 500}).fit(X, y)
    truth = bd.datasets.cgm_true_function(X)
    assert np.mean((reg.predict(X) - truth) ** 2) < 0.1
    lo, hi = reg.predict_interval(X, prob=0.9)
    mean = reg.predict(X)
    assert np.all(lo <= mean) and np.all(mean <= hi)
    # credible intervals of f cover the noise-free truth at most rows; prediction intervals
    # cover at least ~90 % of fresh responses (more: with CGM98's a = 1/3 the leaf-mean prior
    # N(mu_bar, sigma^2/a) is narrow next to this signal, which inflates the posterior of sigma)
    assert np.mean((lo <= truth) & (truth <= hi)) > 0.7
    plo, phi = reg.predict_interval(X, prob=0.9, predictive=True)
    assert np.all(phi - plo > hi - lo)
    y_new = truth + np.random.default_rng(5).normal(0, 0.2, len(truth))
    assert np.mean((plo <= y_new) & (y_new <= phi)) > 0.85


def test_sklearn_conventions(iris):
    X, y = iris
    clf = bd.BayesianTreeClassifier(alpha=0.5, **FAST)
    assert clone(clf).get_params()["alpha"] == 0.5
    assert clf.set_params(beta=2.0).beta == 2.0
    with pytest.raises(Exception, match="not fitted"):
        clf.predict(X)
    idx = np.r_[0:150:2]
    search = GridSearchCV(
        make_pipeline(StandardScaler(), bd.BayesianTreeClassifier(**FAST)),
        {"bayesiantreeclassifier__alpha": [0.5, 0.95]},
        cv=2,
    )
    search.fit(X.iloc[idx], y.iloc[idx])
    assert search.best_score_ > 0.85
    assert search.predict(X.iloc[:3]).tolist() == ["Iris-setosa"] * 3


def test_predict_checks_features(fitted, iris):
    X, _ = iris
    with pytest.raises(ValueError, match="expecting 4 features"):
        fitted.predict(X.iloc[:, :3].to_numpy())
    with pytest.raises(ValueError, match="feature names"):
        fitted.predict(X.rename(columns={"sepal_length": "a"}))


def test_save_load_round_trip(fitted, iris, tmp_path):
    X, _ = iris
    path = tmp_path / "post.pkl"
    fitted.posterior_.save(path)
    loaded = bd.Posterior.load(path)
    np.testing.assert_array_equal(loaded.predict_proba(X), fitted.posterior_.predict_proba(X))
    assert loaded.tree_strings() == fitted.posterior_.tree_strings()


def _bad_inputs():
    X, y = bd.datasets.load("iris")
    Xn = X.to_numpy()
    nan = Xn.copy()
    nan[3, 1] = np.nan
    inf = Xn.copy()
    inf[5, 0] = np.inf
    strings = X.assign(sepal_length=X.sepal_length.astype(str))
    ynan = y.to_numpy(dtype=object).copy()
    ynan[0] = None
    return [
        ("nan in X", dict(X=nan, y=y), dict(missing="error"), "NaN"),
        ("nan in X, hmc-df", dict(X=nan, y=y), dict(method="hmc-df"), "method='hmc-df' does not support missing"),
        ("inf in X", dict(X=inf, y=y), {}, "infinite"),
        ("nan in y", dict(X=Xn, y=ynan), {}, "missing"),
        ("lengths", dict(X=Xn, y=y[:-1]), {}, "must match"),
        ("one class", dict(X=Xn, y=np.zeros(150)), {}, "only one class"),
        ("too few rows", dict(X=Xn[:5], y=y[:5]), dict(min_leaf_size=3), "2 \\* min_leaf_size"),
        ("strings", dict(X=strings, y=y), dict(categorical_features=None), "non-numeric columns \\['sepal_length'\\]"),
        ("strings, hmc-df", dict(X=strings, y=y), dict(method="hmc-df"), "method='hmc-df' does not support categ"),
        ("string array", dict(X=np.array([["a", "b"]] * 10), y=[0, 1] * 5), {}, "must be numeric"),
        ("unknown method", dict(X=Xn, y=y), dict(method="magic"), "unknown method 'magic'"),
        ("max_depth", dict(X=Xn, y=y), dict(max_depth=0), "max_depth must be an integer >= 1"),
        ("alpha", dict(X=Xn, y=y), dict(alpha=1.5), "alpha must be in"),
        ("1-D X", dict(X=Xn[:, 0], y=y), {}, "must be 2-D"),
    ]


@pytest.mark.parametrize("case", _bad_inputs(), ids=lambda c: c[0])
def test_bad_input_raises_before_compiling(case):
    _, data, params, match = case
    before = driver.trace_count()
    with pytest.raises(ValueError, match=match):
        bd.BayesianTreeClassifier(**{**FAST, **params}).fit(data["X"], data["y"])
    assert driver.trace_count() == before


def test_regression_bad_y():
    X = np.random.default_rng(0).normal(size=(20, 2))
    with pytest.raises(ValueError, match="NaN or infinite"):
        bd.BayesianTreeRegressor(**FAST).fit(X, np.r_[np.nan, np.ones(19)])
    with pytest.raises(ValueError, match="numeric"):
        bd.BayesianTreeRegressor(**FAST).fit(X, np.array(["a"] * 20))


def test_dataframe_with_boolean_column_is_rejected_without_categorical_features():
    """A bool column is categorical by default (docs/categorical-missing.md); with
    ``categorical_features=None`` every column must be numeric."""
    X = pd.DataFrame({"a": [1.0, 2.0, 3.0, 4.0], "b": [True, False, True, False]})
    with pytest.raises(ValueError, match="non-numeric columns \\['b'\\]"):
        bd.BayesianTreeClassifier(**FAST, categorical_features=None).fit(X, [0, 1, 0, 1])


@pytest.mark.slow
@pytest.mark.parametrize(
    "estimator",
    [
        bd.BayesianTreeClassifier(max_depth=2, num_warmup=20, num_samples=20, num_chains=1),
        # check_regressors_train asks for a training R^2 > 0.5, which needs a real fit
        bd.BayesianTreeRegressor(max_depth=4, num_warmup=200, num_samples=200, num_chains=1),
    ],
    ids=lambda e: type(e).__name__,
)
def test_scikit_learn_check_estimator(estimator):
    """Every one of scikit-learn's estimator checks passes (input validation messages, clone,
    pickling, 1-D / 2-D targets, sparse and complex rejection, fit idempotence, ...)."""
    import warnings

    from sklearn.utils.estimator_checks import check_estimator

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        results = check_estimator(estimator, on_fail=None)
    failed = [(r["check_name"], str(r["exception"])[:300]) for r in results if r["status"] == "failed"]
    assert not failed
    assert len(results) > 40
