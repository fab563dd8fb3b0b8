"""RJHMC-Tree (Cochrane, Wills & Johnson 2023): HMC-DF and HMC-DFI on padded soft trees.

One iteration (``docs/theory/rjhmc.md``), from topology ``T`` and parameters ``x``:

0. inactive padded parameters (thresholds, features/weights of slots that do not split; leaf
   parameters of slots that are not leaves) are redrawn from their prior — an exact Gibbs step,
   since they do not enter the likelihood; they are the auxiliary variables of the jumps;
1. choose grow / prune / stay (warm-up and sampling move probabilities differ) and the node;
2. HMC leg at ``T``: ``x -> x'``;
3. jump ``T -> T'``: flip the node.  Regression's leaf means, ``leaf_proposal="conditional"``
   (default): those of the node and its children are drawn from their Gaussian full conditional
   under ``T'`` (both proposal densities enter the ratio); ``"prior"`` (the paper's): the left child
   inherits the grown leaf's mean (slots ``l`` and ``2l+1`` swap, Jacobian 1), the right child
   takes its padded value.  A grown node's rule is its padded prior draw, or for regression with
   ``split_proposal="conditional"`` (default) a draw from cuts scored on the node's rows
   (:mod:`bdtree_jax.kernels.rjhmc_split`; a prune then redraws the rule from the prior, and
   both densities enter the ratio);
4. HMC leg at ``T'``: ``x* -> x''``;
5. accept ``(T', x'')`` or return to ``(T, x)``.  After warm-up the double-sided acceptance
   ``min{1, pi(T', x*) / pi(T, x') Q}`` (the HMC legs cancel; Q includes ``q_T / q_T'`` of the
   conditional leaf means), during warm-up the paper's biased ``min{1, pi(T', x'') / pi(T, x) Q}``.
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

The models are :func:`bdtree_jax.soft_models.classification_model` / ``regression_model``; everything
is padded to ``max_depth``, so one compiled step serves every topology.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree
from numpyro.distributions.transforms import biject_to
from numpyro.handlers import seed, substitute, trace
from numpyro.infer.gibbs import GIBBS_SITES_KWARG, conditioned, prototype_trace
from numpyro.infer.hmc import momentum_generator
from numpyro.infer.hmc_util import (
    IntegratorState,
    build_tree,
    euclidean_kinetic_energy,
    find_reasonable_step_size,
    velocity_verlet,
    warmup_adapter,
)
from numpyro.infer.util import log_density, potential_energy
from numpyro.primitives import Messenger

from .. import soft_models
from ..soft import (
    annealed_h,
    annealing_window,
    leaf_mask,
    leaf_membership,
    n_split_slots,
    right_prob_df,
    right_prob_dfi,
    stump,
)
from ..tree import Tree, node_depths, nog_nodes
from . import rjhmc_split
from .base import SamplingAlgorithm
from .rjhmc_moves import TopologyProposal, feature_sweep, propose_topology

__all__ = ["RJHMCConfig", "RJHMCState", "rjhmc", "TopologyProposal", "propose_topology", "feature_sweep"]

SCHEDULES = ("fast", "paper")
LEAF_PROPOSALS = ("conditional", "prior")
SPLIT_PROPOSALS = ("conditional", "prior")
MOVES = ("grow", "prune", "stay", "change")


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
        if self.kind not in soft_models.KINDS:
            raise ValueError(f"{where}kind must be one of {soft_models.KINDS}; got {self.kind!r}.")
        if self.schedule not in SCHEDULES:
            raise ValueError(f"{where}schedule must be one of {SCHEDULES}; got {self.schedule!r}.")
        if self.leaf_proposal not in LEAF_PROPOSALS:
            raise ValueError(f"{where}leaf_proposal must be one of {LEAF_PROPOSALS}; got {self.leaf_proposal!r}.")
        if self.split_proposal not in SPLIT_PROPOSALS:
            raise ValueError(f"{where}split_proposal must be one of {SPLIT_PROPOSALS}; got {self.split_proposal!r}.")
        if not isinstance(self.max_depth, (int, np.integer)) or not 1 <= self.max_depth <= 10:
            raise ValueError(f"{where}max_depth must be an integer in [1, 10]; got {self.max_depth!r}.")
        for name in ("h_init", "h_final"):
            v = getattr(self, name)
            if not (np.isfinite(v) and v > 0):
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
            if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < lo:
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


# ----------------------------------------------------------------------------------------------
# Topology moves, shared with the NumPyro block :class:`bdtree_jax.numpyro.TopologyMH`


class _temper(Messenger):
    """Scale the log density of the likelihood's observed sites by ``beta`` (tempering)."""

    def __init__(self, fn, beta):
        self.beta = beta
        super().__init__(fn)

    def process_message(self, msg):
        if msg["type"] == "sample" and msg["is_observed"] and msg["name"] not in (TOPOLOGY, FEATURE):
            msg["scale"] = self.beta if msg["scale"] is None else msg["scale"] * self.beta


