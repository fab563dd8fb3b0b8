"""Weighted feature choice of the rule prior (DART's split probabilities, Linero 2018).

With :attr:`~bdtree_jax.data.TreeData.feature_log_weight` ``log s`` (F,) set, a node's rule
picks feature ``f`` with probability ``s_f / sum_{k in A} s_k`` over the node's available features
``A`` (those with a valid cut), instead of ``1 / |A|``; the cut is then drawn as before.  Both the
draw (:func:`pick_feature`) and the density (:func:`log_feature_prob`) are computed relative to the
largest available weight, in log space, so they agree for weights spanning any range; a feature
whose weight is below ``1e-38`` of the node's largest is never drawn (probability < 1e-38) while its
log-probability stays finite.
"""

from __future__ import annotations

import jax.numpy as jnp

from .._types import Array

__all__ = ["log_available_total", "log_feature_prob", "pick_feature"]


def log_available_total(available: Array, log_weight: Array) -> Array:
    """(...,) ``log sum_{k available} s_k`` of every node: ``available`` (..., F) bool,
    ``log_weight`` (F,); ``-inf`` where no feature is available."""
    masked = jnp.where(available, log_weight, -jnp.inf)
    top = jnp.max(masked, axis=-1, keepdims=True)
    safe = jnp.where(jnp.isfinite(top), top, 0.0)
    total = jnp.sum(jnp.where(available, jnp.exp(masked - safe), 0.0), axis=-1)
    return jnp.where(jnp.any(available, axis=-1), jnp.log(total) + safe[..., 0], -jnp.inf)


def log_feature_prob(available: Array, log_weight: Array, feature: Array) -> Array:
    """``log(s_feature / sum_{k available} s_k)`` at each node: ``available`` (..., F) bool,
    ``log_weight`` (F,), ``feature`` (...,) int; ``-inf`` for an unavailable feature."""
    feature = jnp.asarray(feature, jnp.int32)
    own = jnp.take_along_axis(available, feature[..., None], axis=-1)[..., 0]
    value = log_weight[feature] - log_available_total(available, log_weight)
    return jnp.where(own, value, -jnp.inf)


def pick_feature(available: Array, log_weight: Array, u: Array) -> Array:
    """(...,) int32 a feature drawn with probability ``s_f / sum_{k available} s_k`` by inverse
    CDF of ``u`` (...,) in [0, 1): ``available`` (..., F) bool, ``log_weight`` (F,).  Always an
    available feature when one is (0 when none is)."""
    masked = jnp.where(available, log_weight, -jnp.inf)
    top = jnp.max(masked, axis=-1, keepdims=True)
    w = jnp.where(available, jnp.exp(masked - jnp.where(jnp.isfinite(top), top, 0.0)), 0.0)
    cum = jnp.cumsum(w, axis=-1)
    index = jnp.sum(cum <= (u * cum[..., -1])[..., None], axis=-1)
    n_features = available.shape[-1]
    last = n_features - 1 - jnp.argmax(available[..., ::-1], axis=-1)  # rounding: never past the last available
    return jnp.minimum(index, last).astype(jnp.int32)
