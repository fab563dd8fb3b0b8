"""Particle Gibbs for a single tree (Lakshminarayanan, Roy & Teh 2015; Andrieu, Doucet &
Holenstein 2010), vectorized over particles.

Derivation: ``docs/theory/smc-pg.md``.  One step is a *conditional* top-down SMC sweep
(:mod:`bdtree_jax.kernels.smc`) on the same CGM98 prior as every hard-split sampler, with the
chain's current tree ``T*`` as the reference particle:

* All ``P`` particles start at the stump, ``log w = beta log L(stump) - log P``.
* Every stage starts by resampling: slot 0 keeps the reference lineage, slots ``1..P-1`` take
  ``P - 1`` ancestors drawn multinomially from the normalised weights of **all** ``P`` particles
  (the reference included -- a kernel that leaves it out is not invariant; tested), and every
  weight is reset to ``log Z_t - log P``.
* Every particle decides its next splittable node in breadth-first order (one ``vmap``-ped grow
  step).  Slot 0 replays ``T*``: node-wise breadth-first growth visits ``T*``'s splittable nodes in
  increasing heap index, so the forced decision at the popped node is simply ``T*``'s (split or
  not, and the rule) -- no stored history.  Its increment is computed by the same
  code as the free particles'.  Copies of the reference in other slots are free particles.
* After the last stage the new tree is drawn from the final normalised weights of all ``P``
  particles (slot 0 returns ``T*``).

The sweep leaves ``p(T) L(T)^beta`` invariant for any ``P >= 1`` (``P = 1`` always returns
``T*``) and either proposal: ``"prior"`` (increment ``beta ΔL``) or the one-step-optimal
``"posterior"`` (increment ``log`` of the node's total proposal mass with the gains tempered by
``beta``).  ``beta`` comes from the state, so the kernel composes with
:func:`~bdtree_jax.kernels.tempering.tempered`.  Box constraints are not supported (their prior
does not factorise over nodes).

The state is :class:`~bdtree_jax.kernels.cgm.CGMState`, so chains start at the stump, run
through the driver (:func:`bdtree_jax.driver.run_chains`: blocks, sharding, checkpoints) and
record the same trace as CGM plus ``chosen`` (the particle returned; 0 = the reference) and
``n_stages`` per sweep.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import NamedTuple

import jax
import jax.numpy as jnp

from .._types import Array, PRNGKey
from ..data import TreeData
from ..tree import n_nodes
from . import cgm, smc
from .base import SamplingAlgorithm

__all__ = ["PGConfig", "PGInfo", "init", "step", "trace", "particle_gibbs"]


@dataclass(frozen=True)
class PGConfig:
    """Static configuration.

    Attributes
    ----------
    max_depth, min_leaf_size : the tree prior's structure.
    num_particles : int >= 1 (the reference included).
    proposal : "prior" or "posterior" (one-step optimal).
    n_bins : bins per feature (the largest bin code + 1); needed by the "posterior" proposal.
    trace_dtypes : integer types of the recorded trees' ``feature`` and ``cut``.
    include_reference : draw the free particles' ancestors from all particles including the
        reference (correct).  ``False`` leaves the reference out of the ancestor pool, as
        pymc-bart does; the kernel is then **not** invariant -- only for the negative-control test.
    """

    max_depth: int
    min_leaf_size: int = 1
    num_particles: int = 10
    proposal: str = "prior"
    n_bins: int = 0
    trace_dtypes: tuple = ("int32", "int32")
    include_reference: bool = True

    def __post_init__(self):
        smc.check_options(self.num_particles, self.proposal, 1.0, "multinomial")
        if self.proposal == "posterior" and self.n_bins < 1:
            raise ValueError("the 'posterior' proposal needs n_bins (the largest bin code + 1).")

    @property
    def smc(self) -> smc.SMCConfig:
        return smc.SMCConfig(self.max_depth, self.min_leaf_size, self.num_particles, self.proposal, 1.0)

    @property
    def cgm(self) -> cgm.CGMConfig:
        return cgm.CGMConfig(self.max_depth, self.min_leaf_size, trace_dtypes=self.trace_dtypes)


class PGInfo(NamedTuple):
    """Per-sweep diagnostics: ``accepted`` () bool (the returned tree differs from the
    reference), ``move`` () int32 (always 0: one sweep), ``chosen`` () int32 particle returned
    (0 = the reference), ``n_stages`` () int32 stages of the sweep, ``log_evidence`` () the
    sweep's ``log Z`` estimate (conditional on the reference; a diagnostic, not an estimator of
    the evidence)."""

    accepted: Array
    move: Array
    chosen: Array
    n_stages: Array
    log_evidence: Array


def init(key: PRNGKey | None, data: TreeData, config: PGConfig, tree=None, beta=1.0) -> cgm.CGMState:
    """Initial state at ``tree`` (default: the stump), as CGM (with categorical features or
    missing values, a tree with their rule fields: :func:`bdtree_jax.kernels.smc.init_state`)."""
    del key
    return smc.init_state(data, config.cgm, tree=tree, beta=beta)


def _same_tree(a, b) -> Array:
    """The two trees have the same splits and rules, every rule field (inactive slots ignored)."""
    same_rule = (a.feature == b.feature) & (a.cut == b.cut)
    if a.nan_left is not None:
        same_rule = same_rule & (a.nan_left == b.nan_left)
    if a.levels_left is not None:
        same_rule = same_rule & jnp.all(a.levels_left == b.levels_left, axis=-1)
    return jnp.all(a.is_split == b.is_split) & jnp.all(same_rule | ~a.is_split)


def step(key: PRNGKey, state: cgm.CGMState, data: TreeData, config: PGConfig) -> tuple[cgm.CGMState, PGInfo]:
    """One conditional-SMC sweep with ``state.tree`` as the reference (module docstring)."""
    from ..priors import check_cgm_structure

    check_cgm_structure(data.split_prob, "Particle Gibbs (method='pg')")
    P = config.num_particles
    S = smc.max_stages(config.max_depth)
    n = n_nodes(config.max_depth)
    stump = smc.init_state(data, config.cgm, beta=state.beta)
    particles = jax.tree.map(lambda a: jnp.broadcast_to(a, (P,) + jnp.shape(a)), stump)
    log_w = jnp.full((P,), state.beta * stump.log_lik - jnp.log(P), jnp.float32)
    last = jnp.full((P,), -1, jnp.int32)
    is_reference = jnp.arange(P) == 0

    def advance(uniforms, particle, last, data, is_reference, key):
        return smc._advance(uniforms, particle, last, data, config.smc, config.n_bins, state.tree, is_reference, key)

    def cond(carry):
        _, last, _, t = carry
        return (t < S) & jnp.any(last < n)

    def body(carry):
        particles, last, log_w, t = carry
        # split(., 3)[:2] == split(., 2): numeric data draw what they always did
        k_resample, k_move, k_general = jax.random.split(jax.random.fold_in(key, t), 3)
        # Conditional multinomial resampling (a no-op in law at t = 0: identical particles).
        pool = log_w if config.include_reference else log_w.at[0].set(-jnp.inf)
        if P > 1:
            ancestors = jax.random.categorical(k_resample, pool, shape=(P - 1,)).astype(jnp.int32)
            idx = jnp.concatenate([jnp.zeros((1,), jnp.int32), ancestors])
        else:
            idx = jnp.zeros((1,), jnp.int32)
        particles = jax.tree.map(lambda a: a[idx], particles)
        last = last[idx]
        log_w = jnp.full((P,), jax.nn.logsumexp(log_w) - jnp.log(P), jnp.float32)
        uniforms, keys = smc.move_draws(k_move, P, data, k_general)
        particles, last, increment = jax.vmap(advance, in_axes=(0, 0, 0, None, 0, 0))(
            uniforms, particles, last, data, is_reference, keys
        )
        return particles, smc.mark_finished(particles, last, data), log_w + increment, t + 1

    particles, last, log_w, t = jax.lax.while_loop(cond, body, (particles, last, log_w, jnp.int32(0)))
    k_choice = jax.random.fold_in(key, 2**31 - 1)  # not a stage key (stages < 2**31 - 1)
    chosen = jax.random.categorical(k_choice, log_w).astype(jnp.int32)
    new = jax.tree.map(lambda a: a[chosen], particles)
    info = PGInfo(~_same_tree(new.tree, state.tree), jnp.int32(0), chosen, t, jax.nn.logsumexp(log_w))
    return new, info


def trace(state: cgm.CGMState, info: PGInfo, trace_dtypes=("int32", "int32")) -> dict:
    """CGM's per-iteration record plus ``chosen`` and ``n_stages``."""
    out = cgm.trace(state, info, trace_dtypes)
    out["chosen"] = info.chosen
    out["n_stages"] = info.n_stages
    return out


@functools.lru_cache(maxsize=64)
def particle_gibbs(config: PGConfig) -> SamplingAlgorithm:
    """Particle Gibbs as a :class:`SamplingAlgorithm` (chains start at the stump); cached per
    configuration so equal configurations share compiled programs in the driver."""

    def init_fn(key, data):
        return init(key, data, config)

    def step_fn(key, state, data):
        return step(key, state, data, config)

    def trace_fn(state, info):
        return trace(state, info, config.trace_dtypes)

    return SamplingAlgorithm(init_fn, step_fn, trace_fn)

