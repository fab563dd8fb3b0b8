"""RJHMC-Tree's moves on a soft tree's discrete parts (:mod:`bdtree_jax.kernels.rjhmc`, and
:class:`bdtree_jax.numpyro.TopologyMH` inside a user's NumPyro model): the grow / prune proposal
of the topology with its proposal ratio, and the Metropolis-within-Gibbs sweep over the split
features of ``kind="df"``."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from ..soft import growable_leaves, prunable_nodes

__all__ = ["TopologyProposal", "propose_topology", "feature_sweep"]


class TopologyProposal(NamedTuple):
    """A grow or prune proposal: the new topology, the node, whether it grows, and
    ``log q(T | T') - log q(T' | T)`` (the ratio ``Q`` of ``docs/theory/rjhmc.md``)."""

    is_split: Any
    node: Any
    grow: Any
    log_q_ratio: Any


def _grow_probability(is_split, p_grow):
    """P(grow | topology move) in T: 1 for a one-split tree, 0 when no leaf can grow."""
    n_int = is_split.sum()
    can_grow = growable_leaves(is_split).any()
    return jnp.where(~can_grow, 0.0, jnp.where(n_int <= 1, 1.0, p_grow))


def propose_topology(key, is_split, p_grow: float) -> TopologyProposal:
    """Grow a uniformly chosen growable leaf (with probability ``P_grow(T)``) or prune a uniformly
    chosen prunable node.  ``p_grow = p_g / (p_g + p_p)`` for trees with >= 2 splits."""
    k_move, k_node = jax.random.split(key)
    pg = _grow_probability(is_split, p_grow)
    grow = jax.random.uniform(k_move) < pg
    growable, prunable = growable_leaves(is_split), prunable_nodes(is_split)
    mask = jnp.where(grow, growable, prunable)
    node = jax.random.categorical(k_node, jnp.where(mask, 0.0, -jnp.inf))
    new = is_split.at[node].set(grow)
    pg_new = _grow_probability(new, p_grow)
    n_from = jnp.where(grow, growable.sum(), prunable.sum())
    n_back = jnp.where(grow, prunable_nodes(new).sum(), growable_leaves(new).sum())
    p_from = jnp.where(grow, pg, 1.0 - pg)
    p_back = jnp.where(grow, 1.0 - pg_new, pg_new)
    log_q = jnp.log(p_back) - jnp.log(n_back) - jnp.log(p_from) + jnp.log(n_from)
    possible = mask.any() & (p_from > 0)
    return TopologyProposal(
        jnp.where(possible, new, is_split), node, grow, jnp.where(possible, log_q, -jnp.inf)
    )


def feature_sweep(key, feature, is_split, n_features: int, pe_fn, pe):
    """One Metropolis-within-Gibbs sweep over the split features of the splitting slots, in a
    random order (NumPyro ``DiscreteHMCGibbs(random_walk=True)`` semantics: propose uniformly over
    the features, the current one included); non-splitting slots are redrawn from their uniform
    prior (their exact conditional).  ``pe_fn(feature) -> potential``; returns ``(feature, pe)``."""
    m = feature.shape[-1]
    k_perm, k_prior, k_loop = jax.random.split(key, 3)
    order = jax.random.permutation(k_perm, m)
    splits = is_split[:m]
    fresh = jax.random.randint(k_prior, (m,), 0, n_features)
    feature = jnp.where(splits, feature, fresh)
    keys = jax.random.split(k_loop, m)

    def body(i, carry):
        feature, pe = carry
        slot = order[i]

        def update(carry):
            feature, pe = carry
            k1, k2 = jax.random.split(keys[i])
            proposal = feature.at[slot].set(jax.random.randint(k1, (), 0, n_features))
            pe_new = pe_fn(proposal)
            accept = jax.random.exponential(k2) > pe_new - pe
            return jnp.where(accept, proposal, feature), jnp.where(accept, pe_new, pe)

        return jax.lax.cond(splits[slot] & (n_features > 1), update, lambda c: c, (feature, pe))

    return jax.lax.fori_loop(0, m, body, (feature, pe))
