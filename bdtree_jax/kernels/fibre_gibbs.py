"""The exact fibre-Gibbs variant of the WU restructure (``kind="gibbs"`` / ``"auto"`` of
:mod:`bdtree_jax.kernels.wu`, whose module docstring defines the groups, the partition ``P`` and
the MH move).

``T'`` is drawn from ``π`` restricted to the fibre ``{T': P(T') = P}`` (within the heap) and
always accepted (an independence proposal ``q ∝ π 1[fibre]`` has MH ratio 1).  With the same
compatibility, validity and rule probabilities ``r`` as the MH move::

    Z(S, d) = 1 - p_s(d) 1[S's rows have a valid cut]                          |S| = 1
    Z(S, d) = p_s(d) sum_{compatible valid (v, c) at S} r(v, c | S) Z(S_L, d+1) Z(S_R, d+1)   |S| >= 2
    Z(S, D) = 1[|S| = 1]      (capacity: nothing splits at max_depth)

so ``Z(P, 0) = sum of π over the fibre`` (tested against the enumeration), and ``T'`` is drawn
top-down, the block of ``(v, c)`` at a node in proportion to its summand, then ``c`` within it by
the rule prior's cut weights.  Layout (fixed shapes, one compiled program whatever ``K``): the
groups are renumbered ``0..K-1`` and a set ``S`` is an int32 bitmask; tables over all
``2**max_groups`` masks (masks with absent groups are never reached) hold each subset's row count
and valid-cut interval (min / max bins composed over groups for ``min_leaf_size = 1``, else the
``m`` smallest / largest bins of each group merged, = :func:`~bdtree_jax.priors.level_bounds`),
and for each (feature ``v``, position ``i`` in ``v``'s order of the groups by smallest bin) the
split "``S``'s groups up to ``i`` left, the rest right", its cut block ``[max(reach, lo_v),
min(next, hi_v))`` and ``log Σ_block r``: one gap per block, no duplicates (``i`` must be in
``S``).  Then ``log Z(., d)`` for ``d = D .. 0``, each a vectorised log-sum-exp over the
``F * max_groups`` blocks of every mask (no popcount order needed: depth ``d`` reads ``d + 1``),
and the draw is one level of the heap at a time.  The new state's caches come from the
tables (``lo, hi`` of each node's mask) and a re-sum of the statistics -- equal to a full
re-score (tested).  Cost: ``O(2^G F G D)`` per draw whatever ``K`` (``G = max_groups``); on bcw
(F = 9, n = 683, depth 6) one draw took 0.6 / 3.8 / 17 / 180 ms for G = 8 / 10 / 12 / 14 (the
MH move: 0.8 ms), so ``max_groups`` is capped at :data:`MAX_GROUPS` = 12 (tables of
``4096 x F x 12`` entries); compile time barely depends on ``G`` (~11-13 s on a loaded 2-core
machine, like the MH move's).  ``kind="auto"`` uses Gibbs when ``K <= max_groups`` and **falls
back to the MH move (Variant Π)**; both branches are compiled (under ``vmap`` over chains
both run), unless ``2**max_depth <= max_groups`` where only Gibbs is.  With box constraints a
draw violating a box is rejected (the independence ratio is ``1[T' respects the boxes]``).

``config`` arguments are a :class:`~bdtree_jax.kernels.wu.RestructureConfig` (its ``max_depth``,
``min_leaf_size``, ``max_groups`` and ``gibbs_control`` are read).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .._types import Array
from ..data import TreeData
from ..priors import PinballTables, draw_cut, pinball_shape, subtree_sums
from ..tree import Tree, leaf_nodes, n_nodes
from ._moves import CGMState, with_scores

__all__ = ["MAX_GROUPS", "group_bins", "gibbs_propose"]

MAX_GROUPS = 12  # the fibre DP's tables have 2^max_groups rows (see the module docstring)
_NO_BIN = np.int32(2**30)


def group_bins(state: CGMState, data: TreeData):
    """Groups (the current tree's non-empty leaves, by heap slot) and their rows' min / max bin."""
    N = state.tree.is_split.shape[0]
    glo = jax.ops.segment_min(data.bins, state.leaf_id, num_segments=N)
    ghi = jax.ops.segment_max(data.bins, state.leaf_id, num_segments=N)
    count = jax.ops.segment_sum(jnp.ones_like(state.leaf_id), state.leaf_id, num_segments=N)
    is_group = leaf_nodes(state.tree) & (count > 0)
    return is_group, glo, ghi


class _Fibre(NamedTuple):
    """The fibre DP of one state (``G = max_groups`` groups, ``J = F * G`` (feature, gap) blocks)."""

    K: Array  # () int32 groups of the state (the DP is meaningful for K <= G)
    slot_of_group: Array  # (G,) heap slot of group g in T (N for g >= K)
    size: Array  # (2^G,) rows of every subset of the groups
    lo: Array  # (2^G, F) the subset's valid-cut interval [lo, hi) under the prior (0, 0 if none)
    hi: Array
    n_valid: Array  # (2^G,) features with a valid cut
    log_w: Array  # (2^G, J) log of the summed rule probability of the block (-inf: no compatible rule)
    left: Array  # (2^G, J) int32 the block's left / right group subsets (bitmasks)
    right: Array
    cut_lo: Array  # (2^G, J) the block's cuts [cut_lo, cut_hi) (compatible and valid)
    cut_hi: Array
    log_z: Array  # (D + 1, 2^G) log Z(S, d)


def _group_order_stats(state: CGMState, data: TreeData, gi: Array, G: int, m: int):
    """(G, F, m) the ``m`` smallest and ``m`` largest bins of every group's rows per feature (ascending
    / descending; padded with ``_NO_BIN`` / -1) and (G,) the groups' row counts; ``gi`` (n,) the group
    of every row (``G`` for none)."""
    n = data.bins.shape[0]
    size = jax.ops.segment_sum(jnp.ones(n, jnp.int32), gi, num_segments=G + 1)[:G]
    if m == 1:
        small = jax.ops.segment_min(data.bins, gi, num_segments=G + 1)[:G]
        large = jax.ops.segment_max(data.bins, gi, num_segments=G + 1)[:G]
        empty = (size == 0)[:, None]
        return jnp.where(empty, _NO_BIN, small)[..., None], jnp.where(empty, -1, large)[..., None], size
    rank = jnp.arange(n, dtype=jnp.int32)
    key = jnp.sort(gi.astype(jnp.int32)[data.sorted_index] * n + rank, axis=1)  # (F, n) rows by group, ascending
    grouped = jnp.take_along_axis(data.sorted_bins, key % n, axis=1)
    start = jnp.cumsum(size) - size
    j = jnp.arange(m)
    have = j[None, :] < size[:, None]  # (G, m)
    first = jnp.clip(start[:, None] + j[None, :], 0, n - 1)
    last = jnp.clip(start[:, None] + size[:, None] - 1 - j[None, :], 0, n - 1)
    small = jnp.where(have[:, None, :], jnp.moveaxis(grouped[:, first], 0, 1), _NO_BIN)  # (G, F, m)
    large = jnp.where(have[:, None, :], jnp.moveaxis(grouped[:, last], 0, 1), -1)
    return small, large, size


def _fibre_dp(state: CGMState, data: TreeData, config) -> _Fibre:
    """Every subset's prior quantities and compatible blocks, then ``log Z(S, d)`` for all ``(S, d)``."""
    D, m, G = config.max_depth, config.min_leaf_size, config.max_groups
    N = n_nodes(D)
    F = data.bins.shape[1]
    cum = data.cut_cumwidth  # (F, C + 2)
    top = cum.shape[1] - 1
    is_group, _, _ = group_bins(state, data)
    K = is_group.sum().astype(jnp.int32)
    rank = jnp.cumsum(is_group) - 1
    gslot = jnp.where(is_group & (rank < G), rank, G).astype(jnp.int32)  # group of every heap slot (G: none)
    slot_of_group = jnp.full(G + 1, N, jnp.int32).at[gslot].set(jnp.arange(N, dtype=jnp.int32))[:G]
    small, large, gsize = _group_order_stats(state, data, gslot[state.leaf_id], G, m)

    # subset tables, subsets [2^b, 2^(b+1)) = subsets of the first b groups plus group b
    t_small = jnp.full((1, F, m), _NO_BIN, jnp.int32)
    t_large = jnp.full((1, F, m), -1, jnp.int32)
    t_size = jnp.zeros(1, jnp.int32)
    for b in range(G):
        if m == 1:
            s_new = jnp.minimum(t_small, small[b])
            l_new = jnp.maximum(t_large, large[b])
        else:  # the m smallest of a union are among the parts' m smallest
            s_new = jnp.sort(jnp.concatenate([t_small, jnp.broadcast_to(small[b], t_small.shape)], -1), -1)[..., :m]
            l_new = -jnp.sort(-jnp.concatenate([t_large, jnp.broadcast_to(large[b], t_large.shape)], -1), -1)[..., :m]
        t_small = jnp.concatenate([t_small, s_new])
        t_large = jnp.concatenate([t_large, l_new])
        t_size = jnp.concatenate([t_size, t_size + gsize[b]])
    ok = (t_size >= (2 * m if m > 1 else 1))[:, None]
    lo = jnp.where(ok, t_small[..., m - 1], 0).astype(jnp.int32)  # (2^G, F), as level_bounds
    hi = jnp.where(ok, t_large[..., m - 1], 0).astype(jnp.int32)
    n_valid = jnp.sum(hi > lo, axis=-1)
    total = cum[jnp.arange(F), jnp.clip(hi, 0, top)] - cum[jnp.arange(F), jnp.clip(lo, 0, top)]  # (2^G, F)

    # gaps: groups in ascending order of their smallest bin, per feature
    glo, ghi = small[..., 0].T, large[..., 0].T  # (F, G) (absent groups: _NO_BIN, -1)
    order = jnp.argsort(glo, axis=1)
    lo_sorted, hi_sorted = jnp.take_along_axis(glo, order, 1), jnp.take_along_axis(ghi, order, 1)
    prefix = jnp.cumsum(jnp.left_shift(1, order), axis=1).astype(jnp.int32)  # (F, G) the first i+1 groups
    S = jnp.arange(2**G, dtype=jnp.int32)
    member = (jnp.right_shift(S[:, None, None], order[None]) & 1).astype(bool)  # (2^G, F, G)
    reach = jax.lax.cummax(jnp.where(member, hi_sorted, -1), axis=2)  # max bin of S's groups up to i
    after = jax.lax.cummin(jnp.where(member, lo_sorted, _NO_BIN), axis=2, reverse=True)
    after = jnp.concatenate([after[..., 1:], jnp.full_like(after[..., :1], _NO_BIN)], -1)  # min bin after i
    left = S[:, None, None] & prefix[None]
    right = S[:, None, None] & ~prefix[None]
    # cuts c with reach <= c < after send S's groups up to i left, the rest right; valid: lo <= c < hi
    a = jnp.clip(jnp.maximum(reach, lo[:, :, None]), 0, top)
    b = jnp.clip(jnp.minimum(after, hi[:, :, None]), 0, top)
    gap = member & (right != 0) & (reach < after) & (b > a)
    fidx = jnp.arange(F)[None, :, None]
    if config.gibbs_control == "drop_rule":  # negative control: every compatible cut weighs 1
        block = (b - a).astype(jnp.float32)
    else:  # the rule prior r(v, c | S) = w_v[c] / (n_valid * total_v), summed over the block
        block = (cum[fidx, b] - cum[fidx, a]) / jnp.maximum(n_valid[:, None, None] * total[:, :, None], 1e-30)
    log_w = jnp.where(gap, jnp.log(jnp.where(gap, block, 1.0)), -jnp.inf).reshape(2**G, F * G)
    left, right = left.reshape(2**G, F * G), right.reshape(2**G, F * G)

    pop = jax.lax.population_count(S)
    pinball = data.split_prob if isinstance(data.split_prob, PinballTables) else None
    split_prob = data.split_prob if pinball is None else pinball.may_split
    if pinball is not None:  # the pinball prior: each block's shape factor p_shape(|S_L| | |S|), no leaf factors
        log_w = log_w + jnp.where(jnp.isfinite(log_w), pinball_shape(pinball, pop[:, None],
                                                                    jax.lax.population_count(left)), 0.0)
    log_z = [jnp.where(pop <= 1, 0.0, -jnp.inf)]  # depth D: leaves only (capacity), factor 1
    for d in range(D - 1, -1, -1):
        p = split_prob[2**d - 1]
        nxt = log_z[0]
        if config.gibbs_control == "drop_leaf" or pinball is not None:  # negative control / pinball: no leaf factors
            leaf = jnp.zeros(2**G, jnp.float32)
        else:
            leaf = jnp.log1p(-jnp.where((n_valid > 0) & (p > 0), p, 0.0))
        terms = log_w + nxt[left] + nxt[right]
        mx = jnp.max(terms, axis=1)
        safe = jnp.where(jnp.isfinite(mx), mx, 0.0)
        inner = jnp.log(p) + safe + jnp.log(jnp.sum(jnp.exp(terms - safe[:, None]), axis=1))
        log_z.insert(0, jnp.where(pop >= 2, inner, jnp.where(pop == 1, leaf, 0.0)))
    return _Fibre(K, slot_of_group, t_size, lo, hi, n_valid, log_w, left, right, a.reshape(2**G, F * G),
                  b.reshape(2**G, F * G), jnp.stack(log_z))


