"""CGM98 grow / prune / change / swap with categorical features and missing-value bits.

The same Metropolis–Hastings chain as :mod:`bdtree_jax.kernels.cgm` (move choice, target node,
a new rule drawn from ``p_rule``, the exact ratio), with the rule prior of
:mod:`bdtree_jax.priors.categorical` (docs/categorical-missing.md): a rule may be a set of levels of
a categorical feature, and every rule carries the side missing values go to.  Each step edits the
tree and re-scores the proposed tree whole (the branch-free path of the CGM kernel, for
sequential and batched chains alike): the rule's availability at every node (ordered cut
intervals from the rows with a value, level sets) comes from that pass.

A step's randomness (:func:`draw`) is six uniforms (move, node, feature, cut, accept, missing
bit) and a key for the level set (its words are redrawn while the set is empty, which makes it
exactly uniform over the non-empty subsets).

With box constraints (:mod:`bdtree_jax.priors.boxes`: ordered intervals and categorical level
sets) :func:`score` gives prior 0 to a tree with a rule cutting a box, so every move (CGM, flip,
prune-and-regrow) rejects such a proposal: the chain targets the prior restricted to the trees
respecting the boxes.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from .._types import Array, PRNGKey
from ..data import TreeData
from ..priors import leaf_size_log_prior, node_bounds, node_stats, split_mask
from ..priors.boxes import violates_boxes_general
from ..priors.categorical import (
    available_levels, draw_rule_general, log_rule_prob_general, log_tree_prior_general, rule_available,
)
from ..tree import (
    Tree, active_nodes, change, empty_tree, goes_left, grow, in_subtree, leaf_nodes, node_depths, nog_nodes, prune,
    make_tree, rule_at, swap,
)
from ._moves import CGMState, mh_log_ratio, pick
from . import cgm as cgm_kernel, regrow as regrow_kernel
from .base import SamplingAlgorithm
from .cgm import CGMInfo, _choose_move, _log_move_probs, _log_q_ratio

__all__ = ["init", "draw", "step", "score", "rescore", "targets", "regrow_step", "regrow_sampler", "sampler"]


def score(tree: Tree, data: TreeData, config, beta) -> CGMState:
    """The scored state of ``tree`` (one pass over the rows)."""
    leaf_id, stats = node_stats(tree, data)
    return rescore(tree, leaf_id, stats, data, config, beta)


def rescore(tree: Tree, leaf_id: Array, stats: Array, data: TreeData, config, beta) -> CGMState:
    """:func:`score` given the rows' leaves ``leaf_id`` and the nodes' ``stats`` (the moves that
    update them locally: :mod:`bdtree_jax.kernels.bart_general_moves`); only the leaves' stats
    are read."""
    lo, hi = node_bounds(tree, leaf_id, data, config.min_leaf_size)
    levels = available_levels(tree, leaf_id, data)
    is_leaf = leaf_nodes(tree)
    log_lik = data.likelihood.log_lik(stats, is_leaf)
    log_prior = log_tree_prior_general(tree, lo, hi, levels, data)
    log_prior = log_prior + leaf_size_log_prior(data.likelihood.rows(stats), is_leaf, data, config.min_leaf_size)
    if data.box_side is not None:  # prior 0 for a tree with a rule cutting a box its node holds
        log_prior = jnp.where(violates_boxes_general(tree, data.box_side, data.box_levels), -jnp.inf, log_prior)
    return CGMState(tree, leaf_id, stats, lo, hi, log_lik, log_prior, jnp.asarray(beta, jnp.float32), levels)


def init(key: PRNGKey | None, data: TreeData, config, tree: Tree | None = None, beta=1.0) -> CGMState:
    """The state at ``tree`` (default: the stump, with the fields the data needs)."""
    del key
    if tree is None:
        words = 0 if data.level_masks is None else data.level_masks.shape[-1]
        tree = empty_tree(config.max_depth, nan_bits=data.missing_code is not None, level_words=words)
    return score(tree, data, config, beta)


def draw(key: PRNGKey):
    """The randomness of one step: (10,) uniforms and a key (module docstring), from one split
    (the key is ``split(key)[1]``, as before; the uniforms used to be drawn from ``key`` itself)."""
    k_uniform, k_rule = jax.random.split(key)
    return jax.random.uniform(k_uniform, (10,)), k_rule


def targets(state: CGMState, data: TreeData) -> Array:
    """(4, N) bool: the nodes each move can act on (grow, prune, change, swap)."""
    tree = state.tree
    can_split = jnp.any(rule_available(state.lo, state.hi, state.levels), axis=-1) & (split_mask(data.split_prob) > 0)
    internal = tree.is_split
    return jnp.stack([leaf_nodes(tree) & can_split, nog_nodes(tree), internal, internal.at[0].set(False)])


def step(draws, state: CGMState, data: TreeData, config) -> tuple[CGMState, object]:
    """One MH proposal from :func:`draw`'s ``draws``."""
    uniforms, key = draws
    tree = state.tree
    target_nodes = targets(state, data)
    counts = target_nodes.sum(1)
    log_p = _log_move_probs(counts, config.move_probs)
    move = _choose_move(log_p, uniforms[0])
    node = pick(target_nodes[move], uniforms[1])
    at_node = lambda a: None if a is None else a[node]  # noqa: E731
    lo, hi, levels = state.lo[node], state.hi[node], at_node(state.levels)
    rule = draw_rule_general(key, uniforms[2], uniforms[3], uniforms[5], lo, hi, levels, data,
                             tree.nan_left is not None)
    any_move = jnp.any(counts > 0)

    candidates = [grow(tree, node, rule.feature, rule.cut, rule), prune(tree, node),
                  change(tree, node, rule.feature, rule.cut, rule), swap(tree, node)]
    m = jnp.clip(move, 0, 3)
    new_tree = jax.tree.map(lambda *xs: jnp.select([m == k for k in range(3)], list(xs[:3]), xs[3]), *candidates)
    proposed = score(new_tree, data, config, state.beta)
    proposed = proposed._replace(leaf_id=proposed.leaf_id.astype(state.leaf_id.dtype))
    counts_new = targets(proposed, data).sum(1)
    rule_new = log_rule_prob_general(lo, hi, levels, rule, data)
    rule_old = log_rule_prob_general(lo, hi, levels, rule_at(tree, node), data)
    log_ratio = mh_log_ratio(state.beta * (proposed.log_lik - state.log_lik), proposed.log_prior - state.log_prior,
                             _log_q_ratio(move, counts, log_p, counts_new, rule_new, rule_old, config))
    accepted = any_move & (jnp.log(uniforms[4]) < log_ratio)
    new_state = jax.tree.map(lambda a, b: jnp.where(accepted, a, b), proposed, state)
    info = CGMInfo(jnp.where(any_move, move, -1), accepted, jnp.where(any_move, log_ratio, -jnp.inf))
    return _flip_step(uniforms[6:], new_state, data, config), info


