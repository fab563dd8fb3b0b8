"""Top-down SMC for a single tree (Lakshminarayanan, Roy & Teh 2013), vectorized over particles.

Derivation: ``docs/theory/smc-pg.md``.  Every particle starts at the stump and is grown node by node in
breadth-first order; the particles target the same posterior as every hard-split sampler here
(the CGM98 prior of :mod:`bdtree_jax.priors` with ``min_leaf_size`` and ``max_depth``, times the
integrated likelihood).

* **Node-wise expansion.**  On a padded heap, breadth-first creation order is increasing heap
  index, so a particle's queue is "its leaves with index above the last decided node": one
  integer per particle.  A stage pops that queue up to the first *splittable* node (a node
  without a valid cut, or at ``max_depth``, is a leaf with prior probability 1 and costs
  nothing) and decides it; a particle whose queue is empty is finished and takes no more
  increments.  Undecided nodes count as leaves in the intermediate targets
  ``p(decided part) L(partial tree)``.
* **Layer-wise expansion** (``grow="layer"``): stage ``d`` decides every splittable leaf at
  depth ``d`` of each particle (one node after the other, with the node-wise proposal and
  increments, and no resampling in between), so a run has at most ``max_depth`` stages.
* **Proposals** at node ``j`` with split probability ``p_j`` (``ΔL`` = the log-likelihood gain
  of the split):

  - ``"prior"``: stop with probability ``1 - p_j``, else a rule from the prior's ``p_rule``
    (uniform valid feature, then a valid cut by the prior's ``split_prior``); increment ``ΔL``
    (0 if it stops).
  - ``"posterior"`` (one-step optimal): stop with mass ``1 - p_j``, rule ``(f, c)`` with mass
    ``p_j p_rule(f, c) exp(ΔL(f, c))`` for every valid rule (left statistics of every cut from
    one bin histogram of the node's rows, :func:`rule_masses`); increment ``log`` of the total
    mass, whatever is drawn.

  (The papers' ``"empirical"`` proposal -- uniform over the grid cuts inside the node's range --
  *is* the cut rule of ``split_prior="uniform"``, so with that prior it equals ``"prior"``; with
  ``split_prior="range"`` ``"prior"`` is the papers' prior proposal.)
* **Categorical features and missing values** (docs/categorical-missing.md): the same decision
  with the rule prior of :mod:`bdtree_jax.priors.categorical`: a rule may be a set of levels of a
  categorical feature, and every rule carries the side missing values go to (``nan_left``) when
  the tree has those bits.  ``"prior"`` draws the rule by
  :func:`~bdtree_jax.priors.categorical.draw_rule_general` (uniform feature among those with an
  available rule, a cut by the prior's weights or a uniform two-way partition of the available
  levels, the bit ``Bernoulli(1/2)``).  ``"posterior"`` scores every rule from one histogram of
  the node's rows per feature (a missing value in a bin of its own): an ordered feature's cuts as
  above, a categorical feature's ``2**(k-1) - 1`` partitions of its ``k`` available levels (the
  node's rows summed by the rank of their level among the available ones, then every subset of
  the ranks but the smallest), each with both missing-value bits.  The subsets share the
  candidate axis with the cuts: ``max(n_bins, 2**R)`` candidates per feature with
  ``R = min(n_bins, MAX_POSTERIOR_LEVELS) - 1`` (``n_bins``, static, is the largest code + 1,
  levels included: :func:`n_codes`).  A node where a categorical feature has more available
  levels than that cannot be enumerated: its increment is NaN (:func:`check_data` refuses
  features of more than :data:`MAX_POSTERIOR_LEVELS` levels before compiling, naming
  ``proposal="prior"``).  A grown particle is re-scored whole
  (:func:`bdtree_jax.kernels._moves.score`: the children's statistics, cut intervals and
  available levels), where numeric data touch only the split leaf's rows.  A particle's
  randomness is the numeric step's three uniforms plus a key (:func:`move_draws`): the
  missing-value bit from ``fold_in(key, 0)``, the level set from ``fold_in(key, 1)``; numeric
  data draw no key.
* **Weights, resampling, islands.**  The ``P`` particles form ``n_islands`` independent systems
  of ``Q = P / I`` particles.  ``log w = log L(stump) - log Q`` at the start; after a stage, an
  island whose ``ESS / Q <= ess_threshold`` starts the next stage by resampling inside the
  island (``"multinomial"`` or ``"systematic"``) and resetting its weights to
  ``log Z_i - log Q``.  No resampling after the last stage.  ``ess_threshold`` 0 never
  resamples, 1 always does.
* **Evidence.**  Each island's final weights sum to its estimate ``Z_i`` of ``p(Y | X)``;
  ``log_evidence`` is the log of their mean.  Its exponential is unbiased for a fixed
  resampling schedule (``ess_threshold`` 0 or 1) and consistent with the adaptive one.  The
  final particles are weighted by their raw weights over all islands (islands with a larger
  evidence estimate weigh more; the reference code's default gives each island ``1 / I``).

Fixed shapes: ``num_particles``, ``n_islands`` and the heap are static (``ess_threshold`` is not:
:func:`threshold_run` compiles one program for every threshold); the stages run in a
``while_loop`` until every particle is finished (at most ``2**max_depth - 1`` node-wise
stages), one ``vmap``-ped step per stage.  Box constraints are not supported (their prior does not factorise over nodes).
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .._types import Array, PRNGKey
from ..data import TreeData
from ..priors import check_cgm_structure, check_valid_cuts, log_cut_probs, split_mask, splittable
from ..priors.categorical import (
    _log_partitions, _pack, _popcount, _unpack, categorical, check_general_rules, draw_rule_general, general_rules,
    rule_available,
)
from ..tree import Rule, Tree, grow, leaf_nodes, n_nodes, rule_at
from . import cgm
from ._moves import draw_rule, propose_grow, score
from .._validate import check_one_of, is_int

__all__ = [
    "SMC_PROPOSALS", "RESAMPLING", "MAX_POSTERIOR_LEVELS", "SMCConfig", "SMCState", "SMCResult", "init", "stage", "run",
    "resample_indices", "rule_masses", "n_codes", "check_data",
]

SMC_PROPOSALS = ("prior", "posterior")
#: The most levels a categorical feature may have for the one-step-optimal proposal, which scores
#: every partition of a node's available levels (``2**(k-1) - 1`` of them).
MAX_POSTERIOR_LEVELS = 8
RESAMPLING = ("multinomial", "systematic")
GROW = ("next", "layer")


@dataclass(frozen=True)
class SMCConfig:
    """Static configuration.

    Attributes
    ----------
    max_depth, min_leaf_size : the tree prior's structure.
    num_particles : int >= 1.
    proposal : "prior" or "posterior" (one-step optimal).
    ess_threshold : an island resamples when its ``ESS / (its particles) <= ess_threshold``; in
        [0, 1].
    resampling : "multinomial" or "systematic".
    grow : "next" (a stage decides one node per particle) or "layer" (a stage decides every
        splittable leaf of the next depth level of each particle).
    n_islands : independent particle systems of ``num_particles / n_islands`` particles each
        (must divide ``num_particles``); resampling stays inside an island.
    """

    max_depth: int
    min_leaf_size: int = 1
    num_particles: int = 100
    proposal: str = "prior"
    ess_threshold: float = 0.1
    resampling: str = "multinomial"
    grow: str = "next"
    n_islands: int = 1

    def __post_init__(self):
        check_options(self.num_particles, self.proposal, self.ess_threshold, self.resampling, grow=self.grow,
                      n_islands=self.n_islands)

    @property
    def cgm(self) -> cgm.CGMConfig:
        return cgm.CGMConfig(self.max_depth, self.min_leaf_size)


def check_options(num_particles, proposal, ess_threshold, resampling, where: str = "", grow="next",
                  n_islands=1) -> None:
    """Clear errors for the SMC options (before anything is compiled)."""
    if not is_int(num_particles) or num_particles < 1:
        raise ValueError(f"{where}num_particles must be an integer >= 1; got {num_particles!r}.")
    if proposal not in SMC_PROPOSALS:
        raise ValueError(f"{where}proposal must be one of {SMC_PROPOSALS} for SMC; got {proposal!r}.")
    if isinstance(ess_threshold, bool) or not isinstance(ess_threshold, (int, float, np.floating, np.integer)) \
            or not 0.0 <= float(ess_threshold) <= 1.0:
        raise ValueError(f"{where}ess_threshold must be a number in [0, 1]; got {ess_threshold!r}.")
    check_one_of(f"{where}resampling", resampling, RESAMPLING)
    check_one_of(f"{where}grow", grow, GROW)
    if not is_int(n_islands) or n_islands < 1 \
            or num_particles % n_islands:
        raise ValueError(f"{where}n_islands must be an integer >= 1 dividing num_particles={num_particles}; "
                         f"got {n_islands!r}.")


class SMCState(NamedTuple):
    """The particle system between stages.

    Attributes
    ----------
    particles : CGMState with a leading particle axis (P, ...): trees and their cached statistics.
    last : (P,) int32 heap index of each particle's last decided node (-1 at the start; ``N``
        once the particle is finished).
    log_weight : (P,) float32 unnormalised log weights (island ``i`` holds particles
        ``i P/I .. (i+1) P/I - 1``; each island's weights sum to its evidence estimate).
    resample : (I,) bool, resample the island before the next stage.
    stage : () int32 stages done.
    n_resampled : () int32 stages that started with a resampling (of any island).
    """

    particles: cgm.CGMState
    last: Array
    log_weight: Array
    resample: Array
    stage: Array
    n_resampled: Array


class SMCResult(NamedTuple):
    """A finished run: ``trees`` Tree of (P, N) arrays, ``log_weight`` (P,), ``log_lik`` /
    ``log_prior`` (P,) of each final tree, ``log_evidence`` (), ``n_stages`` (),
    ``n_resampled`` (), and ``ess`` (max_stages,) the ESS fraction after each stage (NaN after
    the last)."""

    trees: Tree
    log_weight: Array
    log_lik: Array
    log_prior: Array
    log_evidence: Array
    n_stages: Array
    n_resampled: Array
    ess: Array


def max_stages(max_depth: int, grow: str = "next") -> int:
    """Stages a run can take: one per heap slot above ``max_depth`` (node-wise), or one per
    depth level that can split (layer-wise)."""
    if grow == "layer":
        return max_depth
    return n_nodes(max_depth - 1) if max_depth > 0 else 0


def log_evidence(log_weight: Array, n_islands: int) -> Array:
    """``log`` of the mean of the islands' evidence estimates (each island's weights sum to
    its estimate)."""
    return jax.nn.logsumexp(log_weight) - jnp.log(n_islands)


def init(data: TreeData, config: SMCConfig) -> SMCState:
    """Every particle at the stump, ``log w = log L(stump) - log(P / I)``."""
    check_cgm_structure(data.split_prob, "SMC (method='smc')")
    check_valid_cuts(data, "SMC (method='smc')")
    P, I = config.num_particles, config.n_islands
    stump = init_state(data, config.cgm)
    particles = jax.tree.map(lambda a: jnp.broadcast_to(a, (P,) + jnp.shape(a)), stump)
    log_w = jnp.full((P,), stump.log_lik - jnp.log(P // I), jnp.float32)
    zero = jnp.int32(0)
    return SMCState(particles, jnp.full((P,), -1, jnp.int32), log_w, jnp.zeros((I,), bool), zero, zero)


def init_state(data: TreeData, config: cgm.CGMConfig, tree: Tree | None = None, beta=1.0) -> cgm.CGMState:
    """The scored state of ``tree`` (default: the stump); with categorical features or missing
    values (:func:`~bdtree_jax.priors.categorical.general_rules`) a tree with their rule fields
    and the nodes' available levels (:func:`bdtree_jax.kernels.cgm.init`)."""
    return cgm.init(None, data, config, tree=tree, beta=beta)


