"""Monotone BART (mBART: Chipman, George, McCulloch & Shively 2022, Bayesian Analysis 17), exact:
the constraint in the prior, moves that keep it.

Model: BART's (:mod:`bdtree_jax.kernels.bart`, regression or probit) with every tree's function
monotone in the constrained features: ``monotone[j] = +1`` nondecreasing in feature ``j``, ``-1``
nonincreasing, ``0`` free.  A sum of monotone trees is monotone, so every prediction of every
draw is.  A tree ``T`` with leaf values ``mu`` is monotone iff ``mu_a <= mu_b`` for every pair of
leaves whose cells are *comparable*: ``a``'s cell lies below ``b``'s in a feature with ``+1``
(above for ``-1``) and the two cells overlap in every other feature (cells are boxes in the binned
inputs, the root's unbounded: the constraint holds over the whole input space, not only at the
training rows).  :func:`relation` builds that set ``C(T)`` as an (N, N) boolean matrix.

Prior (per tree, independent across trees)::

    p(T, mu) = p_CGM(T) prod_leaves N(mu_l; 0, tau2) 1{mu in C(T)} / Z,   Z = E_{p_CGM}[P(mu in C(T))]

normalised *jointly* (one constant ``Z`` for all trees), not per tree: the tree's marginal prior is
``p_CGM(T) P_T(C(T)) / Z`` (trees whose leaves need more orderings are a priori less likely), the
leaf values given the tree the normal prior truncated to ``C(T)``.  With this choice no intractable
per-tree constant enters any acceptance ratio.

One update of tree ``m`` on its partial residual (BART's grow-prune sweep,
:func:`bdtree_jax.kernels.bart._grow_prune_sweep`, with its ``leaf_step`` hook, :func:`_leaf_step`):

1. grow (prune) proposal of the structure as BART's, and *jointly* the new leaf values: the two
   children's (the merged node's) drawn from their conjugate normal conditionals given the
   residual, each truncated to the interval the *other* leaves' current values allow (the two
   children not bounding each other), every other leaf keeping its value.  The proposal density
   cancels the new leaves' prior times likelihood up to their conjugate marginal times the
   truncated mass ``P_l = P(lo_l <= mu_l <= hi_l)``, so the reversible-jump log acceptance ratio
   is BART's (leaves integrated out) plus ``log P_left + log P_right - log P_node`` (minus for a
   prune), and the move is refused if the proposed values break the order (only possible
   between the two children).
2. every leaf value of the resulting tree in turn (a fixed order) from its full conditional: its
   conjugate normal truncated to ``[max of the leaves that must lie below, min of those that
   must lie above]`` (:func:`truncated_normal`, inverse CDF in the lower tail, float32).

Steps 1 and 2 each leave ``p(T, mu | residual)`` invariant; ``sigma2`` (or the probit latents) is
drawn as in BART.  Numeric features only (no categorical features or missing values) and the
``"grow-prune"`` tree sampler.  State, info and trace: BART's.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import jax
import jax.numpy as jnp
from jax.scipy.special import log_ndtr, ndtr, ndtri

from .._types import Array, PRNGKey
from ..problem.bart import BARTData
from ..tree import leaf_nodes, n_nodes
from . import bart
from .bart import BARTConfig, BARTInfo, BARTState, SweepDraws
from .base import SamplingAlgorithm, with_config

__all__ = ["MonotoneKernel", "bart_monotone", "check", "draw", "geweke_step", "prior_draw", "relation", "satisfies",
           "step", "step_with_draws", "truncated_normal"]

#: The root cell's upper bin bound (every bin index is below it).
_TOP = 2**30
#: Probabilities handed to ndtri are kept in [_P_LOW, 1 - _P_LOW] (a float32 tail of 1e-30).
_P_LOW = 1e-30


def check(config: BARTConfig, monotone: tuple) -> None:
    """ValueError unless ``config`` runs the grow-prune sweep on numeric data and ``monotone`` is a
    tuple of -1/0/+1."""
    if config.tree_sampler != "grow-prune" or config.general_rules:
        raise ValueError("monotone BART runs tree_sampler='grow-prune' on numeric features (no categorical "
                         f"features or missing values); got tree_sampler={config.tree_sampler!r}, "
                         f"general_rules={config.general_rules!r}.")
    if not isinstance(monotone, tuple) or any(c not in (-1, 0, 1) for c in monotone):
        raise ValueError(f"monotone must be a tuple of -1, 0 or +1 per feature; got {monotone!r}.")


def relation(feature: Array, cut: Array, leaf: Array, monotone: tuple) -> Array:
    """(N, N) bool ``L[a, b]``: leaf ``a``'s value must be <= leaf ``b``'s for the tree to be
    monotone.  ``feature``, ``cut`` (N,) int the rules (``bin <= cut`` goes left) of the heap tree
    whose leaves are ``leaf`` (N,) bool; ``monotone`` one of -1/0/+1 per feature (F,).  Cells are
    propagated from the root (unbounded) level by level; an empty cell constrains nothing."""
    N, F = feature.shape[0], len(monotone)
    lo = jnp.zeros((N, F), jnp.int32)
    hi = jnp.full((N, F), _TOP, jnp.int32)
    depth = N.bit_length() - 1
    for d in range(1, depth + 1):
        idx = jnp.arange(2**d - 1, 2 ** (d + 1) - 1)
        parent = (idx - 1) // 2
        on_rule = jnp.arange(F) == feature[parent][:, None]  # (width, F)
        left = (idx % 2 == 1)[:, None]
        c = cut[parent][:, None].astype(jnp.int32)
        lo = lo.at[idx].set(jnp.where(on_rule & ~left, c + 1, lo[parent]))
        hi = hi.at[idx].set(jnp.where(on_rule & left, c, hi[parent]))
    live = leaf & jnp.all(lo <= hi, axis=1)
    below = hi[:, None, :] < lo[None, :, :]  # (N, N, F): a's cell entirely below b's in f
    apart = below | jnp.swapaxes(below, 0, 1)
    # comparable in f: apart in f and overlapping in every other feature
    only = jnp.sum(apart, axis=2) == 1
    out = jnp.zeros((N, N), bool)
    for j, c in enumerate(monotone):
        if c == 1:
            out = out | below[:, :, j]
        elif c == -1:
            out = out | below[:, :, j].T
    return out & only & live[:, None] & live[None, :]


def satisfies(rel: Array, values: Array) -> Array:
    """() bool: ``values`` (N,) keep every order ``rel`` (N, N) asks for."""
    return jnp.all(~rel | (values[:, None] <= values[None, :]))


def truncated_normal(mean: Array, sd: Array, lo: Array, hi: Array, u: Array) -> Array:
    """``N(mean, sd**2)`` truncated to ``[lo, hi]`` (bounds may be infinite) by its inverse CDF at
    the uniform ``u``; an interval in the upper tail is mirrored to the lower one (its CDF values
    keep their relative precision there)."""
    a, b = (lo - mean) / sd, (hi - mean) / sd
    flip = a > 0
    a2, b2 = jnp.where(flip, -b, a), jnp.where(flip, -a, b)
    pa, pb = ndtr(a2), ndtr(b2)
    z = ndtri(jnp.clip(pa + u * (pb - pa), _P_LOW, 1.0 - 2.0**-24))
    z = jnp.clip(jnp.where(flip, -z, z), a, b)
    return mean + sd * z


def log_mass(mean: Array, sd: Array, lo: Array, hi: Array) -> Array:
    """``log P(lo <= X <= hi)`` for ``X ~ N(mean, sd**2)`` (in the lower tail, as
    :func:`truncated_normal`)."""
    a, b = (lo - mean) / sd, (hi - mean) / sd
    flip = a > 0
    a2, b2 = jnp.where(flip, -b, a), jnp.where(flip, -a, b)
    log_b = log_ndtr(b2)
    return log_b + jnp.log1p(-jnp.exp(jnp.minimum(log_ndtr(a2) - log_b, 0.0)))


def _bounds(below: Array, above: Array, values: Array) -> tuple[Array, Array]:
    """(N,) each: every slot's interval ``[max of values[b] with below[b, a], min of values[b]
    with above[a, b]]`` (infinite where none)."""
    lo = jnp.max(jnp.where(below, values[:, None], -jnp.inf), axis=0)
    hi = jnp.min(jnp.where(above, values[None, :], jnp.inf), axis=1)
    return lo, hi


def _gibbs(rel, active, mean, sd, values, u):
    """Every ``active`` leaf's value in turn (slot order) from its conjugate ``N(mean, sd**2)``
    truncated by its neighbours in ``rel`` at their current values; (N,) each."""
    order = jnp.argsort(~active, stable=True)  # the active slots first

    def one(i, v):
        a = order[i]
        lo = jnp.max(jnp.where(rel[:, a], v, -jnp.inf))
        hi = jnp.min(jnp.where(rel[a, :], v, jnp.inf))
        return v.at[a].set(truncated_normal(mean[a], sd[a], lo, hi, u[a]))

    return jax.lax.fori_loop(0, jnp.sum(active), one, values)


def _either_kid(rel: Array, left: Array, axis: int) -> Array:
    """(M, N) the rows (``axis`` 1) or columns (2) of ``rel`` (M, N, N) of either child of each
    tree's node (left child ``left`` (M,)) or-ed: the merged node's order."""
    at = left[:, None, None]
    one = jnp.take_along_axis(rel, at, axis) | jnp.take_along_axis(rel, at + 1, axis)
    return one[:, 0] if axis == 1 else one[..., 0]


def _leaf_step(props, xs, state: BARTState, data: BARTData, monotone: tuple, uniforms: Array):
    """:func:`bdtree_jax.kernels.bart._grow_prune_sweep`'s ``leaf_step``: from the sweep's
    proposals ``props`` and per-tree inputs ``xs``, every tree's finer tree's order (M, N, N) and
    the per-tree function returning (accepted, values) for the sequential pass (module docstring);
    ``uniforms`` (M, N) the Gibbs draws' uniforms."""
    tree = state.trees.tree
    N = tree.is_split.shape[-1]
    slot = jnp.arange(N)
    node, splits = props.node, props.splits
    left = 2 * node + 1
    is_kid = ((slot - left[:, None]) >> 1) == 0
    at_node = slot == node[:, None]
    fine_leaf = jnp.where(is_kid, True, jnp.where(at_node, False, jax.vmap(leaf_nodes)(tree)))
    grow_here = at_node & splits[:, None]
    feature = jnp.where(grow_here, props.feature[:, None], tree.feature)
    cut = jnp.where(grow_here, props.cut[:, None], tree.cut)
    rel = jax.vmap(functools.partial(relation, monotone=monotone))(feature, cut, fine_leaf)
    counts = xs[4]
    leaf_model = bart._leaf_model(data, state.sigma2)
    _, sd = leaf_model.posterior_factors(counts)
    n_node = jnp.take_along_axis(counts, left[:, None], 1)[:, 0] + jnp.take_along_axis(counts, left[:, None] + 1,
                                                                                         1)[:, 0]
    _, node_sd = leaf_model.posterior_factors(n_node)
    # the coarse tree's order: its node is the left child's slot (rows, order and value), the right one follows it
    merged, dropped = slot == left[:, None], slot == left[:, None] + 1
    kid_rows, kid_cols = _either_kid(rel, left, 1), _either_kid(rel, left, 2)
    coarse_rel = jnp.where(merged[:, :, None], kid_rows[:, None, :], rel)
    coarse_rel = jnp.where(merged[:, None, :], kid_cols[:, :, None], coarse_rel)
    coarse_rel = coarse_rel & ~dropped[:, :, None] & ~dropped[:, None, :] & ~jnp.eye(N, dtype=bool)

    def per_tree(m, log_ratio, stats, xs_m):
        sums, s_node = stats
        possible, lu, old, factor, node_factor = xs_m[1], xs_m[3], xs_m[4], xs_m[6], xs_m[10]
        kid, r, rc, l_slot = is_kid[m], rel[m], coarse_rel[m], left[m]
        mean = sums * factor
        node_mean = s_node * node_factor
        # each new value's interval from the other leaves at their current values: the children's
        # in the finer tree (not from each other), the merged node's in the coarse tree
        others = ~kid
        kid_lo, kid_hi = _bounds(r & others[:, None], r & others[None, :], old)
        node_lo, node_hi = _bounds(rc, rc, old)
        u = uniforms[m, N:]
        kids_new = truncated_normal(mean, sd[m], kid_lo, kid_hi, jnp.where(slot == l_slot, u[0], u[1]))
        node_new = truncated_normal(node_mean, node_sd[m], node_lo[l_slot], node_hi[l_slot], u[2])
        proposal = jnp.where(kid, jnp.where(splits[m], kids_new, node_new), old)
        log_kids = jnp.sum(jnp.where(kid, log_mass(mean, sd[m], kid_lo, kid_hi), 0.0))
        log_node = log_mass(node_mean, node_sd[m], node_lo[l_slot], node_hi[l_slot])
        log_ratio = log_ratio + jnp.where(splits[m], 1.0, -1.0) * (log_kids - log_node)
        accepted = possible & (lu < log_ratio) & satisfies(r, proposal)
        coarse = accepted != splits[m]
        current = jnp.where(accepted, proposal, old)
        r = jnp.where(coarse, rc, r)
        merged, dropped = coarse & (slot == l_slot), coarse & (slot == l_slot + 1)
        mean = jnp.where(merged, node_mean, mean)
        sd_m = jnp.where(merged, node_sd[m], sd[m])
        new = _gibbs(r, fine_leaf[m] & ~dropped, mean, sd_m, current, uniforms[m, :N])
        return accepted, jnp.where(dropped, new[l_slot], new)

    return per_tree


