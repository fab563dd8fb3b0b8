"""Data-informed split rules for RJHMC-Tree's regression jumps (``split_proposal="conditional"``).

At a grow the new split's rule is drawn from a mixture: with probability :data:`PRIOR_WEIGHT` from
the prior (feature uniform or weights Dirichlet(1), threshold U(0, 1)), otherwise from cuts scored
on the data.  Every gap between two consecutive distinct values of a feature is a candidate; its
score is the log marginal likelihood of the node's rows split there, leaf means integrated under
their Normal prior with the noise precision given (:func:`split_candidates`).  A candidate
``(j, gap)`` is drawn with probability proportional to ``exp(score)`` and the threshold uniformly in
its gap; HMC-DFI's weights come from a Dirichlet concentrated on feature ``j``
(:data:`AXIS_CONCENTRATION`), the threshold from the gap mapped through them.  The scores use only
what both sides of a jump share (the rows, the node's membership through its ancestors' rules,
sigma), so the same candidates give the forward density at a grow and the reverse one at a prune:
the kernel (``kernels/rjhmc.py``) puts both into the acceptance ratio.  The theory is in
``docs/theory/rjhmc.md``.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import logsumexp
from numpyro import distributions as dist

__all__ = ["PRIOR_WEIGHT", "AXIS_CONCENTRATION", "SplitCandidates", "split_candidates", "propose_rule",
           "rule_log_density", "prior_rule", "prior_log_density"]

PRIOR_WEIGHT = 0.25
"""Mixture weight of the prior in the proposal: it bounds how much a prune of a rule the data do
not favour is penalised (``log PRIOR_WEIGHT``), and keeps every rule proposable."""

AXIS_CONCENTRATION = 200.0
"""HMC-DFI: the Dirichlet concentration on the chosen feature is ``1 + AXIS_CONCENTRATION * (F - 1)``
(the others 1), so the other features' weights sum to ~0.5 % and the oblique rule cuts close to
the chosen axis."""


class SplitCandidates(NamedTuple):
    """Candidate cuts of one node.

    lo, hi : (F, n - 1) ends of the gap between consecutive sorted values of each feature.
    log_weight : (F, n - 1) normalised log probability of each ``(feature, gap)``; ``-inf`` for gaps
        of width 0 (ties).
    has_data : () bool, False when no feature has two distinct values (then the prior alone).
    """

    lo: jax.Array
    hi: jax.Array
    log_weight: jax.Array
    has_data: jax.Array


def _log_marginal(count, total, noise_prec, mu_mean, mu_scale):
    """Log marginal likelihood of a group (weighted ``count`` rows summing to ``total``), leaf mean
    ~ N(mu_mean, mu_scale^2) integrated out, up to terms every partition of the rows shares."""
    prior_prec = 1.0 / mu_scale**2
    post_prec = prior_prec + noise_prec * count
    lin = prior_prec * mu_mean + noise_prec * total
    return -0.5 * jnp.log(post_prec / prior_prec) + 0.5 * lin**2 / post_prec


def split_candidates(X, y, weight, noise_prec, mu_mean: float, mu_scale: float) -> SplitCandidates:
    """Score every cut of every feature for the rows of one node.

    X : (n, F) float inputs in [0, 1]; y : (n,); weight : (n,) membership of each row in the node
    (soft, at ``h_final``); noise_prec : () ``beta / sigma^2``.
    """

    def one(x):
        order = jnp.argsort(x)
        xs, w = x[order], weight[order]
        wy = w * y[order]
        left_w, left_wy = jnp.cumsum(w)[:-1], jnp.cumsum(wy)[:-1]
        tot_w, tot_wy = w.sum(), wy.sum()
        score = (_log_marginal(left_w, left_wy, noise_prec, mu_mean, mu_scale)
                 + _log_marginal(tot_w - left_w, tot_wy - left_wy, noise_prec, mu_mean, mu_scale))
        lo, hi = xs[:-1], xs[1:]
        return lo, hi, jnp.where(hi > lo, score, -jnp.inf)

    lo, hi, score = jax.vmap(one, in_axes=1)(X)
    norm = logsumexp(score)
    has_data = jnp.isfinite(norm)
    return SplitCandidates(lo, hi, jnp.where(has_data, score - norm, -jnp.inf), has_data)


def _axis_concentration(j, n_features: int):
    return jnp.ones(n_features).at[j].set(1.0 + AXIS_CONCENTRATION * (n_features - 1))


def _safe_simplex(w):
    """Weights kept off the simplex's faces (a Dirichlet draw can underflow to 0 in float32)."""
    w = jnp.maximum(w, 1e-12)
    return w / w.sum()


