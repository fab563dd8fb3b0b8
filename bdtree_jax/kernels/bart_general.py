"""BART's backfitting sweep over data with categorical features or missing values
(docs/categorical-missing.md).

Each tree, in turn, is updated on its partial residual with the leaf values integrated out, by
one step of the general-rule CGM chain (:mod:`bdtree_jax.kernels.cgm_general`: grow and prune for
``tree_sampler="grow-prune"``, the four CGM98 moves for ``"cgm"``) or, for ``"pg"``, one
conditional-SMC sweep with the current tree as the reference (:func:`bdtree_jax.kernels.pg.step`,
``num_particles`` particles, prior proposal; its particles grow by
:func:`bdtree_jax.kernels.smc_general.advance`: level sets uniform over the partitions of the
available levels, the missing-value bit ``Bernoulli(1/2)``); then its leaf values are drawn from
their conditional posterior -- the same Gibbs sweep as :mod:`bdtree_jax.kernels.bart`, whose
numeric-data sweeps are specialised and faster.  With ``incremental`` (sequential chains) a
grow / prune / flip step updates the leaves and stats of only the rows it moves
(:mod:`bdtree_jax.kernels.bart_general_moves`: the same chain and decisions as
:func:`bdtree_jax.kernels.cgm_general.step`); otherwise each tree step re-scores the tree on the
residual (one pass over the rows, branch-free for vmapped chains).  Under BART's default
``valid_cuts="ancestors"`` the rules' availability does not read the rows.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ..likelihoods import BARTLeafNormal
from ..priors import split_mask, subtree_sums
from ..priors.categorical import rule_available
from ..tree import leaf_nodes, n_nodes
from . import bart_general_moves, cgm_general, pg
from ._moves import CGMState

__all__ = ["sweep", "can_split", "residual_data"]


def residual_data(data, residual, sigma2):
    """The TreeData of one tree update: rows ``[1, r, r**2]`` of the residual and the leaf model
    (the data's ``tau2`` with the current ``sigma2``)."""
    point_stats = jnp.stack([jnp.ones_like(residual), residual, residual * residual], axis=1)
    likelihood = BARTLeafNormal(sigma2, data.tree_data.likelihood.tau2)
    return data.tree_data._replace(point_stats=point_stats.astype(jnp.float32), likelihood=likelihood)


def can_split(trees: CGMState, split_prob) -> jax.Array:
    """(M, N) bool: every node has an available rule and may split."""
    return jnp.any(rule_available(trees.lo, trees.hi, trees.levels), axis=-1) & (split_mask(split_prob) > 0)


def sweep(state, data, target, total, sigma2, uniforms, normals, tree_keys, config):
    """One pass over the trees (a ``lax.scan``); returns ``(total, leaf_values, changed, trees,
    can_split)`` as :func:`bdtree_jax.kernels.bart._kernel_sweep`: ``total`` (n,), ``leaf_values``
    (M, N), ``changed`` (M,), ``trees`` a CGMState of (M, ...) arrays, ``can_split`` (M, N).
    ``uniforms`` (M, 10) and ``tree_keys`` (M,) are each tree's
    :func:`~bdtree_jax.kernels.cgm_general.draw` (``"pg"``: the key of its sweep, the uniforms
    unused); ``normals`` (M, N) the leaf values' standard normals."""
    N = n_nodes(config.max_depth)
    trees = state.trees
    cgm_config = config.cgm
    # sequential chains: local updates under lax.cond / switch; vmapped ones: the branch-free re-score
    tree_step = bart_general_moves.step if cgm_config.incremental else cgm_general.step

    def body(total, xs):
        (tree, leaf_id, lo, hi, levels, log_prior), values, u, z, k = xs
        old = values[leaf_id]
        residual = target - (total - old)
        data_m = residual_data(data, residual, sigma2)
        stats = subtree_sums(data_m.point_stats, leaf_id, N)
        log_lik = data_m.likelihood.log_lik(stats, leaf_nodes(tree))
        current = CGMState(tree, leaf_id.astype(jnp.int32), stats, lo, hi, log_lik, log_prior, jnp.float32(1.0),
                           levels)
        if config.tree_sampler == "pg":  # the particles start at the stump, the reference replays `tree`
            new, info = pg.step(k, current, data_m, config.pg)
        else:
            new, info = tree_step((u, k), current, data_m, cgm_config)
        mean, sd = data_m.likelihood.leaf_posterior(new.stats)
        values = jnp.where(leaf_nodes(new.tree), mean + sd * z, 0.0).astype(jnp.float32)
        structure = (new.tree, new.leaf_id.astype(leaf_id.dtype), new.lo, new.hi, new.levels, new.log_prior)
        return total - old + values[new.leaf_id], (structure, values, new.stats, info.accepted)

    structure = (trees.tree, trees.leaf_id, trees.lo, trees.hi, trees.levels, trees.log_prior)
    total, (structure, values, stats, changed) = jax.lax.scan(
        body, total, (structure, state.leaf_values, uniforms, normals, tree_keys))
    tree, leaf_id, lo, hi, levels, log_prior = structure
    trees = trees._replace(tree=tree, leaf_id=leaf_id, stats=stats, lo=lo, hi=hi, levels=levels, log_prior=log_prior)
    return total, values, changed, trees, can_split(trees, data.tree_data.split_prob)