def draw(key: PRNGKey, config: BARTConfig) -> tuple[SweepDraws, Array]:
    """The randomness of one sweep: BART's :func:`~bdtree_jax.kernels.bart.draw` and (M, N + 3)
    uniforms: the leaves' Gibbs updates (N) and the proposed values (two children, merged node)."""
    k_sweep, k_gibbs = jax.random.split(key)
    return bart.draw(k_sweep, config), jax.random.uniform(k_gibbs, (config.n_trees, n_nodes(config.max_depth) + 3))


def step(key: PRNGKey, state: BARTState, data: BARTData, config: BARTConfig,
         monotone: tuple) -> tuple[BARTState, BARTInfo]:
    """One sweep (module docstring)."""
    return step_with_draws(draw(key, config), state, data, config, monotone)


def step_with_draws(draws, state: BARTState, data: BARTData, config: BARTConfig,
                    monotone: tuple) -> tuple[BARTState, BARTInfo]:
    """:func:`step` given its :func:`draw`."""
    sweep, uniforms = draws
    hook = functools.partial(_leaf_step, state=state, data=data, monotone=monotone, uniforms=uniforms)
    return bart.step_with_draws(sweep, state, data, config, leaf_step=hook)


@functools.lru_cache(maxsize=64)
def bart_monotone(config: BARTConfig, monotone: tuple) -> SamplingAlgorithm:
    """Monotone BART as a :class:`SamplingAlgorithm` on :class:`BARTData`; ``monotone`` one of
    -1/0/+1 per feature; cached per configuration."""
    check(config, monotone)
    return with_config(bart.init, functools.partial(step_with_draws, monotone=monotone), bart.trace, draw, config)


