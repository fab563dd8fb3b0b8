"""Heteroskedastic BART: a sum of trees for the mean and a product of trees for the noise variance
(HBART, Pratola, Chipman, George & McCulloch 2020; stochtree's variance forest, Murray 2021 §5),
by Bayesian backfitting of both forests.

Model (:mod:`bdtree_jax.problem.bart_variance`), on BART's rescaled ``y``::

    y_i = sum_{m=1..M} g(x_i; T_m, mu_m) + eps_i,   eps_i ~ N(0, sigma2(x_i)),
    sigma2(x) = sigma0**2 / prod_{j=1..J} lambda_j(x),   log lambda_j(x) = g(x; V_j, log lambda_j)

with BART's mean trees and leaves ``mu ~ N(0, tau2)``, ``J`` variance trees with BART's tree prior
and leaves ``lambda ~ Gamma(a0, b0)`` (a variance factor ``1/lambda ~ InvGamma(a0, b0)``), and
``sigma0**2`` fixed at BART's ``sigma_hat**2``.  One sweep (exact Gibbs):

1. the mean forest given ``sigma2(x)``: BART's backfitting with rows of precision weights
   ``w_i = sigma0**2 / sigma2(x_i) = exp(G_i)`` (``G`` the variance forest's sum of ``log lambda``):
   tree ``m``'s partial residual ``r_i ~ N(mu, sigma0**2 / w_i)``, its leaves integrated out by
   :class:`~bdtree_jax.likelihoods.BARTLeafWeightedNormal` (rows ``[1, w, w r, w r**2]``), the
   values drawn from their normal conditional (:func:`mean_sweep`);
2. the variance forest given the residuals ``e = y - fit``: tree ``j``'s rows
   ``v_i = e_i**2 exp(G_i - g_j(x_i)) / sigma0**2`` (the other trees' precision times the squared
   residual), its leaves integrated out by :class:`~bdtree_jax.likelihoods.BARTLeafVarianceGamma`
   and drawn from ``Gamma(a0 + n/2, b0 + V/2)`` (:func:`variance_sweep`).

Both run through :func:`bdtree_jax.kernels.bart._backfit_rows` (a ``rows`` hook per forest:
``"grow-prune"`` on numeric data by BART's two-pass sweep, the other samplers by
:func:`bdtree_jax.kernels.bart._kernel_sweep`), so every ``tree_sampler`` and categorical or
missing ``X`` work as in BART.  State :class:`VarianceState`
(two :class:`~bdtree_jax.kernels.bart.BARTState`); config :class:`VarianceConfig`; data
:class:`~bdtree_jax.problem.bart_variance.VarianceData`.

Trace per sweep (:func:`trace`): ``sigma`` (root mean ``sigma2(x_i)`` over the training rows,
``y``'s units), ``sigma_sd`` (sd of ``log sigma(x_i)`` over the rows), ``train_rmse``,
``train_log_lik`` (normal with ``sigma(x_i)``, ``y``'s units), BART's tree summaries and trees of
the mean forest, and ``variance_n_leaves``, ``variance_depth``, ``variance_accepted``, ``variance_tree``,
``variance_leaf_values`` (``log lambda``) of the variance forest.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import NamedTuple

import jax
import jax.numpy as jnp

from .._types import Array, PRNGKey
from ..data import TreeData
from ..likelihoods import BARTLeafVarianceGamma, BARTLeafWeightedNormal
from ..problem.bart import BARTData
from ..problem.bart_variance import VarianceData
from . import bart, bart_poisson
from .bart import BARTConfig, BARTInfo, BARTState, SweepDraws
from .base import SamplingAlgorithm, with_config

__all__ = ["VarianceConfig", "VarianceData", "VarianceDraws", "VarianceState", "bart_variance", "draw",
           "geweke_step", "init", "mean_sweep", "prior_draw", "simulate_y", "sparse_forest", "step", "step_with_draws",
           "trace", "variance_sweep", "with_sparse_forest"]


@dataclass(frozen=True)
class VarianceConfig:
    """Static configuration: ``mean`` the mean forest's :class:`~bdtree_jax.kernels.bart.BARTConfig`
    (``sample_sigma=False``: ``sigma0`` is fixed), ``variance`` the variance forest's (its
    ``n_trees`` the number of variance trees, the other fields the mean's)."""

    mean: BARTConfig
    variance: BARTConfig

    @classmethod
    def of(cls, mean: BARTConfig, variance_trees: int) -> "VarianceConfig":
        """The config of ``variance_trees`` variance trees beside the mean forest ``mean``."""
        if mean.binary or mean.sample_sigma:
            raise ValueError("a variance forest takes a mean BARTConfig with outcome='continuous' and "
                             f"sample_sigma=False; got outcome={mean.outcome!r}, sample_sigma={mean.sample_sigma!r}.")
        return cls(mean, dataclasses.replace(mean, n_trees=int(variance_trees)))


