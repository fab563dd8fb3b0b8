"""The CGM98 tree prior shared by every hard-split sampler.

A node at depth ``d`` splits with probability ``alpha * (1 + d) ** -beta``; the probability is 0 at
``max_depth`` and 0 where no candidate cut leaves both children with at least ``min_leaf_size``
rows.  The rule is uniform over the features that have a valid cut in the node, then uniform over
that feature's valid cuts.  The prior is therefore *truncated* at ``max_depth`` (renormalised by
construction: a node at ``max_depth`` is a leaf with probability 1).

Valid cuts of feature ``f`` in a node form the integer interval ``[lo_f, hi_f)`` where ``lo_f`` is
the ``m``-th smallest bin of the node's rows and ``hi_f`` the ``(n_node - m + 1)``-th smallest
(``m = min_leaf_size``); for ``m = 1`` these are the node's minimum and maximum bins.
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

from ._types import Array
from .data import TreeData
from .tree import Tree, active_nodes, leaf_index, max_depth_of, node_depths

__all__ = ["TreePrior", "mask_bounds", "node_bounds", "node_stats", "log_tree_prior", "split_probability"]

_BIG = np.int32(2**30)


@dataclass(frozen=True)
class TreePrior:
    """Hyperparameters of the tree prior (static)."""

    max_depth: int = 6
    alpha: float = 0.95
    beta: float = 1.0
    min_leaf_size: int = 1

    def __post_init__(self):
        if not isinstance(self.max_depth, (int, np.integer)) or self.max_depth < 1:
            raise ValueError(f"max_depth must be an integer >= 1; got {self.max_depth!r}.")
        if not 0.0 < float(self.alpha) < 1.0:
            raise ValueError(f"alpha must be in (0, 1); got {self.alpha!r}.")
        if float(self.beta) < 0.0:
            raise ValueError(f"beta must be >= 0; got {self.beta!r}.")
        if not isinstance(self.min_leaf_size, (int, np.integer)) or self.min_leaf_size < 1:
            raise ValueError(f"min_leaf_size must be an integer >= 1; got {self.min_leaf_size!r}.")


def split_probability(prior: TreePrior) -> np.ndarray:
    """(N,) ``alpha (1+d)^-beta`` per heap slot, 0 at ``max_depth``."""
    d = node_depths(prior.max_depth)
    p = prior.alpha * (1.0 + d) ** (-prior.beta)
    return np.where(d < prior.max_depth, p, 0.0).astype(np.float32)


def mask_bounds(mask: Array, data: TreeData, min_leaf_size: int) -> tuple[Array, Array]:
    """Valid-cut interval ``[lo, hi)`` per feature for the rows in ``mask``.

    Parameters
    ----------
    mask : (n,) bool rows in the node.

    Returns
    -------
    lo, hi : (F,) int32 each; ``hi - lo <= 0`` means no valid cut (0, 0 for an empty node).
    """
    if min_leaf_size == 1:
        lo = jnp.min(jnp.where(mask[:, None], data.bins, _BIG), axis=0)
        hi = jnp.max(jnp.where(mask[:, None], data.bins, -1), axis=0)
    else:
        count = mask.sum()
        member = mask[data.sorted_index]  # (F, n) in each feature's sorted order
        csum = jnp.cumsum(member, axis=1)
        first = jnp.argmax(csum >= min_leaf_size, axis=1)
        last = jnp.argmax(csum >= count - min_leaf_size + 1, axis=1)
        lo = jnp.take_along_axis(data.sorted_bins, first[:, None], axis=1)[:, 0]
        hi = jnp.take_along_axis(data.sorted_bins, last[:, None], axis=1)[:, 0]
        ok = count >= 2 * min_leaf_size
        lo, hi = jnp.where(ok, lo, 0), jnp.where(ok, hi, 0)
    empty = ~jnp.any(mask)
    return jnp.where(empty, 0, lo).astype(jnp.int32), jnp.where(empty, 0, hi).astype(jnp.int32)


def _upward(values: Array, op) -> Array:
    """Reduce every node's subtree: ``out[i] = op(values[i], out[2i+1], out[2i+2])``.

    values : (N, ...) per-node values of the rows sitting *at* each node (i.e. filled at leaves,
    the identity of ``op`` elsewhere).  Bottom-up over the heap's levels: a level's children are a
    contiguous slice, reshaped to pairs, so each level is one small fused loop.
    """
    n = values.shape[0]
    depth = int(np.log2(n + 1)) - 1
    out = values[2**depth - 1 :]
    levels = [out]
    for d in range(depth - 1, -1, -1):
        pairs = out.reshape((2**d, 2) + out.shape[1:])
        out = op(values[2**d - 1 : 2 ** (d + 1) - 1], op(pairs[:, 0], pairs[:, 1]))
        levels.append(out)
    return jnp.concatenate(levels[::-1])


def node_stats(tree: Tree, data: TreeData) -> tuple[Array, Array]:
    """Leaf assignment and sufficient statistics of every node.

    Returns
    -------
    leaf_id : (n,) int32 heap index of each row's leaf.
    stats : (N, S) float32 summed ``point_stats`` of the rows below each node (0 if inactive).
    """
    n_nodes = tree.is_split.shape[-1]
    leaf_id = leaf_index(tree, data.bins, max_cut=data.bins.shape[0])
    stats = jax.ops.segment_sum(data.point_stats, leaf_id, num_segments=n_nodes)
    return leaf_id, _upward(stats, jnp.add)


def node_bounds(tree: Tree, leaf_id: Array, data: TreeData, min_leaf_size: int) -> tuple[Array, Array]:
    """Valid-cut intervals ``lo, hi`` (N, F) of every node (see :func:`mask_bounds`)."""
    n_nodes = tree.is_split.shape[-1]
    depth = max_depth_of(tree)
    if min_leaf_size == 1:
        # min/max are composable: reduce rows into their leaves, then leaves into ancestors.
        lo = _upward(jax.ops.segment_min(data.bins, leaf_id, num_segments=n_nodes), jnp.minimum)
        hi = _upward(jax.ops.segment_max(data.bins, leaf_id, num_segments=n_nodes), jnp.maximum)
        empty = lo > hi
        return jnp.where(empty, 0, lo).astype(jnp.int32), jnp.where(empty, 0, hi).astype(jnp.int32)
    # Order statistics do not compose: one masked pass per node (slower path).
    depths = jnp.asarray(node_depths(depth))
    leaf_depth = depths[leaf_id]

    def one(node):
        d = depths[node]
        anc = ((leaf_id + 1) >> jnp.maximum(leaf_depth - d, 0)) - 1
        return mask_bounds((anc == node) & (leaf_depth >= d), data, min_leaf_size)

    return jax.vmap(one)(jnp.arange(n_nodes))


def log_rule_prob(lo: Array, hi: Array, feature: Array, cut: Array) -> Array:
    """log p_rule(feature, cut | node) from the node's ``lo, hi`` (F,); ``-inf`` if invalid."""
    width = jnp.maximum(hi - lo, 0)
    n_valid_features = jnp.sum(width > 0)
    w = width[feature]
    ok = (cut >= lo[feature]) & (cut < hi[feature])
    return jnp.where(ok, -jnp.log(n_valid_features) - jnp.log(w), -jnp.inf)


def splittable(lo: Array, hi: Array, split_prob: Array) -> Array:
    """(N,) bool: the node has a valid cut and a positive split probability (above max_depth)."""
    return jnp.any(hi > lo, axis=-1) & (split_prob > 0)


def log_tree_prior(tree: Tree, lo: Array, hi: Array, split_prob: Array) -> Array:
    """log p(T) under the truncated CGM98 prior; ``-inf`` if a rule is invalid for its node.

    Parameters
    ----------
    lo, hi : (N, F) int32 node bounds of this tree (:func:`node_bounds`).
    split_prob : (N,) :func:`split_probability` of the prior.
    """
    active = active_nodes(tree)
    p = split_prob
    can = splittable(lo, hi, split_prob)
    p_eff = jnp.where(can, p, 0.0)
    rule = jax.vmap(log_rule_prob)(lo, hi, tree.feature, tree.cut)
    internal = jnp.log(jnp.where(can, p, 1.0)) + rule
    internal = jnp.where(can, internal, -jnp.inf)
    leaf = jnp.log1p(-p_eff)
    terms = jnp.where(tree.is_split, internal, leaf)
    return jnp.sum(jnp.where(active, terms, 0.0))
