"""A single-tree posterior's per-draw programs (:mod:`bdtree_jax.posterior.hard`): leaf parameters
drawn from their conditional posterior given each kept tree, predictions at rows (with the
predictive noise), and the pointwise log-likelihood with a replicated response, each one jitted
program over the draws; with the byte costs the memory estimate uses."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from ..likelihoods import DirichletMultinomial
from ..tree import Tree, leaf_index, leaf_nodes
from .streaming import normal_rows


def _leaf_stats(tree: Tree, train_bins, point_stats):
    """Leaf of every training row (n,) and the summed statistics of every node's rows (N, S)."""
    leaf = leaf_index(tree, train_bins)
    return leaf, jax.ops.segment_sum(point_stats, leaf, num_segments=tree.is_split.shape[-1])


def _sample_leaf_params(k_leaf, k_sigma, tree: Tree, stats, likelihood):
    """Leaf parameters (N, P) drawn from their conditional posterior given the tree (class
    probabilities; or leaf means given sigma^2, itself drawn from its marginal posterior) and
    sigma^2 (NaN for classification).  A draw's key is split once, ``k_leaf, k_noise, k_sigma =
    split(key, 3)``: the first and third come here, the second is the draw's predictive noise."""
    if isinstance(likelihood, DirichletMultinomial):
        return likelihood.sample_leaf(k_leaf, stats), jnp.float32(jnp.nan)
    sigma2 = likelihood.posterior_sigma2(k_sigma, stats, leaf_nodes(tree))
    return likelihood.sample_leaf(k_leaf, stats, sigma2), sigma2


def _train_cell(n_stats: int) -> int:
    """Bytes of temporaries per (draw, training row): the leaf descent's int32 arrays and the
    row's scattered statistics."""
    return 24 + 8 * n_stats


def _row_cell(n_params: int) -> int:
    """Bytes per (draw, row) of a prediction: the leaf descent, the gathered float32 parameters,
    the noise, and the host's float64 copy."""
    return 24 + 20 * n_params


#: Bytes per (draw, training row) of the pointwise log-likelihood: the leaf descent, the row's
#: statistics and probabilities, the log-likelihood and the replicated response.
_POINTWISE_CELL = 96


def _node_stats(tree: Tree, train_bins, train_stats):
    """(N, S) summed statistics of every node's training rows, the rows taken a chunk at a time:
    ``train_bins`` (B, r, F), ``train_stats`` (B, r, S) (padding rows carry zero statistics).  The
    scatter-add visits the rows in their order, as one ``segment_sum`` over all rows would."""
    zero = jnp.zeros((tree.is_split.shape[-1], train_stats.shape[-1]), train_stats.dtype)

    def add(acc, xs):
        bins, stats = xs
        return acc.at[leaf_index(tree, bins)].add(stats), None

    return jax.lax.scan(add, zero, (train_bins, train_stats))[0]


@jax.jit
def _leaf_means(trees: Tree, train_bins, train_stats, likelihood):
    """Per draw, the posterior-mean leaf parameter of every node: (D, N, P)."""
    return jax.vmap(lambda tree: likelihood.leaf_mean(_node_stats(tree, train_bins, train_stats)))(trees)


@jax.jit
def _leaf_draws(keys, trees: Tree, train_bins, train_stats, likelihood):
    """Per draw, leaf parameters drawn from their conditional posterior, (D, N, P), and sigma^2,
    (D,) (NaN for classification)."""

    def one(key, tree):
        k_leaf, _, k_sigma = jax.random.split(key, 3)  # the second: the draw's noise (_noisy_at_rows)
        return _sample_leaf_params(k_leaf, k_sigma, tree, _node_stats(tree, train_bins, train_stats), likelihood)

    return jax.vmap(one)(keys, trees)


@jax.jit
def _at_rows(params, trees: Tree, bins):
    """Each draw's node parameters (D, N, P) at the rows ``bins`` (r, F): (D, r, P)."""
    return jax.vmap(lambda p, tree: p[leaf_index(tree, bins)])(params, trees)


@functools.partial(jax.jit, static_argnames=("n_total",))
def _noisy_at_rows(keys, params, sigma2, trees: Tree, bins, start, n_total, scale=1.0):
    """:func:`_at_rows` plus ``N(0, scale^2 sigma^2)`` noise (``sigma2`` the likelihood's
    standardised noise variance, ``scale`` its ``scale``: y's units): the rows ``start : start + r``
    of the ``normal(split(key, 3)[1], (n_total, P))`` each draw's key gives (so the noise of a row
    does not depend on the chunking)."""

    def one(key, p, s2, tree):
        mu = p[leaf_index(tree, bins)]
        noise = normal_rows(jax.random.split(key, 3)[1], start, bins.shape[0], n_total, mu.shape[1:])
        return mu + scale * jnp.sqrt(s2) * noise

    return jax.vmap(one)(keys, params, sigma2, trees)


@jax.jit
def _draw_pointwise(keys, trees: Tree, train_bins, point_stats, likelihood, codes):
    """Per draw: leaf parameters drawn from their conditional posterior, the pointwise
    log-likelihood of every training row and a replicated response.  Shapes (draws, n)."""

    def one(key, tree):
        leaf, stats = _leaf_stats(tree, train_bins, point_stats)
        k_leaf, k_rep, k_sigma = jax.random.split(key, 3)
        params, sigma2 = _sample_leaf_params(k_leaf, k_sigma, tree, stats, likelihood)
        if isinstance(likelihood, DirichletMultinomial):
            probs = params[leaf]  # (n, K)
            loglik = likelihood.point_log_lik(probs, codes)
            rep = jax.random.categorical(k_rep, jnp.log(probs))
            return loglik, rep.astype(jnp.float32), sigma2
        # leaf means in y's units, sigma2 the standardised response's (NormalMeanShift.scale)
        mu, scale = params[leaf, 0], likelihood.scale
        loglik = -0.5 * (jnp.log(2 * jnp.pi * sigma2) + ((codes - mu) / scale) ** 2 / sigma2) - jnp.log(scale)
        sigma = scale * jnp.sqrt(sigma2)
        rep = mu + sigma * jax.random.normal(k_rep, mu.shape)
        return loglik, rep, sigma

    return jax.vmap(one)(keys, trees)
