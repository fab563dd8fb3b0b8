"""Categorical features and missing values at the public edge (docs/categorical-missing.md).

:func:`read_table` turns the user's table (a DataFrame or an array-like) into the float matrix the
split grid bins: an ordered column's values, a categorical column's level indices ``0 .. L - 1``,
and NaN for a missing cell (or, at prediction, a level not seen at fit).  At fit it decides which
columns are categorical (``categorical_features``) and records their levels; at prediction it
encodes new rows with the levels of the fit (kept by :class:`~bdtree_jax.data.SplitGrid`).

:data:`SUPPORTS_CATEGORICAL` lists the methods that sample rules on categorical features and
missing-value bits; :func:`check_supported` refuses the data for the others.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pandas as pd
from ._validate import check_one_of

__all__ = ["MAX_LEVELS", "MISSING", "SUPPORTS_CATEGORICAL", "Table", "read_table", "check_missing_option",
           "check_supported"]

#: Most levels a categorical feature may have (a rule's level set is a 64-bit mask).
MAX_LEVELS = 64
#: ``missing=`` options: MIA routing of missing cells, or an error.
MISSING = ("mia", "error")
#: The methods whose kernels sample categorical rules and missing-value bits ("bart": the BART
#: estimators, any tree sampler).  Every other method refuses categorical columns and missing
#: cells before anything is compiled (:func:`check_supported`).
SUPPORTS_CATEGORICAL = ("cgm", "bart", "smc", "pg", "wu", "pcfg")


class NonNumericInputError(ValueError, TypeError):
    """Input that cannot be read as numbers: a ``ValueError`` like every other bad input, and a
    ``TypeError`` as scikit-learn's validation raises for it."""


class Table(NamedTuple):
    """A validated table.

    X : (n, F) float64: ordered features' values, categorical features' level indices, NaN for a
        missing cell (and, at prediction, an unseen level).
    feature_names : the DataFrame's column names (str), else None.
    levels : per feature, the (L,) object array of a categorical feature's level labels, or None
        for an ordered feature.
    """

    X: np.ndarray
    feature_names: list | None
    levels: tuple


def check_missing_option(missing, where: str = "") -> None:
    check_one_of(f"{where}missing", missing, MISSING)


def read_table(X, *, categorical_features="from_dtype", missing="mia", levels=None, feature_names=None,
               name: str = "X", estimator: str = "", min_rows: int = 1) -> Table:
    """Validate and encode a feature table.

    Parameters
    ----------
    X : DataFrame or array-like (n, F).
    categorical_features : "from_dtype", None, or column indices, names or a boolean mask (fit
        only).  "from_dtype": a DataFrame's ``category``, ``object``/``string`` and ``bool``
        columns (an array's columns are all ordered).  None: no categorical column (every column
        must be numeric).
    missing : "mia" (missing cells allowed) or "error".
    levels : None at fit; at prediction the fit's per-feature levels (:attr:`Table.levels`):
        the categorical columns are then those with levels, unseen levels become NaN, and
        ``missing="error"`` means the model has no rule for missing cells.
    feature_names : at prediction, the names the model was fitted with (a DataFrame's columns
        must equal them).
    name, estimator : how errors name the input and the caller; min_rows : fewest rows.
    """
    where = f"{estimator}: " if estimator else ""
    check_missing_option(missing, where)
    fitted = levels is not None
    n, names, columns, frame, matrix = _columns(X, name, where)
    F = len(columns)
    if F < 1:
        raise ValueError(f"{where}{name} has 0 feature(s) (shape=({n}, 0)) while a minimum of 1 is required.")
    if n < min_rows:
        raise ValueError(f"{where}{name} has n_samples={n}; at least {min_rows} are needed.")
    label = [repr(names[f]) if names is not None else str(f) for f in range(F)]
    if fitted:
        if F != len(levels):
            raise ValueError(f"{where}{name} has {F} features, but {estimator or 'the model'} is expecting "
                             f"{len(levels)} features as input.")
        if names is not None and feature_names is not None and list(names) != list(feature_names):
            raise ValueError(f"{where}{name} has feature names {names} but the model was fitted with "
                             f"{list(feature_names)}.")
        categorical = [lv is not None for lv in levels]
    else:
        categorical = _categorical_mask(categorical_features, columns, names, frame, name, where)
    if frame is not None:
        bad = [names[f] for f, col in enumerate(columns) if not categorical[f] and not _is_numeric(col)]
        if bad:
            hint = ("encode them as numbers" if fitted or (isinstance(categorical_features, str)
                                                           and categorical_features == "from_dtype")
                    else "declare them categorical (categorical_features=[...]) or encode them as numbers")
            raise ValueError(f"{where}{name} has non-numeric columns {bad}; {hint} (e.g. pandas.get_dummies or an "
                             "OrdinalEncoder).")
    if matrix is not None:  # a numeric array: its float copy
        out = matrix
    elif frame is not None and not any(categorical):  # numeric columns: one conversion
        out = frame.to_numpy(dtype=float, na_value=np.nan)
    else:  # column by column (into contiguous columns)
        out = np.empty((n, F), order="F")
        for f, col in enumerate(columns):
            if not categorical[f]:
                out[:, f] = _ordered(col, label[f], name, where)
    found = [None] * F
    for f, col in enumerate(columns):
        if categorical[f]:
            out[:, f], found[f] = _encode_categorical(col, levels[f] if fitted else None, label[f], name, where)
    out = np.ascontiguousarray(out)
    _check_values(out, categorical, label, missing, fitted, name, where)
    return Table(out, names, tuple(found))


