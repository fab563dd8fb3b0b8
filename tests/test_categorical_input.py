"""The input layer of categorical features and missing values (docs/categorical-missing.md):
which columns are categorical, their levels, the codes of ``SplitGrid.bin``, encoding at
prediction, the errors, the refusal by methods without support, and the bundled tables."""

import pickle

import numpy as np
import pandas as pd
import pytest

import bdtree_jax as bd
from bdtree_jax import driver
from bdtree_jax.data import NonNumericInputError, SplitGrid, check_X, make_split_grid
from bdtree_jax.features import MAX_LEVELS, SUPPORTS_CATEGORICAL, check_supported, read_table
from bdtree_jax.tree import MISSING_CODE


def _frame():
    return pd.DataFrame({
        "size": [1.0, 2.0, np.nan, 4.0, 5.0, 6.0],
        "color": pd.Categorical(["red", "blue", "red", None, "green", "blue"],
                                categories=["green", "blue", "red", "white"]),
        "shape": ["square", "circle", None, "circle", "square", "square"],
        "flag": [True, False, True, True, False, False],
    })


def _levels(levels):
    return [None if lv is None else list(lv) for lv in levels]


# ----------------------------------------------------------------------------------------------
# Which columns are categorical, and their levels


def test_from_dtype_reads_category_string_and_bool_columns():
    """Category order for a category dtype (only the levels that occur), sorted otherwise."""
    X, names, levels = check_X(_frame(), categorical_features="from_dtype", missing="mia", return_levels=True)
    assert names == ["size", "color", "shape", "flag"]
    assert _levels(levels) == [None, ["green", "blue", "red"], ["circle", "square"], [False, True]]
    expected = np.array([[1, 2, 1, 1], [2, 1, 0, 0], [np.nan, 2, np.nan, 1], [4, np.nan, 0, 1], [5, 0, 1, 0],
                         [6, 1, 1, 0]])
    np.testing.assert_array_equal(X, expected)


@pytest.mark.parametrize("spec", [[1, 2, 3], ["color", "shape", "count"], [False, True, True, True]],
                         ids=["indices", "names", "mask"])
def test_explicit_categorical_features(spec):
    """Indices, names and a boolean mask select the same columns; a listed numeric column is
    categorical, an unlisted non-numeric one is an error."""
    df = _frame().drop(columns="flag").assign(count=[3, 1, 3, 2, 1, 1])
    table = read_table(df, categorical_features=spec)
    assert _levels(table.levels) == [None, ["green", "blue", "red"], ["circle", "square"], [1, 2, 3]]
    np.testing.assert_array_equal(table.X[:, 3], [2, 0, 2, 1, 0, 0])
    with pytest.raises(ValueError, match=r"non-numeric columns \['shape'\]; declare them categorical"):
        read_table(df, categorical_features=["color"])


def test_arrays_are_ordered_unless_listed():
    """A numeric array's columns are ordered (NaN allowed); an array of strings needs its
    categorical columns listed."""
    table = read_table(np.array([[1.0, 0.0], [np.nan, 1.0]]))
    assert table.levels == (None, None) and table.feature_names is None
    strings = np.array([["a", 1.5], ["b", 2.5], [None, 3.5], ["a", np.nan]], dtype=object)
    with pytest.raises(NonNumericInputError, match="must be numeric.*categorical_features"):
        read_table(strings)
    table = read_table(strings, categorical_features=[0])
    assert _levels(table.levels) == [["a", "b"], None]
    np.testing.assert_array_equal(table.X, [[0, 1.5], [1, 2.5], [np.nan, 3.5], [0, np.nan]])


def test_categorical_features_errors_name_the_columns():
    df = _frame()
    with pytest.raises(ValueError, match=r"names \['weight'\] are not columns of X"):
        read_table(df, categorical_features=["color", "weight"])
    with pytest.raises(ValueError, match=r"indices \[7\] outside the 4 columns"):
        read_table(df, categorical_features=[1, 7])
    with pytest.raises(ValueError, match="boolean mask of length 2"):
        read_table(df, categorical_features=[True, False])
    with pytest.raises(ValueError, match="need X as a DataFrame"):
        read_table(df.to_numpy(), categorical_features=["color"])
    with pytest.raises(ValueError, match="categorical_features must be"):
        read_table(df, categorical_features="auto")
    with pytest.raises(ValueError, match=r"non-numeric columns \['color', 'shape', 'flag'\]"):
        read_table(df, categorical_features=None)
    with pytest.raises(ValueError, match="missing must be one of"):
        read_table(df, missing="impute")


