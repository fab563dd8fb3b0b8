"""Valid-cut intervals ``[lo, hi)`` of the nodes, from their rows (``valid_cuts="data"``) or their
ancestors' rules (``valid_cuts="ancestors"``); see :mod:`bdtree_jax.priors`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from .._types import Array
from ..data import TreeData
from ..tree import Tree, max_depth_of, node_depths
from .node_sums import reduce_subtrees

__all__ = [
    "mask_bounds", "level_bounds", "node_bounds", "ancestor_bounds", "ancestor_level_bounds", "child_bounds",
    "leaf_size_log_prior", "check_valid_cuts",
]

_BIG = np.int32(2**30)


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



def level_bounds(slot: Array, count: int, data: TreeData, min_leaf_size: int) -> tuple[Array, Array]:
    """Valid-cut intervals of ``count`` disjoint nodes at once (see :func:`mask_bounds`).

    Parameters
    ----------
    slot : (n,) int32 node of every row in ``0..count-1``, or ``count`` for rows in none of them.

    Returns
    -------
    lo, hi : (count, F) int32.

    For ``min_leaf_size > 1`` one sort per feature groups the rows by node while keeping each
    feature's ascending order (the key ``slot * n + rank`` is unique), so every node's ``m``-th
    smallest and ``m``-th largest bins are read at its offset: ``O(F n log n)`` for all nodes
    instead of one masked pass per node.
    """
    if min_leaf_size == 1:
        lo = jax.ops.segment_min(data.bins, slot, num_segments=count + 1)[:count]
        hi = jax.ops.segment_max(data.bins, slot, num_segments=count + 1)[:count]
        empty = lo > hi
        return jnp.where(empty, 0, lo).astype(jnp.int32), jnp.where(empty, 0, hi).astype(jnp.int32)
    if data.bin_onehot is not None:
        return _histogram_bounds(jax.ops.segment_sum(data.bin_onehot, slot, num_segments=count + 1)[:count],
                                 min_leaf_size)
    n = data.bins.shape[0]
    if (count + 1) * n >= 2**31:
        raise ValueError(f"too many rows ({n}) for a tree this deep ({count} nodes in one level).")
    rank = jnp.arange(n, dtype=jnp.int32)
    key = jnp.sort(slot.astype(jnp.int32)[data.sorted_index] * n + rank, axis=1)  # (F, n)
    grouped = jnp.take_along_axis(data.sorted_bins, key % n, axis=1)  # bins by node, ascending
    size = jax.ops.segment_sum(jnp.ones(n, jnp.int32), slot, num_segments=count + 1)[:count]
    start = jnp.cumsum(size) - size
    lo = grouped[:, jnp.clip(start + min_leaf_size - 1, 0, n - 1)].T
    hi = grouped[:, jnp.clip(start + size - min_leaf_size, 0, n - 1)].T
    ok = (size >= 2 * min_leaf_size)[:, None]
    return jnp.where(ok, lo, 0).astype(jnp.int32), jnp.where(ok, hi, 0).astype(jnp.int32)


def _histogram_bounds(hist: Array, min_leaf_size: int) -> tuple[Array, Array]:
    """Valid-cut intervals (M, F) from per-node bin histograms ``hist`` (M, F, B): the ``m``-th
    smallest bin is the first whose cumulative count reaches ``m``."""
    csum = jnp.cumsum(hist, axis=-1)
    size = csum[:, :1, -1]  # (M, 1) rows in the node
    lo = jnp.argmax(csum >= min_leaf_size, axis=-1)
    hi = jnp.argmax(csum >= size[:, :, None] - min_leaf_size + 1, axis=-1)
    ok = size >= 2 * min_leaf_size
    return jnp.where(ok, lo, 0).astype(jnp.int32), jnp.where(ok, hi, 0).astype(jnp.int32)


def node_bounds(tree: Tree, leaf_id: Array, data: TreeData, min_leaf_size: int,
                rows: Array | None = None) -> tuple[Array, Array]:
    """Valid-cut intervals ``lo, hi`` (N, F) of every node (see :func:`mask_bounds`; with
    ``valid_cuts="ancestors"`` :func:`ancestor_bounds`, which does not read the rows).  ``rows``
    (n,) bool: the caller needs only the nodes that hold no other rows (the others' values are
    then meaningless); the costly reduction skips the rest when it can."""
    if data.cut_count is not None:
        return ancestor_bounds(tree, data.cut_count)
    n_nodes = tree.is_split.shape[-1]
    depth = max_depth_of(tree)
    if data.missing_code is not None or data.level_masks is not None:
        return _general_node_bounds(leaf_id, data, min_leaf_size, n_nodes, rows)
    if min_leaf_size == 1:
        # min/max are composable: reduce rows into their leaves, then leaves into ancestors; one
        # max-reduction of (-bins, bins) gives both (a scatter is the costly step on CPU, and it
        # skips out-of-range slots).
        both = jnp.concatenate([-data.bins, data.bins], axis=1)
        slot = leaf_id if rows is None else jnp.where(rows, leaf_id, n_nodes)
        both = reduce_subtrees(jax.ops.segment_max(both, slot, num_segments=n_nodes), jnp.maximum)
        lo, hi = -both[:, : data.bins.shape[1]], both[:, data.bins.shape[1] :]
        empty = hi < 0  # no rows: the reduction's identity (bins are >= 0)
        return jnp.where(empty, 0, lo).astype(jnp.int32), jnp.where(empty, 0, hi).astype(jnp.int32)
    if data.bin_onehot is not None:
        # bin histograms compose: rows into leaves, leaves into ancestors
        hist = jax.ops.segment_sum(data.bin_onehot, leaf_id, num_segments=n_nodes)
        return _histogram_bounds(reduce_subtrees(hist, jnp.add), min_leaf_size)
    # Order statistics do not compose: one grouped sort per level (the levels' nodes are disjoint).
    leaf_depth = jnp.asarray(node_depths(depth))[leaf_id]
    los, his = [], []
    for d in range(depth + 1):
        first, count = 2**d - 1, 2**d
        ancestor = ((leaf_id + 1) >> jnp.maximum(leaf_depth - d, 0)) - 1
        lo, hi = level_bounds(jnp.where(leaf_depth >= d, ancestor - first, count), count, data, min_leaf_size)
        los.append(lo)
        his.append(hi)
    return jnp.concatenate(los), jnp.concatenate(his)


def _general_node_bounds(leaf_id: Array, data: TreeData, min_leaf_size: int, n_nodes: int,
                         rows: Array | None) -> tuple[Array, Array]:
    """:func:`node_bounds` under ``valid_cuts="data"`` with missing values or categorical
    features (docs/categorical-missing.md): an ordered feature's bounds from the rows whose
    value is not missing; a categorical feature's interval empty (its rules are level sets)."""
    if min_leaf_size != 1:
        raise ValueError("min_leaf_size > 1 with valid_cuts='data' is not supported with categorical features or "
                         "missing values yet; use min_leaf_size=1 or valid_cuts='ancestors'.")
    bins = data.bins
    low, high = bins, bins
    if data.missing_code is not None:
        missing = bins == data.missing_code
        low, high = jnp.where(missing, _BIG, bins), jnp.where(missing, -1, bins)
    slot = leaf_id if rows is None else jnp.where(rows, leaf_id, n_nodes)
    both = reduce_subtrees(jax.ops.segment_max(jnp.concatenate([-low, high], axis=1), slot, num_segments=n_nodes),
                           jnp.maximum)
    lo, hi = -both[:, : bins.shape[1]], both[:, bins.shape[1] :]
    empty = hi < 0  # no rows with a value
    if data.level_masks is not None:
        empty = empty | jnp.any(data.level_masks != 0, axis=-1)
    return jnp.where(empty, 0, lo).astype(jnp.int32), jnp.where(empty, 0, hi).astype(jnp.int32)


