"""Trees under any likelihood: an exact Metropolis–Hastings sweep over a sum of trees whose
function values enter the model through an arbitrary log density.

Model: ``f(x) = sum_{m=1..M} g(x; T_m, mu_m)`` with each ``T_m`` from the tree prior of
:mod:`bdtree_jax.priors` (as BART's, :mod:`bdtree_jax.kernels.bart`), leaf values
``mu ~ N(0, tau2)`` independently, and the rest of the model seen only through
``log_lik_fn(f)``, the log density as a function of the (n,) values of ``f`` at the training rows
(everything else held fixed), or the terms ``l_k`` (K,) of a log density ``sum_k l_k(f)`` (e.g.
the n per-row terms, or every site's elementwise terms of a NumPyro model).  Nothing is assumed about ``log_lik_fn`` for exactness; its proposals are good
when it is a sum of smooth per-row terms ``sum_i l_i(f_i)``.  Per-row terms make every ratio's
``log L(f') - log L(f)`` the sum of the terms' differences (:func:`log_lik_change`), accurate at any
``n``; two float32 totals' difference is not (its rounding, ``~1e-7 |log L|``, reaches 0.2 at 100k
unit-scale rows and 0.7 at 1M, where acceptance becomes noise).

One sweep visits the trees in order (a ``lax.scan`` carrying the fit and its log density).  For
tree ``m`` with leaf values ``mu`` and rows' leaves ``leaf``, the other trees' sum
``f0 = fit - mu[leaf]`` is fixed during the visit, and:

1. **Laplace approximation at** ``f0``.  Per row ``g = grad log_lik_fn(f0)`` and ``h`` the
   Hessian times a vector of ones (one forward-over-reverse pass; for separable ``l`` the
   diagonal ``l_i''``).  For a tree ``T``, leaf ``j`` gets ``G_j = sum of g``, ``H_j = sum of h``
   over its rows, precision ``P_j = 1/tau2 + max(-H_j, 0)`` (never below the prior's: a leaf
   where the density curves upward falls back to it) and mean ``m_j = G_j / P_j`` -- one Newton
   step from ``mu = 0`` on ``log_lik + log N(mu; 0, tau2)``.  ``newton_steps = K > 1`` iterates
   ``mu <- mu + (G(mu) - mu/tau2) / P(mu)`` with ``G``, ``P`` at ``f0 + mu[leaf]`` (one more pass
   per step and tree) and ends with ``N(mu_K, 1/P(mu_{K-1}))``.  The leaves' proposal
   ``q(mu | T, f0)`` is the defensive mixture ``(1 - w) prod_j N(m_j, 1/P_j) + w prod_j N(0, tau2)``,
   ``w = prior_weight``: the prior's part bounds the importance weight ``p(mu) L / q`` by
   ``L / w``, without which a chain whose values lie in the approximation's light Gaussian tail
   (a fresh start at ``f = 0`` against strong data) is never accepted away from them.  ``q``
   depends on ``T`` and ``f0`` only, so it is the same function in both directions of a move.
2. **Structure and leaves together.**  A grow, prune, change or swap ``T -> T'`` (CGM98's
   proposal with ``move_probs``, :func:`propose_structure`; a change or swap re-routes the tree's
   rows whole), new values ``mu' ~ q(. | T', f0)`` on every leaf of ``T'``, accepted with::

       log a = log L(f0 + mu'[leaf']) - log L(f0 + mu[leaf]) + log p(T') - log p(T)
               + sum_j log N(mu'_j; 0, tau2) - sum_j log N(mu_j; 0, tau2)
               + log q(T | T') - log q(T' | T) + log q(mu | T, f0) - log q(mu' | T', f0)

   (the reverse move draws ``mu`` from the Laplace approximation on ``T``).  A tree with no move
   keeps its structure.
3. **Leaves only.**  An independence proposal ``mu* ~ q(. | T, f0)`` on the tree after step 2,
   accepted with ``log L* - log L + log N(mu*) - log N(mu) + log q(mu) - log q(mu*)``.

Both are MH steps on ``p(T) p(mu | T) L(f0 + mu[leaf])`` with ``f0`` fixed, so the sweep leaves the
posterior of the trees and leaf values invariant whatever ``log_lik_fn`` is (tested against
exact enumeration by quadrature and by Geweke's test).  Leaf values off the leaves are 0.  The fit
is carried (``f0`` plus the tree's new values); :func:`fit_from_trees` recomputes it exactly.

Cost per tree: one forward-over-reverse pass for ``g, h``, two evaluations of ``log_lik_fn`` (the
two proposals) and ``2 (K - 1)`` more passes for ``K`` Newton steps, plus O(n) gathers and sums
(a change or swap: one more pass routing the rows through the proposed tree).
The trees are :class:`~bdtree_jax.kernels._moves.CGMState` with a leading axis M, as BART keeps
them (:class:`~bdtree_jax.kernels.bart.BARTState`; ``stats[..., 0]`` the nodes' row counts and
``log_prior`` kept up to date, the other ``stats`` columns and ``log_lik`` untouched), on numeric
inputs (no categorical features or missing values).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp

from .._types import Array, PRNGKey
from ..data import TreeData
from ..priors import PinballTables
from ..tree import MAX_DEPTH, Tree, leaf_nodes, n_nodes
from . import cgm
from ._moves import CGMState, mh_log_ratio, moved_tree, score, targets
from .cgm import _choose, _log_q_ratio, _propose_local, _rule_probs

__all__ = ["TreeMHConfig", "StructureProposal", "init", "sweep", "fit_from_trees", "propose_structure",
           "accept_structure", "log_lik_change"]

GROW_PRUNE_MOVES = (0.5, 0.5, 0.0, 0.0)
CGM_MOVES = cgm.MOVE_PROBS
_LOG_2PI = 1.8378770664093453


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


@dataclass(frozen=True)
class TreeMHConfig:
    """Static configuration of :func:`sweep` (hashable; ``tau2`` and the data travel as arrays).

    Attributes
    ----------
    max_depth : int in [1, MAX_DEPTH], the trees' padded depth (``N = 2**(max_depth + 1) - 1``
        slots), the prior's.
    min_leaf_size : int >= 1, the prior's.
    newton_steps : int >= 1, Newton steps of the leaves' Laplace approximation (module docstring).
    prior_weight : float in [0, 1), the weight of the leaves' prior in their proposal (a
        defensive mixture, module docstring); 0: the Laplace approximation alone.
    move_probs : (grow, prune, change, swap) probabilities of the structure proposal, CGM98's
        moves (:class:`~bdtree_jax.kernels.cgm.CGMConfig`); default CGM's (0.25, 0.25, 0.40,
        0.10).  ``GROW_PRUNE_MOVES`` (1/2, 1/2, 0, 0), BART's, never re-routes a whole tree.
    """

    max_depth: int = 5
    min_leaf_size: int = 1
    newton_steps: int = 1
    prior_weight: float = 0.1
    move_probs: tuple = CGM_MOVES

    def __post_init__(self):
        if not _is_int(self.max_depth) or not 1 <= self.max_depth <= MAX_DEPTH:
            raise ValueError(f"max_depth must be an integer in [1, {MAX_DEPTH}]; got {self.max_depth!r}.")
        if not _is_int(self.min_leaf_size) or self.min_leaf_size < 1:
            raise ValueError(f"min_leaf_size must be an integer >= 1; got {self.min_leaf_size!r}.")
        if not _is_int(self.newton_steps) or self.newton_steps < 1:
            raise ValueError(f"newton_steps must be an integer >= 1; got {self.newton_steps!r}.")
        w = self.prior_weight
        if isinstance(w, bool) or not isinstance(w, (int, float)) or not 0.0 <= w < 1.0:
            raise ValueError(f"prior_weight must be a number in [0, 1); got {w!r}.")
        object.__setattr__(self, "prior_weight", float(w))
        object.__setattr__(self, "move_probs", self.cgm.move_probs)  # checked and made floats there

    @property
    def cgm(self) -> cgm.CGMConfig:
        """The structure proposal: CGM98's moves with ``move_probs``."""
        return cgm.CGMConfig(self.max_depth, self.min_leaf_size, tuple(self.move_probs))


