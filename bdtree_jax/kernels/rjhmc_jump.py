"""RJHMC-Tree's reversible jump (:mod:`bdtree_jax.kernels.rjhmc`, ``docs/theory/rjhmc.md``): the
choice of the move (grow / prune / change / stay) and its node, the proposal of the continuous
parameters at the jump point (a grown node's rule, the leaf means of the node and its children),
and the acceptance.

Shapes as in :mod:`bdtree_jax.kernels.rjhmc_model`: ``is_split`` (N,) bool, ``feature`` (M,) int32,
``z`` (P,) float32 unconstrained parameters laid out by a :class:`~bdtree_jax.kernels.rjhmc_model.Layout`.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from ..soft import leaf_membership
from ..tree import Tree, nog_nodes
from . import rjhmc_split
from .rjhmc_model import SPLIT_SITES, constrained, has_feature, potential_fn, right_probs
from .rjhmc_moves import propose_topology

__all__ = ["MOVES", "MoveProposal", "Point", "propose_move", "propose_jump", "accept"]

MOVES = ("grow", "prune", "stay", "change")
"""The moves; an iteration records its move's index."""


class MoveProposal(NamedTuple):
    """The move of one iteration.

    is_split : (N,) bool the proposed topology ``T'`` (``T`` unless a grow or prune).
    node : () int32 the grown, pruned or changed node.
    topology : () bool a grow or prune; grow : () bool a grow; change : () bool a change.
    log_q_ratio : () float32 ``log q(T | T') - log q(T' | T)`` (0 unless a grow or prune).
    code : () int8 the move's index in :data:`MOVES`.
    """

    is_split: Any
    node: Any
    topology: Any
    grow: Any
    change: Any
    log_q_ratio: Any
    code: Any

    @property
    def jump(self):
        """() bool: the move proposes new parameters at the jump point (grow, prune or change)."""
        return self.topology | self.change


class Point(NamedTuple):
    """A point of the joint space: topology ``is_split`` (N,) bool, ``feature`` (M,) int32, ``z`` (P,)."""

    is_split: Any
    feature: Any
    z: Any


def propose_move(k_move, k_topology, k_change, is_split, move_probs, has_change: bool) -> MoveProposal:
    """Choose grow / prune / change / stay with probabilities ``move_probs`` (4,) and the node:
    a grow or prune by :func:`~bdtree_jax.kernels.rjhmc_moves.propose_topology` (a stay when
    impossible), a change (``has_change``) at a uniformly chosen node whose children are leaves,
    root included (a stay on a tree without splits: it has no rule to change).  ``k_move`` draws the
    move, ``k_topology`` the grow / prune proposal, ``k_change`` the changed node."""
    p = move_probs
    u = jax.random.uniform(k_move)
    topo = u < p[0] + p[1]
    prop = propose_topology(k_topology, is_split, p[0] / jnp.maximum(p[0] + p[1], 1e-12))
    topo = topo & jnp.isfinite(prop.log_q_ratio)
    log_q = jnp.where(topo, prop.log_q_ratio, 0.0)
    new_split = jnp.where(topo, prop.is_split, is_split)
    node, grow = prop.node, topo & prop.grow
    change = jnp.bool_(False)
    if has_change:  # Q = 1
        changeable = nog_nodes(Tree(is_split, None, None))
        change = (u >= p[0] + p[1]) & (u < p[0] + p[1] + p[2]) & changeable.any()
        change_node = jax.random.categorical(k_change, jnp.where(changeable, 0.0, -jnp.inf))
        node = jnp.where(change, change_node, node)
    grow_or_prune = jnp.where(prop.grow, MOVES.index("grow"), MOVES.index("prune"))
    code = jnp.where(topo, grow_or_prune, jnp.where(change, MOVES.index("change"), MOVES.index("stay")))
    code = code.astype(jnp.int8)
    return MoveProposal(new_split, node, topo, grow, change, log_q, code)


def _log_jacobian(transforms, params):
    """Log |det| of the constraining transforms of the rule sites at the unconstrained ``params``
    (the rule proposal's densities are in constrained coordinates; the jump is in ``z``'s)."""
    return sum(
        jnp.sum(transforms[n].log_abs_det_jacobian(params[n], transforms[n](params[n])))
        for n in SPLIT_SITES if n in params
    )


