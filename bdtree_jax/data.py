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
from sklearn.exceptions import DataConversionWarning
from sklearn.utils.multiclass import type_of_target

from ._types import Array
from .features import NonNumericInputError, read_table
from .tree import MISSING_CODE
from ._validate import check_one_of, is_int

__all__ = [
    "TreeData",
    "SplitGrid",
    "MissingValueRoutingWarning",
    "make_split_grid",
    "cut_cumwidth",
    "code_features",
    "SPLIT_PRIORS",
    "VALID_CUTS",
    "check_X",
    "NonNumericInputError",
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
    level_masks : (F, W) uint32 or None
        Every level of each categorical feature as a bit mask (bit ``l % 32`` of word ``l // 32``;
        zeros for ordered features); None when every feature is ordered
        (docs/categorical-missing.md).  A categorical feature's codes are its level indices, and a
        rule on it is the tree's ``levels_left`` mask of ``W`` words.
    missing_code : () int32 or None
        The code of a missing value (:data:`bdtree_jax.tree.MISSING_CODE`) when the model carries
        missing-value bits (the tree's ``nan_left``); None otherwise.
    box_levels : (K, F, W) uint32 or None
        With box constraints and a categorical feature, each box's levels of every categorical
        feature (:func:`bdtree_jax.priors.boxes.box_level_masks`; all levels where the box does
        not name the feature, 0 for ordered features); None otherwise.
    feature_log_weight : (F,) float32 or None
        Log weights of the features in the rule prior (DART's split probabilities ``log s``,
        :mod:`bdtree_jax.kernels.dart`): a rule's feature is drawn with probability
        ``s_f / sum of s_k over the node's available features``.  None (the default): uniform
        over the available features, the code path of every sampler without ``sparse=True``.
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
    level_masks: Array | None = None
    missing_code: Array | None = None
    box_levels: Array | None = None
    feature_log_weight: Array | None = None


#: Largest number of bins per feature for which :class:`TreeData` keeps ``bin_onehot``.
MAX_HISTOGRAM_BINS = 64
#: Largest number of bins per feature for which :class:`TreeData` keeps ``bin_bits``.
MAX_BITSET_BINS = 32


@dataclass(frozen=True, eq=False)
class SplitGrid:
    """Candidate split thresholds of every feature, and how inputs become codes (docs/categorical-missing.md).

    Attributes
    ----------
    thresholds : (F, C) float64
        Midpoints between consecutive distinct training values of each feature (all of them, or
        ``max_cuts`` at quantiles: :func:`make_split_grid`), ascending, padded with ``+inf`` to
        the largest count ``C`` (at least 1).  A categorical feature has none.
    n_cuts : (F,) int64
        Number of real candidates per feature (0 for a constant or categorical feature).
    widths : (F, C) float64 or None
        Width ``u_{c+1} - u_c`` of the gap between the two consecutive distinct training values
        that cut ``c`` separates (0 for the padding); the ``"range"`` split prior weights cuts by
        it (:func:`cut_cumwidth`).
    level_count : (F,) int64
        Number of levels of a categorical feature, 0 for an ordered one.
    levels : tuple of F entries
        A categorical feature's level labels ((L,) object array; its codes are their indices),
        None for an ordered feature.  Prediction encodes new tables with them
        (:meth:`encode`).
    missing_code : int or None
        The code of a missing value (and of a level unseen at fit):
        :data:`~bdtree_jax.tree.MISSING_CODE`, larger than any other code.  None when the model
        carries no missing-value bits (training data without a missing cell and without a
        categorical feature): a missing value is then an error.
    train_missing : (F,) bool or None
        Which features had a missing cell in the training data (:func:`make_split_grid`); None:
        not recorded (grids made before it existed).  :meth:`warn_unseen_missing` (called by the
        posteriors' predictions) warns :class:`MissingValueRoutingWarning` when new rows have a
        missing value, or an unseen level, in a feature without one in training: the
        missing-value bits of its rules saw only their prior.
    """

    thresholds: np.ndarray
    n_cuts: np.ndarray
    widths: np.ndarray | None = None
    level_count: np.ndarray | None = None
    levels: tuple | None = None
    missing_code: int | None = None
    train_missing: np.ndarray | None = None

    def __post_init__(self):
        self._fill_defaults(self.__dict__)

    def __setstate__(self, state):  # pickles of grids made before these fields existed
        self._fill_defaults(state)
        self.__dict__.update(state)

    @staticmethod
    def _fill_defaults(state: dict) -> None:
        F = np.asarray(state["thresholds"]).shape[0]
        if state.get("levels") is None:
            state["levels"] = (None,) * F
        state["levels"] = tuple(state["levels"])
        if state.get("level_count") is None:
            state["level_count"] = np.array([0 if lv is None else len(lv) for lv in state["levels"]], np.int64)
        state.setdefault("missing_code", None)
        state.setdefault("train_missing", None)

    @property
    def n_features(self) -> int:
        return self.thresholds.shape[0]

    @property
    def categorical(self) -> np.ndarray:
        """(F,) bool: which features are categorical."""
        return np.array([lv is not None for lv in self.levels], bool)

    def bin(self, X: np.ndarray) -> np.ndarray:
        """Codes (n, F) int32 of encoded inputs ``X`` (n, F) float (:meth:`encode`): an ordered
        feature's bin (count of thresholds strictly below the value), a categorical feature's
        level index, ``missing_code`` for NaN (and for a categorical value that is not a level
        index); NaN without a ``missing_code`` is a ``ValueError``."""
        X = np.asarray(X, float)
        out = np.empty(X.shape, np.int32)
        has_nan = np.isnan(X).any(0)
        for f in range(self.n_features):
            col, lv = X[:, f], self.levels[f]
            if lv is None:
                out[:, f] = np.searchsorted(self.thresholds[f, : self.n_cuts[f]], col, side="left")
                if not has_nan[f]:
                    continue
                missing = np.isnan(col)
            else:
                with np.errstate(invalid="ignore"):
                    missing = ~((col >= 0) & (col < len(lv)) & (col == np.floor(col)))
                out[:, f] = np.where(missing, 0, np.nan_to_num(col)).astype(np.int32)
            if missing.any():
                if self.missing_code is None:
                    raise ValueError(f"X has missing values (NaN) in column {f}, but the model saw no missing values "
                                     "in training (and has no categorical feature); impute them.")
                out[missing, f] = self.missing_code
        return out

    def warn_unseen_missing(self, codes: np.ndarray, feature_names=None, stacklevel: int = 3) -> None:
        """Warn :class:`MissingValueRoutingWarning` naming the features (``feature_names``: the F
        names; default ``x0, x1, ...``) in which codes (n, F) of new rows hold the missing code
        although the training data had no missing cell there (:attr:`train_missing`; nothing when
        it is None or there is no missing code)."""
        if self.missing_code is None or self.train_missing is None:
            return
        counts = np.sum(np.asarray(codes) == self.missing_code, axis=0)
        unseen = [(f, int(counts[f])) for f in range(self.n_features) if counts[f] and not self.train_missing[f]]
        if unseen:
            _warn_unseen_missing(unseen, feature_names, len(codes), stacklevel + 1)

    def encode(self, X, *, feature_names=None, name: str = "X", estimator: str = "") -> np.ndarray:
        """New rows ``X`` (a table like the training one) as the (n, F) float matrix :meth:`bin`
        reads: categorical columns through the levels of the fit (an unseen level is missing),
        missing cells as NaN (a ``ValueError`` naming the column when ``missing_code`` is None);
        ``feature_names``: the names a DataFrame's columns must have."""
        X, _ = check_X(X, name=name, estimator=estimator, grid=self, feature_names=feature_names)
        return X

    def codes(self, X, *, feature_names=None, name: str = "X", estimator: str = "") -> np.ndarray:
        """``bin(encode(X))``: the (n, F) int32 codes of new rows."""
        return self.bin(self.encode(X, feature_names=feature_names, name=name, estimator=estimator))


class MissingValueRoutingWarning(UserWarning):
    """New rows have missing values (or unseen levels) in a feature that had no missing cell in
    training: each rule on that feature sends them the way of its missing-value bit, which no
    training row informed (a draw of its prior, left or right with probability 1/2 each), so the
    prediction there averages both sides over the posterior's trees
    (docs/categorical-missing.md)."""


def _warn_unseen_missing(unseen: list, feature_names, n_rows: int, stacklevel: int) -> None:
    import warnings

    names = [str(feature_names[f]) if feature_names is not None else f"x{f}" for f, _ in unseen]
    counts = ", ".join(f"{name!r} ({k} of {n_rows} rows)" for name, (_, k) in zip(names, unseen))
    warnings.warn(
        f"X has missing values (or levels unseen at fit) in feature(s) {counts} that had no missing value in "
        "training: the rules on them route these rows by missing-value bits that only their prior informed "
        "(left or right with probability 1/2 each), so predictions there average both sides of each such rule. "
        "Impute them, or fit on data with missing cells in these features.",
        MissingValueRoutingWarning, stacklevel=stacklevel)


def check_max_cuts(max_cuts, where: str = "") -> None:
    """Refuse a ``max_cuts`` that is not a positive integer or None (``where`` prefixes the message)."""
    if max_cuts is not None and (not is_int(max_cuts)
                                 or max_cuts < 1):
        raise ValueError(f"{where}max_cuts must be a positive integer or None; got {max_cuts!r}.")


def make_split_grid(X: np.ndarray, max_cuts: int | None = None, levels=None) -> SplitGrid:
    """Split candidates: midpoints between consecutive distinct values of each column of X.

    With ``max_cuts``, a feature with more than ``max_cuts`` such midpoints keeps ``max_cuts`` of
    them, at evenly spaced quantiles of its distinct values (as BART software does: bartz's
    ``UniqueQuantileBinner``, BART's ``usequants``), so its distinct values fall into
    ``max_cuts + 1`` groups of nearly equal counts.  A kept cut's ``widths`` entry is then the
    length of the stretch of the axis it stands for (half-way to its neighbouring kept cuts, the
    data's range at the ends), so the ``"range"`` split prior still weighs cuts by length.

    ``X`` is encoded (:func:`check_X`): NaN marks a missing cell, which no threshold counts.
    ``levels`` (per feature, None for an ordered one; default all ordered) are the categorical
    features' level labels: such a feature has no thresholds.  The grid has a ``missing_code``
    when ``X`` has a missing cell or a feature is categorical.
    """
    check_max_cuts(max_cuts)
    X = np.asarray(X, float)
    levels = (None,) * X.shape[1] if levels is None else tuple(levels)
    if len(levels) != X.shape[1]:
        raise ValueError(f"levels has {len(levels)} entries; X has {X.shape[1]} features.")
    has_nan = bool(np.isnan(X).any())
    values = []
    for f in range(X.shape[1]):
        col = X[:, f]
        values.append(np.empty(0) if levels[f] is not None else np.unique(col[~np.isnan(col)] if has_nan else col))
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
    level_count = np.array([0 if lv is None else len(lv) for lv in levels], np.int64)
    missing_code = MISSING_CODE if has_nan or any(lv is not None for lv in levels) else None
    train_missing = np.isnan(X).any(0) if X.shape[0] else np.zeros(X.shape[1], bool)
    return SplitGrid(thresholds, n_cuts, widths, level_count, levels, missing_code, train_missing)


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
    check_one_of("split_prior", split_prior, SPLIT_PRIORS)
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


def check_X(X, *, name: str = "X", estimator: str = "", min_rows: int = 1, categorical_features=None,
            missing: str = "error", grid: SplitGrid | None = None, feature_names=None, return_levels: bool = False):
    """Validate a feature matrix (:func:`~bdtree_jax.features.read_table`).

    By default every column must be numeric and finite, as the methods without categorical and
    missing-value support need.  At fit, ``categorical_features`` ("from_dtype", indices, names or
    a boolean mask) and ``missing="mia"`` accept categorical columns and missing cells
    (docs/categorical-missing.md); ``return_levels`` also returns the categorical features' levels.
    At prediction, ``grid`` (the fit's :class:`SplitGrid`) encodes categorical columns with its
    levels and allows missing cells iff it has a ``missing_code``; a DataFrame's columns must then
    be ``feature_names`` when given.

    Returns
    -------
    X : (n, F) float64 ndarray (categorical features: level indices; NaN: a missing cell)
    feature_names : list of str or None (from a DataFrame's columns)
    levels : (with ``return_levels``) per feature, its level labels or None (ordered).

    Raises
    ------
    ValueError
        Non-numeric columns that are not categorical, wrong dimension, missing cells (unless
        allowed) or infinite values, too few rows, more than 64 levels, unknown
        ``categorical_features``.
    """
    if grid is not None:
        table = read_table(X, missing="error" if grid.missing_code is None else "mia", levels=grid.levels,
                           feature_names=feature_names, name=name, estimator=estimator, min_rows=min_rows)
    else:
        table = read_table(X, categorical_features=categorical_features, missing=missing, name=name,
                           estimator=estimator, min_rows=min_rows)
    if return_levels:
        return table.X, table.feature_names, table.levels
    return table.X, table.feature_names


def _as_1d(y, name: str, where: str, n: int) -> np.ndarray:
    if y is None:
        raise ValueError(f"{where}requires y to be passed, but the target y is None.")
    if isinstance(y, (pd.Series, pd.DataFrame)):
        y = y.to_numpy()
    try:
        y = np.asarray(y)
    except ValueError:  # nested sequences of different lengths
        raise ValueError(f"{where}{name} must be 1-D of shape (n_samples,); it has nested sequences of different "
                         "lengths.") from None
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
    if y.dtype.kind == "c":
        raise ValueError(f"{where}Complex data not supported in {name}.")
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
    if y.dtype.kind in "cmM":  # complex, timedelta, datetime: astype(float) would drop or reinterpret them
        raise ValueError(f"{where}{name} must be real numbers for regression; got dtype {y.dtype}.")
    try:
        y = y.astype(float)
    except (TypeError, ValueError, OverflowError):
        raise ValueError(f"{where}{name} must be numeric for regression (real numbers within the float range); "
                         f"got dtype {y.dtype}.") from None
    if not np.all(np.isfinite(y)):
        raise ValueError(f"{where}{name} contains NaN or infinite values.")
    # the models standardise y in float64, but predictions, leaf values and sigma come back in
    # y's units as float32
    big, tiny = float(np.finfo(np.float32).max), float(np.finfo(np.float32).tiny)
    top = float(np.max(np.abs(y))) if y.size else 0.0
    if top > big or 0.0 < top < tiny:
        raise ValueError(f"{where}{name} has values of magnitude up to {top:.3g}, outside float32's range of normal "
                         f"numbers [{tiny:.3g}, {big:.3g}] in which predictions are returned; rescale {name}.")
    return y
