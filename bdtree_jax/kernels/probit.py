"""Albert–Chib latents of probit models (:mod:`bdtree_jax.kernels.bart`'s binary outcome,
:class:`bdtree_jax.numpyro.TreeGibbs`'s ``"probit"`` sites): ``z ~ N(mean, 1)`` truncated to the
side of 0 the label says, drawn by inversion accurately at any ``mean`` in float32."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.scipy.special import log_ndtr, ndtr, ndtri

from .._types import Array, PRNGKey

__all__ = ["draw_latents"]

_TAIL = -3.0  # a latent whose mean lies this far (sd) on the wrong side of 0 is drawn by _tail_excess
_LOG_2PI = 1.8378770664093453


def _tail_excess(c, log_u, steps: int = 6):
    """(shape of ``c``) ``t >= 0`` with ``log Phi(-(c + t)) = log u + log Phi(-c)``: the excess over
    ``c`` of a standard normal truncated to ``(c, inf)``, by inversion in log space, for ``c``
    (...) >= ~3 and ``log_u`` (...) ``log u``, ``u`` uniform on (0, 1).  ``h(t) = log Phi(-(c + t))
    - log Phi(-c) - log u`` is concave and decreasing, and ``t0 = -log u / c`` (the exponential
    tail's) lies right of its root (the hazard exceeds ``c``), so Newton's steps fall monotonically
    to the root; six are far more than float32 needs for ``c >= 3``."""
    target = log_ndtr(-c) + log_u
    t = -log_u / c
    for _ in range(steps):
        v = c + t
        log_q = log_ndtr(-v)
        hazard = jnp.exp(-0.5 * v * v - 0.5 * _LOG_2PI - log_q)
        t = jnp.maximum(t + (log_q - target) / hazard, 0.0)
    return t


def draw_latents(key: PRNGKey, mean: Array, y: Array) -> Array:
    """Albert–Chib latents (shape of ``mean``): ``z_i ~ N(mean_i, 1)`` truncated to ``z_i > 0``
    where ``y_i = 1`` and to ``z_i < 0`` where ``y_i = 0``, accurate at any ``mean``.

    By inversion, from one uniform ``u`` per row (the midpoint of one of 2**23 equal cells, in
    ``[2**-24, 1 - 2**-24]``: never 0 or 1, so ``z`` is finite and on its side of 0).  With
    ``s = 2y - 1`` and ``a = s mean``: where ``a >= _TAIL`` (the mean on the label's side of 0, or
    less than 3 sd on the other), ``z = mean - s Phi^-1(u Phi(a))`` (the product formed in the lower
    tail, where float32 keeps precision); where ``a < _TAIL`` (far on the wrong side, where
    ``Phi(a)`` underflows float32 below ``a ~ -13`` and that formula subtracts two nearly equal
    numbers) ``z = s t`` with ``t`` the excess over ``-a`` of a standard normal truncated to
    ``(-a, inf)``, by inversion in log space (:func:`_tail_excess`)."""
    s = 2.0 * y.astype(jnp.float32) - 1.0
    u = jax.random.uniform(key, jnp.shape(mean), jnp.float32) + jnp.float32(2.0**-24)
    p = jnp.maximum(u * ndtr(s * mean), jnp.finfo(jnp.float32).tiny)
    body = mean - s * ndtri(p)
    a = s * mean
    tail = s * _tail_excess(jnp.maximum(-a, -_TAIL), jnp.log(u))
    return jnp.where(a < _TAIL, tail, body).astype(jnp.float32)
