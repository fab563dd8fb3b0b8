"""RJHMC-Tree (Cochrane, Wills & Johnson 2023): HMC-DF and HMC-DFI on padded soft trees.

One iteration (``docs/theory/rjhmc.md``, :func:`step`), from topology ``T`` and parameters ``x``, in
stages that are module-level functions of the static config (each draws from its own sub-keys of one
``split`` of the iteration's key, :func:`_step_keys`):

0. :func:`~bdtree_jax.kernels.rjhmc_model.refresh_padding`: inactive padded parameters
   (thresholds, features/weights of slots that do not split; leaf parameters of slots that are
   not leaves) are redrawn from their prior — an exact Gibbs step, since they do not enter the
   likelihood; they are the auxiliary variables of the jumps;
1. :func:`~bdtree_jax.kernels.rjhmc_jump.propose_move`: choose grow / prune / change / stay
   (warm-up and sampling move probabilities differ) and the node;
2. :func:`~bdtree_jax.kernels.rjhmc_legs.hmc_leg` at ``T``: ``x -> x'``;
3. :func:`~bdtree_jax.kernels.rjhmc_jump.propose_jump` ``T -> T'``: flip the node.  Regression's
   leaf means, ``leaf_proposal="conditional"`` (default): those of the node and its children are
   drawn from their Gaussian full conditional under ``T'`` (both proposal densities enter the
   ratio); ``"prior"`` (the paper's): the left child inherits the grown leaf's mean (slots ``l``
   and ``2l+1`` swap, Jacobian 1), the right child takes its padded value.  A grown node's rule is
   its padded prior draw, or for regression with ``split_proposal="conditional"`` (default) a draw
   from cuts scored on the node's rows (:mod:`bdtree_jax.kernels.rjhmc_split`; a prune then
   redraws the rule from the prior, and both densities enter the ratio);
4. :func:`~bdtree_jax.kernels.rjhmc_legs.hmc_leg` at ``T'``: ``x* -> x''``;
5. :func:`~bdtree_jax.kernels.rjhmc_jump.accept` ``(T', x'')`` or return to ``(T, x)``.  After
   warm-up the double-sided acceptance ``min{1, pi(T', x*) / pi(T, x') Q}`` (the HMC legs cancel;
   Q includes ``q_T / q_T'`` of the conditional leaf means), during warm-up the paper's biased
   ``min{1, pi(T', x'') / pi(T, x) Q}``.
   Densities are evaluated at ``h_final``.

HMC-DF's split features are updated inside every leg by a Metropolis-within-Gibbs sweep in random
order (:func:`feature_sweep`); a leg is the palindrome ``G (N G)^k`` of sweeps
``G`` and NUTS transitions ``N``, hence reversible, which is what the double-sided acceptance needs.

Schedules
---------
``"fast"`` (default): one global NUTS adaptation (step size by dual averaging, diagonal mass
matrix, NumPyro's windows) runs along the ``2 * leg_steps * num_warmup`` NUTS transitions of the
warm-up iterations, with ``h`` annealed from ``h_init`` to ``h_final`` along the windows
(:func:`bdtree_jax.soft.annealed_h`); afterwards every leg is ``leg_steps`` NUTS transitions with
the frozen step size and mass matrix — a fixed invariant kernel, so the acceptance is exact.
``"paper"``: every leg re-adapts NUTS for ``leg_warmup`` (500) steps with the paper's ``h``
schedule and keeps the last draw, as the reference code does (~250x the work per iteration; the
legs are then not fixed kernels, so the acceptance is the paper's approximation).

The models are :func:`bdtree_jax.soft_models.classification_model` / ``regression_model``
(evaluated on the padded parameters by :mod:`bdtree_jax.kernels.rjhmc_model`); everything is padded
to ``max_depth``, so one compiled step serves every topology.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .. import soft_models
from ..soft import leaf_mask, n_split_slots, stump
from ..tree import node_depths
from .base import SamplingAlgorithm
from .rjhmc_jump import Point, accept, propose_jump, propose_move
from .rjhmc_legs import hmc_leg, initial_adaptation
from .rjhmc_model import constrained, has_feature, layout, log_terms, potential_fn, prototype, refresh_padding
from .rjhmc_moves import TopologyProposal, feature_sweep, propose_topology
from .._validate import check_one_of, is_int

__all__ = ["RJHMCConfig", "RJHMCState", "init", "step", "trace", "rjhmc", "TopologyProposal", "propose_topology",
           "feature_sweep"]

SCHEDULES = ("fast", "paper")
LEAF_PROPOSALS = ("conditional", "prior")
SPLIT_PROPOSALS = ("conditional", "prior")


@dataclass(frozen=True)
class RJHMCConfig:
    """Static configuration of RJHMC-Tree (hashable; part of the compiled program).

    task : "classification" or "regression"; kind : "df" or "dfi".
    max_depth : padded depth; alpha, beta : topology prior.
    h_init, h_final : split sharpness annealed during warm-up (h_final <= h_init).
    schedule : "fast" or "paper" (module docstring).
    num_warmup : RJ warm-up iterations (biased acceptance, warm-up move probabilities, adaptation).
    warmup_move_probs, move_probs : (grow, prune, stay), or (grow, prune, change, stay), in warm-up /
        sampling.  A change (regression, ``split_proposal="conditional"``) redraws the rule of a
        node whose children are leaves, root included, from the scored cuts, and the leaf means
        of the node's children from their conditional.
    leg_steps : NUTS transitions per leg ("fast"); leg_warmup : NUTS warm-up per leg ("paper").
    max_tree_depth, target_accept_prob : NUTS settings.
    leaf_proposal : regression's leaf means at a grow or prune (``docs/theory/rjhmc.md``):
        "conditional" draws the leaf means of the node and its two children from their Gaussian
        full conditional under the proposed topology (the ratio carries both proposal densities);
        "prior" keeps the paper's jump (the left child inherits the grown leaf's mean, the right
        child takes its padded prior draw).  Classification has no leaf parameters to propose.
    split_proposal : regression's rule of a grown node: "conditional" draws it from a mixture of
        the prior and cuts scored by the node's rows (:mod:`bdtree_jax.kernels.rjhmc_split`), a
        prune redraws the removed rule from the prior, and both densities enter the ratio;
        "prior" keeps the paper's jump (the rule is the slot's padded prior draw).
    n_classes, concentration, keep_constant : classification likelihood.
    mu_mean, mu_scale, sigma_shape, sigma_scale : regression priors.
    """

    task: str
    kind: str = "df"
    max_depth: int = 5
    alpha: float = 0.95
    beta: float = 1.0
    h_init: float = 0.025
    h_final: float = 0.025
    schedule: str = "fast"
    num_warmup: int = 200
    warmup_move_probs: tuple = (0.5, 0.25, 0.25)
    move_probs: tuple = (0.2, 0.2, 0.6)
    leg_steps: int = 4
    leg_warmup: int = 500
    max_tree_depth: int = 10
    target_accept_prob: float = 0.8
    leaf_proposal: str = "conditional"
    split_proposal: str = "conditional"
    n_classes: int = 2
    concentration: float = 1.0
    keep_constant: bool = True
    mu_mean: float = 0.0
    mu_scale: float = 1.0
    sigma_shape: float = 1.5
    sigma_scale: float = 1.5

    def __post_init__(self):
        where = "RJHMCConfig: "
        if self.task not in ("classification", "regression"):
            raise ValueError(f"{where}task must be 'classification' or 'regression'; got {self.task!r}.")
        check_one_of(f"{where}kind", self.kind, soft_models.KINDS)
        check_one_of(f"{where}schedule", self.schedule, SCHEDULES)
        check_one_of(f"{where}leaf_proposal", self.leaf_proposal, LEAF_PROPOSALS)
        check_one_of(f"{where}split_proposal", self.split_proposal, SPLIT_PROPOSALS)
        if not is_int(self.max_depth) or not 1 <= self.max_depth <= 10:
            raise ValueError(f"{where}max_depth must be an integer in [1, 10]; got {self.max_depth!r}.")
        for name in ("h_init", "h_final"):
            v = getattr(self, name)
            if not (is_number(v) and np.isfinite(v) and v > 0):
                raise ValueError(f"{where}{name} must be a finite number > 0; got {v!r}.")
        if self.h_final > self.h_init:
            raise ValueError(
                f"{where}h_final ({self.h_final}) must be <= h_init ({self.h_init}): h is annealed downwards."
            )
        for name in ("warmup_move_probs", "move_probs"):
            p = np.asarray(getattr(self, name), float)
            if p.shape not in ((3,), (4,)) or np.any(~np.isfinite(p)) or np.any(p < 0) or abs(p.sum() - 1) > 1e-6:
                raise ValueError(
                    f"{where}{name} must be three probabilities (grow, prune, stay) or four (grow, prune, "
                    f"change, stay) >= 0 summing to 1; got {getattr(self, name)!r}."
                )
            if p[0] + p[1] > 0 and (p[0] == 0 or p[1] == 0):
                raise ValueError(f"{where}{name}: grow and prune must both be > 0 (or both 0); got {tuple(p)}.")
            if p.shape == (4,) and p[2] > 0 and not (self.task == "regression" and self.split_proposal == "conditional"):
                raise ValueError(
                    f"{where}{name}: a change move (the third of four) needs task='regression' and "
                    f"split_proposal='conditional'; got {getattr(self, name)!r}."
                )
        for name, lo in (("num_warmup", 0), ("leg_steps", 1), ("leg_warmup", 20), ("max_tree_depth", 1)):
            v = getattr(self, name)
            if not is_int(v) or v < lo:
                raise ValueError(f"{where}{name} must be an integer >= {lo}; got {v!r}.")
        if not 0 < self.target_accept_prob < 1:
            raise ValueError(f"{where}target_accept_prob must be in (0, 1); got {self.target_accept_prob!r}.")

    # -- model -------------------------------------------------------------------------------
    @property
    def model(self):
        """The NumPyro model ``model(X, y, h=...)``."""
        common = dict(max_depth=self.max_depth, kind=self.kind, alpha=self.alpha, beta=self.beta)
        if self.task == "classification":
            return functools.partial(
                soft_models.classification_model, n_classes=self.n_classes, concentration=self.concentration,
                keep_constant=self.keep_constant, **common,
            )
        return functools.partial(
            soft_models.regression_model, mu_mean=self.mu_mean, mu_scale=self.mu_scale,
            sigma_shape=self.sigma_shape, sigma_scale=self.sigma_scale, **common,
        )

    @property
    def leaf_sites(self) -> tuple:
        return ("leaf_mean",) if self.task == "regression" else ()

    @property
    def num_adapt_steps(self) -> int:
        """NUTS transitions of the global adaptation ("fast")."""
        return 2 * self.leg_steps * self.num_warmup

    @property
    def conditional_leaves(self) -> bool:
        """A jump draws the leaf means of its block from their full conditional."""
        return self.task == "regression" and self.leaf_proposal == "conditional"

    @property
    def conditional_splits(self) -> bool:
        """A jump draws a grown or changed node's rule from the scored cuts."""
        return self.task == "regression" and self.split_proposal == "conditional"

    @property
    def has_change(self) -> bool:
        """Some change move has a probability > 0 (in warm-up or after it)."""
        return any(len(p) == 4 and p[2] > 0 for p in (self.warmup_move_probs, self.move_probs))


