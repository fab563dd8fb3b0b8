"""The leaf groups of a WU restructure (:mod:`bdtree_jax.kernels.wu`) and what a categorical rule
needs of them: per group and feature the smallest and largest code of its rows with a value, whether
some row misses the feature, the levels of its rows; the connected components of a node's levels
(two levels joined when one group at the node has both), and a uniform draw of a compatible level
set over those components."""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .._types import Array
from ..data import TreeData
from ..priors.categorical import _pack, categorical
from ..tree import leaf_nodes

__all__ = ["BIG", "GroupCodes", "group_codes", "components", "draw_levels"]

#: A group's smallest code of a feature none of its rows has.
BIG = np.int32(2**30)


class GroupCodes(NamedTuple):
    """Per group (the current tree's non-empty leaves, by heap slot) and feature: ``lo``, ``hi``
    (N, F) int32 the smallest / largest code of its rows with a value (:data:`BIG` / -1 if none),
    ``missing`` (N, F) bool some row misses the feature, ``levels`` (N, F, L) bool the levels of its
    rows (None without categorical features); ``is_group`` (N,) bool."""

    is_group: Array
    lo: Array
    hi: Array
    missing: Array
    levels: Array | None


def group_codes(state, data: TreeData) -> GroupCodes:
    """:class:`GroupCodes` of ``state`` (a :class:`~bdtree_jax.kernels._moves.CGMState`)."""
    N = state.tree.is_split.shape[0]
    bins, leaf_id = data.bins, state.leaf_id
    miss = bins == data.missing_code if data.missing_code is not None else jnp.zeros(bins.shape, bool)
    count = jax.ops.segment_sum(jnp.ones_like(leaf_id), leaf_id, num_segments=N)
    is_group = leaf_nodes(state.tree) & (count > 0)
    g = is_group[:, None]
    lo = jnp.where(g, jax.ops.segment_min(jnp.where(miss, BIG, bins), leaf_id, num_segments=N), BIG)
    hi = jnp.where(g, jax.ops.segment_max(jnp.where(miss, -1, bins), leaf_id, num_segments=N), -1)
    missing = g & (jax.ops.segment_max(miss.astype(jnp.int8), leaf_id, num_segments=N) > 0)
    levels = None
    if data.level_masks is not None:
        L = 32 * data.level_masks.shape[-1]
        present = (bins[:, :, None] == jnp.arange(L, dtype=bins.dtype)) & categorical(data)[None, :, None]
        levels = g[..., None] & (jax.ops.segment_max(present.astype(jnp.int8), leaf_id, num_segments=N) > 0)
    return GroupCodes(is_group, lo.astype(jnp.int32), hi.astype(jnp.int32), missing, levels)


def components(levels: Array, jg: Array, count: int) -> tuple[Array, Array]:
    """Connected components of the groups' present levels ``levels`` (N, F, L) at every one of
    ``count`` nodes (``jg`` (N,) every group's node, ``count`` for none; two levels joined when one
    group at the node has both): ``t`` (count, F, L) int32 every present level's component label
    (its smallest level; L where absent) and ``label`` (N, F) every group's (L: none)."""
    L = levels.shape[-1]
    start = jnp.where(jnp.any(levels, -1), jnp.argmax(levels, -1), L).astype(jnp.int32)
    jc = jnp.clip(jg, 0, count - 1)

    def node_labels(label):
        return jax.ops.segment_min(jnp.where(levels, label[..., None], L), jg, num_segments=count + 1)[:count]

    def body(carry):
        label, _ = carry
        t = node_labels(label)
        new = jnp.where(jg[:, None] < count, jnp.min(jnp.where(levels, t[jc], L), axis=-1), label)
        return new, jnp.any(new != label)

    label, _ = jax.lax.while_loop(lambda c: c[1], body, (start, jnp.bool_(True)))
    return node_labels(label), label


def draw_levels(reps, forced_in, t, present, low, nan_left, u_j, u_coin, words: int) -> Array:
    """A categorical rule's level set (count, W) uint32 at ``count`` nodes, uniform among the sets
    compatible with the chosen feature and missing-value bit (:mod:`bdtree_jax.kernels.wu`): the free
    components (``reps`` (count, L), the components' smallest levels, neither ``forced_in`` nor
    ``low``) each in with probability 1/2 (``u_coin`` (count, L)), conditioned on a non-empty set
    when nothing is forced in (the lowest included one from its exact law ``2**(n-1-j) / (2**n -
    1)`` by ``u_j`` (count,)).  ``t`` (count, L) every level's component, ``present`` (count, L)."""
    L = reps.shape[-1]
    ii = jnp.arange(L)
    forced = forced_in & nan_left[:, None]
    free = reps & ~forced_in & ~low
    need = ~jnp.any(forced, -1)
    n = jnp.sum(free, -1)
    rank = jnp.cumsum(free, -1) - 1
    cdf = (1.0 - jnp.exp2(-(ii + 1.0))) / (1.0 - jnp.exp2(-jnp.maximum(n, 1).astype(jnp.float32)))[:, None]
    first = jnp.minimum(jnp.sum((cdf <= u_j[:, None]) & (ii < n[:, None]), -1), jnp.maximum(n - 1, 0))
    coin = u_coin < 0.5
    chosen = free & jnp.where(need[:, None], (rank == first[:, None]) | ((rank > first[:, None]) & coin), coin)
    chosen = chosen | forced
    left = present & jnp.take_along_axis(chosen, jnp.clip(t, 0, L - 1), axis=-1)
    return _pack(left, words)
