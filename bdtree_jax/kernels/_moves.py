"""Tree moves shared by the hard-tree kernels (CGM, prune-and-regrow, perturb, the edit prior, SMC,
PG, the WU restructure, BART): the scored state of one tree (:class:`CGMState`, with its cached
statistics, bounds, log-likelihood and log-prior), re-scoring it in full (:func:`score`, from the
rows' leaves and the nodes' statistics: :func:`rescore`) or from cached statistics
(:func:`with_scores`), grow and prune proposals that touch one node (:func:`propose_grow`,
:func:`propose_prune`), the tree after a grow / prune / change / swap (:func:`moved_tree`), the
nodes each move can act on (:func:`targets`), the inverse-CDF choices of a node and a rule
(:func:`pick`, :func:`draw_rule`), the rule law at a node (:func:`draw_prior_rule`,
:func:`log_prior_rule`) and the MH log-ratio (:func:`mh_log_ratio`).

**Numeric and general data.**  On data with categorical features or missing values
(:func:`~bdtree_jax.priors.categorical.general_rules`, decided statically from the data) a rule is
a :class:`~bdtree_jax.tree.Rule` with a level set and a missing-value bit, drawn and scored by the
rule prior of :mod:`bdtree_jax.priors.categorical` (each node also caches its available levels,
``CGMState.levels``); on numeric data (no categorical feature, no missing cell) the same functions
run the numeric rule prior of :mod:`bdtree_jax.priors` (a feature and a cut).

``config`` arguments are a :class:`~bdtree_jax.kernels.cgm.CGMConfig` (only its ``min_leaf_size``
is read).
"""

from __future__ import annotations

import functools

from typing import NamedTuple

import jax
import jax.numpy as jnp

from .._types import Array
from ..data import TreeData
from ..priors import (
    child_bounds, draw_cut, leaf_size_log_prior, log_rule_prob, log_tree_prior, node_bounds, node_stats, split_mask,
)
from ..priors.boxes import violates_boxes_general
from ..priors.feature_weights import pick_feature
from ..priors.categorical import (
    available_levels, draw_rule_general, general_rules, log_rule_prob_general, log_tree_prior_general, rule_available,
)
from ..tree import Rule, Tree, change, grow, leaf_nodes, make_tree, nog_nodes, prune, swap

__all__ = [
    "CGMState", "with_scores", "score", "rescore", "propose_grow", "propose_prune", "moved_tree", "change_rule",
    "targets", "pick", "draw_rule", "draw_prior_rule", "log_prior_rule", "mh_log_ratio",
]


class CGMState(NamedTuple):
    """One chain's state.

    Attributes
    ----------
    tree : Tree, arrays of shape (N,).
    leaf_id : (n,) int32 leaf of every training row.
    stats : (N, S) float32 sufficient statistics of every node (0 for inactive nodes).
    lo, hi : (N, F) int32 valid-cut interval of every node (see :mod:`bdtree_jax.priors`).
    log_lik : () float32 log integrated likelihood (at inverse temperature 1).
    log_prior : () float32 log tree prior.
    beta : () float32 inverse temperature; the chain targets ``p(T) L(T)**beta``.
    levels : (N, F, W) uint32 available levels of every node's categorical features
        (:mod:`bdtree_jax.priors.categorical`), or None without categorical features.
    """

    tree: Tree
    leaf_id: Array
    stats: Array
    lo: Array
    hi: Array
    log_lik: Array
    log_prior: Array
    beta: Array
    levels: Array | None = None


def with_scores(tree, leaf_id, stats, lo, hi, data: TreeData, beta, min_leaf_size: int = 1) -> CGMState:
    """Complete a state from its cached statistics (no pass over the data); ``min_leaf_size``
    matters only to the ``valid_cuts="ancestors"`` truncation."""
    is_leaf = leaf_nodes(tree)
    log_lik = data.likelihood.log_lik(stats, is_leaf)
    log_prior = log_tree_prior(tree, lo, hi, data.split_prob, data.cut_cumwidth, data.box_side,
                               data.feature_log_weight)
    log_prior = log_prior + leaf_size_log_prior(data.likelihood.rows(stats), is_leaf, data, min_leaf_size)
    return CGMState(tree, leaf_id, stats, lo, hi, log_lik, log_prior, jnp.asarray(beta, jnp.float32))