class RJHMCState(NamedTuple):
    """State of one chain.

    iteration : () int32 RJ iterations done.
    is_split : (N,) bool topology.  feature : (M,) int32 split features (HMC-DF; zeros for DFI).
    z : (P,) float32 unconstrained continuous parameters (all padded slots), raveled.
    adapt : NumPyro ``HMCAdaptState`` of the global adaptation ("fast").
    nuts_t : () int32 NUTS transitions done (drives adaptation and the h schedule).
    log_lik, log_prior : () float32 at h_final for the current state (log_lik untempered).
    beta : () float32 inverse temperature: the chain targets ``p(T, x) p(y | T, x)**beta``
        (1 unless run by :func:`~bdtree_jax.kernels.tempering.tempered`).
    """

    iteration: Any
    is_split: Any
    feature: Any
    z: Any
    adapt: Any
    nuts_t: Any
    log_lik: Any
    log_prior: Any
    beta: Any = 1.0


class _StepKeys(NamedTuple):
    """The sub-keys of one iteration, each consumed by one stage only: :func:`refresh_padding`
    (``refresh``), :func:`propose_move` (``move``, ``topology``, ``change``), the two
    :func:`hmc_leg` (``leg1``, ``leg2``), :func:`propose_jump` (``rule``, ``leaf``),
    :func:`accept` (``accept``)."""

    refresh: Any
    move: Any
    topology: Any
    leg1: Any
    leg2: Any
    accept: Any
    change: Any
    rule: Any
    leaf: Any


