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
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from .._types import Array, PRNGKey
from ..data import TreeData
from ..priors import leaf_size_log_prior, node_bounds, node_stats, split_mask
from ..priors.categorical import (
    available_levels, draw_rule_general, log_rule_prob_general, log_tree_prior_general, rule_available,
)
from ..tree import Tree, empty_tree, grow, leaf_nodes, nog_nodes, prune, rule_at, change, swap
from ._moves import CGMState, mh_log_ratio, pick

__all__ = ["init", "draw", "step", "score", "targets"]


def score(tree: Tree, data: TreeData, config, beta) -> CGMState:
    """The scored state of ``tree`` (one pass over the rows)."""
    leaf_id, stats = node_stats(tree, data)
    lo, hi = node_bounds(tree, leaf_id, data, config.min_leaf_size)
    levels = available_levels(tree, leaf_id, data)
    is_leaf = leaf_nodes(tree)
    log_lik = data.likelihood.log_lik(stats, is_leaf)
    log_prior = log_tree_prior_general(tree, lo, hi, levels, data)
    log_prior = log_prior + leaf_size_log_prior(data.likelihood.rows(stats), is_leaf, data, config.min_leaf_size)
    return CGMState(tree, leaf_id, stats, lo, hi, log_lik, log_prior, jnp.asarray(beta, jnp.float32), levels)


def init(key: PRNGKey | None, data: TreeData, config, tree: Tree | None = None, beta=1.0) -> CGMState:
    """The state at ``tree`` (default: the stump, with the fields the data needs)."""
    del key
    if tree is None:
        words = 0 if data.level_masks is None else data.level_masks.shape[-1]
        tree = empty_tree(config.max_depth, nan_bits=data.missing_code is not None, level_words=words)
    return score(tree, data, config, beta)


def draw(key: PRNGKey):
    """The randomness of one step: (6,) uniforms and a key (module docstring)."""
    return jax.random.uniform(key, (6,)), jax.random.fold_in(key, 1)


def targets(state: CGMState, data: TreeData) -> Array:
    """(4, N) bool: the nodes each move can act on (grow, prune, change, swap)."""
    tree = state.tree
    can_split = jnp.any(rule_available(state.lo, state.hi, state.levels), axis=-1) & (split_mask(data.split_prob) > 0)
    internal = tree.is_split
    return jnp.stack([leaf_nodes(tree) & can_split, nog_nodes(tree), internal, internal.at[0].set(False)])


def step(draws, state: CGMState, data: TreeData, config) -> tuple[CGMState, object]:
    """One MH proposal from :func:`draw`'s ``draws``."""
    from .cgm import CGMInfo, _choose_move, _log_move_probs, _log_q_ratio

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
    return new_state, info
