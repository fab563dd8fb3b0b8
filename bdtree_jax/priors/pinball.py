"""The pinball prior's numbers (:class:`PinballTables`) and its size and shape laws (the prior is
described in :mod:`bdtree_jax.priors`).
"""

from __future__ import annotations

from typing import NamedTuple

import jax.numpy as jnp
import numpy as np

from .._types import Array
from ..tree import Tree
from .node_sums import reduce_subtrees

__all__ = [
    "PinballTables", "pinball_log_size", "pinball_log_shape_parts", "pinball_shape", "pinball_log_shape",
    "check_cgm_structure", "split_mask", "log_pinball_structure",
]


class PinballTables(NamedTuple):
    """The pinball prior's numbers (a pytree; it stands in :attr:`TreeData.split_prob
    <bdtree_jax.data.TreeData>` for the CGM98 split probabilities, so the kernels' prior switches
    on its type at trace time and a change of hyperparameters reuses the compiled program).

    Attributes
    ----------
    may_split : (N,) float32 1 for heap slots above ``max_depth``, 0 at ``max_depth`` (the
        "positive split probability" test of :func:`splittable`).
    log_size : (L + 1,) float32 ``log p_size(K)``, ``L = 2**max_depth``; ``-inf`` for ``K = 0``
        and ``K > K_max``.
    shape_total, shape_part : (L + 1,) float32 the BetaBinomial shape law in separable form,
        ``log p_shape(k_L | k) = shape_total[k] + shape_part[k_L] + shape_part[k - k_L]``
        (:func:`pinball_log_shape_parts`; ``-inf`` outside ``k >= 2``, ``1 <= k_L <= k - 1``):
        memory ``O(L)`` rather than an ``(L + 1)^2`` table, and every term is ``O(log L)`` (no
        cancellation in float32).  :func:`pinball_shape` reads it.
    """

    may_split: Array
    log_size: Array
    shape_total: Array
    shape_part: Array


def pinball_log_size(rate: float, max_leaves: int, capacity: int) -> np.ndarray:
    """(capacity + 1,) float64 ``log p_size(K)``: ``K - 1 ~ Poisson(rate)`` renormalised over
    ``1 <= K <= max_leaves``; ``-inf`` elsewhere."""
    from scipy.special import gammaln, logsumexp

    j = np.arange(max_leaves, dtype=np.float64)  # K - 1
    log_p = -rate + j * np.log(rate) - gammaln(j + 1)
    out = np.full(capacity + 1, -np.inf)
    out[1 : max_leaves + 1] = log_p - logsumexp(log_p)
    return out


def pinball_log_shape_parts(balance: float, capacity: int) -> tuple[np.ndarray, np.ndarray]:
    """(capacity + 1,) float64 ``total, part`` with ``log p_shape(k_L | k) = total[k] + part[k_L] +
    part[k - k_L]``.  With ``n = k - 2``, ``j = k_L - 1``, ``γ = balance``::

        log BetaBinomial(j; n, γ, γ) = [lgamma(n + 1) - lgamma(n + 2γ) - log B(γ, γ)]
                                       + [lgamma(j + γ) - lgamma(j + 1)] + [lgamma(n - j + γ) - lgamma(n - j + 1)]

    ``total[k]`` is the first bracket (``-inf`` for ``k < 2``), ``part[k_L]`` the second with
    ``j = k_L - 1`` (``-inf`` for ``k_L = 0``)."""
    from scipy.special import betaln, gammaln

    g = float(balance)
    k = np.arange(capacity + 1, dtype=np.float64)
    n = k - 2
    total = np.where(k >= 2, gammaln(np.maximum(n, 0) + 1) - gammaln(np.maximum(n, 0) + 2 * g) - betaln(g, g), -np.inf)
    j = k - 1
    part = np.where(k >= 1, gammaln(np.maximum(j, 0) + g) - gammaln(np.maximum(j, 0) + 1), -np.inf)
    return total, part


def pinball_shape(tables: "PinballTables", k: Array, k_left: Array) -> Array:
    """``log p_shape(k_left | k)`` from :class:`PinballTables` (any broadcasting shapes; indices
    clipped into the tables; ``-inf`` unless ``k >= 2`` and ``1 <= k_left <= k - 1``)."""
    size = tables.shape_part.shape[-1]
    k = jnp.asarray(k)
    k_left = jnp.asarray(k_left)
    return (tables.shape_total[jnp.clip(k, 0, size - 1)] + tables.shape_part[jnp.clip(k_left, 0, size - 1)]
            + tables.shape_part[jnp.clip(k - k_left, 0, size - 1)])


def pinball_log_shape(balance: float, capacity: int) -> np.ndarray:
    """(capacity + 1, capacity + 1) float64 ``log p_shape(k_L | k)``: ``k_L - 1 ~
    BetaBinomial(k - 2, balance, balance)`` for ``k >= 2``, ``1 <= k_L <= k - 1``; ``-inf`` elsewhere."""
    from scipy.special import betaln, gammaln

    out = np.full((capacity + 1, capacity + 1), -np.inf)
    g = float(balance)
    for k in range(2, capacity + 1):
        n = k - 2
        j = np.arange(n + 1, dtype=np.float64)
        out[k, 1:k] = (gammaln(n + 1) - gammaln(j + 1) - gammaln(n - j + 1) + betaln(j + g, n - j + g) - betaln(g, g))
    return out


def check_cgm_structure(split_prob, who: str) -> None:
    """Raise a ``ValueError`` naming ``structure`` when a sampler that draws trees from the CGM98
    generative process (``who``) is given the pinball prior's tables."""
    if isinstance(split_prob, PinballTables):
        raise ValueError(
            f"{who} draws subtrees or rules from the CGM98 prior's generative process and does not support "
            "structure='pinball'; use method='cgm' with proposal 'cgm' or 'cgm+perturb', method='wu', or "
            "structure='cgm'.")


def split_mask(split_prob):
    """The (N,) split probabilities of the CGM98 prior, or the pinball prior's ``may_split``."""
    return split_prob.may_split if isinstance(split_prob, PinballTables) else split_prob




def log_pinball_structure(tree: Tree, active: Array, tables: PinballTables) -> Array:
    """``log p_size(K) + sum_internal log p_shape(k_L | k)`` from the subtree leaf counts (one
    bottom-up sum over the heap); ``-inf`` for ``K > K_max``."""
    n_nodes = tree.is_split.shape[-1]
    size = tables.log_size.shape[-1]  # L + 1
    counts = reduce_subtrees((active & ~tree.is_split).astype(jnp.int32), jnp.add)  # (N,) leaves below each node
    inner = (n_nodes - 1) // 2  # slots that have children in the heap
    shape = pinball_shape(tables, counts[:inner], counts[1::2][:inner])  # k, k_L = counts[2i + 1]
    split = tree.is_split[:inner]
    log_shape = jnp.sum(jnp.where(split, shape, 0.0))
    return tables.log_size[jnp.clip(counts[0], 0, size - 1)] + log_shape


