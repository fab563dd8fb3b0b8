"""Top-down SMC for a single tree (Lakshminarayanan, Roy & Teh 2013), vectorized over particles.

Spec: ``smc-pg_spec.md`` §1.  Every particle starts at the stump and is grown node by node in
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
* **Proposals** at node ``j`` with split probability ``p_j`` (``ΔL`` = the log-likelihood gain
  of the split):

  - ``"prior"``: stop with probability ``1 - p_j``, else a rule from the prior's ``p_rule``
    (uniform valid feature, uniform valid cut); increment ``ΔL`` (0 if it stops).
  - ``"posterior"`` (one-step optimal): stop with mass ``1 - p_j``, rule ``(f, c)`` with mass
    ``p_j p_rule(f, c) exp(ΔL(f, c))`` for every valid rule (left statistics of every cut from
    one bin histogram of the node's rows); increment ``log`` of the total mass, whatever is
    drawn.

  (The papers' ``"empirical"`` proposal -- uniform over the grid cuts inside the node's range --
  *is* our prior's cut rule, so it equals ``"prior"`` here.)
* **Weights and resampling.**  ``log w = log L(stump) - log P`` at the start; after a stage, if
  ``ESS / P <= ess_threshold`` the next stage starts by resampling (``"multinomial"`` or
  ``"systematic"``) and resetting every weight to ``log Z_t - log P``.  No resampling after the
  last stage.  ``ess_threshold`` 0 never resamples, 1 always does.
* **Evidence.**  ``log_evidence = logsumexp(log w)`` at the end estimates ``log p(Y | X)``; its
  exponential is unbiased for a fixed resampling schedule (``ess_threshold`` 0 or 1) and
  consistent with the adaptive one.

Fixed shapes: ``num_particles`` and the heap are static; the stages run in a ``while_loop``
until every particle is finished (at most ``2**max_depth - 1`` stages), one ``vmap``-ped step
per stage.  Box constraints are not supported (their prior does not factorise over nodes).
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
from ..priors import splittable
from ..tree import Tree, leaf_nodes, n_nodes
from . import cgm

__all__ = ["SMC_PROPOSALS", "RESAMPLING", "SMCConfig", "SMCState", "SMCResult", "init", "stage", "run", "resample_indices"]

SMC_PROPOSALS = ("prior", "posterior")
RESAMPLING = ("multinomial", "systematic")


@dataclass(frozen=True)
class SMCConfig:
    """Static configuration.

    Attributes
    ----------
    max_depth, min_leaf_size : the tree prior's structure.
    num_particles : int >= 1.
    proposal : "prior" or "posterior" (one-step optimal).
    ess_threshold : resample when ``ESS / num_particles <= ess_threshold``; in [0, 1].
    resampling : "multinomial" or "systematic".
    """

    max_depth: int
    min_leaf_size: int = 1
    num_particles: int = 100
    proposal: str = "prior"
    ess_threshold: float = 0.1
    resampling: str = "multinomial"

    def __post_init__(self):
        check_options(self.num_particles, self.proposal, self.ess_threshold, self.resampling)

    @property
    def cgm(self) -> cgm.CGMConfig:
        return cgm.CGMConfig(self.max_depth, self.min_leaf_size)


def check_options(num_particles, proposal, ess_threshold, resampling, where: str = "") -> None:
    """Clear errors for the SMC options (before anything is compiled)."""
    if not isinstance(num_particles, (int, np.integer)) or isinstance(num_particles, bool) or num_particles < 1:
        raise ValueError(f"{where}num_particles must be an integer >= 1; got {num_particles!r}.")
    if proposal not in SMC_PROPOSALS:
        raise ValueError(f"{where}proposal must be one of {SMC_PROPOSALS} for SMC; got {proposal!r}.")
    if isinstance(ess_threshold, bool) or not isinstance(ess_threshold, (int, float, np.floating, np.integer)) \
            or not 0.0 <= float(ess_threshold) <= 1.0:
        raise ValueError(f"{where}ess_threshold must be a number in [0, 1]; got {ess_threshold!r}.")
    if resampling not in RESAMPLING:
        raise ValueError(f"{where}resampling must be one of {RESAMPLING}; got {resampling!r}.")


class SMCState(NamedTuple):
    """The particle system between stages.

    Attributes
    ----------
    particles : CGMState with a leading particle axis (P, ...): trees and their cached statistics.
    last : (P,) int32 heap index of each particle's last decided node (-1 at the start; ``N``
        once the particle is finished).
    log_weight : (P,) float32 unnormalised log weights.
    resample : () bool, resample before the next stage.
    stage : () int32 stages done.
    n_resampled : () int32 stages that started with a resampling.
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


