"""CGM: Chipman, George & McCulloch (1998) grow / prune / change / swap Metropolis–Hastings.

One step proposes one move on one chain's padded tree and accepts it with the exact MH ratio::

    log r = beta (log L(T*) - log L(T)) + log p(T*) - log p(T) + log q(T | T*) - log q(T* | T)

* The move type is drawn from ``move_probs`` renormalised over the moves that have a target in
  the current tree (grow: leaves with a valid cut above ``max_depth``; prune: nogs; change:
  splitting nodes; swap: splitting nodes other than the root), so ``q`` includes the
  move-probability ratio ``P_{T*}(reverse) / P_T(move)``.
* The target node is uniform among the move's targets (the node-count terms), and grow / change
  draw the new rule from the prior's rule distribution ``p_rule`` (which therefore cancels against
  the prior for grow, CGM98 eq. 19, and for change).
* Change and swap are symmetric given the tree's shape; their ratio is the likelihood ratio times
  the prior ratio of the re-partitioned subtree (rule availability below the node changes) and a
  proposal that leaves a rule without both children populated has prior 0 and is rejected.

The state caches every node's sufficient statistics and valid-cut bounds so the log-prior and
move counts are available without touching the data.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .._types import Array, PRNGKey
from ..data import TreeData
from ..priors import (
    TreePrior,
    log_rule_prob,
    log_tree_prior,
    node_bounds,
    node_stats,
    splittable,
)
from ..tree import Tree, empty_tree, grow, leaf_nodes, n_leaves, nog_nodes, prune, change, swap, tree_depth
from .base import SamplingAlgorithm

__all__ = ["CGMConfig", "CGMState", "CGMInfo", "MOVES", "init", "step", "trace", "build_kernel", "cgm"]

MOVES = ("grow", "prune", "change", "swap")
_REVERSE = jnp.array([1, 0, 2, 3], jnp.int32)


@dataclass(frozen=True)
class CGMConfig:
    """Static configuration of the CGM kernel.

    Only structure lives here; numbers that do not change the program (alpha, beta, likelihood
    hyperparameters) travel in :class:`~bdtree_jax.data.TreeData`, so refitting with other values
    or other data of the same shape reuses the compiled program.

    Attributes
    ----------
    max_depth : int
    min_leaf_size : int
    move_probs : (grow, prune, change, swap) probabilities, default (0.25, 0.25, 0.40, 0.10).
    """

    max_depth: int
    min_leaf_size: int = 1
    move_probs: tuple = (0.25, 0.25, 0.40, 0.10)

    @classmethod
    def from_prior(cls, prior: TreePrior, move_probs=(0.25, 0.25, 0.40, 0.10)) -> "CGMConfig":
        return cls(prior.max_depth, prior.min_leaf_size, tuple(move_probs))

    def __post_init__(self):
        p = tuple(float(x) for x in self.move_probs)
        if len(p) != 4 or min(p) < 0 or not np.isclose(sum(p), 1.0) or p[0] <= 0 or p[1] <= 0:
            raise ValueError(
                "move_probs must be 4 non-negative numbers (grow, prune, change, swap) summing to 1 "
                f"with grow and prune > 0; got {self.move_probs!r}."
            )
        object.__setattr__(self, "move_probs", p)


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
    """

    tree: Tree
    leaf_id: Array
    stats: Array
    lo: Array
    hi: Array
    log_lik: Array
    log_prior: Array
    beta: Array


class CGMInfo(NamedTuple):
    """Per-step diagnostics: ``move`` () int32 index into :data:`MOVES` (-1: no move possible),
    ``accepted`` () bool, ``log_accept_ratio`` () float32."""

    move: Array
    accepted: Array
    log_accept_ratio: Array


def _score(tree: Tree, data: TreeData, config: CGMConfig, beta) -> CGMState:
    """Full (re)computation of the cached statistics of ``tree``."""
    leaf_id, stats = node_stats(tree, data)
    lo, hi = node_bounds(tree, leaf_id, data, config.min_leaf_size)
    log_lik = data.likelihood.log_lik(stats, leaf_nodes(tree))
    log_prior = log_tree_prior(tree, lo, hi, data.split_prob)
    return CGMState(tree, leaf_id, stats, lo, hi, log_lik, log_prior, jnp.asarray(beta, jnp.float32))


def init(key: PRNGKey | None, data: TreeData, config: CGMConfig, tree: Tree | None = None, beta=1.0) -> CGMState:
    """Initial state at ``tree`` (default: the stump).  ``key`` is unused (kept for the protocol)."""
    del key
    if tree is None:
        tree = empty_tree(config.max_depth)
    return _score(tree, data, config, beta)


