"""Run-to-run diagnostics (bdtree_jax.diagnostics): top-tree tables, probability agreement,
acc_max / acc_prob."""

import dataclasses

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest

import bdtree_jax as bd
from bdtree_jax import diagnostics as dg


@pytest.fixture(scope="module")
def iris_runs():
    """Two short runs on iris (3 classes) differing only in the seed, plus a hold-out half."""
    X, y = bd.datasets.load("iris")
    rng = np.random.default_rng(0)
    idx = rng.permutation(len(y))
    tr, te = idx[:100], idx[100:]
    kw = dict(num_warmup=50, num_samples=100, num_chains=1, max_depth=3, progress=False)
    posts = [bd.sample(X.iloc[tr], y.iloc[tr], seed=s, **kw) for s in (0, 1)]
    return posts, X.iloc[te], y.iloc[te]


def test_predict_proba_over_distinct_trees_equals_the_draw_average(iris_runs):
    """Posterior.predict_proba evaluates each distinct tree once, weighted by its visits: the same
    numbers as averaging every draw's prediction (also with chunks smaller than the number of
    distinct trees, which exercises the padding of the last chunk)."""
    (a, _), X, _ = iris_runs
    per_draw = a.predict_draws(X).mean(0, dtype=np.float64)
    assert len(set(a.tree_strings())) > 3  # several distinct trees, revisited
    np.testing.assert_allclose(a.predict_proba(X), per_draw, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(a._mean_prediction(X, chunk=3), per_draw, rtol=1e-6, atol=1e-7)
    np.testing.assert_array_equal(a.predict(X), a.classes[np.argmax(per_draw, 1)])


def test_accuracy_max_prob_against_numpy(iris_runs):
    (a, b), X, y = iris_runs
    for post in (a, b):
        proba = post.predict_proba(X)
        codes = np.array([list(post.classes).index(v) for v in y])
        acc_max, acc_prob = dg.accuracy_max_prob(post, X, y)
        assert acc_max == pytest.approx(np.mean(post.classes[np.argmax(proba, 1)] == y.to_numpy()))
        assert acc_prob == pytest.approx(np.mean(proba[np.arange(len(codes)), codes]), rel=1e-6)
        assert 0 <= acc_prob <= 1 and 0 <= acc_max <= 1
    # perfect and worst cases on a hand-made label vector: acc_prob is the mean true-class probability
    proba = a.predict_proba(X)
    best = a.classes[np.argmax(proba, 1)]
    assert dg.accuracy_max_prob(a, X, best)[0] == 1.0
    assert dg.accuracy_max_prob(a, X, best)[1] == pytest.approx(proba.max(1).mean(), rel=1e-6)


def test_top_tree_table_matches_tree_frequencies(iris_runs):
    (a, b), _, _ = iris_runs
    table = dg.top_tree_table([a, b], k=4)
    assert isinstance(table, pd.DataFrame)
    assert list(table.columns) == ["p_seed0", "p_seed1"]
    assert 1 <= len(table) <= 4
    fa, fb = a.tree_frequencies(), b.tree_frequencies()
    for tree, row in table.iterrows():
        assert row["p_seed0"] == pytest.approx(fa.get(tree, 0.0))
        assert row["p_seed1"] == pytest.approx(fb.get(tree, 0.0))
    pooled = table.mean(axis=1).to_numpy()
    assert np.all(np.diff(pooled) <= 1e-12)  # sorted by pooled frequency
    # the top rows are the best pooled trees among all visited ones
    every = set(fa) | set(fb)
    best = max((fa.get(t, 0) + fb.get(t, 0)) / 2 for t in every)
    assert pooled[0] == pytest.approx(best)
    # frequency dicts are accepted too, and custom names
    t2 = dg.top_tree_table([fa, fb], k=4, names=["s1", "s2"])
    np.testing.assert_allclose(t2.to_numpy(), table.to_numpy())
    assert list(t2.index) == list(table.index)
    # a single run: its own most frequent trees, in order
    t1 = dg.top_tree_table([a], k=3)
    assert list(t1.index) == list(fa)[: len(t1)]


def test_probability_agreement_and_plot(iris_runs):
    (a, b), X, _ = iris_runs
    pa, pb = dg.probability_agreement(a, b, X)
    assert pa.shape == pb.shape == (len(X),)
    np.testing.assert_allclose(pa, a.predict_proba(X)[:, 1], rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(pb, b.predict_proba(X)[:, 1], rtol=1e-6, atol=1e-7)
    # an explicit label picks that column
    lab = a.classes[2]
    pa2, _ = dg.probability_agreement(a, b, X, positive=lab)
    np.testing.assert_allclose(pa2, a.predict_proba(X)[:, 2], rtol=1e-6, atol=1e-7)
    # a run agrees with itself exactly
    s1, s2 = dg.probability_agreement(a, a, X)
    np.testing.assert_array_equal(s1, s2)

    ax = dg.plot_probability_agreement(a, b, X, title="iris")
    try:
        offsets = np.asarray(ax.collections[0].get_offsets())
        np.testing.assert_allclose(offsets[:, 0], pa, rtol=1e-6)
        np.testing.assert_allclose(offsets[:, 1], pb, rtol=1e-6)
        assert ax.get_xlim() == (0.0, 1.0) and ax.get_ylim() == (0.0, 1.0)
        assert ax.get_title() == "iris"
        text = " ".join(t.get_text() for t in ax.texts)
        assert f"{np.mean(np.abs(pa - pb)):.4f}" in text
    finally:
        plt.close(ax.figure)


def test_errors(iris_runs):
    (a, b), X, y = iris_runs
    reg = dataclasses.replace(a, task="regression", classes=None)
    other = dataclasses.replace(b, classes=np.array(["a", "b", "c"]))
    with pytest.raises(ValueError, match="regression"):
        dg.accuracy_max_prob(reg, X, y)
    with pytest.raises(ValueError, match="regression"):
        dg.probability_agreement(a, reg, X)
    with pytest.raises(ValueError, match="different classes"):
        dg.probability_agreement(a, other, X)
    with pytest.raises(ValueError, match="not one of the posterior's classes"):
        dg.probability_agreement(a, b, X, positive="Iris-unknown")
    with pytest.raises(ValueError, match="not one of the posterior's classes"):
        dg.accuracy_max_prob(a, X, np.where(np.arange(len(y)) == 0, "oops", y.to_numpy()))
    with pytest.raises(ValueError, match="rows"):
        dg.accuracy_max_prob(a, X, y.to_numpy()[:-1])
    with pytest.raises(ValueError, match="task or classes"):
        dg.top_tree_table([a, other])
    with pytest.raises(ValueError, match="non-empty"):
        dg.top_tree_table([])
    with pytest.raises(ValueError, match="k must"):
        dg.top_tree_table([a], k=0)
    with pytest.raises(ValueError, match="names"):
        dg.top_tree_table([a, b], names=["x"])
    with pytest.raises(ValueError, match="same length"):
        dg.plot_agreement([0.1, 0.2], [0.3])
    with pytest.raises(ValueError, match="posterior returned"):
        dg.accuracy_max_prob(object(), X, y)
