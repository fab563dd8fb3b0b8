"""Log-gamma draws for the samplers' gamma leaves (log-linear BART's counts and classes, a variance
forest's trees): Marsaglia & Tsang's (2000) rejection sampler with its first round of proposals
drawn in one batch (:func:`gamma_draws`, e.g. for every tree of a sweep before the loop over the
trees) and only arithmetic in the loop (:func:`log_gamma_given`).  The same law as
:func:`jax.random.loggamma`, whose rejection loop draws new randomness at every turn
(``tests/test_log_gamma.py``)."""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from ._types import Array

__all__ = ["GAMMA_ATTEMPTS", "GammaDraws", "gamma_draws", "log_gamma", "log_gamma_given"]

#: Marsaglia-Tsang proposals per element in each round of :func:`log_gamma_given`.
GAMMA_ATTEMPTS = 2


class GammaDraws(NamedTuple):
    """The randomness of :func:`log_gamma_given` for ``dims``-shaped draws (with any leading batch
    axes): ``normals`` (GAMMA_ATTEMPTS, *dims) and ``uniforms`` (GAMMA_ATTEMPTS + 1, *dims) of the
    first round (the last uniform raises ``Gamma(a + 1)`` to ``Gamma(a)``), ``key`` a PRNG key for
    further rounds."""

    normals: Array
    uniforms: Array
    key: Array


def gamma_draws(key: Array, dims: tuple, batch: int | None = None) -> GammaDraws:
    """:class:`GammaDraws` for ``dims``-shaped gamma draws from ``key`` split once; with ``batch``,
    ``batch`` of them stacked on a leading axis (one key each), drawn in one call (e.g. every tree
    of a sweep at once, outside the loop over the trees)."""
    k_normals, k_uniforms, k_rounds = jax.random.split(key, 3)
    lead = () if batch is None else (batch,)
    dims = tuple(dims)
    return GammaDraws(jax.random.normal(k_normals, lead + (GAMMA_ATTEMPTS,) + dims, jnp.float32),
                      _open_uniforms(k_uniforms, lead + (GAMMA_ATTEMPTS + 1,) + dims),
                      k_rounds if batch is None else jax.random.split(k_rounds, batch))


def _open_uniforms(key: Array, dims: tuple) -> Array:
    return jax.random.uniform(key, dims, jnp.float32, minval=jnp.finfo(jnp.float32).tiny)


def log_gamma(key: Array, shape: Array) -> Array:
    """``log G`` with ``G ~ Gamma(shape, 1)`` independently per element (``shape`` (...) > 0):
    :func:`log_gamma_given` of :func:`gamma_draws` of ``key``."""
    shape = jnp.asarray(shape, jnp.float32)
    return log_gamma_given(gamma_draws(key, shape.shape), shape)


def log_gamma_given(draws: GammaDraws, shape: Array) -> Array:
    """``log G`` with ``G ~ Gamma(shape, 1)`` independently per element (``shape`` (...) > 0, any
    size: exact for small shapes too, without underflow; NaN where ``shape`` is not a finite
    number > 0), given its randomness ``draws`` (:func:`gamma_draws`).

    ``G = X U**(1/shape)`` with ``X ~ Gamma(shape + 1)`` and ``U`` uniform (a gamma variable of
    shape ``a + 1`` times a uniform's ``1/a``-th power has shape ``a``).  ``X`` by Marsaglia &
    Tsang's (2000) rejection sampler for shapes ``alpha >= 1``: with ``d = alpha - 1/3``,
    ``c = 1/sqrt(9 d)``, ``z`` standard normal and ``v = (1 + c z)**3``, accept ``X = d v`` when
    ``v > 0`` and ``log u < z**2/2 + d (1 - v + log v)``, written with ``w = v - 1`` and
    ``log1p(w) - w`` so that float32 keeps the acceptance test at large shapes.  Proposals come
    GAMMA_ATTEMPTS per element in a round, the first round's from ``draws`` (drawn before, in one
    batch), and each element keeps the first accepted one: the rejection sampler's output, whatever
    the number of rejections before it.  Each proposal is accepted with probability >= 0.95, so an
    element needs a second round with probability <= 0.0025; the rounds are a ``lax.while_loop``
    that runs only while some element has none accepted (under ``vmap`` too, where a ``lax.cond``
    would compute both branches), their randomness drawn from ``draws.key``.  The same law as
    :func:`jax.random.loggamma` (``tests/test_log_gamma.py``), whose rejection loop draws new
    randomness at every turn: in a tree sweep's loop on a CPU this costs a fifth of it."""
    shape = jnp.asarray(shape, jnp.float32)
    alpha = shape + 1.0
    d = alpha - 1.0 / 3.0
    c = jax.lax.rsqrt(9.0 * d)

    def propose(z, u):  # (attempts, ...) normals and uniforms -> (log X of the first accepted, any)
        cz = c * z
        w = cz * (3.0 + cz * (3.0 + cz))  # v - 1 = (1 + cz)**3 - 1
        ok = cz > -1.0
        log1p_w = jnp.log1p(jnp.where(ok, w, 0.0))
        accept = ok & _squeeze_free_test(jnp.log(u), z, d, w, log1p_w)
        first = jnp.argmax(accept, axis=0)
        return jnp.log(d) + jnp.take_along_axis(log1p_w, first[None], axis=0)[0], jnp.any(accept, axis=0)

    log_x, accepted = propose(draws.normals, draws.uniforms[:-1])
    valid = (shape > 0) & jnp.isfinite(shape)  # the others would never accept: settled now, NaN below
    accepted = accepted | ~valid

    def another_round(carry):
        k, log_x, accepted = carry
        k_next, k_normals, k_uniforms = jax.random.split(k, 3)
        dims = (draws.normals.shape[0],) + shape.shape
        new, ok = propose(jax.random.normal(k_normals, dims, jnp.float32), _open_uniforms(k_uniforms, dims))
        return k_next, jnp.where(accepted, log_x, new), accepted | ok

    _, log_x, _ = jax.lax.while_loop(lambda carry: ~jnp.all(carry[2]), another_round, (draws.key, log_x, accepted))
    return jnp.where(valid, log_x + jnp.log(draws.uniforms[-1]) / shape, jnp.nan)


def _squeeze_free_test(log_u: Array, z: Array, d: Array, w: Array, log1p_w: Array) -> Array:
    """Marsaglia & Tsang's acceptance of ``v = 1 + w`` (:func:`log_gamma_given`), without its squeeze:
    ``log u < z**2/2 + d (1 - v + log v)``."""
    return log_u < 0.5 * z * z + d * (log1p_w - w)
