"""BARTClassifier with K >= 3 classes (multinomial logistic log-linear BART): a fit on iris
(probabilities, accuracy, intervals per class, ArviZ log-likelihood, importances, files, same seed
same draws), scikit-learn conventions and bad input."""

import warnings

import numpy as np
import pytest
from scipy.special import log_softmax
from sklearn.base import clone
from sklearn.model_selection import train_test_split

import bdtree_jax as bd
from bdtree_jax.datasets import load

RUN = dict(num_trees=10, num_warmup=100, num_samples=100, num_chains=2, seed=0, progress=False)


@pytest.fixture(scope="module")
def iris_fit():
    X, y = load("iris")
    X_tr, X_te, y_tr, y_te = train_test_split(X, y, test_size=0.3, random_state=0, stratify=y)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", bd.ConvergenceWarning)
        clf = bd.BARTClassifier(**RUN).fit(X_tr, y_tr)
    return clf, X_tr, X_te, y_tr, y_te


def test_iris_probabilities_and_accuracy(iris_fit):
    """(n, 3) probabilities summing to 1, labels among ``classes_``, test accuracy well above chance
    (1/3; observed 0.96), R-hat-free checks of the posterior's shapes."""
    clf, X_tr, X_te, y_tr, y_te = iris_fit
    post = clf.posterior_
    assert isinstance(post, bd.BARTMulticlassPosterior)
    assert list(clf.classes_) == sorted(set(y_tr)) and post.n_classes == 3
    p = clf.predict_proba(X_te)
    assert p.shape == (len(X_te), 3) and np.all(p >= 0)
    np.testing.assert_allclose(p.sum(1), 1.0, atol=1e-12)
    pred = clf.predict(X_te)
    assert set(pred) <= set(clf.classes_)
    np.testing.assert_array_equal(pred, clf.classes_[np.argmax(p, 1)])
    assert clf.score(X_te, y_te) >= 0.85
    assert post.trees.is_split.shape[:3] == (2, 100, 3 * 10) and post.leaf_values.shape[2] == 30
    assert post.predict_proba_draws(X_te).shape == (200, len(X_te), 3)
    np.testing.assert_allclose(post.predict_proba_draws(X_te).mean(0), p, atol=1e-12)


def test_intervals_log_likelihood_importances(iris_fit):
    """Intervals per class (n, K) around the mean; the categorical pointwise log-likelihood
    (C, S, n) equals log softmax of the per-class predictors at the true class; ArviZ groups;
    feature importances over every class's trees."""
    clf, X_tr, X_te, y_tr, y_te = iris_fit
    post = clf.posterior_
    p = clf.predict_proba(X_te)
    lo, hi = clf.predict_interval(X_te, prob=0.9)
    assert lo.shape == hi.shape == (len(X_te), 3)
    assert np.all(lo <= p + 1e-12) and np.all(p <= hi + 1e-12) and np.all(hi <= 1) and np.all(lo >= 0)
    with pytest.raises(ValueError, match="prob must be in"):
        clf.predict_interval(X_te, prob=1.5)
    ll = post.pointwise_log_likelihood()
    assert ll.shape == (2, 100, len(X_tr))
    eta = post.predict_draws(X_tr)  # (C S, n, K)
    codes = np.searchsorted(clf.classes_, np.asarray(y_tr))
    want = np.take_along_axis(log_softmax(eta, axis=2), codes[None, :, None], axis=2)[..., 0]
    np.testing.assert_allclose(ll.reshape(200, -1), want, atol=1e-9)
    idata = post.to_arviz()
    assert idata["log_likelihood"]["y"].shape == (2, 100, len(X_tr))
    rep = np.asarray(idata["posterior_predictive"]["y"].values)  # replicated class codes (az.plot_ppc)
    assert rep.shape == (2, 100, len(X_tr)) and set(np.unique(rep)) <= {0.0, 1.0, 2.0}
    assert np.mean(rep == codes) > 0.8  # the fit reproduces most training classes
    fi = clf.feature_importances_
    assert fi.shape == (4,) and fi.sum() == pytest.approx(1.0)
    assert post.summary().loc["train_accuracy", "mean"] > 0.9


