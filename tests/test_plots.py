"""Posterior plots and the tree-space summary of single-tree posteriors (bdtree_jax.plots,
bdtree_jax.posterior.tree_space): tree strings with the features' names, the top-trees table and
its Monte Carlo intervals, leaf intervals against their exact posterior, and every plot drawn
(Agg).  The posteriors hold made-up draws of a few trees (their visit counts are what the
table reports): the summaries depend on the draws, not on how they were sampled, so no sampler is
compiled."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from scipy.stats import beta, norm  # noqa: E402

import bdtree_jax as bd  # noqa: E402
from bdtree_jax.posterior.hard import posterior_from_traces  # noqa: E402
from bdtree_jax.problem import build_problem  # noqa: E402
from bdtree_jax.tree import from_string, n_leaves, to_string, tree_depth  # noqa: E402

C, S = 2, 200


def _made_up(X, y, strings, probs, *, task="classification", seed=0):
    """A Posterior whose (C, S) draws are the trees ``strings`` (canonical), each draw chosen
    independently with probabilities ``probs``."""
    problem = build_problem(X, y, task=task, prior=bd.TreePrior(max_depth=3))
    grid = problem.grid
    trees = [from_string(s, grid.thresholds, 3, grid.level_count) for s in strings]
    pick = np.random.default_rng(seed).choice(len(strings), size=(C, S), p=probs)
    stacked = [np.stack([np.asarray(t[i]) for t in trees]) if trees[0][i] is not None else None for i in range(len(trees[0]))]
    tree = type(trees[0])(*(None if a is None else a[pick] for a in stacked))
    lp = np.array([-10.0 - i for i in range(len(strings))])[pick]
    traces = dict(tree=tree, log_lik=lp, log_prior=np.zeros((C, S)), accepted=np.ones((C, S), bool),
                  move=np.zeros((C, S), np.int32),
                  n_leaves=np.array([int(n_leaves(t)) for t in trees])[pick],
                  depth=np.array([int(tree_depth(t)) for t in trees])[pick])
    return posterior_from_traces(traces, 0, method="cgm", **problem.posterior_fields()), pick


IRIS = ["x2<=2.45(L,x3<=1.75(L,L))", "x2<=2.45(L,L)", "x3<=0.8(L,x2<=4.95(L,L))"]


@pytest.fixture(scope="module")
def iris():
    X, y = bd.datasets.load("iris")
    post, pick = _made_up(X, y, IRIS, [0.6, 0.3, 0.1])
    return post, pick, X, y


def test_most_visited_tree_and_frequencies_speak_names(iris):
    post, pick, X, _ = iris
    text, freq = post.most_visited_tree()
    assert text == "petal_length<=2.45(L,petal_width<=1.75(L,L))"  # the DataFrame's names, as tree_text
    assert freq == pytest.approx(np.mean(pick == 0))
    assert post.most_visited_tree(names=False) == (IRIS[0], freq)  # the canonical grammar, from_string's
    assert post.tree_strings()[0] == IRIS[pick[0, 0]]
    canonical, named = post.tree_frequencies(), post.tree_frequencies(names=True)
    assert list(canonical.values()) == list(named.values())
    assert list(named)[0] == text and all("x2" not in s for s in named)
    assert to_string(post.tree(0, 0), post.grid.thresholds, None, list(X.columns)) == post.tree_strings(names=True)[0]
    for line in post.tree_text(post.tree(0, int(np.argmax(pick[0] == 0)))).splitlines()[:1]:
        assert line.startswith("petal_length <= 2.45")


def test_top_trees_table_and_intervals(iris):
    post, pick, _, _ = iris
    table = post.top_trees(k=5, prob=0.95)
    assert list(table.index) == [1, 2, 3] and table.index.name == "rank"  # only 3 distinct trees
    assert list(table["n_leaves"]) == [3, 2, 3] and list(table["draws"]) == [int((pick == k).sum()) for k in range(3)]
    np.testing.assert_allclose(table["probability"], [np.mean(pick == k) for k in range(3)])
    assert table["tree"].iloc[1] == "petal_length<=2.45(L,L)"
    assert np.all(table["lower"] <= table["probability"]) and np.all(table["probability"] <= table["upper"])
    # independent draws: ESS near the number of draws, the interval near the binomial one
    n = C * S
    assert np.all((table["ess"] > 0.6 * n) & (table["ess"] < 1.6 * n)), table["ess"]
    half = norm.ppf(0.975) * np.sqrt(table["probability"] * (1 - table["probability"]) / n)
    np.testing.assert_allclose(table["upper"] - table["probability"], half, rtol=0.3)
    assert len(post.top_trees(k=1)) == 1
    with pytest.raises(ValueError, match="k must be"):
        post.top_trees(k=0)
    with pytest.raises(ValueError, match="prob must be"):
        post.top_trees(prob=1.0)


def test_leaf_summary_is_the_dirichlet_posterior(iris):
    post, _, X, y = iris
    table = post.leaf_summary("most_visited", prob=0.9, num_draws=2000)
    assert list(table.index) == [1, 5, 6] and table["rows"].sum() == len(X)
    alpha = post.likelihood.concentration
    petal_length, petal_width = X["petal_length"].to_numpy(), X["petal_width"].to_numpy()
    rows = {1: petal_length <= 2.45, 5: (petal_length > 2.45) & (petal_width <= 1.75),
            6: (petal_length > 2.45) & (petal_width > 1.75)}
    for node, mask in rows.items():
        assert table.loc[node, "rows"] == mask.sum()
        for c in post.classes:
            a = (np.asarray(y)[mask] == c).sum() + alpha
            b = mask.sum() + len(post.classes) * alpha - a
            exact = beta(a, b)
            assert table.loc[node, f"p[{c}]"] == pytest.approx(exact.mean(), abs=0.01)
            np.testing.assert_allclose([table.loc[node, f"p[{c}]_lower"], table.loc[node, f"p[{c}]_upper"]],
                                       exact.ppf([0.05, 0.95]), atol=0.02)


def test_plot_tree_and_top_trees_draw(iris):
    post, _, _, _ = iris
    try:
        for which in (None, "most_visited", 2):
            ax = post.plot_tree(which)
            texts = [t.get_text() for t in ax.texts]
            assert any(t.startswith("petal_length <= ") for t in texts)
            assert "yes" in texts and "no" in texts
            assert any("Iris-setosa\np=" in t and "[" in t and "n=" in t for t in texts)
        assert "petal_width <= 1.75" in [t.get_text() for t in post.plot_tree(1).texts]
        ax = post.plot_top_trees(k=3)
        assert len(ax.patches) == 3 and "1" in ax.get_yticklabels()[0].get_text()
        with pytest.raises(ValueError, match="rank must be"):
            post.plot_tree(4)
        with pytest.raises(ValueError, match="tree must be"):
            post.plot_tree("best")
    finally:
        plt.close("all")


def test_levels_missing_side_and_regression_leaves():
    X, y = bd.datasets.load("penguins")
    island, bill = list(X.columns).index("island"), list(X.columns).index("bill_length_mm")
    post, _ = _made_up(X, y, [f"x{bill}<=42|NA=L(L,x{island}in{{0}}|NA=R(L,L))"], [1.0])
    levels = post.grid.levels[island]
    text, freq = post.most_visited_tree()
    assert freq == 1.0 and text.startswith("bill_length_mm<=") and f"island in{{{levels[0]}}}|NA=R" in text
    try:
        texts = [t.get_text() for t in post.plot_tree().texts]
        assert f"island in {{{levels[0]}}}" in texts and "yes + NA" in texts and "no + NA" in texts
        assert not np.isnan(post.top_trees()["ess"]).any() or post.top_trees()["lower"].iloc[0] == 1.0
    finally:
        plt.close("all")
    Xr, yr = bd.datasets.make_cgm(60, seed=1)
    reg, _ = _made_up(Xr, yr, ["x0<=5(L,L)", "x1<=3(L,L)"], [0.7, 0.3], task="regression")
    table = reg.leaf_summary("most_visited", prob=0.9, num_draws=2000)
    assert list(table.columns) == ["rows", "mean", "lower", "upper"]
    assert np.all(table["lower"] < table["mean"]) and np.all(table["mean"] < table["upper"])
    # the leaf means shrink the leaves' averages a little toward mean(y)
    left = Xr["x0"].to_numpy() <= reg.grid.thresholds[0, np.argmin(np.abs(reg.grid.thresholds[0] - 5))]
    np.testing.assert_allclose(table["mean"], [yr[left].mean(), yr[~left].mean()], atol=0.15)
    assert list(table["rows"]) == [left.sum(), (~left).sum()]
    try:
        texts = [t.get_text() for t in reg.plot_tree(2).texts]
        assert any(t.count("[") == 1 and "n=" in t for t in texts)
    finally:
        plt.close("all")


def test_soft_structures_speak_names():
    """The soft tree's ``most_visited_tree()`` writes its structures with the features' names."""
    from bdtree_jax.posterior.soft import named_structure

    names = ["sepal_length", "sepal_width", "petal_length", "petal_width"] + [f"c{i}" for i in range(7)]
    assert named_structure("x2(x3(L,L),L)", names) == "petal_length(petal_width(L,L),L)"
    assert named_structure("0.50*x1+0.50*x10<=0.3(L,L)", names) == "0.50*sepal_width+0.50*c6<=0.3(L,L)"
    assert named_structure("S(S(L,L),L)", names) == "S(S(L,L),L)" and named_structure("x1(L,L)", None) == "x1(L,L)"


def test_without_matplotlib_a_plot_says_how_to_install_it(iris, monkeypatch):
    import sys

    from bdtree_jax.plots import plot_top_trees

    table = iris[0].top_trees()  # (ArviZ 0.2x imports matplotlib itself)
    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", None)  # import matplotlib.pyplot fails
    with pytest.raises(ImportError, match="pip install matplotlib"):
        plot_top_trees(table)
    with pytest.raises(ImportError, match="pip install matplotlib"):
        bd.tree.plot_tree(iris[0].tree(0, 0), iris[0].grid.thresholds)


@pytest.mark.slow
def test_top_trees_intervals_cover_the_exact_posterior():
    """On data small enough to enumerate every tree, a CGM run's five most visited trees: each
    ``probability`` within its 99 % Monte Carlo interval of the exact posterior probability
    (at most one of five outside, allowed by chance), and the intervals not wider than they need
    (every half-width under 0.05 with 8 x 2,000 draws)."""
    from bdtree_jax.exact import enumerate_posterior
    from bdtree_jax.likelihoods import DirichletMultinomial

    rng = np.random.default_rng(0)
    X = rng.integers(0, 4, size=(12, 2)).astype(float)
    y = (X[:, 0] + X[:, 1] + rng.normal(size=12) > 3).astype(int)
    prior = bd.TreePrior(max_depth=2)
    post = bd.sample(X, y, prior=prior, num_warmup=500, num_samples=2000, num_chains=8, seed=0, progress=False)
    lik = DirichletMultinomial(2)
    exact = enumerate_posterior(X, lik.point_stats(y), prior, lik)
    table = post.top_trees(k=5, prob=0.99)
    inside = [row.lower <= exact[row.tree] <= row.upper for row in table.itertuples()]
    print(table.assign(exact=[exact[t] for t in table["tree"]]).drop(columns=["tree"]).round(4).to_string())
    assert sum(inside) >= 4, table
    assert np.all(table["upper"] - table["probability"] < 0.05)