def test_more_than_64_levels_is_an_error_naming_the_column():
    df = pd.DataFrame({"x": np.arange(MAX_LEVELS + 1.0), "city": [f"c{i}" for i in range(MAX_LEVELS + 1)]})
    with pytest.raises(ValueError, match=r"column 'city' of X has 65 levels; at most 64.*Group its rare levels"):
        read_table(df)
    assert len(read_table(df.iloc[1:]).levels[1]) == MAX_LEVELS


def test_missing_error_and_infinite_values():
    with pytest.raises(ValueError, match=r"X contains 3 NaN \(missing values\), first in column 'size'.*"
                                         "missing='error'"):
        read_table(_frame(), missing="error")
    with pytest.raises(ValueError, match=r"X contains 1 infinite values \(first in column 'size'\)"):
        read_table(_frame().assign(size=[1, 2, 3, np.inf, 5, 6]))
    with pytest.raises(ValueError, match="infinite"):
        read_table(np.array([[1.0, np.inf]]), missing="mia")
    with pytest.raises(ValueError, match="NaN"):  # the strict default of check_X (soft trees)
        check_X(np.array([[1.0, np.nan]]))


# ----------------------------------------------------------------------------------------------
# The grid's codes, and encoding at prediction


def test_grid_codes_ordered_categorical_missing():
    X, _, levels = check_X(_frame(), categorical_features="from_dtype", missing="mia", return_levels=True)
    grid = make_split_grid(X, levels=levels)
    np.testing.assert_array_equal(grid.n_cuts, [4, 0, 0, 0])
    np.testing.assert_array_equal(grid.thresholds[0], [1.5, 3.0, 4.5, 5.5])  # NaN makes no threshold
    assert np.all(np.isinf(grid.thresholds[1:])) and not grid.widths[1:].any()
    np.testing.assert_array_equal(grid.level_count, [0, 3, 2, 2])
    np.testing.assert_array_equal(grid.categorical, [False, True, True, True])
    assert grid.missing_code == MISSING_CODE
    M = MISSING_CODE
    np.testing.assert_array_equal(grid.bin(X), [[0, 2, 1, 1], [1, 1, 0, 0], [M, 2, M, 1], [2, M, 0, 1],
                                                [3, 0, 1, 0], [4, 1, 1, 0]])
    assert grid.bin(X).dtype == np.int32


def test_predict_encoding_with_the_fit_levels():
    """New rows: the fit's levels by value (whatever the new dtype's categories), an unseen level
    and a missing cell -> the missing code; the columns are checked."""
    X, names, levels = check_X(_frame(), categorical_features="from_dtype", missing="mia", return_levels=True)
    grid = make_split_grid(X, levels=levels)
    new = pd.DataFrame({"size": [3.0, np.nan], "color": pd.Categorical(["red", "purple"]),
                        "shape": ["triangle", "circle"], "flag": [False, None]})
    np.testing.assert_array_equal(grid.codes(new, feature_names=names),
                                  [[1, 2, MISSING_CODE, 0], [MISSING_CODE, MISSING_CODE, 0, MISSING_CODE]])
    # an array with the same columns, encoded positionally
    np.testing.assert_array_equal(grid.codes(new.to_numpy(dtype=object)), grid.codes(new))
    with pytest.raises(ValueError, match="X has 3 features, but the model is expecting 4"):
        grid.codes(new.iloc[:, :3])
    with pytest.raises(ValueError, match="feature names"):
        grid.codes(new.rename(columns={"size": "length"}), feature_names=names)


def test_a_model_without_missing_bits_refuses_missing_values_at_prediction():
    X = np.array([[1.0, 3.0], [2.0, 4.0], [3.0, 5.0]])
    grid = make_split_grid(X)
    assert grid.missing_code is None
    with pytest.raises(ValueError, match=r"missing values \(NaN/None\), first in column 1, but the model saw no "
                                         "missing values in training"):
        grid.codes(np.array([[1.0, np.nan]]))
    with pytest.raises(ValueError, match="column 1, but the model saw no missing values"):
        grid.bin(np.array([[1.0, np.nan]]))


