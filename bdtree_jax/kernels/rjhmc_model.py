"""RJHMC-Tree's NumPyro model on the padded parameters (:mod:`bdtree_jax.kernels.rjhmc`): the layout
of the continuous parameters in one raveled vector ``z``, the potential energy and log terms at a
topology, and the exact Gibbs refresh of the padded (inactive) parameters from their prior.

Every function takes the static :class:`~bdtree_jax.kernels.rjhmc.RJHMCConfig` as ``config`` and
the data as ``data = {"X": (n, F) float32 in [0, 1], "y": (n,)}``; ``N`` is the number of heap
slots, ``M`` the number that can split, ``P`` the length of ``z``.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
from jax.flatten_util import ravel_pytree
from numpyro.distributions.transforms import biject_to
from numpyro.handlers import seed, substitute, trace
from numpyro.infer.gibbs import GIBBS_SITES_KWARG, conditioned, prototype_trace
from numpyro.infer.util import log_density, potential_energy
from numpyro.primitives import Messenger

from ..soft import leaf_mask, n_split_slots, right_prob_df, right_prob_dfi, stump

__all__ = ["TOPOLOGY", "FEATURE", "SPLIT_SITES", "Layout", "gibbs_model", "prototype", "layout", "has_feature",
           "potential_fn", "log_terms", "constrained", "right_probs", "refresh_padding"]

TOPOLOGY, FEATURE = "tree_topology", "tree_feature"
SPLIT_SITES = ("tree_tau", "tree_weights")
"""The continuous sites of the split rules (HMC-DFI's weights only)."""


class _temper(Messenger):
    """Scale the log density of the likelihood's observed sites by ``beta`` (tempering)."""

    def __init__(self, fn, beta):
        self.beta = beta
        super().__init__(fn)

    def process_message(self, msg):
        if msg["type"] == "sample" and msg["is_observed"] and msg["name"] not in (TOPOLOGY, FEATURE):
            msg["scale"] = self.beta if msg["scale"] is None else msg["scale"] * self.beta


class Layout(NamedTuple):
    """Where the continuous parameters lie in ``z`` (P,).

    names : the continuous sample sites, in the model's order.
    transforms : site name -> the bijector from unconstrained to constrained values.
    unravel : ``z`` (P,) -> dict of each site's unconstrained values.
    """

    names: tuple
    transforms: dict
    unravel: Callable[[Any], dict]


def gibbs_model(config):
    """``config.model`` conditionable on its topology and feature sites (Gibbs sites)."""
    return conditioned(config.model)


def has_feature(data, config) -> bool:
    """Whether the model has a discrete feature site (HMC-DF, or a single input)."""
    return config.kind == "df" or data["X"].shape[1] == 1


def _conditioning(data, config, is_split, feature) -> dict:
    """The Gibbs sites every model evaluation is conditioned on."""
    return {TOPOLOGY: is_split, **({FEATURE: feature} if has_feature(data, config) else {})}


def prototype(key, data, config) -> tuple[Layout, Any]:
    """The :class:`Layout` and ``z`` (P,) float32: the model's draws with ``key`` at the stump."""
    kwargs = {"h": float(config.h_final), GIBBS_SITES_KWARG: {TOPOLOGY: stump(config.max_depth)}}
    tr = prototype_trace(gibbs_model(config), key, (data["X"], data["y"]), kwargs)
    names = tuple(n for n, s in tr.items() if s["type"] == "sample" and not s["is_observed"] and n != FEATURE)
    transforms = {n: biject_to(tr[n]["fn"].support) for n in names}
    unconstrained = {n: transforms[n].inv(tr[n]["value"]) for n in names}
    z, unravel = ravel_pytree(unconstrained)
    return Layout(names, transforms, unravel), z


def layout(data, config) -> Layout:
    """The :class:`Layout` alone (a prototype traced with a fixed key whose draws are not used)."""
    return prototype(jax.random.key(0), data, config)[0]


def constrained(lay: Layout, z) -> dict:
    """Each site's constrained values at ``z`` (P,)."""
    return {n: lay.transforms[n](v) for n, v in lay.unravel(z).items()}


def potential_fn(data, config, lay: Layout, is_split, feature, h, beta) -> Callable[[Any], Any]:
    """``z`` (P,) -> () potential energy (minus the log joint in unconstrained coordinates, the
    likelihood raised to ``beta``) at topology ``is_split`` (N,) bool, features ``feature`` (M,)
    int32 and split sharpness ``h``."""
    args = (data["X"], data["y"])
    kwargs = {"h": h, GIBBS_SITES_KWARG: _conditioning(data, config, is_split, feature)}
    tempered = _temper(gibbs_model(config), beta)

    def pe(z):
        return potential_energy(tempered, args, kwargs, lay.unravel(z))

    return pe


def log_terms(data, config, lay: Layout, z, is_split, feature):
    """``(log_lik, log_prior)`` () float32 at ``h_final``: the untempered log likelihood and the
    topology's log prior."""
    kwargs = {"h": float(config.h_final), GIBBS_SITES_KWARG: _conditioning(data, config, is_split, feature)}
    _, tr = log_density(gibbs_model(config), (data["X"], data["y"]), kwargs, constrained(lay, z))
    log_lik = sum(
        jnp.sum(s["fn"].log_prob(s["value"])) for n, s in tr.items()
        if s["type"] == "sample" and s["is_observed"] and n not in (TOPOLOGY, FEATURE)
    )
    log_prior = jnp.sum(tr[TOPOLOGY]["fn"].log_prob(tr[TOPOLOGY]["value"]))
    return jnp.asarray(log_lik, jnp.float32), jnp.asarray(log_prior, jnp.float32)


def right_probs(data, config, c: dict, feature):
    """(n, M) right probabilities of every slot's rule at ``h_final`` (constrained values ``c``)."""
    h_final = float(config.h_final)
    if has_feature(data, config):
        return right_prob_df(data["X"], feature, c["tree_tau"], h_final)
    return right_prob_dfi(data["X"], c["tree_weights"], c["tree_tau"], h_final)


class _RefreshKeys(NamedTuple):
    """The sub-keys of a refresh: ``trace`` seeds the model's trace (its draws are not used),
    ``sites`` (one per site of :attr:`Layout.names`) draws each site's fresh values."""

    trace: Any
    sites: Any


def _refresh_keys(key, n_sites: int) -> _RefreshKeys:
    k_trace, k_draw = jax.random.split(key)
    return _RefreshKeys(k_trace, jax.random.split(k_draw, n_sites))  # sites[i] == fold_in(k_draw, i)


def refresh_padding(key, data, config, lay: Layout, z, is_split, feature):
    """``z`` (P,) with the padded parameters redrawn from their prior: the rules of the slots that
    do not split and the leaf parameters of the slots that are not leaves of ``is_split`` (N,).
    They do not enter the likelihood, so this is an exact Gibbs step; they are the auxiliary
    variables of the jumps."""
    keys = _refresh_keys(key, len(lay.names))
    params = lay.unravel(z)
    c = {n: lay.transforms[n](v) for n, v in params.items()}
    tr = trace(seed(substitute(gibbs_model(config), data=c), keys.trace)).get_trace(
        data["X"], data["y"], h=float(config.h_final),
        **{GIBBS_SITES_KWARG: _conditioning(data, config, is_split, feature)},
    )
    split_inactive = ~is_split[:n_split_slots(config.max_depth)]
    leaf_inactive = ~leaf_mask(is_split)
    out = dict(params)
    for i, name in enumerate(lay.names):
        if name in SPLIT_SITES:
            inactive = split_inactive
        elif name in config.leaf_sites:
            inactive = leaf_inactive
        else:
            continue
        fresh = lay.transforms[name].inv(tr[name]["fn"].sample(keys.sites[i]))
        mask = inactive.reshape(inactive.shape + (1,) * (fresh.ndim - 1)) & jnp.isfinite(fresh)
        out[name] = jnp.where(mask, fresh, params[name])
    return ravel_pytree(out)[0]
