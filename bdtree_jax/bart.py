"""BART: Bayesian additive regression trees by Bayesian backfitting on padded trees.

Model (Chipman, George & McCulloch 2010, "BART"; smc-pg spec §2.1–2.2)::

    y_i = sum_{m=1..M} g(x_i; T_m, mu_m) + eps_i,     eps_i ~ N(0, sigma2)

on ``y`` rescaled to ``[-0.5, 0.5]`` by its min and max.  Every tree has the tree prior of
:mod:`bdtree_jax.priors` (``alpha (1 + d)**-beta``, BART's ``alpha = 0.95, beta = 2``) truncated
at ``max_depth`` (5 by default, bartz's: a node there is a leaf; with ``beta = 2`` the cap rarely
binds, and the trace records how often it does), with BART's rule availability by default
(``valid_cuts="ancestors"``: a node's cuts are those its ancestors' rules leave, no tree has an
empty leaf; ``"data"``: CGM98's cuts that split the node's rows), leaf values ``mu ~ N(0, tau2)``
with ``tau = 0.5 / (k sqrt(M))``, and ``sigma2 ~ nu lam / chi2_nu`` with ``lam`` such that
``P(sigma < sigma_hat) = q``, ``sigma_hat`` the residual sd of a linear regression of (rescaled)
``y`` on ``X`` (``sd(y)`` if there are too few rows).

One iteration (a *sweep*) is Bayesian backfitting, the trees updated in a fixed order:

1. partial residual ``R = y - (fit - fit_m)``;
2. one update of ``T_m`` on ``R`` with its leaf values integrated out
   (:class:`~bdtree_jax.likelihoods.BARTLeafNormal` with the current ``sigma2``), by the sampler
   named by ``tree_sampler``:

   * ``"grow-prune"``: one CGM98 Metropolis–Hastings proposal with moves (grow, prune) = (½, ½)
     (:mod:`bdtree_jax.kernels.cgm`, ``move_probs=(0.5, 0.5, 0, 0)``);
   * ``"cgm"``: one proposal among grow / prune / change / swap (0.25, 0.25, 0.4, 0.1);
   * ``"pg"``: one conditional-SMC sweep with the current tree as the reference
     (:mod:`bdtree_jax.kernels.pg`, ``num_particles`` particles, prior proposal);

3. the leaf values from their conjugate normal posterior; the fit is updated;

and after the last tree ``sigma2`` is drawn from its inverse-gamma conditional
``IG((nu + n)/2, (nu lam + sum (y - fit)**2)/2)``.

``"grow-prune"`` runs the sweep in two passes (:func:`_grow_prune_sweep`): everything about a
tree's proposal that does not depend on the residual (move, node, rule, new bounds, prior and
proposal terms, the rows' leaves) is computed for all trees at once, vectorized, and a lean
sequential ``lax.scan`` does the rest; tree ``m``'s proposal reads only tree ``m``, which no
earlier update of the sweep touches, so this is the same chain as proposing tree by tree (tested).
``"cgm"`` and ``"pg"`` update each tree in a ``lax.scan`` with the unchanged single-tree kernels
on a :class:`~bdtree_jax.kernels.cgm.CGMState` and a :class:`~bdtree_jax.data.TreeData` whose
``point_stats`` and ``likelihood`` are swapped in.  Every shape is fixed (``M`` trees of
``2**(max_depth+1) - 1`` heap slots), so one run compiles once whatever the trees.

Binary outcomes (``BARTConfig(outcome="binary")``, :class:`BARTClassifier`): probit BART with
Albert & Chib (1993) latents, as Chipman et al. (2010, §4.2) and bartz's ``outcome_type="binary"``::

    P(y_i = 1) = Phi(offset + sum_m g(x_i; T_m, mu_m)),  i.e.  z_i ~ N(offset + f(x_i), 1),  y_i = 1{z_i > 0}

``sigma = 1`` is fixed, ``offset = Phi^-1(mean(y))`` (bartz's choice; the trees then model the
departure from the base rate, and the leaf prior is centred at 0 as for regression), leaf values
``mu ~ N(0, tau2)`` with ``tau = 3 / (k sqrt(M))`` (Chipman 2010's binary default, ``k = 2``: the
sum of trees has prior sd 1.5 on the probit scale).  ``BARTData.y`` holds the 0/1 labels.  A
sweep first draws every latent from its truncated normal conditional (``z_i > 0`` when ``y_i = 1``,
``z_i < 0`` when ``y_i = 0``; :func:`draw_latents`), then backfits all trees on the latent
residual ``z - offset`` exactly as above (the same scan, ``sigma2 = 1``), and draws no ``sigma``.
The latents are not kept: given the trees they are redrawn from their full conditional, so the
sweep is a Gibbs sampler of ``p(trees, leaves, z | y)`` whose marginal in the trees is the target.

State (one chain), :class:`BARTState`: the ``M`` trees as one ``CGMState`` with a leading tree axis
(its rows' leaves, valid-cut bounds, log-prior and every node's row count are kept; the residual
statistics and log-likelihood are recomputed when the tree is visited, only as far as the tree
sampler reads them), ``leaf_values (M, N)`` (0 off the leaves), the total fit at the training
rows ``(n,)`` (updated tree by tree and recomputed exactly from the trees every
:data:`FIT_REFRESH` sweeps, so float32 round-off does not accumulate), ``sigma2 ()``, the sweep
count and every node's splittability.

Trace per iteration (:func:`trace`): ``sigma``, ``train_rmse`` and ``train_log_lik`` (the normal
log-likelihood of the training ``y``; original ``y`` units) -- for binary outcomes instead
``train_accuracy``, ``train_log_lik`` (Bernoulli, ``sum log Phi(+-f)``), ``fit_mean`` and ``fit_sd``
(mean and sd over the training rows of the latent ``f = offset + sum of trees``) --, mean
leaves and depth per tree, the fraction of trees at ``max_depth`` and of trees changed, and the
trees themselves: ``tree`` (``is_split`` bool, ``feature`` int8/16, ``cut`` int8/16/32, each
``(M, N)``) and ``leaf_values (M, N)`` float32, needed to predict at new inputs.  That is
``M N (1 + 1 + 2 + 4)`` bytes per iteration and chain for int8 features and int16 cuts: 101 KB
for ``M = 200, max_depth = 5`` (1000 draws of 4 chains: 0.4 GB).  The driver records warm-up
iterations too (dropped after the run).  ``BARTConfig(record_trees=False)`` keeps only the scalars.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass, field
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import log_ndtr, ndtr, ndtri
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin
from sklearn.utils.validation import check_is_fitted

from ._types import Array, PRNGKey
from .estimators._checks import _FeatureChecks
from .data import (SPLIT_PRIORS, VALID_CUTS, SplitGrid, TreeData, check_classification_y, check_max_cuts,
                   check_regression_y,
                   check_X, make_split_grid)
from .kernels import cgm, pg
from .kernels.base import SamplingAlgorithm
from .likelihoods import BARTLeafNormal
from .priors import TreePrior, make_tree_data, node_lanes, regrow_subtree, splittable, subtree_sums, sum_by_lane
from .tree import Tree, leaf_index, leaf_nodes, n_nodes, tree_summaries

__all__ = [
    "TREE_SAMPLERS", "OUTCOMES", "BARTConfig", "BARTData", "BARTState", "BARTInfo", "BARTPosterior",
    "BARTClassifierPosterior", "BARTRegressor", "BARTClassifier", "bart", "build_model", "build_probit_model",
    "default_hyperparameters", "draw_latents", "geweke_step", "init", "prior_draw", "simulate_y", "step",
    "sum_of_trees", "trace", "SweepDraws", "draw", "step_with_draws",
]

TREE_SAMPLERS = ("grow-prune", "cgm", "pg")
MAX_CUTS = 255  # default candidate cuts per feature: bartz's grid (UniqueQuantileBinner, max_bins=256)
OUTCOMES = ("continuous", "binary")
GROW_PRUNE_MOVES = (0.5, 0.5, 0.0, 0.0)
#: Sweeps between exact recomputations of the fit from the trees (in between it is updated tree
#: by tree, a float32 round-off of ~1e-7 of the residual per update).
FIT_REFRESH = 16
#: Deepest tree BART pads (the rows' leaves are kept as int16 heap slots).
MAX_DEPTH = 14
CGM_MOVES = (0.25, 0.25, 0.40, 0.10)


# ----------------------------------------------------------------------------------------------
# The kernel


@dataclass(frozen=True)
class BARTConfig:
    """Static configuration of the backfitting sweep (numbers that do not change the program --
    ``alpha``, ``beta``, ``tau2``, ``nu``, ``lam`` -- travel in :class:`BARTData`).

    Attributes
    ----------
    n_trees : M.
    max_depth, min_leaf_size : the tree prior's structure.
    tree_sampler : "grow-prune", "cgm" or "pg" (module docstring).
    num_particles : particles of "pg" (the reference included).
    sample_sigma : draw ``sigma2`` every sweep (False: keep ``BARTData.sigma2_init``; for tests).
    trace_dtypes : integer types of the recorded trees' ``feature`` and ``cut``.
    incremental : CGM re-scores only what a move touches (best for sequential chains, CPU).
    record_trees : put the trees and leaf values in the per-iteration trace.
    outcome : "continuous" (normal noise, ``sigma`` drawn) or "binary" (probit with latents,
        ``sigma = 1``; ``sample_sigma`` is then ignored).
    """

    n_trees: int
    max_depth: int = 5
    tree_sampler: str = "grow-prune"
    min_leaf_size: int = 1
    num_particles: int = 10
    sample_sigma: bool = True
    trace_dtypes: tuple = ("int32", "int32")
    incremental: bool = True
    record_trees: bool = True
    outcome: str = "continuous"

    def __post_init__(self):
        if self.outcome not in OUTCOMES:
            raise ValueError(f"outcome must be one of {OUTCOMES}; got {self.outcome!r}.")
        if self.tree_sampler not in TREE_SAMPLERS:
            raise ValueError(f"tree_sampler must be one of {TREE_SAMPLERS}; got {self.tree_sampler!r}.")
        if not _is_int(self.n_trees) or self.n_trees < 1:
            raise ValueError(f"n_trees must be an integer >= 1; got {self.n_trees!r}.")
        if not _is_int(self.max_depth) or not 1 <= self.max_depth <= MAX_DEPTH:
            raise ValueError(f"max_depth must be an integer in [1, {MAX_DEPTH}]; got {self.max_depth!r}.")
        if not _is_int(self.num_particles) or self.num_particles < 1:
            raise ValueError(f"num_particles must be an integer >= 1; got {self.num_particles!r}.")

    @property
    def binary(self) -> bool:
        return self.outcome == "binary"

    @property
    def draws_sigma(self) -> bool:
        """Whether a sweep draws ``sigma2`` (continuous outcome with ``sample_sigma``)."""
        return self.sample_sigma and not self.binary

    @property
    def cgm(self) -> cgm.CGMConfig:
        moves = GROW_PRUNE_MOVES if self.tree_sampler == "grow-prune" else CGM_MOVES
        return cgm.CGMConfig(self.max_depth, self.min_leaf_size, moves, tuple(self.trace_dtypes), self.incremental)

    @property
    def pg(self) -> pg.PGConfig:
        return pg.PGConfig(self.max_depth, self.min_leaf_size, int(self.num_particles), "prior",
                           trace_dtypes=tuple(self.trace_dtypes))


class BARTData(NamedTuple):
    """What a sweep reads (a pytree of arrays; pass it, never close over it).

    tree_data : TreeData of the inputs; its ``likelihood`` is a :class:`BARTLeafNormal` carrying
        ``tau2`` (its ``sigma2`` and ``point_stats`` are replaced in every tree update).
    y : (n,) float32 the response on the model's scale (rescaled to [-0.5, 0.5]); for a binary
        outcome the 0/1 labels.
    nu, lam : () the scaled inverse-chi2 prior of ``sigma2`` (unused for a binary outcome).
    sigma2_init : () initial ``sigma2`` (``sigma_hat**2``; 1 for a binary outcome).
    y_scale : () original units per model unit (to report ``sigma`` and the RMSE in ``y``'s units).
    offset : () binary outcome: the latent mean is ``offset + sum of trees`` (default 0; unused
        for a continuous outcome, whose rescaling is host side).
    """

    tree_data: TreeData
    y: Array
    nu: Array
    lam: Array
    sigma2_init: Array
    y_scale: Array
    offset: Array = np.float32(0.0)


class BARTState(NamedTuple):
    """One chain: ``trees`` CGMState with leading axis M (``trees.stats[..., 0]`` holds every
    node's row count, kept by every sweep; its other columns are scratch); ``leaf_values`` (M, N)
    float32 (0 off the leaves); ``fit`` (n,) sum of the trees at the training rows, updated tree by
    tree and recomputed from the trees every :data:`FIT_REFRESH` sweeps (float32 round-off does not
    accumulate); ``sigma2`` (); ``sweeps`` () int32 sweeps done; ``can_split`` (M, N) bool every
    node's :func:`~bdtree_jax.priors.splittable` (kept so a sweep's proposals need not re-read the
    (M, N, F) bounds)."""

    trees: cgm.CGMState
    leaf_values: Array
    fit: Array
    sigma2: Array
    sweeps: Array = np.int32(0)
    can_split: Array | None = None


class BARTInfo(NamedTuple):
    """Per sweep (after it): ``accepted`` (M,) bool tree changed; ``sigma`` () and ``train_rmse`` ()
    in the original units of ``y``; ``train_log_lik`` () log-likelihood of the training response
    given the draw (normal in ``y``'s units, or Bernoulli-probit); binary outcome only (NaN
    otherwise): ``train_accuracy``, ``fit_mean``, ``fit_sd`` of the latent ``offset + fit`` (and
    then ``sigma = 1``, ``train_rmse`` the root of the Brier score)."""

    accepted: Array
    sigma: Array
    train_rmse: Array
    train_log_lik: Array
    train_accuracy: Array
    fit_mean: Array
    fit_sd: Array


def _is_int(v) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, bool)


def _residual_data(data: BARTData, residual: Array, sigma2: Array) -> TreeData:
    """The TreeData of one tree update: rows ``[1, r, r**2]`` of the residual and the leaf model
    with the current ``sigma2``."""
    point_stats = jnp.stack([jnp.ones_like(residual), residual, residual * residual], axis=1)
    likelihood = BARTLeafNormal(sigma2, data.tree_data.likelihood.tau2)
    return data.tree_data._replace(point_stats=point_stats.astype(jnp.float32), likelihood=likelihood)


def _tree_fits(state: BARTState) -> Array:
    """(M, n) every tree's leaf value at every training row."""
    return jax.vmap(lambda values, leaf: values[leaf])(state.leaf_values, state.trees.leaf_id)


def _draw_sigma2(key: PRNGKey, residual: Array, nu: Array, lam: Array) -> Array:
    """``sigma2 | rest ~ IG((nu + n)/2, (nu lam + sum r**2)/2)``."""
    shape = 0.5 * (nu + residual.shape[0])
    rate = 0.5 * (nu * lam + jnp.sum(residual * residual))
    return (rate / jax.random.gamma(key, shape)).astype(jnp.float32)


def draw_latents(key: PRNGKey, mean: Array, y: Array) -> Array:
    """Albert–Chib latents: ``z_i ~ N(mean_i, 1)`` truncated to ``z_i > 0`` where ``y_i = 1`` and
    to ``z_i < 0`` where ``y_i = 0`` (shape of ``mean``).

    By inversion on the side that keeps precision: with ``s = 2y - 1`` and ``u ~ U(0, 1)``,
    ``z = mean - s Phi^-1(u Phi(s mean))`` (``Phi^-1(u Phi(a))`` is a standard normal truncated to
    ``(-inf, a)``; the product is formed in the lower tail, so a latent far on the wrong side of 0,
    ``Phi(s mean) ~ 1e-9``, is still drawn accurately in float32).  ``u`` is the midpoint of one
    of 2**23 equal cells, in ``[2**-24, 1 - 2**-24]``: never 0 or 1, so ``z`` is finite and on its
    side of 0."""
    s = 2.0 * y.astype(jnp.float32) - 1.0
    u = jax.random.uniform(key, jnp.shape(mean), jnp.float32) + jnp.float32(2.0**-24)
    p = jnp.maximum(u * ndtr(s * mean), jnp.finfo(jnp.float32).tiny)
    return (mean - s * ndtri(p)).astype(jnp.float32)


def _update_tree(key, uniforms, state: cgm.CGMState, data: TreeData, config: BARTConfig):
    """One update of one tree by the configured sampler; returns (state, changed)."""
    if config.tree_sampler == "pg":
        new, info = pg.step(key, state, data, config.pg)
    else:
        new, info = cgm.step_with_uniforms(uniforms, state, data, config.cgm)
    return new, info.accepted


def init(key: PRNGKey | None, data: BARTData, config: BARTConfig) -> BARTState:
    """Every tree a stump with leaf value 0, ``sigma2 = sigma2_init``.  ``key`` is unused."""
    del key
    stump = _narrow_ids(cgm.init(None, data.tree_data, config.cgm))
    M = config.n_trees
    trees = jax.tree.map(lambda a: jnp.broadcast_to(a, (M,) + jnp.shape(a)), stump)
    n = data.y.shape[0]
    N = n_nodes(config.max_depth)
    return BARTState(trees, jnp.zeros((M, N), jnp.float32), jnp.zeros((n,), jnp.float32),
                     jnp.asarray(data.sigma2_init, jnp.float32), jnp.int32(0), _can_split(trees, data))


def _narrow_ids(trees: cgm.CGMState) -> cgm.CGMState:
    """The rows' leaves as int16 (heap slots fit for ``max_depth <= 14``): the (M, n) array a
    sweep reads and writes several times."""
    return trees._replace(leaf_id=trees.leaf_id.astype(jnp.int16))


def _can_split(trees: cgm.CGMState, data: BARTData) -> Array:
    """(M, N) bool :func:`~bdtree_jax.priors.splittable` of every tree's nodes."""
    return splittable(trees.lo, trees.hi, data.tree_data.split_prob)


class SweepDraws(NamedTuple):
    """The randomness of one sweep (:func:`draw`): ``uniforms`` (M, 5) per tree (move, node,
    feature, cut, accept), ``normals`` (M, N) the leaf values' standard normals, ``tree_keys`` (M,)
    PRNG keys (Particle Gibbs), ``key`` for ``sigma2`` or the probit latents."""

    uniforms: Array
    normals: Array
    tree_keys: Array
    key: Array


def draw(key: PRNGKey, config: BARTConfig) -> SweepDraws:
    """The randomness of one sweep.  The driver draws it for a whole block of sweeps in one
    vectorized call (:class:`~bdtree_jax.kernels.base.SamplingAlgorithm`), outside the loop."""
    M = config.n_trees
    N = n_nodes(config.max_depth)
    k_moves, k_leaves, k_sigma, k_trees = jax.random.split(key, 4)
    tree_keys = jax.random.split(k_trees, M) if config.tree_sampler == "pg" else jnp.zeros((M,), jnp.uint32)
    return SweepDraws(jax.random.uniform(k_moves, (M, 5)), jax.random.normal(k_leaves, (M, N)), tree_keys, k_sigma)


def step(key: PRNGKey, state: BARTState, data: BARTData, config: BARTConfig) -> tuple[BARTState, BARTInfo]:
    """One backfitting sweep over the trees, then ``sigma2`` (module docstring).  Binary outcome:
    the latents first (with the key a continuous sweep spends on ``sigma2``), no ``sigma2``."""
    return step_with_draws(draw(key, config), state, data, config)


def step_with_draws(draws: SweepDraws, state: BARTState, data: BARTData,
                    config: BARTConfig) -> tuple[BARTState, BARTInfo]:
    """:func:`step` given its :func:`draw`."""
    uniforms, normals, tree_keys, k_sigma = draws
    sigma2 = state.sigma2
    # the fit as carried, or every FIT_REFRESH sweeps exactly from the trees (bounded round-off)
    total = jax.lax.cond(state.sweeps % FIT_REFRESH == 0, lambda: _tree_fits(state).sum(0), lambda: state.fit)
    sweeps = state.sweeps + 1
    if config.binary:  # the trees' target: latent minus offset
        target = draw_latents(k_sigma, data.offset + total, data.y) - data.offset
    else:
        target = data.y

    if config.tree_sampler == "grow-prune":
        total, values, changed, trees, can_split = _grow_prune_sweep(state, data, target, total, sigma2, uniforms,
                                                                     normals, config)
    else:
        total, values, changed, trees = _kernel_sweep(state, data, target, total, sigma2, uniforms, normals,
                                                      tree_keys, config)
        can_split = _can_split(trees, data)
    if config.binary:
        f = data.offset + total
        y = data.y
        log_lik = jnp.sum(log_ndtr((2.0 * y - 1.0) * f))
        info = BARTInfo(changed, jnp.sqrt(sigma2), jnp.sqrt(jnp.mean((y - ndtr(f)) ** 2)), log_lik,
                        jnp.mean(((f > 0) == (y > 0.5)).astype(jnp.float32)), jnp.mean(f), jnp.std(f))
        return BARTState(trees, values, total, sigma2, sweeps, can_split), info
    residual = data.y - total
    if config.draws_sigma:
        sigma2 = _draw_sigma2(k_sigma, residual, data.nu, data.lam)
    n = residual.shape[0]
    log_lik = (-0.5 * jnp.sum(residual**2) / sigma2 - 0.5 * n * jnp.log(2.0 * jnp.pi * sigma2)
               - n * jnp.log(data.y_scale))  # density of y in its original units
    nan = jnp.float32(jnp.nan)
    info = BARTInfo(changed, jnp.sqrt(sigma2) * data.y_scale, jnp.sqrt(jnp.mean(residual**2)) * data.y_scale,
                    log_lik, nan, nan, nan)
    return BARTState(trees, values, total, sigma2, sweeps, can_split), info


def _kernel_sweep(state: BARTState, data: BARTData, target, total, sigma2, uniforms, normals, tree_keys,
                  config: BARTConfig):
    """Backfitting with the single-tree kernel (``"cgm"``, ``"pg"``): a ``lax.scan`` over the
    trees, each updated on its partial residual.  Returns ``(total, leaf_values, changed, trees)``.

    The per-tree ``stats`` and ``log_lik`` are carried unchanged: they are recomputed on the
    partial residual at every visit, only as far as the sampler reads them (CGM's local moves
    re-score by differences from the node statistics, its whole-tree re-score needs the total
    log-likelihood too; PG rebuilds its particles from the stump and needs neither), so none are
    kept between sweeps."""
    N = n_nodes(config.max_depth)
    needs_stats = config.tree_sampler != "pg"
    needs_log_lik = config.tree_sampler == "cgm"
    trees = state.trees
    stale_stats = jnp.zeros(trees.stats.shape[1:], jnp.float32)

    def body(total, xs):
        (tree, leaf_id, _, lo, hi, log_prior), values, u, z, k = xs
        old = values[leaf_id]
        residual = target - (total - old)
        data_m = _residual_data(data, residual, sigma2)
        # re-score on the residual: the rows' leaves and valid-cut bounds do not change, nor does
        # the tree's prior
        stats = subtree_sums(data_m.point_stats, leaf_id, N) if needs_stats else stale_stats
        log_lik = data_m.likelihood.log_lik(stats, leaf_nodes(tree)) if needs_log_lik else jnp.float32(0.0)
        tree_state = cgm.CGMState(tree, leaf_id, stats, lo, hi, log_lik, log_prior, jnp.float32(1.0))
        new, changed = _update_tree(k, u, tree_state, data_m, config)
        mean, sd = data_m.likelihood.leaf_posterior(new.stats)
        values = jnp.where(leaf_nodes(new.tree), mean + sd * z, 0.0).astype(jnp.float32)
        structure = (new.tree, new.leaf_id.astype(leaf_id.dtype), new.stats, new.lo, new.hi, new.log_prior)
        return total - old + values[new.leaf_id], (structure, values, changed)

    structure = (trees.tree, trees.leaf_id, trees.stats, trees.lo, trees.hi, trees.log_prior)
    total, (structure, values, changed) = jax.lax.scan(body, total, (structure, state.leaf_values, uniforms, normals,
                                                                     tree_keys))
    tree, leaf_id, stats, lo, hi, log_prior = structure
    return total, values, changed, trees._replace(tree=tree, leaf_id=leaf_id, stats=stats, lo=lo, hi=hi,
                                                  log_prior=log_prior)


def _grow_prune_sweep(state: BARTState, data: BARTData, target, total, sigma2, uniforms, normals,
                      config: BARTConfig):
    """Backfitting with one grow-or-prune proposal per tree, in a vectorized and a sequential pass.

    Everything about a tree's proposal that does not depend on the residual is computed for all
    trees at once before the sweep: the move, node and rule, the new children's bounds, prior and
    proposal terms (:class:`~bdtree_jax.kernels.cgm.LocalProposal`), the rows' leaves in the finer
    of the two trees (the proposed one for a grow, the current one for a prune), its leaves' row
    counts and, with ``sigma2`` fixed during the sweep, the count-only parts of the split gain
    and of the leaf posteriors (mean factor ``1 / (sigma2 precision)``, draw ``sd z``).  The
    sequential ``lax.scan`` over the trees carries the residual ``target - fit`` and does only
    what needs it: one ``segment_sum`` of the residual over the finer tree's leaves (plus the
    tree's own old values times the counts: the partial residual's sums), the split gain from the
    two children's sums, the accept step, the new leaf values, and one gather to update the
    residual.  The accepted moves are then written into the trees, vectorized again.  This is
    the same Markov chain as proposing and accepting tree by tree: tree ``m``'s proposal reads
    only tree ``m``, which no earlier update of the sweep touches.  Returns ``(total,
    leaf_values, changed, trees)``."""
    N = n_nodes(config.max_depth)
    xs, aux = _grow_prune_prepare(state, data, sigma2, uniforms, normals, config)

    def body(resid, xs):
        fine, slots, old, count, factor, z, node, splits, possible, a_gain, bb, other, lu, node_factor, node_z = xs
        sums = sum_by_lane(resid, slots, N) + count * old  # the partial residual's
        kids = jax.lax.dynamic_slice(sums, (jnp.minimum(2 * node + 1, N - 2),), (2,))
        s_node = kids[0] + kids[1]
        gain = a_gain + bb[0] * kids[0] ** 2 + bb[1] * kids[1] ** 2 - bb[2] * s_node**2
        accepted = possible & (lu < cgm._log_ratio(jnp.where(splits, gain, -gain), 0.0, other))
        coarse = accepted != splits  # the tree after the step is the coarser one: both children
        is_kid = ((jnp.arange(N) - (2 * node + 1)) >> 1) == 0  # carry the node's value
        new = jnp.where(is_kid & coarse, s_node * node_factor + node_z, sums * factor + z)
        # one output row (values, accepted): one write per tree
        return resid + (old - new)[fine], jnp.append(new, accepted.astype(new.dtype))

    resid, out = jax.lax.scan(body, target - total, xs)
    new, changed = out[:, :N], out[:, N] > 0
    values, trees, can_split = _grow_prune_finish(state, aux, new, changed)
    return target - resid, values, changed, trees, can_split


def _grow_prune_prepare(state: BARTState, data: BARTData, sigma2, uniforms, normals, config: BARTConfig):
    """The vectorized pass of :func:`_grow_prune_sweep`: every tree's proposal and the
    residual-free terms of its sequential update.  Returns the scan's per-tree inputs and what
    :func:`_grow_prune_finish` needs."""
    N = n_nodes(config.max_depth)
    trees = state.trees
    td = data.tree_data
    tau2 = td.likelihood.tau2
    props = jax.vmap(lambda u, t, c: cgm.propose(u, t, td, config.cgm, c))(uniforms, trees, state.can_split)
    node, splits = props.node, props.splits
    left_child = 2 * node + 1
    fine_id = jnp.where(props.in_node & splits[:, None],
                        jnp.where(props.goes_left, left_child[:, None], left_child[:, None] + 1), trees.leaf_id)
    # materialised once: everything below reads the rows through it (else XLA recomputes the
    # rows' rule test inside every consumer)
    fine_id = jax.lax.optimization_barrier(fine_id.astype(jnp.int16))
    slot = jnp.arange(N)
    is_kid = ((slot - left_child[:, None]) >> 1) == 0  # (M, N)
    at_node = slot == node[:, None]
    # rows per node of the finer tree: the kept counts (``trees.stats[..., 0]``) with its two
    # children: a grow's new ones (counted by the proposal under valid_cuts="ancestors", else
    # from the rows), a prune's current ones
    if props.kid_rows is not None:
        kept = jnp.take_along_axis(trees.stats[:, :, 0], left_child[:, None], axis=1)[:, 0]
        n_left = jnp.where(splits, props.kid_rows[:, 0].astype(jnp.float32), kept)
    else:
        n_left = jnp.sum(fine_id == left_child[:, None], axis=1, dtype=jnp.float32)
    new_kids = jnp.where(slot == left_child[:, None], n_left[:, None],
                         jnp.take_along_axis(trees.stats[:, :, 0], node[:, None], axis=1) - n_left[:, None])
    counts = jnp.where(is_kid, new_kids, trees.stats[:, :, 0])
    values = state.leaf_values
    node_value = jnp.take_along_axis(values, node[:, None], axis=1)
    old_fine = jnp.where(is_kid & splits[:, None], node_value, values)  # a grow's children hold the node's value
    n_kids = jnp.take_along_axis(counts, jnp.stack([left_child, left_child + 1], 1), axis=1)  # (M, 2)
    n_all = jnp.concatenate([n_kids, n_kids.sum(1, keepdims=True)], axis=1)  # (M, 3): left, right, node
    # leaf model (:class:`~bdtree_jax.likelihoods.BARTLeafNormal`): a leaf of n rows with residual
    # sum S has log marginal  a(n) + b(n) S**2  (+ row terms that cancel), posterior precision
    # 1/tau2 + n/sigma2 and mean S / (sigma2 precision)
    log_a = -0.5 * jnp.log1p(n_all * tau2 / sigma2)
    b = 0.5 * tau2 / (sigma2 * (sigma2 + n_all * tau2))
    precision = 1.0 / tau2 + counts / sigma2
    node_precision = 1.0 / tau2 + n_all[:, 2] / sigma2
    mean_factor, draw = 1.0 / (sigma2 * precision), jax.lax.rsqrt(precision) * normals
    node_draw = jax.lax.rsqrt(node_precision) * jnp.take_along_axis(normals, node[:, None], axis=1)[:, 0]
    gain_counts = log_a[:, 0] + log_a[:, 1] - log_a[:, 2]
    rest = props.d_log_prior + props.log_q_ratio
    log_u = jnp.log(uniforms[:, 4])

    xs = (fine_id, node_lanes(fine_id, N), old_fine, counts, mean_factor, draw, node, splits, props.possible,
          gain_counts, b, rest, log_u, 1.0 / (sigma2 * node_precision), node_draw)
    return xs, (props, fine_id, counts, is_kid, at_node)


def _grow_prune_finish(state: BARTState, aux, new, changed):
    """The accepted moves written into the trees, vectorized: leaf values (0 off the leaves),
    tree, rows' leaves, bounds, log-prior and row counts.  ``new`` (M, N) the values the
    sequential pass drew on each tree's finer tree (a coarse tree's node value sits in its left
    child's slot)."""
    props, fine_id, counts, is_kid, at_node = aux
    trees = state.trees
    node, splits = props.node, props.splits
    left_child = 2 * node + 1
    coarse = (changed != splits)[:, None]
    leaf = jnp.where(is_kid, ~coarse, jnp.where(at_node, coarse, jax.vmap(leaf_nodes)(trees.tree)))
    kid_value = jnp.take_along_axis(new, left_child[:, None], axis=1)
    values = jnp.where(leaf, jnp.where(at_node, kid_value, new), 0.0).astype(jnp.float32)
    tree, _, lo, hi = jax.vmap(cgm.apply_local)(trees, props, changed)
    # the rows' leaves: the finer tree's, or its two children's rows back in the node
    leaf_id = jnp.where(coarse & (((fine_id - left_child[:, None]) >> 1) == 0), node[:, None], fine_id)
    leaf_id = leaf_id.astype(trees.leaf_id.dtype)
    log_prior = trees.log_prior + jnp.where(changed, props.d_log_prior, 0.0)
    rows = jnp.where(is_kid, jnp.where(coarse, 0.0, counts), counts)  # the new tree's row counts
    stats = trees.stats.at[:, :, 0].set(rows)
    kid_can = jnp.where(jnp.arange(is_kid.shape[1]) == left_child[:, None], props.kids_can_split[:, :1],
                        props.kids_can_split[:, 1:])
    # the children: a grow's new ones if it is accepted, none if the tree is the coarse one, the
    # current ones after a refused prune
    kids = jnp.where(coarse, False, jnp.where(splits[:, None], kid_can, state.can_split))
    can_split = jnp.where(is_kid, kids, state.can_split)
    return values, trees._replace(tree=tree, leaf_id=leaf_id, stats=stats, lo=lo, hi=hi, log_prior=log_prior), can_split


def trace(state: BARTState, info: BARTInfo, config: BARTConfig) -> dict:
    """The per-iteration record (module docstring)."""
    t = state.trees.tree
    leaves, depth = tree_summaries(t.is_split)
    if config.binary:
        head = dict(train_accuracy=info.train_accuracy, train_log_lik=info.train_log_lik, fit_mean=info.fit_mean,
                    fit_sd=info.fit_sd)
    else:
        head = dict(sigma=info.sigma, train_rmse=info.train_rmse, train_log_lik=info.train_log_lik)
    out = dict(
        **head,
        n_leaves=jnp.mean(leaves.astype(jnp.float32)),
        depth=jnp.mean(depth.astype(jnp.float32)),
        at_max_depth=jnp.mean((depth >= config.max_depth).astype(jnp.float32)),
        accepted=jnp.mean(info.accepted.astype(jnp.float32)),
    )
    if config.record_trees:
        out["tree"] = Tree(t.is_split, t.feature.astype(config.trace_dtypes[0]), t.cut.astype(config.trace_dtypes[1]))
        out["leaf_values"] = state.leaf_values
    return out


@functools.lru_cache(maxsize=64)
def bart(config: BARTConfig) -> SamplingAlgorithm:
    """BART as a :class:`SamplingAlgorithm` on :class:`BARTData` (for
    :func:`bdtree_jax.sampling.run_chains`); cached per configuration so equal configurations share
    compiled programs."""

    def init_fn(key, data):
        return init(key, data, config)

    def step_fn(draws, state, data):
        return step_with_draws(draws, state, data, config)

    def trace_fn(state, info):
        return trace(state, info, config)

    return SamplingAlgorithm(init_fn, step_fn, trace_fn, functools.partial(draw, config=config))


# ----------------------------------------------------------------------------------------------
# Simulation from the model (prior draws, Geweke's successive-conditional simulator)


def simulate_y(key: PRNGKey, state: BARTState, data: BARTData | None = None,
               config: BARTConfig | None = None) -> Array:
    """A response ``y ~ N(fit, sigma2)`` (n,) on the model's scale given trees, leaves and sigma;
    for a binary outcome (``config.binary``) labels ``y = 1{offset + fit + N(0, 1) > 0}`` (0/1
    float32), i.e. ``P(y = 1) = Phi(offset + fit)``."""
    noise = jax.random.normal(key, state.fit.shape)
    if config is not None and config.binary:
        return (data.offset + state.fit + noise > 0).astype(jnp.float32)
    return state.fit + jnp.sqrt(state.sigma2) * noise


def geweke_step(key: PRNGKey, state: BARTState, data: BARTData, config: BARTConfig):
    """One step of Geweke's (2004) successive-conditional simulator: ``y ~ p(y | state)``, then
    one sweep given that ``y``.  Its stationary law is the prior of the state (tested against
    :func:`prior_draw`).  Returns ``(state, data with the new y, info)``."""
    k_y, k_sweep = jax.random.split(key)
    data = data._replace(y=simulate_y(k_y, state, data, config).astype(jnp.float32))
    state, info = step(k_sweep, state, data, config)
    return state, data, info


def prior_draw(key: PRNGKey, data: BARTData, config: BARTConfig) -> BARTState:
    """A draw of trees, leaf values and ``sigma2`` from the prior (trees grown top-down from the
    stump by :func:`~bdtree_jax.priors.regrow_subtree`, the same truncated CGM98 prior on the
    training inputs; with ``valid_cuts="ancestors"`` redrawn until every leaf holds
    ``min_leaf_size`` rows, the truncation; ``sigma2 = sigma2_init`` when ``config.sample_sigma``
    is False or the outcome is binary)."""
    M, N = config.n_trees, n_nodes(config.max_depth)
    td = data.tree_data
    stump = cgm.init(None, td, config.cgm)
    k_trees, k_leaves, k_sigma = jax.random.split(key, 3)

    def grown(k_tree):
        tree, _, _, _ = regrow_subtree(stump.tree, stump.leaf_id, stump.lo, stump.hi, jnp.int32(0),
                                       jax.random.uniform(k_tree, (N, 3)), td, config.min_leaf_size)
        return cgm._score(tree, td, config.cgm, 1.0)

    def one(k_tree, k_leaf):
        state = grown(k_tree)
        if td.cut_count is not None:
            # valid_cuts="ancestors": the generative process ignores the rows, the prior is
            # truncated to trees whose leaves hold >= min_leaf_size rows; draw until one does
            # (rejection sampling: exact draws from the truncated prior)
            def redraw(carry):
                k, _ = carry
                k, sub = jax.random.split(k)
                return k, grown(sub)

            _, state = jax.lax.while_loop(lambda c: jnp.isneginf(c[1].log_prior), redraw,
                                          (jax.random.fold_in(k_tree, 1), state))
        tree = state.tree
        values = jnp.sqrt(td.likelihood.tau2) * jax.random.normal(k_leaf, (N,))
        return state, jnp.where(leaf_nodes(tree), values, 0.0).astype(jnp.float32)

    trees, values = jax.vmap(one)(jax.random.split(k_trees, M), jax.random.split(k_leaves, M))
    trees = _narrow_ids(trees)
    if config.draws_sigma:
        sigma2 = data.nu * data.lam / (2.0 * jax.random.gamma(k_sigma, 0.5 * data.nu))
    else:
        sigma2 = data.sigma2_init
    state = BARTState(trees, values, jnp.zeros_like(data.y), jnp.asarray(sigma2, jnp.float32), jnp.int32(0),
                      _can_split(trees, data))
    return state._replace(fit=_tree_fits(state).sum(0))


# ----------------------------------------------------------------------------------------------
# Model building (host side)


def default_hyperparameters(X: np.ndarray, y_scaled: np.ndarray, n_trees: int, *, k: float = 2.0, nu: float = 3.0,
                            q: float = 0.9) -> dict:
    """Chipman et al. (2010)'s calibration on the rescaled response ``y_scaled`` (in [-0.5, 0.5]).

    * ``tau = 0.5 / (k sqrt(n_trees))``: the sum of ``M`` leaf values has prior sd ``0.5 / k``
      (``k = 2``: 95% of the prior mass of ``f(x)`` inside the range of ``y``);
    * ``sigma_hat``: residual sd of the least-squares fit of ``y_scaled`` on ``[1, X]``, or
      ``sd(y_scaled)`` when there are no residual degrees of freedom (or the fit is exact);
    * ``lam = sigma_hat**2 chi2_nu^{-1}(1 - q) / nu``, so that ``P(sigma < sigma_hat) = q`` under
      ``sigma2 ~ nu lam / chi2_nu``.
    """
    from scipy.stats import chi2

    n = X.shape[0]
    design = np.column_stack([np.ones(n), X])
    sigma_hat = 0.0
    if n > design.shape[1]:
        coef, _, rank, _ = np.linalg.lstsq(design, y_scaled, rcond=None)
        df = n - rank
        if df > 0:
            sigma_hat = float(np.sqrt(np.sum((y_scaled - design @ coef) ** 2) / df))
    if not sigma_hat > 1e-8:
        sigma_hat = float(np.std(y_scaled, ddof=1))
    lam = sigma_hat**2 * float(chi2.ppf(1.0 - q, nu)) / nu
    tau = 0.5 / (k * np.sqrt(n_trees))
    return dict(tau2=float(tau**2), nu=float(nu), lam=float(lam), sigma_hat=sigma_hat)


def _tree_prior(n_rows: int, **kw) -> TreePrior:
    """The trees' :class:`~bdtree_jax.priors.TreePrior`; ``min_leaf_size`` may not exceed the rows
    (with ``valid_cuts="ancestors"`` it truncates the prior to trees whose leaves hold that many,
    which the stump then must)."""
    prior = TreePrior(**kw)
    if prior.min_leaf_size > n_rows:
        raise ValueError(f"min_leaf_size={prior.min_leaf_size} exceeds the {n_rows} training rows.")
    return prior


def build_model(X: np.ndarray, y: np.ndarray, *, n_trees: int, max_depth: int = 5, alpha: float = 0.95,
                beta: float = 2.0, k: float = 2.0, nu: float = 3.0, q: float = 0.9, split_prior: str = "uniform",
                min_leaf_size: int = 1, max_cuts: int | None = MAX_CUTS,
                valid_cuts: str = "ancestors") -> tuple[BARTData, dict]:
    """Validated numpy ``X`` (n, F) and non-constant ``y`` (n,) -> (:class:`BARTData`, model dict
    with the split grid, the prior, the ``y`` rescaling and the hyperparameters).  ``max_cuts``:
    candidate cuts per feature (:func:`~bdtree_jax.data.make_split_grid`; None: every midpoint);
    ``valid_cuts``: a node's valid cuts from its rows ("data") or its ancestors' rules
    ("ancestors", BayesTree's and bartz's; :mod:`bdtree_jax.priors`)."""
    prior = _tree_prior(len(X), max_depth=max_depth, alpha=alpha, beta=beta, min_leaf_size=min_leaf_size,
                        split_prior=split_prior, valid_cuts=valid_cuts)
    y = np.asarray(y, float)
    y_min, y_max = float(y.min()), float(y.max())
    y_offset, y_scale = 0.5 * (y_min + y_max), y_max - y_min
    y_scaled = (y - y_offset) / y_scale
    hp = default_hyperparameters(X, y_scaled, n_trees, k=k, nu=nu, q=q)
    grid = make_split_grid(X, max_cuts)
    bins = grid.bin(X)
    likelihood = BARTLeafNormal(np.float32(hp["sigma_hat"] ** 2), np.float32(hp["tau2"]))
    tree_data = make_tree_data(bins, y_scaled, prior, likelihood, grid=grid)
    f32 = lambda v: jnp.asarray(v, jnp.float32)  # noqa: E731
    data = BARTData(tree_data, f32(y_scaled), f32(hp["nu"]), f32(hp["lam"]), f32(hp["sigma_hat"] ** 2), f32(y_scale))
    model = dict(grid=grid, prior=prior, y_offset=y_offset, y_scale=y_scale, train_bins=bins, **hp)
    return data, model


def probit_offset(codes: np.ndarray) -> float:
    """bartz's (and BayesTree's ``binaryOffset``) default: ``Phi^-1(mean(y))``, the proportion
    clipped to ``[1/(n+1), n/(n+1)]`` so that it is finite."""
    from scipy.special import ndtri as np_ndtri

    n = len(codes)
    prop = float(np.clip(np.mean(codes), 1.0 / (n + 1), n / (n + 1.0)))
    return float(np_ndtri(prop))


def build_probit_model(X: np.ndarray, codes: np.ndarray, *, n_trees: int, max_depth: int = 5, alpha: float = 0.95,
                       beta: float = 2.0, k: float = 2.0, offset: float | None = None, split_prior: str = "uniform",
                       min_leaf_size: int = 1, max_cuts: int | None = MAX_CUTS,
                       valid_cuts: str = "ancestors") -> tuple[BARTData, dict]:
    """Validated numpy ``X`` (n, F) and 0/1 ``codes`` (n,) -> (:class:`BARTData` of a binary
    outcome, model dict).  Leaf prior sd ``tau = 3 / (k sqrt(n_trees))`` on the probit scale
    (Chipman et al. 2010, §4.2), ``sigma = 1``, ``offset`` default :func:`probit_offset`;
    ``valid_cuts`` as :func:`build_model`."""
    prior = _tree_prior(len(X), max_depth=max_depth, alpha=alpha, beta=beta, min_leaf_size=min_leaf_size,
                        split_prior=split_prior, valid_cuts=valid_cuts)
    codes = np.asarray(codes, np.float32)
    offset = probit_offset(codes) if offset is None else float(offset)
    tau = 3.0 / (k * np.sqrt(n_trees))
    grid = make_split_grid(X, max_cuts)
    bins = grid.bin(X)
    likelihood = BARTLeafNormal(np.float32(1.0), np.float32(tau**2))
    tree_data = make_tree_data(bins, codes - offset, prior, likelihood, grid=grid)
    f32 = lambda v: jnp.asarray(v, jnp.float32)  # noqa: E731
    data = BARTData(tree_data, f32(codes), f32(1.0), f32(1.0), f32(1.0), f32(1.0), f32(offset))
    model = dict(grid=grid, prior=prior, y_offset=offset, y_scale=1.0, train_bins=bins, tau2=float(tau**2),
                 offset=offset)
    return data, model


# ----------------------------------------------------------------------------------------------
# Prediction


@jax.jit
def sum_of_trees(trees: Tree, leaf_values: Array, bins: Array) -> Array:
    """Sum over trees of each tree's leaf value at every row, per draw.

    trees : Tree of (D, M, N) arrays; leaf_values : (D, M, N); bins : (n, F) bin codes.
    Returns (D, n) on the model's scale (a scan over the trees: memory ``D n``).
    """
    trees = Tree(trees.is_split, trees.feature.astype(jnp.int32), trees.cut.astype(jnp.int32))

    def one_draw(tree_stack, values):
        def add(total, xs):
            tree, v = xs
            return total + v[leaf_index(tree, bins)], None

        total, _ = jax.lax.scan(add, jnp.zeros(bins.shape[0], jnp.float32), (tree_stack, values))
        return total

    return jax.vmap(one_draw)(trees, leaf_values)


@dataclass(eq=False)
class BARTPosterior:
    """Draws of a BART run (kept iterations only).

    Attributes
    ----------
    trees : Tree of (C, S, M, N) arrays; leaf_values : (C, S, M, N) float32 (model scale).
    stats : dict of (C, S) per-iteration scalars: ``sigma``, ``train_rmse``, ``train_log_lik``
        (original units), ``n_leaves``, ``depth`` (means over trees), ``at_max_depth``,
        ``accepted`` (fractions of trees).  ``warmup_stats``: the same for the warm-up iterations.
    grid : the training split grid; y_offset, y_scale : ``y = y_offset + y_scale * model scale``.
    train_bins : (n, F) bin codes of the training inputs, y_train : (n,) the training response
        (for the pointwise log-likelihood; None when the posterior was built without them).
    feature_names : F names (the DataFrame's columns, else ``x0, x1, ...``).
    """

    trees: Tree
    leaf_values: np.ndarray
    stats: dict
    warmup_stats: dict
    grid: SplitGrid
    y_offset: float
    y_scale: float
    config: BARTConfig
    model: dict = field(default_factory=dict)
    info: dict = field(default_factory=dict)
    train_bins: np.ndarray | None = None
    y_train: np.ndarray | None = None
    feature_names: list | None = None

    @property
    def num_chains(self) -> int:
        return int(self.leaf_values.shape[0])

    @property
    def num_draws(self) -> int:
        return int(self.leaf_values.shape[1])

    @property
    def sigma(self) -> np.ndarray:
        """(C, S) noise sd in the units of ``y``."""
        return self.stats["sigma"]

    def _bins(self, X) -> np.ndarray:
        X, _ = check_X(X, estimator=type(self).__name__)
        if X.shape[1] != self.grid.n_features:
            raise ValueError(f"X has {X.shape[1]} features; the model was fit on {self.grid.n_features}.")
        return self.grid.bin(X)

    def _draws_at(self, bins: np.ndarray, chunk: int = 64) -> np.ndarray:
        """(C * S, n) ``y_offset + y_scale * sum of trees`` at rows given by their bin codes."""
        bins = jnp.asarray(bins)
        D = self.num_chains * self.num_draws
        M, N = self.leaf_values.shape[-2:]
        flat = Tree(*(np.asarray(a).reshape(D, M, N) for a in self.trees))
        values = np.asarray(self.leaf_values).reshape(D, M, N)
        chunk = max(1, min(int(chunk), D))
        outs = []
        for s in range(0, D, chunk):  # fixed chunk size (last one padded): one compilation
            sel = np.arange(s, min(s + chunk, D))
            pad = np.concatenate([sel, np.full(chunk - len(sel), sel[0])])
            out = sum_of_trees(Tree(*(jnp.asarray(a[pad]) for a in flat)), jnp.asarray(values[pad]), bins)
            outs.append(np.asarray(out)[: len(sel)])
        return self.y_offset + self.y_scale * np.concatenate(outs, axis=0).astype(np.float64)

    def predict_draws(self, X, *, chunk: int = 64) -> np.ndarray:
        """(C * S, n) the regression function at the rows of X, one row per draw (original units)."""
        return self._draws_at(self._bins(X), chunk)

    def train_draws(self) -> np.ndarray:
        """(C, S, n) the function (regression function, or the classifier's latent ``f``) at the
        training rows, per draw (computed once, then cached)."""
        if self.train_bins is None:
            raise ValueError("this posterior does not hold its training inputs (train_bins is None).")
        cached = self.__dict__.get("_train_draws")
        if cached is None:
            n = self.train_bins.shape[0]
            cached = self._draws_at(self.train_bins).reshape(self.num_chains, self.num_draws, n)
            self.__dict__["_train_draws"] = cached
        return cached

    def predict(self, X) -> np.ndarray:
        """(n,) posterior mean of the regression function."""
        return self.predict_draws(X).mean(0)

    def predict_interval(self, X, prob: float = 0.9, *, predictive: bool = False, seed: int = 0):
        """``(lower, upper)`` equal-tailed interval of the regression function at each row, or
        with ``predictive=True`` of a new response (each draw plus ``N(0, sigma_draw**2)`` noise)."""
        if not 0 < prob < 1:
            raise ValueError(f"prob must be in (0, 1); got {prob!r}.")
        draws = self.predict_draws(X)
        if predictive:
            rng = np.random.default_rng(seed)
            draws = draws + self.sigma.reshape(-1, 1) * rng.standard_normal(draws.shape)
        lo, hi = np.quantile(draws, [(1 - prob) / 2, (1 + prob) / 2], axis=0)
        return lo, hi

    def summary(self) -> dict:
        return dict(
            num_chains=self.num_chains, num_draws=self.num_draws,
            sigma_mean=float(np.mean(self.stats["sigma"])),
            mean_leaves=float(np.mean(self.stats["n_leaves"])), mean_depth=float(np.mean(self.stats["depth"])),
            at_max_depth=float(np.mean(self.stats["at_max_depth"])),
            acceptance_rate=float(np.mean(self.stats["accepted"])),
        )

    # -- variable inclusion ----------------------------------------------------------------------
    def variable_counts(self) -> np.ndarray:
        """(C, S, F) int: per draw, the number of split rules (internal nodes over all trees) on each
        feature (BART's and bartz's ``varcount``)."""
        F = self.grid.n_features
        is_split = np.asarray(self.trees.is_split)
        C, S = is_split.shape[:2]
        c, s, _, _ = np.nonzero(is_split)
        feature = np.asarray(self.trees.feature)[is_split].astype(np.int64)
        counts = np.bincount((c * S + s) * F + feature, minlength=C * S * F)
        return counts.reshape(C, S, F)

    def variable_inclusion(self, mean: bool = False) -> np.ndarray:
        """Variable-inclusion proportions: per draw, the fraction of all split rules (over every
        tree) that use each feature -- (C, S, F), each row summing to 1 (NaN for a draw without any
        split).  ``mean=True``: their average over the draws that have splits, (F,)."""
        counts = self.variable_counts().astype(np.float64)
        total = counts.sum(-1, keepdims=True)
        props = np.divide(counts, total, out=np.full_like(counts, np.nan), where=total > 0)
        if not mean:
            return props
        valid = total[..., 0] > 0
        if not valid.any():
            return np.full(counts.shape[-1], np.nan)
        return props[valid].mean(0)

    def variable_inclusion_summary(self):
        """pandas DataFrame, one row per feature (index: ``feature_names``): ``proportion`` (mean
        inclusion proportion over draws), ``sd``, ``q05``, ``q95`` (over draws) and
        ``splits_per_draw`` (mean number of split rules on the feature)."""
        import pandas as pd

        props = self.variable_inclusion().reshape(-1, self.grid.n_features)
        props = props[~np.isnan(props[:, 0])]
        counts = self.variable_counts().reshape(-1, self.grid.n_features)
        names = self.feature_names or [f"x{i}" for i in range(self.grid.n_features)]
        if len(props) == 0:
            props = np.full((1, self.grid.n_features), np.nan)
        q05, q95 = np.quantile(props, [0.05, 0.95], axis=0)
        return pd.DataFrame(dict(proportion=props.mean(0), sd=props.std(0), q05=q05, q95=q95,
                                 splits_per_draw=counts.mean(0)), index=pd.Index(names, name="feature"))

    # -- ArviZ -----------------------------------------------------------------------------------
    def pointwise_log_likelihood(self) -> np.ndarray:
        """(C, S, n) ``log p(y_i | draw)`` of every training row: ``N(y_i; f(x_i), sigma**2)`` in the
        units of ``y``."""
        from scipy.stats import norm

        f = self.train_draws()
        return norm.logpdf(np.asarray(self.y_train, np.float64), f, np.asarray(self.sigma, np.float64)[..., None])

    def _arviz_groups(self) -> tuple[dict, dict]:
        return {"sigma": self.stats["sigma"]}, {k: v for k, v in self.stats.items() if k != "sigma"}

    def to_arviz(self, *, pointwise: bool = True):
        """ArviZ data (``InferenceData`` with ArviZ 0.2x, ``DataTree`` with 1.x): ``posterior``
        (``sigma``; the classifier: ``fit_mean``, ``fit_sd``), ``sample_stats`` (the other
        per-iteration scalars) and, with ``pointwise=True`` (and the training data held),
        ``log_likelihood`` (``y``: :meth:`pointwise_log_likelihood`, dimension ``obs``; what
        ``az.loo`` and ``az.waic`` read) and ``observed_data`` (``y``)."""
        from ._arviz import make_inference_data

        posterior, sample_stats = self._arviz_groups()
        groups = {"posterior": posterior, "sample_stats": sample_stats}
        dims = {}
        if pointwise and self.train_bins is not None and self.y_train is not None:
            groups["log_likelihood"] = {"y": self.pointwise_log_likelihood()}
            groups["observed_data"] = {"y": np.asarray(self.y_train)}
            dims = {"y": ["obs"]}
        return make_inference_data(groups, dims=dims)


@dataclass(eq=False)
class BARTClassifierPosterior(BARTPosterior):
    """Draws of a probit BART run (:class:`BARTClassifier`).

    As :class:`BARTPosterior`, with ``y_offset`` the probit offset and ``y_scale = 1``: the
    function of :meth:`predict_draws` is the latent ``f(x) = offset + sum of trees`` with
    ``P(y = classes[1] | x) = Phi(f(x))``.  ``stats``: ``train_accuracy``, ``train_log_lik``
    (Bernoulli), ``fit_mean``, ``fit_sd`` (latent ``f`` over the training rows) and the tree
    summaries.  ``y_train`` holds the 0/1 codes; ``classes`` the two labels.
    """

    classes: np.ndarray | None = None

    @property
    def sigma(self) -> np.ndarray:
        raise AttributeError("probit BART has no noise sd: the latent's sd is fixed at 1.")

    def predict_proba_draws(self, X) -> np.ndarray:
        """(C * S, n) ``P(y = classes[1] | x) = Phi(f(x))`` per draw."""
        from scipy.special import ndtr as np_ndtr

        return np_ndtr(self.predict_draws(X))

    def predict_proba(self, X) -> np.ndarray:
        """(n, 2) posterior mean class probabilities (columns in the order of ``classes``)."""
        p1 = self.predict_proba_draws(X).mean(0)
        return np.stack([1.0 - p1, p1], axis=1)

    def predict(self, X) -> np.ndarray:
        """(n,) the class of highest posterior mean probability (``classes[1]`` on ties > 0.5)."""
        labels = self.classes if self.classes is not None else np.arange(2)
        return np.asarray(labels)[(self.predict_proba(X)[:, 1] > 0.5).astype(int)]

    def predict_interval(self, X, prob: float = 0.9, *, predictive: bool = False, seed: int = 0):
        """``(lower, upper)`` equal-tailed credible interval of ``P(y = classes[1] | x)``."""
        if predictive:
            raise ValueError("predictive intervals are for a real response; a class label has none "
                             "(use predict_proba).")
        if not 0 < prob < 1:
            raise ValueError(f"prob must be in (0, 1); got {prob!r}.")
        lo, hi = np.quantile(self.predict_proba_draws(X), [(1 - prob) / 2, (1 + prob) / 2], axis=0)
        return lo, hi

    def summary(self) -> dict:
        return dict(
            num_chains=self.num_chains, num_draws=self.num_draws, offset=float(self.y_offset),
            train_accuracy=float(np.mean(self.stats["train_accuracy"])),
            mean_leaves=float(np.mean(self.stats["n_leaves"])), mean_depth=float(np.mean(self.stats["depth"])),
            at_max_depth=float(np.mean(self.stats["at_max_depth"])),
            acceptance_rate=float(np.mean(self.stats["accepted"])),
        )

    def pointwise_log_likelihood(self) -> np.ndarray:
        """(C, S, n) ``log p(y_i | draw) = log Phi(+-f(x_i))`` (``+`` for ``classes[1]``)."""
        from scipy.special import log_ndtr as np_log_ndtr

        sign = 2.0 * np.asarray(self.y_train, np.float64) - 1.0
        return np_log_ndtr(sign * self.train_draws())

    def _arviz_groups(self) -> tuple[dict, dict]:
        latent = ("fit_mean", "fit_sd")
        return ({k: self.stats[k] for k in latent}, {k: v for k, v in self.stats.items() if k not in latent})


# ----------------------------------------------------------------------------------------------
# scikit-learn estimators


class _BARTEstimator(_FeatureChecks, BaseEstimator):
    """What the BART estimators share: parameter checks, the run and the variable importances."""

    def _extra_reals(self) -> tuple:
        """``(attribute, ok, what)`` checks of the subclass's real parameters."""
        return ()

    def _check_params(self) -> None:
        name = type(self).__name__
        ints = (("n_trees", 1), ("num_warmup", 0), ("num_samples", 1), ("num_chains", 1), ("max_depth", 1),
                ("num_particles", 1))
        for attr, low in ints:
            v = getattr(self, attr)
            if not _is_int(v) or v < low:
                raise ValueError(f"{name}: {attr} must be an integer >= {low}; got {v!r}.")
        if not _is_int(self.seed):
            raise ValueError(f"{name}: seed must be an integer; got {self.seed!r}.")
        if self.max_depth > MAX_DEPTH:
            raise ValueError(f"{name}: max_depth must be an integer in [1, {MAX_DEPTH}]; got {self.max_depth!r}.")
        if self.tree_sampler not in TREE_SAMPLERS:
            raise ValueError(f"{name}: tree_sampler must be one of {TREE_SAMPLERS}; got {self.tree_sampler!r}.")
        if not isinstance(self.split_prior, str) or self.split_prior not in SPLIT_PRIORS:
            raise ValueError(f"{name}: split_prior must be one of {SPLIT_PRIORS}; got {self.split_prior!r}.")
        check_max_cuts(self.max_cuts, where=f"{name}: ")
        if not isinstance(self.valid_cuts, str) or self.valid_cuts not in VALID_CUTS:
            raise ValueError(f"{name}: valid_cuts must be one of {VALID_CUTS}; got {self.valid_cuts!r}.")

        def real(attr, ok, what):
            v = getattr(self, attr)
            if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)) or not np.isfinite(v) \
                    or not ok(float(v)):
                raise ValueError(f"{name}: {attr} must be {what}; got {v!r}.")

        real("alpha", lambda v: 0 < v < 1, "in (0, 1)")
        real("beta", lambda v: v >= 0, ">= 0")
        real("k", lambda v: v > 0, "> 0")
        for check in self._extra_reals():
            real(*check)

    def _run(self, data: BARTData, model: dict, names, outcome: str, fingerprint: tuple, posterior_cls, y_train,
             **extra):
        from .driver import chain_devices, run_chains

        grid = model["grid"]
        n_features = grid.n_features
        dtypes = cgm.CGMConfig.from_prior(model["prior"], n_features=n_features,
                                          n_cuts=int(grid.n_cuts.max())).trace_dtypes
        devices = chain_devices(int(self.num_chains))
        config = BARTConfig(int(self.n_trees), int(self.max_depth), self.tree_sampler,
                            num_particles=int(self.num_particles), trace_dtypes=dtypes,
                            incremental=devices[0].platform == "cpu", outcome=outcome)
        num_warmup, num_samples = int(self.num_warmup), int(self.num_samples)
        t0 = time.perf_counter()
        traces, _ = run_chains(
            bart(config), data, key=jax.random.key(int(self.seed)), num_chains=int(self.num_chains),
            num_iterations=num_warmup + num_samples, block_size=min(100, num_warmup + num_samples),
            progress=self.progress, checkpoint=self.checkpoint,
            fingerprint=(fingerprint[0], config) + tuple(fingerprint[1:]), description=fingerprint[0],
        )
        seconds = time.perf_counter() - t0
        scalars = [k for k in traces if k not in ("tree", "leaf_values")]
        self.posterior_ = posterior_cls(
            trees=Tree(*(a[:, num_warmup:] for a in traces["tree"])),
            leaf_values=traces["leaf_values"][:, num_warmup:],
            stats={k: traces[k][:, num_warmup:] for k in scalars},
            warmup_stats={k: traces[k][:, :num_warmup] for k in scalars},
            grid=grid, y_offset=model["y_offset"], y_scale=model["y_scale"], config=config,
            model={k: v for k, v in model.items() if k not in ("grid", "train_bins")},
            info=dict(seed=int(self.seed), num_warmup=num_warmup, num_samples=num_samples, seconds=seconds,
                      seconds_per_sweep=seconds / (num_warmup + num_samples)),
            train_bins=model["train_bins"], y_train=np.asarray(y_train),
            feature_names=list(names) if names is not None else [f"x{i}" for i in range(n_features)],
            **extra,
        )
        self._record_features(n_features, names)
        return self

    @property
    def feature_importances_(self) -> np.ndarray:
        """(F,) posterior mean variable-inclusion proportions (fraction of split rules on each
        feature; :meth:`BARTPosterior.variable_inclusion`).  Per feature name and with spread:
        ``posterior_.variable_inclusion_summary()``."""
        check_is_fitted(self, "posterior_")
        return self.posterior_.variable_inclusion(mean=True)


