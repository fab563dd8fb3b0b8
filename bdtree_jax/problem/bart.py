"""BART's problem: what one fit of a sum of trees samples, built once from ``(X, y)``.

:func:`build_bart_problem` (a real response) and :func:`build_bart_probit_problem` (two classes)
validate ``X`` and ``y``, bin ``X`` once on its split grid, calibrate the prior (Chipman, George &
McCulloch 2010) and return a frozen :class:`BARTProblem`: the arrays a sweep reads
(:class:`BARTData`, for :mod:`bdtree_jax.kernels.bart`) together with what the posterior needs to
predict and report (grid, tree prior, the response's scale, the calibrated hyperparameters).

Continuous outcome: ``y`` rescaled to ``[-0.5, 0.5]`` by its min and max, leaf values
``mu ~ N(0, tau2)`` with ``tau = 0.5 / (k sqrt(M))``, ``sigma2 ~ nu lam / chi2_nu`` with ``lam``
such that ``P(sigma < sigma_hat) = q`` (:func:`default_hyperparameters`).  Binary outcome (probit):
``sigma = 1``, ``tau = 3 / (k sqrt(M))``, the latent's mean offset ``Phi^-1(mean(y))``
(:func:`probit_offset`) unless given.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .._types import Array
from ..data import SplitGrid, TreeData, check_classification_y, check_regression_y, check_X, make_split_grid
from ..features import check_supported
from ..likelihoods import BARTLeafNormal
from ..priors import TreePrior, make_tree_data
from ..priors.tree_data import to_device

__all__ = ["MAX_CUTS", "BARTData", "BARTProblem", "build_bart_probit_problem", "build_bart_problem", "build_tree_site_problem",
           "default_hyperparameters", "feature_bins", "linear_design", "probit_offset"]

MAX_CUTS = 255  # default candidate cuts per feature: bartz's grid (UniqueQuantileBinner, max_bins=256)


class BARTData(NamedTuple):
    """What a sweep reads (a pytree of arrays; pass it, never close over it).

    tree_data : TreeData of the inputs; its ``likelihood`` is a :class:`BARTLeafNormal` carrying
        ``tau2`` (its ``sigma2`` and ``point_stats`` are replaced in every tree update).
    y : (n,) float32 the response on the model's scale (rescaled to [-0.5, 0.5]); for a binary
        outcome the 0/1 labels.
    nu, lam : () the scaled inverse-chi2 prior of ``sigma2`` (unused for a binary outcome).
    sigma2_init : () initial ``sigma2`` (``sigma_hat**2``; 1 for a binary outcome).
    y_scale : () original units per model unit (to report ``sigma`` and the RMSE in ``y``'s units).
    offset : () binary outcome: the latent mean is ``offset + sum of trees`` (default 0; unused
        for a continuous outcome, whose rescaling is host side).
    feature_bins : (F, n) ``tree_data.bins`` transposed, in the narrowest unsigned type holding
        the bin codes (uint8 up to 256 bins): a tree's rule reads one contiguous row of it in the
        grow-prune sweep.  None: the sweep transposes ``bins`` itself.
    """

    tree_data: TreeData
    y: Array
    nu: Array
    lam: Array
    sigma2_init: Array
    y_scale: Array
    offset: Array = np.float32(0.0)
    feature_bins: Array | None = None


@dataclass(frozen=True, eq=False)
class BARTProblem:
    """One BART fit's model and data, built once (:func:`build_bart_problem`,
    :func:`build_bart_probit_problem`).

    Attributes
    ----------
    data : BARTData, the arrays the kernel reads.
    grid : SplitGrid of the training inputs (F features).
    prior : TreePrior of every tree.
    train_bins : (n, F) int bin codes of the training inputs.
    y_train : (n,) the validated response: float64 ``y`` (continuous) or the integer 0/1 codes
        (binary).
    feature_names : the F column names of a DataFrame ``X``, else None.
    y_offset, y_scale : ``y = y_offset + y_scale * model scale`` (binary: the probit offset and 1).
    tau2 : the leaf values' prior variance (model scale).
    outcome : "continuous" or "binary".
    nu, lam, sigma_hat : ``sigma2``'s prior and the calibration's residual sd (continuous; None
        for a binary outcome).
    classes : (2,) the class labels, ``classes[1]`` coded 1 (binary; None otherwise).
    """

    data: BARTData
    grid: SplitGrid
    prior: TreePrior
    train_bins: np.ndarray
    y_train: np.ndarray
    feature_names: list | None
    y_offset: float
    y_scale: float
    tau2: float
    outcome: str = "continuous"
    nu: float | None = None
    lam: float | None = None
    sigma_hat: float | None = None
    classes: np.ndarray | None = None

    @property
    def n_features(self) -> int:
        return self.grid.n_features

    def hyperparameters(self) -> dict:
        """The calibrated prior: ``tau2``, then ``nu``, ``lam``, ``sigma_hat`` (continuous) or
        ``offset`` (binary)."""
        if self.outcome == "binary":
            return dict(tau2=self.tau2, offset=self.y_offset)
        return dict(tau2=self.tau2, nu=self.nu, lam=self.lam, sigma_hat=self.sigma_hat)


def default_hyperparameters(X: np.ndarray, y_scaled: np.ndarray, n_trees: int, *, k: float = 2.0, nu: float = 3.0,
                            q: float = 0.9, grid: SplitGrid | None = None) -> dict:
    """Chipman et al. (2010)'s calibration on the rescaled response ``y_scaled`` (in [-0.5, 0.5]).

    * ``tau = 0.5 / (k sqrt(n_trees))``: the sum of ``M`` leaf values has prior sd ``0.5 / k``
      (``k = 2``: 95% of the prior mass of ``f(x)`` inside the range of ``y``);
    * ``sigma_hat``: residual sd of the least-squares fit of ``y_scaled`` on ``[1, X]``, or
      ``sd(y_scaled)`` when there are no residual degrees of freedom (or the fit is exact); with
      a ``grid`` of categorical features or missing cells, on :func:`linear_design`'s columns;
    * ``lam = sigma_hat**2 chi2_nu^{-1}(1 - q) / nu``, so that ``P(sigma < sigma_hat) = q`` under
      ``sigma2 ~ nu lam / chi2_nu``.

    Returns a dict with ``tau2``, ``nu``, ``lam`` and ``sigma_hat``.
    """
    from scipy.stats import chi2

    n = X.shape[0]
    design = np.column_stack([np.ones(n), X if grid is None else linear_design(X, grid)])
    sigma_hat = 0.0
    if n > design.shape[1]:
        coef, _, rank, _ = np.linalg.lstsq(design, y_scaled, rcond=None)
        df = n - rank
        if df > 0:
            sigma_hat = float(np.sqrt(np.sum((y_scaled - design @ coef) ** 2) / df))
    if not sigma_hat > 1e-8:
        sigma_hat = float(np.std(y_scaled, ddof=1))
    lam = sigma_hat**2 * float(chi2.ppf(1.0 - q, nu)) / nu
    tau = 0.5 / (k * np.sqrt(n_trees))
    return dict(tau2=float(tau**2), nu=float(nu), lam=float(lam), sigma_hat=sigma_hat)


def linear_design(X: np.ndarray, grid: SplitGrid) -> np.ndarray:
    """The columns the calibration's least squares reads for encoded inputs ``X`` (level indices,
    NaN for missing): ``X`` itself without categorical features or missing cells; otherwise a
    categorical feature's levels one-hot, an ordered feature's missing cells at its mean, plus an
    indicator column per feature with missing cells."""
    if grid.missing_code is None:
        return X
    columns = []
    for f in range(X.shape[1]):
        x, missing = X[:, f], np.isnan(X[:, f])
        if grid.levels[f] is not None:
            columns += [(x == level).astype(float) for level in range(len(grid.levels[f]))]
        else:
            columns.append(np.where(missing, np.nanmean(x) if not missing.all() else 0.0, x))
        if missing.any():
            columns.append(missing.astype(float))
    return np.column_stack(columns) if columns else np.zeros((X.shape[0], 0))


def probit_offset(codes: np.ndarray) -> float:
    """bartz's (and BayesTree's ``binaryOffset``) default: ``Phi^-1(mean(y))``, the proportion
    clipped to ``[1/(n+1), n/(n+1)]`` so that it is finite."""
    from scipy.special import ndtri as np_ndtri

    n = len(codes)
    prop = float(np.clip(np.mean(codes), 1.0 / (n + 1), n / (n + 1.0)))
    return float(np_ndtri(prop))


def _tree_prior(n_rows: int, **kw) -> TreePrior:
    """The trees' :class:`~bdtree_jax.priors.TreePrior`; ``min_leaf_size`` may not exceed the rows
    (with ``valid_cuts="ancestors"`` it truncates the prior to trees whose leaves hold that many,
    which the stump then must)."""
    prior = TreePrior(**kw)
    if prior.min_leaf_size > n_rows:
        raise ValueError(f"min_leaf_size={prior.min_leaf_size} exceeds the {n_rows} training rows.")
    return prior


def _inputs(X, estimator: str, categorical_features, missing: str, max_cuts: int | None):
    """``(X, names, grid)``: the validated inputs (encoded: level indices, NaN for missing) and
    their split grid; categorical features and missing cells refused unless BART supports them
    (:data:`~bdtree_jax.features.SUPPORTS_CATEGORICAL`)."""
    X, names, levels = check_X(X, estimator=estimator, min_rows=2, categorical_features=categorical_features,
                               missing=missing, return_levels=True)
    check_supported("bart", levels, X, names, where=f"{estimator}: ", label="BART")
    return X, names, make_split_grid(X, max_cuts, levels=levels)


def _binned(X: np.ndarray, grid: SplitGrid, target: np.ndarray, prior: TreePrior,
            likelihood: BARTLeafNormal) -> tuple[np.ndarray, TreeData]:
    """``X`` (n, F) binned once on its split grid: ``(bins (n, F), TreeData)``; ``target`` (n,)
    fills the TreeData's point statistics (replaced in every tree update)."""
    bins = grid.bin(X)
    # the rows sorted by each feature serve only valid_cuts="data" with min_leaf_size > 1
    row_orders = prior.valid_cuts == "data" and prior.min_leaf_size > 1
    return bins, make_tree_data(bins, target, prior, likelihood, grid=grid, row_orders=row_orders)