def ancestor_bounds(tree: Tree, cut_count: Array) -> tuple[Array, Array]:
    """Valid-cut intervals ``lo, hi`` (N, F) int32 of every node under ``valid_cuts="ancestors"``:
    ``[0, cut_count)`` at the root, narrowed by each ancestor's rule on its feature (module
    docstring); 0 for inactive slots.  Top-down over the heap's levels, no pass over the rows."""
    los, his = [], []
    for level in range(max_depth_of(tree) + 1):
        lo, hi = ancestor_level_bounds(tree, level, los, his, cut_count)
        los.append(lo)
        his.append(hi)
    return jnp.concatenate(los), jnp.concatenate(his)


def ancestor_level_bounds(tree: Tree, level: int, los: list, his: list, cut_count: Array) -> tuple[Array, Array]:
    """``valid_cuts="ancestors"`` bounds (2**level, F) of the slots of ``level`` from their parents'
    (``los[-1]``, ``his[-1]``, the level above) and rules; the root's are ``[0, cut_count)``."""
    n_features = cut_count.shape[-1]
    if level == 0:
        return jnp.zeros((1, n_features), jnp.int32), jnp.asarray(cut_count, jnp.int32)[None, :]
    parents = slice(2 ** (level - 1) - 1, 2**level - 1)
    own = tree.feature[parents][:, None] == jnp.arange(n_features)
    lo, hi = _narrow(los[-1], his[-1], own, tree.cut[parents][:, None])  # (2, parents, F): left, right
    keep = jnp.repeat(tree.is_split[parents], 2)[:, None]  # children of splitting nodes
    by_slot = lambda a: jnp.swapaxes(a, 0, 1).reshape(-1, n_features)  # noqa: E731  (left, right per parent)
    return jnp.where(keep, by_slot(lo), 0).astype(jnp.int32), jnp.where(keep, by_slot(hi), 0).astype(jnp.int32)


