"""Tempering (Metropolis-coupled MCMC, Geyer & Thompson 1995) as a wrapper over any kernel whose
state carries an inverse temperature ``beta`` and its untempered ``log_lik``.

A ladder of inverse temperatures ``β_1 = 1 > β_2 > ... > β_R`` (default MrBayes'
``β_i = 1 / (1 + ΔT (i - 1))``, 4 rungs, ``ΔT = 0.2``); rung ``i`` targets
``p(T) L(T)^{β_i}``.  One iteration advances every chain by one step of the base kernel at its
current temperature (``lax.map`` over the chains on CPU, ``vmap`` on accelerators) and then
proposes to exchange two temperature levels ``i != j`` chosen uniformly at random, accepted with
probability (Angelopoulos & Cussens 2005, §5)::

    min(1, (L(T_j) / L(T_i))^{β_i - β_j})

(the priors cancel because only the likelihood is tempered).  An accepted swap exchanges the two
chains' ``beta`` rather than their states -- the same Markov chain on (temperature -> state)
without copying states; a kernel with per-chain adaptation (RJHMC's step size) keeps it.  Only
the chain at ``β = 1`` is recorded, plus which pair of levels was proposed and whether the swap
was accepted (``swap_pair = i * R + j`` with ``i < j``; ``swap_accepted``;
:func:`bdtree_jax.diagnostics.swap_rates` summarises them).

Wrapped kernels: CGM, prune-and-regrow and their mix (:mod:`~bdtree_jax.kernels.regrow`), the
edit prior (:mod:`~bdtree_jax.kernels.edit`), Particle Gibbs (:mod:`~bdtree_jax.kernels.pg`,
tempered increments), the WU schedule (:mod:`~bdtree_jax.kernels.wu`), CGM + perturb
(:mod:`~bdtree_jax.kernels.perturb`) and RJHMC-Tree
(:mod:`~bdtree_jax.kernels.rjhmc`, whose legs and acceptance use the tempered potential).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from .._types import Array
from .base import SamplingAlgorithm
from .._validate import is_int

__all__ = ["ladder", "tempered"]


def ladder(n_temperatures: int = 4, delta_t: float = 0.2) -> tuple:
    """MrBayes' inverse temperatures ``1 / (1 + delta_t * i)``, ``i = 0 .. n - 1``."""
    if not is_int(n_temperatures) or n_temperatures < 1:
        raise ValueError(f"n_temperatures must be an integer >= 1; got {n_temperatures!r}.")
    if not (isinstance(delta_t, (int, float, np.floating)) and np.isfinite(delta_t) and delta_t > 0):
        raise ValueError(f"delta_t must be a finite number > 0; got {delta_t!r}.")
    return tuple(float(1.0 / (1.0 + delta_t * i)) for i in range(int(n_temperatures)))


def _pair(u: Array, n: int) -> tuple[Array, Array]:
    """A uniformly random unordered pair ``i < j`` of ``range(n)`` from one uniform."""
    pairs = np.array([(i, j) for i in range(n) for j in range(i + 1, n)], np.int32)
    k = jnp.minimum(jnp.floor(u * len(pairs)).astype(jnp.int32), len(pairs) - 1)
    pairs = jnp.asarray(pairs)
    return pairs[k, 0], pairs[k, 1]


@functools.lru_cache(maxsize=64)
def tempered(algorithm: SamplingAlgorithm, betas: tuple, vectorized: bool = False) -> SamplingAlgorithm:
    """Metropolis-coupled version of ``algorithm`` over the inverse temperatures ``betas``
    (``betas[0]`` must be 1: the cold rung, the only one recorded).

    ``vectorized``: advance the rungs with ``vmap`` (one batched program: GPUs) or, by default,
    with ``lax.map`` (each rung runs the scalar program and pays only for its own move: CPUs).

    The base state must be a NamedTuple with fields ``beta`` and ``log_lik`` (untempered); its
    ``step`` must target ``p(T) L(T)^beta``.  The tempered state is the base state with a leading
    axis ``(R, ...)`` of chains; a swap exchanges two chains' ``beta`` (not their states), so the
    cold chain is whichever holds ``beta == 1`` and is the one recorded.
    """
    betas = tuple(float(b) for b in betas)
    if len(betas) < 2 or betas[0] != 1.0 or any(not 0 < b <= 1 for b in betas):
        raise ValueError(f"betas must have >= 2 rungs, the first 1.0 and all in (0, 1]; got {betas!r}.")
    R = len(betas)
    beta_arr = np.asarray(betas, np.float32)

    def init_fn(key, data):
        keys = jax.random.split(key, R)  # == fold_in(key, r) for rung r (partitionable threefry)
        states = jax.vmap(algorithm.init, in_axes=(0, None))(keys, data)
        return states._replace(beta=jnp.asarray(beta_arr))

    def draw_fn(key):
        k_rungs, k_swap = jax.random.split(key)
        keys = jax.random.split(k_rungs, R)
        base = jax.vmap(algorithm.draw)(keys) if algorithm.draw is not None else keys
        return base, jax.random.uniform(k_swap, (2,))

    def step_fn(randomness, states, data):
        base, (u_pair, u_accept) = randomness
        cold_before = _holder(states.beta, 0)
        if vectorized:
            states, infos = jax.vmap(algorithm.step, in_axes=(0, 0, None))(base, states, data)
        else:
            states, infos = jax.lax.map(lambda a: algorithm.step(a[0], a[1], data), (base, states))
        # Swap temperature levels i < j: the states stay where they are and exchange their
        # inverse temperatures (equivalent to exchanging the states, without copying them).
        i, j = _pair(u_pair, R)
        beta_arr = jnp.asarray(betas, jnp.float32)
        at_i, at_j = _holder(states.beta, i), _holder(states.beta, j)
        log_lik = states.log_lik
        log_ratio = (beta_arr[i] - beta_arr[j]) * (log_lik[at_j] - log_lik[at_i])
        accept = jnp.log(u_accept) < jnp.where(jnp.isnan(log_ratio), -jnp.inf, log_ratio)
        beta = states.beta.at[at_i].set(jnp.where(accept, beta_arr[j], beta_arr[i]))
        beta = beta.at[at_j].set(jnp.where(accept, beta_arr[i], beta_arr[j]))
        return states._replace(beta=beta), (infos, i * R + j, accept, cold_before)

    def _holder(beta, level):
        """Index of the state currently at temperature ``level``."""
        return jnp.argmax(beta == jnp.asarray(betas, jnp.float32)[level])

    def trace_fn(states, info):
        infos, pair, accept, cold_before = info
        # the cold state after the swap, and the info of the move made at temperature 1
        cold = jax.tree.map(lambda a: a[_holder(states.beta, 0)], states)
        cold_info = jax.tree.map(lambda a: a[cold_before], infos)
        out = dict(algorithm.trace(cold, cold_info))
        out["swap_pair"] = pair.astype(jnp.int32)
        out["swap_accepted"] = accept
        return out

    return SamplingAlgorithm(init_fn, step_fn, trace_fn, draw_fn)