def feature_bins(tree_data: TreeData) -> Array:
    """(F, n) ``tree_data.bins`` transposed, in the narrowest unsigned type that holds its bin
    codes (``C + 1`` of them, ``C`` the cut slots of ``cut_cumwidth``; :attr:`BARTData.feature_bins`)."""
    n_codes = tree_data.cut_cumwidth.shape[-1] - 1
    dtype = jnp.uint8 if n_codes <= 2**8 else jnp.uint16 if n_codes <= 2**16 else jnp.int32
    if isinstance(tree_data.bins, jax.core.Tracer):  # inside a traced function
        return jnp.asarray(tree_data.bins).T.astype(dtype)
    return to_device(np.asarray(tree_data.bins).T, dtype)  # a transfer, nothing compiled


def _feature_bins(tree_data: TreeData) -> Array | None:
    """:func:`feature_bins` for the numeric grow-prune sweep; None for data with categorical
    features or missing values (their sweep reads ``bins``)."""
    if tree_data.level_masks is not None or tree_data.missing_code is not None:
        return None
    return feature_bins(tree_data)


def _f32(v) -> Array:
    return to_device(v, np.float32)


def build_bart_problem(X, y, *, n_trees: int, max_depth: int = 5, alpha: float = 0.95, beta: float = 2.0,
                       k: float = 2.0, nu: float = 3.0, q: float = 0.9, split_prior: str = "uniform",
                       min_leaf_size: int = 1, max_cuts: int | None = MAX_CUTS, valid_cuts: str = "ancestors",
                       categorical_features="from_dtype", missing: str = "mia",
                       estimator: str = "build_bart_problem") -> BARTProblem:
    """BART for a real response: ``X`` (n, F) array or DataFrame and a non-constant ``y`` (n,)
    -> :class:`BARTProblem` (continuous outcome).

    ``max_cuts``: candidate cuts per feature (:func:`~bdtree_jax.data.make_split_grid`; None: every
    midpoint); ``valid_cuts``: a node's valid cuts from its rows ("data") or its ancestors' rules
    ("ancestors", BayesTree's and bartz's; :mod:`bdtree_jax.priors`); ``k``, ``nu``, ``q``: the
    calibration of :func:`default_hyperparameters`; ``categorical_features``, ``missing``: as
    :func:`~bdtree_jax.problem.build_problem` (BART refuses both for now:
    :func:`~bdtree_jax.features.check_supported`); ``estimator`` names the caller in errors.
    """
    X, names, grid = _inputs(X, estimator, categorical_features, missing, max_cuts)
    y = check_regression_y(y, X.shape[0], estimator=estimator)
    if not y.max() > y.min():
        raise ValueError(f"{estimator}: y is constant ({y[0]!r}); BART needs a response that varies.")
    prior = _tree_prior(len(X), max_depth=max_depth, alpha=alpha, beta=beta, min_leaf_size=min_leaf_size,
                        split_prior=split_prior, valid_cuts=valid_cuts)
    y_min, y_max = float(y.min()), float(y.max())
    y_offset, y_scale = 0.5 * (y_min + y_max), y_max - y_min
    y_scaled = (y - y_offset) / y_scale
    hp = default_hyperparameters(X, y_scaled, n_trees, k=k, nu=nu, q=q, grid=grid)
    likelihood = BARTLeafNormal(np.float32(hp["sigma_hat"] ** 2), np.float32(hp["tau2"]))
    bins, tree_data = _binned(X, grid, y_scaled, prior, likelihood)
    data = BARTData(tree_data, _f32(y_scaled), _f32(hp["nu"]), _f32(hp["lam"]), _f32(hp["sigma_hat"] ** 2),
                    _f32(y_scale), feature_bins=_feature_bins(tree_data))
    return BARTProblem(data, grid, prior, bins, y, names, y_offset, y_scale, **hp)