def _narrow(lo: Array, hi: Array, own: Array, cut: Array) -> tuple[Array, Array]:
    """The ancestors' rule: the two children's intervals of a node with ``lo, hi`` (..., F) split
    at ``cut`` (broadcasting) on the feature where ``own`` (..., F) is true -- the left child keeps
    the cuts below it, the right child those above.  Returns ``lo, hi`` stacked (2, ..., F)."""
    return (jnp.stack([lo, jnp.where(own, jnp.maximum(lo, cut + 1), lo)]),
            jnp.stack([jnp.where(own, jnp.minimum(hi, cut), hi), hi]))


def child_bounds(lo: Array, hi: Array, feature: Array, cut: Array, rows: Array, goes_left: Array, data: TreeData,
                 min_leaf_size: int) -> tuple[Array, Array]:
    """Valid-cut intervals (2, F) of the two children of a node with bounds ``lo, hi`` (F,) split
    by ``(feature, cut)``: its rows ``rows`` (n,) bool, and the rule's left rows ``goes_left``
    (n,) bool, ``bins[:, feature] <= cut`` (the bitset path reads the rule from the bitsets).

    ``valid_cuts="data"``: from the children's rows (:func:`mask_bounds`; for ``min_leaf_size = 1``
    from the row bitsets :attr:`~bdtree_jax.data.TreeData.bin_bits` when the data keeps them, else
    both sets' minima and maxima from one masked max-reduction of ``(-bins, bins)``).
    ``valid_cuts="ancestors"``: the node's interval narrowed by the rule, in O(F) (the rows are
    not read)."""
    if data.cut_count is not None:
        new_lo, new_hi = _narrow(lo, hi, jnp.arange(lo.shape[-1]) == feature, cut)
        return new_lo.astype(jnp.int32), new_hi.astype(jnp.int32)
    left, right = rows & goes_left, rows & ~goes_left
    if min_leaf_size > 1:
        (lo_l, hi_l), (lo_r, hi_r) = (mask_bounds(m, data, min_leaf_size) for m in (left, right))
        return jnp.stack([lo_l, lo_r]), jnp.stack([hi_l, hi_r])
    if data.bin_bits is not None:
        # a bin is present in a child iff its bitset meets the child's rows: pack the node's
        # rows once, take the rule's left rows from the bitsets of the bins <= cut
        bits = data.bin_bits  # (W, F, B)
        n_bins = bits.shape[-1]
        packed = _pack_rows(rows)  # (W,)
        left_bits = jax.lax.reduce(
            jnp.where(jnp.arange(n_bins) <= cut, jnp.take(bits, feature, axis=1), jnp.uint32(0)),
            jnp.uint32(0), jax.lax.bitwise_or, (1,))  # (W,)
        sides = jnp.stack([packed & left_bits, packed & ~left_bits], axis=1)  # (W, 2)
        present = jnp.any((bits[:, None] & sides[:, :, None, None]) != 0, axis=0)  # (2, F, B)
        b = jnp.arange(n_bins)
        lo_c, hi_c = jnp.min(jnp.where(present, b, n_bins), axis=2), jnp.max(jnp.where(present, b, -1), axis=2)
        empty = hi_c < 0
        return jnp.where(empty, 0, lo_c).astype(jnp.int32), jnp.where(empty, 0, hi_c).astype(jnp.int32)
    n_features = data.bins.shape[1]
    # bins fit in int16 when the grid has fewer than 2**15 - 1 cut slots (static): twice the lanes
    small = data.cut_cumwidth.shape[-1] < 2**15 - 1
    dtype, none = (jnp.int16, -(2**15)) if small else (jnp.int32, -_BIG)
    both = jnp.concatenate([-data.bins, data.bins], axis=1).astype(dtype)  # (n, 2F)
    masks = jnp.stack([left, right])[:, :, None]
    extreme = jnp.max(jnp.where(masks, both[None], jnp.asarray(none, dtype)), axis=1).astype(jnp.int32)  # (2, 2F)
    lo, hi = -extreme[:, :n_features], extreme[:, n_features:]
    empty = hi < 0  # no rows (bins are >= 0)
    return jnp.where(empty, 0, lo).astype(jnp.int32), jnp.where(empty, 0, hi).astype(jnp.int32)


