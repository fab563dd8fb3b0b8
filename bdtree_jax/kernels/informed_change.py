"""The likelihood-informed change move, and CGM composed with it (``proposal="cgm+informed"``).

One step chooses a splitting node uniformly and proposes a new rule for it -- feature and cut
together -- from the rules of the data's grid weighted by how well the tree fits with each:

    w(r) = L(T[node := r]) ** beta * p_rule(r | node) * 1[every leaf of T[node := r] keeps
           at least max(1, min_leaf_size) training rows],

``q(r) = w(r) / sum w`` (``p_rule`` is the prior's rule law at the node, which does not depend on
the node's own rule).  The weights are the same from the current tree and from the proposed one
(only the node's rule differs, and every candidate replaces it), so the Metropolis-Hastings ratio
is

    log a = log pi(T*) - log pi(T) + log w(r) - log w(r*),   pi = p(T) L(T) ** beta,

exact whatever the weights: the likelihood factors cancel up to float round-off and what is left is
the prior of the tree beyond the node's rule (rules below that lose their last valid cut, the
split probabilities of leaves that can no longer split), so most proposals are accepted.  The
tree's shape, hence the set of splitting nodes, is unchanged, so the node's choice is symmetric.

Against CGM's change move, which draws the rule from the prior, this proposal finds the rules
that fit at a node whose subtree the data already shape -- the root included -- so a chain can
trade one good split for another (two correlated features, two cuts of one) in one step.  It
costs two passes of the node's rows down its subtrees, a histogram of their statistics over every
feature's bins, one likelihood per rule (``F x C`` of them, features x cut slots, batched) and one
full score of the proposed tree (:func:`rule_log_weights`).

Numeric data only (no categorical feature, no missing cell) and the CGM98 structure prior.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from .._types import Array
from ..data import TreeData
from ..priors import log_rule_prob
from ..tree import Rule, in_subtree, leaf_index, leaf_nodes, max_depth_of
from . import cgm
from ._moves import CGMState, change_rule, mh_log_ratio, pick, score
from .base import SamplingAlgorithm

__all__ = ["step_with_uniforms", "draw", "with_informed_change", "rule_log_weights"]


def draw(key) -> Array:
    """The randomness of one step: (3,) uniforms (the node, the rule, the acceptance)."""
    return jax.random.uniform(key, (3,))


def _candidates(data: TreeData) -> tuple[Array, Array]:
    """Every rule of the grid: (K,) features and (K,) cuts, ``K = F x C`` (C cut slots), rule
    ``k`` being feature ``k // C``, cut ``k % C``."""
    n_features, n_cuts = data.bins.shape[1], data.cut_cumwidth.shape[1] - 2
    features = jnp.repeat(jnp.arange(n_features, dtype=jnp.int32), n_cuts)
    cuts = jnp.tile(jnp.arange(n_cuts, dtype=jnp.int32), n_features)
    return features, cuts


