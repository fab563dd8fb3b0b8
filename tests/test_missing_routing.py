"""Prediction on missing values in a feature that had none in training (issue #38, 11e): the
missing-value bits of that feature's rules were never informed by a training row (prior draws,
Bernoulli(1/2)), so routing such rows is warned about, naming the features
(:class:`~bdtree_jax.data.MissingValueRoutingWarning`)."""

import warnings

import numpy as np
import pandas as pd
import pytest

from bdtree_jax.data import MissingValueRoutingWarning, SplitGrid, check_X, make_split_grid
from bdtree_jax.tree import make_tree


def _table(n=40, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(size=(n, 3))
    X[::7, 0] = np.nan  # only feature 0 is ever missing in training
    return X


def test_grid_warns_for_features_never_missing_in_training():
    X = _table()
    grid = make_split_grid(X)
    np.testing.assert_array_equal(grid.train_missing, [True, False, False])
    new = X[:4].copy()
    new[0, 0] = np.nan
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        grid.warn_unseen_missing(grid.bin(X))  # training rows: nothing to warn about
        codes = grid.bin(new)
        grid.warn_unseen_missing(codes)  # feature 0 was missing in training: its bits saw rows
    assert codes[0, 0] == grid.missing_code
    new[1, 2] = np.nan
    new[2, 2] = np.nan
    codes = grid.bin(new)
    assert codes[1, 2] == codes[2, 2] == grid.missing_code  # routed as before: by the bit
    with pytest.warns(MissingValueRoutingWarning, match=r"'x2' \(2 of 4 rows\)") as record:
        grid.warn_unseen_missing(codes)
    assert len(record) == 1 and "x0" not in str(record[0].message) and "x1" not in str(record[0].message)
    with pytest.warns(MissingValueRoutingWarning, match="'width'"):
        grid.warn_unseen_missing(codes, ["a", "b", "width"])


def test_grid_warns_for_unseen_levels_of_a_feature_never_missing():
    table = pd.DataFrame({"colour": pd.Categorical(["red", "blue", "red", "green"] * 5), "x": np.arange(20.0)})
    X, names, levels = check_X(table, categorical_features="from_dtype", missing="mia", return_levels=True)
    grid = make_split_grid(X, levels=levels)
    new = table.head(2).astype({"colour": object}).assign(colour=["purple", "red"])
    with pytest.warns(MissingValueRoutingWarning, match="'colour' \\(1 of 2 rows\\)"):
        grid.warn_unseen_missing(grid.codes(new, feature_names=names), names)


def test_grid_without_the_record_does_not_warn():
    """Grids made before ``train_missing`` existed (None: unknown) route as before, silently."""
    X = _table()
    old = make_split_grid(X)
    old = SplitGrid(old.thresholds, old.n_cuts, old.widths, old.level_count, old.levels, old.missing_code)
    assert old.train_missing is None
    new = X[:2].copy()
    new[:, 1] = np.nan
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        old.warn_unseen_missing(old.bin(new))


def test_posterior_prediction_warns_naming_the_column():
    """A posterior (built by hand from one stump draw, nothing sampled) of a table whose column
    'a' has missing cells and 'b' has none: predicting rows missing 'a' is silent, rows missing 'b'
    warn naming 'b' (single-tree posteriors' ``_bins``, which every prediction reads)."""
    from bdtree_jax.posterior import posterior_from_traces
    from bdtree_jax.problem import build_problem

    rng = np.random.default_rng(1)
    table = pd.DataFrame({"a": rng.uniform(size=20), "b": rng.uniform(size=20)})
    table.loc[::5, "a"] = np.nan
    problem = build_problem(table, (table["b"] > 0.5).astype(int))
    # one draw: the root splits on 'b' (its 10th cut), missing values of 'b' to the left
    tree = make_tree(np.array([[[True, False, False]]]), np.array([[[1, 0, 0]]], np.int32),
                     np.array([[[9, 0, 0]]], np.int32), np.array([[[True, False, False]]]))
    zeros = np.zeros((1, 1), np.float32)
    traces = {"tree": tree, "log_lik": zeros, "log_prior": zeros, "n_leaves": zeros + 2, "depth": zeros + 1,
              "accepted": zeros, "move": zeros}
    post = posterior_from_traces(traces, 0, **problem.posterior_fields())
    new = table.head(3).copy()
    new.loc[0, "a"] = np.nan
    with warnings.catch_warnings():
        warnings.simplefilter("error", MissingValueRoutingWarning)
        post.predict_proba(new)
    new.loc[1, "b"] = np.nan
    with pytest.warns(MissingValueRoutingWarning, match=r"'b' \(1 of 3 rows\)"):
        proba = post.predict_proba(new)
    assert np.allclose(proba.sum(1), 1.0)


@pytest.mark.slow
def test_single_tree_prediction_warns_naming_the_column():
    """A classifier fitted on a table whose column 'a' has missing cells and 'b' has none: new
    rows missing 'a' predict silently, rows missing 'b' warn naming 'b'; the predictions are
    those of the bits as drawn (unchanged routing)."""
    import bdtree_jax as bd

    rng = np.random.default_rng(1)
    n = 60
    table = pd.DataFrame({"a": rng.uniform(size=n), "b": rng.uniform(size=n)})
    y = (table["b"] > 0.5).astype(int).to_numpy()
    table.loc[::5, "a"] = np.nan
    clf = bd.BayesianTreeClassifier(max_depth=2, num_warmup=30, num_samples=30, num_chains=1, seed=0).fit(table, y)
    new = table.head(3).copy()
    new.loc[0, "a"] = np.nan
    with warnings.catch_warnings():
        warnings.simplefilter("error", MissingValueRoutingWarning)
        clf.predict_proba(new)
    new.loc[1, "b"] = np.nan
    with pytest.warns(MissingValueRoutingWarning, match=r"'b' \(1 of 3 rows\)"):
        proba = clf.predict_proba(new)
    assert np.all(np.isfinite(proba)) and np.allclose(proba.sum(1), 1.0)


@pytest.mark.slow
def test_bart_prediction_warns_naming_the_column():
    """BART (tree_sampler="pg", which routes missing values) warns the same way."""
    import bdtree_jax as bd

    rng = np.random.default_rng(2)
    n = 60
    table = pd.DataFrame({"a": rng.uniform(size=n), "b": rng.uniform(size=n)})
    y = np.where(table["b"] > 0.5, 1.0, -1.0) + 0.1 * rng.normal(size=n)
    table.loc[::5, "a"] = np.nan
    reg = bd.BARTRegressor(num_trees=5, tree_sampler="pg", num_warmup=10, num_samples=10, num_chains=1).fit(table, y)
    new = table.head(3).copy()
    new.loc[1, "b"] = np.nan
    with pytest.warns(MissingValueRoutingWarning, match=r"'b' \(1 of 3 rows\)"):
        reg.predict(new)
