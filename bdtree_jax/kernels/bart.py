"""BART: Bayesian additive regression trees by Bayesian backfitting on padded trees.

Model (Chipman, George & McCulloch 2010, "BART")::

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

``"grow-prune"`` runs the sweep in two passes (:func:`_grow_prune_sweep`): the proposals of all
trees vectorized, then a lean sequential ``lax.scan`` making a few passes over each tree's rows;
no (M, n) array is built per sweep beyond the rows' leaves it keeps (uint8 up to depth 7).
``"cgm"`` and ``"pg"`` update each tree in a ``lax.scan`` with the single-tree kernels on a
:class:`~bdtree_jax.data.TreeData` whose ``point_stats`` and ``likelihood`` are swapped in; so
does every sampler on data with categorical features or missing values (docs/categorical-missing.md:
a rule may send a set of levels left and carries the side missing values go to, under the rule
prior of :mod:`bdtree_jax.priors.categorical`): CGM is then the general-rule chain (with sequential
chains :func:`~bdtree_jax.kernels.bart_moves.step`, which re-routes only the rows a move touches),
PG's particles draw level sets uniform over the partitions of the available levels and the
missing-value bit ``Bernoulli(1/2)``.  Every shape is fixed, so a run compiles once.

Binary outcomes (``BARTConfig(outcome="binary")``, :class:`~bdtree_jax.estimators.BARTClassifier`): probit BART with
Albert & Chib (1993) latents, as Chipman et al. (2010, §4.2) and bartz's ``outcome_type="binary"``::

    P(y_i = 1) = Phi(offset + sum_m g(x_i; T_m, mu_m)),  i.e.  z_i ~ N(offset + f(x_i), 1),  y_i = 1{z_i > 0}

``sigma = 1``, ``offset = Phi^-1(mean(y))`` (bartz's choice), leaf values ``mu ~ N(0, tau2)``
with ``tau = 3 / (k sqrt(M))`` (Chipman 2010's binary default, ``k = 2``).  ``BARTData.y`` holds
the 0/1 labels.  A sweep first draws every latent from its truncated normal conditional
(:func:`draw_latents`), then backfits all trees on ``z - offset`` as above (``sigma2 = 1``).  The
latents are not kept (redrawn from their full conditional given the trees): a Gibbs sampler of
``p(trees, leaves, z | y)``.

State (one chain), :class:`BARTState`.

Trace per iteration (:func:`trace`): ``sigma``, ``train_rmse`` and ``train_log_lik`` (the normal
log-likelihood of the training ``y``; original ``y`` units) -- for binary outcomes instead
``train_accuracy``, ``train_log_lik`` (Bernoulli, ``sum log Phi(+-f)``), ``fit_mean`` and ``fit_sd``
(of the latent ``f = offset + sum of trees``) --, mean leaves and depth per tree, the fractions of
trees at ``max_depth`` and changed, and the trees: ``tree`` (``(M, N)`` each) and ``leaf_values
(M, N)`` float32 (or bfloat16), ``M N (1 + 1 + 2 + 4)`` bytes per iteration and chain for int8
features and int16 cuts: 101 KB for ``M = 200, max_depth = 5``.  The driver records warm-up
iterations too (dropped after the run).  ``BARTConfig(record_trees=False)`` keeps only the scalars.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import log_ndtr, ndtr

from .._types import Array, PRNGKey
from ..data import TreeData
from ..likelihoods import BARTLeafNormal
from ..priors import node_lanes, regrow_subtree, split_mask, splittable, subtree_sums, sum_by_lane
from ..priors.categorical import general_rules, rule_available
from ..problem.bart import BARTData
# MAX_DEPTH: the deepest tree BART pads, as every sampler (rows' leaves as heap slots: uint8 to depth 7, else int16)
from ..tree import MAX_DEPTH, leaf_nodes, n_nodes, tree_summaries
from . import bart_moves, cgm, pg
from .bart_grow_prune import (COUNT_BATCH, COUNT_ELEMENTS, bins_by_feature, children, count_batch, grow_prune_scan,
                              proposals, rows_sweep)
from ._moves import CGMState, score
from .base import SamplingAlgorithm, with_config
from .probit import draw_latents
from .._validate import check_one_of, is_int

__all__ = [
    "TREE_SAMPLERS", "OUTCOMES", "LEAF_DTYPES", "MAX_DEPTH", "COUNT_BATCH", "COUNT_ELEMENTS", "BARTConfig", "BARTData", "BARTState", "BARTInfo", "SweepDraws",
    "bart", "count_batch", "draw", "draw_latents", "geweke_step", "init", "prior_draw", "simulate_y", "step", "step_with_draws",
    "trace",
]

TREE_SAMPLERS = ("grow-prune", "cgm", "pg")
OUTCOMES = ("continuous", "binary")
#: Float types the trace may record the leaf values in.
LEAF_DTYPES = ("float32", "bfloat16", "float16")
GROW_PRUNE_MOVES = (0.5, 0.5, 0.0, 0.0)
#: Sweeps between exact recomputations of the fit from the trees (in between it is updated tree
#: by tree, a float32 round-off of ~1e-7 of the residual per update).
FIT_REFRESH = 16
CGM_MOVES = cgm.MOVE_PROBS


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
    leaf_dtype : float type of the recorded leaf values, one of :data:`LEAF_DTYPES` ("float32";
        "bfloat16" or "float16" halve the trace's largest part; the sampler itself always works
        in float32, only the record is rounded).
    general_rules : categorical features or missing values (module docstring).
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
    leaf_dtype: str = "float32"
    general_rules: bool = False

    def __post_init__(self):
        check_one_of("leaf_dtype", self.leaf_dtype, LEAF_DTYPES)
        check_one_of("outcome", self.outcome, OUTCOMES)
        check_one_of("tree_sampler", self.tree_sampler, TREE_SAMPLERS)
        if not is_int(self.n_trees) or self.n_trees < 1:
            raise ValueError(f"n_trees must be an integer >= 1; got {self.n_trees!r}.")
        if not is_int(self.max_depth) or not 1 <= self.max_depth <= MAX_DEPTH:
            raise ValueError(f"max_depth must be an integer in [1, {MAX_DEPTH}]; got {self.max_depth!r}.")
        if not is_int(self.num_particles) or self.num_particles < 1:
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
        return cgm.CGMConfig(self.max_depth, self.min_leaf_size, moves, tuple(self.trace_dtypes), self.incremental,
                             self.general_rules)

    @property
    def pg(self) -> pg.PGConfig:
        return pg.PGConfig(self.max_depth, self.min_leaf_size, int(self.num_particles), "prior",
                           trace_dtypes=tuple(self.trace_dtypes))


class BARTState(NamedTuple):
    """One chain: ``trees`` CGMState with leading axis M (``trees.stats[..., 0]`` holds every
    node's row count, kept by every sweep; its other columns are scratch); ``leaf_values`` (M, N)
    float32 (0 off the leaves); ``fit`` (n,) sum of the trees at the training rows, updated tree by
    tree and recomputed from the trees every :data:`FIT_REFRESH` sweeps (float32 round-off does not
    accumulate); ``sigma2`` (); ``sweeps`` () int32 sweeps done; ``can_split`` (M, N) bool every
    node's :func:`~bdtree_jax.priors.splittable` (kept so a sweep's proposals need not re-read the
    (M, N, F) bounds)."""

    trees: CGMState
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


def _leaf_model(data: BARTData, sigma2: Array) -> BARTLeafNormal:
    """The leaves' model in a tree update: the data's ``tau2`` with the current ``sigma2``."""
    return BARTLeafNormal(sigma2, data.tree_data.likelihood.tau2)


def _residual_data(data: BARTData, residual: Array, sigma2: Array) -> TreeData:
    """The TreeData of one tree update: rows ``[1, r, r**2]`` (n, 3) of the residual and the leaf
    model with the current ``sigma2``."""
    point_stats = jnp.stack([jnp.ones_like(residual), residual, residual * residual], axis=1)
    return data.tree_data._replace(point_stats=point_stats.astype(jnp.float32), likelihood=_leaf_model(data, sigma2))


def _fit_from_trees(state: BARTState) -> Array:
    """(n,) the sum of the trees at the training rows, added tree by tree in a ``lax.scan`` (one
    (n,) gather per tree; never the (M, n) table of every tree's values)."""
    def add(total, tree):
        values, leaf = tree
        return total + values[leaf], None

    start = jnp.zeros(state.trees.leaf_id.shape[-1], jnp.float32)
    return jax.lax.scan(add, start, (state.leaf_values, state.trees.leaf_id))[0]


def _draw_sigma2(key: PRNGKey, residual: Array, nu: Array, lam: Array) -> Array:
    """``sigma2 | rest ~ IG((nu + n)/2, (nu lam + sum r**2)/2)``."""
    shape = 0.5 * (nu + residual.shape[0])
    rate = 0.5 * (nu * lam + jnp.sum(residual * residual))
    return (rate / jax.random.gamma(key, shape)).astype(jnp.float32)


def _update_tree(key, uniforms, state: CGMState, data: TreeData, config: BARTConfig):
    """One update of one tree by the configured sampler; returns (state, changed).  General rules:
    ``(uniforms, key)`` is the CGM step's :func:`~bdtree_jax.kernels.cgm.draw`."""
    if config.tree_sampler == "pg":
        new, info = pg.step(key, state, data, config.pg)
    elif config.general_rules:
        step = bart_moves.step if config.incremental else cgm.step_with_uniforms
        new, info = step((uniforms, key), state, data, config.cgm)
    else:
        new, info = cgm.step_with_uniforms(uniforms, state, data, config.cgm)
    return new, info.accepted


def init(key: PRNGKey | None, data: BARTData, config: BARTConfig) -> BARTState:
    """Every tree a stump with leaf value 0, ``sigma2 = sigma2_init``.  ``key`` is unused."""
    del key
    stump = _narrow_ids((cgm.init if config.general_rules else cgm.init)(None, data.tree_data, config.cgm))
    M = config.n_trees
    trees = jax.tree.map(lambda a: jnp.broadcast_to(a, (M,) + jnp.shape(a)), stump)
    n = data.y.shape[0]
    N = n_nodes(config.max_depth)
    return BARTState(trees, jnp.zeros((M, N), jnp.float32), jnp.zeros((n,), jnp.float32),
                     jnp.asarray(data.sigma2_init, jnp.float32), jnp.int32(0), _can_split(trees, data))


def _narrow_ids(trees: CGMState) -> CGMState:
    """The rows' leaves (the (M, n) array a sweep reads and writes) in the narrowest type that
    holds a heap slot: uint8 up to ``max_depth`` 7 (255 slots), else int16 (``max_depth <= 14``)."""
    n_slots = trees.tree.is_split.shape[-1]
    return trees._replace(leaf_id=trees.leaf_id.astype(jnp.uint8 if n_slots <= 2**8 else jnp.int16))


def _can_split(trees: CGMState, data: BARTData) -> Array:
    """(M, N) bool: every tree's nodes have an available rule (a valid cut, or two levels) and
    may split (:func:`~bdtree_jax.priors.splittable` on numeric data)."""
    split_prob = data.tree_data.split_prob
    if general_rules(data.tree_data):
        return jnp.any(rule_available(trees.lo, trees.hi, trees.levels), axis=-1) & (split_mask(split_prob) > 0)
    return splittable(trees.lo, trees.hi, split_prob)


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
    tree_keys = jax.random.split(k_trees, M) if config.tree_sampler == "pg" or config.general_rules else jnp.zeros(
        (M,), jnp.uint32)
    return SweepDraws(jax.random.uniform(k_moves, (M, 10 if config.general_rules else 5)), jax.random.normal(k_leaves, (M, N)), tree_keys, k_sigma)


def step(key: PRNGKey, state: BARTState, data: BARTData, config: BARTConfig) -> tuple[BARTState, BARTInfo]:
    """One backfitting sweep over the trees, then ``sigma2`` (module docstring).  Binary outcome:
    the latents first (with the key a continuous sweep spends on ``sigma2``), no ``sigma2``."""
    return step_with_draws(draw(key, config), state, data, config)


def step_with_draws(draws: SweepDraws, state: BARTState, data: BARTData, config: BARTConfig,
                    leaf_step=None) -> tuple[BARTState, BARTInfo]:
    """:func:`step` given its :func:`draw`; ``leaf_step``: :func:`_grow_prune_sweep`'s hook (grow-prune only)."""
    uniforms, normals, tree_keys, k_sigma = draws
    sigma2 = state.sigma2
    # the fit as carried, or every FIT_REFRESH sweeps exactly from the trees (bounded round-off)
    total = jax.lax.cond(state.sweeps % FIT_REFRESH == 0, lambda: _fit_from_trees(state), lambda: state.fit)
    sweeps = state.sweeps + 1
    if config.binary:  # the trees' target: latent minus offset
        target = draw_latents(k_sigma, data.offset + total, data.y) - data.offset
    else:
        target = data.y

    if config.tree_sampler == "grow-prune" and not config.general_rules:
        total, values, changed, trees, can_split = _grow_prune_sweep(state, data, target, total, sigma2, uniforms,
                                                                     normals, config, leaf_step)
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
                  config: BARTConfig, rows=None):
    """Backfitting with the single-tree kernel (``"cgm"``, ``"pg"``, and every sampler with
    categorical features or missing values: :func:`_update_tree`): a ``lax.scan`` over the trees,
    each updated on its partial residual.  Returns ``(total, leaf_values, changed, trees)``; ``rows(partial)``:
    tree m's TreeData given the other trees' sum (default :func:`_residual_data` of ``target - partial``), whose likelihood's ``draw_values(stats, normals[m])`` draws the leaves.

    The per-tree ``stats`` and ``log_lik`` are carried unchanged: they are recomputed on the
    partial residual at every visit, only as far as the sampler reads them (CGM's local moves
    re-score by differences from the node statistics, its whole-tree re-score and the general-rule
    chain need the total log-likelihood too; PG rebuilds its particles from the stump and needs
    neither), so none are kept between sweeps."""
    N = n_nodes(config.max_depth)
    needs_stats = config.tree_sampler != "pg"
    needs_log_lik = needs_stats  # CGM's whole-tree steps re-score from it (log-linear BART's grow-prune too)
    trees = state.trees
    stale_stats = jnp.zeros(trees.stats.shape[1:], jnp.float32)
    rows = rows or (lambda partial: _residual_data(data, target - partial, sigma2))

    def body(total, xs):
        (tree, leaf_id, _, lo, hi, levels, log_prior), values, u, z, k = xs
        old = values[leaf_id]
        data_m = rows(total - old)
        # re-score on the residual: the rows' leaves and valid-cut bounds do not change, nor does
        # the tree's prior
        stats = subtree_sums(data_m.point_stats, leaf_id, N) if needs_stats else stale_stats
        log_lik = data_m.likelihood.log_lik(stats, leaf_nodes(tree)) if needs_log_lik else jnp.float32(0.0)
        tree_state = CGMState(tree, leaf_id, stats, lo, hi, log_lik, log_prior, jnp.float32(1.0), levels)
        new, changed = _update_tree(k, u, tree_state, data_m, config)
        values = jnp.where(leaf_nodes(new.tree), data_m.likelihood.draw_values(new.stats, z), 0.0).astype(jnp.float32)
        structure = (new.tree, new.leaf_id.astype(leaf_id.dtype), new.stats, new.lo, new.hi, new.levels,
                     new.log_prior)
        return total - old + values[new.leaf_id], (structure, values, changed)

    structure = (trees.tree, trees.leaf_id, trees.stats, trees.lo, trees.hi, trees.levels, trees.log_prior)
    total, (structure, values, changed) = jax.lax.scan(body, total, (structure, state.leaf_values, uniforms, normals,
                                                                     tree_keys))
    tree, leaf_id, stats, lo, hi, levels, log_prior = structure
    return total, values, changed, trees._replace(tree=tree, leaf_id=leaf_id, stats=stats, lo=lo, hi=hi,
                                                  levels=levels, log_prior=log_prior)


