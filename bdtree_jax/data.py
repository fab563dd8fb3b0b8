"""Input validation, split candidates, feature codes and the device-side data container.

Everything here runs on the host, once, before anything is traced: jitted code assumes valid
input.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import warnings

import numpy as np
import pandas as pd
import scipy.sparse as sp
from sklearn.exceptions import DataConversionWarning
from sklearn.utils.multiclass import type_of_target

from ._types import Array

__all__ = [
    "TreeData",
    "SplitGrid",
    "make_split_grid",
    "cut_cumwidth",
    "code_features",
    "SPLIT_PRIORS",
    "VALID_CUTS",
    "check_X",
    "check_classification_y",
    "check_regression_y",
]


class TreeData(NamedTuple):
    """Training data as the kernels see it (a pytree of arrays; pass it, never close over it).

    Attributes
    ----------
    bins : (n, F) int32
        Bin code of each input: the number of the feature's candidate thresholds strictly below
        the value.  Row ``i`` goes left at cut ``c`` of feature ``f`` iff ``bins[i, f] <= c``.
    point_stats : (n, S) float32
        Per-row sufficient statistics of the likelihood (one-hot class, or ``[1, y, y**2]``).
    sorted_bins : (F, n) int32
        Each feature's bins sorted ascending (order statistics for ``min_leaf_size > 1``).
    sorted_index : (F, n) int32
        The row permutation that sorts each feature.
    split_prob : (N,) float32 or PinballTables
        The prior's split probability ``alpha (1 + d)**-beta`` of every heap slot, 0 at
        ``max_depth`` (numbers, not structure: changing alpha or beta does not recompile).  With
        ``structure="pinball"`` the pinball prior's tables instead
        (:class:`~bdtree_jax.priors.PinballTables`: ``log p_size`` and the shape law's two
        separable parts, each (L + 1,) with ``L = 2**max_depth``, and the slots above
        ``max_depth``), whose type
        selects that prior in :func:`~bdtree_jax.priors.log_tree_prior`; their shapes depend only
        on ``max_depth``, so other ``pinball_rate``, ``pinball_balance`` or ``pinball_max_leaves``
        reuse the compiled programs.
    likelihood : DirichletMultinomial or NormalMeanShift (a pytree; see
        :mod:`bdtree_jax.likelihoods`).
    cut_cumwidth : (F, C + 2) float32
        Cumulative weights of the cuts under the prior's ``split_prior``
        (:func:`cut_cumwidth`): ``cut_cumwidth[f, c] = sum of w_f[c'] over c' < c``, where
        ``C`` is the number of cut slots (``n_bins = C + 1`` bin codes).  The rule prior draws
        cut ``c`` of feature ``f`` in a node with valid cuts ``[lo, hi)`` with probability
        ``w_f[c] / (cut_cumwidth[f, hi] - cut_cumwidth[f, lo])``: ``w = 1`` ("uniform", the
        table is ``arange``) or the gap's width in the feature's units ("range").
    box_side : (K, F, C) int8 or None
        Box constraints of the prior (:func:`bdtree_jax.priors.box_sides`): for box ``k`` and the
        cut ``c`` of feature ``f``, 0 if the box lies left of the cut, 1 right, 2 if the cut goes
        through it (a tree with that rule at a node holding the box has prior 0).
    bin_onehot : (n, F, B) int32 or None
        ``bin_onehot[i, f, b] = 1`` iff ``bins[i, f] == b``, kept when ``min_leaf_size > 1`` and
        every feature has few bins (``B <= 64``): per-node bin histograms then give the order
        statistics of :func:`bdtree_jax.priors.level_bounds` without sorting.
    bin_bits : (W, F, B) uint32 or None
        ``W = ceil(n / 32)`` words of row bits per feature and bin: bit ``i // W`` of word
        ``i % W`` of ``bin_bits[:, f, b]`` is set iff ``bins[i, f] == b``.  Kept when
        ``min_leaf_size == 1`` under ``valid_cuts="data"`` and every feature has at most
        :data:`MAX_BITSET_BINS` bins (then it is about the size of ``bins`` or smaller): a grow's
        children's valid cuts are then read from ``F * B`` bitwise ANDs of ``W`` words instead of
        a masked min and max over every row and feature (:func:`bdtree_jax.priors.child_bounds`).
    cut_count : (F,) int32 or None
        With the prior's ``valid_cuts="ancestors"`` (BART's rule availability; see
        :mod:`bdtree_jax.priors`) the number of candidate cuts of every feature: the root's valid
        cuts are ``[0, cut_count)`` and a node's follow from its ancestors' rules alone.  None
        (``valid_cuts="data"``, CGM98): a node's valid cuts are those that split its rows.  Its
        presence selects the rule at trace time, as the pinball tables do.
    """

    bins: Array
    point_stats: Array
    sorted_bins: Array
    sorted_index: Array
    split_prob: Array
    likelihood: object
    cut_cumwidth: Array
    box_side: Array | None = None
    bin_onehot: Array | None = None
    cut_count: Array | None = None
    bin_bits: Array | None = None


#: Largest number of bins per feature for which :class:`TreeData` keeps ``bin_onehot``.
MAX_HISTOGRAM_BINS = 64
#: Largest number of bins per feature for which :class:`TreeData` keeps ``bin_bits``.
MAX_BITSET_BINS = 32


@dataclass(frozen=True, eq=False)
class SplitGrid:
    """Candidate split thresholds of every feature.

    Attributes
    ----------
    thresholds : (F, C) float64
        Midpoints between consecutive distinct training values of each feature (all of them, or
        ``max_cuts`` at quantiles: :func:`make_split_grid`), ascending, padded with ``+inf`` to
        the largest count ``C`` (at least 1).
    n_cuts : (F,) int64
        Number of real candidates per feature (0 for a constant feature).
    widths : (F, C) float64 or None
        Width ``u_{c+1} - u_c`` of the gap between the two consecutive distinct training values
        that cut ``c`` separates (0 for the padding); the ``"range"`` split prior weights cuts by
        it (:func:`cut_cumwidth`).
    """

    thresholds: np.ndarray
    n_cuts: np.ndarray
    widths: np.ndarray | None = None

    @property
    def n_features(self) -> int:
        return self.thresholds.shape[0]

    def bin(self, X: np.ndarray) -> np.ndarray:
        """Bin codes (n, F) int32 of inputs ``X`` (n, F): count of thresholds strictly below."""
        X = np.asarray(X, float)
        out = np.empty(X.shape, np.int32)
        for f in range(self.n_features):
            out[:, f] = np.searchsorted(self.thresholds[f, : self.n_cuts[f]], X[:, f], side="left")
        return out


def check_max_cuts(max_cuts, where: str = "") -> None:
    """Refuse a ``max_cuts`` that is not a positive integer or None (``where`` prefixes the message)."""
    if max_cuts is not None and (not isinstance(max_cuts, (int, np.integer)) or isinstance(max_cuts, bool)
                                 or max_cuts < 1):
        raise ValueError(f"{where}max_cuts must be a positive integer or None; got {max_cuts!r}.")


def make_split_grid(X: np.ndarray, max_cuts: int | None = None) -> SplitGrid:
    """Split candidates: midpoints between consecutive distinct values of each column of X.

    With ``max_cuts``, a feature with more than ``max_cuts`` such midpoints keeps ``max_cuts`` of
    them, at evenly spaced quantiles of its distinct values (as BART software does: bartz's
    ``UniqueQuantileBinner``, BART's ``usequants``), so its distinct values fall into
    ``max_cuts + 1`` groups of nearly equal counts.  A kept cut's ``widths`` entry is then the
    length of the stretch of the axis it stands for (half-way to its neighbouring kept cuts, the
    data's range at the ends), so the ``"range"`` split prior still weighs cuts by length.
    """
    check_max_cuts(max_cuts)
    X = np.asarray(X, float)
    values = [np.unique(X[:, f]) for f in range(X.shape[1])]
    cuts, gaps = [], []
    for u in values:
        mid, gap = (u[:-1] + u[1:]) / 2.0, np.diff(u)
        if max_cuts is not None and len(mid) > max_cuts:
            # gap g separates u[g] and u[g + 1]: keep the gaps closing groups j = 1..max_cuts of
            # s = len(u) / (max_cuts + 1) > 1 distinct values each (s > 1, so the rounded indices
            # are distinct and lie in 0..len(mid) - 1)
            keep = np.round(np.arange(1, max_cuts + 1) * len(u) / (max_cuts + 1)).astype(int) - 1
            mid = mid[keep]
            edges = np.concatenate([[u[0]], (mid[:-1] + mid[1:]) / 2.0, [u[-1]]])
            gap = np.diff(edges)
        cuts.append(mid)
        gaps.append(gap)
    n_cuts = np.array([len(c) for c in cuts])
    width = max(1, int(n_cuts.max(initial=0)))
    thresholds = np.full((X.shape[1], width), np.inf)
    widths = np.zeros((X.shape[1], width))
    for f, (c, g) in enumerate(zip(cuts, gaps)):
        thresholds[f, : len(c)] = c
        widths[f, : len(g)] = g
    return SplitGrid(thresholds, n_cuts, widths)


SPLIT_PRIORS = ("uniform", "range")
#: Where a node's valid cuts come from: the rows it holds (CGM98) or its ancestors' rules (BART).
VALID_CUTS = ("data", "ancestors")


def cut_cumwidth(split_prior: str, n_features: int, n_slots: int, widths: np.ndarray | None = None) -> np.ndarray:
    """(F, n_slots + 2) float32 cumulative cut weights of :class:`TreeData` (see there).

    ``"uniform"``: every cut weighs 1 (the table is ``arange``, exact in float32).  ``"range"``:
    cut ``c`` of feature ``f`` weighs its gap width ``widths[f, c]`` (:class:`SplitGrid`),
    normalised by the feature's range so every row ends at 1; padded cuts weigh 0.  A gap
    narrower than float32 resolves (about ``1e-7`` of the range) is widened to one unit in the
    last place, so every real cut keeps a positive probability.
    """
    if split_prior not in SPLIT_PRIORS:
        raise ValueError(f"split_prior must be one of {SPLIT_PRIORS}; got {split_prior!r}.")
    if split_prior == "uniform":
        return np.broadcast_to(np.arange(n_slots + 2, dtype=np.float32), (n_features, n_slots + 2)).copy()
    if widths is None:
        raise ValueError("split_prior='range' needs the cut widths of the split grid (make_tree_data(..., grid=)).")
    w = np.zeros((n_features, n_slots + 1))
    w[:, : widths.shape[1]] = np.asarray(widths, float)
    total = w.sum(1, keepdims=True)
    w = w / np.where(total > 0, total, 1.0)
    cum = np.zeros((n_features, n_slots + 2))
    cum[:, 1:] = np.cumsum(w, axis=1)
    cum = cum.astype(np.float32)
    if np.any((w > 0) & (cum[:, 1:] <= cum[:, :-1])):  # a real gap (w > 0) must stay > 0 after rounding
        for c in range(n_slots + 1):
            up = np.maximum(cum[:, c + 1], np.nextafter(cum[:, c], np.float32(np.inf)))
            cum[:, c + 1] = np.where(w[:, c] > 0, up, cum[:, c])
    return cum


def code_features(X: np.ndarray, n_buckets=None) -> tuple[np.ndarray, list[np.ndarray]]:
    """Integer codes of every feature and, per feature, the raw cut index of each code boundary.

    Parameters
    ----------
    X : (n, F) float array of training inputs.
    n_buckets : None, int or sequence of F ints.  A feature with more distinct values than its
        bucket count is cut into that many equal-width buckets between its smallest and largest
        training value (buckets without rows are dropped, so gaps in the data stay gaps); others
        keep one code per distinct value.  ``None``: no bucketing.

    Returns
    -------
    codes : (n, F) int32, ``0 .. B_f - 1`` per feature, increasing with the value.
    boundary_cut : list of F arrays of length ``B_f - 1``: the split "code ``<= t``" equals the
        split ``x_f <= thresholds[f, boundary_cut[f][t]]`` of :func:`make_split_grid` on the
        same ``X`` (the midpoint between the last value of bucket ``t`` and the first of
        bucket ``t + 1``).
    """
    X = np.asarray(X, float)
    n, F = X.shape
    if n_buckets is None or np.isscalar(n_buckets):
        buckets = [n_buckets] * F
    else:
        buckets = list(n_buckets)
    codes = np.empty((n, F), np.int32)
    boundary_cut = []
    for f in range(F):
        u, rank = np.unique(X[:, f], return_inverse=True)
        b = buckets[f]
        if b is not None and len(u) > b:
            edges = np.linspace(u[0], u[-1], b + 1)[1:-1]
            raw = np.searchsorted(edges, X[:, f], side="right")
            _, code = np.unique(raw, return_inverse=True)
        else:
            code = rank
        code = code.astype(np.int32).ravel()
        codes[:, f] = code
        n_codes = int(code.max()) + 1
        # largest raw rank inside each code = the raw cut between this code and the next
        last_rank = np.full(n_codes, -1)
        np.maximum.at(last_rank, code, rank.ravel())
        boundary_cut.append(last_rank[:-1].astype(np.int32))
    return codes, boundary_cut


# ----------------------------------------------------------------------------------------------
# Validation at the public edge


class NonNumericInputError(ValueError, TypeError):
    """Input that cannot be read as numbers: a ``ValueError`` like every other bad input, and a
    ``TypeError`` as scikit-learn's validation raises for it."""


def check_X(X, *, name: str = "X", estimator: str = "", min_rows: int = 1):
    """Validate a feature matrix.

    Returns
    -------
    X : (n, F) float64 ndarray
    feature_names : list of str or None (from a DataFrame's columns)

    Raises
    ------
    ValueError
        Non-numeric columns, wrong dimension, NaN or infinite values, too few rows.
    """
    where = f"{estimator}: " if estimator else ""
    feature_names = None
    if X is None:
        raise ValueError(f"{where}{name} is None; expected an array-like of shape (n_samples, n_features).")
    if sp.issparse(X):
        raise ValueError(
            f"{where}sparse data was passed for {name}, but dense data is required; use X.toarray()."
        )
    if isinstance(X, pd.DataFrame):
        bad = [str(c) for c in X.columns if not pd.api.types.is_numeric_dtype(X[c]) or pd.api.types.is_bool_dtype(X[c])]
        if bad:
            raise ValueError(
                f"{where}{name} has non-numeric columns {bad}; encode them as numbers first "
                "(e.g. pandas.get_dummies or an OrdinalEncoder)."
            )
        feature_names = [str(c) for c in X.columns]
        X = X.to_numpy(dtype=float)
    else:
        arr = np.asarray(X)
        if arr.dtype.kind == "c":
            raise ValueError(f"{where}Complex data not supported in {name}.")
        if arr.dtype.kind not in "biuf":
            try:
                arr = arr.astype(float)
            except (TypeError, ValueError) as exc:
                raise NonNumericInputError(
                    f"{where}{name} must be numeric; got an array of dtype {arr.dtype} with "
                    f"values that are not numbers ({exc})."
                ) from None
        X = arr.astype(float)
    if X.ndim == 1:
        raise ValueError(
            f"{where}{name} must be 2-D of shape (n_samples, n_features); got a 1-D array of "
            f"length {X.shape[0]}. Reshape your data with X.reshape(-1, 1) for a single feature."
        )
    if X.ndim != 2:
        raise ValueError(f"{where}{name} must be 2-D of shape (n_samples, n_features); got shape {X.shape}.")
    if X.shape[1] < 1:
        raise ValueError(
            f"{where}{name} has 0 feature(s) (shape=({X.shape[0]}, 0)) while a minimum of 1 is required."
        )
    if X.shape[0] < min_rows:
        raise ValueError(
            f"{where}{name} has n_samples={X.shape[0]}; at least {min_rows} are needed."
        )
    if not np.all(np.isfinite(X)):
        n_nan = int(np.isnan(X).sum())
        n_inf = int(np.isinf(X).sum())
        raise ValueError(
            f"{where}{name} contains {n_nan} NaN and {n_inf} infinite values; impute or drop them first."
        )
    return X, feature_names


def _as_1d(y, name: str, where: str, n: int) -> np.ndarray:
    if y is None:
        raise ValueError(f"{where}requires y to be passed, but the target y is None.")
    if isinstance(y, (pd.Series, pd.DataFrame)):
        y = y.to_numpy()
    y = np.asarray(y)
    if y.ndim == 2 and y.shape[1] == 1:
        warnings.warn(
            f"A column-vector {name} was passed when a 1d array was expected. Please change the shape "
            f"of {name} to (n_samples,), for example using ravel().",
            DataConversionWarning,
            stacklevel=4,
        )
        y = y[:, 0]
    if y.ndim != 1:
        raise ValueError(f"{where}{name} must be 1-D of shape (n_samples,); got shape {y.shape}.")
    if y.shape[0] != n:
        raise ValueError(f"{where}X has {n} rows but {name} has {y.shape[0]} entries; they must match.")
    return y


def check_classification_y(y, n: int, *, name: str = "y", estimator: str = ""):
    """Validate class labels; returns ``(classes, codes)`` with codes in ``0..K-1``.

    Raises ``ValueError`` for wrong shape or length, missing values, or a single class.
    """
    where = f"{estimator}: " if estimator else ""
    y = _as_1d(y, name, where, n)
    if pd.isna(y).any():
        raise ValueError(f"{where}{name} contains missing values (NaN/None).")
    if y.dtype.kind == "f" and not np.all(np.isfinite(y)):
        raise ValueError(f"{where}{name} contains infinite values.")
    kind = type_of_target(y)
    if kind not in ("binary", "multiclass"):
        raise ValueError(
            f"{where}Unknown label type: {kind}. {name} must hold class labels; for a real response "
            "use BayesianTreeRegressor / task='regression'."
        )
    classes, codes = np.unique(y, return_inverse=True)
    if len(classes) < 2:
        raise ValueError(
            f"{where}{name} has only one class ({classes[0]!r}); a classifier needs at least 2."
        )
    return classes, codes.astype(np.int32)


def check_regression_y(y, n: int, *, name: str = "y", estimator: str = "") -> np.ndarray:
    """Validate a real response; returns (n,) float64.  Raises ``ValueError`` on NaN/inf."""
    where = f"{estimator}: " if estimator else ""
    y = _as_1d(y, name, where, n)
    try:
        y = y.astype(float)
    except (TypeError, ValueError):
        raise ValueError(f"{where}{name} must be numeric for regression; got dtype {y.dtype}.") from None
    if not np.all(np.isfinite(y)):
        raise ValueError(f"{where}{name} contains NaN or infinite values.")
    return y