def _flip_step(uniforms, state: CGMState, data: TreeData, config) -> CGMState:
    """A local change of one rule, after each CGM proposal: at a splitting node chosen uniformly,
    flip its missing-value bit or (at a categorical rule, half of the time when the tree has
    bits) move one of its available levels but the smallest to the other side.  The choice does
    not depend on the flipped value, so the proposal is symmetric and the ratio is the posterior
    ratio of the two trees (a flip that empties the left set has prior 0 and is rejected).
    ``uniforms``: (4,) node, kind, level, accept."""
    tree = state.tree
    internal = tree.is_split
    node = pick(internal, uniforms[0])
    rule = rule_at(tree, node)
    bits = tree.nan_left is not None
    categorical = jnp.any(rule.levels_left != 0) if rule.levels_left is not None else jnp.bool_(False)
    flip_level = categorical & ((uniforms[1] < 0.5) if bits else True)
    possible = jnp.any(internal) & (flip_level | bits)
    new_rule = rule
    if bits:
        new_rule = new_rule._replace(nan_left=jnp.where(flip_level, rule.nan_left, ~rule.nan_left))
    if rule.levels_left is not None:
        avail = state.levels[node, rule.feature]
        low = avail & (~avail + jnp.uint32(1))
        low = jnp.where(jnp.cumsum(avail != 0) - (avail != 0) > 0, jnp.uint32(0), low)  # the lowest word's only
        eligible = avail & ~low
        bit_index = jnp.arange(32 * eligible.shape[-1])
        on = ((eligible[bit_index // 32] >> (bit_index % 32).astype(jnp.uint32)) & 1) == 1
        chosen = pick(on, uniforms[2])
        flip = jnp.where(jnp.arange(eligible.shape[-1]) == chosen // 32,
                         jnp.uint32(1) << (chosen % 32).astype(jnp.uint32), jnp.uint32(0))
        new_rule = new_rule._replace(levels_left=jnp.where(flip_level, rule.levels_left ^ flip, rule.levels_left))
    proposed = score(change(tree, node, new_rule.feature, new_rule.cut, new_rule), data, config, state.beta)
    proposed = proposed._replace(leaf_id=proposed.leaf_id.astype(state.leaf_id.dtype))
    log_ratio = mh_log_ratio(state.beta * (proposed.log_lik - state.log_lik), proposed.log_prior - state.log_prior, 0.0)
    accepted = possible & (jnp.log(uniforms[3]) < log_ratio)
    return jax.tree.map(lambda a, b: jnp.where(accepted, a, b), proposed, state)


def regrow_step(draws, state: CGMState, data: TreeData, config) -> tuple[CGMState, object]:
    """One prune-and-regrow MH step (:mod:`bdtree_jax.kernels.regrow`) with the general rules:
    a uniformly chosen active node's subtree redrawn from the prior given the rows reaching it,
    level by level (each level's availability from the partial tree), accepted with
    ``(d_T / d_T') (L(T') / L(T))**beta``.  ``draws``: :func:`bdtree_jax.kernels.regrow.draw`'s
    (two uniforms, (N, 3) uniforms per slot, a key for the slots' level sets)."""
    (u_node, u_accept), sub, key = draws
    tree = state.tree
    depth = config.max_depth
    depths = jnp.asarray(node_depths(depth))
    active = active_nodes(tree)
    d_old = active.sum()
    node = pick(active, u_node)
    in_sub = in_subtree(node, depth)
    cleared = jax.tree.map(lambda a: jnp.where(in_sub.reshape(in_sub.shape + (1,) * (a.ndim - 1)), jnp.zeros_like(a), a),
                           tree)
    leaf_id = state.leaf_id
    row_depth = depths[leaf_id]
    leaf_id = jnp.where(in_sub[leaf_id], ((leaf_id + 1) >> jnp.maximum(row_depth - depths[node], 0)) - 1, leaf_id)
    leaf_id = leaf_id.astype(jnp.int32)
    tree = cleared
    flat = data.bins.reshape(-1)
    row_offset = jnp.arange(data.bins.shape[0], dtype=jnp.int32) * data.bins.shape[1]
    # one split: the slots' keys (as before: split(key, N + depth)[:N] == split(key, N)), then one
    # key per level for its missing-value uniforms (fold_in(key, level) was slot_keys[level])
    all_keys = jax.random.split(key, in_sub.shape[0] + depth)
    slot_keys, level_keys = all_keys[:in_sub.shape[0]], all_keys[in_sub.shape[0]:]
    for level in range(depth):
        first, count = 2**level - 1, 2**level
        slots = jnp.arange(first, first + count)
        growing = in_sub[slots] & leaf_nodes(tree)[slots]
        lo, hi = node_bounds(tree, leaf_id, data, config.min_leaf_size)
        levels = available_levels(tree, leaf_id, data)
        at = lambda a: None if a is None else a[slots]  # noqa: E731
        can = jnp.any(rule_available(lo[slots], hi[slots], at(levels)), axis=-1) & (data.split_prob[slots] > 0)
        grow_here = growing & can & (sub[slots, 0] < data.split_prob[slots])
        rules = jax.vmap(lambda k, uf, uc, un, l, h, lv: draw_rule_general(
            k, uf, uc, un, l, h, lv, data, tree.nan_left is not None), in_axes=(0, 0, 0, 0, 0, 0, 0 if levels is not None else None))(
            slot_keys[slots], sub[slots, 1], sub[slots, 2], jax.random.uniform(level_keys[level], (count,)),
            lo[slots], hi[slots], at(levels))
        tree = _grow_level(tree, slots, rules, grow_here)
        rule = rule_at(tree, leaf_id)
        left = goes_left(flat[row_offset + rule.feature], rule)
        moves = (leaf_id >= first) & (leaf_id < first + count) & grow_here[jnp.clip(leaf_id - first, 0, count - 1)]
        leaf_id = jnp.where(moves, 2 * leaf_id + 1 + (~left).astype(jnp.int32), leaf_id)
    proposed = score(tree, data, config, state.beta)
    proposed = proposed._replace(leaf_id=proposed.leaf_id.astype(state.leaf_id.dtype))
    d_new = active_nodes(tree).sum()
    log_ratio = state.beta * (proposed.log_lik - state.log_lik) + jnp.log(d_old) - jnp.log(d_new)
    log_ratio = jnp.where(jnp.isfinite(proposed.log_prior) & ~jnp.isnan(log_ratio), log_ratio, -jnp.inf)
    accepted = jnp.log(u_accept) < log_ratio
    new_state = jax.tree.map(lambda a, b: jnp.where(accepted, a, b), proposed, state)
    return new_state, CGMInfo(jnp.int32(0), accepted, log_ratio)


def _grow_level(tree: Tree, slots: Array, rules, grow_here: Array) -> Tree:
    """``tree`` with the slots ``slots`` (k,) where ``grow_here`` (k,) splitting on ``rules``
    (a Rule of (k, ...) arrays); the other slots unchanged."""
    def put(a, v):
        if a is None:
            return None
        g = grow_here.reshape(grow_here.shape + (1,) * (a.ndim - 1))
        return a.at[slots].set(jnp.where(g, v.astype(a.dtype), a[slots]))

    return make_tree(tree.is_split.at[slots].set(tree.is_split[slots] | grow_here),
                     *(put(a, v) for a, v in zip(tree[1:], rules)))


@functools.lru_cache(maxsize=64)
def sampler(config) -> SamplingAlgorithm:
    """The general-rule CGM chain as a :class:`SamplingAlgorithm` (proposal "cgm"; ``config`` a
    :class:`~bdtree_jax.kernels.cgm.CGMConfig` with ``general_rules``)."""
    return SamplingAlgorithm(lambda key, data: init(key, data, config),
                             lambda draws, state, data: step(draws, state, data, config),
                             lambda state, info: cgm_kernel.trace(state, info, config.trace_dtypes), draw,
                             steps_per_pass=2)


@functools.lru_cache(maxsize=64)
def regrow_sampler(config, with_cgm: bool) -> SamplingAlgorithm:
    """Prune-and-regrow (``with_cgm=False``: proposal "regrow") or one CGM then one
    prune-and-regrow proposal per iteration ("cgm+regrow"), with the general rules; ``config``
    a :class:`~bdtree_jax.kernels.cgm.CGMConfig` with ``general_rules``."""
    regrow_draw = functools.partial(regrow_kernel.draw, max_depth=config.max_depth)

    def init_fn(key, data):
        return init(key, data, config)

    if not with_cgm:
        return SamplingAlgorithm(init_fn, lambda d, s, data: regrow_step(d, s, data, config),
                                 lambda s, info: cgm_kernel.trace(s, info, config.trace_dtypes), regrow_draw)

    def draw_fn(key):
        k1, k2 = jax.random.split(key)
        return draw(k1), regrow_draw(k2)

    def kernel(draws, state, data):
        state, info = step(draws[0], state, data, config)
        state, info_regrow = regrow_step(draws[1], state, data, config)
        return state, (info, info_regrow.accepted)

    def trace_fn(state, info):
        out = cgm_kernel.trace(state, info[0], config.trace_dtypes)
        out["regrow_accepted"] = info[1]
        return out

    return SamplingAlgorithm(init_fn, kernel, trace_fn, draw_fn)