def init(tree_data: TreeData, config: TreeMHConfig, n_trees: int) -> tuple[CGMState, Array, Array]:
    """``(trees, leaf_values, fit)``: ``n_trees`` stumps (a CGMState of (M, ...) arrays, rows'
    leaves in uint8 up to ``max_depth`` 7), leaf values (M, N) zeros and the fit (n,) zeros."""
    if not _is_int(n_trees) or n_trees < 1:
        raise ValueError(f"n_trees must be an integer >= 1; got {n_trees!r}.")
    _check_data(tree_data, config)
    stump = cgm.init(None, tree_data, config.cgm)
    n_slots = stump.tree.is_split.shape[-1]
    stump = stump._replace(leaf_id=stump.leaf_id.astype(jnp.uint8 if n_slots <= 2**8 else jnp.int16))
    trees = jax.tree.map(lambda a: jnp.broadcast_to(a, (n_trees,) + jnp.shape(a)), stump)
    n = tree_data.bins.shape[0]
    return trees, jnp.zeros((n_trees, n_slots), jnp.float32), jnp.zeros((n,), jnp.float32)


def fit_from_trees(leaf_values: Array, leaf_id: Array) -> Array:
    """(n,) the sum of the trees at the rows: ``leaf_values`` (M, N), ``leaf_id`` (M, n)
    (``trees.leaf_id``), added tree by tree (no (M, n) table)."""
    def add(total, tree):
        values, leaf = tree
        return total + values[leaf], None

    start = jnp.zeros(leaf_id.shape[-1], jnp.float32)
    return jax.lax.scan(add, start, (leaf_values, leaf_id))[0]


