"""BART for right-censored times: the accelerated failure time model sampled by data augmentation.

Model (log-normal AFT; Chipman, George & McCulloch 2010's BART on the log time, as R's
``BART::abart``): ``log T_i = f(x_i) + sigma eps_i``, ``eps_i ~ N(0, 1)``, ``f`` a sum of trees with
BART's prior (:mod:`bdtree_jax.kernels.bart`).  A row is an event (``T_i = t_i`` observed) or
right-censored (only ``T_i > c_i`` known).  On the model's scale (``y`` = the log times rescaled as
BART rescales a response, :func:`~bdtree_jax.problem.bart.build_bart_problem`) a censored row's
bound ``b_i`` is its rescaled ``log c_i``.

One sweep is three exact steps on the augmented posterior ``p(trees, sigma2, z | data)``:

0. **sigma2 without the imputed times**: a random-walk Metropolis–Hastings step on ``log sigma2``
   targeting ``p(sigma2 | trees, data)`` (the observed-data likelihood below times the scaled
   inverse-chi2 prior), proposal sd ``1.7 / sqrt(events)`` (2.4 times the conditional's sd in
   ``log sigma2`` when the events dominate).  ``z`` is not part of the chain's state, so this is a
   valid step of a collapsed Gibbs sampler; it breaks the coupling between ``sigma2`` and the
   censored rows' imputed times, which makes the plain data-augmentation chain slow when many rows
   are censored.
1. **Impute** every censored row's log time from its conditional
   ``z_i ~ N(f(x_i), sigma2)`` truncated to ``z_i > b_i`` (events keep ``z_i = y_i``): with
   ``w = (z - b) / sigma``, ``w ~ N((f - b) / sigma, 1)`` truncated to ``w > 0``, drawn by
   :func:`~bdtree_jax.kernels.probit.draw_latents` (accurate however far the mean lies below the
   bound).
2. **Backfit** the trees and draw ``sigma2`` given the completed ``z``: BART's sweep, unchanged
   (:func:`~bdtree_jax.kernels.bart.step_with_draws` on the data with ``y = z``).

The recorded ``train_log_lik`` is the observed-data log-likelihood of the log times (in their
units): ``log N(log t_i; f_i, sigma)`` for an event and ``log Phi((f_i - log c_i) / sigma)`` for a
censored row (tested by Geweke's successive-conditional simulator, ``tests/test_bart_survival.py``).
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax.scipy.special import log_ndtr, ndtri

from .._types import Array, PRNGKey
from . import bart
from .bart import trace
from .base import SamplingAlgorithm, with_config
from .probit import draw_latents

__all__ = ["SurvivalData", "init", "impute", "update_sigma2", "step", "step_with_draws", "draw", "trace",
           "survival_bart", "observed_log_lik", "prior_draw", "simulate", "geweke_step"]

_LOG_2PI = 1.8378770664093453


class SurvivalData(NamedTuple):
    """What a survival sweep reads (a pytree of arrays).

    bart : BARTData whose ``y`` (n,) holds the rows' rescaled log times: an event's log time, a
        censored row's bound ``b_i`` (its rescaled ``log c_i``).
    event : (n,) bool the row's time is observed (False: right-censored at ``y``).
    """

    bart: bart.BARTData
    event: Array


def impute(key: PRNGKey, fit: Array, sigma2: Array, data: SurvivalData) -> Array:
    """(n,) float32 completed log times ``z``: ``data.bart.y`` at events, and at censored rows a
    draw of ``N(fit, sigma2)`` truncated to ``z > y`` (module docstring, step 1)."""
    sigma = jnp.sqrt(sigma2)
    bound = data.bart.y
    w = draw_latents(key, (fit - bound) / sigma, jnp.ones_like(bound))
    return jnp.where(data.event, bound, bound + sigma * w).astype(jnp.float32)


def observed_log_lik(fit: Array, sigma2: Array, data: SurvivalData) -> Array:
    """() the observed-data log-likelihood of the log times, in their original units (module
    docstring): events' normal log densities, censored rows' log survival probabilities."""
    y, scale = data.bart.y, data.bart.y_scale
    density = -0.5 * (y - fit) ** 2 / sigma2 - 0.5 * (_LOG_2PI + jnp.log(sigma2)) - jnp.log(scale)
    survival = log_ndtr((fit - y) / jnp.sqrt(sigma2))
    return jnp.sum(jnp.where(data.event, density, survival))


def _log_sigma2_target(log_sigma2, fit, data: SurvivalData):
    """() ``log p(sigma2 | trees, data)`` up to a constant, in ``log sigma2`` (Jacobian included):
    the observed-data log-likelihood plus the scaled inverse-chi2 ``(nu, lam)`` prior."""
    sigma2 = jnp.exp(log_sigma2)
    nu, lam = data.bart.nu, data.bart.lam
    return observed_log_lik(fit, sigma2, data) - 0.5 * nu * log_sigma2 - 0.5 * nu * lam / sigma2


def update_sigma2(uniforms: Array, fit: Array, sigma2: Array, data: SurvivalData) -> Array:
    """() ``sigma2`` after the random-walk MH step of the module docstring (step 0); ``uniforms``
    (2,) the proposal's (by inversion) and the acceptance's."""
    events = jnp.maximum(jnp.sum(data.event.astype(jnp.float32)), 1.0)
    current = jnp.log(sigma2)
    proposed = current + 1.7 / jnp.sqrt(events) * ndtri(jnp.clip(uniforms[0], 1e-7, 1.0 - 1e-7))
    log_ratio = _log_sigma2_target(proposed, fit, data) - _log_sigma2_target(current, fit, data)
    return jnp.where(jnp.log(uniforms[1]) < log_ratio, jnp.exp(proposed), sigma2).astype(jnp.float32)


def step(key: PRNGKey, state: bart.BARTState, data: SurvivalData, config: bart.BARTConfig):
    """One sweep (module docstring): ``(state, BARTInfo)`` with ``train_log_lik`` the
    observed-data log-likelihood after the sweep."""
    return step_with_draws(draw(key, config), state, data, config)


def step_with_draws(draws, state: bart.BARTState, data: SurvivalData, config: bart.BARTConfig):
    """:func:`step` given its :func:`draw`."""
    k_impute, sigma_uniforms, sweep_draws = draws
    if config.draws_sigma:
        state = state._replace(sigma2=update_sigma2(sigma_uniforms, state.fit, state.sigma2, data))
    z = impute(k_impute, state.fit, state.sigma2, data)
    state, info = bart.step_with_draws(sweep_draws, state, data.bart._replace(y=z), config)
    return state, info._replace(train_log_lik=observed_log_lik(state.fit, state.sigma2, data))


def draw(key: PRNGKey, config: bart.BARTConfig):
    """The randomness of one sweep, from one split: the imputation's key, the sigma2 step's (2,)
    uniforms and BART's sweep draws."""
    k_impute, k_sigma, k_sweep = jax.random.split(key, 3)
    return k_impute, jax.random.uniform(k_sigma, (2,)), bart.draw(k_sweep, config)


