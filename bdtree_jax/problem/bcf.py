"""Bayesian causal forests' problem (:mod:`bdtree_jax.kernels.bcf`): the two forests' data built
once from ``(X, y, z, pihat)``.

The prognostic forest ``mu`` is BART's problem on ``[X, pihat]`` (:func:`build_bart_problem`:
``y`` rescaled to ``[-0.5, 0.5]`` by its min and max, BART's leaf prior with ``k``, ``sigma2``'s
prior calibrated by ``nu``, ``q``); the treatment forest ``tau`` is BART's problem on ``X``
(its own tree prior: Hahn et al.'s ``alpha = 0.25``, ``beta = 3``) with the leaf model
:class:`~bdtree_jax.likelihoods.BARTLeafWeightedNormal` of variance
``tau2 = (tau_scale sd(y))**2 / M_tau`` on the model scale (the sum of its trees has prior sd
``tau_scale sd(y)``; times ``b_1 - b_0 ~ N(0, 1)`` that is the effect's prior scale).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import pandas as pd

from .._types import Array
from ..likelihoods import BARTLeafWeightedNormal
from ..priors.tree_data import to_device
from .bart import BARTData, BARTProblem, build_bart_probit_problem, build_bart_problem

__all__ = ["BCFData", "BCFProblem", "build_bcf_problem", "check_propensity", "check_treatment"]


class BCFData(NamedTuple):
    """What a sweep of :mod:`bdtree_jax.kernels.bcf` reads: ``mu`` the prognostic forest's
    :class:`~bdtree_jax.problem.bart.BARTData` (its ``y`` the response on the model scale, ``nu``, ``lam``, ``sigma2_init``, ``y_scale`` those of the model),
    ``tau`` the treatment forest's (its ``tree_data`` on the inputs without the propensity, its
    likelihood a :class:`~bdtree_jax.likelihoods.BARTLeafWeightedNormal` carrying the leaf variance, ``point_stats``
    (n, 4)); ``z`` (n,) float32 0/1 the treatment."""

    mu: BARTData
    tau: BARTData
    z: Array


@dataclass(frozen=True, eq=False)
class BCFProblem:
    """One BCF fit's model and data: ``data`` (:class:`BCFData`), ``mu``
    and ``tau`` the two forests' :class:`~bdtree_jax.problem.bart.BARTProblem` (``mu``'s inputs
    end with the propensity column), ``z`` (n,) int 0/1, ``propensity`` (n,) float64, ``tau2``
    the treatment forest's leaf variance (model scale)."""

    data: BCFData
    mu: BARTProblem
    tau: BARTProblem
    z: np.ndarray
    propensity: np.ndarray
    tau2: float

    @property
    def n_features(self) -> int:
        return self.tau.n_features


def check_treatment(z, n: int, estimator: str) -> np.ndarray:
    """(n,) int 0/1 treatment indicators (booleans or 0/1 numbers), both groups present."""
    a = np.asarray(z)
    if a.ndim != 1 or a.shape[0] != n:
        raise ValueError(f"{estimator}: z must be a 1-d array of {n} treatment indicators; got shape {a.shape}.")
    if a.dtype == bool:
        a = a.astype(int)
    if not np.issubdtype(a.dtype, np.number) or not np.all(np.isin(a, (0, 1))):
        raise ValueError(f"{estimator}: z must hold 0/1 (or boolean) treatment indicators.")
    a = a.astype(int)
    if a.min() == a.max():
        raise ValueError(f"{estimator}: z must have treated (1) and control (0) rows; all are {a[0]}.")
    return a


def check_propensity(p, n: int, estimator: str) -> np.ndarray:
    """(n,) float64 propensities strictly inside (0, 1)."""
    a = np.asarray(p, dtype=float) if p is not None else None
    if a is None or a.ndim != 1 or a.shape[0] != n or not np.all(np.isfinite(a)) or not np.all((a > 0) & (a < 1)):
        raise ValueError(f"{estimator}: propensity must be a 1-d array of {n} probabilities in (0, 1); "
                         f"got {getattr(a, 'shape', None)!r}" + ("" if a is None or a.ndim != 1 else
                                                                  f" with values in [{np.nanmin(a)}, {np.nanmax(a)}]")
                         + ".")
    return a


def _with_propensity(X, p: np.ndarray):
    """``X`` with the propensity as its last column (a DataFrame keeps its columns and dtypes)."""
    if isinstance(X, pd.DataFrame):
        name = "propensity"
        while name in X.columns:
            name = "_" + name
        return X.assign(**{name: p})
    return np.column_stack([np.asarray(X, dtype=float), p])


def build_bcf_problem(X, y, z, propensity, *, num_trees_mu: int, num_trees_tau: int, max_depth: int = 5,
                      mu_split: tuple = (0.95, 2.0), tau_split: tuple = (0.25, 3.0), k: float = 2.0, tau_scale: float = 1.0, nu: float = 3.0, q: float = 0.9,
                      split_prior: str = "uniform", max_cuts: int | None = 255, valid_cuts: str = "ancestors",
                      categorical_features="from_dtype", missing: str = "mia", outcome: str = "continuous",
                      estimator: str = "build_bcf_problem") -> BCFProblem:
    """The problem of a BCF fit (module docstring): ``X`` (n, F), ``y`` (n,) real (``outcome=
    "binary"``: two class labels, probit BCF: the prognostic forest as probit BART's, ``nu``, ``q``
    unused, the treatment forest's sum of prior sd ``tau_scale`` on the latent scale), ``z`` (n,)
    0/1, ``propensity`` (n,) in (0, 1); ``mu_split``, ``tau_split`` each forest's ``(alpha,
    beta)``."""
    (alpha_mu, beta_mu), (alpha_tau, beta_tau) = mu_split, tau_split
    common = dict(max_depth=max_depth, split_prior=split_prior, max_cuts=max_cuts, valid_cuts=valid_cuts,
                  categorical_features=categorical_features, missing=missing, estimator=estimator)
    binary = outcome == "binary"
    if binary:
        build = build_bart_probit_problem
    else:
        build = build_bart_problem
        common.update(nu=nu, q=q)
    tau = build(X, y, n_trees=num_trees_tau, alpha=alpha_tau, beta=beta_tau, k=k, **common)
    n = len(tau.y_train)
    z = check_treatment(z, n, estimator)
    p = check_propensity(propensity, n, estimator)
    mu = build(_with_propensity(X, p), y, n_trees=num_trees_mu, alpha=alpha_mu, beta=beta_mu, k=k, **common)
    y_scaled = np.asarray(mu.data.y, np.float64)
    tau2 = float((tau_scale * (1.0 if binary else np.std(y_scaled))) ** 2 / num_trees_tau)
    td = tau.data.tree_data
    lik = BARTLeafWeightedNormal(np.float32(1.0 if binary else mu.sigma_hat**2), np.float32(tau2))
    ones = np.ones_like(y_scaled)
    stats = to_device(np.asarray(BARTLeafWeightedNormal.row_stats(y_scaled, ones, ones)), np.float32)
    tau_data = tau.data._replace(tree_data=td._replace(point_stats=stats, likelihood=lik), y=mu.data.y)
    data = BCFData(mu.data, tau_data, to_device(z, np.float32))
    return BCFProblem(data, mu, tau, z, p, tau2)
