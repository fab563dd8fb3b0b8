"""Heteroskedastic BART's problem: what one fit of ``BARTRegressor(variance_trees=J)`` samples,
built once from ``(X, y)``.

Model (:mod:`bdtree_jax.kernels.bart_variance`), on BART's rescaled ``y``::

    y_i ~ N(sum_m g(x_i; T_m, mu_m), sigma2(x_i)),   sigma2(x) = sigma0**2 / prod_{j=1..J} lambda_j(x)

The mean forest is BART's, calibrated as :func:`~bdtree_jax.problem.bart.build_bart_problem` does
(``tau = 0.5 / (k sqrt(M))``).  ``sigma0 = sigma_hat``, the residual sd of a linear regression of
``y`` on ``X`` (BART's calibration of ``sigma``), fixed: the variance forest scales it.  The variance
leaves' precision factors ``lambda ~ Gamma(a0, b0)`` with stochtree's calibration
(:func:`~bdtree_jax.likelihoods.variance_gamma_hyperparameters`: ``a0 = J / 1.5**2 + 1/2``,
``b0 = J / 1.5**2``): ``log sigma2(x)`` has prior mean about ``log sigma0**2`` and sd about 1.5.
HBART (Pratola et al. 2020) calibrates its inverse-chi-squared factors the same way in spirit
(the product's prior centred on a data-based variance, its spread shared out over the trees).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from ..likelihoods import BARTLeafVarianceGamma, variance_gamma_hyperparameters
from .bart import BARTData, BARTProblem, build_bart_problem

__all__ = ["BARTVarianceProblem", "VarianceData", "build_bart_variance_problem"]


class VarianceData(NamedTuple):
    """What a heteroskedastic sweep reads: ``data`` BART's :class:`~bdtree_jax.problem.bart.BARTData`
    (``y`` on the model scale, ``sigma2_init`` = ``sigma0**2``, its likelihood's ``tau2`` the mean
    leaves' prior variance), ``variance`` the variance leaves'
    :class:`~bdtree_jax.likelihoods.BARTLeafVarianceGamma` (``a0``, ``b0``)."""

    data: BARTData
    variance: BARTLeafVarianceGamma


@dataclass(frozen=True, eq=False)
class BARTVarianceProblem(BARTProblem):
    """:class:`~bdtree_jax.problem.bart.BARTProblem` of a real response with a variance forest of
    ``variance_trees`` trees, leaves ``lambda ~ Gamma(a0, b0)``; ``data`` stays BART's
    :class:`~bdtree_jax.problem.bart.BARTData` (:meth:`variance_data` is what the kernel reads)."""

    variance_trees: int = 1
    a0: float = 1.0
    b0: float = 1.0

    def hyperparameters(self) -> dict:
        """BART's calibrated prior, ``sigma0`` (= ``sigma_hat``, model scale) and the variance
        forest's ``variance_trees``, ``a0``, ``b0``."""
        return dict(super().hyperparameters(), sigma0=self.sigma_hat, variance_trees=self.variance_trees,
                    a0=self.a0, b0=self.b0)

    def variance_data(self) -> VarianceData:
        """The kernel's :class:`VarianceData`."""
        return VarianceData(self.data, BARTLeafVarianceGamma(np.float32(self.a0), np.float32(self.b0)))


def build_bart_variance_problem(X, y, *, variance_trees: int, **options) -> BARTVarianceProblem:
    """Heteroskedastic BART: ``X`` (n, F), ``y`` (n,) real, ``variance_trees`` >= 1 ->
    :class:`BARTVarianceProblem` (module docstring); ``options`` as
    :func:`~bdtree_jax.problem.bart.build_bart_problem`."""
    estimator = options.get("estimator", "build_bart_variance_problem")
    try:
        a0, b0 = variance_gamma_hyperparameters(variance_trees)
    except ValueError as e:
        raise ValueError(f"{estimator}: variance_trees: {e}") from None
    p = build_bart_problem(X, y, **options)
    fields = {f.name: getattr(p, f.name) for f in dataclasses.fields(p)}
    return BARTVarianceProblem(**fields, variance_trees=int(variance_trees), a0=a0, b0=b0)
