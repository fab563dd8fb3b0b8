"""The parts of BART's two-pass grow-prune sweep (:func:`bdtree_jax.kernels.bart._grow_prune_sweep`)
that do not depend on the leaf model, and that sweep for any conjugate leaf model
(:func:`rows_sweep`).

The two-pass sweep proposes a grow or a prune for every tree at once (:func:`proposals`: the
proposals, the row counts of each tree's *finer* tree -- the proposed one for a grow, the current
one for a prune -- and whether the move is possible), then visits the trees in a ``lax.scan`` that
makes a few passes over each tree's rows (:func:`grow_prune_scan`, one for every leaf model): the
rows' leaves in the finer tree (:func:`rule_rows`), the node statistics of the rows over them and
the split gain (the leaf model's ``node_step`` hook), the accept step, the new leaf values, the
rows' leaves after the step, written in place into the kept (M, n) array.  The accepted moves are
then written into the trees' O(M N) arrays (:func:`finish`).

BART's normal leaves need only the sums of the partial residual, which it gets from one
``segment_sum`` of the residual plus the old values times the counts.  :func:`rows_sweep` serves a
leaf model whose rows are any function of the other trees' sum (log-linear BART's ``[1, y, r]``,
a weighted normal's ``[1, w, w r, w r**2]``, a variance forest's ``[1, 1/2, v/2]``): the same
proposals and accept step, with the rows built per tree by the ``rows`` hook of
:func:`bdtree_jax.kernels.bart._kernel_sweep` and summed over the finer tree's leaves.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from .._types import Array
from ..priors import node_lanes, sum_by_lane
from ..problem.bart import feature_bins
from ..tree import leaf_nodes, n_nodes
from . import cgm
from ._moves import mh_log_ratio

__all__ = ["COUNT_BATCH", "COUNT_ELEMENTS", "bins_by_feature", "children", "count_batch", "finish", "grow_prune_scan",
           "proposals", "rows_sweep", "rule_rows"]

#: The grow-prune sweep counts its grow proposals' rows :func:`count_batch` trees at a time:
#: COUNT_BATCH (the (batch, n) masks stay in cache at large n), or all trees at once when they mask
#: at most COUNT_ELEMENTS rows (one batch amortises XLA's per-operation cost: a fifth of a sweep at 1k rows).
COUNT_BATCH = 16
COUNT_ELEMENTS = 2**19


def count_batch(n_trees: int, n_rows: int) -> int:
    """Trees per batch of :func:`proposals`' row counts (exact: never changes a draw)."""
    return int(n_trees if n_trees * n_rows <= COUNT_ELEMENTS else min(COUNT_BATCH, n_trees))


def _count_true(mask: Array) -> Array:
    """(...,) int32 ``mask.sum(-1)``, in uint8 over blocks of 255 rows (not widened to 4 bytes a row)."""
    n = mask.shape[-1]
    block = 255
    k = n // block
    head = mask[..., : k * block].reshape(mask.shape[:-1] + (k, block)).astype(jnp.uint8)
    head = jnp.sum(head, axis=-1, dtype=jnp.uint8)
    return jnp.sum(head, axis=-1, dtype=jnp.int32) + jnp.sum(mask[..., k * block:], axis=-1, dtype=jnp.int32)


def bins_by_feature(data) -> Array:
    """(F, n) :attr:`~bdtree_jax.problem.bart.BARTData.feature_bins`, or the bins transposed here
    (a BARTData built by hand)."""
    if data.feature_bins is not None:
        return data.feature_bins
    return feature_bins(data.tree_data)


