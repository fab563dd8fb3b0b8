"""Log-linear BART's problem (counts with exposure): what one fit of
:class:`~bdtree_jax.BARTPoissonRegressor` samples, built once from ``(X, y, exposure)``.

Model (Murray 2021, log-linear BART for counts)::

    y_i ~ Poisson(exposure_i exp(offset + sum_m g(x_i; T_m, log lambda_m))),    lambda ~ Gamma(a0, b0)

``offset = log(sum y / sum exposure)`` (the rate of a model without trees), so that the trees
start from the overall rate.  The leaves' ``a0``, ``b0`` make ``log lambda`` of prior mean 0 and
sd ``tau = 3 / (k sqrt(M))``, the scale probit BART gives a leaf (Chipman et al. 2010, §4.2: the
sum of the ``M`` trees has prior sd ``3 / k``, 1.5 at ``k = 2``: a rate within a factor
``exp(2 x 1.5) = 20`` of the overall rate with 95% prior probability), by
:func:`~bdtree_jax.likelihoods.poisson_gamma_hyperparameters` (``trigamma(a0) = tau**2``,
``b0 = exp(digamma(a0))``; Murray's choice of a log-gamma leaf prior centred at 0).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from .._types import Array
from ..data import TreeData, _as_1d
from ..likelihoods import BARTLeafPoissonGamma, poisson_gamma_hyperparameters
from .bart import MAX_CUTS, BARTProblem, _binned, _f32, _feature_bins, _inputs, _tree_prior

__all__ = ["BARTPoissonData", "BARTPoissonProblem", "build_bart_poisson_problem", "check_counts", "check_exposure"]


class BARTPoissonData(NamedTuple):
    """What a log-linear BART sweep reads (a pytree of arrays).

    tree_data : TreeData of the inputs; its ``likelihood`` is a :class:`BARTLeafPoissonGamma`
        carrying ``a0``, ``b0`` (its ``point_stats`` are replaced in every tree update).
    y : (n,) float32 the counts.
    log_exposure : (n,) float32 ``log(exposure) + offset``: the log rate of a row with every tree 0.
    offset : () the log rate per unit exposure of a model without trees.
    sigma2_init : () 1 (the BART state's ``sigma2`` slot; a Poisson model has no noise variance).
    feature_bins : None (the single-tree kernels read ``tree_data.bins``).
    """

    tree_data: TreeData
    y: Array
    log_exposure: Array
    offset: Array = np.float32(0.0)
    sigma2_init: Array = np.float32(1.0)
    feature_bins: Array | None = None


@dataclass(frozen=True, eq=False)
class BARTPoissonProblem(BARTProblem):
    """:class:`~bdtree_jax.problem.bart.BARTProblem` of counts (``outcome="counts"``):
    ``y_offset`` the log offset, ``y_scale = 1``, ``tau2`` the prior variance of ``log lambda``;
    ``a0``, ``b0`` the leaves' gamma prior and ``exposure`` (n,) float64 the training rows' exposures."""

    a0: float = 1.0
    b0: float = 1.0
    exposure: np.ndarray | None = None

    def hyperparameters(self) -> dict:
        """The calibrated prior: ``tau2``, ``a0``, ``b0``, ``offset``."""
        return dict(tau2=self.tau2, a0=self.a0, b0=self.b0, offset=self.y_offset)


def check_counts(y, n: int, *, estimator: str) -> np.ndarray:
    """``y`` (n,) of non-negative integer counts (any numeric dtype holding whole numbers) -> float64."""
    where = f"{estimator}: "
    y = _as_1d(y, "y", where, n)
    if y.dtype.kind not in "biuf":
        raise ValueError(f"{where}y must hold non-negative integer counts; got dtype {y.dtype}.")
    y = y.astype(float)
    if not np.all(np.isfinite(y)):
        raise ValueError(f"{where}y contains NaN or infinite values; counts must be non-negative integers.")
    if np.any(y < 0):
        raise ValueError(f"{where}y must hold non-negative integer counts; got a negative value {y.min()!r}.")
    if np.any(y != np.round(y)):
        bad = y[y != np.round(y)][0]
        raise ValueError(f"{where}y must hold non-negative integer counts; got the non-integer value {bad!r}.")
    if y.max() >= 2**24:
        raise ValueError(f"{where}y has counts up to {y.max():.3g}; float32 holds integers exactly only below 2**24.")
    return y


def check_exposure(exposure, n: int, *, estimator: str) -> np.ndarray:
    """``exposure`` (n,) of finite numbers > 0, or None (every row 1) -> (n,) float64."""
    where = f"{estimator}: "
    if exposure is None:
        return np.ones(n)
    e = _as_1d(exposure, "exposure", where, n)
    try:
        e = e.astype(float)
    except (TypeError, ValueError):
        raise ValueError(f"{where}exposure must be positive numbers; got dtype {e.dtype}.") from None
    if not np.all(np.isfinite(e)) or np.any(e <= 0):
        raise ValueError(f"{where}exposure must be finite numbers > 0, one per row; got values in "
                         f"[{np.nanmin(e)!r}, {np.nanmax(e)!r}]{' with NaN' if np.isnan(e).any() else ''}.")
    return e


def build_bart_poisson_problem(X, y, exposure=None, *, n_trees: int, max_depth: int = 5, alpha: float = 0.95,
                               beta: float = 2.0, k: float = 2.0, split_prior: str = "uniform",
                               min_leaf_size: int = 1, max_cuts: int | None = MAX_CUTS,
                               valid_cuts: str = "ancestors", categorical_features="from_dtype",
                               missing: str = "mia", estimator: str = "build_bart_poisson_problem"
                               ) -> BARTPoissonProblem:
    """Log-linear BART for counts: ``X`` (n, F), ``y`` (n,) non-negative integers, ``exposure``
    (n,) > 0 or None -> :class:`BARTPoissonProblem` (module docstring); the other options as
    :func:`~bdtree_jax.problem.bart.build_bart_problem`."""
    X, names, grid = _inputs(X, estimator, categorical_features, missing, max_cuts)
    n = X.shape[0]
    y = check_counts(y, n, estimator=estimator)
    exposure = check_exposure(exposure, n, estimator=estimator)
    if not y.sum() > 0:
        raise ValueError(f"{estimator}: every count in y is 0; the model needs at least one event.")
    prior = _tree_prior(n, max_depth=max_depth, alpha=alpha, beta=beta, min_leaf_size=min_leaf_size,
                        split_prior=split_prior, valid_cuts=valid_cuts)
    tau = 3.0 / (k * np.sqrt(n_trees))
    a0, b0 = poisson_gamma_hyperparameters(tau)
    likelihood = BARTLeafPoissonGamma(np.float32(a0), np.float32(b0))
    offset = float(np.log(y.sum() / exposure.sum()))
    log_exposure = np.log(exposure) + offset
    bins, tree_data = _binned(X, grid, y, prior, likelihood)
    data = BARTPoissonData(tree_data, _f32(y), _f32(log_exposure), _f32(offset), _f32(1.0),
                           _feature_bins(tree_data))
    return BARTPoissonProblem(data, grid, prior, bins, y, names, offset, 1.0, float(tau**2), outcome="counts",
                              a0=a0, b0=b0, exposure=exposure)