def test_numeric_data_unchanged():
    """Without a categorical feature or a missing cell the grid and codes are those of the
    library before: midpoints of the distinct values, searchsorted bins, no missing code."""
    X, _ = bd.datasets.load("wine")
    X = X.to_numpy(float)
    grid = make_split_grid(X)
    for f in range(X.shape[1]):
        u = np.unique(X[:, f])
        np.testing.assert_array_equal(grid.thresholds[f, : grid.n_cuts[f]], (u[:-1] + u[1:]) / 2)
        np.testing.assert_array_equal(grid.bin(X)[:, f], np.searchsorted((u[:-1] + u[1:]) / 2, X[:, f]))
    assert grid.missing_code is None and grid.levels == (None,) * X.shape[1] and not grid.level_count.any()
    capped = make_split_grid(X, 7)
    assert capped.missing_code is None and capped.n_cuts.max() == 7
    problem = bd.build_problem(X, np.arange(len(X)) % 2)
    assert problem.data.level_masks is None and problem.data.missing_code is None


def test_grids_pickled_before_the_new_fields_load():
    grid = SplitGrid(np.array([[0.5, np.inf], [1.5, 2.5]]), np.array([1, 2]), np.zeros((2, 2)))
    assert grid.levels == (None, None) and grid.missing_code is None
    np.testing.assert_array_equal(grid.level_count, [0, 0])
    old = pickle.loads(pickle.dumps(grid))
    for k in ("levels", "level_count", "missing_code"):
        old.__dict__.pop(k)
    again = pickle.loads(pickle.dumps(old))
    assert again.levels == (None, None) and again.missing_code is None
    np.testing.assert_array_equal(again.bin(np.array([[1.0, 2.0]])), [[1, 1]])


# ----------------------------------------------------------------------------------------------
# Methods without support refuse such data before compiling


def _penguins():
    """59 rows of the three species, one with missing measurements (row 3)."""
    X, y = bd.datasets.load("penguins")
    rows = np.r_[3, 0:344:6]
    return X.iloc[rows], y.iloc[rows]


@pytest.mark.parametrize("method", [m for m in ("pg", "smc", "wu", "pcfg", "hmc-df") if m not in SUPPORTS_CATEGORICAL])
def test_other_methods_refuse_categorical_and_missing(method):
    X, y = _penguins()
    before = driver.trace_count()
    with pytest.raises(ValueError, match=rf"method='{method}' does not support categorical features yet \(column "
                                         r"'island' is categorical\).*one-hot"):
        bd.sample(X, y, method=method, num_warmup=2, num_samples=2, num_chains=1)
    numeric = X.drop(columns=["island", "sex"])
    with pytest.raises(ValueError, match=rf"method='{method}' does not support missing values \(NaN\) yet \(column "
                                         r"'bill_length_mm' has 1\).*impute"):
        bd.BayesianTreeClassifier(method=method, num_warmup=2, num_samples=2, num_chains=1).fit(numeric, y)
    assert driver.trace_count() == before


@pytest.mark.skipif("bart" in SUPPORTS_CATEGORICAL, reason="BART supports categorical features")
def test_bart_refuses_categorical_and_missing():
    X, y = bd.datasets.load("airquality")
    before = driver.trace_count()
    with pytest.raises(ValueError, match=r"BARTRegressor: BART does not support missing values \(NaN\) yet \(column "
                                         r"'Solar.R' has 5\)"):
        bd.BARTRegressor(num_trees=5, num_warmup=2, num_samples=2).fit(X, y)
    Xc = X.fillna(0.0).assign(Month=X.Month.astype("category"))
    with pytest.raises(ValueError, match="BART does not support categorical features yet \\(column 'Month'"):
        bd.BARTRegressor(num_trees=5, num_warmup=2, num_samples=2).fit(Xc, y)
    with pytest.raises(ValueError, match="BART does not support categorical"):
        bd.BARTClassifier(num_trees=5).fit(Xc, (y > y.median()).astype(int))
    assert driver.trace_count() == before