def is_number(v) -> bool:
    """Whether ``v`` is a real Python or NumPy number (not a bool)."""
    return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool)


def _step_keys(key) -> _StepKeys:
    """One ``split`` of the iteration's key into the named sub-keys of :class:`_StepKeys`.  With
    partitionable threefry ``split(key, 9)[:6] == split(key, 6)``, so the first six (all that
    classification and the paper's jump use) are the keys of earlier versions."""
    return _StepKeys(*jax.random.split(key, len(_StepKeys._fields)))


class _InitKeys(NamedTuple):
    """The sub-keys of :func:`init`: the prototype's draws (the starting continuous parameters),
    the starting features, the refresh of the padded parameters, the step-size heuristic."""

    prototype: Any
    feature: Any
    refresh: Any
    step_size: Any


def _move_probs(config: RJHMCConfig):
    """(2, 4) float32: (grow, prune, change, stay) in warm-up (row 0) and after it (row 1)."""
    four = [tuple(p) if len(p) == 4 else (p[0], p[1], 0.0, p[2]) for p in (config.warmup_move_probs, config.move_probs)]
    return np.array(four, np.float32)


def init(key, data, config: RJHMCConfig) -> RJHMCState:
    """A chain at the stump: continuous parameters drawn from the model (the padded ones refreshed),
    HMC-DF's features uniform, the global adaptation started at them."""
    keys = _InitKeys(*jax.random.split(key, len(_InitKeys._fields)))
    lay, z = prototype(keys.prototype, data, config)
    is_split = stump(config.max_depth)
    M = n_split_slots(config.max_depth)
    if has_feature(data, config):
        feature = jax.random.randint(keys.feature, (M,), 0, data["X"].shape[1])
    else:
        feature = jnp.zeros(M, jnp.int32)
    z = refresh_padding(keys.refresh, data, config, lay, z, is_split, feature)
    pe_fn = potential_fn(data, config, lay, is_split, feature, config.h_init, 1.0)
    adapt = initial_adaptation(keys.step_size, config, pe_fn, z)
    log_lik, log_prior = log_terms(data, config, lay, z, is_split, feature)
    return RJHMCState(jnp.int32(0), is_split, feature, z, adapt, jnp.int32(0), log_lik, log_prior, jnp.float32(1.0))