@functools.lru_cache(maxsize=16)
def survival_bart(config: bart.BARTConfig) -> SamplingAlgorithm:
    """The survival sweep as a :class:`SamplingAlgorithm` on :class:`SurvivalData` (for
    :func:`bdtree_jax.driver.run_chains`)."""
    if config.binary:
        raise ValueError("survival BART needs a continuous outcome configuration (outcome='continuous').")
    return with_config(init, step_with_draws, trace, draw, config)


def init(key: PRNGKey | None, data: SurvivalData, config: bart.BARTConfig) -> bart.BARTState:
    """BART's initial state (:func:`bdtree_jax.kernels.bart.init`) on the survival data's inputs."""
    return bart.init(key, data.bart, config)


def prior_draw(key: PRNGKey, data: SurvivalData, config: bart.BARTConfig) -> bart.BARTState:
    """BART's prior draw (:func:`bdtree_jax.kernels.bart.prior_draw`) on the survival data's inputs."""
    return bart.prior_draw(key, data.bart, config)


def simulate(key: PRNGKey, state: bart.BARTState, bound: Array, data: SurvivalData) -> SurvivalData:
    """Data from the model given ``state``: ``z ~ N(fit, sigma2)`` (n,), censored where it
    exceeds ``bound`` (n,) (the rows' rescaled log censoring times): ``y = min(z, bound)``,
    ``event = z <= bound``."""
    z = state.fit + jnp.sqrt(state.sigma2) * jax.random.normal(key, state.fit.shape)
    event = z <= bound
    return data._replace(bart=data.bart._replace(y=jnp.where(event, z, bound).astype(jnp.float32)), event=event)


def geweke_step(key: PRNGKey, state: bart.BARTState, data: SurvivalData, bound: Array, config: bart.BARTConfig):
    """One step of Geweke's successive-conditional simulator: censored data from the model given
    the state (:func:`simulate`), then one sweep given them.  Its stationary law is the prior."""
    k_data, k_sweep = jax.random.split(key)
    data = simulate(k_data, state, bound, data)
    state, info = step(k_sweep, state, data, config)
    return state, data, info