def build_bart_probit_problem(X, y, *, n_trees: int, max_depth: int = 5, alpha: float = 0.95, beta: float = 2.0,
                              k: float = 2.0, offset: float | None = None, split_prior: str = "uniform",
                              min_leaf_size: int = 1, max_cuts: int | None = MAX_CUTS, valid_cuts: str = "ancestors",
                              categorical_features="from_dtype", missing: str = "mia",
                              estimator: str = "build_bart_probit_problem") -> BARTProblem:
    """Probit BART: ``X`` (n, F) and ``y`` (n,) of two class labels -> :class:`BARTProblem` of a
    binary outcome (``classes[1]`` coded 1).  Leaf prior sd ``tau = 3 / (k sqrt(n_trees))`` on the
    probit scale (Chipman et al. 2010, §4.2), ``sigma = 1``, ``offset`` default
    :func:`probit_offset`; the other options as :func:`build_bart_problem`."""
    X, names, grid = _inputs(X, estimator, categorical_features, missing, max_cuts)
    try:
        classes, codes = check_classification_y(y, X.shape[0], estimator=estimator)
    except ValueError as exc:
        if "Unknown label type" in str(exc):
            from sklearn.utils.multiclass import type_of_target

            raise ValueError(f"{estimator}: y must hold two class labels (binary probit classification); got a "
                             f"target of type {type_of_target(y)!r}. For a real response use BARTRegressor.") \
                from None
        raise
    if len(classes) != 2:
        raise ValueError(f"{estimator}: binary classification only (probit BART); y has {len(classes)} classes "
                         f"{list(classes)}.")
    prior = _tree_prior(len(X), max_depth=max_depth, alpha=alpha, beta=beta, min_leaf_size=min_leaf_size,
                        split_prior=split_prior, valid_cuts=valid_cuts)
    labels = np.asarray(codes, np.float32)
    offset = probit_offset(labels) if offset is None else float(offset)
    tau = 3.0 / (k * np.sqrt(n_trees))
    likelihood = BARTLeafNormal(np.float32(1.0), np.float32(tau**2))
    bins, tree_data = _binned(X, grid, labels - offset, prior, likelihood)
    data = BARTData(tree_data, _f32(labels), _f32(1.0), _f32(1.0), _f32(1.0), _f32(1.0), _f32(offset),
                    _feature_bins(tree_data))
    return BARTProblem(data, grid, prior, bins, codes, names, offset, 1.0, float(tau**2), outcome="binary",
                       classes=classes)


