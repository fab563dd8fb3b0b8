"""Bayesian causal forests (Hahn, Murray & Carvalho 2020, "Bayesian regression tree models for
causal inference", Bayesian Analysis 15(3)) by Bayesian backfitting of two BART forests.

Model (on ``y`` rescaled as BART's, :mod:`bdtree_jax.problem.bcf`)::

    y_i = mu(x_i, pihat_i) + tau(x_i) b_{z_i} + eps_i,      eps_i ~ N(0, sigma2)
    b_0, b_1 ~ N(0, 1/2)  (the adaptive coding),           sigma2 ~ nu lam / chi2_nu

``mu`` a sum of ``M_mu`` trees on the inputs and the propensity (BART's prior), ``tau`` a sum of
``M_tau`` trees on the inputs with a stronger depth penalty and its own leaf variance; the
conditional average treatment effect is ``CATE(x) = (b_1 - b_0) tau(x)``.

One sweep (:func:`step_with_draws`), every update an exact conditional draw:

1. the prognostic forest ``mu`` by BART's backfitting on ``y - b_z tau`` (every tree's leaves
   integrated out, :class:`~bdtree_jax.likelihoods.BARTLeafNormal`; the vectorized grow-prune
   sweep for numeric inputs, else the single-tree kernels);
2. the treatment forest ``tau`` by the same backfitting with a basis: tree ``m``'s rows are
   ``r_i = y_i - mu_i - b_{z_i} (tau_i - g_m(x_i)) ~ N(b_{z_i} leaf, sigma2)``,
   :class:`~bdtree_jax.likelihoods.BARTLeafWeightedNormal` with ``w = 1`` and basis ``b_{z_i}``
   (through :func:`bdtree_jax.kernels.bart._kernel_sweep`'s ``rows`` hook);
3. ``b_j | rest ~ N(m_j, 1/P_j)``, ``P_j = 2 + sum_{z_i=j} tau_i^2 / sigma2``,
   ``m_j = sum_{z_i=j} tau_i (y_i - mu_i) / (sigma2 P_j)``, for ``j = 0, 1``;
4. ``sigma2 ~ IG((nu + n)/2, (nu lam + sum (y - mu - b_z tau)**2)/2)``.

Binary outcomes (``BCFConfig(outcome="binary")``): probit BCF with Albert & Chib latents, as
BART's binary outcome (:mod:`bdtree_jax.kernels.bart`): ``P(y_i = 1) = Phi(offset + mu_i + b_{z_i}
tau_i)``, ``sigma2 = 1``; a sweep first draws every latent from its truncated normal conditional,
then runs steps 1-3 on the latents less the offset (no step 4).  The effect is then reported on
the probability scale: ``Phi(offset + mu + b_1 tau) - Phi(offset + mu + b_0 tau)``.

State :class:`BCFState`; trace per sweep (:func:`trace`): ``sigma``, ``b0``, ``b1``, ``ate`` and
``att`` (the training rows' mean CATE, all and treated; original units), ``train_rmse``,
``train_log_lik``, each forest's mean leaves and depth, and the trees of both forests
(``mu_tree``, ``mu_leaf_values``, ``tau_tree``, ``tau_leaf_values``).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import NamedTuple

import jax
import jax.numpy as jnp

from jax.scipy.special import log_ndtr, ndtr

from .._types import Array, PRNGKey
from ..likelihoods import BARTLeafWeightedNormal
from ..problem.bart import BARTData
from ..problem.bcf import BCFData
from . import bart
from .bart import BARTConfig, BARTState, SweepDraws
from .base import SamplingAlgorithm, with_config
from .probit import draw_latents
from .._validate import check_one_of

__all__ = ["BCFConfig", "BCFData", "BCFDraws", "BCFInfo", "BCFState", "bcf", "draw", "geweke_step", "init",
           "prior_draw", "simulate_y", "step", "step_with_draws", "trace"]

#: Prior variance of each of the adaptive coding's ``b_0``, ``b_1`` (Hahn et al. 2020, §5.2).
B_PRIOR_VAR = 0.5


@dataclass(frozen=True)
class BCFConfig:
    """Static configuration: ``mu`` and ``tau`` the two forests' :class:`BARTConfig` (each
    ``outcome="continuous"``; ``mu.sample_sigma`` says whether a sweep draws ``sigma2``),
    ``sample_b``: draw the adaptive coding (False: keep ``b = (-1/2, 1/2)``, the fixed coding)."""

    mu: BARTConfig
    tau: BARTConfig
    sample_b: bool = True
    outcome: str = "continuous"

    def __post_init__(self):
        if self.mu.binary or self.tau.binary:
            raise ValueError("BCFConfig: both forests take outcome='continuous' (BCFConfig.outcome says the model's).")
        check_one_of("BCFConfig: outcome", self.outcome, bart.OUTCOMES)

    @property
    def binary(self) -> bool:
        return self.outcome == "binary"


class BCFState(NamedTuple):
    """One chain: the two forests' :class:`BARTState` (their ``sigma2`` unused), ``b`` (2,) the
    coding ``(b_0, b_1)``, ``sigma2`` (), ``sweeps`` () int32."""

    mu: BARTState
    tau: BARTState
    b: Array
    sigma2: Array
    sweeps: Array


class BCFDraws(NamedTuple):
    """The randomness of one sweep: each forest's :class:`SweepDraws` (their ``key`` unused),
    ``b_normals`` (2,), ``key`` for ``sigma2``."""

    mu: SweepDraws
    tau: SweepDraws
    b_normals: Array
    key: Array


class BCFInfo(NamedTuple):
    """Per sweep: ``mu_accepted`` (M_mu,), ``tau_accepted`` (M_tau,) trees changed; ``sigma``,
    ``train_rmse`` (original units), ``train_log_lik``, ``ate``, ``att`` ()."""

    mu_accepted: Array
    tau_accepted: Array
    sigma: Array
    train_rmse: Array
    train_log_lik: Array
    ate: Array
    att: Array


def _basis(b: Array, z: Array) -> Array:
    """(n,) ``b_{z_i}``."""
    return jnp.where(z > 0.5, b[1], b[0])


def _tau_rows(data: BCFData, r: Array, basis: Array, sigma2: Array, partial: Array):
    """Tree m of the treatment forest's TreeData given the other trees' sum ``partial`` (n,):
    rows ``[1, b**2, b r_m, r_m**2]``, ``r_m = r - b partial`` (``r = y - mu``), the leaf model
    with the current ``sigma2``."""
    td = data.tau.tree_data
    lik = BARTLeafWeightedNormal(sigma2, td.likelihood.tau2)
    stats = BARTLeafWeightedNormal.row_stats(r - basis * partial, jnp.ones_like(r), basis)
    return td._replace(point_stats=stats, likelihood=lik)


def draw(key: PRNGKey, config: BCFConfig) -> BCFDraws:
    """The randomness of one sweep (the driver draws it a block at a time)."""
    k_mu, k_tau, k_b, k_sigma = jax.random.split(key, 4)
    return BCFDraws(bart.draw(k_mu, config.mu), bart.draw(k_tau, config.tau), jax.random.normal(k_b, (2,)), k_sigma)


def init(key: PRNGKey | None, data: BCFData, config: BCFConfig) -> BCFState:
    """Both forests stumps with leaf value 0 (:func:`bdtree_jax.kernels.bart.init`), ``b = (-1/2,
    1/2)``, ``sigma2 = sigma2_init``.  ``key`` is unused."""
    del key
    return BCFState(bart.init(None, data.mu, config.mu), bart.init(None, data.tau, config.tau),
                    jnp.array([-0.5, 0.5], jnp.float32), jnp.asarray(data.mu.sigma2_init, jnp.float32), jnp.int32(0))


def step(key: PRNGKey, state: BCFState, data: BCFData, config: BCFConfig) -> tuple[BCFState, BCFInfo]:
    """One sweep (module docstring)."""
    return step_with_draws(draw(key, config), state, data, config)


def _forest_fit(state: BARTState, sweeps: Array) -> Array:
    """The forest's fit as carried, or every FIT_REFRESH sweeps exactly from the trees."""
    return jax.lax.cond(sweeps % bart.FIT_REFRESH == 0, lambda: bart._fit_from_trees(state), lambda: state.fit)