def step(key, state: RJHMCState, data, config: RJHMCConfig) -> tuple[RJHMCState, dict]:
    """One RJHMC iteration (module docstring): refresh, move, leg at ``T``, jump, leg at ``T'``,
    acceptance; each stage draws from its own sub-keys of :func:`_step_keys`.

    ``data = {"X": (n, F) float32 in [0, 1], "y": (n,)}``.  Returns the new state and the info:
    ``accepted`` () bool, ``move`` () int8 (index in :data:`~bdtree_jax.kernels.rjhmc_jump.MOVES`),
    ``log_alpha`` () float32 (<= 0), ``nuts_accept`` () the legs' mean NUTS acceptance,
    ``nuts_grads`` () int32 and ``diverging`` () int32 summed over both legs, ``params`` each
    site's constrained values at the new state."""
    lay = layout(data, config)
    keys = _step_keys(key)
    warm = state.iteration < config.num_warmup
    probs = _move_probs(config)
    beta = state.beta
    is_split = state.is_split
    z0 = refresh_padding(keys.refresh, data, config, lay, state.z, is_split, state.feature)
    move = propose_move(keys.move, keys.topology, keys.change, is_split, jnp.where(warm, probs[0], probs[1]),
                        config.has_change)
    leg1 = hmc_leg(keys.leg1, data, config, lay, is_split, state.feature, z0, state.adapt, state.nuts_t, beta)
    before = Point(is_split, leg1.feature, leg1.z)
    after, log_q = propose_jump(keys.rule, keys.leaf, data, config, lay, move, before, beta)
    leg2 = hmc_leg(keys.leg2, data, config, lay, after.is_split, after.feature, after.z, leg1.adapt, leg1.t, beta)
    start, end = Point(is_split, state.feature, z0), Point(move.is_split, leg2.feature, leg2.z)
    accepted, log_alpha = accept(keys.accept, data, config, lay, warm, start, before, after, end, log_q, beta)

    is_split = jnp.where(accepted, end.is_split, start.is_split)
    feature = jnp.where(accepted, end.feature, start.feature)
    z = jnp.where(accepted, end.z, start.z)
    log_lik, log_prior = log_terms(data, config, lay, z, is_split, feature)
    new_state = RJHMCState(state.iteration + 1, is_split, feature, z, leg2.adapt, leg2.t, log_lik, log_prior, beta)
    info = dict(
        accepted=accepted, move=move.code, log_alpha=jnp.minimum(log_alpha, 0.0).astype(jnp.float32),
        nuts_accept=(leg1.accept_prob + leg2.accept_prob) / 2, nuts_grads=leg1.n_grads + leg2.n_grads,
        diverging=leg1.n_diverging + leg2.n_diverging, params=constrained(lay, z),
    )
    return new_state, info