def _rule_jump(key, data, config, lay, z, c, psi, is_split, feature, move: MoveProposal, beta):
    """The node's rule at a grow or change drawn from :func:`rjhmc_split.propose_rule`, at a prune
    redrawn from the prior (``c``: ``z``'s constrained values, ``psi`` (n, M) their right
    probabilities); returns ``(z, feature, log_q)`` with ``log_q`` the log of (reverse / forward)
    proposal densities in the unconstrained coordinates of ``z``: at a grow
    ``log p(old) - log q(new)``, at a prune ``log q(old) - log p(new)``, at a change
    ``log q(old) - log q(new)``.  ``key`` splits into the proposal's and the prior's keys."""
    params = lay.unravel(z)
    node, grow, change = move.node, move.grow, move.change
    oblique = not has_feature(data, config)
    n_features = data["X"].shape[1]
    leafed = is_split.at[node].set(False)  # the node's rows: its ancestors' rules
    weight = leaf_membership(leafed, psi)[:, node]
    noise_prec = beta / jnp.square(c["sigma"])
    cand = rjhmc_split.split_candidates(data["X"], data["y"], weight, noise_prec, config.mu_mean, config.mu_scale)
    k_q, k_p = jax.random.split(key)
    q_first, q_tau = rjhmc_split.propose_rule(k_q, cand, n_features, oblique)
    p_first, p_tau = rjhmc_split.prior_rule(k_p, n_features, oblique)
    from_q = grow | change
    new_first, new_tau = jnp.where(from_q, q_first, p_first), jnp.where(from_q, q_tau, p_tau)
    old_first = c["tree_weights"][node] if oblique else feature[node]
    old_tau = c["tree_tau"][node]
    log_q_old = rjhmc_split.rule_log_density(cand, old_first, old_tau, n_features, oblique)
    log_q_new = rjhmc_split.rule_log_density(cand, new_first, new_tau, n_features, oblique)
    log_p_old = rjhmc_split.prior_log_density(old_first, old_tau, n_features, oblique)
    log_p_new = rjhmc_split.prior_log_density(new_first, new_tau, n_features, oblique)
    new = dict(params)
    tau = lay.transforms["tree_tau"]
    new["tree_tau"] = params["tree_tau"].at[node].set(tau.inv(c["tree_tau"].at[node].set(new_tau))[node])
    if oblique:
        weights = lay.transforms["tree_weights"]
        new["tree_weights"] = params["tree_weights"].at[node].set(
            weights.inv(c["tree_weights"].at[node].set(new_first))[node]
        )
    else:
        feature = feature.at[node].set(new_first)
    log_q = jnp.where(grow, log_p_old, log_q_old) - jnp.where(from_q, log_q_new, log_p_new)
    log_q = log_q + _log_jacobian(lay.transforms, params) - _log_jacobian(lay.transforms, new)
    return ravel_pytree(new)[0], feature, log_q


def _leaf_block_conditional(data, config, c, psi, is_split, block, beta):
    """Gaussian full conditional of ``leaf_mean[block]`` (3,) under topology ``is_split`` given
    every other parameter (constrained values ``c``; ``psi`` (n, M) the splits' right probabilities
    at the rows) and the tempered likelihood: its mean (3,) and the Cholesky factor ``L`` (3, 3)
    of its precision.  Slots of the block that are not leaves of ``is_split`` get no likelihood
    term: their conditional is the prior."""
    phi = leaf_membership(is_split, psi)
    mu, noise_prec = c["leaf_mean"], beta / jnp.square(c["sigma"])
    P = phi[:, block]
    resid = data["y"] - phi @ mu + P @ mu[block]
    prior_prec = 1.0 / config.mu_scale**2
    prec = prior_prec * jnp.eye(3) + noise_prec * (P.T @ P)
    L = jnp.linalg.cholesky(prec)
    mean = jax.scipy.linalg.cho_solve((L, True), prior_prec * config.mu_mean + noise_prec * (P.T @ resid))
    return mean, L


def _gaussian_log_density(x, mean, L):
    """Log density of ``x`` (3,) under N(mean, (L L^T)^-1), ``L`` the precision's Cholesky factor."""
    d = L.T @ (x - mean)
    return -0.5 * d @ d + jnp.sum(jnp.log(jnp.diag(L))) - 1.5 * np.log(2 * np.pi)