def rule_log_weights(state: CGMState, node: Array, data: TreeData, config) -> Array:
    """(K,) ``log w(r)`` of every candidate rule at ``node`` (:func:`_candidates` order; module
    docstring); ``-inf`` for a rule the prior does not allow at the node or that leaves a leaf
    with too few rows.

    All candidates at once: every row below ``node`` is routed once down the left subtree and once
    down the right one (the leaf it reaches on either side); per feature, a histogram over bins of
    those rows' statistics at each leaf, summed cumulatively, gives every cut's leaf statistics
    (``F x (C + 1) x N x S`` numbers).  The rows elsewhere are summed at their leaves afresh, so the
    weights are a function of the rows and the rules off ``node`` only: the same, bit for bit, from
    the current tree and from any proposal."""
    tree, bins, point_stats = state.tree, data.bins.astype(jnp.int32), data.point_stats
    n_rows, n_features = bins.shape
    n_nodes = tree.is_split.shape[0]
    n_cuts = data.cut_cumwidth.shape[1] - 2
    n_codes = n_cuts + 1
    below = in_subtree(node, max_depth_of(tree))[state.leaf_id]  # (n,) rows under node
    outside = jax.ops.segment_sum(jnp.where(below[:, None], 0.0, point_stats), state.leaf_id, n_nodes)
    inside = jnp.where(below[:, None], point_stats, 0.0)

    def leaf_histogram(start):  # (F, C + 1, N, S): stats of the rows below node by bin, at their leaf
        leaf = leaf_index(tree, bins, start=jnp.where(below, start, state.leaf_id))
        slot = (jnp.arange(n_features, dtype=jnp.int32)[None, :] * n_codes + bins) * n_nodes + leaf[:, None]
        values = jnp.broadcast_to(inside[:, None, :], (n_rows, n_features, inside.shape[1]))
        sums = jax.ops.segment_sum(values.reshape(n_rows * n_features, -1), slot.reshape(-1),
                                   n_features * n_codes * n_nodes)
        return jnp.cumsum(sums.reshape(n_features, n_codes, n_nodes, -1), axis=1)

    went_left, went_right = leaf_histogram(2 * node + 1), leaf_histogram(2 * node + 2)
    # cut c sends a row left iff its bin <= c: the left side's cumulative sum at c, the right's rest
    stats = outside + went_left[:, :n_cuts] + (went_right[:, -1:] - went_right[:, :n_cuts])  # (F, C, N, S)
    stats = stats.reshape(n_features * n_cuts, n_nodes, -1)
    is_leaf = leaf_nodes(tree)
    log_lik = jax.vmap(lambda s: data.likelihood.log_lik(s, is_leaf))(stats)
    rows = data.likelihood.rows(stats)
    enough = jnp.all(~is_leaf | (rows >= max(1, config.min_leaf_size)), axis=-1)
    features, cuts = _candidates(data)
    log_w = jnp.where(enough, state.beta * log_lik, -jnp.inf)
    log_w = log_w + log_rule_prob(state.lo[node], state.hi[node], features, cuts, data.cut_cumwidth)
    return jnp.where(jnp.isnan(log_w), -jnp.inf, log_w)


def step_with_uniforms(u: Array, state: CGMState, data: TreeData, config) -> tuple[CGMState, Array]:
    """One informed change of a uniformly chosen splitting node's rule (module docstring); ``u``
    (3,) uniforms from :func:`draw`.  Returns the new state and whether the proposal was accepted
    (a stump has no rule: it stays, not accepted)."""
    internal = state.tree.is_split
    node = pick(internal, u[0])
    log_w = rule_log_weights(state, node, data, config)
    cdf = jnp.cumsum(jnp.exp(log_w - jnp.max(log_w)))
    k = jnp.minimum(jnp.sum(u[1] * cdf[-1] >= cdf), log_w.shape[0] - 1)
    features, cuts = _candidates(data)
    n_cuts = data.cut_cumwidth.shape[1] - 2
    current = state.tree.feature[node].astype(jnp.int32) * n_cuts + state.tree.cut[node].astype(jnp.int32)
    proposed = score(change_rule(state.tree, node, Rule(features[k], cuts[k])), data, config, state.beta)
    log_ratio = mh_log_ratio(state.beta * (proposed.log_lik - state.log_lik), proposed.log_prior - state.log_prior,
                             log_w[current] - log_w[k])
    accepted = jnp.any(internal) & (jnp.log(u[2]) < log_ratio)
    new = jax.tree.map(lambda a, b: jnp.where(accepted, a, b), proposed, state)
    return new, accepted


@functools.lru_cache(maxsize=64)
def with_informed_change(config: cgm.CGMConfig) -> SamplingAlgorithm:
    """One CGM proposal then one informed change per iteration (a composition of two kernels that
    each leave the posterior invariant).  Recorded: CGM's ``move`` / ``accepted`` and
    ``informed_accepted``."""
    if config.general_rules:
        raise ValueError("the informed change move (proposal='cgm+informed') supports numeric features without "
                         "missing values; use proposal 'cgm' or 'cgm+perturb' with categorical features or missing "
                         "cells.")

    def init_fn(key, data):
        return cgm.init(key, data, config)

    def draw_fn(key):
        k1, k2 = jax.random.split(key)
        return cgm.draw(k1, config.general_rules), draw(k2)

    def kernel(uniforms, state, data):
        state, info = cgm.step_with_uniforms(uniforms[0], state, data, config)
        state, accepted = step_with_uniforms(uniforms[1], state, data, config)
        return state, (info, accepted)

    def trace_fn(state, info):
        out = cgm.trace(state, info[0], config.trace_dtypes)
        out["informed_accepted"] = info[1]
        return out

    return SamplingAlgorithm(init_fn, kernel, trace_fn, draw_fn)