class VarianceState(NamedTuple):
    """One chain: ``mean`` the mean forest (``fit`` (n,) its sum at the training rows, ``sigma2``
    () ``sigma0**2``; its trees' node statistics have 4 columns), ``variance`` the variance forest
    (``leaf_values`` ``log lambda``, ``fit`` (n,) ``G_i = log(sigma0**2 / sigma2(x_i))``; node
    statistics 3 columns)."""

    mean: BARTState
    variance: BARTState


class VarianceDraws(NamedTuple):
    """One sweep's randomness: ``mean`` :func:`bdtree_jax.kernels.bart.draw` (normals for the mean
    leaves), ``variance`` :func:`bdtree_jax.kernels.bart_poisson.draw` (a key per tree for its gamma
    leaves)."""

    mean: SweepDraws
    variance: SweepDraws


def _weighted(data: BARTData) -> BARTLeafWeightedNormal:
    return BARTLeafWeightedNormal(data.sigma2_init, data.tree_data.likelihood.tau2)


def _mean_rows(data: VarianceData, log_w: Array, partial: Array) -> TreeData:
    """Mean tree m's TreeData given the other mean trees' sum ``partial`` (n,): rows
    ``[1, w, w r, w r**2]`` of ``r = y - partial`` with ``w = exp(log_w)``."""
    d = data.data
    r = d.y - partial
    return d.tree_data._replace(point_stats=BARTLeafWeightedNormal.row_stats(r, jnp.exp(log_w), jnp.ones_like(r)),
                                likelihood=_weighted(d))


def _variance_bart_data(data: VarianceData) -> BARTData:
    """BART's data as the variance forest reads it: its rule prior is never weighted by DART's
    ``s`` (with ``sparse=True`` the mean forest's is: :func:`sparse_forest`), i.e. equal weights
    where ``s`` is set (the same rule prior as none, in the same array structure)."""
    d = data.data
    log_w = d.tree_data.feature_log_weight
    if log_w is None:
        return d
    return d._replace(tree_data=d.tree_data._replace(feature_log_weight=jnp.zeros_like(log_w)))


def _variance_rows(data: VarianceData, scaled_e2: Array, partial: Array) -> TreeData:
    """Variance tree j's TreeData given the other variance trees' sum ``partial`` (n,): rows
    ``[1, 1/2, v/2]``, ``v = exp(partial) e**2 / sigma0**2`` (``scaled_e2 = e**2 / sigma0**2``)."""
    v = scaled_e2 * jnp.exp(partial)
    return _variance_bart_data(data).tree_data._replace(point_stats=BARTLeafVarianceGamma.row_stats(v),
                                                        likelihood=data.variance)


def _forest_data(data: VarianceData, variance: bool) -> BARTData:
    """BART's data with the tree data of one forest (its likelihood and a row of its statistics'
    width), for :func:`bdtree_jax.kernels.bart.init` and ``prior_draw``."""
    d = data.data
    n = d.y.shape[0]
    if variance:
        td = _variance_rows(data, jnp.zeros((n,), jnp.float32), jnp.zeros((n,), jnp.float32))
    else:
        td = _mean_rows(data, jnp.zeros((n,), jnp.float32), jnp.zeros((n,), jnp.float32))
    return d._replace(tree_data=td)