@functools.partial(jax.jit, static_argnames="config")
def score(tree: Tree, data: TreeData, config, beta) -> CGMState:
    """Full (re)computation of the cached statistics of ``tree`` (one pass over the data).
    Compiled as one program (called outside a kernel, e.g. to score an initial tree, it would
    otherwise run operation by operation)."""
    leaf_id, stats = node_stats(tree, data)
    return rescore(tree, leaf_id, stats, data, config, beta)


def rescore(tree: Tree, leaf_id: Array, stats: Array, data: TreeData, config, beta) -> CGMState:
    """:func:`score` given the rows' leaves ``leaf_id`` (n,) and the nodes' ``stats`` (N, S) (the
    moves that update them locally); only the leaves' stats are read.  On general data the nodes'
    available levels are computed too, and a tree with a rule cutting a box (ordered intervals
    and level sets, :mod:`bdtree_jax.priors.boxes`) has prior 0."""
    lo, hi = node_bounds(tree, leaf_id, data, config.min_leaf_size)
    if not general_rules(data):
        return with_scores(tree, leaf_id, stats, lo, hi, data, beta, config.min_leaf_size)
    levels = available_levels(tree, leaf_id, data)
    is_leaf = leaf_nodes(tree)
    log_lik = data.likelihood.log_lik(stats, is_leaf)
    log_prior = log_tree_prior_general(tree, lo, hi, levels, data)
    log_prior = log_prior + leaf_size_log_prior(data.likelihood.rows(stats), is_leaf, data, config.min_leaf_size)
    if data.box_side is not None:
        log_prior = jnp.where(violates_boxes_general(tree, data.box_side, data.box_levels), -jnp.inf, log_prior)
    return CGMState(tree, leaf_id, stats, lo, hi, log_lik, log_prior, jnp.asarray(beta, jnp.float32), levels)


def propose_grow(state: CGMState, node, feature, cut, data: TreeData, config) -> CGMState:
    """Split leaf ``node``: only the rows of that leaf are touched (two new children)."""
    left_child, right_child = 2 * node + 1, 2 * node + 2
    in_node = state.leaf_id == node
    goes_left = jnp.take(data.bins, feature, axis=1) <= cut
    left, right = in_node & goes_left, in_node & ~goes_left
    stats_left = left.astype(data.point_stats.dtype) @ data.point_stats
    stats = state.stats.at[left_child].set(stats_left).at[right_child].set(state.stats[node] - stats_left)
    new_lo, new_hi = child_bounds(state.lo[node], state.hi[node], feature, cut, in_node, goes_left, data,
                                  config.min_leaf_size)
    lo = state.lo.at[left_child].set(new_lo[0]).at[right_child].set(new_lo[1])
    hi = state.hi.at[left_child].set(new_hi[0]).at[right_child].set(new_hi[1])
    leaf_id = jnp.where(left, left_child, jnp.where(right, right_child, state.leaf_id))
    return with_scores(grow(state.tree, node, feature, cut), leaf_id, stats, lo, hi, data, state.beta,
                       config.min_leaf_size)


def propose_prune(state: CGMState, node, data: TreeData, min_leaf_size: int = 1) -> CGMState:
    """Merge the two leaf children of ``node``; the node's cached statistics are already right."""
    left_child, right_child = 2 * node + 1, 2 * node + 2
    leaf_id = jnp.where((state.leaf_id == left_child) | (state.leaf_id == right_child), node, state.leaf_id)
    zero = lambda a: a.at[left_child].set(0).at[right_child].set(0)  # noqa: E731  (canonical slots)
    return with_scores(
        prune(state.tree, node), leaf_id, zero(state.stats), zero(state.lo), zero(state.hi), data, state.beta,
        min_leaf_size,
    )


def moved_tree(tree: Tree, move: Array, node: Array, rule: Rule) -> Tree:
    """The tree after ``move`` (0 grow, 1 prune, 2 change, 3 swap) at ``node`` (grow and change
    to ``rule``) as selects over one copy of each array: the same tree as the move's own edit
    (:func:`~bdtree_jax.tree.grow`, ... :func:`~bdtree_jax.tree.swap`) without building all four."""
    m = jnp.clip(move, 0, 3)
    swapped = swap(tree, node)
    is_split = tree.is_split.at[node].set(jnp.where(m == 0, True, jnp.where(m == 1, False, tree.is_split[node])))

    def field(a, b, v):
        if a is None:
            return None
        return jnp.where(m == 3, b, a.at[node].set(jnp.where(m == 1, 0, v).astype(a.dtype)))

    return make_tree(is_split, *(field(a, b, v) for a, b, v in zip(tree[1:], swapped[1:], rule)))