def _columns(X, name: str, where: str):
    """``(n, names, columns, frame, matrix)``: the rows, the DataFrame's names (else None), its F
    columns as Series or 1-D arrays, the DataFrame (else None) and a numeric array's float copy
    (else None)."""
    import scipy.sparse as sp

    if X is None:
        raise ValueError(f"{where}{name} is None; expected an array-like of shape (n_samples, n_features).")
    if sp.issparse(X):
        raise ValueError(f"{where}sparse data was passed for {name}, but dense data is required; use X.toarray().")
    if isinstance(X, pd.DataFrame):
        complex_columns = [str(c) for c, d in zip(X.columns, X.dtypes) if getattr(d, "kind", "") == "c"]
        if complex_columns:
            raise ValueError(f"{where}Complex data not supported in {name} (columns {complex_columns}).")
        return X.shape[0], [str(c) for c in X.columns], [X.iloc[:, f] for f in range(X.shape[1])], X, None
    try:
        arr = np.asarray(X)
    except ValueError:  # rows of different lengths
        raise ValueError(f"{where}{name} must be 2-D of shape (n_samples, n_features); its rows have different "
                         "lengths.") from None
    if arr.dtype.kind == "c":
        raise ValueError(f"{where}Complex data not supported in {name}.")
    if arr.ndim == 1:
        raise ValueError(
            f"{where}{name} must be 2-D of shape (n_samples, n_features); got a 1-D array of "
            f"length {arr.shape[0]}. Reshape your data with X.reshape(-1, 1) for a single feature.")
    if arr.ndim != 2:
        raise ValueError(f"{where}{name} must be 2-D of shape (n_samples, n_features); got shape {arr.shape}.")
    matrix = arr.astype(float) if arr.dtype.kind in "biuf" else None
    return arr.shape[0], None, [arr[:, f] for f in range(arr.shape[1])], None, matrix


def _is_categorical_dtype(col) -> bool:
    """A DataFrame column ``from_dtype`` reads as categorical: category, object, string, bool."""
    dtype = col.dtype
    return (isinstance(dtype, pd.CategoricalDtype) or pd.api.types.is_bool_dtype(dtype)
            or pd.api.types.is_object_dtype(dtype) or pd.api.types.is_string_dtype(dtype))


def _categorical_mask(spec, columns, names, frame, name: str, where: str) -> list:
    """(F,) bools: the categorical columns of ``spec`` (``categorical_features``)."""
    F = len(columns)
    if isinstance(spec, str) and spec == "from_dtype":
        return [frame is not None and _is_categorical_dtype(c) for c in columns]
    if spec is None:
        return [False] * F
    if isinstance(spec, str) or not np.iterable(spec):
        raise ValueError(f"{where}categorical_features must be 'from_dtype', None, or column indices, names or a "
                         f"boolean mask; got {spec!r}.")
    items = list(spec)
    if items and all(isinstance(v, (bool, np.bool_)) for v in items):
        if len(items) != F:
            raise ValueError(f"{where}categorical_features is a boolean mask of length {len(items)}; {name} has {F} "
                             "columns.")
        return [bool(v) for v in items]
    if all(isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_)) for v in items):
        bad = [int(v) for v in items if not 0 <= v < F]
        if bad:
            raise ValueError(f"{where}categorical_features has indices {bad} outside the {F} columns of {name} "
                             f"(0 .. {F - 1}).")
        chosen = {int(v) for v in items}
    elif all(isinstance(v, str) for v in items):
        if names is None:
            raise ValueError(f"{where}categorical_features names {items} need {name} as a DataFrame with those "
                             "columns; give column indices for an array.")
        unknown = [v for v in items if v not in names]
        if unknown:
            raise ValueError(f"{where}categorical_features names {unknown} are not columns of {name}; its columns "
                             f"are {names}.")
        chosen = {names.index(v) for v in items}
    else:
        raise ValueError(f"{where}categorical_features must be 'from_dtype', None, or column indices, names or a "
                         f"boolean mask; got {spec!r}.")
    return [f in chosen for f in range(F)]


def _is_numeric(col: pd.Series) -> bool:
    return pd.api.types.is_numeric_dtype(col.dtype) and not pd.api.types.is_bool_dtype(col.dtype)


