"""Partial dependence and ICE curves with posterior credible bands, for every estimator here.

For a set of features ``S`` (one feature or a pair) and a grid of their values, the partial
dependence of posterior draw ``d`` at grid point ``v`` is the average over the rows ``x_i`` of
``X`` of that draw's prediction with ``x_S`` set to ``v`` (Friedman 2001):

    PD_d(v) = 1/n sum_i f_d(v, x_{i, -S})

Its draws give the posterior mean curve and an equal-tailed credible band; ICE curves (Goldstein
et al. 2015) are the per-row terms ``f_d(v, x_{i, -S})``, averaged over the draws (and optionally
with their own bands).  Every draw is evaluated at every (grid point, row) pair of the stack in
chunks within the prediction budget (:mod:`bdtree_jax.posterior.streaming`): memory is
``draws x grid`` for the curves and ``rows x grid`` for the ICE curves, never ``draws x grid x rows``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ._response import Response, response_of, set_column, stacked_draws, take_rows
from .._validate import is_int

__all__ = ["PartialDependence", "partial_dependence", "feature_index", "categorical_columns"]


@dataclass(eq=False)
class PartialDependence:
    """Partial dependence of one feature or a pair (``G = (G1,)`` or ``(G1, G2)`` grid points).

    Attributes
    ----------
    features : tuple of names; feature_indices : tuple of column indices.
    grid : tuple of (G_j,) arrays, the grid of each feature; categorical : tuple of bool.
    outputs : (K,) labels of the outputs (class labels, or the prediction's name).
    response : what was averaged (``"predict"``, ``"predict_proba"``, ``"expected count (exposure 1)"``,
        ``"median survival time"``).
    draws : (D, *G, K) the partial dependence of every posterior draw.
    mean, lower, upper : (*G, K) its posterior mean and equal-tailed ``prob`` credible band.
    ice_mean : (n, *G, K) every row's ICE curve (posterior mean), or None.
    ice_lower, ice_upper : (n, *G, K) their ``prob`` bands, or None.
    """

    features: tuple
    feature_indices: tuple
    grid: tuple
    categorical: tuple
    outputs: np.ndarray
    response: str
    prob: float
    draws: np.ndarray
    mean: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    ice_mean: np.ndarray | None = None
    ice_lower: np.ndarray | None = None
    ice_upper: np.ndarray | None = None

    def output_index(self, target=None) -> int:
        """The column of ``target`` among :attr:`outputs` (None: the only output, or for two classes
        the second, scikit-learn's positive class); ``ValueError`` otherwise."""
        outputs = list(self.outputs)
        if target is None:
            if len(outputs) <= 2:
                return len(outputs) - 1
            raise ValueError(f"target must name one of the {len(outputs)} classes {outputs} (it is None).")
        for k, label in enumerate(outputs):
            if label == target or str(label) == str(target):
                return k
        raise ValueError(f"target {target!r} is not one of the outputs {outputs}.")


def _names(est, X) -> list:
    if isinstance(X, pd.DataFrame):
        return [str(c) for c in X.columns]
    names = getattr(est, "feature_names_in_", None)
    if names is None:
        names = getattr(est.posterior_, "feature_names", None)
    return [str(n) for n in names] if names is not None and len(names) else [f"x{j}" for j in range(X.shape[1])]


def feature_index(feature, names: list, where: str = "") -> int:
    """The column index of ``feature`` (an index or a name among ``names``); ``ValueError`` naming
    ``features`` otherwise."""
    if isinstance(feature, (int, np.integer)) and not isinstance(feature, bool):
        if not -len(names) <= int(feature) < len(names):
            raise ValueError(f"{where}features: index {feature} is out of range for {len(names)} features.")
        return int(feature) % len(names)
    if isinstance(feature, str) and feature in names:
        return names.index(feature)
    raise ValueError(f"{where}features: {feature!r} is neither a column index nor one of the features {names}.")


def categorical_columns(est, X, names: list) -> np.ndarray:
    """(F,) bool: the fit's categorical features (its split grid), else a DataFrame's category,
    object, string and bool columns."""
    grid = getattr(est.posterior_, "grid", None)
    if grid is not None and hasattr(grid, "categorical"):
        return np.asarray(grid.categorical, bool)
    if isinstance(X, pd.DataFrame):
        return np.array([isinstance(X[c].dtype, pd.CategoricalDtype) or X[c].dtype == object or
                         pd.api.types.is_string_dtype(X[c].dtype) or pd.api.types.is_bool_dtype(X[c].dtype)
                         for c in X.columns])
    return np.zeros(len(names), bool)


def _column(X, j: int):
    return X.iloc[:, j] if isinstance(X, pd.DataFrame) else pd.Series(np.asarray(X)[:, j])


def _grid_of(col: pd.Series, categorical: bool, resolution: int, percentiles, where: str) -> np.ndarray:
    """Every level observed in ``col`` (categorical; a pandas categorical's in category order), or
    up to ``resolution`` quantiles of its values between ``percentiles`` (all its distinct values
    when there are no more than ``resolution``)."""
    present = col[col.notna()]
    if len(present) == 0:
        raise ValueError(f"{where}feature {col.name!r} has no non-missing value in X to build a grid from.")
    if categorical:
        if isinstance(col.dtype, pd.CategoricalDtype):
            seen = set(present.tolist())
            return np.asarray([c for c in col.cat.categories if c in seen], dtype=object)
        if pd.api.types.is_numeric_dtype(col.dtype):  # numeric codes taken as levels: kept numeric
            return np.unique(present.to_numpy())
        return np.asarray(sorted(set(present.tolist()), key=str), dtype=object)
    values = np.asarray(present, np.float64)
    distinct = np.unique(values)
    if len(distinct) <= resolution:
        return distinct
    return np.unique(np.quantile(values, np.linspace(percentiles[0], percentiles[1], resolution)))


def _check_options(grid_resolution, percentiles, prob, where: str):
    if not is_int(grid_resolution) or grid_resolution < 2:
        raise ValueError(f"{where}grid_resolution must be an integer >= 2; got {grid_resolution!r}.")
    p = tuple(np.asarray(percentiles, np.float64).ravel())
    if len(p) != 2 or not 0 <= p[0] < p[1] <= 1:
        raise ValueError(f"{where}percentiles must be two numbers 0 <= low < high <= 1; got {percentiles!r}.")
    if not isinstance(prob, (float, int)) or not 0 < prob < 1:
        raise ValueError(f"{where}prob must be in (0, 1); got {prob!r}.")
    return p


def partial_dependence(est, X, features, *, grid_resolution: int = 20, percentiles=(0.05, 0.95), grid=None,
                       categorical=None, prob: float = 0.9, ice: bool = True, ice_band: bool = False,
                       response: Response | None = None) -> PartialDependence:
    """Posterior partial dependence (and ICE curves) of a fitted estimator.

    Parameters
    ----------
    est : a fitted estimator of this library (``BayesianTreeClassifier`` / ``Regressor``,
        ``BARTRegressor``, ``BARTClassifier`` (two or more classes), ``BARTPoissonRegressor``
        (expected count at exposure 1), ``BARTSurvival`` (median survival time)).
    X : (n, F) array or DataFrame, the rows the dependence is averaged over (the training rows, or
        a sample of them).
    features : a column (index or name) or a pair of them.
    grid_resolution : int, default 20
        Most grid points of a numeric feature: quantiles of its values in ``X`` between ``percentiles``.
    grid : (G,) values, or one per feature of a pair; None: from ``X``.  A categorical feature's
        grid is every level seen in ``X``.
    categorical : None, or a bool per feature in ``features``: None takes the fit's categorical
        features (or a DataFrame's category / object / bool columns).
    prob : float, default 0.9
        Mass of the credible bands.
    ice, ice_band : bool
        Keep every row's ICE curve (posterior mean; ``(n, *G, K)``), and its credible band.
    response : None (the prediction draws of ``est``, as ``bdtree_jax.inspection._response.response_of`` gives them)
        or a ``Response`` of the same estimator to average instead.

    Returns
    -------
    :class:`PartialDependence` (shapes there).
    """
    where = "partial_dependence: "
    percentiles = _check_options(grid_resolution, percentiles, prob, where)
    response = response_of(est, where) if response is None else response
    X = est._check_predict_X(X)
    if not isinstance(X, pd.DataFrame):
        X = np.asarray(X)
    if X.ndim != 2 or X.shape[0] == 0:
        raise ValueError(f"{where}X must be 2-D with at least one row; got shape {X.shape}.")
    names = _names(est, X)
    feats = list(features) if isinstance(features, (list, tuple)) else [features]
    if not 1 <= len(feats) <= 2:
        raise ValueError(f"{where}features must be one feature or a pair; got {len(feats)}.")
    idx = [feature_index(f, names, where) for f in feats]
    if len(set(idx)) != len(idx):
        raise ValueError(f"{where}features: the pair names the same feature twice ({feats}).")
    cat_all = categorical_columns(est, X, names)
    if categorical is None:
        cats = [bool(cat_all[j]) for j in idx]
    else:
        cats = [bool(c) for c in np.atleast_1d(categorical)]
        if len(cats) != len(idx):
            raise ValueError(f"{where}categorical needs one bool per feature ({len(idx)}); got {categorical!r}.")
    if grid is None:
        grids = [_grid_of(_column(X, j), c, int(grid_resolution), percentiles, where) for j, c in zip(idx, cats)]
    else:
        grids = [np.asarray(g) for g in ([grid] if len(idx) == 1 else list(grid))]
        if len(grids) != len(idx) or any(g.ndim != 1 or len(g) == 0 for g in grids):
            raise ValueError(f"{where}grid must be one non-empty 1-D array per feature ({len(idx)}).")
    shape = tuple(len(g) for g in grids)
    n, G, K, D = X.shape[0], int(np.prod(shape)), len(response.outputs), response.num_draws
    lo_q, hi_q = (1 - prob) / 2, (1 + prob) / 2

    def make_rows(k):
        g, rows = np.unravel_index(k // n, shape), k % n
        out = take_rows(X, rows)
        for j, grid_j, g_j in zip(idx, grids, g):
            out = set_column(out, j, grid_j[g_j])
        return out

    sums = np.zeros((D, G, K))
    ice_mean = np.empty((G, n, K)) if ice else None
    ice_lo, ice_hi = (np.empty((G, n, K)), np.empty((G, n, K))) if ice and ice_band else (None, None)
    for s, e, vals in stacked_draws(response, make_rows, G * n):
        k = np.arange(s, e)
        g, i = k // n, k % n
        starts = np.flatnonzero(np.r_[True, g[1:] != g[:-1]])
        sums[:, g[starts]] += np.add.reduceat(vals, starts, axis=1)
        if ice:
            ice_mean[g, i] = vals.mean(0)
        if ice_lo is not None:
            ice_lo[g, i], ice_hi[g, i] = np.quantile(vals, [lo_q, hi_q], axis=0)
    draws = (sums / n).reshape((D,) + shape + (K,))
    lower, upper = np.quantile(draws, [lo_q, hi_q], axis=0)

    def per_row(a):
        return None if a is None else np.moveaxis(a, 1, 0).reshape((n,) + shape + (K,))

    return PartialDependence(features=tuple(names[j] for j in idx), feature_indices=tuple(idx), grid=tuple(grids),
                             categorical=tuple(cats), outputs=response.outputs, response=response.name,
                             prob=float(prob), draws=draws, mean=draws.mean(0), lower=lower, upper=upper,
                             ice_mean=per_row(ice_mean), ice_lower=per_row(ice_lo), ice_upper=per_row(ice_hi))