def test_save_load_and_same_seed(iris_fit, tmp_path):
    """A saved posterior loads with the same probabilities; the same seed gives the same draws."""
    clf, X_tr, X_te, y_tr, y_te = iris_fit
    path = tmp_path / "iris.bdt"
    clf.posterior_.save(path)
    back = bd.BARTMulticlassPosterior.load(path)
    np.testing.assert_array_equal(back.predict_proba(X_te), clf.predict_proba(X_te))
    np.testing.assert_array_equal(back.offsets, clf.posterior_.offsets)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", bd.ConvergenceWarning)
        again = clone(clf).fit(X_tr, y_tr)
    np.testing.assert_array_equal(again.posterior_.leaf_values, clf.posterior_.leaf_values)
    np.testing.assert_array_equal(again.posterior_.trees.is_split, clf.posterior_.trees.is_split)


def test_sklearn_conventions_and_integer_labels():
    """get_params / clone unchanged by fit; integer labels 0..3 on a four-class problem keep their
    values in ``classes_`` and the class offsets are the log class shares."""
    rng = np.random.default_rng(0)
    X = rng.uniform(size=(60, 2))
    y = (X[:, 0] > 0.5).astype(int) * 2 + (X[:, 1] > 0.5).astype(int) + 3
    model = bd.BARTClassifier(num_trees=4, num_warmup=20, num_samples=20, num_chains=1, seed=1, progress=False)
    params = model.get_params()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", bd.ConvergenceWarning)
        model.fit(X, y)
    assert model.get_params() == params and clone(model).get_params() == params
    assert list(model.classes_) == [3, 4, 5, 6] and model.n_features_in_ == 2
    np.testing.assert_allclose(model.posterior_.offsets, np.log(np.bincount(y - 3) / 60))
    assert model.predict_proba(X).shape == (60, 4)
    assert model.predict_interval(X)[0].shape == (60, 4)


@pytest.mark.parametrize("params,match", [
    (dict(offset=0.0), "offset is the probit offset of two classes"),
    (dict(data_shards=2), "data_shards must be 1 with 3 or more classes"),
    (dict(num_trees=0), "num_trees must be an integer >= 1"),
    (dict(num_samples=10**9), r"BARTClassifier: this run needs about .* 264,664 bytes per draw"),  # 3 x 200 trees
])
def test_bad_input(params, match):
    X, y = np.random.default_rng(0).uniform(size=(9, 2)), np.arange(9) % 3
    model = bd.BARTClassifier(**params)
    with pytest.raises(ValueError, match=match):
        model.fit(X, y)
    assert not hasattr(model, "posterior_")


def test_bad_predict_input(iris_fit):
    clf, X_tr, X_te, y_tr, y_te = iris_fit
    with pytest.raises(ValueError, match="predictive intervals are for a real response"):
        clf.posterior_.predict_interval(X_te, predictive=True)
    with pytest.raises(ValueError, match="features"):
        clf.predict_proba(np.zeros((2, 3)))
    with pytest.raises(AttributeError, match="no noise sd"):
        clf.posterior_.sigma


@pytest.mark.parametrize("k", [2.0, 0.5])
def test_leaf_prior_matches_probit_probabilities(k):
    """The leaf prior's calibration (problem/bart_multiclass.py): at k = 2 two classes' log-odds have
    the 2-sd band ``+-logit(Phi(3))``, the probabilities probit BART's latent reaches at its 2-sd band
    ``+-3`` with the same ``k``; both bands scale as ``1 / k``.  No sampling: the problems only."""
    from scipy.special import digamma, logit, ndtr, polygamma

    from bdtree_jax.problem.bart import build_bart_probit_problem
    from bdtree_jax.problem.bart_multiclass import LOGIT_SCALE, build_bart_multiclass_problem

    X, y, M = np.random.default_rng(0).uniform(size=(9, 2)), np.arange(9) % 3, 7
    multi = build_bart_multiclass_problem(X, y, n_trees=M, k=k)
    probit = build_bart_probit_problem(X, y % 2, n_trees=M, k=k)
    band_probit = 2 * np.sqrt(M * probit.tau2)  # 3 at k = 2
    band_log_odds = 2 * np.sqrt(2 * M * multi.tau2)  # of two classes, each a sum of M log-gamma leaves
    assert band_probit == pytest.approx(6 / k)
    assert band_log_odds == pytest.approx(logit(ndtr(3.0)) * 2 / k, rel=1e-6)
    assert LOGIT_SCALE == pytest.approx(1.5571, abs=1e-4)
    a0, b0 = multi.a0, multi.b0  # log lambda of mean 0 and variance tau2
    assert polygamma(1, a0) == pytest.approx(multi.tau2, rel=1e-6)
    assert digamma(a0) - np.log(b0) == pytest.approx(0, abs=1e-9)
