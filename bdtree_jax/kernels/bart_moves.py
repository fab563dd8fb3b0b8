"""BART's CGM tree step with local leaf and stat updates, for rules with level sets and missing-value bits.

The same Metropolis–Hastings chain as :func:`bdtree_jax.kernels.cgm.step_with_uniforms` (and its
flip step): the same draws, the same proposals and the same acceptance ratio, read from the
same prior terms (:mod:`bdtree_jax.priors.categorical`, through
:func:`~bdtree_jax.kernels._moves.rescore`).  Only the rows and the statistics a move
touches are recomputed, instead of re-routing every row through the whole proposed tree:

* a grow at leaf ``l`` sends the rows with ``leaf_id == l`` to ``2l+1`` / ``2l+2`` by the new rule
  and sums their stats into those two nodes;
* a prune sends the two children's rows back to ``l`` and sums them into ``l``;
* a flip (the rule change after each proposal) re-routes only the rows below its node, from
  that node, and re-sums that subtree's stats; it is skipped (``lax.cond``) when no flip is
  possible, where the chain keeps its state anyway;
* change and swap (``tree_sampler="cgm"``) re-score the tree whole, as before.

The leaves' stats are summed with the same scatter as a full re-score (each leaf's rows in the
same order), so they are bitwise those of :func:`~bdtree_jax.kernels._moves.score`, and so
are the log likelihood, the prior and every accept / reject decision; the internal nodes' stats
(which no decision reads) may differ from a full re-score by float rounding.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ..data import TreeData
from ..priors import subtree_sums
from ..priors.categorical import draw_rule_general, log_rule_prob_general
from ..tree import change, goes_left, grow, in_subtree, leaf_index, prune, rule_at, swap
from ._moves import CGMState, mh_log_ratio, pick, rescore, score, targets
from .cgm import CGMInfo, _choose_move, _log_move_probs, _log_q_ratio, flip_proposal

__all__ = ["step"]


def _grown(state: CGMState, node, rule, data: TreeData, config) -> CGMState:
    """The scored state after growing leaf ``node`` on ``rule``."""
    tree = grow(state.tree, node, rule.feature, rule.cut, rule)
    n_nodes = tree.is_split.shape[-1]
    stored = rule_at(tree, node)
    at = state.leaf_id == node
    left = goes_left(data.bins[:, stored.feature], stored)
    child = (2 * node + 1 + (~left).astype(jnp.int32)).astype(state.leaf_id.dtype)
    leaf_id = jnp.where(at, child, state.leaf_id)
    kids = subtree_sums(data.point_stats, leaf_id, n_nodes, rows=at)
    stats = state.stats.at[2 * node + 1].set(kids[2 * node + 1]).at[2 * node + 2].set(kids[2 * node + 2])
    return rescore(tree, leaf_id, stats, data, config, state.beta)


def _pruned(state: CGMState, node, data: TreeData, config) -> CGMState:
    """The scored state after pruning nog ``node``."""
    tree = prune(state.tree, node)
    n_nodes = tree.is_split.shape[-1]
    below = (state.leaf_id == 2 * node + 1) | (state.leaf_id == 2 * node + 2)
    leaf_id = jnp.where(below, node.astype(state.leaf_id.dtype), state.leaf_id)
    sums = subtree_sums(data.point_stats, leaf_id, n_nodes, rows=below)
    zero = jnp.zeros_like(state.stats[node])
    stats = state.stats.at[node].set(sums[node]).at[2 * node + 1].set(zero).at[2 * node + 2].set(zero)
    return rescore(tree, leaf_id, stats, data, config, state.beta)


def _rerouted(state: CGMState, tree, node, data: TreeData, config) -> CGMState:
    """The scored state of ``tree``, which differs from ``state.tree`` only in the rule of
    splitting ``node``: the rows below ``node`` descend again from it."""
    n_nodes = tree.is_split.shape[-1]
    in_sub = in_subtree(node, config.max_depth)
    rows = in_sub[state.leaf_id]
    start = jnp.where(rows, node, state.leaf_id)
    leaf_id = leaf_index(tree, data.bins, max_cut=data.bins.shape[0], start=start).astype(state.leaf_id.dtype)
    sums = subtree_sums(data.point_stats, leaf_id, n_nodes, rows=rows)
    stats = jnp.where(in_sub[:, None], sums, state.stats)
    return rescore(tree, leaf_id, stats, data, config, state.beta)


def step(draws, state: CGMState, data: TreeData, config) -> tuple[CGMState, object]:
    """:func:`bdtree_jax.kernels.cgm.step_with_uniforms` (one MH proposal, then the flip step) with
    the local updates of the module docstring; the same draws, decisions and trees."""
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

    def rescored(new_tree):
        proposed = score(new_tree, data, config, state.beta)
        return proposed._replace(leaf_id=proposed.leaf_id.astype(state.leaf_id.dtype))

    m = jnp.where(any_move, jnp.clip(move, 0, 3), 4)  # 4: no move (the state unchanged)
    proposed = jax.lax.switch(m, [
        lambda: _grown(state, node, rule, data, config),
        lambda: _pruned(state, node, data, config),
        lambda: rescored(change(tree, node, rule.feature, rule.cut, rule)),
        lambda: rescored(swap(tree, node)),
        lambda: state,
    ])
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
    """:func:`bdtree_jax.kernels.cgm.flip_proposal` re-routing only the flipped node's rows."""
    tree = state.tree
    node, new_rule, possible = flip_proposal(uniforms, state)

    def flipped():
        proposed = _rerouted(state, change(tree, node, new_rule.feature, new_rule.cut, new_rule), node, data, config)
        log_ratio = mh_log_ratio(state.beta * (proposed.log_lik - state.log_lik),
                                 proposed.log_prior - state.log_prior, 0.0)
        accepted = jnp.log(uniforms[3]) < log_ratio
        return jax.tree.map(lambda a, b: jnp.where(accepted, a, b), proposed, state)

    return jax.lax.cond(possible, flipped, lambda: state)
