"""bdtree_jax.inspection: partial dependence / ICE with credible bands against a brute-force average
of each draw's predictions, scikit-learn's partial_dependence and PartialDependenceDisplay on our
estimators, split inclusion and permutation importance on draws, and every plot drawn (Agg).

Default tests share two tiny fits (a BART regressor and a CGM tree classifier, module fixtures);
the other estimators (multiclass, Poisson, survival, pandas categoricals) are in the slow test."""

import warnings

import matplotlib
import numpy as np
import pandas as pd
import pytest

import bdtree_jax as bd
from bdtree_jax import inspection as ins
from bdtree_jax.inspection._response import response_of

matplotlib.use("Agg")

N = 40


def _data(seed=0, categorical=False):
    rng = np.random.default_rng(seed)
    X = pd.DataFrame(dict(a=rng.uniform(size=N), b=rng.uniform(size=N), k=rng.integers(0, 3, N).astype(float)))
    f = np.sin(3 * X.a) + 0.5 * X.k
    if categorical:
        X["c"] = pd.Categorical(rng.choice(["u", "v", "w"], N))
        f = f + (X.c == "v")
    return X, np.asarray(f), rng


def _quiet_fit(est, *args):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", bd.ConvergenceWarning)
        return est.fit(*args)


@pytest.fixture(scope="module")
def bart_reg():
    X, f, rng = _data()
    y = f + 0.1 * rng.normal(size=N)
    est = bd.BARTRegressor(num_trees=5, num_warmup=10, num_samples=8, num_chains=1, progress=False)
    return _quiet_fit(est, X, y), X, y


@pytest.fixture(scope="module")
def tree_clf():
    X, f, _ = _data(1)
    y = (f > np.median(f)).astype(int)
    est = bd.BayesianTreeClassifier(max_depth=3, num_warmup=10, num_samples=8, num_chains=1)
    return _quiet_fit(est, X, y), X, y


def _brute(est, X, feature, grid):
    """(D, G, K) the average over the rows of every draw's prediction with the feature set to each
    grid value, one full prediction per grid value."""
    resp = response_of(est)
    out = []
    for v in grid:
        Xv = X.copy()
        Xv[feature] = v
        out.append(resp.draws(Xv).mean(1))
    return np.stack(out, 1)


@pytest.mark.parametrize("which", ["bart_reg", "tree_clf"])
def test_partial_dependence_is_the_average_of_each_draws_predictions(which, request):
    est, X, _ = request.getfixturevalue(which)
    pd1 = ins.partial_dependence(est, X, "a", grid_resolution=4, ice_band=True)
    G, K = len(pd1.grid[0]), len(pd1.outputs)
    assert pd1.draws.shape == (8, G, K) and pd1.ice_mean.shape == (N, G, K) == pd1.ice_lower.shape
    np.testing.assert_allclose(pd1.draws, _brute(est, X, "a", pd1.grid[0]), atol=1e-6)
    np.testing.assert_allclose(pd1.ice_mean.mean(0), pd1.mean, atol=1e-9)  # PD = average of the ICE curves
    assert np.all(pd1.lower <= pd1.mean + 1e-12) and np.all(pd1.mean <= pd1.upper + 1e-12)
    assert np.all(pd1.ice_lower <= pd1.ice_mean + 1e-9) and np.all(pd1.ice_mean <= pd1.ice_upper + 1e-9)
    # a pair: every (a, k) grid point's average, (D, Ga, Gk, K)
    pair = ins.partial_dependence(est, X, ("a", 2), grid_resolution=3, ice=False)
    assert pair.draws.shape == (8, 3, 3, K) and pair.ice_mean is None and pair.features == ("a", "k")
    resp = response_of(est)
    for ia, va in enumerate(pair.grid[0]):
        Xv = X.assign(a=va, k=pair.grid[1][1])
        np.testing.assert_allclose(pair.draws[:, ia, 1], resp.draws(Xv).mean(1), atol=1e-6)