def _mu_sweep(state: BARTState, data: BARTData, target, total, sigma2, draws: SweepDraws, config: BARTConfig):
    """BART's backfitting of the prognostic forest on ``target``: ``(total, values, changed, trees,
    can_split)``."""
    uniforms, normals, tree_keys, _ = draws
    if config.tree_sampler == "grow-prune" and not config.general_rules:
        return bart._grow_prune_sweep(state, data, target, total, sigma2, uniforms, normals, config)
    total, values, changed, trees = bart._kernel_sweep(state, data, target, total, sigma2, uniforms, normals,
                                                       tree_keys, config)
    return total, values, changed, trees, bart._can_split(trees, data)


def _draw_b(normals: Array, r: Array, tau_fit: Array, z: Array, sigma2: Array) -> Array:
    """(2,) ``b_j | rest`` for ``j = 0, 1`` (module docstring, step 3)."""
    group = jnp.stack([z < 0.5, z > 0.5])  # (2, n)
    precision = 1.0 / B_PRIOR_VAR + jnp.sum(jnp.where(group, tau_fit * tau_fit, 0.0), axis=1) / sigma2
    mean = jnp.sum(jnp.where(group, tau_fit * r, 0.0), axis=1) / sigma2 / precision
    return (mean + jax.lax.rsqrt(precision) * normals).astype(jnp.float32)


