"""Exact posterior over trees by brute-force enumeration (tiny data only).

An implementation independent of the JAX kernels — plain recursion in numpy over every tree the
prior allows — used by the tests of every hard-split sampler and useful to users checking a
sampler on a toy problem.  The number of trees grows super-exponentially: keep ``n`` and
``max_depth`` small (e.g. 6–10 rows, 2 features, depth 2–3).
"""

from __future__ import annotations

import math

import numpy as np
from scipy.special import gammaln, logsumexp

from .data import make_split_grid
from .likelihoods import DirichletMultinomial, NormalMeanShift
from .priors import TreePrior
from .tree import _fmt

__all__ = ["enumerate_trees", "enumerate_posterior", "tv_distance"]


def _valid_cuts(bins_col: np.ndarray, m: int) -> list[int]:
    s = np.sort(bins_col)
    n = len(s)
    if n < 2 * m:
        return []
    return list(range(int(s[m - 1]), int(s[n - m])))


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


def enumerate_trees(X, point_stats, prior: TreePrior, likelihood) -> list[tuple[str, float, float]]:
    """Every tree with positive prior mass as ``(string, log_prior, log_lik)``.

    Parameters
    ----------
    X : (n, F) raw inputs (split candidates are midpoints of distinct values, as everywhere).
    point_stats : (n, S) rows of ``likelihood.point_stats(y)``.
    prior : TreePrior
    likelihood : DirichletMultinomial or NormalMeanShift

    Returns
    -------
    list of ``(to_string(tree), log p(T), log p(Y | X, T))``.
    """
    grid = make_split_grid(X)
    bins = grid.bin(X)
    point_stats = np.asarray(point_stats, float)
    m = prior.min_leaf_size

    def trees(rows: np.ndarray, depth: int):
        """List of (string, log_prior, [leaf terms]) for the subtree on ``rows``."""
        options = {f: _valid_cuts(bins[rows, f], m) for f in range(bins.shape[1])}
        options = {f: c for f, c in options.items() if c}
        leaf = _leaf_terms(likelihood, point_stats[rows].sum(0))
        if depth >= prior.max_depth or not options:
            return [("L", 0.0, [leaf])]
        p = prior.alpha * (1.0 + depth) ** (-prior.beta)
        out = [("L", math.log1p(-p), [leaf])]
        for f, cuts in options.items():
            for c in cuts:
                left = rows[bins[rows, f] <= c]
                right = rows[bins[rows, f] > c]
                lp_rule = math.log(p) - math.log(len(options)) - math.log(len(cuts))
                for ls, llp, lleaves in trees(left, depth + 1):
                    for rs, rlp, rleaves in trees(right, depth + 1):
                        text = f"x{f}<={_fmt(grid.thresholds[f, c])}({ls},{rs})"
                        out.append((text, lp_rule + llp + rlp, lleaves + rleaves))
        return out

    return [(s, lp, _total_log_lik(likelihood, leaves)) for s, lp, leaves in trees(np.arange(bins.shape[0]), 0)]


def enumerate_posterior(X, point_stats, prior: TreePrior, likelihood, *, beta: float = 1.0) -> dict[str, float]:
    """Exact posterior ``p(T | X, Y) ∝ p(T) p(Y | X, T)**beta`` over every tree (see
    :func:`enumerate_trees`); ``beta`` is an inverse temperature (1 = the posterior).

    Returns
    -------
    dict mapping :func:`bdtree_jax.tree.to_string` strings to probabilities (summing to 1).
    """
    all_trees = enumerate_trees(X, point_stats, prior, likelihood)
    log_post = np.array([lp + beta * ll for _, lp, ll in all_trees])
    probs = np.exp(log_post - logsumexp(log_post))
    return {s: float(p) for (s, _, _), p in zip(all_trees, probs)}


def tv_distance(p: dict, q: dict) -> float:
    """Total-variation distance between two distributions given as ``{tree string: probability}``."""
    keys = set(p) | set(q)
    return 0.5 * sum(abs(p.get(k, 0.0) - q.get(k, 0.0)) for k in keys)