def move_draws(key: PRNGKey, P: int, data: TreeData, general_key: PRNGKey) -> tuple[Array, Array | None]:
    """The randomness of one grow step of ``P`` particles: (P, 3) uniforms (split or not, feature,
    cut) from ``key`` and, with categorical features or missing values, (P,) keys (the
    missing-value bit and the level set) split from ``general_key``, a key of its own; None
    otherwise (numeric data draw exactly what they always did and ignore ``general_key``)."""
    uniforms = jax.random.uniform(key, (P, 3))
    return uniforms, (jax.random.split(general_key, P) if general_rules(data) else None)


def _can_split(state: cgm.CGMState, data: TreeData) -> Array:
    """(N,) bool: the node has an available rule (a cut, or two levels) and may split."""
    if general_rules(data):
        return jnp.any(rule_available(state.lo, state.hi, state.levels), axis=-1) & (split_mask(data.split_prob) > 0)
    return splittable(state.lo, state.hi, data.split_prob)


def _next_node(state: cgm.CGMState, last: Array, data: TreeData) -> tuple[Array, Array]:
    """The particle's next node to decide: its first splittable leaf after ``last``."""
    n = state.tree.is_split.shape[-1]
    queue = leaf_nodes(state.tree) & _can_split(state, data) & (jnp.arange(n) > last)
    return jnp.argmax(queue).astype(jnp.int32), jnp.any(queue)


