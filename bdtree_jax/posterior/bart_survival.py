"""Draws of survival BART (:class:`~bdtree_jax.estimators.BARTSurvival`, the log-normal accelerated
failure time model of :mod:`bdtree_jax.kernels.bart_survival`): survival curves with credible
bands, median times, the observed-data pointwise log-likelihood, and Harrell's concordance index."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import streaming
from .bart import BARTPosterior
from .streaming import row_blocks

__all__ = ["BARTSurvivalPosterior", "concordance_index"]


@dataclass(eq=False)
class BARTSurvivalPosterior(BARTPosterior):
    """As :class:`~bdtree_jax.posterior.BARTPosterior`, on the log time: :meth:`predict_draws` gives
    ``f(x)`` (C * S, n), the mean of ``log T`` given ``x``, and ``sigma`` its sd, so that
    ``S(t | x) = 1 - Phi((log t - f(x)) / sigma)`` per draw.  ``y_train`` holds the training rows'
    log times (a censored row's log censoring time) and ``event`` (n,) bool whether each was
    observed; ``stats["train_log_lik"]`` is the observed-data log-likelihood of the log times."""

    event: np.ndarray | None = None

    def survival_function(self, X, times, prob: float | None = None):
        """Posterior mean of ``S(t | x)`` (n, T) at the rows of ``X`` and the ``times`` (T,) > 0;
        with ``prob`` also ``(lower, upper)`` (n, T) equal-tailed credible bands of ``S(t | x)``
        over the draws."""
        from scipy.special import ndtr

        times = np.asarray(times, np.float64).reshape(-1)
        if times.size == 0 or not np.all(np.isfinite(times)) or np.any(times <= 0):
            raise ValueError("times must be a non-empty array of finite numbers > 0.")
        if prob is not None and not 0 < prob < 1:
            raise ValueError(f"prob must be in (0, 1); got {prob!r}.")
        bins = self._bins(X)
        n, D = len(bins), self.num_chains * self.num_draws
        sigma = np.asarray(self.sigma, np.float64).reshape(-1)[:, None, None]
        mean, lo, hi = (np.empty((n, times.size)) for _ in range(3))
        # a chunk of rows at a time: every draw x the chunk's rows x the times within the budget
        for start, stop in row_blocks(n, streaming.rows_per_chunk(n, D, (times.size + 1) * 8)):
            f = self._draws_at(bins, start=start, stop=stop)  # (D, rows)
            s = ndtr((f[:, :, None] - np.log(times)[None, None, :]) / sigma)  # (D, rows, T)
            mean[start:stop] = s.mean(0)
            if prob is not None:
                lo[start:stop], hi[start:stop] = np.quantile(s, [(1 - prob) / 2, (1 + prob) / 2], axis=0)
        return mean if prob is None else (mean, lo, hi)

    def predict_median(self, X) -> np.ndarray:
        """(n,) posterior mean of the median survival time ``exp(f(x))`` (the log-normal's median)."""
        return self._mean_at(self._bins(X), np.exp)

    def predict_median_interval(self, X, prob: float = 0.9):
        """``(lower, upper)`` (n,) equal-tailed credible interval of the median survival time."""
        return self._interval_at(self._bins(X), prob, transform=np.exp)

    def posterior_predictive(self, seed: int = 0) -> None:
        """None: a replicated log time is not comparable with a censored row's censoring time, so
        :meth:`to_arviz` has no ``posterior_predictive`` group here."""
        return None

    def pointwise_log_likelihood(self) -> np.ndarray:
        """(C, S, n) observed-data ``log p(row i | draw)`` of the log times: ``log N(log t_i; f_i,
        sigma)`` for an event, ``log Phi((f_i - log c_i) / sigma)`` for a censored row."""
        from scipy.special import log_ndtr
        from scipy.stats import norm

        f = self.train_draws()
        y = np.asarray(self.y_train, np.float64)
        sigma = np.asarray(self.sigma, np.float64)[..., None]
        event = np.ones(y.shape, bool) if self.event is None else np.asarray(self.event, bool)
        return np.where(event, norm.logpdf(y, f, sigma), log_ndtr((f - y) / sigma))


def concordance_index(time, event, risk) -> float:
    """Harrell's concordance index of ``risk`` (n,) (higher: earlier failure) for right-censored
    ``time`` (n,) and ``event`` (n,) bool: among the comparable pairs (row ``i`` an event and
    ``time_i < time_j``, or ``time_i == time_j`` with ``j`` censored: ``j`` was still at risk), the
    share where ``risk_i > risk_j``, ties in risk counting 1/2 (as
    ``sksurv.metrics.concordance_index_censored``).  Memory O(n) per block of 1,024 rows."""
    time, risk = np.asarray(time, np.float64), np.asarray(risk, np.float64)
    event = np.asarray(event, bool)
    if not (time.shape == event.shape == risk.shape) or time.ndim != 1:
        raise ValueError(f"time, event and risk must be 1-D of one length; got {time.shape}, {event.shape}, {risk.shape}.")
    concordant, comparable = 0.0, 0
    for start in range(0, len(time), 1024):
        i = slice(start, start + 1024)
        pair = event[i, None] & ((time[i, None] < time[None, :]) | ((time[i, None] == time[None, :]) & ~event[None, :]))
        d = risk[i, None] - risk[None, :]
        concordant += float(np.sum(pair & (d > 0)) + 0.5 * np.sum(pair & (d == 0)))
        comparable += int(pair.sum())
    if comparable == 0:
        raise ValueError("no comparable pair: the concordance index needs an event before another row's time.")
    return concordant / comparable