class BARTRegressor(RegressorMixin, _BARTEstimator):
    """Bayesian additive regression trees (Chipman, George & McCulloch 2010).

    ``y = sum of n_trees trees + N(0, sigma2)`` sampled by Bayesian backfitting with one update per
    tree and sweep by ``tree_sampler`` (:mod:`bdtree_jax.bart`).

    Parameters
    ----------
    n_trees : int, default 200
    tree_sampler : {"grow-prune", "cgm", "pg"}, default "grow-prune"
        One Metropolis–Hastings grow/prune proposal per tree, one CGM98 grow/prune/change/swap
        proposal, or one Particle Gibbs sweep (``num_particles``; Lakshminarayanan et al. 2015).
    num_warmup, num_samples, num_chains : int, default 250, 500, 2
        Sweeps discarded and kept per chain, independent chains.  Memory of the kept trees:
        about ``n_trees * (2**(max_depth+1) - 1) * 8`` bytes per draw (101 KB at the defaults).
    seed : int, default 0
    max_depth : int, default 5
        Truncation of the tree prior (a node at this depth is a leaf; 5 is bartz's default, whose
        ``maxdepth=6`` counts levels; with ``beta = 2`` a node at depth 5 splits with prior
        probability 0.026).
    alpha, beta : float, default 0.95, 2.0
        Split probability ``alpha (1 + depth)**-beta``.
    k : float, default 2.0
        Leaf prior sd ``0.5 / (k sqrt(n_trees))`` on ``y`` rescaled to [-0.5, 0.5].
    nu, q : float, default 3.0, 0.9
        ``sigma2 ~ nu lam / chi2_nu`` with ``P(sigma < sigma_hat) = q``, ``sigma_hat`` the residual
        sd of a linear regression of ``y`` on ``X``.
    num_particles : int, default 10
        Particles of ``tree_sampler="pg"``.
    split_prior : {"uniform", "range"}, default "uniform"
        The tree prior's choice of a cut (:mod:`bdtree_jax.priors`).
    max_cuts : int or None, default 255
        Candidate cuts per feature: a feature with more distinct values keeps this many cuts at
        quantiles of its distinct values (bartz's default grid; R BART's ``usequants``), None
        keeps every midpoint (:func:`~bdtree_jax.data.make_split_grid`).  The grid is part of the
        prior (the rules a tree can have), and fewer cuts make the per-feature tables smaller.
    valid_cuts : {"ancestors", "data"}, default "ancestors"
        Where a node's available cuts come from (:mod:`bdtree_jax.priors`): the range its
        ancestors' rules leave on each feature ("ancestors", the BART prior as BayesTree, the BART
        package and bartz implement it; a tree with an empty leaf has prior 0), or the cuts that
        split the node's training rows ("data", CGM98's, the single-tree samplers' default).
        "ancestors" lets a sweep propose without reading the rows (faster).
    checkpoint : str or None
        Checkpoint file; an interrupted fit resumes from it.
    progress : bool or None
        Progress bar (None: when stderr is a terminal).

    Attributes
    ----------
    posterior_ : BARTPosterior
    feature_importances_ : (F,) posterior mean variable-inclusion proportions.
    n_features_in_ : int
    feature_names_in_ : (F,) ndarray of str, only when X was a DataFrame.
    """

    def __init__(
        self,
        n_trees: int = 200,
        tree_sampler: str = "grow-prune",
        *,
        num_warmup: int = 250,
        num_samples: int = 500,
        num_chains: int = 2,
        seed: int = 0,
        max_depth: int = 5,
        alpha: float = 0.95,
        beta: float = 2.0,
        k: float = 2.0,
        nu: float = 3.0,
        q: float = 0.9,
        num_particles: int = 10,
        split_prior: str = "uniform",
        max_cuts: int | None = MAX_CUTS,
        valid_cuts: str = "ancestors",
        checkpoint: str | None = None,
        progress: bool | None = None,
    ):
        self.n_trees = n_trees
        self.tree_sampler = tree_sampler
        self.num_warmup = num_warmup
        self.num_samples = num_samples
        self.num_chains = num_chains
        self.seed = seed
        self.max_depth = max_depth
        self.alpha = alpha
        self.beta = beta
        self.k = k
        self.nu = nu
        self.q = q
        self.num_particles = num_particles
        self.split_prior = split_prior
        self.max_cuts = max_cuts
        self.valid_cuts = valid_cuts
        self.checkpoint = checkpoint
        self.progress = progress

    def _extra_reals(self) -> tuple:
        return (("nu", lambda v: v > 0, "> 0"), ("q", lambda v: 0 < v < 1, "in (0, 1)"))

    def fit(self, X, y):
        """Sample the posterior given training data; returns self."""
        name = type(self).__name__
        self._check_params()
        Xv, names = check_X(X, estimator=name, min_rows=2)
        yv = check_regression_y(y, Xv.shape[0], estimator=name)
        if not yv.max() > yv.min():
            raise ValueError(f"{name}: y is constant ({yv[0]!r}); BART needs a response that varies.")
        data, model = build_model(Xv, yv, n_trees=int(self.n_trees), max_depth=int(self.max_depth),
                                  alpha=float(self.alpha), beta=float(self.beta), k=float(self.k), nu=float(self.nu),
                                  q=float(self.q), split_prior=self.split_prior, max_cuts=self.max_cuts,
                                  valid_cuts=self.valid_cuts)
        return self._run(data, model, names, "continuous",
                         ("bart", model["prior"], self.k, self.nu, self.q, self.max_cuts),
                         BARTPosterior, yv)

    def predict(self, X) -> np.ndarray:
        """(n,) posterior mean of the regression function."""
        X = self._check_predict_X(X)
        return self.posterior_.predict(X)

    def predict_interval(self, X, prob: float = 0.9, predictive: bool = False):
        """``(lower, upper)`` equal-tailed credible interval of the regression function, or with
        ``predictive=True`` a prediction interval for a new response (noise included)."""
        X = self._check_predict_X(X)
        return self.posterior_.predict_interval(X, prob=prob, predictive=predictive, seed=int(self.seed))