@dataclass(frozen=True)
class MonotoneKernel:
    """This module's kernel functions for the constraint ``monotone`` (-1/0/+1 per feature): the
    ``base`` of :func:`bdtree_jax.kernels.dart.dart` for sparse monotone BART.  DART's ``s`` enters
    only the rule prior of the structure moves, which this sweep reads from the data as BART's does;
    the constraint is on the leaf values given the tree.  The joint prior is DART's generative
    prior of ``(theta, s, trees, leaves)`` conditioned *jointly* on every tree being monotone, so
    ``s | trees`` is the unconstrained one (no normaliser that depends on ``s``) and the ``s`` step
    holds as written (the marginal prior of ``s`` is the Dirichlet tilted by the constraint's
    probability under it).  :meth:`prior_draw` draws the trees given ``s`` (per-tree rejection, the
    exact conditional); a draw of the joint needs rejection of ``(theta, s, trees)`` together.
    Hashable by ``monotone``, so the kernels built on it are cached."""

    monotone: tuple
    init = staticmethod(bart.init)
    trace = staticmethod(bart.trace)
    draw = staticmethod(draw)

    def step_with_draws(self, draws, state: BARTState, data: BARTData, config: BARTConfig):
        return step_with_draws(draws, state, data, config, self.monotone)

    def prior_draw(self, key: PRNGKey, data: BARTData, config: BARTConfig) -> BARTState:
        return prior_draw(key, data, config, self.monotone)


