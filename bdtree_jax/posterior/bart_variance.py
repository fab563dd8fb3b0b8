"""Heteroskedastic BART's posterior (``BARTRegressor(variance_trees=J)``): the draws of
:mod:`bdtree_jax.kernels.bart_variance`, the regression function and the noise sd ``sigma(x)`` at
new rows, predictive intervals whose width follows ``sigma(x)``, and ArviZ export with the
pointwise log-likelihood ``N(y_i; f(x_i), sigma(x_i)**2)``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import jax
import numpy as np

from ..problem.bart_variance import BARTVarianceProblem
from . import streaming
from .bart import BARTPosterior, _kept, bart_posterior_from_traces
from .streaming import row_blocks

__all__ = ["BARTVariancePosterior", "bart_variance_posterior_from_traces"]

#: The variance forest's trace entries (kept apart from the mean forest's).
VARIANCE_TRACES = ("variance_tree", "variance_leaf_values")


@dataclass(eq=False)
class BARTVariancePosterior(BARTPosterior):
    """Draws of a heteroskedastic BART run.

    As :class:`~bdtree_jax.posterior.BARTPosterior` for the mean forest (``predict``,
    ``predict_draws``, ``predict_interval`` of the regression function), with ``variance`` the
    variance forest's draws as a :class:`~bdtree_jax.posterior.BARTPosterior` whose function is
    ``log sigma2(x)`` in ``y``'s units (``y_offset = log(sigma0**2 y_scale**2)``, ``y_scale = -1``
    on the trees' sum of ``log lambda``).  ``stats["sigma"]`` is the root mean ``sigma2(x_i)`` over
    the training rows, ``stats["sigma_sd"]`` the sd of ``log sigma(x_i)`` over them.
    """

    variance: BARTPosterior | None = None

    def predict_sigma_draws(self, X) -> np.ndarray:
        """(C * S, n) the noise sd ``sigma(x)`` per draw, in ``y``'s units."""
        return _sd(self.variance._draws_at(self._bins(X)))

    def predict_sigma(self, X) -> np.ndarray:
        """(n,) posterior mean of ``sigma(x)``."""
        return self.variance._mean_at(self._bins(X), _sd)

    def predict_sigma_interval(self, X, prob: float = 0.9):
        """``(lower, upper)`` (n,) equal-tailed credible interval of ``sigma(x)``."""
        return self.variance._interval_at(self._bins(X), prob, transform=_sd)

    def _noise_sd(self, bins: np.ndarray, start: int, stop: int) -> np.ndarray:
        """(C * S, stop - start) each draw's ``sigma(x)`` at the rows ``bins[start:stop]``."""
        return _sd(self.variance._draws_at(bins, start=start, stop=stop))

    def pointwise_log_likelihood(self) -> np.ndarray:
        """(C, S, n) ``log N(y_i; f(x_i), sigma(x_i)**2)`` of every training row (``y``'s units)."""
        from scipy.stats import norm

        log_s2 = self.variance.train_draws()
        return norm.logpdf(np.asarray(self.y_train, np.float64), self.train_draws(), np.exp(0.5 * log_s2))

    def log_predictive_density(self, X, y) -> np.ndarray:
        """(n,) ``log mean_d N(y_i; f_d(x_i), sigma_d(x_i)**2)``: the posterior predictive density of
        held-out ``y`` (n,) at the rows of ``X``, a chunk of rows at a time."""
        from scipy.special import logsumexp
        from scipy.stats import norm

        bins = self._bins(X)
        y = np.asarray(y, np.float64).reshape(-1)
        n, D = len(bins), self.num_chains * self.num_draws
        if len(y) != n:
            raise ValueError(f"y has {len(y)} values for {n} rows of X.")
        out = np.empty(n)
        for s, e in row_blocks(n, streaming.rows_per_chunk(n, D, 4 * 8)):
            f = self._draws_at(bins, start=s, stop=e)
            sd = self._noise_sd(bins, s, e)
            out[s:e] = logsumexp(norm.logpdf(y[s:e], f, sd), axis=0) - np.log(D)
        return out

    def _arviz_groups(self) -> tuple[dict, dict]:
        latent = ("sigma", "sigma_sd")
        return ({k: self.stats[k] for k in latent}, {k: v for k, v in self.stats.items() if k not in latent})


def _sd(log_s2: np.ndarray) -> np.ndarray:
    return np.exp(0.5 * log_s2)


def bart_variance_posterior_from_traces(traces: dict, problem: BARTVarianceProblem, config: Any, num_warmup: int,
                                        info: dict) -> BARTVariancePosterior:
    """The posterior of a heteroskedastic run (:func:`~bdtree_jax.posterior.bart.bart_posterior_from_traces`
    for the mean forest; the variance forest's ``variance_tree``, ``variance_leaf_values`` as a
    second :class:`~bdtree_jax.posterior.BARTPosterior`)."""
    mean_traces = {k: v for k, v in traces.items() if k not in VARIANCE_TRACES}
    log_s0 = float(np.log(problem.sigma_hat**2 * problem.y_scale**2))

    variance = BARTPosterior(
        trees=jax.tree.map(lambda a: _kept(a, num_warmup), traces["variance_tree"]),
        leaf_values=_kept(traces["variance_leaf_values"], num_warmup), stats={}, warmup_stats={}, grid=problem.grid,
        y_offset=log_s0, y_scale=-1.0, config=config, model=dict(a0=problem.a0, b0=problem.b0),
        train_bins=problem.train_bins, feature_names=None)
    return bart_posterior_from_traces(mean_traces, problem, config, num_warmup, info, cls=BARTVariancePosterior,
                                      variance=variance)