def step_with_draws(draws: BCFDraws, state: BCFState, data: BCFData, config: BCFConfig) -> tuple[BCFState, BCFInfo]:
    """:func:`step` given its :func:`draw`."""
    z, sigma2, b = data.z, state.sigma2, state.b
    mu_fit = _forest_fit(state.mu, state.sweeps)
    tau_fit = _forest_fit(state.tau, state.sweeps)
    basis = _basis(b, z)
    offset = data.mu.offset
    if config.binary:  # the latents (with the key a continuous sweep spends on sigma2), less the offset
        y = draw_latents(draws.key, offset + mu_fit + basis * tau_fit, data.mu.y) - offset
    else:
        y = data.mu.y
    mu_fit, mu_values, mu_changed, mu_trees, mu_can = _mu_sweep(state.mu, data.mu, y - basis * tau_fit, mu_fit,
                                                                sigma2, draws.mu, config.mu)
    r = y - mu_fit
    uniforms, normals, tree_keys, _ = draws.tau
    tau_fit, tau_values, tau_changed, tau_trees = bart._kernel_sweep(
        state.tau, data.tau, None, tau_fit, None, uniforms, normals, tree_keys, config.tau,
        rows=functools.partial(_tau_rows, data, r, basis, sigma2))
    if config.sample_b:
        b = _draw_b(draws.b_normals, r, tau_fit, z, sigma2)
        basis = _basis(b, z)
    residual = r - basis * tau_fit
    if config.mu.sample_sigma and not config.binary:
        sigma2 = bart._draw_sigma2(draws.key, residual, data.mu.nu, data.mu.lam)
    n = residual.shape[0]
    scale = data.mu.y_scale
    if config.binary:  # Bernoulli-probit; the effect on the probability scale, the RMSE the Brier score's root
        f = offset + mu_fit + basis * tau_fit
        labels = data.mu.y
        log_lik = jnp.sum(log_ndtr((2.0 * labels - 1.0) * f))
        cate = ndtr(offset + mu_fit + b[1] * tau_fit) - ndtr(offset + mu_fit + b[0] * tau_fit)
        rmse = jnp.sqrt(jnp.mean((labels - ndtr(f)) ** 2))
    else:
        log_lik = (-0.5 * jnp.sum(residual**2) / sigma2 - 0.5 * n * jnp.log(2.0 * jnp.pi * sigma2)
                   - n * jnp.log(scale))
        cate = (b[1] - b[0]) * tau_fit * scale
        rmse = jnp.sqrt(jnp.mean(residual**2)) * scale
    treated = z > 0.5
    att = jnp.sum(jnp.where(treated, cate, 0.0)) / jnp.maximum(jnp.sum(treated), 1)
    info = BCFInfo(mu_changed, tau_changed, jnp.sqrt(sigma2) * scale, rmse, log_lik, jnp.mean(cate), att)
    sweeps = state.sweeps + 1
    mu = BARTState(mu_trees, mu_values, mu_fit, sigma2, sweeps, mu_can)
    tau = BARTState(tau_trees, tau_values, tau_fit, sigma2, sweeps, bart._can_split(tau_trees, data.tau))
    return BCFState(mu, tau, b, sigma2, sweeps), info


