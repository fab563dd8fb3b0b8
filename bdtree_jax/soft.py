"""Soft (sigmoid-split) trees on the padded heap, for RJHMC-Tree and the NumPyro primitives.

A soft tree shares the heap layout of :mod:`bdtree_jax.tree` (``N = 2**(D+1) - 1`` slots; slot
``i`` has children ``2i+1`` / ``2i+2``) but its rules are continuous: every slot that can split
(``M = 2**D - 1`` of them) carries a threshold ``tau in (0, 1)`` and either a feature index
(HMC-DF) or a weight vector on the simplex (HMC-DFI).  Inputs are min-max scaled to [0, 1] with
the training statistics.  A row goes **right** at slot ``i`` with probability

* HMC-DF:  ``psi_i(x) = sigmoid((x[feature_i] - tau_i) / h)``
* HMC-DFI: ``psi_i(x) = sigmoid((w_i . x - tau_i) / h)``

and its membership of leaf ``l`` is the product of the probabilities along the path
(``docs/theory/rjhmc.md``); the memberships of a row sum to 1 over the leaves.  As ``h -> 0`` the rule becomes the hard
``x <= tau -> left``.

Only the *topology* (``is_split``, (N,) bool) decides which parameters matter: parameters of
slots that do not split (and leaf parameters of slots that are not leaves) are padding, which is
what lets a topology change keep every array shape.

Topology prior (``docs/theory/rjhmc.md``, Priors): a node at depth ``d`` splits with probability ``alpha (1+d)^-beta``,
0 at ``max_depth`` (truncation).  RJHMC-Tree never prunes the root, so the prior used here is the
CGM prior **conditioned on the root splitting** (the root's own factor is dropped).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import gammaln

from ._types import Array
from .tree import Tree, active_nodes, n_nodes, nog_nodes, node_depths

__all__ = [
    "n_split_slots",
    "minmax_scaler",
    "right_prob_df",
    "right_prob_dfi",
    "leaf_membership",
    "leaf_mask",
    "log_topology_prior",
    "topology_split_prob",
    "stump",
    "growable_leaves",
    "prunable_nodes",
    "dm_soft_log_lik",
    "annealed_h",
    "hard_leaf",
]


def n_split_slots(max_depth: int) -> int:
    """Number of slots that can split, ``M = 2**max_depth - 1``."""
    return 2**max_depth - 1


def minmax_scaler(X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Training ``(min, range)`` per column, (F,) each; constant columns get range 1."""
    lo = X.min(axis=0)
    rng = X.max(axis=0) - lo
    return lo, np.where(rng > 0, rng, 1.0)


def right_prob_df(X: Array, feature: Array, tau: Array, h) -> Array:
    """HMC-DF split probabilities.  X (n, F) scaled; feature (M,) int; tau (M,) -> (n, M)."""
    return jax.nn.sigmoid((X[:, feature] - tau) / h)


def right_prob_dfi(X: Array, weights: Array, tau: Array, h) -> Array:
    """HMC-DFI split probabilities.  X (n, F) scaled; weights (M, F) rows on the simplex; tau (M,)
    -> (n, M)."""
    return jax.nn.sigmoid((X @ weights.T - tau) / h)


def leaf_membership(is_split: Array, right_prob: Array) -> Array:
    """Soft membership of every row in every slot that is a leaf of the topology.

    Parameters
    ----------
    is_split : (N,) bool topology.
    right_prob : (n, M) probability of going right at each splittable slot.

    Returns
    -------
    (n, N) float: ``phi[r, l]`` for leaves ``l``, 0 for internal and unused slots; rows sum to 1.
    """
    n_slots = is_split.shape[-1]
    max_depth = int(np.log2(n_slots + 1)) - 1
    mass = [jnp.ones(right_prob.shape[:-1] + (1,), right_prob.dtype)]  # level 0
    for d in range(max_depth):
        lo, hi = 2**d - 1, 2 ** (d + 1) - 1
        parent = mass[-1]
        go = jnp.where(is_split[lo:hi], 1.0, 0.0)
        right = right_prob[..., lo:hi]
        left_mass = parent * go * (1.0 - right)
        right_mass = parent * go * right
        # children of slots lo..hi-1 are interleaved (left, right) in heap order
        mass.append(jnp.stack([left_mass, right_mass], axis=-1).reshape(parent.shape[:-1] + (-1,)))
    node_mass = jnp.concatenate(mass, axis=-1)
    return node_mass * jnp.where(is_split, 0.0, 1.0)


def leaf_mask(is_split: Array) -> Array:
    """(N,) bool: leaves of the topology (active, not splitting)."""
    return active_nodes(Tree(is_split, None, None)) & ~is_split


def topology_split_prob(max_depth: int, alpha: float, beta: float) -> np.ndarray:
    """(N,) ``alpha (1+d)^-beta`` per slot, 0 at ``max_depth``."""
    d = node_depths(max_depth)
    return np.where(d < max_depth, alpha * (1.0 + d) ** (-beta), 0.0)


