"""RJHMC-Tree's HMC legs (:mod:`bdtree_jax.kernels.rjhmc`): at a fixed topology, the palindrome
``G (N G)^k`` of feature sweeps ``G`` (HMC-DF, :func:`~bdtree_jax.kernels.rjhmc_moves.feature_sweep`)
and NUTS transitions ``N``, under the ``"fast"`` schedule (one global adaptation along the warm-up's
legs, then frozen) or the ``"paper"`` one (every leg re-adapts from scratch).

Shapes as in :mod:`bdtree_jax.kernels.rjhmc_model`: ``is_split`` (N,) bool, ``feature`` (M,) int32,
``z`` (P,) float32; ``adapt`` is NumPyro's ``HMCAdaptState``, ``t`` () int32 the NUTS transitions done.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from numpyro.infer.hmc import momentum_generator
from numpyro.infer.hmc_util import (
    IntegratorState,
    build_tree,
    euclidean_kinetic_energy,
    find_reasonable_step_size,
    velocity_verlet,
    warmup_adapter,
)

from ..soft import annealed_h, annealing_window
from .rjhmc_model import has_feature, potential_fn
from .rjhmc_moves import feature_sweep

__all__ = ["LegResult", "adapter", "initial_adaptation", "hmc_leg"]


class LegResult(NamedTuple):
    """A leg's end: ``feature`` (M,) int32, ``z`` (P,), ``adapt``, ``t`` () int32, and its NUTS
    diagnostics: ``accept_prob`` () mean acceptance probability, ``n_grads`` () int32 gradient
    evaluations, ``n_diverging`` () int32 divergent transitions."""

    feature: Any
    z: Any
    adapt: Any
    t: Any
    accept_prob: Any
    n_grads: Any
    n_diverging: Any


def adapter(config, num_steps: int, find_step=None):
    """NumPyro's ``(wa_init, wa_update)`` for ``num_steps`` adaptation steps: step size by dual
    averaging, diagonal mass matrix."""
    return warmup_adapter(
        num_steps, find_reasonable_step_size=find_step, adapt_step_size=True, adapt_mass_matrix=True,
        dense_mass=False, target_accept_prob=config.target_accept_prob,
    )


def _start_adaptation(wa_init, key, pe_fn, z):
    """An adaptation's initial state at ``z`` (P,) (step size 1 unless ``wa_init`` has a heuristic)."""
    pe, grad = jax.value_and_grad(pe_fn)(z)
    return wa_init(IntegratorState(z, None, pe, grad), key, 1.0, mass_matrix_size=z.shape[0])


def initial_adaptation(key, config, pe_fn, z):
    """The global adaptation's initial state at ``z`` (P,) ("fast"; its step size from NumPyro's
    heuristic on ``pe_fn``)."""
    heuristic = functools.partial(find_reasonable_step_size, pe_fn, euclidean_kinetic_energy, momentum_generator)
    wa_init, _ = adapter(config, max(config.num_adapt_steps, 1), heuristic)
    return _start_adaptation(wa_init, key, pe_fn, z)


class _NUTSKeys(NamedTuple):
    momentum: Any
    tree: Any


def _nuts_transition(key, config, z, pe_fn, adapt):
    """One NUTS transition from ``z`` (P,): ``(IntegratorState, accept_prob, num_proposals,
    diverging)``."""
    keys = _NUTSKeys(*jax.random.split(key))
    pe, grad = jax.value_and_grad(pe_fn)(z)
    r = momentum_generator(z, adapt.mass_matrix_sqrt, keys.momentum)
    vv_init, vv_update = velocity_verlet(pe_fn, euclidean_kinetic_energy)
    vv = vv_init(z, r, potential_energy=pe, z_grad=grad)
    tree = build_tree(
        vv_update, euclidean_kinetic_energy, vv, adapt.inverse_mass_matrix, adapt.step_size, keys.tree,
        max_tree_depth=config.max_tree_depth,
    )
    accept_prob = tree.sum_accept_probs / tree.num_proposals
    new = IntegratorState(tree.z_proposal, r, tree.z_proposal_pe, tree.z_proposal_grad)
    return new, accept_prob, tree.num_proposals, tree.diverging