def proposals(state, data, bins: Array, uniforms: Array, config):
    """Every tree's grow-or-prune proposal (:class:`~bdtree_jax.kernels.cgm.LocalProposal`) and the
    row counts of its finer tree (a grow's new left child counted in one pass over the rows of all
    trees, in uint8 blocks: :func:`_count_true`), from a :class:`~bdtree_jax.kernels.bart.BARTState`
    ``state``, BARTData ``data``, ``bins`` (F, n), ``uniforms`` (M, 5) and a BARTConfig.

    Returns ``(props, possible (M,) bool, counts (M, N) float32, n_kids (M, 2), n_node (M,),
    old_fine (M, N))``: ``possible`` with, under ``valid_cuts="ancestors"``, the prior's truncation
    to leaves of ``min_leaf_size`` rows; ``counts`` every node's rows in the finer tree;
    ``old_fine`` the current leaf values on the finer tree (a grow's children hold the node's)."""
    N = n_nodes(config.max_depth)
    trees = state.trees
    td = data.tree_data

    def one(u, t, c):  # the rows are counted below, once for all trees
        return cgm.propose(u, t, td, config.cgm, c, count_rows=False)

    props = jax.vmap(one)(uniforms, trees, state.can_split)
    node, splits = props.node, props.splits
    left_child = 2 * node + 1
    slot = jnp.arange(N)
    is_kid = ((slot - left_child[:, None]) >> 1) == 0  # (M, N)
    kept = trees.stats[:, :, 0]
    # rows per node of the finer tree: the kept counts with its two children: a grow's new ones
    # (its node's rows that its rule sends left), a prune's current ones
    def count_left(tree):  # a grow's left rows: the node's rows its rule sends left
        leaf, node, feature, cut = tree
        x = jax.lax.dynamic_index_in_dim(bins, feature, axis=0, keepdims=False)
        return _count_true((leaf == node) & (x <= cut))

    # count_batch trees at a time: their (batch, n) masks stay in cache
    grown_left = jax.lax.map(count_left, (trees.leaf_id, node, props.feature, props.cut),
                             batch_size=count_batch(*trees.leaf_id.shape)).astype(jnp.float32)
    n_left = jnp.where(splits, grown_left, jnp.take_along_axis(kept, left_child[:, None], axis=1)[:, 0])
    n_node = jnp.take_along_axis(kept, node[:, None], axis=1)[:, 0]
    n_kids = jnp.stack([n_left, n_node - n_left], axis=1)  # (M, 2)
    counts = jnp.where(slot == left_child[:, None], n_kids[:, :1], jnp.where(is_kid, n_kids[:, 1:], kept))
    possible = props.possible
    if td.cut_count is not None:  # valid_cuts="ancestors": a grow leaving a child too small has prior 0
        possible = possible & ~(splits & jnp.any(n_kids < config.min_leaf_size, axis=1))
    values = state.leaf_values
    node_value = jnp.take_along_axis(values, node[:, None], axis=1)
    old_fine = jnp.where(is_kid & splits[:, None], node_value, values)  # a grow's children hold the node's value
    return props, possible, counts, n_kids, n_node, old_fine


def rule_rows(bins: Array, props, tree):
    """``(kid_rows, fine_after)`` of the proposals ``props`` on the current trees ``tree``:
    ``kid_rows(m)`` (n,) the child of tree m's node each row goes to by the rule dividing the
    node's rows in the finer tree (a grow's new rule, a prune's node's current one; read for every
    row); ``fine_after(m, leaf, coarse)`` (n,) tree m's rows' leaves in its finer tree from its
    rows' leaves ``leaf`` after its step (``coarse``: the tree after the step is the coarser one)."""
    node, splits = props.node, props.splits
    rule_feature = jnp.where(splits, props.feature, jnp.take_along_axis(tree.feature, node[:, None], 1)[:, 0])
    rule_cut = jnp.where(splits, props.cut, jnp.take_along_axis(tree.cut, node[:, None], 1)[:, 0])

    def kid_rows(m):
        x = jax.lax.dynamic_index_in_dim(bins, rule_feature[m], axis=0, keepdims=False)
        return 2 * node[m] + 1 + (x > rule_cut[m])

    def fine_after(m, leaf, coarse):
        return jnp.where(coarse & (leaf == node[m]), kid_rows(m), leaf)

    return kid_rows, fine_after