def draw(key: PRNGKey, config: VarianceConfig) -> VarianceDraws:
    """The randomness of one sweep, ``key`` split once into the two forests'."""
    k_mean, k_var = jax.random.split(key)
    return VarianceDraws(bart.draw(k_mean, config.mean), bart_poisson.draw(k_var, config.variance))


def init(key: PRNGKey | None, data: VarianceData, config: VarianceConfig) -> VarianceState:
    """Both forests stumps with leaf value 0 (``sigma2(x) = sigma0**2``).  ``key`` is unused."""
    return VarianceState(bart.init(key, _forest_data(data, False), config.mean),
                         bart.init(key, _forest_data(data, True), config.variance))


def _total(state: BARTState) -> Array:
    """The forest's sum at the training rows as carried, or every FIT_REFRESH sweeps from the trees."""
    return jax.lax.cond(state.sweeps % bart.FIT_REFRESH == 0, lambda: bart._fit_from_trees(state), lambda: state.fit)


def mean_sweep(draws: SweepDraws, state: BARTState, data: VarianceData, log_w: Array,
               config: BARTConfig) -> tuple[BARTState, Array]:
    """The mean forest's backfitting given the rows' log precision weights ``log_w`` (n,).
    Returns ``(state, changed (M,))``."""
    uniforms, normals, tree_keys, _ = draws
    total, values, changed, trees, can_split = bart._backfit_rows(state, data.data, _total(state), uniforms, normals,
                                                                  tree_keys, config,
                                                                  functools.partial(_mean_rows, data, log_w))
    return state._replace(trees=trees, leaf_values=values, fit=total, sweeps=state.sweeps + 1,
                          can_split=can_split), changed


def variance_sweep(draws: SweepDraws, state: BARTState, data: VarianceData, residual: Array,
                   config: BARTConfig, total: Array | None = None) -> tuple[BARTState, Array]:
    """The variance forest's backfitting given the mean forest's residuals ``residual`` (n,);
    ``total`` (n,) the forest's sum at the rows if already computed this sweep.  Returns
    ``(state, changed (J,))``."""
    uniforms, leaf_keys, tree_keys, _ = draws
    scaled_e2 = residual * residual / data.data.sigma2_init
    total = _total(state) if total is None else total
    total, values, changed, trees, can_split = bart._backfit_rows(state, _variance_bart_data(data), total, uniforms,
                                                                  leaf_keys, tree_keys, config,
                                                                  functools.partial(_variance_rows, data, scaled_e2))
    return state._replace(trees=trees, leaf_values=values, fit=total, sweeps=state.sweeps + 1,
                          can_split=can_split), changed


def step(key: PRNGKey, state: VarianceState, data: VarianceData, config: VarianceConfig):
    """One sweep (module docstring)."""
    return step_with_draws(draw(key, config), state, data, config)


def step_with_draws(draws: VarianceDraws, state: VarianceState, data: VarianceData,
                    config: VarianceConfig) -> tuple[VarianceState, BARTInfo]:
    """:func:`step` given its :func:`draw`: the mean forest given the variances, then the variance
    forest given the residuals."""
    log_w = _total(state.variance)
    mean, changed = mean_sweep(draws.mean, state.mean, data, log_w, config.mean)
    residual = data.data.y - mean.fit
    variance, var_changed = variance_sweep(draws.variance, state.variance, data, residual, config.variance, log_w)
    new = VarianceState(mean, variance)
    return new, _info(new, data, changed, var_changed)


def sparse_forest(state: VarianceState) -> BARTState:
    """The forest whose rule prior DART's ``s`` weighs (:func:`bdtree_jax.kernels.dart.dart` with
    this module as ``base``): the mean forest.  ``s`` selects the features of ``f(x)``; the
    variance forest keeps the unweighted rule prior (:func:`_variance_bart_data`)."""
    return state.mean