def trace(state: BCFState, info: BCFInfo, config: BCFConfig) -> dict:
    """The per-iteration record (module docstring)."""
    return dict(sigma=info.sigma, train_rmse=info.train_rmse, train_log_lik=info.train_log_lik, ate=info.ate,
                att=info.att, b0=state.b[0], b1=state.b[1],
                **bart.forest_trace("mu", state.mu, info.mu_accepted, config.mu),
                **bart.forest_trace("tau", state.tau, info.tau_accepted, config.tau))


@functools.lru_cache(maxsize=32)
def bcf(config: BCFConfig) -> SamplingAlgorithm:
    """BCF as a :class:`SamplingAlgorithm` on :class:`BCFData` (for
    :func:`bdtree_jax.driver.run_chains`); cached per configuration."""
    return with_config(init, step_with_draws, trace, draw, config)


# ----------------------------------------------------------------------------------------------
# Simulation from the model (prior draws, Geweke's successive-conditional simulator)


def prior_draw(key: PRNGKey, data: BCFData, config: BCFConfig) -> BCFState:
    """Both forests from their priors (:func:`bdtree_jax.kernels.bart.prior_draw`; the treatment
    forest's leaves ``N(0, tau2)`` of its own leaf variance), ``b_j ~ N(0, 1/2)`` (``(-1/2, 1/2)``
    without ``sample_b``) and ``sigma2`` from its prior (``sigma2_init`` without ``mu.sample_sigma``)."""
    k_mu, k_tau, k_b = jax.random.split(key, 3)
    mu = bart.prior_draw(k_mu, data.mu, config.mu)
    tau = bart.prior_draw(k_tau, data.tau, config.tau)
    if config.binary:
        mu = mu._replace(sigma2=jnp.float32(1.0))
    if config.sample_b:
        b = (jnp.sqrt(B_PRIOR_VAR) * jax.random.normal(k_b, (2,))).astype(jnp.float32)
    else:
        b = jnp.array([-0.5, 0.5], jnp.float32)
    return BCFState(mu, tau, b, mu.sigma2, jnp.int32(0))


def simulate_y(key: PRNGKey, state: BCFState, data: BCFData, config: BCFConfig | None = None) -> Array:
    """``y ~ N(mu + b_z tau, sigma2)`` (n,) on the model scale; binary (``config.binary``) labels
    ``1{offset + mu + b_z tau + N(0, 1) > 0}`` (0/1 float32)."""
    mean = state.mu.fit + _basis(state.b, data.z) * state.tau.fit
    noise = jax.random.normal(key, mean.shape)
    if config is not None and config.binary:
        return (data.mu.offset + mean + noise > 0).astype(jnp.float32)
    return (mean + jnp.sqrt(state.sigma2) * noise).astype(jnp.float32)


def geweke_step(key: PRNGKey, state: BCFState, data: BCFData, config: BCFConfig):
    """One step of Geweke's (2004) successive-conditional simulator: ``y ~ p(y | state)``, then one
    sweep given it.  Returns ``(state, data with the new y, info)``."""
    k_y, k_sweep = jax.random.split(key)
    data = data._replace(mu=data.mu._replace(y=simulate_y(k_y, state, data, config)))
    state, info = step(k_sweep, state, data, config)
    return state, data, info