def build_tree_site_problem(X, *, n_trees: int, tau2: float, max_depth: int = 5, alpha: float = 0.95,
                            beta: float = 2.0, split_prior: str = "uniform", min_leaf_size: int = 1,
                            max_cuts: int | None = MAX_CUTS, valid_cuts: str = "ancestors",
                            estimator: str = "bart") -> BARTProblem:
    """The problem of a tree site of a NumPyro model (:mod:`bdtree_jax.numpyro`): inputs ``X``
    (n, F) numeric, without missing cells, binned once; ``n_trees`` trees with leaf values
    ``N(0, tau2)``.  There is no response here (the site's kernel sets the tree's target every
    iteration): ``y`` is zeros, ``nu``, ``lam``, ``sigma2_init`` and ``y_scale`` are 1."""
    X, names, grid = _inputs(X, estimator, None, "error", max_cuts)
    if not (isinstance(tau2, (int, float, np.floating)) and np.isfinite(tau2) and tau2 > 0):
        raise ValueError(f"{estimator}: the leaf values' prior variance must be a positive number; got {tau2!r}.")
    prior = _tree_prior(len(X), max_depth=max_depth, alpha=alpha, beta=beta, min_leaf_size=min_leaf_size,
                        split_prior=split_prior, valid_cuts=valid_cuts)
    likelihood = BARTLeafNormal(np.float32(1.0), np.float32(tau2))
    zeros = np.zeros(len(X), np.float32)
    bins, tree_data = _binned(X, grid, zeros, prior, likelihood)
    one = _f32(1.0)
    data = BARTData(tree_data, _f32(zeros), one, one, one, one, feature_bins=_feature_bins(tree_data))
    return BARTProblem(data, grid, prior, bins, zeros, names, 0.0, 1.0, float(tau2))
