"""Survival BART (the face layer): :class:`BARTSurvival`, BART's accelerated failure time model for
right-censored times (:mod:`bdtree_jax.kernels.bart_survival`), in scikit-learn's conventions."""

from __future__ import annotations

import hashlib

import numpy as np
from sklearn.utils.validation import check_is_fitted

from ..kernels import bart_survival
from ..kernels.bart_survival import SurvivalData, survival_bart
from ..kernels.dart import dart
from ..posterior.bart import bart_posterior_from_traces
from ..posterior.bart_survival import BARTSurvivalPosterior, concordance_index
from ..problem.bart import MAX_CUTS, build_bart_problem
from .bart import _BARTEstimator

__all__ = ["BARTSurvival"]


def _time_and_event(y, event, n_rows: int | None, where: str):
    """``(time (n,) float64 > 0, event (n,) bool)`` from ``y`` (times, or a structured array with a
    boolean event field and a time field, scikit-survival's ``Surv``) and ``event`` (None: every
    time observed, or with a structured ``y``; else (n,) bools or 0/1)."""
    arr = np.asarray(y)
    if arr.dtype.names is not None:
        if event is not None:
            raise ValueError(f"{where}: y is a structured (event, time) array; pass event=None.")
        if len(arr.dtype.names) != 2:
            raise ValueError(f"{where}: a structured y needs two fields (event, time); got {arr.dtype.names}.")
        event, arr = arr[arr.dtype.names[0]], arr[arr.dtype.names[1]]
    try:
        time = np.asarray(arr, np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{where}: y must hold survival times (numbers > 0); got dtype {arr.dtype}.") from None
    if time.ndim != 1 or (n_rows is not None and time.shape[0] != n_rows):
        raise ValueError(f"{where}: y must be 1-D with one time per row of X ({n_rows}); got shape {time.shape}.")
    if not np.all(np.isfinite(time)) or np.any(time <= 0):
        raise ValueError(f"{where}: y must hold finite survival times > 0.")
    if event is None:
        return time, np.ones(time.shape, bool)
    ev = np.asarray(event)
    if ev.shape != time.shape:
        raise ValueError(f"{where}: event must have one entry per time ({time.shape}); got shape {ev.shape}.")
    if ev.dtype != bool:
        if not np.all(np.isin(ev, (0, 1))):
            raise ValueError(f"{where}: event must be booleans or 0/1 (1: the time was observed, 0: censored).")
        ev = ev.astype(bool)
    if not ev.any():
        raise ValueError(f"{where}: event is False for every row; survival BART needs at least one observed time.")
    return time, ev


class BARTSurvival(_BARTEstimator):
    """BART for right-censored survival times: the log-normal accelerated failure time model
    ``log T = f(x) + sigma eps`` with ``f`` a sum of trees (BART's prior on the log time), sampled
    by imputing every censored row's log time from its truncated normal, then BART's sweep
    (:mod:`bdtree_jax.kernels.bart_survival`; exact Gibbs on the augmented posterior).

    ``fit(X, y, event)``: ``y`` (n,) times > 0 and ``event`` (n,) bools (True: the time was
    observed; False: the row was censored then), or ``y`` a structured (event, time) array
    (scikit-survival's ``Surv.from_arrays``) and ``event=None``.

    Parameters
    ----------
    num_trees, tree_sampler, num_warmup, num_samples, num_chains, seed, max_depth, alpha, beta, k,
    nu, q, num_particles, split_prior, max_cuts, valid_cuts, checkpoint, progress, data_shards,
    thin, leaf_dtype, categorical_features, missing, sparse, sparse_theta, sparse_a, sparse_b, sparse_rho
        As :class:`~bdtree_jax.BARTRegressor`, on the log times (the censored rows' log censoring
        times stand in for their log times in the prior's calibration; ``sparse=True``: DART's
        prior on the split variables, :func:`bdtree_jax.kernels.dart.dart` around this sweep).

    Attributes
    ----------
    posterior_ : BARTSurvivalPosterior
    feature_importances_, variable_inclusion_, split_probs_, theta_, s_acceptance_, theta_acceptance_,
    n_features_in_, feature_names_in_
        As :class:`~bdtree_jax.BARTRegressor`.
    """

    def __init__(
        self,
        num_trees: int = 200,
        tree_sampler: str = "grow-prune",
        *,
        num_warmup: int = 250,
        num_samples: int = 500,
        num_chains: int = 2,
        seed: int = 0,
        max_depth: int = 5,
        alpha: float = 0.95,
        beta: float = 2.0,
        k: float = 2.0,
        nu: float = 3.0,
        q: float = 0.9,
        num_particles: int = 10,
        split_prior: str = "uniform",
        max_cuts: int | None = MAX_CUTS,
        valid_cuts: str = "ancestors",
        checkpoint: str | None = None,
        progress: bool | None = None,
        data_shards: int = 1,
        thin: int = 1,
        leaf_dtype: str = "float32",
        categorical_features="from_dtype",
        missing: str = "mia",
        sparse: bool = False,
        sparse_theta: float | None = None,
        sparse_a: float = 0.5,
        sparse_b: float = 1.0,
        sparse_rho: float | None = None,
    ):
        self._store(locals())

    def _extra_reals(self) -> tuple:
        return (("nu", lambda v: v > 0, "> 0"), ("q", lambda v: 0 < v < 1, "in (0, 1)"))

    def _kernel(self, config):
        return survival_bart(config)

    def _sparse_kernel(self, config, dart_config):
        return dart(config, dart_config, bart_survival)

    def _run_data(self, problem):
        return SurvivalData(problem.data, np.asarray(self._event, bool))

    def _posterior(self, traces, problem, config, num_warmup, info):
        return bart_posterior_from_traces(traces, problem, config, num_warmup, info, cls=BARTSurvivalPosterior,
                                          event=np.asarray(self._event, bool))

    def fit(self, X, y, event=None):
        """Sample the posterior given training rows ``X``, times ``y`` and ``event``; returns self."""
        self._check_params()
        name = type(self).__name__
        time, self._event = _time_and_event(y, event, np.shape(X)[0] if np.ndim(X) == 2 else None, name)
        problem = build_bart_problem(X, np.log(time), nu=float(self.nu), q=float(self.q), **self._problem_options())
        try:
            return self._run(problem, ("bart-survival", problem.prior, self.k, self.nu, self.q, self.max_cuts,
                                       hashlib.sha256(np.asarray(self._event).tobytes()).hexdigest()))
        finally:
            del self._event

    def predict(self, X) -> np.ndarray:
        """(n,) posterior mean of the median survival time ``exp(f(x))``."""
        X = self._check_predict_X(X)
        return self.posterior_.predict_median(X)

    def predict_interval(self, X, prob: float = 0.9):
        """``(lower, upper)`` (n,) equal-tailed credible interval of the median survival time."""
        X = self._check_predict_X(X)
        return self.posterior_.predict_median_interval(X, prob=prob)

    def predict_survival_function(self, X, times, prob: float | None = None):
        """Posterior mean ``S(t | x)`` (n, T) at ``times`` (T,); with ``prob`` also the
        equal-tailed credible bands ``(mean, lower, upper)``."""
        X = self._check_predict_X(X)
        return self.posterior_.survival_function(X, times, prob=prob)

    def score(self, X, y, event=None) -> float:
        """Harrell's concordance index of the predicted median times (a longer predicted time
        should go with a later observed time) on ``(X, y, event)`` as :meth:`fit` takes them."""
        check_is_fitted(self, "posterior_")
        time, ev = _time_and_event(y, event, None, type(self).__name__)
        return concordance_index(time, ev, -self.predict(X))