def finish(state, props, new, counts, changed, leaf_id):
    """The accepted moves written into the trees, vectorized: leaf values (0 off the leaves),
    tree, bounds, log-prior and row counts.  From the sequential pass: ``new`` (M, N) the values
    drawn on each tree's finer tree (a coarse tree's node value sits in its children's slots),
    ``counts`` (M, N) the finer tree's row counts, ``changed`` (M,) and ``leaf_id`` (M, n) the
    rows' leaves after the step.  Returns ``(leaf_values, trees, can_split)``."""
    trees = state.trees
    N = new.shape[1]
    node, splits = props.node, props.splits
    left_child = 2 * node + 1
    slot = jnp.arange(N)
    is_kid = ((slot - left_child[:, None]) >> 1) == 0  # (M, N)
    at_node = slot == node[:, None]
    coarse = (changed != splits)[:, None]
    leaf = jnp.where(is_kid, ~coarse, jnp.where(at_node, coarse, jax.vmap(leaf_nodes)(trees.tree)))
    kid_value = jnp.take_along_axis(new, left_child[:, None], axis=1)
    values = jnp.where(leaf, jnp.where(at_node, kid_value, new), 0.0).astype(jnp.float32)
    tree, _, lo, hi = jax.vmap(cgm.apply_local)(trees, props, changed)
    # an accepted grow's truncation term is 0 (it was possible), so the proposal's prior change holds
    log_prior = trees.log_prior + jnp.where(changed, props.d_log_prior, 0.0)
    rows = jnp.where(is_kid & coarse, 0.0, counts)  # the new tree's row counts
    stats = trees.stats.at[:, :, 0].set(rows)
    kid_can = jnp.where(slot == left_child[:, None], props.kids_can_split[:, :1], props.kids_can_split[:, 1:])
    # the children: a grow's new ones if it is accepted, none if the tree is the coarse one, the
    # current ones after a refused prune
    kids = jnp.where(coarse, False, jnp.where(splits[:, None], kid_can, state.can_split))
    can_split = jnp.where(is_kid, kids, state.can_split)
    return values, trees._replace(tree=tree, leaf_id=leaf_id, stats=stats, lo=lo, hi=hi, log_prior=log_prior), can_split


def children(x: Array, node: Array) -> Array:
    """(2, ...) the rows of ``x`` (N, ...) at node ``node``'s two children (slots ``2 node + 1``,
    ``2 node + 2``; clipped in range for a leaf at the last level, whose move is impossible)."""
    return jax.lax.dynamic_slice_in_dim(x, jnp.minimum(2 * node + 1, x.shape[0] - 2), 2, axis=0)


def grow_prune_scan(state, bins: Array, props, carried: Array, xs: tuple, node_step, residual: bool, leaf_step=None):
    """The sequential pass of the two-pass grow-prune sweep for any leaf model (module docstring):
    a ``lax.scan`` over the trees carrying ``carried`` (n,) and the kept (M, n) rows' leaves, then
    :func:`finish`.  ``carried`` is the residual ``target - fit`` when ``residual`` (a tree's change
    enters as ``old - new``), else the trees' sum (``new - old``).

    ``xs``: the scan's per-tree inputs (each (M, ...)), beginning ``(possible (M,) bool, other (M,)
    the proposal's prior-and-proposal log ratio, log_u (M,) the accept step's log uniform, old
    (M, N) the current values on the finer tree, counts (M, N) the finer tree's row counts)`` (from
    :func:`proposals`), then the leaf model's own.  Per tree m, with ``xs_m`` the tree's inputs
    after ``m`` itself and ``fine`` (n,) its rows' leaves in its finer tree:

    * ``node_step(m, fine, carried, xs_m) -> (gain, stats, draw)``: the split's log marginal
      likelihood gain at the node (scalar), the finer tree's node statistics ``stats`` (any
      pytree, for ``leaf_step``) and ``draw(coarse) -> (node_value (), values (N,))`` the new
      values on the finer tree and, if the tree after the step is the ``coarse`` one, its node's
      value (put in its children's slots here);
    * ``leaf_step(m, log_ratio, stats, xs_m) -> (accepted, new (N,))``, if given, in place of the
      accept step and ``draw`` (monotone BART's constrained values).

    Returns ``(carried, leaf_values (M, N), changed (M,), trees, can_split)``."""
    N = state.leaf_values.shape[1]
    node, splits = props.node, props.splits
    slot = jnp.arange(N)
    # the rule dividing the node's rows between its children in the finer tree: a grow's new one,
    # the current one of a prune's node
    kid_rows, fine_after = rule_rows(bins, props, state.trees.tree)

    def body(carry, xs_m):
        carried, leaf_ids, last_delta, last_coarse = carry
        m, possible, other, lu = xs_m[:4]
        # the previous tree's change, deferred to here so that its (N,) change is a materialised
        # loop value (XLA would otherwise fuse its computation, a reduction over the scatter's
        # lanes, into the gather and repeat it for every row); its rows' leaves in its finer tree
        # are recovered from its leaves after the step: a coarse tree's node rows by its rule
        prev = jnp.maximum(m - 1, 0)
        carried = carried + last_delta[fine_after(prev, leaf_ids[prev], last_coarse)]
        leaf = leaf_ids[m]
        left_child = 2 * node[m] + 1
        # the finer tree's leaves: a grow sends the node's rows to its children by the rule
        fine = jnp.where(splits[m] & (leaf == node[m]), kid_rows(m), leaf)
        gain, stats, draw = node_step(m, fine, carried, xs_m)
        log_ratio = mh_log_ratio(jnp.where(splits[m], gain, -gain), 0.0, other)
        if leaf_step is None:
            accepted = possible & (lu < log_ratio)
            coarse = accepted != splits[m]  # the tree after the step is the coarser one: both children
            node_value, values = draw(coarse)
            new = jnp.where((((slot - left_child) >> 1) == 0) & coarse, node_value, values)
        else:
            accepted, new = leaf_step(m, log_ratio, stats, xs_m)
            coarse = accepted != splits[m]
        # the rows' leaves after the step, written in place: the finer tree's, or its two
        # children's rows back in the node
        in_kids = ((fine.astype(jnp.int32) - left_child) >> 1) == 0
        leaf_ids = jax.lax.dynamic_update_index_in_dim(
            leaf_ids, jnp.where(coarse & in_kids, node[m], fine).astype(leaf_ids.dtype), m, axis=0)
        delta = xs_m[4] - new if residual else new - xs_m[4]
        # one output row per tree: values, accepted
        return (carried, leaf_ids, delta, coarse), jnp.append(new, accepted.astype(new.dtype))

    M = node.shape[0]
    start = (carried, state.trees.leaf_id, jnp.zeros((N,), jnp.float32), jnp.zeros((), bool))
    (carried, leaf_id, last_delta, last_coarse), out = jax.lax.scan(body, start, (jnp.arange(M),) + tuple(xs))
    carried = carried + last_delta[fine_after(M - 1, leaf_id[M - 1], last_coarse)]
    new, changed = out[:, :N], out[:, N] > 0
    values, trees, can_split = finish(state, props, new, xs[4], changed, leaf_id)
    return carried, values, changed, trees, can_split