# ----------------------------------------------------------------------------------------------
# Simulation from the model (prior draws, Geweke's successive-conditional simulator)


def tree_relations(state: BARTState, monotone: tuple) -> Array:
    """(M, N, N) every tree's order (:func:`relation`) on its leaves."""
    t = state.trees.tree
    return jax.vmap(functools.partial(relation, monotone=monotone))(t.feature, t.cut, jax.vmap(leaf_nodes)(t))


def prior_draw(key: PRNGKey, data: BARTData, config: BARTConfig, monotone: tuple) -> BARTState:
    """A draw from the prior (module docstring) by rejection: each tree with its normal leaf values
    from :func:`bdtree_jax.kernels.bart.prior_draw`, redrawn (tree and values together) until its
    values are in ``C(T)``; ``sigma2`` from the first draw."""
    k_first, k_redraws = jax.random.split(key)
    first = bart.prior_draw(k_first, data, config)

    def ok(state):
        return jax.vmap(satisfies)(tree_relations(state, monotone), state.leaf_values)

    def redraw(carry):
        k, state, done = carry
        k, sub = jax.random.split(k)
        fresh = bart.prior_draw(sub, data, config)
        take = ~done & ok(fresh)

        def pick(a, b):
            return jnp.where(take.reshape(take.shape + (1,) * (a.ndim - 1)), b, a)

        state = state._replace(trees=jax.tree.map(pick, state.trees, fresh.trees),
                               leaf_values=pick(state.leaf_values, fresh.leaf_values),
                               can_split=pick(state.can_split, fresh.can_split))
        return k, state, done | take

    _, state, _ = jax.lax.while_loop(lambda c: ~jnp.all(c[2]), redraw, (k_redraws, first, ok(first)))
    return state._replace(fit=bart._fit_from_trees(state))


def geweke_step(key: PRNGKey, state: BARTState, data: BARTData, config: BARTConfig, monotone: tuple):
    """Geweke's successive-conditional step: ``y ~ p(y | state)``, then one sweep given it."""
    k_y, k_sweep = jax.random.split(key)
    data = data._replace(y=bart.simulate_y(k_y, state, data, config).astype(jnp.float32))
    state, info = step(k_sweep, state, data, config, monotone)
    return state, data, info
