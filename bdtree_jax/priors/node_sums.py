"""Per-node sums over the padded heap: every node's summed row statistics (:func:`node_stats`,
:func:`subtree_sums`), the scatter-add they use (:func:`sum_by_node`) and the bottom-up reduction of
every node's subtree (:func:`reduce_subtrees`).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from .._types import Array
from ..data import TreeData
from ..tree import Tree, leaf_index

__all__ = ["reduce_subtrees", "node_stats", "subtree_sums", "SCATTER_LANES", "sum_by_node", "node_lanes", "sum_by_lane"]


def reduce_subtrees(values: Array, op) -> Array:
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
    leaf_id = leaf_index(tree, data.bins, max_cut=data.bins.shape[0])
    return leaf_id, subtree_sums(data.point_stats, leaf_id, tree.is_split.shape[-1])


def subtree_sums(point_stats: Array, leaf_id: Array, n_nodes: int, rows: Array | None = None) -> Array:
    """(N, S) summed ``point_stats`` (n, S) of the rows below every node, from each row's leaf;
    with ``rows`` (n,) bool only those rows are summed (right for the nodes holding no others)."""
    slots = node_lanes(leaf_id, n_nodes)
    if rows is not None:  # the others go to an out-of-range slot, which the scatter skips
        slots = jnp.where(rows, slots, _n_lanes(leaf_id.shape[-1]) * n_nodes)
    return reduce_subtrees(sum_by_lane(point_stats, slots, n_nodes), jnp.add)


#: Accumulators of :func:`sum_by_node` (rows ``i`` and ``i + 1`` land in different ones).
SCATTER_LANES = 16


def _n_lanes(n: int) -> int:
    """Accumulator copies :func:`sum_by_node` uses for ``n`` rows."""
    return min(SCATTER_LANES, n)


def sum_by_node(values: Array, node: Array, n_nodes: int) -> Array:
    """``jax.ops.segment_sum(values, node, n_nodes)`` for rows that fall into few nodes.

    values : (n,) or (n, S); node : (n,) int in ``[0, n_nodes)``.  Returns (n_nodes,) or
    (n_nodes, S).  XLA's scatter-add on CPU is a serial loop, and when consecutive rows go to the
    same node each addition waits for the previous one; rows are therefore spread over
    :data:`SCATTER_LANES` interleaved copies of the output (row ``i`` into copy ``i % lanes``),
    which are summed at the end -- about 3x faster for a tree's few leaves, and the same sums up
    to float rounding order."""
    return sum_by_lane(values, node_lanes(node, n_nodes), n_nodes)


def node_lanes(node: Array, n_nodes: int) -> Array:
    """(..., n) the scatter slots of :func:`sum_by_node`: ``node + (i % lanes) * n_nodes`` for row
    ``i`` (int16 when they fit, else int32; computed once when the same rows are summed many times)."""
    n = node.shape[-1]
    lanes = _n_lanes(n)
    dtype = jnp.int16 if lanes * n_nodes < 2**15 else jnp.int32
    return node.astype(dtype) + ((jnp.arange(n, dtype=jnp.int32) % lanes) * n_nodes).astype(dtype)


def sum_by_lane(values: Array, slots: Array, n_nodes: int) -> Array:
    """:func:`sum_by_node` from the slots of :func:`node_lanes`."""
    lanes = _n_lanes(slots.shape[-1])
    out = jax.ops.segment_sum(values, slots, num_segments=lanes * n_nodes)
    return out.reshape((lanes, n_nodes) + values.shape[1:]).sum(0)
