"""Log-linear BART's posterior (:class:`~bdtree_jax.BARTPoissonRegressor`): the draws of
:mod:`bdtree_jax.kernels.bart_poisson`, predictions of the expected count at new rows and
exposures, intervals and ArviZ export with the Poisson pointwise log-likelihood."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import jax
import numpy as np

from ..problem.bart_poisson import BARTPoissonProblem, check_exposure
from . import streaming
from .bart import BARTPosterior, bart_posterior_from_traces
from .streaming import row_blocks

__all__ = ["BARTPoissonPosterior", "bart_poisson_posterior_from_traces"]


@dataclass(eq=False)
class BARTPoissonPosterior(BARTPosterior):
    """Draws of a log-linear BART run for counts.

    As :class:`~bdtree_jax.posterior.BARTPosterior`, with ``y_offset`` the log offset and
    ``y_scale = 1``: the function of :meth:`predict_draws` is the log rate per unit exposure
    ``f(x) = offset + sum of trees``, and a row of exposure ``e`` has expected count
    ``e exp(f(x))``.  ``stats``: ``train_log_lik`` (Poisson), ``train_rmse`` (counts against their
    means), ``fit_mean``, ``fit_sd`` (of ``f`` over the training rows) and the tree summaries.
    ``y_train`` holds the training counts, ``exposure_train`` (n,) their exposures.
    """

    exposure_train: np.ndarray | None = None

    @property
    def sigma(self) -> np.ndarray:
        raise AttributeError("a Poisson model has no noise sd: a count's variance is its mean.")

    def _exposure(self, exposure, n: int) -> np.ndarray:
        return check_exposure(exposure, n, estimator=type(self).__name__)

    def predict_rate_draws(self, X, exposure=None) -> np.ndarray:
        """(C * S, n) the expected count ``exposure exp(f(x))`` per draw (exposure default 1)."""
        f = self.predict_draws(X)
        return self._exposure(exposure, f.shape[1]) * np.exp(f)

    def predict(self, X, exposure=None) -> np.ndarray:
        """(n,) posterior mean of the expected count ``exposure exp(f(x))`` (exposure default 1)."""
        bins = self._bins(X)
        return self._exposure(exposure, len(bins)) * self._mean_at(bins, np.exp)

    def predict_interval(self, X, prob: float = 0.9, *, exposure=None, predictive: bool = False, seed: int = 0):
        """``(lower, upper)`` (n,) equal-tailed credible interval of the expected count at each
        row, or with ``predictive=True`` a prediction interval of a new count (each draw's
        ``Poisson(exposure exp(f(x)))`` variate, numpy's generator from ``seed``)."""
        if not 0 < prob < 1:
            raise ValueError(f"prob must be in (0, 1); got {prob!r}.")
        bins = self._bins(X)
        n, D = len(bins), self.num_chains * self.num_draws
        e = self._exposure(exposure, n)
        if not predictive:
            lo, hi = self._interval_at(bins, prob, transform=np.exp)
            return e * lo, e * hi
        rng = np.random.default_rng(seed)
        lo, hi = np.empty(n), np.empty(n)
        for s, t in row_blocks(n, streaming.rows_per_chunk(n, D, 4 * 8)):
            counts = rng.poisson(e[s:t] * np.exp(self._draws_at(bins, start=s, stop=t)))
            lo[s:t], hi[s:t] = np.quantile(counts, [(1 - prob) / 2, (1 + prob) / 2], axis=0, method="inverted_cdf")
        return lo, hi

    def pointwise_log_likelihood(self) -> np.ndarray:
        """(C, S, n) ``log Poisson(y_i | exposure_i exp(f(x_i)))`` of every training row."""
        from scipy.stats import poisson

        mu = np.asarray(self.exposure_train, np.float64) * np.exp(self.train_draws())
        return poisson.logpmf(np.asarray(self.y_train, np.float64), mu)

    def posterior_predictive(self, seed: int = 0) -> np.ndarray:
        """(C, S, n) int64 replicated counts per draw: ``jax.random.poisson(key(seed), mu)`` with
        ``mu = exposure_i exp(f(x_i))`` (C, S, n)."""
        mu = np.asarray(self.exposure_train, np.float64) * np.exp(self.train_draws())
        return np.asarray(jax.random.poisson(jax.random.key(seed), mu.astype(np.float32)), np.int64)

    def _arviz_groups(self) -> tuple[dict, dict]:
        latent = ("fit_mean", "fit_sd")
        return ({k: self.stats[k] for k in latent}, {k: v for k, v in self.stats.items() if k not in latent})


def bart_poisson_posterior_from_traces(traces: dict, problem: BARTPoissonProblem, config: Any, num_warmup: int,
                                       info: dict) -> BARTPoissonPosterior:
    """The posterior of a log-linear BART run (:func:`~bdtree_jax.posterior.bart.bart_posterior_from_traces`)."""
    return bart_posterior_from_traces(traces, problem, config, num_warmup, info, cls=BARTPoissonPosterior,
                                      exposure_train=np.asarray(problem.exposure, np.float64))