def max_stages(max_depth: int) -> int:
    """Nodes that can be decided: every heap slot above ``max_depth``."""
    return n_nodes(max_depth - 1) if max_depth > 0 else 0


def init(data: TreeData, config: SMCConfig) -> SMCState:
    """Every particle at the stump, ``log w = log L(stump) - log P``."""
    P = config.num_particles
    stump = cgm.init(None, data, config.cgm)
    particles = jax.tree.map(lambda a: jnp.broadcast_to(a, (P,) + jnp.shape(a)), stump)
    log_w = jnp.full((P,), stump.log_lik - jnp.log(P), jnp.float32)
    zero = jnp.int32(0)
    return SMCState(particles, jnp.full((P,), -1, jnp.int32), log_w, jnp.asarray(False), zero, zero)


def _next_node(state: cgm.CGMState, last: Array, data: TreeData) -> tuple[Array, Array]:
    """The particle's next node to decide: its first splittable leaf after ``last``."""
    n = state.tree.is_split.shape[-1]
    queue = leaf_nodes(state.tree) & splittable(state.lo, state.hi, data.split_prob) & (jnp.arange(n) > last)
    return jnp.argmax(queue).astype(jnp.int32), jnp.any(queue)


def _rule_gains(state: cgm.CGMState, node: Array, data: TreeData, n_bins: int) -> tuple[Array, Array]:
    """For every rule ``(f, c)`` at ``node`` (left: ``bins[:, f] <= c``), its split gain ``ΔL``
    and the rule prior's ``log p_rule`` (``-inf`` if invalid), both (F, n_bins).

    One scatter of the node's rows into per-feature bin histograms, then cumulative sums give
    the left statistics of every cut."""
    n, F = data.bins.shape
    rows = jnp.where((state.leaf_id == node)[:, None], data.point_stats, 0.0)  # (n, S)
    slot = data.bins + jnp.arange(F, dtype=data.bins.dtype) * n_bins  # (n, F) feature-major
    hist = jax.ops.segment_sum(
        jnp.broadcast_to(rows[:, None, :], (n, F, rows.shape[1])).reshape(n * F, -1), slot.reshape(-1),
        num_segments=F * n_bins,
    ).reshape(F, n_bins, -1)
    left = jnp.cumsum(hist, axis=1)
    gain = data.likelihood.split_gain(state.stats, leaf_nodes(state.tree), node, left)
    lo, hi = state.lo[node], state.hi[node]
    width = jnp.maximum(hi - lo, 0)
    n_valid = jnp.sum(width > 0)
    cut = jnp.arange(n_bins)
    valid = (cut[None, :] >= lo[:, None]) & (cut[None, :] < hi[:, None])
    log_rule = -jnp.log(jnp.maximum(n_valid, 1)) - jnp.log(jnp.maximum(width, 1))[:, None]
    return gain, jnp.where(valid, log_rule, -jnp.inf)