class _TransitionKeys(NamedTuple):
    nuts: Any
    sweep: Any


def _palindrome(key, data, config, lay, is_split, feature, z, adapt, t, beta, *, n_steps, num_adapt, window,
                wa_update) -> LegResult:
    """``G (N G)^n_steps`` at topology ``is_split``; adapts while ``t < num_adapt``.  ``key`` splits
    into the first sweep's key and one key per transition (split into its NUTS and sweep keys)."""
    n_features = data["X"].shape[1]

    def h_at(t):
        return annealed_h(t, window, config.h_init, config.h_final) if num_adapt > 0 else float(config.h_final)

    def sweep(key, feature, z, h):
        if not has_feature(data, config) or n_features == 1:  # nothing to sweep
            return feature
        pe_of = lambda f: potential_fn(data, config, lay, is_split, f, h, beta)(z)  # noqa: E731
        feature, _ = feature_sweep(key, feature, is_split, n_features, pe_of, pe_of(feature))
        return feature

    keys = jax.random.split(key, n_steps + 1)
    feature = sweep(keys[0], feature, z, h_at(t))

    def body(i, carry):
        feature, z, adapt, t, acc, steps, div = carry
        h = h_at(t)
        k = _TransitionKeys(*jax.random.split(keys[i + 1]))
        pe_fn = potential_fn(data, config, lay, is_split, feature, h, beta)
        new, accept_prob, n_grad, diverging = _nuts_transition(k.nuts, config, z, pe_fn, adapt)
        if num_adapt > 0:
            adapt = jax.lax.cond(
                t < num_adapt, lambda a: wa_update(t, accept_prob, new, a), lambda a: a, adapt
            )
        feature = sweep(k.sweep, feature, new.z, h)
        return feature, new.z, adapt, t + 1, acc + accept_prob, steps + n_grad, div + diverging

    init = (feature, z, adapt, t, jnp.float32(0), jnp.int32(0), jnp.int32(0))
    feature, z, adapt, t, acc, steps, div = jax.lax.fori_loop(0, n_steps, body, init)
    return LegResult(feature, z, adapt, t, acc / n_steps, steps, div)


class _PaperLegKeys(NamedTuple):
    adaptation: Any
    leg: Any


def hmc_leg(key, data, config, lay, is_split, feature, z, adapt, t, beta) -> LegResult:
    """One HMC leg at topology ``is_split`` from ``(feature, z)``, the likelihood raised to ``beta``.

    ``"fast"``: ``leg_steps`` transitions that continue the global adaptation ``adapt`` while
    ``t < num_adapt_steps`` (with ``h`` annealed along its windows), then use it frozen.
    ``"paper"``: a fresh adaptation for ``leg_warmup`` steps from step size 1 (NumPyro's NUTS
    defaults, as the reference: no step-size heuristic), then one draw; ``adapt`` is returned
    unchanged.
    """
    if config.schedule == "fast":
        num_adapt = config.num_adapt_steps
        _, wa_update = adapter(config, max(num_adapt, 1))
        window = annealing_window(num_adapt) if num_adapt > 0 else (0, 1)
        return _palindrome(
            key, data, config, lay, is_split, feature, z, adapt, t, beta, n_steps=config.leg_steps,
            num_adapt=num_adapt, window=window, wa_update=wa_update,
        )
    keys = _PaperLegKeys(*jax.random.split(key))
    wa_init, wa_update = adapter(config, config.leg_warmup)
    pe_fn = potential_fn(data, config, lay, is_split, feature, config.h_init, beta)
    local = _start_adaptation(wa_init, keys.adaptation, pe_fn, z)
    leg = _palindrome(
        keys.leg, data, config, lay, is_split, feature, z, local, jnp.int32(0), beta,
        n_steps=config.leg_warmup + 1, num_adapt=config.leg_warmup, window=annealing_window(config.leg_warmup),
        wa_update=wa_update,
    )
    return leg._replace(adapt=adapt, t=t + config.leg_warmup + 1)
