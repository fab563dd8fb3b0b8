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

__all__ = ["enumerate_posterior"]


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


def enumerate_posterior(X, point_stats, prior: TreePrior, likelihood) -> dict[str, float]:
    """Every tree with positive prior mass and its exact posterior probability.

    Parameters
    ----------
    X : (n, F) raw inputs (split candidates are midpoints of distinct values, as everywhere).
    point_stats : (n, S) rows of ``likelihood.point_stats(y)``.
    prior : TreePrior
    likelihood : DirichletMultinomial or NormalMeanShift

    Returns
    -------
    dict mapping :func:`bdtree_jax.tree.to_string` strings to posterior probabilities (sum 1).
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

    all_trees = trees(np.arange(bins.shape[0]), 0)
    names = [t[0] for t in all_trees]
    log_post = np.array([lp + _total_log_lik(likelihood, leaves) for _, lp, leaves in all_trees])
    probs = np.exp(log_post - logsumexp(log_post))
    return dict(zip(names, probs))