def rows_sweep(state, data, total: Array, uniforms: Array, leaf_draws, config, rows):
    """Backfitting with one grow-or-prune proposal per tree for a leaf model given by ``rows``:
    ``rows(partial)`` tree m's :class:`~bdtree_jax.data.TreeData` given the other trees' sum
    ``partial`` (n,) (as :func:`bdtree_jax.kernels.bart._kernel_sweep`'s hook): its ``point_stats``
    (n, K) with row counts (ones) in the first column and its ``likelihood`` (``split_gain``,
    ``draw_values(stats (N, K), leaf_draws[m])``, ``sweep_columns`` the columns they read: the
    others are left 0).  ``total`` (n,) the trees' sum at the rows,
    ``uniforms`` (M, 5), ``leaf_draws`` (M, ...) each tree's leaf randomness (normals (M, N) or a
    PRNG key per tree).  The same Markov chain as the single-tree CGM kernel restricted to grow
    and prune run tree by tree (module docstring; the scan: :func:`grow_prune_scan`).  Returns
    ``(total, leaf_values, changed, trees, can_split)``."""
    N = n_nodes(config.max_depth)
    bins = bins_by_feature(data)
    props, possible, counts, _, _, old_fine = proposals(state, data, bins, uniforms, config)
    node = props.node
    slot = jnp.arange(N)

    def node_step(m, fine, total, xs_m):
        old, counts, z = xs_m[4:]
        data_m = rows(total - old[fine])
        lik = data_m.likelihood
        # the finer tree's leaves' statistics (N, K): the counts, and the columns the likelihood
        # reads summed one at a time (XLA's scatter of several columns is several times slower)
        lanes = node_lanes(fine, N)
        ps = data_m.point_stats
        stats = jnp.zeros((N, ps.shape[1]), jnp.float32).at[:, 0].set(counts)
        for j in lik.sweep_columns:
            stats = stats.at[:, j].set(sum_by_lane(ps[:, j], lanes, N))
        kids = children(stats, node[m])
        s_node = kids[0] + kids[1]
        gain = lik.split_gain(s_node[None], None, 0, kids[0])

        def draw(coarse):  # a coarse tree's node drawn in the node's slot
            drawn = lik.draw_values(jnp.where((slot == node[m])[:, None] & coarse, s_node, stats), z)
            drawn = drawn.astype(jnp.float32)
            return drawn[node[m]], drawn

        return gain, stats, draw

    xs = (possible, props.d_log_prior + props.log_q_ratio, jnp.log(uniforms[:, 4]), old_fine, counts, leaf_draws)
    return grow_prune_scan(state, bins, props, total, xs, node_step, residual=False)
