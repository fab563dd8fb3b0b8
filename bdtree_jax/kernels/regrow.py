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
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import jax
import jax.numpy as jnp

from .._types import Array, PRNGKey
from ..data import TreeData
from ..priors import check_cgm_structure, check_valid_cuts, regrow_subtree, subtree_sums, violates_boxes
from ..tree import active_nodes
from . import cgm
from ._moves import pick, with_scores
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
    (split?, feature, cut per heap slot) and a key for redraws (box constraints only)."""
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
        return cgm.draw(k1), draw(k2, config.max_depth)

    def kernel(uniforms, state, data):
        state, info = cgm.step_with_uniforms(uniforms[0], state, data, config)
        state, info_regrow = step_with_uniforms(uniforms[1], state, data, regrow_config)
        return state, (info, info_regrow.accepted)

    def trace_fn(state, info):
        out = cgm.trace(state, info[0], config.trace_dtypes)
        out["regrow_accepted"] = info[1]
        return out

    return SamplingAlgorithm(init_fn, kernel, trace_fn, draw_fn)