def _check_data(tree_data: TreeData, config=None) -> None:
    if not isinstance(tree_data, TreeData):
        raise TypeError(f"tree_data must be a bdtree_jax.data.TreeData; got {type(tree_data).__name__}.")
    if tree_data.level_masks is not None or tree_data.missing_code is not None:
        raise ValueError("tree_data has categorical features or missing values; the tree MH sweep supports "
                         "numeric inputs without missing values only.")
    slots = tree_data.split_prob.may_split.shape[-1] if isinstance(tree_data.split_prob, PinballTables) else \
        jnp.shape(tree_data.split_prob)[-1]
    if config is not None and slots != n_nodes(config.max_depth):
        raise ValueError(f"tree_data was built for another max_depth than config.max_depth={config.max_depth} (its "
                         f"prior has {slots} slots, the config's trees {n_nodes(config.max_depth)}).")


def _check_inputs(trees, leaf_values, fit, log_lik_fn, tree_data, config) -> None:
    """Shapes and types, at trace time (before anything is compiled)."""
    if not isinstance(config, TreeMHConfig):
        raise TypeError(f"config must be a TreeMHConfig; got {type(config).__name__}.")
    if not callable(log_lik_fn):
        raise TypeError(f"log_lik_fn must be callable f (n,) -> log density (); got {type(log_lik_fn).__name__}.")
    _check_data(tree_data, config)
    if not isinstance(trees, CGMState):
        raise TypeError(f"trees must be a CGMState with a leading tree axis; got {type(trees).__name__}.")
    n, N = tree_data.bins.shape[0], n_nodes(config.max_depth)
    if trees.tree.is_split.ndim != 2 or trees.tree.is_split.shape[1] != N:
        raise ValueError(f"trees must hold (M, {N}) arrays for max_depth={config.max_depth}; got is_split of "
                         f"shape {trees.tree.is_split.shape}.")
    M = trees.tree.is_split.shape[0]
    if jnp.shape(leaf_values) != (M, N):
        raise ValueError(f"leaf_values must have shape (M, N) = {(M, N)}; got {jnp.shape(leaf_values)}.")
    if jnp.shape(fit) != (n,) or jnp.shape(trees.leaf_id) != (M, n):
        raise ValueError(f"fit must have shape (n,) = {(n,)} and trees.leaf_id (M, n) = {(M, n)}; got "
                         f"{jnp.shape(fit)} and {jnp.shape(trees.leaf_id)}.")
    out = jax.eval_shape(log_lik_fn, jax.ShapeDtypeStruct((n,), jnp.float32))
    if not hasattr(out, "shape") or len(out.shape) > 1 or out.shape == (0,):
        raise ValueError(f"log_lik_fn must map f (n,) to a scalar log density () or to its terms (K,), e.g. "
                         f"per-row log densities (n,) = {(n,)}; it returns {out}.")
    return len(out.shape) == 1