def _backfit_rows(state: BARTState, data: BARTData, total, uniforms, leaf_draws, tree_keys, config: BARTConfig, rows):
    """Backfitting for a leaf model given by ``rows`` (:func:`_kernel_sweep`'s hook; ``leaf_draws``
    (M, ...) the likelihood's ``draw_values`` randomness per tree): for ``"grow-prune"`` on numeric
    data the two-pass sweep (:func:`~bdtree_jax.kernels.bart_grow_prune.rows_sweep`), else
    :func:`_kernel_sweep`.  Returns ``(total, leaf_values, changed, trees, can_split)``."""
    if config.tree_sampler == "grow-prune" and not config.general_rules:
        return rows_sweep(state, data, total, uniforms, leaf_draws, config, rows)
    total, values, changed, trees = _kernel_sweep(state, data, None, total, None, uniforms, leaf_draws, tree_keys,
                                                  config, rows=rows)
    return total, values, changed, trees, _can_split(trees, data)


def _grow_prune_sweep(state: BARTState, data: BARTData, target, total, sigma2, uniforms, normals,
                      config: BARTConfig, leaf_step=None):
    """Backfitting with one grow-or-prune proposal per tree, in a vectorized and a sequential pass.

    Vectorized (:func:`_grow_prune_prepare`): every tree's proposal (:class:`~bdtree_jax.kernels.
    cgm.LocalProposal`), the row counts of its finer tree (the proposed one for a grow, the
    current one for a prune) and, ``sigma2`` being fixed during the sweep, the count-only parts of
    the split gain and of the leaf posteriors.  Sequential (a ``lax.scan`` carrying the residual
    ``target - fit`` and the kept (M, n) rows' leaves), per tree, each row's stored data read once:
    the rows' leaves in the finer tree (from the kept leaves and the rule's contiguous feature
    row), one ``segment_sum`` of the residual over them (plus the old values times the counts: the
    partial residual's sums), the split gain, the accept step, the new leaf values, the rows'
    leaves after the step (written in place) and the residual's update (deferred to the next
    tree, see the body).  The accepted moves are then written into the trees' O(M N) arrays.  The
    same Markov chain as proposing and accepting tree by tree: tree ``m``'s proposal reads only
    tree ``m``, which no earlier update of the sweep touches (tested against the single-tree CGM
    kernel run tree by tree; the scan: :func:`~bdtree_jax.kernels.bart_grow_prune.grow_prune_scan`, given the
    residual's node sums, split gain and leaf draws).  Returns ``(total, leaf_values, changed, trees, can_split)``.
    ``leaf_step(props, xs)``: per tree ``f(m, log_ratio, (sums, s_node), xs_m) -> (accepted, new)`` in place of
    the accept step's draw."""
    N = n_nodes(config.max_depth)
    bins = bins_by_feature(data)  # (F, n): a rule reads one contiguous row
    xs, props = _grow_prune_prepare(state, data, bins, sigma2, uniforms, normals, config)
    hook = leaf_step and leaf_step(props, xs)
    node = props.node

    def node_step(m, fine, resid, xs_m):
        old, counts, factor, leaf_draw, a_gain, bb, node_factor, node_draw = xs_m[4:]
        sums = sum_by_lane(resid, node_lanes(fine, N), N) + counts * old  # the partial residual's
        kids = children(sums, node[m])
        s_node = kids[0] + kids[1]
        gain = a_gain + bb[0] * kids[0] ** 2 + bb[1] * kids[1] ** 2 - bb[2] * s_node**2
        return gain, (sums, s_node), lambda coarse: (s_node * node_factor + node_draw, sums * factor + leaf_draw)

    resid, values, changed, trees, can_split = grow_prune_scan(state, bins, props, target - total, xs, node_step,
                                                               residual=True, leaf_step=hook)
    return target - resid, values, changed, trees, can_split