TOPOLOGY, FEATURE = "tree_topology", "tree_feature"
_SPLIT_SITES = ("tree_tau", "tree_weights")


def _log_jacobian(transforms, params):
    """Log |det| of the constraining transforms of the rule sites at the unconstrained ``params``
    (the rule proposal's densities are in constrained coordinates; the jump is in ``z``'s)."""
    return sum(
        jnp.sum(transforms[n].log_abs_det_jacobian(params[n], transforms[n](params[n])))
        for n in _SPLIT_SITES if n in params
    )


class _StepKeys(NamedTuple):
    """The sub-keys of one iteration (each consumed by one stage only)."""

    refresh: Any
    move: Any
    topology: Any
    leg1: Any
    leg2: Any
    accept: Any
    change: Any
    rule: Any
    leaf: Any


def _step_keys(key) -> _StepKeys:
    """One ``split`` of the iteration's key into the named sub-keys of :class:`_StepKeys`.  With
    partitionable threefry ``split(key, 9)[:6] == split(key, 6)``, so the first six (all that
    classification and the paper's jump use) are the keys of earlier versions."""
    return _StepKeys(*jax.random.split(key, len(_StepKeys._fields)))


def _four_moves(p) -> tuple:
    """(grow, prune, change, stay) from three (no change) or four move probabilities."""
    return tuple(p) if len(p) == 4 else (p[0], p[1], 0.0, p[2])