def change_rule(tree: Tree, node: Array, rule: Rule) -> Tree:
    """``tree`` with splitting ``node``'s rule replaced by ``rule`` (:func:`~bdtree_jax.tree.change`)."""
    general = rule.nan_left is not None or rule.levels_left is not None
    return change(tree, node, rule.feature, rule.cut, rule if general else None)


def targets(state: CGMState, data: TreeData, can_split: Array | None = None) -> Array:
    """(4, N) bool: the nodes each move can act on (grow, prune, change, swap).  ``can_split``
    (N,) bool: the nodes with an available rule (an ordered cut, or two levels) and a positive
    split probability when the caller keeps it (BART), else computed from the availability."""
    leaf = leaf_nodes(state.tree)
    if can_split is None:
        can_split = jnp.any(rule_available(state.lo, state.hi, state.levels), axis=-1) & (split_mask(data.split_prob) > 0)
    growable = leaf & can_split
    internal = state.tree.is_split
    return jnp.stack([growable, nog_nodes(state.tree), internal, internal.at[0].set(False)])


def pick(mask: Array, u: Array) -> Array:
    """Index of the ``floor(u * count)``-th True entry of ``mask`` (uniform over the True entries
    for ``u ~ U[0, 1)``); 0 if there is none.  Inverse-CDF choice: one uniform, no Gumbel draws."""
    counts = jnp.cumsum(mask.astype(jnp.int32))
    k = jnp.floor(u * counts[-1]).astype(jnp.int32)
    return jnp.argmax(counts > k).astype(jnp.int32)


def draw_rule(u_feature: Array, u_cut: Array, lo: Array, hi: Array, cumwidth: Array,
              log_weight: Array | None = None) -> tuple[Array, Array]:
    """A rule from ``p_rule``: uniform valid feature (with ``log_weight`` (F,): by the weights,
    :func:`~bdtree_jax.priors.feature_weights.pick_feature`), then a valid cut by inverse CDF of
    the cut weights ``cumwidth`` (:attr:`~bdtree_jax.data.TreeData.cut_cumwidth`; uniform or by
    gap width, see :mod:`bdtree_jax.priors`).  lo, hi: (F,)."""
    width = jnp.maximum(hi - lo, 0)
    f = pick(width > 0, u_feature) if log_weight is None else pick_feature(width > 0, log_weight, u_feature)
    return f, draw_cut(cumwidth, f, lo[f], hi[f], u_cut)


def draw_prior_rule(u_feature: Array, u_cut: Array, u_nan: Array | None, key, lo: Array, hi: Array,
                    levels: Array | None, data: TreeData, nan_bits: bool = False) -> Rule:
    """A rule from ``p_rule`` at a node whose availability is ``lo, hi`` (F,) and ``levels``
    (F, W) (None without categorical features).  Numeric data: :func:`draw_rule` (``u_nan`` and
    ``key`` unused); general data: :func:`~bdtree_jax.priors.categorical.draw_rule_general` (the
    level set from ``key``, the missing-value bit ``u_nan < 1/2`` when ``nan_bits``)."""
    if not general_rules(data):
        return Rule(*draw_rule(u_feature, u_cut, lo, hi, data.cut_cumwidth, data.feature_log_weight))
    return draw_rule_general(key, u_feature, u_cut, u_nan, lo, hi, levels, data, nan_bits)


def log_prior_rule(lo: Array, hi: Array, levels: Array | None, rule: Rule, data: TreeData) -> Array:
    """``log p_rule(rule)`` at a node whose availability is ``lo, hi`` (F,) and ``levels`` (F, W)
    (:func:`~bdtree_jax.priors.log_rule_prob`, or on general data
    :func:`~bdtree_jax.priors.categorical.log_rule_prob_general`)."""
    if not general_rules(data):
        return log_rule_prob(lo, hi, rule.feature, rule.cut, data.cut_cumwidth, data.feature_log_weight)
    return log_rule_prob_general(lo, hi, levels, rule, data)


def mh_log_ratio(tempered_d_log_lik, d_log_prior, log_q_ratio):
    """The MH log-ratio ``beta dlog L + dlog p + log q ratio`` (NaN, e.g. ``inf - inf``, rejects)."""
    log_ratio = tempered_d_log_lik + d_log_prior + log_q_ratio
    return jnp.where(jnp.isnan(log_ratio), -jnp.inf, log_ratio)