def mark_finished(particles: cgm.CGMState, last: Array, data: TreeData) -> Array:
    """(P,) ``last`` with ``N`` for every particle that has no node left to decide, so the run
    stops right after the last decision (no empty stage, no resampling after it)."""
    n = particles.tree.is_split.shape[-1]
    _, has = jax.vmap(_next_node, in_axes=(0, 0, None))(particles, last, data)
    return jnp.where(has, last, n).astype(jnp.int32)


def _ranks(n_bins: int) -> int:
    """Ranks of available levels (all but the smallest) the subset table covers: codes are below
    ``n_bins``, so no feature has more than ``n_bins`` levels."""
    return max(min(n_bins, MAX_POSTERIOR_LEVELS) - 1, 1)


def rule_masses(state: cgm.CGMState, node: Array, data: TreeData, n_bins: int):
    """Every rule at ``node``: its split gain ``ΔL`` and ``log p_rule`` (``-inf`` where it is not
    available), both (F, C, B) with ``C`` candidates per feature (an ordered feature's cut ``c``:
    left ``bins[:, f] <= c``; or a categorical feature's subset ``c`` of its available levels'
    ranks: bit ``r - 1`` set sends the level of rank ``r`` left; the smallest, rank 0, stays right)
    and ``B`` missing-value bits (index 1: missing values left; ``B = 1`` without bits); the
    (F, 32 W) rank of every available level (-1 elsewhere; None without categorical features); and
    whether a categorical feature has more available levels at the node than the table covers.
    ``n_bins``: the largest code (bin or level) + 1; numeric data have ``C = n_bins``, ``B = 1``.

    One scatter of the node's rows into per-feature code histograms (a missing value in a bin of
    its own), then cumulative sums give the left statistics of every cut, and sums by rank those
    of every level subset."""
    n, F = data.bins.shape
    codes = data.bins
    words = 0 if data.level_masks is None else data.level_masks.shape[-1]
    n_levels = 32 * words
    V = max(n_bins, n_levels)  # value bins (codes are below V); bin V holds the missing values, if any
    bins_per_feature = V if data.missing_code is None else V + 1
    if data.missing_code is not None:
        codes = jnp.where(codes == data.missing_code, V, codes)
    rows = jnp.where((state.leaf_id == node)[:, None], data.point_stats, 0.0)  # (n, S)
    slot = codes + jnp.arange(F, dtype=codes.dtype) * bins_per_feature  # (n, F) feature-major
    hist = jax.ops.segment_sum(
        jnp.broadcast_to(rows[:, None, :], (n, F, rows.shape[1])).reshape(n * F, -1), slot.reshape(-1),
        num_segments=F * bins_per_feature,
    ).reshape(F, bins_per_feature, -1)
    lo, hi = state.lo[node], state.hi[node]
    levels = None if state.levels is None else state.levels[node]
    n_valid = jnp.sum(rule_available(lo, hi, levels))
    base = -jnp.log(jnp.maximum(n_valid, 1).astype(jnp.float32))
    if data.missing_code is not None:
        base = base - jnp.log(2.0)
    R = _ranks(n_bins)
    C = max(n_bins, 2**R) if words else n_bins
    cut = jnp.arange(C)
    pad = lambda a, v: jnp.pad(a, ((0, 0), (0, C - a.shape[1])) + ((0, 0),) * (a.ndim - 2), constant_values=v)  # noqa: E731
    left = pad(jnp.cumsum(hist[:, :n_bins], axis=1), 0.0)  # ordered: codes <= cut
    valid = (cut[None, :] >= lo[:, None]) & (cut[None, :] < hi[:, None])
    log_rule = pad(base + log_cut_probs(data.cut_cumwidth, lo, hi)[:, :n_bins], -jnp.inf)
    rank, too_many = None, jnp.bool_(False)
    if words:
        is_cat = categorical(data)
        avail = _unpack(levels)  # (F, 32 W)
        rank = jnp.where(avail, jnp.cumsum(avail, axis=-1) - 1, -1)
        # the node's rows by the rank of their level (1 .. R), then every subset of those ranks
        by_rank = jnp.einsum("frl,fls->frs", (rank[:, None, :] == jnp.arange(1, R + 1)[None, :, None]).astype(
            hist.dtype), hist[:, :n_levels])
        subsets = (np.arange(C)[:, None] >> np.arange(R)[None, :]) & 1  # (C, R); beyond 2**R: invalid
        left = jnp.where(is_cat[:, None, None], jnp.einsum("tr,frs->fts", jnp.asarray(subsets, hist.dtype), by_rank),
                         left)
        k = _popcount(levels)  # (F,)
        cat_valid = (cut[None, :] > 0) & (cut[None, :] < jnp.left_shift(1, jnp.clip(k - 1, 0, R))[:, None])
        valid = jnp.where(is_cat[:, None], cat_valid & (k[:, None] >= 2), valid)
        log_rule = jnp.where(is_cat[:, None], (base - _log_partitions(k))[:, None], log_rule)
        too_many = jnp.any(is_cat & (k > R + 1))
    if data.missing_code is not None:  # (F, C, 2, S): missing values right, left
        left = jnp.stack([left, left + hist[:, V][:, None, :]], axis=2)
        gain = data.likelihood.split_gain(state.stats, leaf_nodes(state.tree), node, left)
    else:
        gain = data.likelihood.split_gain(state.stats, leaf_nodes(state.tree), node, left)[:, :, None]
    B = gain.shape[2]
    log_rule = jnp.where(valid, log_rule, -jnp.inf)
    return gain, jnp.broadcast_to(log_rule[..., None], log_rule.shape + (B,)), rank, too_many