def _targets(state: CGMState, data: TreeData) -> Array:
    """(4, N) bool: the nodes each move can act on (grow, prune, change, swap)."""
    leaf = leaf_nodes(state.tree)
    growable = leaf & splittable(state.lo, state.hi, data.split_prob)
    internal = state.tree.is_split
    return jnp.stack([growable, nog_nodes(state.tree), internal, internal.at[0].set(False)])


def _log_move_probs(counts: Array, move_probs: tuple) -> Array:
    """(4,) log probabilities of the moves, renormalised over moves with targets."""
    w = jnp.asarray(move_probs, jnp.float32) * (counts > 0)
    return jnp.log(w) - jnp.log(jnp.maximum(w.sum(), 1e-30))


def _draw_rule(key: PRNGKey, lo: Array, hi: Array) -> tuple[Array, Array]:
    """A rule from ``p_rule``: uniform valid feature, then uniform valid cut.  lo, hi: (F,)."""
    kf, kc = jax.random.split(key)
    width = jnp.maximum(hi - lo, 0)
    f = jax.random.categorical(kf, jnp.where(width > 0, 0.0, -jnp.inf))
    c = lo[f] + jnp.floor(jax.random.uniform(kc) * width[f]).astype(jnp.int32)
    return f.astype(jnp.int32), jnp.minimum(c, hi[f] - 1)


def step(key: PRNGKey, state: CGMState, data: TreeData, config: CGMConfig) -> tuple[CGMState, CGMInfo]:
    """One CGM98 MH proposal (see module docstring)."""
    k_move, k_node, k_rule, k_accept = jax.random.split(key, 4)
    tree = state.tree
    targets = _targets(state, data)
    counts = targets.sum(1)
    log_p = _log_move_probs(counts, config.move_probs)
    any_move = jnp.any(counts > 0)
    move = jax.random.categorical(k_move, log_p).astype(jnp.int32)
    node = jax.random.categorical(k_node, jnp.where(targets[move], 0.0, -jnp.inf)).astype(jnp.int32)
    feature, cut = _draw_rule(k_rule, state.lo[node], state.hi[node])

    candidates = (
        grow(tree, node, feature, cut),
        prune(tree, node),
        change(tree, node, feature, cut),
        swap(tree, node),
    )
    proposed_tree = jax.tree.map(lambda *xs: jnp.stack(xs)[move], *candidates)
    proposed = _score(proposed_tree, data, config, state.beta)

    # Proposal terms: q(T*|T) and q(T|T*).
    counts_new = _targets(proposed, data).sum(1)
    log_p_new = _log_move_probs(counts_new, config.move_probs)
    reverse = _REVERSE[move]
    rule_new = log_rule_prob(state.lo[node], state.hi[node], feature, cut)
    rule_old = log_rule_prob(state.lo[node], state.hi[node], tree.feature[node], tree.cut[node])
    log_q_forward = log_p[move] - jnp.log(counts[move]) + jnp.where((move == 0) | (move == 2), rule_new, 0.0)
    log_q_reverse = (
        log_p_new[reverse]
        - jnp.log(jnp.maximum(counts_new[reverse], 1))
        + jnp.where((move == 1) | (move == 2), rule_old, 0.0)
    )
    log_q_reverse = jnp.where(counts_new[reverse] > 0, log_q_reverse, -jnp.inf)
    log_ratio = (
        state.beta * (proposed.log_lik - state.log_lik)
        + proposed.log_prior
        - state.log_prior
        + log_q_reverse
        - log_q_forward
    )
    log_ratio = jnp.where(jnp.isnan(log_ratio), -jnp.inf, log_ratio)
    accepted = any_move & (jnp.log(jax.random.uniform(k_accept)) < log_ratio)
    new_state = jax.tree.map(lambda a, b: jnp.where(accepted, a, b), proposed, state)
    info = CGMInfo(jnp.where(any_move, move, -1), accepted, jnp.where(any_move, log_ratio, -jnp.inf))
    return new_state, info


def trace(state: CGMState, info: CGMInfo) -> dict:
    """What the driver records per iteration."""
    return dict(
        tree=state.tree,
        log_lik=state.log_lik,
        log_prior=state.log_prior,
        n_leaves=n_leaves(state.tree),
        depth=tree_depth(state.tree),
        accepted=info.accepted,
        move=info.move,
    )


def build_kernel(config: CGMConfig):
    """``kernel(key, state, data) -> (state, info)`` closed over the static config."""

    def kernel(key, state, data):
        return step(key, state, data, config)

    return kernel


@functools.lru_cache(maxsize=64)
def cgm(config: CGMConfig) -> SamplingAlgorithm:
    """The CGM sampler as a :class:`SamplingAlgorithm` (chains start at the stump).

    Cached per configuration, so equal configurations share compiled programs in the driver.
    """

    def init_fn(key, data):
        return init(key, data, config)

    return SamplingAlgorithm(init_fn, build_kernel(config), trace)