@functools.lru_cache(maxsize=32)
def rjhmc(config: RJHMCConfig) -> SamplingAlgorithm:
    """The RJHMC-Tree kernel.  ``data = {"X": (n, F) float32 in [0, 1], "y": (n,)}``."""
    model = conditioned(config.model)
    h_final = float(config.h_final)
    M = n_split_slots(config.max_depth)
    probs = np.array([_four_moves(config.warmup_move_probs), _four_moves(config.move_probs)], np.float32)
    has_change = bool(np.any(probs[:, 2] > 0))

    # -- layout of the continuous parameters (resolved at trace time from a prototype trace) ----
    def layout(data, key=None):
        key = jax.random.key(0) if key is None else key
        kwargs = {"h": h_final, GIBBS_SITES_KWARG: {TOPOLOGY: stump(config.max_depth)}}
        tr = prototype_trace(model, key, (data["X"], data["y"]), kwargs)
        names = [n for n, s in tr.items() if s["type"] == "sample" and not s["is_observed"] and n != FEATURE]
        transforms = {n: biject_to(tr[n]["fn"].support) for n in names}
        unconstrained = {n: transforms[n].inv(tr[n]["value"]) for n in names}
        flat, unravel = ravel_pytree(unconstrained)
        feature = tr[FEATURE]["value"].astype(jnp.int32) if FEATURE in tr else jnp.zeros(M, jnp.int32)
        return names, transforms, flat, unravel, feature

    def has_feature(data) -> bool:
        """Whether the model has a discrete feature site (HMC-DF, or a single input)."""
        return config.kind == "df" or data["X"].shape[1] == 1

    def conditioning(data, is_split, feature) -> dict:
        """The Gibbs sites every model evaluation is conditioned on."""
        return {TOPOLOGY: is_split, **({FEATURE: feature} if has_feature(data) else {})}

    def make_pe(data, unravel, is_split, feature, h, beta):
        args = (data["X"], data["y"])
        kwargs = {"h": h, GIBBS_SITES_KWARG: conditioning(data, is_split, feature)}
        tempered = _temper(model, beta)

        def pe(z):
            return potential_energy(tempered, args, kwargs, unravel(z))

        return pe

    def log_terms(data, unravel, transforms, z, is_split, feature):
        params = {n: transforms[n](v) for n, v in unravel(z).items()}
        kwargs = {"h": h_final, GIBBS_SITES_KWARG: conditioning(data, is_split, feature)}
        _, tr = log_density(model, (data["X"], data["y"]), kwargs, params)
        log_lik = sum(
            jnp.sum(s["fn"].log_prob(s["value"])) for n, s in tr.items()
            if s["type"] == "sample" and s["is_observed"] and n not in (TOPOLOGY, FEATURE)
        )
        log_prior = jnp.sum(tr[TOPOLOGY]["fn"].log_prob(tr[TOPOLOGY]["value"]))
        return jnp.asarray(log_lik, jnp.float32), jnp.asarray(log_prior, jnp.float32)

    # -- adaptation -----------------------------------------------------------------------------
    def adapter(num_steps, find_step=None):
        return warmup_adapter(
            num_steps, find_reasonable_step_size=find_step, adapt_step_size=True, adapt_mass_matrix=True,
            dense_mass=False, target_accept_prob=config.target_accept_prob,
        )

    def heuristic(pe_fn):
        return functools.partial(find_reasonable_step_size, pe_fn, euclidean_kinetic_energy, momentum_generator)

    # -- one NUTS transition ----------------------------------------------------------------------
    def nuts(key, z, pe_fn, adapt):
        k_mom, k_tree = jax.random.split(key)
        pe, grad = jax.value_and_grad(pe_fn)(z)
        r = momentum_generator(z, adapt.mass_matrix_sqrt, k_mom)
        vv_init, vv_update = velocity_verlet(pe_fn, euclidean_kinetic_energy)
        vv = vv_init(z, r, potential_energy=pe, z_grad=grad)
        tree = build_tree(
            vv_update, euclidean_kinetic_energy, vv, adapt.inverse_mass_matrix, adapt.step_size, k_tree,
            max_tree_depth=config.max_tree_depth,
        )
        accept_prob = tree.sum_accept_probs / tree.num_proposals
        new = IntegratorState(tree.z_proposal, r, tree.z_proposal_pe, tree.z_proposal_grad)
        return new, accept_prob, tree.num_proposals, tree.diverging

    def leg(key, data, unravel, is_split, feature, z, adapt, t, beta, *, n_steps, num_adapt, window, wa_update):
        """``G (N G)^n_steps`` at topology ``is_split``; adapts while ``t < num_adapt``."""
        n_features = data["X"].shape[1]

        def h_at(t):
            return annealed_h(t, window, config.h_init, config.h_final) if num_adapt > 0 else h_final

        def gibbs(key, feature, z, h):
            if not has_feature(data) or n_features == 1:  # nothing to sweep
                return feature
            pe_of = lambda f: make_pe(data, unravel, is_split, f, h, beta)(z)  # noqa: E731
            feature, _ = feature_sweep(key, feature, is_split, n_features, pe_of, pe_of(feature))
            return feature

        keys = jax.random.split(key, n_steps + 1)
        feature = gibbs(keys[0], feature, z, h_at(t))

        def body(i, carry):
            feature, z, adapt, t, acc, steps, div = carry
            h = h_at(t)
            k_nuts, k_gibbs = jax.random.split(keys[i + 1])
            pe_fn = make_pe(data, unravel, is_split, feature, h, beta)
            new, accept_prob, n_grad, diverging = nuts(k_nuts, z, pe_fn, adapt)
            if num_adapt > 0:
                adapt = jax.lax.cond(
                    t < num_adapt, lambda a: wa_update(t, accept_prob, new, a), lambda a: a, adapt
                )
            feature = gibbs(k_gibbs, feature, new.z, h)
            return feature, new.z, adapt, t + 1, acc + accept_prob, steps + n_grad, div + diverging

        init = (feature, z, adapt, t, jnp.float32(0), jnp.int32(0), jnp.int32(0))
        feature, z, adapt, t, acc, steps, div = jax.lax.fori_loop(0, n_steps, body, init)
        return feature, z, adapt, t, (acc / n_steps, steps, div)

    # -- the two schedules ----------------------------------------------------------------------
    fast_window = annealing_window(config.num_adapt_steps) if config.num_adapt_steps > 0 else (0, 1)
    paper_window = annealing_window(config.leg_warmup)

    def run_leg(key, data, unravel, is_split, feature, z, adapt, t, beta):
        if config.schedule == "fast":
            _, wa_update = adapter(max(config.num_adapt_steps, 1))
            return leg(
                key, data, unravel, is_split, feature, z, adapt, t, beta, n_steps=config.leg_steps,
                num_adapt=config.num_adapt_steps, window=fast_window, wa_update=wa_update,
            )
        # paper: fresh adaptation for leg_warmup steps from step size 1 (NumPyro's NUTS defaults,
        # as the reference: no step-size heuristic), then one draw
        k_init, k_leg = jax.random.split(key)
        pe0 = make_pe(data, unravel, is_split, feature, config.h_init, beta)
        wa_init, wa_update = adapter(config.leg_warmup)
        pe, grad = jax.value_and_grad(pe0)(z)
        local = wa_init(IntegratorState(z, None, pe, grad), k_init, 1.0, mass_matrix_size=z.shape[0])
        feature, z, _, _, info = leg(
            k_leg, data, unravel, is_split, feature, z, local, jnp.int32(0), beta, n_steps=config.leg_warmup + 1,
            num_adapt=config.leg_warmup, window=paper_window, wa_update=wa_update,
        )
        return feature, z, adapt, t + config.leg_warmup + 1, info

    # -- refresh of the padded (inactive) parameters from their prior ---------------------------
    def refresh(key, data, names, transforms, unravel, z, is_split, feature):
        params = unravel(z)
        constrained = {n: transforms[n](v) for n, v in params.items()}
        k_trace, k_draw = jax.random.split(key)
        k_sites = jax.random.split(k_draw, len(names))  # == fold_in(k_draw, i) for site i
        tr = trace(seed(substitute(model, data=constrained), k_trace)).get_trace(
            data["X"], data["y"], h=h_final, **{GIBBS_SITES_KWARG: conditioning(data, is_split, feature)}
        )
        split_inactive = ~is_split[:M]
        leaf_inactive = ~leaf_mask(is_split)
        out = dict(params)
        for i, name in enumerate(names):
            if name in _SPLIT_SITES:
                inactive = split_inactive
            elif name in config.leaf_sites:
                inactive = leaf_inactive
            else:
                continue
            fresh = tr[name]["fn"].sample(k_sites[i])
            fresh_u = transforms[name].inv(fresh)
            mask = inactive.reshape(inactive.shape + (1,) * (fresh_u.ndim - 1)) & jnp.isfinite(fresh_u)
            out[name] = jnp.where(mask, fresh_u, params[name])
        return ravel_pytree(out)[0]

    def swap_leaf_sites(unravel, z, node):
        params = unravel(z)
        for name in config.leaf_sites:
            v = params[name]
            a, b = v[node], v[2 * node + 1]
            params[name] = v.at[node].set(b).at[2 * node + 1].set(a)
        return ravel_pytree(params)[0]

    # -- regression: the leaf means of a grown / pruned node drawn from their full conditional ----
    conditional_leaves = config.task == "regression" and config.leaf_proposal == "conditional"
    conditional_splits = config.task == "regression" and config.split_proposal == "conditional"

    def leaf_block_conditional(data, c, psi, is_split, block, beta):
        """Gaussian full conditional of ``leaf_mean[block]`` (3,) under topology ``is_split`` given
        every other parameter (constrained values ``c``; ``psi`` the splits' right probabilities at
        the rows) and the tempered likelihood: its mean (3,) and the Cholesky factor ``L`` (3, 3)
        of its precision.  Slots of the block that are not leaves of ``is_split`` get no
        likelihood term: their conditional is the prior."""
        phi = leaf_membership(is_split, psi)
        mu, noise_prec = c["leaf_mean"], beta / jnp.square(c["sigma"])
        P = phi[:, block]
        resid = data["y"] - phi @ mu + P @ mu[block]
        prior_prec = 1.0 / config.mu_scale**2
        prec = prior_prec * jnp.eye(3) + noise_prec * (P.T @ P)
        L = jnp.linalg.cholesky(prec)
        mean = jax.scipy.linalg.cho_solve((L, True), prior_prec * config.mu_mean + noise_prec * (P.T @ resid))
        return mean, L

    def gaussian_log_density(x, mean, L):
        d = L.T @ (x - mean)
        return -0.5 * d @ d + jnp.sum(jnp.log(jnp.diag(L))) - 1.5 * np.log(2 * np.pi)

    def right_probs(data, c, feature):
        """(n, M) right probabilities of every slot's rule at ``h_final`` (constrained values ``c``)."""
        if has_feature(data):
            return right_prob_df(data["X"], feature, c["tree_tau"], h_final)
        return right_prob_dfi(data["X"], c["tree_weights"], c["tree_tau"], h_final)

    def conditional_leaf_jump(key, data, unravel, transforms, c_old, psi_old, z_new, is_split, new_split, f_new,
                              node, beta):
        """Leaf means of ``node`` and its children redrawn from their conditional under ``new_split``
        with the rules of ``z_new`` / ``f_new`` (the old state: ``is_split``, constrained values
        ``c_old`` and their right probabilities ``psi_old``); returns ``z_new`` with them and
        ``log q(old | is_split) - log q(new | new_split)``."""
        params = unravel(z_new)
        c = {n: transforms[n](v) for n, v in params.items()}
        n_slots = is_split.shape[-1]
        block = jnp.minimum(jnp.stack([node, 2 * node + 1, 2 * node + 2]), n_slots - 1)
        # the rules differ from the old ones only where a rule is proposed
        psi_new = right_probs(data, c, f_new) if conditional_splits else psi_old
        mean_new, L_new = leaf_block_conditional(data, c, psi_new, new_split, block, beta)
        mean_old, L_old = leaf_block_conditional(data, c_old, psi_old, is_split, block, beta)
        b_old = c_old["leaf_mean"][block]
        b_new = mean_new + jax.scipy.linalg.solve_triangular(L_new.T, jax.random.normal(key, (3,)), lower=False)
        log_q = gaussian_log_density(b_old, mean_old, L_old) - gaussian_log_density(b_new, mean_new, L_new)
        leaf = transforms["leaf_mean"]
        params["leaf_mean"] = leaf.inv(c["leaf_mean"].at[block].set(b_new))
        return ravel_pytree(params)[0], log_q

    # -- regression: the rule of a grown node proposed from the data ------------------------------

    def split_jump(key, data, unravel, transforms, z, c, psi, is_split, feature, node, grow, change, beta):
        """The node's rule at a grow or change drawn from :func:`rjhmc_split.propose_rule`, at a
        prune redrawn from the prior (``c``: ``z``'s constrained values, ``psi`` their right
        probabilities); returns ``(z, feature, log_q)`` with ``log_q`` the log of (reverse /
        forward) proposal densities in the unconstrained coordinates of ``z``: at a grow
        ``log p(old) - log q(new)``, at a prune ``log q(old) - log p(new)``, at a change
        ``log q(old) - log q(new)``."""
        params = unravel(z)
        oblique = not has_feature(data)
        n_features = data["X"].shape[1]
        leafed = is_split.at[node].set(False)  # the node's rows: its ancestors' rules
        weight = leaf_membership(leafed, psi)[:, node]
        noise_prec = beta / jnp.square(c["sigma"])
        cand = rjhmc_split.split_candidates(data["X"], data["y"], weight, noise_prec, config.mu_mean, config.mu_scale)
        k_q, k_p = jax.random.split(key)
        q_first, q_tau = rjhmc_split.propose_rule(k_q, cand, n_features, oblique)
        p_first, p_tau = rjhmc_split.prior_rule(k_p, n_features, oblique)
        from_q = grow | change
        new_first, new_tau = jnp.where(from_q, q_first, p_first), jnp.where(from_q, q_tau, p_tau)
        old_first = c["tree_weights"][node] if oblique else feature[node]
        old_tau = c["tree_tau"][node]
        log_q_old = rjhmc_split.rule_log_density(cand, old_first, old_tau, n_features, oblique)
        log_q_new = rjhmc_split.rule_log_density(cand, new_first, new_tau, n_features, oblique)
        log_p_old = rjhmc_split.prior_log_density(old_first, old_tau, n_features, oblique)
        log_p_new = rjhmc_split.prior_log_density(new_first, new_tau, n_features, oblique)
        new = dict(params)
        new["tree_tau"] = params["tree_tau"].at[node].set(
            transforms["tree_tau"].inv(c["tree_tau"].at[node].set(new_tau))[node]
        )
        if oblique:
            new["tree_weights"] = params["tree_weights"].at[node].set(
                transforms["tree_weights"].inv(c["tree_weights"].at[node].set(new_first))[node]
            )
        else:
            feature = feature.at[node].set(new_first)
        log_q = jnp.where(grow, log_p_old, log_q_old) - jnp.where(from_q, log_q_new, log_p_new)
        log_q = log_q + _log_jacobian(transforms, params) - _log_jacobian(transforms, new)
        return ravel_pytree(new)[0], feature, log_q

    # -- kernel functions ---------------------------------------------------------------------------
    def init(key, data):
        k_layout, k_feat, k_ref, k_ss = jax.random.split(key, 4)
        names, transforms, z, unravel, feature = layout(data, k_layout)
        is_split = stump(config.max_depth)
        n_features = data["X"].shape[1]
        if has_feature(data):
            feature = jax.random.randint(k_feat, (M,), 0, n_features)
        z = refresh(k_ref, data, names, transforms, unravel, z, is_split, feature)
        pe0 = make_pe(data, unravel, is_split, feature, config.h_init, 1.0)
        wa_init, _ = adapter(max(config.num_adapt_steps, 1), heuristic(pe0))
        pe, grad = jax.value_and_grad(pe0)(z)
        adapt = wa_init(IntegratorState(z, None, pe, grad), k_ss, 1.0, mass_matrix_size=z.shape[0])
        log_lik, log_prior = log_terms(data, unravel, transforms, z, is_split, feature)
        return RJHMCState(jnp.int32(0), is_split, feature, z, adapt, jnp.int32(0), log_lik, log_prior, jnp.float32(1.0))

    def step(key, state, data):
        names, transforms, _, unravel, _ = layout(data)
        keys = _step_keys(key)
        warm = state.iteration < config.num_warmup
        p = jnp.where(warm, probs[0], probs[1])
        is_split, feature = state.is_split, state.feature
        z0 = refresh(keys.refresh, data, names, transforms, unravel, state.z, is_split, feature)

        u = jax.random.uniform(keys.move)
        topo = u < p[0] + p[1]
        prop = propose_topology(keys.topology, is_split, p[0] / jnp.maximum(p[0] + p[1], 1e-12))
        topo = topo & jnp.isfinite(prop.log_q_ratio)
        log_q = jnp.where(topo, prop.log_q_ratio, 0.0)
        new_split = jnp.where(topo, prop.is_split, is_split)
        node, grow = prop.node, topo & prop.grow
        change = jnp.bool_(False)
        if has_change:  # the rule of a node whose children are leaves (root included); Q = 1
            changeable = nog_nodes(Tree(is_split, None, None))
            # a stump has no rule to change: the move is a stay (and is recorded as one)
            change = (u >= p[0] + p[1]) & (u < p[0] + p[1] + p[2]) & changeable.any()
            change_node = jax.random.categorical(keys.change, jnp.where(changeable, 0.0, -jnp.inf))
            node = jnp.where(change, change_node, node)
        jump = topo | change

        beta = state.beta
        f1, z1, adapt, t, info1 = run_leg(keys.leg1, data, unravel, is_split, feature, z0, state.adapt, state.nuts_t, beta)
        z_rule, f_star = z1, f1
        if conditional_splits or conditional_leaves:
            c1 = {n: transforms[n](v) for n, v in unravel(z1).items()}
            psi1 = right_probs(data, c1, f1)
        if conditional_splits:
            z_rule, f_rule, log_q_rule = split_jump(
                keys.rule, data, unravel, transforms, z1, c1, psi1, is_split, f1, node, grow, change,
                beta,
            )
            f_star = jnp.where(jump, f_rule, f1)
            log_q = log_q + jnp.where(jump, log_q_rule, 0.0)
        if conditional_leaves:
            z_jump, log_q_leaves = conditional_leaf_jump(
                keys.leaf, data, unravel, transforms, c1, psi1, z_rule, is_split, new_split, f_star,
                node, beta,
            )
            z_star = jnp.where(jump, z_jump, z1)
            log_q = log_q + jnp.where(jump, log_q_leaves, 0.0)
        else:
            z_star = jnp.where(topo, swap_leaf_sites(unravel, z_rule, node), jnp.where(change, z_rule, z1))
        f2, z2, adapt, t, info2 = run_leg(keys.leg2, data, unravel, new_split, f_star, z_star, adapt, t, beta)

        U = lambda z, s, f: make_pe(data, unravel, s, f, h_final, beta)(z)  # noqa: E731
        log_unbiased = U(z1, is_split, f1) - U(z_star, new_split, f_star) + log_q
        log_biased = U(z0, is_split, feature) - U(z2, new_split, f2) + log_q
        log_alpha = jnp.where(warm, log_biased, log_unbiased)
        log_alpha = jnp.where(jnp.isnan(log_alpha), -jnp.inf, log_alpha)
        accepted = jax.random.exponential(keys.accept) > -log_alpha

        is_split = jnp.where(accepted, new_split, is_split)
        feature = jnp.where(accepted, f2, feature)
        z = jnp.where(accepted, z2, z0)
        log_lik, log_prior = log_terms(data, unravel, transforms, z, is_split, feature)
        move = jnp.where(topo, jnp.where(prop.grow, 0, 1), jnp.where(change, 3, 2)).astype(jnp.int8)
        new_state = RJHMCState(state.iteration + 1, is_split, feature, z, adapt, t, log_lik, log_prior, beta)
        info = dict(
            accepted=accepted, move=move, log_alpha=jnp.minimum(log_alpha, 0.0).astype(jnp.float32),
            nuts_accept=(info1[0] + info2[0]) / 2, nuts_grads=info1[1] + info2[1], diverging=info1[2] + info2[2],
            params={n: transforms[n](v) for n, v in unravel(z).items()},
        )
        return new_state, info

    depths = node_depths(config.max_depth)

    def trace_fn(state, info):
        leaves = leaf_mask(state.is_split)
        return dict(
            is_split=state.is_split,
            feature=state.feature.astype(jnp.int16),
            params=info["params"],
            log_lik=state.log_lik,
            log_prior=state.log_prior,
            n_leaves=leaves.sum().astype(jnp.int16),
            depth=jnp.max(jnp.where(leaves, jnp.asarray(depths), 0)).astype(jnp.int8),
            accepted=info["accepted"],
            move=info["move"],
            log_alpha=info["log_alpha"],
            step_size=state.adapt.step_size.astype(jnp.float32),
            nuts_accept=info["nuts_accept"].astype(jnp.float32),
            nuts_grads=info["nuts_grads"].astype(jnp.int32),
            diverging=info["diverging"].astype(jnp.int16),
        )

    return SamplingAlgorithm(init=init, step=step, trace=trace_fn)
