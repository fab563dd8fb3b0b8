"""The perturb move (:mod:`bdtree_jax.kernels.perturb`) with categorical features and missing-value
bits (docs/categorical-missing.md): proposal "cgm+perturb" on such data.

One step acts on a :class:`~bdtree_jax.kernels._moves.CGMState` of the general chain
(:mod:`bdtree_jax.kernels.cgm_general`, target ``p(T) L(T)^β``) and keeps the tree's shape:

* an internal node ``η`` uniformly among the ``I`` internal nodes (``I`` is the same in ``T`` and
  ``T'``); ``η``'s rows, hence its availability (cut intervals ``lo, hi`` and level sets), depend
  only on its ancestors and are the same in ``T`` and ``T'``;
* with probability ``p_change_var`` a **change of variable**, else a **rule perturbation** on the
  same feature ``v``;
* in both, the missing-value bit (when the tree has them) is redrawn from its prior
  ``Bernoulli(1/2)``: ``q(b' | b) = q(b | b') = 1/2``, a symmetric factor.

**Rule perturbation, ordered ``v``.**  The cut window of :mod:`~bdtree_jax.kernels.perturb`:
``c'`` uniform on ``W(c)`` (half-width ``h = max(1, round(width n / 2))``, ``n = hi - lo``), ratio
``|W(c)| / |W(c')|``.

**Rule perturbation, categorical ``v``.**  With ``E`` the node's available levels of ``v`` but the
smallest (``m = |E| >= 1``; the left set ``S`` is a non-empty subset of ``E``), choose
``h = min(m, max(1, round(width m / 2)))`` levels of ``E`` uniformly (each ``h``-subset with
probability ``1 / C(m, h)``) and move each to the other side: ``S' = S xor H``.  The reverse move
picks the same ``H`` with the same probability (``m`` and ``h`` are the same at ``T'``), so the
proposal is symmetric; an ``S'`` that is empty has prior 0 and is rejected.

**Change of variable.**  ``v'`` uniform among the other features with an available rule at ``η``
(an ordered cut, or >= 2 levels), and its rule (cut, or level set uniform over the
``2^(k-1) - 1`` partitions) and bit from the rule prior given ``v'``
(:func:`~bdtree_jax.priors.categorical.draw_rule_general` restricted to ``v'``).  The reverse move
picks ``v`` among the same features, so::

    q(T | T') / q(T' | T) = p_rule(rule | η) / p_rule(rule' | η)

(the feature choice, ``1/#features`` and the bit's ``1/2`` cancel), evaluated with
:func:`~bdtree_jax.priors.categorical.log_rule_prob_general`.

The proposed tree is re-scored whole (:func:`~bdtree_jax.kernels.cgm_general.score`):
``α = min{1, (L(T')/L(T))^β · p(T')/p(T) · q(T | T')/q(T' | T)}``, a tree outside the prior's
support (a descendant's rule no longer available) giving ``-inf``.  The width adapts during
warm-up as in :func:`~bdtree_jax.kernels.perturb.adapt` (informative proposals: a cut window of
more than one cut, or a categorical rule with ``m > 1``) and is fixed afterwards.

On data without categorical features and missing values the numeric kernel
(:func:`~bdtree_jax.kernels.perturb.with_perturb`) runs, unchanged.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from .._types import Array, PRNGKey
from ..data import TreeData
from ..priors import check_valid_cuts
from ..priors.categorical import categorical, draw_rule_general, log_rule_prob_general, rule_available
from ..tree import Rule, change, rule_at
from . import cgm_general, cgm as cgm_kernel
from ._moves import CGMState, pick
from .base import SamplingAlgorithm
from .perturb import PerturbConfig, PerturbInfo, PerturbState, _log_window_ratio, _window, adapt, init as perturb_init

__all__ = ["draw", "propose", "step", "with_perturb_general"]


def draw(key: PRNGKey):
    """The randomness of one step: (6,) uniforms (node, kind, feature, cut, accept, missing bit)
    and a key (the levels a categorical perturbation moves, a new level set)."""
    k_uniform, k_rule = jax.random.split(key)  # k_rule is fold_in(key, 1) as before; the uniforms changed
    return jax.random.uniform(k_uniform, (6,)), k_rule


def _unpack(mask: Array) -> Array:
    """(W,) uint32 -> (32 W,) bool."""
    return (((mask[:, None] >> jnp.arange(32, dtype=jnp.uint32)) & 1) == 1).reshape(-1)


def _pack(on: Array) -> Array:
    """(32 W,) bool -> (W,) uint32."""
    shaped = on.reshape(-1, 32).astype(jnp.uint32)
    return jnp.sum(shaped << jnp.arange(32, dtype=jnp.uint32), axis=-1, dtype=jnp.uint32)


def _lowest(mask: Array) -> Array:
    """(W,) uint32: the lowest set bit of the (W,) mask (0 where empty)."""
    on = _unpack(mask)
    first = jnp.argmax(on)
    return _pack(on & (jnp.arange(on.shape[0]) == first))


def _flip_levels(key, avail: Array, width: Array) -> tuple[Array, Array]:
    """The levels a categorical perturbation moves: ``h`` of the ``m`` levels of ``avail`` (W,)
    but the smallest, uniformly (the ``h`` smallest of i.i.d. uniform priorities).  Returns the
    (W,) mask of the moved levels and ``m``."""
    on = _unpack(avail & ~_lowest(avail))
    m = on.sum().astype(jnp.int32)
    h = jnp.clip(jnp.round(width * m.astype(jnp.float32) / 2).astype(jnp.int32), 1, jnp.maximum(m, 1))
    prio = jnp.where(on, jax.random.uniform(key, on.shape), 2.0)
    idx = jnp.arange(on.shape[0])
    before = (prio[None, :] < prio[:, None]) | ((prio[None, :] == prio[:, None]) & (idx[None, :] < idx[:, None]))
    rank = before.sum(axis=1)
    return _pack(on & (rank < h)), m


def propose(draws, state: CGMState, width: Array, data: TreeData, config: PerturbConfig):
    """The proposal of one step (module docstring).

    Returns
    -------
    proposed : CGMState of ``T'`` (re-scored).
    log_ratio : () float32 ``log α`` before the ``min`` (``-inf`` if impossible).
    kind : () int32 index into :data:`~bdtree_jax.kernels.perturb.KINDS`, -1 if no move is possible.
    informative : () bool, see :class:`~bdtree_jax.kernels.perturb.PerturbInfo`.
    """
    uniforms, key = draws
    u_node, u_kind, u_feature, u_cut, _, u_nan = (uniforms[i] for i in range(6))
    tree = state.tree
    internal = tree.is_split
    node = pick(internal, u_node)
    rule = rule_at(tree, node)
    v, c = rule.feature.astype(jnp.int32), rule.cut.astype(jnp.int32)
    lo, hi = state.lo[node], state.hi[node]  # (F,)
    levels = None if state.levels is None else state.levels[node]  # (F, W)
    change_var = u_kind < config.p_change_var
    nan_bits = tree.nan_left is not None
    nan_new = (u_nan < 0.5) if nan_bits else None

    # rule perturbation on v: an ordered cut in its window ...
    lo_v, hi_v = lo[v], hi[v]
    half = jnp.maximum(1, jnp.round(width * (hi_v - lo_v).astype(jnp.float32) / 2).astype(jnp.int32))
    first, size = _window(c, lo_v, hi_v, half)
    c_cut = jnp.minimum(first + jnp.floor(u_cut * size).astype(jnp.int32), first + size - 1)
    _, size_new = _window(c_cut, lo_v, hi_v, half)
    log_q_perturb = _log_window_ratio(size, size_new)
    informative = size > 1
    perturbed = Rule(v, c_cut, nan_new, rule.levels_left)
    # ... or h levels of a categorical rule moved to the other side (symmetric)
    if levels is not None:
        is_cat = categorical(data)[v]
        flip, m = _flip_levels(jax.random.fold_in(key, 2), levels[v], width)
        perturbed = Rule(v, jnp.where(is_cat, 0, c_cut), nan_new,
                         jnp.where(is_cat, rule.levels_left ^ flip, rule.levels_left))
        log_q_perturb = jnp.where(is_cat, 0.0, log_q_perturb)
        informative = jnp.where(is_cat, m > 1, informative)

    # change of variable: another feature with an available rule, its rule from the prior
    others = rule_available(lo, hi, levels) & (jnp.arange(lo.shape[0]) != v)
    v_new = pick(others, u_feature)
    only = jnp.arange(lo.shape[0]) == v_new
    drawn = draw_rule_general(jax.random.fold_in(key, 3), u_feature, u_cut, u_nan, jnp.where(only, lo, 0),
                              jnp.where(only, hi, 0), None if levels is None else jnp.where(only[:, None], levels, 0),
                              data, nan_bits)
    new_rule = jax.tree.map(lambda a, b: jnp.where(change_var, a, b), drawn, perturbed)
    proposed = cgm_general.score(change(tree, node, new_rule.feature, new_rule.cut, new_rule), data, config,
                                 state.beta)
    proposed = proposed._replace(leaf_id=proposed.leaf_id.astype(state.leaf_id.dtype))

    log_q_var = log_rule_prob_general(lo, hi, levels, rule, data) - log_rule_prob_general(lo, hi, levels, drawn, data)
    log_q = jnp.where(change_var, log_q_var, log_q_perturb)
    log_ratio = state.beta * (proposed.log_lik - state.log_lik) + (proposed.log_prior - state.log_prior) + log_q
    possible = jnp.any(internal) & (~change_var | jnp.any(others))
    log_ratio = jnp.where(possible & ~jnp.isnan(log_ratio), log_ratio, -jnp.inf)
    kind = jnp.where(possible, change_var.astype(jnp.int32), -1)
    return proposed, log_ratio, kind, possible & ~change_var & informative


def step(draws, state: CGMState, width: Array, data: TreeData, config: PerturbConfig):
    """One perturb MH step at window ``width`` (fixed): the new CGMState and a PerturbInfo."""
    proposed, log_ratio, kind, informative = propose(draws, state, width, data, config)
    accepted = jnp.log(draws[0][4]) < log_ratio
    new_state = jax.tree.map(lambda a, b: jnp.where(accepted, a, b), proposed, state)
    return new_state, PerturbInfo(kind, accepted, log_ratio, informative)


@functools.lru_cache(maxsize=64)
def with_perturb_general(config: cgm_kernel.CGMConfig, perturb_config: PerturbConfig) -> SamplingAlgorithm:
    """One general-rule CGM step (:func:`~bdtree_jax.kernels.cgm_general.sampler`) then one
    perturb step per iteration (proposal "cgm+perturb" on categorical / missing data); the state
    is a :class:`~bdtree_jax.kernels.perturb.PerturbState` (tempering wraps it).  Recorded: CGM's
    trace plus ``perturb_accepted`` and ``perturb_width``."""
    base = cgm_general.sampler(config)

    def init_fn(key, data):
        check_valid_cuts(data, "The perturb move (proposal='cgm+perturb')")
        return perturb_init(base.init(key, data), perturb_config)

    def draw_fn(key):
        k1, k2 = jax.random.split(key)
        return base.draw(k1), draw(k2)

    def kernel(draws, state, data):
        u_base, u_perturb = draws
        new, base_info = base.step(u_base, state.base._replace(beta=state.beta), data)
        new, info = step(u_perturb, new, jnp.exp(state.log_width), data, perturb_config)
        iteration, log_width = adapt(state.iteration, state.log_width, info, perturb_config)
        return PerturbState(new, iteration, log_width, new.log_lik, state.beta), (base_info, info)

    def trace_fn(state, info):
        out = dict(base.trace(state.base, info[0]))
        out["perturb_accepted"] = info[1].accepted
        out["perturb_width"] = jnp.exp(state.log_width)
        return out

    return SamplingAlgorithm(init_fn, kernel, trace_fn, draw_fn)