def log_topology_prior(is_split: Array, split_prob: Array) -> Array:
    """Log prior of a topology conditioned on the root splitting; -inf if invalid.

    ``split_prob`` (N,) from :func:`topology_split_prob`.  Invalid: a split at ``max_depth``, a
    split below a non-splitting node, or an unsplit root.
    """
    active = active_nodes(Tree(is_split, None, None))
    sp = jnp.asarray(split_prob)
    safe = jnp.clip(sp, 1e-30, 1.0)
    terms = jnp.where(is_split, jnp.log(safe), jnp.log1p(-sp))
    terms = jnp.where(active, terms, 0.0).at[0].set(0.0)
    valid = is_split[0] & ~jnp.any(is_split & ~active) & ~jnp.any(is_split & (sp <= 0))
    return jnp.where(valid, terms.sum(), -jnp.inf)


def stump(max_depth: int) -> Array:
    """(N,) bool: the root splits, nothing else (RJHMC-Tree's initial topology)."""
    return jnp.zeros(n_nodes(max_depth), bool).at[0].set(True)


def growable_leaves(is_split: Array) -> Array:
    """(N,) bool: leaves above ``max_depth``."""
    max_depth = int(np.log2(is_split.shape[-1] + 1)) - 1
    return leaf_mask(is_split) & (jnp.asarray(node_depths(max_depth)) < max_depth)


def prunable_nodes(is_split: Array) -> Array:
    """(N,) bool: splitting nodes whose children are both leaves, the root excluded."""
    return nog_nodes(Tree(is_split, None, None)).at[0].set(False)


def dm_soft_log_lik(phi: Array, onehot: Array, is_leaf: Array, concentration, keep_constant: bool = True) -> Array:
    """Dirichlet-multinomial log marginal likelihood on soft counts (``docs/theory/rjhmc.md``).

    ``n_lk = sum_i phi[i, l] onehot[i, k]``; per leaf ``sum_k lgamma(n_lk + a) - lgamma(n_l + K a)``
    plus, with ``keep_constant``, the normalising constant ``lgamma(K a) - K lgamma(a)`` (the
    reference code drops it; it is ``-ln (K-1)!`` per leaf for ``a = 1``).

    phi (n, N); onehot (n, K); is_leaf (N,) bool -> ().
    """
    counts = phi.T @ onehot  # (N, K)
    k = onehot.shape[-1]
    a = concentration
    per_leaf = gammaln(counts + a).sum(-1) - gammaln(counts.sum(-1) + k * a)
    if keep_constant:
        per_leaf = per_leaf + gammaln(k * a) - k * gammaln(a)
    return jnp.sum(jnp.where(is_leaf, per_leaf, 0.0))


def annealing_window(num_adapt_steps: int) -> tuple[int, int]:
    """``(t_start, t_end)`` of the linear ``h`` annealing along NumPyro's adaptation windows.

    The paper (Cochrane et al. 2023, eq. 20) anneals from the start ``t_s`` of the first slow window to
    ``t_e - 100`` where ``t_e`` ends the last slow window, for 500 warm-up steps (75 -> 349).  We
    keep the same *fractions* for any number of steps: the end is ``t_e - (t_e - t_s) * 100/374``,
    so the final slow window still adapts the mass matrix at ``h_final``.
    """
    from numpyro.infer.hmc_util import build_adaptation_schedule

    windows = build_adaptation_schedule(int(num_adapt_steps))
    if len(windows) < 3:  # too few steps for slow windows: anneal over the whole warm-up
        return 0, max(int(num_adapt_steps) - 1, 1)
    t_s, t_e = windows[1].start, windows[-2].end
    return int(t_s), int(round(t_e - (t_e - t_s) * 100 / 374))


def annealed_h(t: Array, window: tuple[int, int], h_init: float, h_final: float) -> Array:
    """Split sharpness at NUTS warm-up step ``t``: ``h_init`` before the window, linear inside,
    ``h_final`` after it (and during sampling)."""
    t_s, t_e = window
    frac = jnp.clip((t - t_s) / max(t_e - t_s, 1), 0.0, 1.0)
    return h_init + (h_final - h_init) * frac


def hard_leaf(is_split: Array, right_prob: Array) -> Array:
    """(n,) int32 leaf slot of every row following the more probable branch at each split (the
    ``h -> 0`` rule; equals ``argmax_l phi_l`` except at exact ties).  right_prob (n, M)."""
    max_depth = int(np.log2(is_split.shape[-1] + 1)) - 1
    n = right_prob.shape[0]
    node = jnp.zeros(n, jnp.int32)
    m = right_prob.shape[-1]
    for _ in range(max_depth):
        splits = is_split[node]
        p = jnp.take_along_axis(right_prob, jnp.minimum(node, m - 1)[:, None], axis=1)[:, 0]
        node = jnp.where(splits, 2 * node + 1 + (p > 0.5).astype(jnp.int32), node)
    return node
