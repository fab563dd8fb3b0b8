"""BART for right-censored times: the accelerated failure time model sampled by data augmentation.

Model (log-normal AFT; Chipman, George & McCulloch 2010's BART on the log time, as R's
``BART::abart``): ``log T_i = f(x_i) + sigma eps_i``, ``eps_i ~ N(0, 1)``, ``f`` a sum of trees with
BART's prior (:mod:`bdtree_jax.kernels.bart`).  A row is an event (``T_i = t_i`` observed) or
right-censored (only ``T_i > c_i`` known).  On the model's scale (``y`` = the log times rescaled as
BART rescales a response, :func:`~bdtree_jax.problem.bart.build_bart_problem`) a censored row's
bound ``b_i`` is its rescaled ``log c_i``.

One sweep is two exact Gibbs steps on the augmented posterior ``p(trees, sigma2, z | data)``:

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
from jax.scipy.special import log_ndtr

from .._types import Array, PRNGKey
from . import bart
from .base import SamplingAlgorithm
from .probit import draw_latents

__all__ = ["SurvivalData", "impute", "step", "survival_bart", "observed_log_lik", "simulate", "geweke_step"]

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


def step(draws, state: bart.BARTState, data: SurvivalData, config: bart.BARTConfig):
    """One sweep (module docstring) from its :func:`draw`: ``(state, BARTInfo)`` with
    ``train_log_lik`` the observed-data log-likelihood after the sweep."""
    k_impute, sweep_draws = draws
    z = impute(k_impute, state.fit, state.sigma2, data)
    state, info = bart.step_with_draws(sweep_draws, state, data.bart._replace(y=z), config)
    return state, info._replace(train_log_lik=observed_log_lik(state.fit, state.sigma2, data))


def draw(key: PRNGKey, config: bart.BARTConfig):
    """The randomness of one sweep, from one split: the imputation's key and BART's sweep draws."""
    k_impute, k_sweep = jax.random.split(key)
    return k_impute, bart.draw(k_sweep, config)


@functools.lru_cache(maxsize=16)
def survival_bart(config: bart.BARTConfig) -> SamplingAlgorithm:
    """The survival sweep as a :class:`SamplingAlgorithm` on :class:`SurvivalData` (for
    :func:`bdtree_jax.driver.run_chains`)."""
    if config.binary:
        raise ValueError("survival BART needs a continuous outcome configuration (outcome='continuous').")

    def init_fn(key, data):
        return bart.init(key, data.bart, config)

    def step_fn(draws, state, data):
        return step(draws, state, data, config)

    def trace_fn(state, info):
        return bart.trace(state, info, config)

    return SamplingAlgorithm(init_fn, step_fn, trace_fn, functools.partial(draw, config=config))


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
    state, info = step(draw(k_sweep, config), state, data, config)
    return state, data, info
