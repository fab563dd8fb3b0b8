"""Small pieces the exact enumerators share (:mod:`~bdtree_jax.exact.hard` and
:mod:`~bdtree_jax.exact.categorical`): valid cuts, cut weights, leaf terms, box arrays."""

from __future__ import annotations

import math

import numpy as np
from scipy.special import gammaln

from ..likelihoods import DirichletMultinomial

def _valid_cuts(bins_col: np.ndarray, m: int) -> list[int]:
    s = np.sort(bins_col)
    n = len(s)
    if n < 2 * m:
        return []
    return list(range(int(s[m - 1]), int(s[n - m])))


def _gaps(X) -> list[np.ndarray]:
    """Per feature, the widths ``u[c+1] - u[c]`` of the gaps between its sorted distinct values
    (cut ``c`` of the split grid lies in gap ``c``)."""
    X = np.asarray(X, float)
    return [np.diff(np.unique(X[:, f])) for f in range(X.shape[1])]


def _cut_log_probs(gaps: np.ndarray, cuts: list[int], split_prior: str) -> list[float]:
    """log p(cut | feature, node) of each of the node's valid ``cuts``: uniform, or (``"range"``)
    the cut's gap width over the summed widths of the valid cuts."""
    if split_prior == "uniform":
        return [-math.log(len(cuts))] * len(cuts)
    w = np.array([gaps[c] for c in cuts], float)
    return list(np.log(w) - np.log(w.sum()))


def _leaf_terms(lik, stats: np.ndarray):
    """Per-leaf additive pieces: classification log-lik; regression (n_i, s1, s2)."""
    if isinstance(lik, DirichletMultinomial):
        a, k = lik.concentration, lik.n_classes
        return gammaln(k * a) - k * gammaln(a) + gammaln(stats + a).sum() - gammaln(stats.sum() + k * a)
    return tuple(stats)


def _total_log_lik(lik, leaves) -> float:
    if isinstance(lik, DirichletMultinomial):
        return float(sum(leaves))
    n = sum(t[0] for t in leaves)
    q = sum(t[2] - t[1] ** 2 / (t[0] + lik.a) for t in leaves)
    r = sum(0.5 * (math.log(lik.a) - math.log(t[0] + lik.a)) for t in leaves)
    const = (
        -0.5 * n * math.log(math.pi)
        + 0.5 * lik.nu * math.log(lik.nu * lik.lam)
        + gammaln(0.5 * (n + lik.nu))
        - gammaln(0.5 * lik.nu)
    )
    return float(const + r - 0.5 * (n + lik.nu) * math.log(q + lik.nu * lik.lam))


def _box_arrays(boxes, n_features: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """``{feature: (low, high)}`` dicts (integer or ``"x{f}"`` keys) as (low, high) arrays."""
    out = []
    for box in boxes or []:
        low, high = np.full(n_features, -np.inf), np.full(n_features, np.inf)
        for key, (a, b) in box.items():
            f = int(key[1:]) if isinstance(key, str) else int(key)
            low[f] = -np.inf if a is None else a
            high[f] = np.inf if b is None else b
        out.append((low, high))
    return out