def _grow_prune_prepare(state: BARTState, data: BARTData, bins, sigma2, uniforms, normals, config: BARTConfig):
    """The vectorized pass of :func:`_grow_prune_sweep`: every tree's proposal, the row counts of
    its finer tree (a grow's new left child counted in one pass over the rows of all trees, in
    uint8 blocks: :func:`~bdtree_jax.kernels.bart_grow_prune.proposals`) and the residual-free terms of its sequential update, with
    ``sigma2`` fixed during the sweep: the count-only parts of the split gain and of the leaf
    posteriors (mean factor ``1 / (sigma2 precision)``, draw ``sd z``), and under
    ``valid_cuts="ancestors"`` the prior's truncation to leaves of ``min_leaf_size`` rows.
    Returns the scan's per-tree inputs and the proposals."""
    props, possible, counts, n_kids, n_node, old_fine = proposals(state, data, bins, uniforms, config)
    node = props.node
    # the leaf model with this sweep's sigma2: a leaf of n rows with residual sum S has log
    # marginal  log_a(n) + b(n) S**2  (+ row terms that cancel) and mu | S of mean
    # S * mean_factor(n), sd(n)
    leaf_model = _leaf_model(data, sigma2)
    n_all = jnp.concatenate([n_kids, n_node[:, None]], axis=1)  # (M, 3): left, right, node
    log_a, b = leaf_model.marginal_terms(n_all)
    mean_factor, sd = leaf_model.posterior_factors(counts)
    node_factor, node_sd = leaf_model.posterior_factors(n_node)
    node_draw = node_sd * jnp.take_along_axis(normals, node[:, None], axis=1)[:, 0]
    gain_counts = log_a[:, 0] + log_a[:, 1] - log_a[:, 2]
    rest = props.d_log_prior + props.log_q_ratio
    xs = (possible, rest, jnp.log(uniforms[:, 4]), old_fine, counts, mean_factor, sd * normals, gain_counts, b,
          node_factor, node_draw)
    return xs, props


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
        out["tree"] = t._replace(feature=t.feature.astype(config.trace_dtypes[0]), cut=t.cut.astype(config.trace_dtypes[1]))
        out["leaf_values"] = state.leaf_values.astype(config.leaf_dtype)
    return out