def test_scikit_learn_partial_dependence_and_display(bart_reg, tree_clf):
    from sklearn.inspection import PartialDependenceDisplay
    from sklearn.inspection import partial_dependence as sk_pd

    for est, X, _ in (bart_reg, tree_clf):
        sk = sk_pd(est, X, ["a"], grid_resolution=4, kind="average")
        ours = ins.partial_dependence(est, X, "a", grid=sk["grid_values"][0], ice=False)
        k = ours.output_index()  # a classifier's positive class, as scikit-learn reports it
        np.testing.assert_allclose(sk["average"][0], ours.mean[:, k], atol=1e-6)
    disp = PartialDependenceDisplay.from_estimator(est, X, ["a", ("a", "b")], grid_resolution=3, kind="average")
    assert disp.axes_.shape == (1, 2)  # the classifier's positive class
    matplotlib.pyplot.close("all")


def test_importances(bart_reg, tree_clf):
    est, X, y = tree_clf
    imp = ins.split_inclusion(est)
    np.testing.assert_allclose(est.feature_importances_, imp.mean)
    np.testing.assert_allclose(imp.draws.sum(1), 1.0)
    # by hand: the share of each draw's split rules on each feature, over the draws that split
    trees = est.posterior_.trees
    is_split, feature = np.asarray(trees.is_split).reshape(8, -1), np.asarray(trees.feature).reshape(8, -1)
    rows = [np.bincount(feature[d][is_split[d]], minlength=3) for d in range(8) if is_split[d].any()]
    np.testing.assert_allclose(imp.draws, np.array(rows) / np.sum(rows, 1, keepdims=True))
    assert list(imp.to_frame().index) == ["a", "b", "k"]
    # BART's split inclusion is its posterior's variable inclusion
    reg, Xr, yr = bart_reg
    np.testing.assert_allclose(ins.split_inclusion(reg).mean, reg.posterior_.variable_inclusion(mean=True))
    # permutation importance: one draw and feature by hand, with the same permutation
    pi = ins.permutation_importance(reg, Xr, yr, n_repeats=2, seed=3)
    assert pi.draws.shape == (8, 3) and pi.kind == "R^2"
    perms = np.random.default_rng(3).permuted(np.tile(np.arange(N), (6, 1)), axis=1)
    f = reg.posterior_.predict_draws(Xr)
    sst = np.sum((yr - yr.mean()) ** 2)
    lost = []
    for r in range(2):
        fp = reg.posterior_.predict_draws(Xr.assign(k=Xr.k.to_numpy()[perms[2 * 2 + r]]))
        lost.append(np.sum((yr - fp) ** 2, 1) / sst - np.sum((yr - f) ** 2, 1) / sst)
    np.testing.assert_allclose(pi.draws[:, 2], np.mean(lost, 0), atol=1e-9)
    pc = ins.permutation_importance(est, X, y)
    assert pc.kind == "log-loss" and pc.draws.shape == (8, 3)


def test_plots_draw(bart_reg, tree_clf):
    import matplotlib.pyplot as plt

    est, X, y = bart_reg
    ax = ins.plot_partial_dependence(est, X, "a", ice=True, grid_resolution=4)
    assert len(ax.lines) >= 2 and len(ax.collections) >= 1  # ICE and mean lines, the band
    ax = ins.plot_partial_dependence(est, X, "k", categorical=[True])  # bars with whiskers
    assert len(ax.patches) == 3 and [t.get_text() for t in ax.get_xticklabels()] == ["0.0", "1.0", "2.0"]
    ins.plot_partial_dependence(est, X, ("a", "b"), grid_resolution=3)  # contours
    ins.plot_partial_dependence(est, X, ("a", "k"), grid_resolution=3, categorical=[False, True])  # heatmap
    ax = ins.plot_variable_importance(est)
    assert len(ax.patches) == 3
    clf, Xc, yc = tree_clf
    ins.plot_variable_importance(clf, Xc, yc, kind="permutation", top=2)
    ins.plot_partial_dependence(ins.partial_dependence(clf, Xc, "b", grid_resolution=3), target=1)
    plt.close("all")