def trace(state: RJHMCState, info: dict, config: RJHMCConfig) -> dict:
    """The arrays recorded per iteration (:class:`~bdtree_jax.kernels.base.SamplingAlgorithm`)."""
    leaves = leaf_mask(state.is_split)
    return dict(
        is_split=state.is_split,
        feature=state.feature.astype(jnp.int16),
        params=info["params"],
        log_lik=state.log_lik,
        log_prior=state.log_prior,
        n_leaves=leaves.sum().astype(jnp.int16),
        depth=jnp.max(jnp.where(leaves, jnp.asarray(node_depths(config.max_depth)), 0)).astype(jnp.int8),
        accepted=info["accepted"],
        move=info["move"],
        log_alpha=info["log_alpha"],
        step_size=state.adapt.step_size.astype(jnp.float32),
        nuts_accept=info["nuts_accept"].astype(jnp.float32),
        nuts_grads=info["nuts_grads"].astype(jnp.int32),
        diverging=info["diverging"].astype(jnp.int16),
    )


@functools.lru_cache(maxsize=32)
def rjhmc(config: RJHMCConfig) -> SamplingAlgorithm:
    """The RJHMC-Tree kernel (:func:`init`, :func:`step`, :func:`trace` bound to ``config``).
    ``data = {"X": (n, F) float32 in [0, 1], "y": (n,)}``."""
    return SamplingAlgorithm(
        init=functools.partial(init, config=config),
        step=functools.partial(step, config=config),
        trace=functools.partial(trace, config=config),
    )