class BARTClassifier(ClassifierMixin, _BARTEstimator):
    """Binary probit BART (Chipman, George & McCulloch 2010, §4.2; bartz's ``outcome_type="binary"``).

    ``P(y = classes_[1] | x) = Phi(offset + sum of n_trees trees)``, sampled with Albert–Chib
    latents: every sweep draws ``z_i ~ N(f(x_i), 1)`` truncated to the side of 0 given by ``y_i``,
    then backfits the trees on ``z - offset`` as :class:`BARTRegressor` does with ``sigma = 1``
    (:mod:`bdtree_jax.bart`).

    Parameters
    ----------
    n_trees, tree_sampler, num_warmup, num_samples, num_chains, seed, max_depth, alpha, beta,
    num_particles, split_prior, max_cuts, valid_cuts, checkpoint, progress
        As :class:`BARTRegressor`.
    k : float, default 2.0
        Leaf prior sd ``3 / (k sqrt(n_trees))`` on the probit scale (Chipman et al. 2010's
        binary default: the sum of trees has prior sd ``3 / k``).
    offset : float or None, default None
        Latent mean at which the trees start; None: ``Phi^-1(mean(y == classes_[1]))`` (bartz's
        and BayesTree's default), so the prior of ``P(y = 1 | x)`` is centred at the base rate.

    Attributes
    ----------
    classes_ : (2,) ndarray of the labels (sorted); ``classes_[1]`` is the "positive" class.
    posterior_ : BARTClassifierPosterior
    feature_importances_ : (F,) posterior mean variable-inclusion proportions.
    n_features_in_ : int
    feature_names_in_ : (F,) ndarray of str, only when X was a DataFrame.
    """

    def __init__(
        self,
        n_trees: int = 200,
        tree_sampler: str = "grow-prune",
        *,
        num_warmup: int = 250,
        num_samples: int = 500,
        num_chains: int = 2,
        seed: int = 0,
        max_depth: int = 5,
        alpha: float = 0.95,
        beta: float = 2.0,
        k: float = 2.0,
        offset: float | None = None,
        num_particles: int = 10,
        split_prior: str = "uniform",
        max_cuts: int | None = MAX_CUTS,
        valid_cuts: str = "ancestors",
        checkpoint: str | None = None,
        progress: bool | None = None,
    ):
        self.n_trees = n_trees
        self.tree_sampler = tree_sampler
        self.num_warmup = num_warmup
        self.num_samples = num_samples
        self.num_chains = num_chains
        self.seed = seed
        self.max_depth = max_depth
        self.alpha = alpha
        self.beta = beta
        self.k = k
        self.offset = offset
        self.num_particles = num_particles
        self.split_prior = split_prior
        self.max_cuts = max_cuts
        self.valid_cuts = valid_cuts
        self.checkpoint = checkpoint
        self.progress = progress

    def _extra_reals(self) -> tuple:
        return () if self.offset is None else (("offset", lambda v: True, "None or a finite number"),)

    def fit(self, X, y):
        """Sample the posterior given training data (two classes); returns self."""
        name = type(self).__name__
        self._check_params()
        Xv, names = check_X(X, estimator=name, min_rows=2)
        try:
            classes, codes = check_classification_y(y, Xv.shape[0], estimator=name)
        except ValueError as exc:
            if "Unknown label type" in str(exc):
                from sklearn.utils.multiclass import type_of_target

                raise ValueError(f"{name}: y must hold two class labels (binary probit classification); got a "
                                 f"target of type {type_of_target(y)!r}. For a real response use BARTRegressor.") \
                    from None
            raise
        if len(classes) != 2:
            raise ValueError(f"{name}: binary classification only (probit BART); y has {len(classes)} classes "
                             f"{list(classes)}.")
        data, model = build_probit_model(Xv, codes, n_trees=int(self.n_trees), max_depth=int(self.max_depth),
                                         alpha=float(self.alpha), beta=float(self.beta), k=float(self.k),
                                         offset=None if self.offset is None else float(self.offset),
                                         split_prior=self.split_prior, max_cuts=self.max_cuts,
                                         valid_cuts=self.valid_cuts)
        self.classes_ = classes
        return self._run(data, model, names, "binary",
                         ("bart-probit", model["prior"], self.k, model["offset"], self.max_cuts),
                         BARTClassifierPosterior, codes, classes=classes)

    def predict_proba(self, X) -> np.ndarray:
        """(n, 2) posterior mean class probabilities, columns in the order of ``classes_``."""
        X = self._check_predict_X(X)
        return self.posterior_.predict_proba(X)

    def predict(self, X) -> np.ndarray:
        """(n,) the class of highest posterior mean probability."""
        X = self._check_predict_X(X)
        return self.posterior_.predict(X)

    def predict_interval(self, X, prob: float = 0.9):
        """``(lower, upper)`` equal-tailed credible interval of ``P(y = classes_[1] | x)``."""
        X = self._check_predict_X(X)
        return self.posterior_.predict_interval(X, prob=prob)