def test_bad_input_is_named(bart_reg):
    est, X, y = bart_reg
    for kwargs, word in ((dict(features="zz"), "features"), (dict(features=(0, 1, 2)), "features"),
                         (dict(features=(0, 0)), "features"), (dict(features=0, grid_resolution=1), "grid_resolution"),
                         (dict(features=0, prob=1.5), "prob"),
                         (dict(features=0, percentiles=(0.9, 0.1)), "percentiles"),
                         (dict(features=0, categorical=[True, False]), "categorical")):
        with pytest.raises(ValueError, match=word):
            ins.partial_dependence(est, X, **kwargs)
    with pytest.raises(ValueError, match="est must be"):
        ins.partial_dependence(object(), X, 0)
    with pytest.raises(ValueError, match="n_repeats"):
        ins.permutation_importance(est, X, y, n_repeats=0)
    with pytest.raises(ValueError, match="y contains NaN or infinite"):
        ins.permutation_importance(est, X, np.where(np.arange(len(y)) == 0, np.nan, y))
    with pytest.raises(ValueError, match="target"):
        ins.partial_dependence(est, X, 0, grid_resolution=3).output_index("nope")


@pytest.mark.slow
def test_every_estimator_partial_dependence_and_importance():
    """Multiclass and binary BART classifiers, Poisson and survival BART, a single-tree regressor
    and an RJHMC soft tree, with a pandas categorical feature (bars: every level): PD equals the
    brute-force average, importance has one entry per feature."""
    X, f, rng = _data(2, categorical=True)
    short = dict(num_trees=5, num_warmup=20, num_samples=10, num_chains=1, progress=False)
    fits = [(bd.BARTClassifier(**short), (f > np.median(f)).astype(int)),
            (bd.BARTClassifier(**short), np.digitize(f, np.quantile(f, [0.33, 0.66]))),
            (bd.BARTPoissonRegressor(**short), rng.poisson(np.exp(f))),
            (bd.BayesianTreeRegressor(max_depth=3, num_warmup=20, num_samples=10, num_chains=1), f)]
    for est, y in fits:
        _quiet_fit(est, X, y)
        # a row's prediction does not depend on the rows evaluated with it (multiclass BART's class
        # view of categorical rules once dropped their level words' axis, and it did)
        resp = response_of(est)
        np.testing.assert_allclose(resp.draws(X.iloc[5:12]), resp.draws(X)[:, 5:12], atol=1e-6)
        for feature in ("a", "c"):
            p = ins.partial_dependence(est, X, feature, grid_resolution=4)
            if feature == "c":
                assert p.categorical == (True,) and list(p.grid[0]) == ["u", "v", "w"]
            Xs = X.copy()
            brute = []
            for v in p.grid[0]:
                Xs[feature] = pd.Categorical([v] * N, categories=X.c.cat.categories) if feature == "c" else v
                brute.append(resp.draws(Xs).mean(1))
            np.testing.assert_allclose(p.draws, np.stack(brute, 1), atol=1e-6)
        if not hasattr(est, "classes_"):  # scikit-learn's partial dependence of a categorical feature: ours' mean
            from sklearn.inspection import partial_dependence as sk_pd

            sk = sk_pd(est, X, ["c"], categorical_features=["c"], kind="average")
            ours = ins.partial_dependence(est, X, "c", ice=False)
            np.testing.assert_allclose(sk["average"][0], ours.mean[:, 0], rtol=1e-6)
        assert ins.split_inclusion(est).draws.shape[1] == 4
        assert ins.permutation_importance(est, X, y).draws.shape == (10, 4)
    surv = _quiet_fit(bd.BARTSurvival(**short), X, np.exp(f + 0.3 * rng.normal(size=N)), rng.uniform(size=N) < 0.8)
    p = ins.partial_dependence(surv, X, "a", grid_resolution=3, ice=False)
    Xs = X.assign(a=p.grid[0][1])
    np.testing.assert_allclose(p.draws[:, 1, 0], np.exp(surv.posterior_.predict_draws(Xs)).mean(1), rtol=1e-6)
    with pytest.raises(ValueError, match="BARTSurvival"):
        ins.permutation_importance(surv, X, f)
    Xn = X[["a", "b", "k"]].to_numpy()
    soft = bd.BayesianTreeRegressor("hmc-df", max_depth=2, num_warmup=10, num_samples=5, num_chains=1)
    _quiet_fit(soft, Xn, f)
    p = ins.partial_dependence(soft, Xn, 0, grid_resolution=3)
    np.testing.assert_allclose(p.draws[:, 2], soft.posterior_.predict_draws(np.c_[np.full(N, p.grid[0][2]), Xn[:, 1:]])
                               .mean(1), atol=1e-6)
    assert np.isclose(np.nansum(soft.feature_importances_), 1.0) or np.isnan(soft.feature_importances_).all()
