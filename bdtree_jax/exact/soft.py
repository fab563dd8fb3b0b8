"""Exact posterior over soft-tree topologies (RJHMC-Tree) by numerical integration, for tiny data
(see :mod:`bdtree_jax.exact`).
"""

from __future__ import annotations

import numpy as np
from scipy.special import gammaln, logsumexp

__all__ = ["topology_string", "soft_topology_posterior", "dm_log_lik", "gaussian_leaf_log_lik"]


def topology_string(is_split) -> str:
    """Shape of a padded topology: ``L`` for a leaf, ``S(left,right)`` for a split."""
    is_split = np.asarray(is_split, bool)

    def rec(i: int) -> str:
        if i >= len(is_split) or not is_split[i]:
            return "L"
        return f"S({rec(2 * i + 1)},{rec(2 * i + 2)})"

    return rec(0)


def _topologies(max_depth: int) -> list[np.ndarray]:
    """Every topology of depth <= max_depth whose root splits, as (N,) bool arrays."""
    n = 2 ** (max_depth + 1) - 1

    def rec(i: int, depth: int) -> list[list[int]]:
        out = [[]]  # i is a leaf
        if depth < max_depth:
            for left in rec(2 * i + 1, depth + 1):
                for right in rec(2 * i + 2, depth + 1):
                    out.append([i] + left + right)
        return out

    result = []
    for splits in rec(0, 0):
        if 0 in splits:
            arr = np.zeros(n, bool)
            arr[splits] = True
            result.append(arr)
    return result


def _soft_membership_np(is_split: np.ndarray, right: np.ndarray) -> np.ndarray:
    """(Q, n, N) leaf memberships from right-probabilities (Q, n, M) (numpy, independent of
    :func:`bdtree_jax.soft.leaf_membership`)."""
    q, n, _ = right.shape
    N = len(is_split)
    mass = np.zeros((q, n, N))
    mass[:, :, 0] = 1.0
    for i in range(N):
        if is_split[i]:
            mass[:, :, 2 * i + 1] = mass[:, :, i] * (1 - right[:, :, i])
            mass[:, :, 2 * i + 2] = mass[:, :, i] * right[:, :, i]
            mass[:, :, i] = 0.0
    return mass


def dm_log_lik(y, n_classes: int, concentration: float = 1.0):
    """Soft Dirichlet–multinomial log-likelihood (normalising constant kept) as a function of
    memberships ``phi`` (Q, n, N) -> (Q,); ``y`` (n,) int codes."""
    onehot = np.eye(n_classes)[np.asarray(y)]
    a, k = concentration, n_classes

    def fn(phi, is_leaf):
        counts = np.einsum("qnl,nk->qlk", phi, onehot)[:, is_leaf]
        per = gammaln(counts + a).sum(-1) - gammaln(counts.sum(-1) + k * a) + gammaln(k * a) - k * gammaln(a)
        return per.sum(-1)

    return fn


def gaussian_leaf_log_lik(y, mean: float, scale: float, noise: float):
    """Log-likelihood of ``y ~ N(phi @ mu, noise^2)`` with leaf means ``mu_l ~ N(mean, scale^2)``
    integrated out: ``y ~ N(mean, noise^2 I + scale^2 phi phi^T)``; phi (Q, n, N) -> (Q,)."""
    y = np.asarray(y, float)

    def fn(phi, is_leaf):
        P = phi[:, :, is_leaf]
        cov = noise**2 * np.eye(len(y)) + scale**2 * np.einsum("qnl,qml->qnm", P, P)
        r = y - mean
        sign, logdet = np.linalg.slogdet(cov)
        sol = np.linalg.solve(cov, np.broadcast_to(r, cov.shape[:2])[..., None])[..., 0]
        return -0.5 * (len(y) * np.log(2 * np.pi) + logdet + np.einsum("qn,n->q", sol, r))

    return fn


def soft_topology_posterior(
    X, log_lik, *, max_depth: int, h: float, alpha: float, beta: float, kind: str = "df",
    n_points: int = 2**14, seed: int = 0, chunk: int = 2048,
) -> dict[str, float]:
    """Exact posterior over soft-tree topologies (root split, depth <= max_depth) for tiny data.

    ``p(T | D) ∝ p(T) ∫ L(D | T, tau, rule; h) p(tau) p(rule) d(tau, rule)``, the topology prior
    conditioned on the root splitting, thresholds U(0, 1), features uniform (``kind="df"``: summed
    exactly) or simplex weights Dirichlet(1) (``kind="dfi"``, two features: ``w = (u, 1-u)``).
    The integral over the continuous rules is a scrambled Sobol quasi-Monte Carlo average with
    ``n_points`` points per feature assignment.  ``log_lik(phi (Q, n, N), is_leaf (N,)) -> (Q,)``
    (:func:`dm_log_lik`, :func:`gaussian_leaf_log_lik`).  ``X`` (n, F) already scaled to [0, 1].
    Returns ``{topology_string: probability}``.
    """
    import itertools

    from scipy.stats import qmc

    X = np.asarray(X, float)
    n, F = X.shape
    if kind == "dfi" and F != 2:
        raise ValueError("soft_topology_posterior: kind='dfi' is implemented for exactly 2 features.")
    depth = np.floor(np.log2(np.arange(2 ** (max_depth + 1) - 1) + 1))
    p_split = np.where(depth < max_depth, alpha * (1 + depth) ** (-beta), 0.0)
    M = 2**max_depth - 1
    out = {}
    for is_split in _topologies(max_depth):
        active = np.zeros(len(is_split), bool)
        active[0] = True
        for i in range(len(is_split)):
            if active[i] and is_split[i]:
                active[2 * i + 1] = active[2 * i + 2] = True
        is_leaf = active & ~is_split
        log_prior = sum(np.log(p_split[i]) for i in range(1, len(is_split)) if is_split[i]) + sum(
            np.log1p(-p_split[i]) for i in range(len(is_split)) if is_leaf[i]
        )
        splits = np.flatnonzero(is_split)
        k = len(splits)
        dims = k if kind == "df" else 2 * k
        pts = qmc.Sobol(dims, scramble=True, seed=seed).random(n_points)
        assignments = list(itertools.product(range(F), repeat=k)) if kind == "df" else [None]
        logs = []
        for feats in assignments:
            for s in range(0, n_points, chunk):
                u = pts[s : s + chunk]
                right = np.full((len(u), n, M), 0.5)
                for j, node in enumerate(splits):
                    tau = u[:, j][:, None]
                    if kind == "df":
                        proj = X[:, feats[j]][None, :]
                    else:
                        w = u[:, k + j][:, None]
                        proj = w * X[:, 0][None, :] + (1 - w) * X[:, 1][None, :]
                    right[:, :, node] = 1.0 / (1.0 + np.exp(-(proj - tau) / h))
                logs.append(log_lik(_soft_membership_np(is_split, right), is_leaf))
        logs = np.concatenate(logs)
        out[topology_string(is_split)] = log_prior + logsumexp(logs) - np.log(len(logs))
    total = logsumexp(list(out.values()))
    return {t: float(np.exp(v - total)) for t, v in sorted(out.items(), key=lambda kv: -kv[1])}