def _pack_rows(mask: Array) -> Array:
    """(W,) uint32 bitset of the rows in ``mask`` (n,) bool, laid out as
    :attr:`~bdtree_jax.data.TreeData.bin_bits` (row ``i`` at bit ``i // W`` of word ``i % W``)."""
    n = mask.shape[-1]
    words = -(-n // 32)
    grid = jnp.pad(mask, (0, 32 * words - n)).reshape(32, words).astype(jnp.uint32)
    return jnp.sum(grid << jnp.arange(32, dtype=jnp.uint32)[:, None], axis=0, dtype=jnp.uint32)


def leaf_size_log_prior(rows: Array, is_leaf: Array, data: TreeData, min_leaf_size: int) -> Array:
    """The ``valid_cuts="ancestors"`` truncation: ``-inf`` if a leaf (``is_leaf``, any shape)
    holds fewer than ``min_leaf_size`` rows (``rows``, same shape), else 0.  Always 0 under
    ``valid_cuts="data"``, whose rule availability already keeps every leaf that large."""
    if data.cut_count is None:
        return jnp.float32(0.0)
    return jnp.where(jnp.any(is_leaf & (rows < min_leaf_size)), -jnp.inf, 0.0).astype(jnp.float32)


def check_valid_cuts(data: TreeData, who: str) -> None:
    """Raise a ``ValueError`` naming ``valid_cuts`` when a sampler that supports only the CGM98
    rule availability (``who``) is given ``valid_cuts="ancestors"`` data."""
    if getattr(data, "cut_count", None) is not None:
        raise ValueError(
            f"{who} does not support valid_cuts='ancestors'; it is supported by method='cgm' (proposal 'cgm'), "
            "method='pg' (proposal 'prior') and BART; use valid_cuts='data'.")