def forest_trace(name: str, state: BARTState, accepted: Array, config: BARTConfig) -> dict:
    """The per-iteration record of one forest of a model with several (``name`` its prefix):
    ``{name}_n_leaves``, ``{name}_depth`` () float32 the means over its M trees,
    ``{name}_accepted`` () float32 the share of ``accepted`` (M,) bool, and with
    ``config.record_trees`` ``{name}_tree`` (M, N) and ``{name}_leaf_values`` (M, N) in the
    configured dtypes."""
    t = state.trees.tree
    leaves, depth = tree_summaries(t.is_split)
    out = {f"{name}_n_leaves": jnp.mean(leaves.astype(jnp.float32)),
           f"{name}_depth": jnp.mean(depth.astype(jnp.float32)),
           f"{name}_accepted": jnp.mean(accepted.astype(jnp.float32))}
    if config.record_trees:
        out[f"{name}_tree"] = t._replace(feature=t.feature.astype(config.trace_dtypes[0]),
                                         cut=t.cut.astype(config.trace_dtypes[1]))
        out[f"{name}_leaf_values"] = state.leaf_values.astype(config.leaf_dtype)
    return out


@functools.lru_cache(maxsize=64)
def bart(config: BARTConfig) -> SamplingAlgorithm:
    """BART as a :class:`SamplingAlgorithm` on :class:`BARTData` (for
    :func:`bdtree_jax.driver.run_chains`); cached per configuration so equal configurations share
    compiled programs."""
    return with_config(init, step_with_draws, trace, draw, config)


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
    # split(key, 4)[:3] == split(key, 3): the trees, leaves and sigma draw what they always did
    k_trees, k_leaves, k_sigma, k_redraws = jax.random.split(key, 4)

    def grown(k_tree):
        tree, _, _, _ = regrow_subtree(stump.tree, stump.leaf_id, stump.lo, stump.hi, jnp.int32(0),
                                       jax.random.uniform(k_tree, (N, 3)), td, config.min_leaf_size)
        return score(tree, td, config.cgm, 1.0)

    def one(k_tree, k_leaf, k_redraw):
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
                                          (k_redraw, state))
        tree = state.tree
        values = jnp.sqrt(td.likelihood.tau2) * jax.random.normal(k_leaf, (N,))
        return state, jnp.where(leaf_nodes(tree), values, 0.0).astype(jnp.float32)

    trees, values = jax.vmap(one)(jax.random.split(k_trees, M), jax.random.split(k_leaves, M),
                                  jax.random.split(k_redraws, M))
    trees = _narrow_ids(trees)
    if config.draws_sigma:
        sigma2 = data.nu * data.lam / (2.0 * jax.random.gamma(k_sigma, 0.5 * data.nu))
    else:
        sigma2 = data.sigma2_init
    state = BARTState(trees, values, jnp.zeros_like(data.y), jnp.asarray(sigma2, jnp.float32), jnp.int32(0),
                      _can_split(trees, data))
    return state._replace(fit=_fit_from_trees(state))