def prior_rule(key, n_features: int, oblique: bool):
    """A rule from the prior: ``(feature () int32 or weights (F,), tau ())``."""
    k_f, k_t = jax.random.split(key)
    if oblique:
        first = _safe_simplex(jax.random.dirichlet(k_f, jnp.ones(n_features)))
    else:
        first = jax.random.randint(k_f, (), 0, n_features)
    return first, jax.random.uniform(k_t)


def prior_log_density(first, tau, n_features: int, oblique: bool):
    """Log density of a rule under the prior (constrained coordinates)."""
    inside = (tau >= 0) & (tau < 1)
    if oblique:
        log_p = dist.Dirichlet(jnp.ones(n_features)).log_prob(first)
    else:
        log_p = -np.log(n_features)
    return jnp.where(inside, log_p, -jnp.inf)


def _gap_ends(cand: SplitCandidates, w):
    """HMC-DFI: ends (F, n-1) of each candidate gap in the projection ``w . x`` for weights ``w``
    (F,): the chosen feature's gap scaled by its weight, the others taken at mid-range."""
    wj = w[:, None]
    shift = 0.5 * (1.0 - wj)
    return cand.lo * wj + shift, cand.hi * wj + shift


def propose_rule(key, cand: SplitCandidates, n_features: int, oblique: bool):
    """Draw a rule from the mixture (prior with probability ``PRIOR_WEIGHT``, else the scored cuts):
    ``(feature () int32 or weights (F,), tau ())``."""
    k_mix, k_cand, k_w, k_t, k_prior = jax.random.split(key, 5)
    use_prior = (jax.random.uniform(k_mix) < PRIOR_WEIGHT) | ~cand.has_data
    n_gaps = cand.lo.shape[1]
    flat = jax.random.categorical(k_cand, jnp.where(cand.has_data, cand.log_weight, 0.0).reshape(-1))
    j, g = flat // n_gaps, flat % n_gaps
    if oblique:
        w = _safe_simplex(jax.random.dirichlet(k_w, _axis_concentration(j, n_features)))
        lo, hi = _gap_ends(cand, w)
        first = w
    else:
        lo, hi = cand.lo, cand.hi
        first = j.astype(jnp.int32)
    tau = jax.random.uniform(k_t, minval=lo[j, g], maxval=hi[j, g])
    p_first, p_tau = prior_rule(k_prior, n_features, oblique)
    return jnp.where(use_prior, p_first, first), jnp.where(use_prior, p_tau, tau)


def rule_log_density(cand: SplitCandidates, first, tau, n_features: int, oblique: bool):
    """Log density () of a rule (``first``: feature () int or weights (F,); ``tau`` ()) under
    :func:`propose_rule` (constrained coordinates): the mixture, or the prior alone when
    ``cand.has_data`` is False."""
    if oblique:
        log_dir = jax.vmap(lambda j: dist.Dirichlet(_axis_concentration(j, n_features)).log_prob(first))(
            jnp.arange(n_features)
        )
        lo, hi = _gap_ends(cand, first)
        log_first = log_dir[:, None]
    else:
        lo, hi = cand.lo, cand.hi
        log_first = jnp.where(jnp.arange(n_features) == first, 0.0, -jnp.inf)[:, None]
    width = jnp.where(hi > lo, hi - lo, 1.0)
    inside = (lo <= tau) & (tau < hi)
    terms = jnp.where(inside & jnp.isfinite(cand.log_weight), cand.log_weight + log_first - jnp.log(width), -jnp.inf)
    data = jnp.where(cand.has_data, logsumexp(terms), -jnp.inf)
    prior = prior_log_density(first, tau, n_features, oblique)
    mixture = jnp.logaddexp(np.log(PRIOR_WEIGHT) + prior, np.log1p(-PRIOR_WEIGHT) + data)
    # without a candidate cut propose_rule draws from the prior alone (weight 1, not PRIOR_WEIGHT)
    return jnp.where(cand.has_data, mixture, prior)