def _prior_rule(uniforms: Array, key: PRNGKey | None, state: cgm.CGMState, node: Array, data: TreeData) -> Rule:
    """A rule from the prior's ``p_rule`` at ``node`` (uniform feature with an available rule, a
    cut by the prior's weights; with categorical features or missing values, a uniform two-way
    partition of the available levels from ``fold_in(key, 1)`` and the missing-value bit from
    ``fold_in(key, 0)``)."""
    lo, hi = state.lo[node], state.hi[node]
    if not general_rules(data):
        return Rule(*draw_rule(uniforms[1], uniforms[2], lo, hi, data.cut_cumwidth, data.feature_log_weight))
    levels = None if state.levels is None else state.levels[node]
    return draw_rule_general(jax.random.fold_in(key, 1), uniforms[1], uniforms[2],
                             jax.random.uniform(jax.random.fold_in(key, 0)), lo, hi, levels, data,
                             state.tree.nan_left is not None)


def _chosen_rule(flat: Array, C: int, B: int, rank: Array | None, state: cgm.CGMState, data: TreeData) -> Rule:
    """The rule at index ``flat`` of :func:`rule_masses`' flattened (F, C, B) candidates."""
    f = (flat // (C * B)).astype(jnp.int32)
    c = (flat // B) % C
    is_cut, mask = True, None
    if rank is not None:  # the levels whose rank r >= 1 has bit r - 1 set in subset c
        is_cut = ~categorical(data)[f]
        r = rank[f]
        subset = (r >= 1) & ((c >> jnp.clip(r - 1, 0, 31)) & 1 == 1)
        mask = jnp.where(is_cut, jnp.uint32(0), _pack(subset, state.tree.levels_left.shape[-1]))
    nan_left = (flat % B == 1) if state.tree.nan_left is not None else None
    return Rule(f, jnp.where(is_cut, c, 0).astype(jnp.int32), nan_left, mask)


def _grown(state: cgm.CGMState, node: Array, rule: Rule, data: TreeData, config: SMCConfig) -> cgm.CGMState:
    """The scored particle after splitting leaf ``node`` on ``rule``: numeric data touch only the
    leaf's rows; with categorical features or missing values the tree is re-scored whole
    (:func:`bdtree_jax.kernels._moves.score`: the children's statistics, cut intervals and
    available levels)."""
    if not general_rules(data):
        return propose_grow(state, node, rule.feature, rule.cut, data, config.cgm)
    grown = score(grow(state.tree, node, rule.feature, rule.cut, rule), data, config.cgm, state.beta)
    return grown._replace(leaf_id=grown.leaf_id.astype(state.leaf_id.dtype))


def _advance(uniforms: Array, state: cgm.CGMState, last: Array, data: TreeData, config: SMCConfig, n_bins: int,
             reference: Tree | None = None, is_reference: Array | bool = False, key: PRNGKey | None = None):
    """Decide one particle's next node.  uniforms: (3,); ``key``: the particle's key of
    :func:`move_draws` (categorical features or missing values only).  Returns (state, last, log
    increment).

    The increments target ``p(T) L(T)^beta`` with the particle's ``state.beta`` (1 for SMC; a
    tempered rung for Particle Gibbs).  With ``reference`` (a Tree of (N,)) and
    ``is_reference`` true the decision is *forced* to the reference tree's at that node (split or
    not, and its rule) -- conditional SMC's replay; its increment is computed exactly as for a
    free particle (for the one-step-optimal proposal it does not depend on the decision)."""
    check_cgm_structure(data.split_prob, "SMC / Particle Gibbs (the top-down particle growth)")
    if config.proposal != "prior":
        check_valid_cuts(data, "The one-step-optimal particle proposal (proposal='posterior')")
    node, has = _next_node(state, last, data)
    p = data.split_prob[node]
    beta = state.beta
    if config.proposal == "prior":
        split = has & (uniforms[0] < p)
        rule = _prior_rule(uniforms, key, state, node, data)
    else:
        gain, log_rule, rank, too_many = rule_masses(state, node, data, n_bins)
        F, C, B = gain.shape
        rule_mass = jnp.where(jnp.isneginf(log_rule), -jnp.inf, jnp.log(p) + log_rule + beta * gain)
        log_mass = jnp.concatenate([jnp.log1p(-p)[None], rule_mass.reshape(-1)])
        log_total = jax.nn.logsumexp(log_mass)
        cdf = jnp.cumsum(jnp.exp(log_mass - log_total))
        choice = jnp.minimum(jnp.sum(uniforms[0] * cdf[-1] >= cdf), log_mass.shape[0] - 1)
        split = has & (choice > 0)
        rule = _chosen_rule(jnp.maximum(choice - 1, 0), C, B, rank, state, data)
    if reference is not None:
        split = jnp.where(is_reference, has & reference.is_split[node], split)
        rule = Rule(*(None if a is None else jnp.where(is_reference, r, a).astype(a.dtype)
                      for a, r in zip(rule, rule_at(reference, node))))
    grown = _grown(state, node, rule, data, config)
    if config.proposal == "prior":
        # valid_cuts="ancestors": the proposal draws from the untruncated prior process, so a
        # split leaving a leaf below min_leaf_size rows (the truncated prior's 0) weighs 0
        truncated = jnp.where(jnp.isneginf(grown.log_prior), -jnp.inf, 0.0) if data.cut_count is not None else 0.0
        increment = jnp.where(split, beta * (grown.log_lik - state.log_lik) + truncated, 0.0)
    else:  # a node with more available levels than the subset table covers: NaN (methods refuse it)
        increment = jnp.where(has, jnp.where(too_many, jnp.nan, log_total), 0.0)
    new = jax.tree.map(lambda a, b: jnp.where(split, a, b), grown, state)
    n = state.tree.is_split.shape[-1]
    return new, jnp.where(has, node, n).astype(jnp.int32), increment.astype(jnp.float32)


def resample_indices(u: Array, log_weight: Array, method: str) -> Array:
    """(P,) ancestor indices drawn from the normalised weights.  ``u`` (P,) uniforms: sorted,
    they give multinomial draws by inverse CDF; systematic uses ``(i + u[0]) / P``."""
    P = log_weight.shape[0]
    w = jnp.exp(log_weight - jax.nn.logsumexp(log_weight))
    cdf = jnp.cumsum(w)
    if method == "systematic":
        points = (jnp.arange(P) + u[0]) / P
    else:
        points = jnp.sort(u)
    return jnp.minimum(jnp.searchsorted(cdf, points * cdf[-1], side="right"), P - 1).astype(jnp.int32)


def ess_fraction(log_weight: Array) -> Array:
    """Effective sample size over the number of particles, in (0, 1]."""
    w = jnp.exp(log_weight - jax.nn.logsumexp(log_weight))
    return 1.0 / jnp.sum(w**2) / log_weight.shape[0]


def stage(key: PRNGKey, state: SMCState, data: TreeData, config: SMCConfig, n_bins: int = 0,
          ess_threshold: Array | float | None = None) -> SMCState:
    """One stage: resample the flagged islands, advance every particle (by one node, or by a
    whole depth level with ``grow="layer"``), reweight, flag the islands to resample next.
    ``ess_threshold``: () float32 (may be traced) replacing ``config.ess_threshold`` (None: that)."""
    P, I = config.num_particles, config.n_islands
    Q = P // I
    # split(key, 3)[:2] == split(key, 2): numeric data draw what they always did
    k_resample, k_move, k_general = jax.random.split(key, 3)

    # Resampling inside each flagged island (the gather is computed for every island and is the
    # identity for the others).
    log_w = state.log_weight.reshape(I, Q)
    u = jax.random.uniform(k_resample, (I, Q))
    local = jax.vmap(resample_indices, in_axes=(0, 0, None))(u, log_w, config.resampling)
    local = jnp.where(state.resample[:, None], local, jnp.arange(Q)[None, :])
    idx = (local + Q * jnp.arange(I)[:, None]).reshape(P)
    log_z = jax.nn.logsumexp(log_w, axis=1, keepdims=True)
    log_w = jnp.where(state.resample[:, None], log_z - jnp.log(Q), log_w).reshape(P)
    particles = jax.tree.map(lambda a: a[idx], state.particles)
    last = state.last[idx]
    n = particles.tree.is_split.shape[-1]
    advance = jax.vmap(lambda u, p, l, d, k: _advance(u, p, l, d, config, n_bins, key=k), in_axes=(0, 0, 0, None, 0))

    if config.grow == "next":
        uniforms, keys = move_draws(k_move, P, data, k_general)
        particles, last, increment = advance(uniforms, particles, last, data, keys)
    else:
        # Layer-wise: decide, one node at a time, every splittable leaf at depth == stage (the
        # product of node-wise proposals, without resampling in between).
        layer = state.stage
        next_depth = lambda nodes: jnp.floor(jnp.log2(nodes + 1.0)).astype(jnp.int32)  # noqa: E731

        def active(p, l):
            node, has = jax.vmap(_next_node, in_axes=(0, 0, None))(p, l, data)
            return (l < n) & (~has | (next_depth(node) <= layer))

        def cond(carry):
            p, l, _, _ = carry
            return jnp.any(active(p, l))

        def body(carry):
            p, l, inc, k = carry
            on = active(p, l)
            uniforms, keys = move_draws(jax.random.fold_in(k_move, k), P, data, jax.random.fold_in(k_general, k))
            new_p, new_l, step_inc = advance(uniforms, p, l, data, keys)
            p = jax.tree.map(lambda a, b: jnp.where(on.reshape((P,) + (1,) * (a.ndim - 1)), a, b), new_p, p)
            return p, jnp.where(on, new_l, l), inc + jnp.where(on, step_inc, 0.0), k + 1

        particles, last, increment, _ = jax.lax.while_loop(
            cond, body, (particles, last, jnp.zeros((P,), jnp.float32), jnp.int32(0))
        )
    last = mark_finished(particles, last, data)
    log_weight = log_w + increment
    threshold = jnp.asarray(config.ess_threshold if ess_threshold is None else ess_threshold, jnp.float32)
    # a threshold of 1 resamples every island (the ESS fraction may round above 1)
    resample = (jax.vmap(ess_fraction)(log_weight.reshape(I, Q)) <= threshold) | (threshold >= 1.0)
    return SMCState(particles, last, log_weight, resample, state.stage + 1,
                    state.n_resampled + jnp.any(state.resample).astype(jnp.int32))


def run(key: PRNGKey, data: TreeData, config: SMCConfig, n_bins: int = 0,
        ess_threshold: Array | float | None = None) -> SMCResult:
    """A whole SMC run (stages until every particle is finished).  ``n_bins`` (static): bins per
    feature, i.e. the largest bin code + 1 -- needed by the ``"posterior"`` proposal.
    ``ess_threshold``: () float32, may be traced (one program for every threshold); None:
    ``config.ess_threshold``."""
    if config.proposal == "posterior" and n_bins < 1:
        raise ValueError("the 'posterior' proposal needs n_bins (the largest bin code + 1).")
    S = max_stages(config.max_depth, config.grow)
    n = n_nodes(config.max_depth)
    I = config.n_islands

    def cond(carry):
        state, _ = carry
        return (state.stage < S) & jnp.any(state.last < n)

    def body(carry):
        state, ess = carry
        state = stage(jax.random.fold_in(key, state.stage), state, data, config, n_bins, ess_threshold)
        island_ess = jax.vmap(ess_fraction)(state.log_weight.reshape(I, -1))
        return state, ess.at[state.stage - 1].set(jnp.min(island_ess))

    state, ess = jax.lax.while_loop(cond, body, (init(data, config), jnp.full((max(S, 1),), jnp.nan, jnp.float32)))
    p = state.particles
    return SMCResult(p.tree, state.log_weight, p.log_lik, p.log_prior, log_evidence(state.log_weight, I),
                     state.stage, state.n_resampled, ess)


def compiled_run(config: SMCConfig, n_bins: int):
    """``jit(run)`` for a configuration: ``(key, data) -> SMCResult``, cached so equal
    configurations get the same function.  It calls :func:`threshold_run`'s program with
    ``config.ess_threshold`` as its argument, so configurations that differ only in the threshold
    share one executable.  ``compiled_run.cache_clear()`` forgets both kinds."""
    return _program(config, n_bins, True)


def threshold_run(config: SMCConfig, n_bins: int):
    """``jit(run)`` with the threshold as data: ``(key, (data, ess_threshold)) -> SMCResult`` with
    ``ess_threshold`` a () float32 (``config.ess_threshold`` is ignored); one cached program for
    every threshold (:func:`bdtree_jax.methods.SMC` passes the pair to
    :func:`~bdtree_jax.driver.run_independent`)."""
    return _program(dataclasses.replace(config, ess_threshold=0.0), n_bins, False)


@functools.lru_cache(maxsize=64)
def _program(config: SMCConfig, n_bins: int, bound: bool):
    """``bound``: :func:`compiled_run`'s ``(key, data)`` function; else :func:`threshold_run`'s jit."""
    if bound:
        shared = threshold_run(config, n_bins)
        threshold = np.float32(config.ess_threshold)
        return lambda key, data: shared(key, (data, threshold))
    return jax.jit(lambda key, inputs: run(key, inputs[0], config, n_bins, inputs[1]))


compiled_run.cache_clear = _program.cache_clear


def n_codes(grid) -> int:
    """The largest code + 1 of a split grid's features (bins, levels): the kernels' static
    ``n_bins`` for the one-step-optimal proposal."""
    count = getattr(grid, "level_count", None)
    return max(int(grid.n_cuts.max()) + 1, int(np.max(count, initial=0)) if count is not None else 0)


def check_data(data: TreeData, grid, proposal: str, structure: str, names, who: str) -> None:
    """Refuse, before anything is compiled, what SMC and Particle Gibbs do not sample with
    categorical features or missing values (a ``ValueError`` naming the option): box constraints,
    another structure than CGM98's, and, for the one-step-optimal proposal, a categorical feature
    of more than :data:`MAX_POSTERIOR_LEVELS` levels (naming the column and ``proposal="prior"``).
    Numeric data pass."""
    if not general_rules(data):
        return
    check_general_rules(data, structure, who)
    count = np.asarray(getattr(grid, "level_count", None) if getattr(grid, "level_count", None) is not None else [0])
    if proposal != "prior" and count.max(initial=0) > MAX_POSTERIOR_LEVELS:
        f = int(np.argmax(count))
        col = repr(names[f]) if names is not None else str(f)
        raise ValueError(
            f"{who}: proposal={proposal!r} (the one-step-optimal proposal) scores every partition of a categorical "
            f"feature's levels and supports at most {MAX_POSTERIOR_LEVELS} levels; column {col} has {int(count[f])}. "
            "Use proposal='prior', which draws level sets from the prior for any number of levels, or group rare "
            "levels.")