def gibbs_propose(uniforms: Array, state: CGMState, data: TreeData, config):
    """A draw ``T' ~ π(T') 1[P(T') = P] / Z(P, 0)`` (the current tree's fibre), top-down.

    Uses ``uniforms[:N]`` (the blocks) and ``uniforms[N:2N]`` (the cuts in a block).  Meaningful
    for ``K <= max_groups``.  Returns the proposed state (caches consistent with ``T'``), ``ok``
    (``Z(P, 0) > 0`` and ``T'`` respects the boxes) and the :class:`_Fibre` (for tests)."""
    D, G = config.max_depth, config.max_groups
    N = n_nodes(D)
    F = data.bins.shape[1]
    cum = data.cut_cumwidth
    fib = _fibre_dp(state, data, config)
    full = (jnp.left_shift(1, jnp.minimum(fib.K, G)) - 1).astype(jnp.int32)
    u1, u2 = uniforms[:N], uniforms[N : 2 * N]
    masks, is_split, feature, cut = [jnp.reshape(full, (1,))], [], [], []
    for d in range(D + 1):
        first, count = 2**d - 1, 2**d
        S = masks[-1]
        internal = jax.lax.population_count(S) >= 2
        if d == D:
            is_split.append(jnp.zeros(count, bool))
            feature.append(jnp.zeros(count, jnp.int32))
            cut.append(jnp.zeros(count, jnp.int32))
            break
        nxt = fib.log_z[d + 1]
        L, R = fib.left[S], fib.right[S]  # (count, J)
        logits = fib.log_w[S] + nxt[L] + nxt[R]
        mx = jnp.max(logits, axis=1, keepdims=True)
        weights = jnp.exp(logits - jnp.where(jnp.isfinite(mx), mx, 0.0))
        cdf = jnp.cumsum(weights, axis=1)
        idx = jnp.sum(cdf <= (u1[first : first + count] * cdf[:, -1])[:, None], axis=1)
        idx = jnp.minimum(idx, F * G - 1 - jnp.argmax((weights > 0)[:, ::-1], axis=1))  # rounding guard
        j = jnp.arange(count)
        v = (idx // G).astype(jnp.int32)
        c = draw_cut(cum, v, fib.cut_lo[S, idx], fib.cut_hi[S, idx], u2[first : first + count])
        is_split.append(internal)
        feature.append(jnp.where(internal, v, 0))
        cut.append(jnp.where(internal, c, 0))
        children = jnp.stack([jnp.where(internal, L[j, idx], 0), jnp.where(internal, R[j, idx], 0)], 1)
        masks.append(children.reshape(2 * count))
    mask = jnp.concatenate(masks)  # (N,) the groups below every node (0: unused slot)
    dt = state.tree
    tree = Tree(jnp.concatenate(is_split), jnp.concatenate(feature).astype(dt.feature.dtype),
                jnp.concatenate(cut).astype(dt.cut.dtype))
    # every group's new leaf: the slot holding it alone
    single = jax.lax.population_count(mask) == 1
    g = jnp.where(single, jnp.argmax(jnp.right_shift(mask[:, None], jnp.arange(G)) & 1, axis=1), G)
    new_slot = jnp.zeros(G + 1, jnp.int32).at[g].set(jnp.arange(N, dtype=jnp.int32))[:G]
    slot_map = jnp.zeros(N + 1, jnp.int32).at[fib.slot_of_group].set(new_slot)[:N]
    leaf_id = slot_map[state.leaf_id]
    stats = subtree_sums(data.point_stats, leaf_id, N)
    proposed = with_scores(tree, leaf_id, stats, fib.lo[mask], fib.hi[mask], data, state.beta)
    ok = jnp.isfinite(fib.log_z[0, full]) & jnp.isfinite(proposed.log_prior)
    return proposed, ok, fib
