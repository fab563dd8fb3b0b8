"""``bdtree run`` on the user's own table (``data: path.csv``, ``target:``, ``features:``,
``task:``): one short run end to end, and every bad table or key an error naming the key, raised
when the config is loaded (before anything compiles) and printed as one line by the command."""

from __future__ import annotations

import importlib.util
import json

import numpy as np
import pandas as pd
import pytest

import bdtree_jax as bd
from bdtree_jax._cli_data import infer_task
from bdtree_jax.cli import load_config, main

#: the shapes and settings of test_cli's tiny iris run (one compiled program when both run in a process)
TINY = "split: 0.3\nmax_depth: 2\nnum_warmup: 20\nnum_samples: 20\nnum_chains: 1\nblock_size: 10\n"


@pytest.fixture
def table(tmp_path):
    X, y = bd.datasets.load("iris")
    frame = X.assign(species=y, note="x")
    path = tmp_path / "flowers.csv"
    frame.to_csv(path, index=False)
    return path


def _config(tmp_path, text):
    path = tmp_path / "mine.yaml"
    path.write_text(text)
    return path


def test_a_csv_table_is_read_split_and_named(tmp_path, table):
    """What ``run_config`` fits: the table's feature columns (names kept) and target, split 70/30
    stratified, the task inferred; no fit (the run end to end is the slow test below)."""
    from bdtree_jax.cli import _load_data

    config = load_config(_config(tmp_path, f"data: {table}\ntarget: species\nseed: 3\n"))
    task, X_train, y_train, X_test, y_test = _load_data(config)
    assert task == "classification" and len(X_train) == 105 and len(X_test) == 45
    assert list(X_train.columns) == ["sepal_length", "sepal_width", "petal_length", "petal_width", "note"]
    assert sorted(pd.Series(y_test).value_counts()) == [15, 15, 15]  # stratified
    config = load_config(_config(tmp_path, f"data: {table}\ntarget: petal_width\nfeatures: petal_length\n"
                                           "split: none\n"))
    task, X_train, y_train, X_test, _ = _load_data(config)
    assert task == "regression" and list(X_train.columns) == ["petal_length"] and len(X_test) == 150
    np.testing.assert_array_equal(y_train, pd.read_csv(table)["petal_width"])


@pytest.mark.slow
def test_run_on_a_csv_table(tmp_path, table, capsys):
    path = _config(tmp_path, f"data: {table}\ntarget: species\nfeatures: [sepal_length, sepal_width, petal_length, "
                             f"petal_width]\n{TINY}")
    config = load_config(path)
    assert config["task"] == "classification" and config["split"] == 0.3  # inferred; a table's default split
    assert main(["run", str(path), "--output", str(tmp_path / "out")]) == 0
    metrics = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert metrics["dataset"] == str(table) and metrics["task"] == "classification"
    assert metrics["n_train"] + metrics["n_test"] == 150 and metrics["test_accuracy_pooled"] > 0.6
    assert "petal" in metrics["most_visited_tree"] and "petal" in metrics["map_tree"]  # the table's names
    post = bd.load(tmp_path / "out" / "posterior.npz")
    assert post.feature_names == ["sepal_length", "sepal_width", "petal_length", "petal_width"]
    assert (tmp_path / "out" / "map_tree.png").stat().st_size > 0 and (tmp_path / "out" / "top_trees.png").stat().st_size


def test_task_inference():
    assert infer_task(pd.Series(["a", "b"])) == "classification"
    assert infer_task(pd.Series([True, False])) == "classification"
    assert infer_task(pd.Series([0, 1, 2, 1])) == "classification"
    assert infer_task(pd.Series(np.arange(50))) == "regression"  # many whole numbers: a quantity
    assert infer_task(pd.Series([0.5, 1.0, 2.0])) == "regression"


@pytest.mark.parametrize("text, match", [
    ("data: {table}\n", "data: needs target: the column to predict \\(one of sepal_length, "),
    ("data: {table}\ntarget: specis\n", "target: no column 'specis' in .*; did you mean 'species'\\? Columns: "),
    ("data: {table}\ntarget: species\nfeatures: [petal_lenght]\n",
     "features: no column \\['petal_lenght'\\] .*did you mean 'petal_length'\\?"),
    ("data: {table}\ntarget: species\nfeatures: [species, petal_length]\n", "features lists the target column"),
    ("data: {table}\ntarget: species\nfeatures: []\n", "features must be a column name or a non-empty list"),
    ("data: {table}\ntarget: species\nfeatures: [a, a]\n", "features names a column twice: \\['a'\\]"),
    ("data: {table}\ntarget: species\ntask: regression\n", "task: regression needs a numeric target; column "
                                                           "'species'"),
    ("data: {table}\ntarget: species\ntask: regresion\n", "did you mean 'regression'\\?"),
    ("data: {table}\ntarget: species\nsplit: paper\n", "split: paper is for the bundled datasets"),
    ("data: {table}\ndataset: iris\ntarget: species\n", "give either dataset: .* or data: .*, not both"),
    ("data: nowhere.csv\ntarget: y\n", "data: file 'nowhere.csv' not found"),
    ("data: {table}.txt\ntarget: y\n", "is not a .csv or .parquet file"),
    ("data: [1, 2]\ntarget: y\n", "data must be the path of a CSV or parquet file"),
    ("dataset: iris\ntarget: species\n", "target: is for your own table; give it with data: path.csv"),
    ("target: species\n", "needs a 'dataset' key .* or a 'data' key"),
])
def test_bad_tables_are_errors_naming_the_key(tmp_path, table, capsys, text, match):
    path = _config(tmp_path, text.format(table=table))
    with pytest.raises(ValueError, match=match):
        load_config(path)
    assert main(["run", str(path)]) == 2
    out, err = capsys.readouterr()
    assert err.startswith("bdtree: error: ") and err.count("\n") == 1 and "Traceback" not in err


def test_missing_target_values_and_parquet(tmp_path, table):
    frame = pd.read_csv(table)
    frame.loc[[3, 7], "species"] = None
    holes = tmp_path / "holes.csv"
    frame.to_csv(holes, index=False)
    with pytest.raises(ValueError, match="target: column 'species' has 2 missing values \\(rows 3, 7\\)"):
        load_config(_config(tmp_path, f"data: {holes}\ntarget: species\n"))
    parquet = tmp_path / "flowers.parquet"
    if importlib.util.find_spec("pyarrow") is None:
        parquet.write_bytes(b"PAR1")
        with pytest.raises(ValueError, match="reading parquet needs pyarrow \\(pip install pyarrow\\)"):
            load_config(_config(tmp_path, f"data: {parquet}\ntarget: species\n"))
    else:
        pd.read_csv(table).to_parquet(parquet)
        config = load_config(_config(tmp_path, f"data: {parquet}\ntarget: petal_width\nfeatures: petal_length\n"))
        assert config["task"] == "regression"
