"""Tests for the bundled datasets and synthetic generators (bdtree_jax.datasets)."""

from __future__ import annotations

import hashlib
from importlib.resources import files

import numpy as np
import pandas as pd
import pytest

from bdtree_jax import datasets
from bdtree_jax.datasets import (
    DATASETS,
    MIXED,
    SPLITS,
    cgm_true_function,
    load,
    load_split,
    make_cgm,
    make_xor,
)

# name -> (rows, features, {class: count}) from data/README.md's summary table
EXPECTED = {
    "iris": (150, 4, {"Iris-setosa": 50, "Iris-versicolor": 50, "Iris-virginica": 50}),
    "wine": (178, 13, {1: 59, 2: 71, 3: 48}),
    "bcw": (683, 9, {2: 444, 4: 239}),
    "raisin": (900, 7, {"Kecimen": 450, "Besni": 450}),
    "haberman": (306, 3, {1: 225, 2: 81}),
    "vertebral": (310, 6, {"AB": 210, "NO": 100}),
    "caesarian": (80, 5, {1: 46, 0: 34}),
    "waveform": (5000, 21, {0: 1657, 1: 1647, 2: 1696}),
}

# name -> (n_train, n_test, d)
EXPECTED_SPLITS = {
    "iris": (105, 45, 4),
    "bcw": (478, 205, 9),
    "wine": (142, 36, 13),
    "raisin": (630, 270, 7),
    "cgm": (800, 800, 2),
}


def test_names():
    # the tables with categorical columns and missing values: tests/test_categorical_input.py
    assert set(DATASETS) == set(EXPECTED) | set(MIXED)
    assert set(SPLITS) == set(EXPECTED_SPLITS)
    assert isinstance(DATASETS, tuple) and isinstance(SPLITS, tuple)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_load_shapes_and_classes(name):
    rows, d, counts = EXPECTED[name]
    X, y = load(name)
    assert isinstance(X, pd.DataFrame) and isinstance(y, pd.Series)
    assert X.shape == (rows, d)
    assert y.shape == (rows,)
    assert y.name == "target"
    assert "target" not in X.columns
    assert X.index.equals(y.index)
    assert all(pd.api.types.is_numeric_dtype(t) for t in X.dtypes)
    assert not X.isna().any().any()
    assert y.value_counts().to_dict() == counts
    assert all(c == c.lower() and " " not in c for c in X.columns)


def test_load_bcw_bare_nuclei_numeric():
    X, y = load("bcw")
    assert pd.api.types.is_integer_dtype(X["bare_nuclei"])
    assert X["bare_nuclei"].between(1, 10).all()
    assert X.index.equals(pd.RangeIndex(683))
    assert list(X.columns)[5] == "bare_nuclei"


def test_load_iris_columns_and_errata():
    X, _ = load("iris")
    assert list(X.columns) == ["sepal_length", "sepal_width", "petal_length", "petal_width"]
    # UCI iris.data errata kept (rows 35 and 38, 1-based)
    assert X.iloc[34].tolist() == [4.9, 3.1, 1.5, 0.1]
    assert X.iloc[37].tolist() == [4.9, 3.1, 1.5, 0.1]


def test_load_returns_fresh_copies():
    X1, y1 = load("wine")
    X1.iloc[0, 0] = -999.0
    y1.iloc[0] = -1
    X2, y2 = load("wine")
    assert X2.iloc[0, 0] != -999.0
    assert y2.iloc[0] != -1


@pytest.mark.parametrize("bad", ["Iris", "breast_cancer", "cgm", "", None, 3])
def test_load_unknown_name(bad):
    with pytest.raises(ValueError, match="iris"):
        load(bad)


@pytest.mark.parametrize("name", sorted(EXPECTED_SPLITS))
def test_load_split_sizes(name):
    n_train, n_test, d = EXPECTED_SPLITS[name]
    X_train, y_train, X_test, y_test = load_split(name)
    cols = [f"x{j}" for j in range(d)]
    assert list(X_train.columns) == cols and list(X_test.columns) == cols
    assert X_train.shape == (n_train, d) and X_test.shape == (n_test, d)
    assert y_train.shape == (n_train,) and y_test.shape == (n_test,)
    assert y_train.name == "target" and y_test.name == "target"
    if name == "cgm":
        assert y_train.dtype == np.float64 and y_test.dtype == np.float64
    else:
        assert y_train.dtype == np.int64 and y_test.dtype == np.int64
        k = {"iris": 3, "wine": 3, "bcw": 2, "raisin": 2}[name]
        assert set(y_train.unique()) == set(range(k))
        assert set(y_test.unique()) <= set(range(k))


def test_load_split_bcw_matches_complete_rows():
    X, y = load("bcw")
    _, y_train, _, y_test = load_split("bcw")
    assert len(y_train) + len(y_test) == len(y)
    assert (y_train == 1).sum() + (y_test == 1).sum() == (y == 4).sum()


@pytest.mark.parametrize("bad", ["waveform", "CGM", "", None])
def test_load_split_unknown_name(bad):
    with pytest.raises(ValueError, match="cgm"):
        load_split(bad)