def _advance(uniforms: Array, state: cgm.CGMState, last: Array, data: TreeData, config: SMCConfig, n_bins: int):
    """Decide one particle's next node.  uniforms: (3,).  Returns (state, last, log increment)."""
    node, has = _next_node(state, last, data)
    p = data.split_prob[node]
    if config.proposal == "prior":
        split = has & (uniforms[0] < p)
        feature, cut = cgm._draw_rule(uniforms[1], uniforms[2], state.lo[node], state.hi[node])
        grown = cgm._propose_grow(state, node, feature, cut, data, config.cgm)
        increment = jnp.where(split, grown.log_lik - state.log_lik, 0.0)
    else:
        gain, log_rule = _rule_gains(state, node, data, n_bins)
        log_mass = jnp.concatenate([jnp.log1p(-p)[None], (jnp.log(p) + log_rule + gain).reshape(-1)])
        log_total = jax.nn.logsumexp(log_mass)
        cdf = jnp.cumsum(jnp.exp(log_mass - log_total))
        choice = jnp.minimum(jnp.sum(uniforms[0] * cdf[-1] >= cdf), log_mass.shape[0] - 1)
        split = has & (choice > 0)
        feature = ((choice - 1) // n_bins).astype(jnp.int32)
        cut = ((choice - 1) % n_bins).astype(jnp.int32)
        grown = cgm._propose_grow(state, node, feature, cut, data, config.cgm)
        increment = jnp.where(has, log_total, 0.0)
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


def stage(key: PRNGKey, state: SMCState, data: TreeData, config: SMCConfig, n_bins: int = 0) -> SMCState:
    """One stage: resample if flagged, advance every particle by one node, reweight."""
    P = config.num_particles
    k_resample, k_move = jax.random.split(key)

    def do_resample(s: SMCState) -> SMCState:
        idx = resample_indices(jax.random.uniform(k_resample, (P,)), s.log_weight, config.resampling)
        log_z = jax.nn.logsumexp(s.log_weight)
        particles = jax.tree.map(lambda a: a[idx], s.particles)
        return s._replace(particles=particles, last=s.last[idx], log_weight=jnp.full((P,), log_z - jnp.log(P)),
                          n_resampled=s.n_resampled + 1)

    state = jax.lax.cond(state.resample, do_resample, lambda s: s, state)
    uniforms = jax.random.uniform(k_move, (P, 3))
    advance = functools.partial(_advance, config=config, n_bins=n_bins)
    particles, last, increment = jax.vmap(advance, in_axes=(0, 0, 0, None))(uniforms, state.particles, state.last, data)
    log_weight = state.log_weight + increment
    resample = jnp.asarray(True) if config.ess_threshold >= 1.0 else ess_fraction(log_weight) <= config.ess_threshold
    return SMCState(particles, last, log_weight, resample, state.stage + 1, state.n_resampled)


def run(key: PRNGKey, data: TreeData, config: SMCConfig, n_bins: int = 0) -> SMCResult:
    """A whole SMC run (stages until every particle is finished).  ``n_bins`` (static): bins per
    feature, i.e. the largest bin code + 1 -- needed by the ``"posterior"`` proposal."""
    if config.proposal == "posterior" and n_bins < 1:
        raise ValueError("the 'posterior' proposal needs n_bins (the largest bin code + 1).")
    S = max_stages(config.max_depth)
    n = n_nodes(config.max_depth)

    def cond(carry):
        state, _ = carry
        return (state.stage < S) & jnp.any(state.last < n)

    def body(carry):
        state, ess = carry
        state = stage(jax.random.fold_in(key, state.stage), state, data, config, n_bins)
        return state, ess.at[state.stage - 1].set(ess_fraction(state.log_weight))

    state, ess = jax.lax.while_loop(cond, body, (init(data, config), jnp.full((max(S, 1),), jnp.nan, jnp.float32)))
    p = state.particles
    return SMCResult(p.tree, state.log_weight, p.log_lik, p.log_prior, jax.nn.logsumexp(state.log_weight),
                     state.stage, state.n_resampled, ess)


@functools.lru_cache(maxsize=32)
def compiled_run(config: SMCConfig, n_bins: int):
    """``jit(run)`` for a configuration, cached so equal configurations share the executable."""
    return jax.jit(functools.partial(run, config=config, n_bins=n_bins))
