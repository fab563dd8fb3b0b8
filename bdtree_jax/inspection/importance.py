"""Variable importance with posterior credible intervals, for every estimator here.

* **Split inclusion** (:func:`split_inclusion`): per posterior draw, the share of the split rules
  (over every tree of the draw) that use each feature; its posterior mean is the estimators'
  ``feature_importances_``.  BART's draws come from
  :meth:`~bdtree_jax.posterior.BARTPosterior.variable_inclusion`; a single tree's from its rules
  (an oblique soft tree's rule counts each feature by its share of the rule's absolute weights).
  Draws without any split have no shares and are left out.
* **Permutation importance on draws** (:func:`permutation_importance`): per posterior draw ``d``
  and feature ``j``, how much worse draw ``d``'s predictions score on ``(X, y)`` when column ``j``
  of ``X`` is shuffled (the link between ``x_j`` and the rest is broken, so the draw's effect of
  ``x_j`` no longer matches the data):

      I_d(j) = score_d(X) - mean_r score_d(X with column j permuted by permutation r)

  with ``score`` the R^2 of the prediction (regressors; Poisson BART's expected count at exposure
  1) or minus the mean log-loss of the class probabilities (classifiers), so ``I`` is the R^2 lost
  or the log-loss gained.  The same permutations serve every draw; the posterior of ``I_d(j)`` gives
  the mean and a credible interval (the interval is over draws at fixed permutations: take
  ``n_repeats > 1`` to average the shuffles' own noise out).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from sklearn.utils.validation import check_is_fitted

from ..posterior.inclusion import split_shares
from ._response import response_of, set_column, stacked_draws, take_rows
from .partial_dependence import _column, _names
from .._validate import is_int

__all__ = ["VariableImportance", "inclusion_draws", "permutation_importance", "split_inclusion"]


@dataclass(eq=False)
class VariableImportance:
    """Posterior draws of a variable importance.

    features : (F,) names; draws : (D, F) one row per posterior draw; kind : "split inclusion" or
    the score lost ("R^2" or "log-loss"); prob : mass of the credible intervals.
    """

    features: list
    draws: np.ndarray
    kind: str
    prob: float = 0.9

    @property
    def mean(self) -> np.ndarray:
        """(F,) posterior mean."""
        return self.draws.mean(0)

    @property
    def lower(self) -> np.ndarray:
        """(F,) lower end of the equal-tailed ``prob`` credible interval."""
        return np.quantile(self.draws, (1 - self.prob) / 2, axis=0)

    @property
    def upper(self) -> np.ndarray:
        """(F,) upper end of the equal-tailed ``prob`` credible interval."""
        return np.quantile(self.draws, (1 + self.prob) / 2, axis=0)

    def to_frame(self) -> pd.DataFrame:
        """One row per feature (index: its name): ``mean``, ``sd``, ``lower``, ``upper``."""
        return pd.DataFrame(dict(mean=self.mean, sd=self.draws.std(0), lower=self.lower, upper=self.upper),
                             index=pd.Index(self.features, name="feature"))


def _check_prob(prob, where: str) -> float:
    if isinstance(prob, bool) or not isinstance(prob, (float, int)) or not 0 < prob < 1:
        raise ValueError(f"{where}prob must be in (0, 1); got {prob!r}.")
    return float(prob)


def inclusion_draws(est) -> np.ndarray:
    """(D', F) per posterior draw with at least one split, the share of its split rules on each
    feature (rows sum to 1): :func:`bdtree_jax.posterior.inclusion.split_shares` of its posterior."""
    check_is_fitted(est, "posterior_")
    return split_shares(est.posterior_)


def _feature_names(est, n_features: int) -> list:
    names = getattr(est, "feature_names_in_", None)
    if names is None:
        names = getattr(est.posterior_, "feature_names", None)
    return [str(n) for n in names] if names is not None and len(names) else [f"x{j}" for j in range(n_features)]


def split_inclusion(est, prob: float = 0.9) -> VariableImportance:
    """Split inclusion of a fitted estimator (any of this library's): per posterior draw, the share
    of its split rules on each feature, ``draws`` (D', F) over the draws that have a split (an
    all-stump posterior gives a single row of NaN)."""
    prob = _check_prob(prob, "split_inclusion: ")
    draws = inclusion_draws(est)
    F = draws.shape[1]
    if len(draws) == 0:
        draws = np.full((1, F), np.nan)
    return VariableImportance(_feature_names(est, F), draws, "split inclusion", prob)


def _losses(y_codes, vals: np.ndarray, classifier: bool) -> np.ndarray:
    """(D, m) per-draw loss of each row: squared error, or the log-loss of the true class."""
    if classifier:
        p = np.take_along_axis(vals, y_codes[None, :, None], axis=2)[..., 0]
        return -np.log(np.clip(p, 1e-15, 1.0))
    return (vals[..., 0] - y_codes[None, :]) ** 2


def permutation_importance(est, X, y, *, n_repeats: int = 1, seed: int = 0, prob: float = 0.9) -> VariableImportance:
    """Permutation importance on posterior draws (definition in the module docstring): ``draws``
    (D, F), the R^2 lost (regressors) or the log-loss gained (classifiers) by each draw when each
    column of ``X`` is shuffled, averaged over ``n_repeats`` shuffles (``numpy.random.default_rng(seed)``).
    Survival BART has no such score here (``ValueError``): use :func:`split_inclusion`."""
    from ..estimators import BARTSurvival

    where = "permutation_importance: "
    prob = _check_prob(prob, where)
    if not is_int(n_repeats) or n_repeats < 1:
        raise ValueError(f"{where}n_repeats must be an integer >= 1; got {n_repeats!r}.")
    if isinstance(est, BARTSurvival):
        raise ValueError(f"{where}est is a BARTSurvival, whose censored times have no R^2 or log-loss here; "
                         "use split_inclusion.")
    response = response_of(est, where)
    X = est._check_predict_X(X)
    X = X if isinstance(X, pd.DataFrame) else np.asarray(X)
    n, F = X.shape
    y = np.asarray(y)
    if y.shape != (n,):
        raise ValueError(f"{where}y must be 1-D with one entry per row of X ({n}); got shape {y.shape}.")
    if response.classifier:
        codes = {str(c): k for k, c in enumerate(response.outputs)}
        missing = sorted({str(v) for v in y} - set(codes))
        if missing:
            raise ValueError(f"{where}y has labels {missing[:5]} that are not classes of the fit "
                             f"{list(response.outputs)}.")
        target = np.array([codes[str(v)] for v in y])
    else:
        target = y.astype(np.float64)
        if not np.all(np.isfinite(target)):
            raise ValueError(f"{where}y contains NaN or infinite values.")
        if n < 2 or np.var(target) == 0:
            raise ValueError(f"{where}y must have at least two rows and some variation for an R^2.")
    R = int(n_repeats)
    perms = np.random.default_rng(seed).permuted(np.tile(np.arange(n), (F * R, 1)), axis=1)
    cols = [_column(X, j) for j in range(F)]

    def make_rows(k):
        b, i = k // n, k % n
        out = take_rows(X, i)
        for j in np.unique((b[b > 0] - 1) // R):
            sel = (b > 0) & ((b - 1) // R == j)
            values = cols[j].iloc[i].to_numpy(copy=True)
            values[sel] = cols[j].iloc[perms[b[sel] - 1, i[sel]]].to_numpy()
            out = set_column(out, int(j), values)
        return out

    B, D = 1 + F * R, response.num_draws
    totals = np.zeros((D, B))
    for s, e, vals in stacked_draws(response, make_rows, B * n):
        k = np.arange(s, e)
        b = k // n
        starts = np.flatnonzero(np.r_[True, b[1:] != b[:-1]])
        totals[:, b[starts]] += np.add.reduceat(_losses(target[k % n], vals, response.classifier), starts, axis=1)
    if response.classifier:
        score = -totals / n  # minus the mean log-loss
        kind = "log-loss"
    else:
        score = 1.0 - totals / np.sum((target - target.mean()) ** 2)
        kind = "R^2"
    lost = score[:, :1] - score[:, 1:].reshape(D, F, R).mean(-1)
    return VariableImportance(_names(est, X), lost, kind, prob)
