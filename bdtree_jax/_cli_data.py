"""``bdtree run`` on the user's own table: a config with ``data: path.csv`` (or ``.parquet``),
``target:``, optional ``features:`` and ``task:`` in place of ``dataset:``.  Everything is checked
when the config is loaded (before anything compiles), each error naming its key."""

from __future__ import annotations

import importlib.util
import os

import numpy as np

__all__ = ["TABLE_KEYS", "check_table", "infer_task", "read_table"]

#: The keys of a user table.
TABLE_KEYS = ("data", "target", "features")
#: The table formats read, by file suffix.
_SUFFIXES = (".csv", ".parquet", ".pq")
#: A whole-number target with at most this many distinct values is taken for class labels.
MAX_INFERRED_CLASSES = 10


def read_table(path: str, *, where: str = ""):
    """The table in ``path`` as a pandas DataFrame: CSV (``pandas.read_csv``) or parquet
    (``pandas.read_parquet``, which needs pyarrow); a ``ValueError`` naming the ``data`` key for a
    missing file, another suffix, parquet without pyarrow, or a file pandas cannot read."""
    import pandas as pd

    if not isinstance(path, (str, os.PathLike)) or not str(path):
        raise ValueError(f"{where}data must be the path of a CSV or parquet file; got {path!r}.")
    path = os.path.expanduser(str(path))
    suffix = os.path.splitext(path)[1].lower()
    if suffix not in _SUFFIXES:
        raise ValueError(f"{where}data: {path!r} is not a .csv or .parquet file (its suffix says what it holds).")
    if not os.path.isfile(path):
        raise ValueError(f"{where}data: file {path!r} not found (no file {os.path.abspath(path)}).")
    if suffix != ".csv" and importlib.util.find_spec("pyarrow") is None:
        raise ValueError(f"{where}data: reading parquet needs pyarrow (pip install pyarrow), which is not "
                         f"installed; or save the table as CSV.")
    try:
        return pd.read_csv(path) if suffix == ".csv" else pd.read_parquet(path)
    except (ValueError, OSError, UnicodeDecodeError) as err:
        raise ValueError(f"{where}data: cannot read {path!r}: {err}") from None


def infer_task(y) -> str:
    """``"classification"`` for a target of labels (strings, categories, booleans, or whole numbers
    with at most :data:`MAX_INFERRED_CLASSES` distinct values), else ``"regression"``."""
    import pandas as pd

    y = pd.Series(y)
    if not pd.api.types.is_numeric_dtype(y) or pd.api.types.is_bool_dtype(y):
        return "classification"
    values = y.to_numpy(np.float64)
    whole = np.all(values == np.round(values))
    return "classification" if whole and len(np.unique(values)) <= MAX_INFERRED_CLASSES else "regression"


def _columns(value, key: str, where: str) -> list:
    if isinstance(value, str):
        return [value]
    if not isinstance(value, (list, tuple)) or not value or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{where}{key} must be a column name or a non-empty list of column names; got {value!r}.")
    if len(set(value)) != len(value):
        raise ValueError(f"{where}{key} names a column twice: {sorted({v for v in value if value.count(v) > 1})}.")
    return list(value)


def check_table(config: dict, *, where: str = "", did_you_mean=None):
    """Check a config's user table (``data``, ``target``, ``features``, ``task``) and return
    ``(task, X, y)``: X the DataFrame of the feature columns (all but the target by default), y
    the target Series.  Every error is a ``ValueError`` naming the key."""
    hint = did_you_mean or (lambda words, choices: ".")
    if "dataset" in config:
        raise ValueError(f"{where}give either dataset: (a bundled dataset) or data: (your table), not both.")
    table = read_table(config["data"], where=where)
    columns = [str(c) for c in table.columns]
    table.columns = columns
    if "target" not in config:
        raise ValueError(f"{where}data: needs target: the column to predict (one of {', '.join(columns)}).")
    target = config["target"]
    if not isinstance(target, str):
        raise ValueError(f"{where}target must be a column name; got {target!r}.")
    if target not in columns:
        raise ValueError(f"{where}target: no column {target!r} in {config['data']}{hint(target, columns)} "
                         f"Columns: {', '.join(columns)}.")
    features = config.get("features")
    features = [c for c in columns if c != target] if features is None else _columns(features, "features", where)
    unknown = [f for f in features if f not in columns]
    if unknown:
        raise ValueError(f"{where}features: no column {unknown} in {config['data']}{hint(unknown, columns)} "
                         f"Columns: {', '.join(columns)}.")
    if target in features:
        raise ValueError(f"{where}features lists the target column {target!r}; a feature cannot be the target.")
    if not features:
        raise ValueError(f"{where}data: the table has no column besides the target {target!r}.")
    y = table[target]
    missing = np.flatnonzero(y.isna().to_numpy())
    if len(missing):
        raise ValueError(f"{where}target: column {target!r} has {len(missing)} missing values (rows "
                         f"{', '.join(map(str, missing[:5]))}{' ...' if len(missing) > 5 else ''}); drop those rows.")
    if len(table) < 2:
        raise ValueError(f"{where}data: the table has {len(table)} row(s); it needs at least 2.")
    import pandas as pd

    task = config.get("task") or infer_task(y)
    if task == "regression" and (not pd.api.types.is_numeric_dtype(y) or pd.api.types.is_bool_dtype(y)):
        raise ValueError(f"{where}task: regression needs a numeric target; column {target!r} holds "
                         f"{y.dtype} values (task: classification?).")
    return task, table[features], y
