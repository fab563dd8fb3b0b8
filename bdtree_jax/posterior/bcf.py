"""Bayesian causal forests' posterior (:class:`~bdtree_jax.BCFRegressor`): the draws of
:mod:`bdtree_jax.kernels.bcf`, the conditional average treatment effect at new rows with
credible intervals, and the average effects (ATE, ATT) of the training rows.

The two forests' draws are :class:`~bdtree_jax.posterior.BARTPosterior` objects (``mu`` on
``[X, propensity]``, ``tau`` on ``X``, the latter with ``y_offset = 0``), so predictions stream
as BART's do; ``CATE(x) = (b_1 - b_0) tau(x)`` per draw.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..problem.bcf import BCFProblem, _with_propensity, check_propensity, check_treatment
from .bart import BARTPosterior, bart_posterior_from_traces

__all__ = ["BCFPosterior", "EffectSummary", "bcf_posterior_from_traces"]


@dataclass(frozen=True)
class EffectSummary:
    """A treatment effect's posterior: ``draws`` (D,) or (D, n), ``mean``, ``lower``, ``upper``
    (the equal-tailed ``prob`` interval), each () or (n,)."""

    draws: np.ndarray
    mean: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    prob: float


def _summary(draws: np.ndarray, prob: float) -> EffectSummary:
    if not 0 < prob < 1:
        raise ValueError(f"prob must be in (0, 1); got {prob!r}.")
    lo, hi = np.quantile(draws, [(1 - prob) / 2, (1 + prob) / 2], axis=0)
    return EffectSummary(draws, draws.mean(0), lo, hi, float(prob))


@dataclass(eq=False)
class BCFPosterior:
    """Draws of a BCF run (kept iterations only).

    Attributes
    ----------
    mu, tau : BARTPosterior of the prognostic forest (inputs ``[X, propensity]``, ``y``'s offset
        and scale) and of the treatment forest (inputs ``X``, offset 0: ``tau(x)`` in ``y``'s units).
    b : (C, S, 2) the coding ``(b_0, b_1)``.
    stats : dict of (C, S): ``sigma``, ``ate``, ``att``, ``b0``, ``b1``, ``train_rmse``,
        ``train_log_lik``, per forest ``{mu,tau}_n_leaves``, ``_depth``, ``_accepted``;
        ``warmup_stats`` the same for the warm-up.
    z_train : (n,) int, propensity_train : (n,) the training treatment and propensities.
    info : run metadata.
    """

    mu: BARTPosterior
    tau: BARTPosterior
    b: np.ndarray
    stats: dict
    warmup_stats: dict
    z_train: np.ndarray
    propensity_train: np.ndarray
    info: dict = field(default_factory=dict)

    #: chains and kept draws per chain (the forests'), (C, S) noise sd in ``y``'s units
    num_chains = property(lambda self: self.tau.num_chains)
    num_draws = property(lambda self: self.tau.num_draws)
    sigma = property(lambda self: self.stats["sigma"])

    def _contrast(self) -> np.ndarray:
        """(C * S,) ``b_1 - b_0`` per draw."""
        b = np.asarray(self.b, np.float64).reshape(-1, 2)
        return b[:, 1] - b[:, 0]

    @property
    def binary(self) -> bool:
        return self.mu.y_train is not None and getattr(self.mu, "classes", None) is not None

    def cate_draws(self, X, propensity=None) -> np.ndarray:
        """(C * S, n) ``CATE(x) = (b_1 - b_0) tau(x)`` per draw at the rows of ``X`` (``y``'s
        units); binary outcome: ``Phi(f_1) - Phi(f_0)``, ``f_j = offset + mu(x, pihat) + b_j tau(x)``
        (``propensity`` (n,) then required)."""
        if not self.binary:
            return self._contrast()[:, None] * self.tau.predict_draws(X)
        from scipy.special import ndtr

        n = len(self.tau._bins(X))
        f = self.mu.predict_draws(_with_propensity(X, check_propensity(propensity, n, "effect")))
        t = self.tau.predict_draws(X)
        b = np.asarray(self.b, np.float64).reshape(-1, 2)
        return ndtr(f + b[:, 1:] * t) - ndtr(f + b[:, :1] * t)

    def effect(self, X, prob: float = 0.95, propensity=None) -> EffectSummary:
        """The CATE at the rows of ``X``: draws (C * S, n), posterior mean and ``prob`` interval (n,)."""
        return _summary(self.cate_draws(X, propensity), prob)

    def ate(self, prob: float = 0.95) -> EffectSummary:
        """The training rows' average effect (mean CATE over them) per draw, its mean and interval."""
        return _summary(np.asarray(self.stats["ate"], np.float64).reshape(-1), prob)

    def att(self, prob: float = 0.95) -> EffectSummary:
        """The treated training rows' average effect per draw, its mean and interval."""
        return _summary(np.asarray(self.stats["att"], np.float64).reshape(-1), prob)

    def predict_draws(self, X, z, propensity) -> np.ndarray:
        """(C * S, n) the regression function ``mu(x, pihat) + b_z tau(x)`` per draw (``y``'s units)."""
        n = len(self.tau._bins(X))
        z = check_treatment(z, n, "predict") if np.ndim(z) else np.full(n, int(z))
        p = check_propensity(propensity, n, "predict")
        b = np.asarray(self.b, np.float64).reshape(-1, 2)
        return self.mu.predict_draws(_with_propensity(X, p)) + b[:, z] * self.tau.predict_draws(X)


def _forest(traces: dict, name: str, problem, config, num_warmup: int, info: dict, **override) -> BARTPosterior:
    """One forest's BARTPosterior from the ``{name}_tree`` and ``{name}_leaf_values`` traces."""
    sub = {"tree": traces[f"{name}_tree"], "leaf_values": traces[f"{name}_leaf_values"],
           "n_leaves": traces[f"{name}_n_leaves"], "depth": traces[f"{name}_depth"]}
    post = bart_posterior_from_traces(sub, problem, config, num_warmup, info)
    for k, v in override.items():
        setattr(post, k, v)
    return post


def bcf_posterior_from_traces(traces: dict, problem: BCFProblem, config, num_warmup: int,
                              info: dict) -> BCFPosterior:
    """The posterior of a BCF run from its per-iteration ``traces`` ((C, W + S, ...) arrays of
    :func:`~bdtree_jax.kernels.bcf.trace`); the first ``num_warmup`` iterations are warm-up."""
    mu = _forest(traces, "mu", problem.mu, config.mu, num_warmup, info)
    tau = _forest(traces, "tau", problem.tau, config.tau, num_warmup, info, y_offset=0.0,
                  y_scale=1.0 if config.binary else problem.mu.y_scale)
    scalars = [k for k in traces if not k.endswith(("_tree", "_leaf_values"))]
    b = np.stack([np.asarray(traces["b0"]), np.asarray(traces["b1"])], axis=-1)[:, num_warmup:]
    return BCFPosterior(mu, tau, b, {k: np.asarray(traces[k])[:, num_warmup:] for k in scalars},
                        {k: np.asarray(traces[k])[:, :num_warmup] for k in scalars}, problem.z, problem.propensity,
                        info)
