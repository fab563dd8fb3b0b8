"""Prune-and-regrow: the uniform-choice backtracking proposal ``q_uc`` of Angelopoulos & Cussens
(2005), on the CGM98 prior shared by every hard-split sampler.

One step picks a node ``η`` uniformly among the ``d_T`` active nodes of the current tree ``T``
(every node is a choice point of the prior's generative process: split or not, and which rule),
discards the subtree below and including ``η``'s rule, and regrows it from the prior given the
rows reaching ``η`` (:func:`bdtree_jax.priors.regrow_subtree`).  Picking the root proposes an
independent draw from the prior; picking a leaf proposes growing from it.

**Acceptance.**  Write ``p(T) = p_out(T) p_η(S)``: the prior factors of the nodes outside the
subtree (which depend only on their own rows, hence are unchanged) times those of the subtree
``S``.  The proposal is ``q(T' | T) = p_η(S') / d_T`` and the reverse move picks the same ``η``
in ``T'`` (it is active there: it is the root of ``S'``) with ``q(T | T') = p_η(S) / d_T'``, so
for the target ``p(T) L(T)^β``::

    r = (p(T') L(T')^β q(T | T')) / (p(T) L(T)^β q(T' | T)) = (d_T / d_T') (L(T') / L(T))^β

— the paper's ``α_uc``.

**Box constraints.**  The target prior is then ``p(T) 1[T respects the boxes]``.  Whether a
regrown tree respects them depends only on the new subtree and its root's region, which the
forward and the reverse move share; so the subtree is redrawn until it respects the boxes (up to
``max_attempts`` draws; if all fail the step stays).  The proposal becomes
``p_η(S') 1[S' ok] c_η / d_T`` with ``c_η = (1 - (1 - Z_η)^A) / Z_η`` (``Z_η`` the prior mass
of valid subtrees at ``η``, ``A`` the attempts) the same in both directions, so the ratio above
is unchanged -- and the chain does not stall on proposals that cut a box, as plain rejection
would (a subtree drawn from the prior at the root cuts some box most of the time).
Different ``η`` that produce the same ``T'`` are separate moves of a mixture, each reversible on
its own, so no sum over ``η`` is needed.

**Categorical features and missing values** (decided statically from the data).  The subtree is
redrawn level by level with the general rule prior (:mod:`bdtree_jax.priors.categorical`: each
level's availability, cut intervals and level sets, from the partial tree's rows; a rule's level
set from a key per heap slot, its missing-value bit from a uniform per slot), and the proposed tree
is re-scored whole.  A tree cutting a box has prior 0 there (the redraw loop above is the numeric
path's), so such a proposal is rejected: the chain still targets the prior restricted to the boxes.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import jax
import jax.numpy as jnp

from .._types import Array, PRNGKey
from ..data import TreeData
from ..priors import check_cgm_structure, check_valid_cuts, node_bounds, regrow_subtree, subtree_sums, violates_boxes
from ..priors.categorical import available_levels, general_rules, rule_available
from ..tree import Rule, Tree, active_nodes, goes_left, in_subtree, leaf_nodes, make_tree, node_depths, rule_at
from . import cgm
from ._moves import draw_prior_rule, pick, score, with_scores
from .base import SamplingAlgorithm

__all__ = ["RegrowConfig", "draw", "step", "step_with_uniforms", "regrow", "with_regrow"]


@dataclass(frozen=True)
class RegrowConfig:
    """Static configuration: ``max_depth``, ``min_leaf_size`` and the recorded trees' integer
    types (as :class:`~bdtree_jax.kernels.cgm.CGMConfig`); ``max_attempts``: draws of the
    subtree until one respects the box constraints (used only when the data have boxes)."""

    max_depth: int
    min_leaf_size: int = 1
    trace_dtypes: tuple = ("int32", "int32")
    max_attempts: int = 32

    @property
    def cgm(self) -> cgm.CGMConfig:
        return cgm.CGMConfig(self.max_depth, self.min_leaf_size, trace_dtypes=self.trace_dtypes)


def draw(key: PRNGKey, max_depth: int) -> tuple[Array, Array, PRNGKey]:
    """The randomness of one step: (2,) uniforms (node, accept), (N, 3) for the regrown subtree
    (split?, feature, cut per heap slot) and a key for redraws (box constraints only; on general
    data the key of the slots' level sets and missing-value bits)."""
    k1, k2, k3 = jax.random.split(key, 3)
    return jax.random.uniform(k1, (2,)), jax.random.uniform(k2, (2 ** (max_depth + 1) - 1, 3)), k3


def step(key: PRNGKey, state: cgm.CGMState, data: TreeData, config: RegrowConfig):
    return step_with_uniforms(draw(key, config.max_depth), state, data, config)


def step_with_uniforms(uniforms, state: cgm.CGMState, data: TreeData, config: RegrowConfig):
    """One prune-and-regrow MH step; the state and info types are CGM's (``info.move`` is 0)."""
    check_cgm_structure(data.split_prob, "Prune-and-regrow (proposal 'regrow' / 'cgm+regrow')")
    check_valid_cuts(data, "Prune-and-regrow (proposal 'regrow' / 'cgm+regrow')")
    (u_node, u_accept), sub, redraw_key = uniforms
    active = active_nodes(state.tree)
    d_old = active.sum()
    node = pick(active, u_node)

    if general_rules(data):
        tree = _regrow_mixed_subtree(state, node, sub, redraw_key, data, config)
        proposed = score(tree, data, config, state.beta)
        proposed = proposed._replace(leaf_id=proposed.leaf_id.astype(state.leaf_id.dtype))
    else:
        def attempt(u):
            return regrow_subtree(state.tree, state.leaf_id, state.lo, state.hi, node, u, data, config.min_leaf_size)

        new = attempt(sub)
        if data.box_side is not None and config.max_attempts > 1:
            def again(carry):
                a, _ = carry
                return a + 1, attempt(jax.random.uniform(jax.random.fold_in(redraw_key, a), sub.shape))

            _, new = jax.lax.while_loop(
                lambda c: (c[0] < config.max_attempts) & violates_boxes(c[1][0], data.box_side), again, (1, new)
            )
        tree, leaf_id, lo, hi = new
        stats = subtree_sums(data.point_stats, leaf_id, tree.is_split.shape[0])
        proposed = with_scores(tree, leaf_id, stats, lo, hi, data, state.beta)
    d_new = active_nodes(tree).sum()
    log_ratio = state.beta * (proposed.log_lik - state.log_lik) + jnp.log(d_old) - jnp.log(d_new)
    log_ratio = jnp.where(jnp.isfinite(proposed.log_prior) & ~jnp.isnan(log_ratio), log_ratio, -jnp.inf)
    accepted = jnp.log(u_accept) < log_ratio
    new_state = jax.tree.map(lambda a, b: jnp.where(accepted, a, b), proposed, state)
    return new_state, cgm.CGMInfo(jnp.int32(0), accepted, log_ratio)


def _regrow_mixed_subtree(state: cgm.CGMState, node: Array, sub: Array, key: PRNGKey, data: TreeData,
                    config: RegrowConfig) -> Tree:
    """The tree with ``node``'s subtree redrawn from the general rule prior given its rows, level
    by level (each level's availability from the partial tree's rows).  ``sub`` (N, 3) the slots'
    uniforms (split?, feature, cut); ``key`` gives the slots' level sets and, per level, the
    missing-value bits' uniforms."""
    tree = state.tree
    depth = config.max_depth
    depths = jnp.asarray(node_depths(depth))
    in_sub = in_subtree(node, depth)
    tree = jax.tree.map(lambda a: jnp.where(in_sub.reshape(in_sub.shape + (1,) * (a.ndim - 1)), jnp.zeros_like(a), a),
                        tree)
    leaf_id = state.leaf_id
    row_depth = depths[leaf_id]
    leaf_id = jnp.where(in_sub[leaf_id], ((leaf_id + 1) >> jnp.maximum(row_depth - depths[node], 0)) - 1, leaf_id)
    leaf_id = leaf_id.astype(jnp.int32)
    flat = data.bins.reshape(-1)
    row_offset = jnp.arange(data.bins.shape[0], dtype=jnp.int32) * data.bins.shape[1]
    nan_bits = tree.nan_left is not None
    # one split: the slots' keys, then one key per level for its missing-value uniforms
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
        rules = jax.vmap(lambda k, uf, uc, un, l, h, lv: draw_prior_rule(uf, uc, un, k, l, h, lv, data, nan_bits),
                         in_axes=(0, 0, 0, 0, 0, 0, 0 if levels is not None else None))(
            slot_keys[slots], sub[slots, 1], sub[slots, 2], jax.random.uniform(level_keys[level], (count,)),
            lo[slots], hi[slots], at(levels))
        tree = _grow_level(tree, slots, rules, grow_here)
        rule = rule_at(tree, leaf_id)
        left = goes_left(flat[row_offset + rule.feature], rule)
        moves = (leaf_id >= first) & (leaf_id < first + count) & grow_here[jnp.clip(leaf_id - first, 0, count - 1)]
        leaf_id = jnp.where(moves, 2 * leaf_id + 1 + (~left).astype(jnp.int32), leaf_id)
    return tree


def _grow_level(tree: Tree, slots: Array, rules: Rule, grow_here: Array) -> Tree:
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
def regrow(config: RegrowConfig) -> SamplingAlgorithm:
    """The prune-and-regrow sampler as a :class:`SamplingAlgorithm` (chains start at the stump)."""
    cgm_config = config.cgm

    def init_fn(key, data):
        return cgm.init(key, data, cgm_config)

    def kernel(uniforms, state, data):
        return step_with_uniforms(uniforms, state, data, config)

    def trace_fn(state, info):
        return cgm.trace(state, info, config.trace_dtypes)

    return SamplingAlgorithm(init_fn, kernel, trace_fn, functools.partial(draw, max_depth=config.max_depth))


@functools.lru_cache(maxsize=64)
def with_regrow(config: cgm.CGMConfig) -> SamplingAlgorithm:
    """One CGM proposal then one prune-and-regrow proposal per iteration (a composition of two
    kernels that each leave the posterior invariant).  Recorded: CGM's ``move`` / ``accepted``
    and ``regrow_accepted``."""
    regrow_config = RegrowConfig(config.max_depth, config.min_leaf_size, config.trace_dtypes)

    def init_fn(key, data):
        return cgm.init(key, data, config)

    def draw_fn(key):
        k1, k2 = jax.random.split(key)
        return cgm.draw(k1, config.general_rules), draw(k2, config.max_depth)

    def kernel(uniforms, state, data):
        state, info = cgm.step_with_uniforms(uniforms[0], state, data, config)
        state, info_regrow = step_with_uniforms(uniforms[1], state, data, regrow_config)
        return state, (info, info_regrow.accepted)

    def trace_fn(state, info):
        out = cgm.trace(state, info[0], config.trace_dtypes)
        out["regrow_accepted"] = info[1]
        return out

    return SamplingAlgorithm(init_fn, kernel, trace_fn, draw_fn)