def log_lik_change(new, old):
    """``log L(new) - log L(old)`` from what :func:`sweep`'s ``log_lik_fn`` returned at the two
    function values: scalars () -- their difference, two float32 totals of every row, whose
    rounding grows with ``n`` (about ``1e-7 |log L|``: 0.2 at 100k rows of unit-scale terms) -- or
    terms (K,), per row say -- the sum of the terms' differences, terms that did not change adding
    exactly 0, so the rounding is that of the changed rows' terms only (a few ``1e-4`` when every
    one of a million unit-scale rows changes)."""
    new, old = jnp.asarray(new, jnp.float32), jnp.asarray(old, jnp.float32)
    return new - old if new.ndim == 0 else jnp.sum(new - old)


def _normal_log_pdf(x, mean, precision):
    return 0.5 * (jnp.log(precision) - _LOG_2PI) - 0.5 * precision * (x - mean) ** 2


def sweep(key: PRNGKey, trees: CGMState, leaf_values: Array, fit: Array, log_lik_fn: Callable[[Array], Array],
          tree_data: TreeData, tau2, config: TreeMHConfig):
    """One MH sweep over the trees (module docstring).

    Parameters
    ----------
    key : PRNG key of the sweep.
    trees : CGMState of (M, ...) arrays (:func:`init`, or BART's trees).
    leaf_values : (M, N) float32, 0 off the leaves.
    fit : (n,) float32 the sum of the trees at the rows (:func:`fit_from_trees`).
    log_lik_fn : ``f (n,) -> ()`` the model's log density as a function of the function values
        (differentiable twice in ``f``; a Python callable: close over it under ``jit``), or
        ``f (n,) -> (K,)`` its terms (per row, say), whose sum is the log density: then every
        acceptance ratio sums the rows' differences (:func:`log_lik_change`), which stays accurate
        at any ``n``, where the difference of two float32 totals does not (give per-row terms
        for large data).
    tree_data : TreeData of the inputs (bins, the tree prior's split probabilities and cut
        grid; its ``likelihood`` and ``point_stats`` are not read).
    tau2 : () the leaf values' prior variance.
    config : TreeMHConfig.

    Returns
    -------
    ``(trees, leaf_values (M, N), fit (n,), accepted (M,) bool, log_lik ())``: ``accepted`` whether
    tree ``m``'s structure move was accepted, ``log_lik`` is ``log_lik_fn`` of the returned fit.
    """
    per_row = _check_inputs(trees, leaf_values, fit, log_lik_fn, tree_data, config)
    M, N = leaf_values.shape
    cgm_config = config.cgm
    tau2 = jnp.asarray(tau2, jnp.float32)
    prior_precision = 1.0 / tau2
    k_uniform, k_normal = jax.random.split(key)
    uniforms = jax.random.uniform(k_uniform, (M, 8))  # move, node, feature, cut, accept (2), prior draw (2)
    log_laplace_weight, log_prior_weight = math.log1p(-config.prior_weight), math.log(max(config.prior_weight, 1e-300))
    normals = jax.random.normal(k_normal, (M, 2, N))
    fit = jnp.asarray(fit, jnp.float32)
    log_lik_of = lambda f: jnp.asarray(log_lik_fn(f), jnp.float32)  # noqa: E731  () or (K,) terms
    total = (lambda ll: jnp.sum(ll)) if per_row else (lambda ll: ll)  # noqa: E731
    grad_fn = jax.grad(lambda f: total(log_lik_of(f)))
    ones = jnp.ones_like(fit)

    def curvature(f):
        """(g, h) (n,) each: the gradient and the Hessian times ones at ``f``."""
        return jax.jvp(grad_fn, (f,), (ones,))

    def laplace(g, h, f0, leaf, is_leaf):
        """(mean, precision) (N,) of every slot of a tree with rows' leaves ``leaf`` (module
        docstring, step 1); precision ``1/tau2`` and mean 0 off the leaves."""
        mu = jnp.zeros((N,), jnp.float32)
        for step in range(config.newton_steps):
            if step > 0:
                g, h = curvature(f0 + mu[leaf])
            G = jax.ops.segment_sum(g, leaf, num_segments=N)
            H = jax.ops.segment_sum(h, leaf, num_segments=N)
            precision = prior_precision + jnp.maximum(-H, 0.0)
            mu = jnp.where(is_leaf, mu + (G - mu * prior_precision) / precision, 0.0)
        return mu, jnp.where(is_leaf, precision, prior_precision)

    def propose_values(mean, precision, is_leaf, z, u):
        """A draw of the leaves' values from the proposal (module docstring): with probability
        ``prior_weight`` (``u`` below it) from their prior, else from the Laplace approximation."""
        from_prior = u < config.prior_weight
        mean, precision = jnp.where(from_prior, 0.0, mean), jnp.where(from_prior, prior_precision, precision)
        return jnp.where(is_leaf, mean + z / jnp.sqrt(precision), 0.0)

    def log_density(values, mean, precision, is_leaf):
        """(log q, log prior) of the leaves' ``values`` under the proposal and the prior."""
        laplace_q = jnp.sum(jnp.where(is_leaf, _normal_log_pdf(values, mean, precision), 0.0))
        p = jnp.sum(jnp.where(is_leaf, _normal_log_pdf(values, 0.0, prior_precision), 0.0))
        if config.prior_weight == 0.0:
            return laplace_q, p
        return jnp.logaddexp(log_laplace_weight + laplace_q, log_prior_weight + p), p

    def body(carry, xs):
        fit, log_lik = carry
        state, values, u, z = xs
        leaf = state.leaf_id.astype(jnp.int32)
        f0 = fit - values[leaf]
        g, h = curvature(f0)

        # 2. structure and leaves
        prop = propose_structure(u[:4], state, tree_data, cgm_config)
        new_leaf = prop.leaf_id.astype(jnp.int32)
        is_leaf, new_is_leaf = leaf_nodes(state.tree), leaf_nodes(prop.tree)
        mean, precision = laplace(g, h, f0, leaf, is_leaf)
        new_mean, new_precision = laplace(g, h, f0, new_leaf, new_is_leaf)
        new_values = propose_values(new_mean, new_precision, new_is_leaf, z[0], u[6])
        new_log_lik = log_lik_of(f0 + new_values[new_leaf])
        log_q, log_p = log_density(values, mean, precision, is_leaf)
        new_log_q, new_log_p = log_density(new_values, new_mean, new_precision, new_is_leaf)
        log_ratio = mh_log_ratio(log_lik_change(new_log_lik, log_lik), prop.d_log_prior + new_log_p - log_p,
                                 prop.log_q_ratio + log_q - new_log_q)
        accepted = prop.possible & (jnp.log(u[4]) < log_ratio)
        pick = lambda a, b: jnp.where(accepted, a, b)  # noqa: E731
        leaf, is_leaf = pick(new_leaf, leaf), pick(new_is_leaf, is_leaf)
        mean, precision = pick(new_mean, mean), pick(new_precision, precision)
        values, log_lik = pick(new_values, values), pick(new_log_lik, log_lik)
        log_q, log_p = pick(new_log_q, log_q), pick(new_log_p, log_p)

        # 3. leaves only: an independence proposal from the same approximation
        draw = propose_values(mean, precision, is_leaf, z[1], u[7])
        draw_log_lik = log_lik_of(f0 + draw[leaf])
        draw_log_q, draw_log_p = log_density(draw, mean, precision, is_leaf)
        leaf_ratio = mh_log_ratio(log_lik_change(draw_log_lik, log_lik), draw_log_p - log_p, log_q - draw_log_q)
        take = jnp.log(u[5]) < leaf_ratio
        values = jnp.where(take, draw, values).astype(jnp.float32)
        log_lik = jnp.where(take, draw_log_lik, log_lik)

        state = accept_structure(state, prop, accepted)
        return (f0 + values[leaf], log_lik), (state, values, accepted)

    log_lik = log_lik_of(fit)
    (fit, log_lik), (trees, leaf_values, accepted) = jax.lax.scan(
        body, (fit, log_lik), (trees, jnp.asarray(leaf_values, jnp.float32), uniforms, normals))
    return trees, leaf_values, fit, accepted, total(log_lik)