def with_sparse_forest(state: VarianceState, forest: BARTState) -> VarianceState:
    """``state`` with its mean forest replaced (:func:`sparse_forest`)."""
    return state._replace(mean=forest)


def _info(state: VarianceState, data: VarianceData, changed: Array, var_changed: Array) -> BARTInfo:
    """BARTInfo of the sweep: ``accepted`` (M + J,) mean trees then variance trees; ``sigma`` the
    root mean ``sigma2(x_i)`` and ``fit_sd`` the sd of ``log sigma(x_i)`` over the rows."""
    d = data.data
    residual = d.y - state.mean.fit
    log_s2 = jnp.log(d.sigma2_init) - state.variance.fit  # (n,) log sigma2(x_i), model scale
    n = residual.shape[0]
    log_lik = (-0.5 * jnp.sum(residual**2 * jnp.exp(-log_s2)) - 0.5 * jnp.sum(log_s2) - 0.5 * n * jnp.log(2.0 * jnp.pi)
               - n * jnp.log(d.y_scale))
    nan = jnp.float32(jnp.nan)
    return BARTInfo(jnp.concatenate([changed, var_changed]), jnp.sqrt(jnp.mean(jnp.exp(log_s2))) * d.y_scale,
                    jnp.sqrt(jnp.mean(residual**2)) * d.y_scale, log_lik, nan, nan, 0.5 * jnp.std(log_s2))


def trace(state: VarianceState, info: BARTInfo, config: VarianceConfig) -> dict:
    """The per-iteration record (module docstring)."""
    M = config.mean.n_trees
    out = bart.trace(state.mean, info._replace(accepted=info.accepted[:M]), config.mean)
    out["sigma_sd"] = info.fit_sd
    # the variance forest's trees are recorded in the mean forest's dtypes (its record_trees)
    out.update(bart.forest_trace("variance", state.variance, info.accepted[M:], config.mean))
    return out


@functools.lru_cache(maxsize=64)
def bart_variance(config: VarianceConfig) -> SamplingAlgorithm:
    """Heteroskedastic BART as a :class:`SamplingAlgorithm` on :class:`VarianceData` (for
    :func:`bdtree_jax.driver.run_chains`); cached per configuration."""
    return with_config(init, step_with_draws, trace, draw, config)


# ----------------------------------------------------------------------------------------------
# Simulation from the model (prior draws, Geweke's successive-conditional simulator)


def prior_draw(key: PRNGKey, data: VarianceData, config: VarianceConfig) -> VarianceState:
    """Both forests from the prior: the mean trees and normal leaves of
    :func:`bdtree_jax.kernels.bart.prior_draw`, the variance trees and their ``log lambda`` of
    :func:`bdtree_jax.kernels.bart_poisson.prior_draw` (the same gamma leaf prior)."""
    k_mean, k_var = jax.random.split(key)
    return VarianceState(bart.prior_draw(k_mean, _forest_data(data, False), config.mean),
                         bart_poisson.prior_draw(k_var, _forest_data(data, True), config.variance))


def simulate_y(key: PRNGKey, state: VarianceState, data: VarianceData) -> Array:
    """A response ``y_i ~ N(fit_i, sigma0**2 exp(-G_i))`` (n,) on the model's scale."""
    sd = jnp.sqrt(data.data.sigma2_init * jnp.exp(-state.variance.fit))
    return state.mean.fit + sd * jax.random.normal(key, state.mean.fit.shape)


def geweke_step(key: PRNGKey, state: VarianceState, data: VarianceData, config: VarianceConfig):
    """One step of Geweke's (2004) successive-conditional simulator: ``y ~ p(y | state)``, then one
    sweep given it.  Returns ``(state, data with the new y, info)``."""
    k_y, k_sweep = jax.random.split(key)
    data = data._replace(data=data.data._replace(y=simulate_y(k_y, state, data).astype(jnp.float32)))
    state, info = step(k_sweep, state, data, config)
    return state, data, info