def test_cgm_split_residual_sd():
    X_train, y_train, X_test, y_test = load_split("cgm")
    for X in (X_train, X_test):
        assert set(np.unique(X.to_numpy())) == set(range(1, 11))
    sd_train = np.std(y_train.to_numpy() - cgm_true_function(X_train), ddof=1)
    sd_test = np.std(y_test.to_numpy() - cgm_true_function(X_test), ddof=1)
    # documented: 0.209 (train), 0.200 (test)
    assert 0.19 < sd_train < 0.22
    assert 0.19 < sd_test < 0.22


def test_cgm_true_function_leaves():
    pts = np.array([[3, 4], [4, 4], [7, 4], [8, 4], [5, 5], [6, 5], [3.5, 4.5], [7.5, 10]])
    expected = [1, 5, 5, 8, 8, 2, 1, 2]
    np.testing.assert_array_equal(cgm_true_function(pts), expected)
    df = pd.DataFrame(pts, columns=["x0", "x1"])
    np.testing.assert_array_equal(cgm_true_function(df), expected)
    assert cgm_true_function(pts).shape == (len(pts),)


@pytest.mark.parametrize("bad", [np.zeros(2), np.zeros((3, 3)), np.zeros((2, 1))])
def test_cgm_true_function_bad_shape(bad):
    with pytest.raises(ValueError, match="X"):
        cgm_true_function(bad)


def test_make_cgm():
    X, y = make_cgm(4000, seed=3)
    assert list(X.columns) == ["x0", "x1"]
    assert X.shape == (4000, 2) and y.shape == (4000,) and y.name == "target"
    assert set(np.unique(X.to_numpy())) == set(range(1, 11))
    resid = y.to_numpy() - cgm_true_function(X)
    assert abs(resid.std(ddof=1) - 0.2) < 0.015
    assert abs(resid.mean()) < 0.02
    # reproducible by seed, different across seeds
    X2, y2 = make_cgm(4000, seed=3)
    pd.testing.assert_frame_equal(X, X2)
    pd.testing.assert_series_equal(y, y2)
    _, y3 = make_cgm(4000, seed=4)
    assert not np.allclose(y.to_numpy(), y3.to_numpy())
    Xd, yd = make_cgm(5)
    Xd2, yd2 = make_cgm(5, seed=0)
    pd.testing.assert_series_equal(yd, yd2)


def test_make_xor_parity():
    X, y = make_xor(500, num_features=10, num_relevant=3, seed=1)
    assert list(X.columns) == [f"x{j}" for j in range(10)]
    assert X.shape == (500, 10) and y.shape == (500,) and y.name == "target"
    assert pd.api.types.is_integer_dtype(y) and all(
        pd.api.types.is_integer_dtype(t) for t in X.dtypes
    )
    assert set(np.unique(X.to_numpy())) == {0, 1}
    expected = X["x0"] ^ X["x1"] ^ X["x2"]
    np.testing.assert_array_equal(y.to_numpy(), expected.to_numpy())
    # defaults: 20 features, parity of the first 4
    Xd, yd = make_xor(64)
    assert Xd.shape == (64, 20)
    np.testing.assert_array_equal(yd.to_numpy(), Xd.iloc[:, :4].sum(axis=1).to_numpy() % 2)
    # reproducible
    X2, y2 = make_xor(500, num_features=10, num_relevant=3, seed=1)
    pd.testing.assert_frame_equal(X, X2)
    pd.testing.assert_series_equal(y, y2)
    # num_relevant == num_features is allowed
    X1, y1 = make_xor(10, num_features=1, num_relevant=1)
    np.testing.assert_array_equal(y1.to_numpy(), X1["x0"].to_numpy())


@pytest.mark.parametrize(
    "kwargs, arg",
    [
        ({"n": 0}, "n"),
        ({"n": -3}, "n"),
        ({"n": 2.5}, "n"),
        ({"n": "10"}, "n"),
        ({"n": True}, "n"),
        ({"n": 10, "num_features": 0, "num_relevant": 1}, "num_features"),
        ({"n": 10, "num_relevant": 0}, "num_relevant"),
        ({"n": 10, "num_features": 3, "num_relevant": 4}, "num_relevant"),
        ({"n": 10, "num_relevant": 1.0}, "num_relevant"),
    ],
)
def test_make_xor_bad_args(kwargs, arg):
    with pytest.raises(ValueError, match=rf"\b{arg}\b"):
        make_xor(**kwargs)


@pytest.mark.parametrize("n", [0, -1, 1.5, None])
def test_make_cgm_bad_n(n):
    with pytest.raises(ValueError, match=r"\bn\b"):
        make_cgm(n)


def test_bundled_sha256sums():
    data = files(datasets) / "data"
    lines = (data / "SHA256SUMS").read_text().splitlines()
    assert len(lines) == 21  # 8 UCI files, 10 paper splits, penguins, airquality, diamonds
    for line in lines:
        digest, fname = line.split(maxsplit=1)
        resource = data
        for part in fname.strip().split("/"):
            resource = resource / part
        assert hashlib.sha256(resource.read_bytes()).hexdigest() == digest, fname
    assert (data / "README.md").is_file()