def _leaf_jump(key, data, config, lay, c_old, psi_old, z_new, is_split, new_split, f_new, node, beta):
    """Leaf means of ``node`` and its children redrawn from their conditional under ``new_split``
    with the rules of ``z_new`` / ``f_new`` (the old state: ``is_split``, constrained values
    ``c_old`` and their right probabilities ``psi_old`` (n, M)); returns ``z_new`` with them and
    ``log q(old | is_split) - log q(new | new_split)``.  ``key`` draws the (3,) normal deviates."""
    params = lay.unravel(z_new)
    c = {n: lay.transforms[n](v) for n, v in params.items()}
    n_slots = is_split.shape[-1]
    block = jnp.minimum(jnp.stack([node, 2 * node + 1, 2 * node + 2]), n_slots - 1)
    # the rules differ from the old ones only where a rule is proposed
    psi_new = right_probs(data, config, c, f_new) if config.conditional_splits else psi_old
    mean_new, L_new = _leaf_block_conditional(data, config, c, psi_new, new_split, block, beta)
    mean_old, L_old = _leaf_block_conditional(data, config, c_old, psi_old, is_split, block, beta)
    b_old = c_old["leaf_mean"][block]
    b_new = mean_new + jax.scipy.linalg.solve_triangular(L_new.T, jax.random.normal(key, (3,)), lower=False)
    log_q = _gaussian_log_density(b_old, mean_old, L_old) - _gaussian_log_density(b_new, mean_new, L_new)
    params["leaf_mean"] = lay.transforms["leaf_mean"].inv(c["leaf_mean"].at[block].set(b_new))
    return ravel_pytree(params)[0], log_q


def _swap_leaf_sites(config, lay, z, node):
    """``z`` with the leaf parameters of slots ``node`` and ``2 node + 1`` swapped (the paper's
    jump: the left child inherits the grown leaf's parameters; Jacobian 1)."""
    params = lay.unravel(z)
    for name in config.leaf_sites:
        v = params[name]
        a, b = v[node], v[2 * node + 1]
        params[name] = v.at[node].set(b).at[2 * node + 1].set(a)
    return ravel_pytree(params)[0]


def propose_jump(k_rule, k_leaf, data, config, lay, move: MoveProposal, start: Point, beta):
    """The jump ``x' -> x*`` from the end ``start`` of the first leg (at topology ``T``) to the
    topology ``move.is_split``: returns ``(Point x*, log_q)``, ``log_q`` () the log of the reverse
    over the forward proposal densities (``move.log_q_ratio``, the rule's and the leaf means').

    Regression with ``split_proposal="conditional"``: the node's rule from :func:`_rule_jump`
    (``k_rule``).  With ``leaf_proposal="conditional"``: the leaf means of the node and its
    children from their full conditional under ``T'`` (:func:`_leaf_jump`, ``k_leaf``); otherwise
    the paper's jump (:func:`_swap_leaf_sites` at a grow or prune)."""
    is_split, f1, z1 = start
    jump, log_q = move.jump, move.log_q_ratio
    z_rule, f_star = z1, f1
    if config.conditional_splits or config.conditional_leaves:
        c1 = constrained(lay, z1)
        psi1 = right_probs(data, config, c1, f1)
    if config.conditional_splits:
        z_rule, f_rule, log_q_rule = _rule_jump(k_rule, data, config, lay, z1, c1, psi1, is_split, f1, move, beta)
        f_star = jnp.where(jump, f_rule, f1)
        log_q = log_q + jnp.where(jump, log_q_rule, 0.0)
    if config.conditional_leaves:
        z_jump, log_q_leaves = _leaf_jump(
            k_leaf, data, config, lay, c1, psi1, z_rule, is_split, move.is_split, f_star, move.node, beta
        )
        z_star = jnp.where(jump, z_jump, z1)
        log_q = log_q + jnp.where(jump, log_q_leaves, 0.0)
    else:
        z_star = jnp.where(
            move.topology, _swap_leaf_sites(config, lay, z_rule, move.node), jnp.where(move.change, z_rule, z1)
        )
    return Point(move.is_split, f_star, z_star), log_q


def accept(key, data, config, lay, warm, start: Point, before: Point, after: Point, end: Point, log_q, beta):
    """Accept ``end`` (the second leg's end, at ``T'``) or return to ``start`` (the refreshed state at
    ``T``): ``(accepted () bool, log_alpha () float32)``.  After warm-up the double-sided acceptance
    ``log pi(after) - log pi(before) + log_q`` at the jump point ``before -> after`` (the legs
    cancel), during warm-up (``warm``) the paper's biased ``log pi(end) - log pi(start) + log_q``;
    densities at ``h_final`` with the likelihood raised to ``beta``.  ``key`` draws the exponential
    of the test."""

    def potential(x: Point):
        return potential_fn(data, config, lay, x.is_split, x.feature, float(config.h_final), beta)(x.z)

    log_unbiased = potential(before) - potential(after) + log_q
    log_biased = potential(start) - potential(end) + log_q
    log_alpha = jnp.where(warm, log_biased, log_unbiased)
    log_alpha = jnp.where(jnp.isnan(log_alpha), -jnp.inf, log_alpha)
    return jax.random.exponential(key) > -log_alpha, log_alpha
