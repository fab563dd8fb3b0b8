"""Heteroskedastic BART for :class:`~bdtree_jax.BARTRegressor` with ``variance_trees >= 1``: a
second forest on ``log sigma2(x)`` (:mod:`bdtree_jax.kernels.bart_variance`).  The regressor keeps
its homoskedastic path for ``variance_trees=0`` and calls these hooks otherwise."""

from __future__ import annotations

from ..kernels import bart_variance as _kernel
from ..kernels.bart import BARTConfig
from ..kernels.bart_variance import VarianceConfig, bart_variance
from ..kernels.dart import dart
from ..posterior.bart_variance import bart_variance_posterior_from_traces
from ..problem.bart_variance import build_bart_variance_problem

__all__ = ["fit_variance", "sparse_variance_kernel", "variance_kernel", "variance_options", "variance_posterior"]


def variance_options() -> dict:
    """The mean forest's :class:`~bdtree_jax.kernels.bart.BARTConfig` fields (``sigma0`` fixed)."""
    return dict(outcome="continuous", sample_sigma=False)


def variance_kernel(config: BARTConfig, variance_trees: int):
    """The sampling algorithm of a heteroskedastic run."""
    return bart_variance(VarianceConfig.of(config, int(variance_trees)))


def sparse_variance_kernel(config: BARTConfig, variance_trees: int, dart_config):
    """The sampling algorithm of a heteroskedastic ``sparse=True`` run: DART around both forests'
    sweep, ``s`` on the mean forest (:func:`bdtree_jax.kernels.bart_variance.sparse_forest`)."""
    return dart(VarianceConfig.of(config, int(variance_trees)), dart_config, _kernel)


def variance_posterior(traces, problem, config, num_warmup, info):
    """The posterior of a heteroskedastic run (:class:`~bdtree_jax.posterior.bart_variance.BARTVariancePosterior`)."""
    return bart_variance_posterior_from_traces(traces, problem, config, num_warmup, info)


def fit_variance(estimator, X, y):
    """Fit ``estimator`` (a :class:`~bdtree_jax.BARTRegressor`, parameters checked) with
    ``variance_trees >= 1``; ``data_shards`` must be 1."""
    name = type(estimator).__name__
    if estimator.data_shards != 1:
        raise ValueError(f"{name}: data_shards must be 1 with variance_trees >= 1 (row sharding is not supported "
                         f"for heteroskedastic BART yet); got {estimator.data_shards!r}.")
    J = int(estimator.variance_trees)
    problem = build_bart_variance_problem(X, y, variance_trees=J, nu=float(estimator.nu), q=float(estimator.q),
                                          **estimator._problem_options())
    return estimator._run(problem, ("bart-variance", problem.prior, estimator.k, estimator.nu, estimator.q,
                                    estimator.max_cuts, J), stacklevel=4)