def test_check_supported_passes_plain_data_and_supported_methods():
    X = np.array([[1.0, np.nan]])
    check_supported("hmc-df", (None, None), np.ones((1, 2)), None)
    check_supported("cgm", (None, np.array(["a"], dtype=object)), X, None)
    with pytest.raises(ValueError, match=r"column 1 has 1"):
        check_supported("hmc-df", (None, None), X, None)


def test_scikit_learn_allow_nan_tag():
    """NaN is declared allowed where it is routed: method 'cgm' with missing='mia'."""
    assert bd.BayesianTreeClassifier().__sklearn_tags__().input_tags.allow_nan
    assert bd.BayesianTreeRegressor(method=bd.CGM()).__sklearn_tags__().input_tags.allow_nan
    assert not bd.BayesianTreeClassifier(missing="error").__sklearn_tags__().input_tags.allow_nan
    assert not bd.BayesianTreeClassifier(method="hmc-df").__sklearn_tags__().input_tags.allow_nan
    assert bd.BARTRegressor().__sklearn_tags__().input_tags.allow_nan == ("bart" in SUPPORTS_CATEGORICAL)


def test_problem_keeps_the_encoded_inputs_and_the_levels():
    X, y = _penguins()
    problem = bd.build_problem(X, y)
    assert problem.names == list(X.columns)
    assert list(problem.grid.levels[0]) == sorted(X.island.unique())
    assert np.isnan(problem.X).sum() == X.isna().sum().sum()
    assert problem.grid.missing_code == MISSING_CODE
    with pytest.raises(ValueError, match="sample: X contains .* NaN"):
        bd.sample(X, y, missing="error")


# ----------------------------------------------------------------------------------------------
# Bundled tables


def test_mixed_datasets_load_as_published():
    X, y = bd.datasets.load("penguins")
    assert X.shape == (344, 7) and y.name == "species" and y.nunique() == 3
    assert X.isna().sum().to_dict() == {"island": 0, "bill_length_mm": 2, "bill_depth_mm": 2, "flipper_length_mm": 2,
                                        "body_mass_g": 2, "sex": 11, "year": 0}
    assert _levels(read_table(X).levels)[:1] == [["Biscoe", "Dream", "Torgersen"]]
    X, y = bd.datasets.load("airquality")
    assert X.shape == (116, 5) and y.name == "Ozone" and not y.isna().any() and int(X["Solar.R"].isna().sum()) == 5
    assert bd.datasets.load_frame("airquality").shape == (153, 6)
    X, y = bd.datasets.load("diamonds")
    assert X.shape == (53940, 9) and y.name == "price" and not X.isna().any().any()
    assert list(X.cut.cat.categories) == ["Fair", "Good", "Very Good", "Premium", "Ideal"] and X.cut.cat.ordered
    assert [len(lv) if lv is not None else 0 for lv in read_table(X).levels] == [0, 5, 7, 8, 0, 0, 0, 0, 0]
    assert set(bd.datasets.MIXED) == {"penguins", "airquality", "diamonds"}


def test_cli_config_keys():
    from bdtree_jax import cli

    assert {"categorical_features", "missing"} <= cli.ALLOWED_KEYS


# ----------------------------------------------------------------------------------------------
# End to end


@pytest.mark.filterwarnings("ignore::bdtree_jax.data.MissingValueRoutingWarning")  # routing tested here; the warning in test_missing_routing.py
@pytest.mark.slow
def test_cgm_end_to_end_on_penguins():
    """Raw penguins (strings and NaN) through the classifier; prediction on an unseen island and on
    an array after a DataFrame fit."""
    X, y = bd.datasets.load("penguins")
    clf = bd.BayesianTreeClassifier(max_depth=3, num_warmup=100, num_samples=100, num_chains=1).fit(X, y)
    assert clf.score(X, y) > 0.85
    new = X.iloc[:3].copy()
    new.loc[new.index[0], "island"] = "Atlantis"
    assert clf.predict_proba(new).shape == (3, 3)
    np.testing.assert_allclose(clf.predict_proba(X.iloc[:5].to_numpy(dtype=object)), clf.predict_proba(X.iloc[:5]))
    assert clf.map_tree_text()
