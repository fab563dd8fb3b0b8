"""The posterior side of trees with level sets and missing-value bits (docs/categorical-missing.md):
printed and drawn trees name the levels and the missing side, a saved posterior loads with the
same trees and predictions, ArviZ conversion works, and BART's variable inclusion counts a
categorical column as one variable."""

import matplotlib
import numpy as np
import pandas as pd
import pytest

import bdtree_jax as bd

matplotlib.use("Agg")


@pytest.fixture(scope="module")
def penguins():
    X, y = bd.datasets.load("penguins")
    rows = np.arange(0, len(X), 3)
    return X.iloc[rows].reset_index(drop=True), np.asarray(y)[rows]


@pytest.fixture(scope="module")
def fitted(penguins):
    X, y = penguins
    return bd.BayesianTreeClassifier(method="cgm", max_depth=3, num_warmup=200, num_samples=200, num_chains=2,
                                     seed=0, progress=False).fit(X, y)


def test_text_names_levels_and_missing_side(fitted):
    post = fitted.posterior_
    assert post.trees.levels_left is not None and post.trees.nan_left is not None
    text = post.tree_text()
    assert "NA→" in text
    # some draw splits on a level set; its text lists level names of the fitted grid
    strings = post.tree_frequencies()
    with_sets = [s for s in strings if "in{" in s]
    assert with_sets, "no draw split on a categorical column"
    tree = post.map_tree()
    names = {str(v) for levels in post.grid.levels if levels is not None for v in levels}
    for line in post.tree_text(tree).splitlines():
        if " in {" in line:
            inside = line.split(" in {")[1].split("}")[0]
            assert {s.strip() for s in inside.split(",")} <= names


def test_plot_tree_labels_level_sets(fitted):
    post = fitted.posterior_
    tree = post.map_tree()
    ax = post.plot_tree(tree)
    labels = " ".join(t.get_text() for t in ax.texts)
    assert labels
    if " in {" in post.tree_text(tree):
        assert "{" in labels
    matplotlib.pyplot.close("all")


def test_save_load_keeps_trees_and_predictions(fitted, penguins, tmp_path):
    X, _ = penguins
    post = fitted.posterior_
    path = tmp_path / "post.pkl"
    post.save(path)
    back = type(post).load(path)
    assert back.tree_text() == post.tree_text()
    np.testing.assert_array_equal(np.asarray(back.trees.levels_left), np.asarray(post.trees.levels_left))
    np.testing.assert_array_equal(np.asarray(back.trees.nan_left), np.asarray(post.trees.nan_left))
    np.testing.assert_allclose(back.predict_proba(X), post.predict_proba(X))


def test_arviz_conversion(fitted):
    """ArviZ 0.2x (InferenceData) and 1.x (DataTree) both index groups by name."""
    idata = fitted.posterior_.to_arviz()
    assert idata["posterior"]["n_leaves"].shape == (2, 200)
    assert idata["posterior"]["depth"].shape == (2, 200)


def test_bart_variable_inclusion_counts_a_categorical_column_once(penguins):
    X, _ = penguins
    y = X["body_mass_g"].fillna(X["body_mass_g"].mean()).to_numpy()
    Xf = X.drop(columns=["body_mass_g"])
    reg = bd.BARTRegressor(num_trees=10, num_warmup=50, num_samples=50, num_chains=1, seed=0, progress=False).fit(Xf, y)
    inclusion = np.asarray(reg.posterior_.variable_inclusion(mean=True))
    assert inclusion.shape == (Xf.shape[1],)  # one entry per column, categorical ones included
    np.testing.assert_allclose(inclusion.sum(), 1.0, atol=1e-6)
    categorical = [i for i, c in enumerate(Xf.columns) if not pd.api.types.is_numeric_dtype(Xf[c])]
    assert categorical and inclusion[categorical].sum() > 0