class StructureProposal(NamedTuple):
    """One tree's proposed structure (a CGM98 move, :func:`propose_structure`), apart from its
    likelihood and leaf values.

    Attributes
    ----------
    tree : Tree of (N,) arrays, the tree after the move.
    leaf_id : (n,) the rows' leaves in it (the state's dtype).
    lo, hi : (N, F) int32 the nodes' valid-cut bounds in it.
    rows : (N,) the nodes' row counts in it (the state's ``stats[:, 0]``).
    d_log_prior : () ``log p(T*) - log p(T)`` (``-inf`` for a tree outside the prior's support).
    log_q_ratio : () ``log q(T | T*) - log q(T* | T)`` (move choice, target node, rule).
    possible : () bool the tree has a move at all (else nothing is proposed).
    """

    tree: Tree
    leaf_id: Array
    lo: Array
    hi: Array
    rows: Array
    d_log_prior: Array
    log_q_ratio: Array
    possible: Array


def propose_structure(uniforms: Array, state: CGMState, tree_data: TreeData, config: cgm.CGMConfig) -> StructureProposal:
    """A CGM98 proposal on one tree (the move by ``config.move_probs`` renormalised over the moves
    with targets, its node uniform over their targets, a grow's or change's rule from the prior's
    rule distribution; :mod:`bdtree_jax.kernels.cgm`) from ``uniforms`` (4,) (move, node,
    feature, cut).  A grow or prune touches its node and its children only
    (:class:`~bdtree_jax.kernels.cgm.LocalProposal`); a change or swap re-partitions the subtree
    below its node, so the proposed tree is re-routed and re-scored whole (one pass over the
    rows; ``lax.cond``: a grow/prune step does not pay for it unless the chains are ``vmap``-ped).
    Reads ``state.tree``, ``leaf_id``, ``lo``, ``hi``, ``stats[:, 0]`` and ``log_prior``."""
    move, node, rule, counts, log_p, any_move = _choose(uniforms, state, tree_data, config)

    def local():
        prop = _propose_local(state, move, node, rule.feature, rule.cut, counts, log_p, any_move, tree_data, config)
        tree, leaf_id, lo, hi = cgm.apply_local(state, prop, jnp.bool_(True))
        N = state.stats.shape[0]
        if prop.kid_rows is None:  # valid_cuts="data": count the grown node's left rows here
            n_left = jnp.sum(prop.in_node & prop.goes_left, dtype=jnp.int32).astype(state.stats.dtype)
            kids = jnp.stack([n_left, state.stats[prop.node, 0] - n_left])
        else:
            kids = prop.kid_rows.astype(state.stats.dtype)
        start = (jnp.minimum(2 * prop.node + 1, N - 2), 0)
        rows = jax.lax.dynamic_update_slice(state.stats[:, :1], jnp.where(prop.splits, kids, 0.0)[:, None], start)
        return StructureProposal(tree, leaf_id, lo, hi, rows[:, 0], prop.d_log_prior, prop.log_q_ratio, prop.possible)

    if config.move_probs[2] == 0 and config.move_probs[3] == 0:
        return local()

    def whole():
        proposed = score(moved_tree(state.tree, move, node, rule), tree_data, config, state.beta)
        counts_new = targets(proposed, tree_data).sum(1)
        rule_new, rule_old = _rule_probs(state, node, rule, tree_data)
        log_q = _log_q_ratio(move, counts, log_p, counts_new, rule_new, rule_old, config)
        return StructureProposal(
            proposed.tree, proposed.leaf_id.astype(state.leaf_id.dtype), proposed.lo.astype(state.lo.dtype),
            proposed.hi.astype(state.hi.dtype), proposed.stats[:, 0].astype(state.stats.dtype),
            (proposed.log_prior - state.log_prior).astype(jnp.float32), log_q.astype(jnp.float32), any_move)

    return jax.lax.cond(move <= 1, local, whole)


def accept_structure(state: CGMState, prop: StructureProposal, accepted) -> CGMState:
    """One tree's state after its structure step: the proposed tree, rows' leaves, bounds and row
    counts if ``accepted`` (the log-prior moved by the proposal's change), else the current state."""
    pick = lambda a, b: jnp.where(accepted, a, b)  # noqa: E731
    return state._replace(
        tree=jax.tree.map(pick, prop.tree, state.tree), leaf_id=pick(prop.leaf_id, state.leaf_id),
        stats=state.stats.at[:, 0].set(pick(prop.rows, state.stats[:, 0])), lo=pick(prop.lo, state.lo),
        hi=pick(prop.hi, state.hi), log_prior=state.log_prior + jnp.where(accepted, prop.d_log_prior, 0.0))