def _ordered(col, label: str, name: str, where: str) -> np.ndarray:
    """(n,) float values of an ordered column (NaN for a missing cell)."""
    if isinstance(col, pd.Series):
        return col.to_numpy(dtype=float, na_value=np.nan)
    if col.dtype.kind == "f":
        return col
    try:
        return np.asarray(pd.Series(col, dtype=object).to_numpy(dtype=float, na_value=np.nan))
    except (TypeError, ValueError, OverflowError) as exc:
        raise NonNumericInputError(
            f"{where}{name} must be numeric; got an array of dtype {col.dtype} with values that are not numbers "
            f"in column {label} ({exc}). Declare its categorical columns with categorical_features=[...].") from None


def _scalar(v):
    return v.item() if isinstance(v, np.generic) else v


def _encode_categorical(col, levels, label: str, name: str, where: str):
    """``(codes, levels)``: the level index of every cell (NaN when missing or not a level) and
    the levels (recorded here at fit: the dtype's category order, else sorted)."""
    series = col if isinstance(col, pd.Series) else pd.Series(col, dtype=object if col.dtype.kind in "OUS" else None)
    missing = series.isna().to_numpy()
    if levels is None:
        if isinstance(series.dtype, pd.CategoricalDtype):
            found = list(series.cat.remove_unused_categories().cat.categories)
        else:
            found = list(pd.unique(series[~missing]))
            try:
                found = sorted(found)
            except TypeError:  # labels of several types: by type name, then text
                found = sorted(found, key=lambda v: (type(v).__name__, str(v)))
        found = [_scalar(v) for v in found]
        if any(isinstance(v, float) and np.isinf(v) for v in found):
            raise ValueError(f"{where}{name} contains infinite values in column {label}; infinite values are not "
                             "allowed.")
        if len(found) > MAX_LEVELS:
            raise ValueError(f"{where}categorical column {label} of {name} has {len(found)} levels; at most "
                             f"{MAX_LEVELS} are supported. Group its rare levels into one (e.g. 'other') or encode "
                             "it as numbers.")
        levels = np.array(found + [None], dtype=object)[:-1]  # an object array even of tuples
    codes = pd.Index(levels, dtype=object).get_indexer(np.asarray(series, dtype=object)).astype(float)
    codes[(codes < 0) | missing] = np.nan
    return codes, levels


def _check_values(X: np.ndarray, categorical, label, missing: str, fitted: bool, name: str, where: str) -> None:
    """Infinite values are errors; missing cells are errors under ``missing="error"`` (at
    prediction: the model has no missing-value rule)."""
    if np.isfinite(X).all():  # the common case, in one pass
        return
    ordered = ~np.asarray(categorical, bool)
    inf = np.isinf(X if ordered.all() else X[:, ordered])  # no copy of an all-ordered table
    if inf.any():
        first = label[int(np.flatnonzero(ordered)[np.flatnonzero(inf.any(0))[0]])]
        raise ValueError(f"{where}{name} contains {int(inf.sum())} infinite values (first in column {first}); "
                         "infinite values are not allowed.")
    if missing == "mia":
        return
    nan = np.isnan(X)
    if nan.any():
        first = label[int(np.flatnonzero(nan.any(0))[0])]
        if fitted:
            raise ValueError(
                f"{where}{name} contains {int(nan.sum())} missing values (NaN/None), first in column {first}, but the "
                "model saw no missing values in training (and has no categorical feature), so its rules do not "
                "route them; impute them, or refit on data with missing values.")
        raise ValueError(f"{where}{name} contains {int(nan.sum())} NaN (missing values), first in column {first}, "
                         "and missing='error'; impute or drop them, or use missing='mia'.")


def check_supported(method: str, levels: tuple, X: np.ndarray, names, where: str = "", label: str | None = None,
                    supported: tuple | None = None) -> None:
    """Refuse categorical features and missing cells for a method not in ``supported`` (default
    :data:`SUPPORTS_CATEGORICAL`), naming the first such column.

    ``levels`` (per feature, None for ordered) and ``X`` (n, F) encoded with NaN for missing
    cells come from :func:`read_table`; ``names`` are the F feature names (or None);
    ``label`` how the message names the method (default ``method='<method>'``).
    """
    supported = SUPPORTS_CATEGORICAL if supported is None else supported
    if method in supported:
        return
    categorical = np.array([lv is not None for lv in levels], bool)
    has_nan = np.isnan(X).any(0)
    bad = np.flatnonzero(categorical | has_nan)
    if not len(bad):
        return
    f = int(bad[0])
    col = repr(names[f]) if names is not None else str(f)
    who = label or f"method={method!r}"
    instead = " / ".join(f"method={m!r}" for m in supported if m != "bart")
    if categorical[f]:
        raise ValueError(f"{where}{who} does not support categorical features yet (column {col} is categorical): "
                         f"one-hot encode it (e.g. pandas.get_dummies), or use {instead}, which does.")
    raise ValueError(f"{where}{who} does not support missing values (NaN) yet (column {col} has "
                     f"{int(np.isnan(X[:, f]).sum())}): impute them (e.g. sklearn.impute.SimpleImputer), or use "
                     f"{instead}, which does.")
