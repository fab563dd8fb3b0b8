"""Log-linear BART for counts (Murray 2021, JASA 116: "Log-linear Bayesian additive regression
trees for multinomial logistic and count regression models"), by BART's Bayesian backfitting.

Model (:mod:`bdtree_jax.problem.bart_poisson`)::

    y_i ~ Poisson(mu_i),   log mu_i = log exposure_i + offset + sum_{m=1..M} g(x_i; T_m, log lambda_m)

each tree's leaves carrying a multiplicative effect ``lambda ~ Gamma(a0, b0)`` (stored as
``log lambda``, so the trees' sum is the log rate as for BART's other outcomes).  Given the other
trees, tree ``m``'s row ``i`` has rate ``r_i = exposure_i exp(offset + sum_{k != m} g_k(x_i))``
and its leaf's ``lambda`` integrates out in closed form
(:class:`~bdtree_jax.likelihoods.BARTLeafPoissonGamma`)::

    int prod_i Pois(y_i | r_i lambda) Gamma(lambda; a0, b0) dlambda
        = b0^a0 / Gamma(a0) * Gamma(a0 + Sy) / (b0 + Sr)^(a0 + Sy) * prod_i r_i^y_i / y_i!

whose last product does not depend on the partition.  A sweep is therefore BART's backfitting
with another conjugate leaf model: for each tree in turn, rows ``[1, y_i, r_i]``, one update of
``T_m`` with its leaves integrated out (the single-tree kernels: ``tree_sampler`` "grow-prune",
"cgm" or "pg", and the general-rule chain for categorical or missing ``X``), then each leaf's
``lambda ~ Gamma(a0 + Sy, b0 + Sr)``.  It runs through :func:`bdtree_jax.kernels.bart._backfit_rows`
with :func:`_rows` for the rows and the gamma draw for the leaves: ``"grow-prune"`` on numeric data
by BART's two-pass grow-prune sweep (:func:`bdtree_jax.kernels.bart_grow_prune.rows_sweep`), the
other samplers by :func:`bdtree_jax.kernels.bart._kernel_sweep` (the single-tree kernel per tree);
no augmentation is needed for the Poisson likelihood itself (Murray's latent variables
serve the multinomial and overdispersed models).  State :class:`~bdtree_jax.kernels.bart.BARTState`
(``sigma2`` unused, 1); :class:`~bdtree_jax.kernels.bart.BARTConfig` with ``sample_sigma=False``
(:func:`poisson_config`).

Trace per sweep (:func:`trace`): ``train_log_lik`` (Poisson log pmf of the training counts),
``train_rmse`` (of the counts against their means ``mu_i``), ``fit_mean``, ``fit_sd`` (of the log
rate per unit exposure ``offset + sum of trees`` over the training rows) and the tree summaries
and trees of :func:`bdtree_jax.kernels.bart.trace`.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.scipy.special import gammaln

from .._types import Array, PRNGKey
from ..data import TreeData
from .._gamma import gamma_draws
from ..problem.bart_poisson import BARTPoissonData
from ..tree import leaf_nodes, n_nodes
from . import bart
from .bart import BARTConfig, BARTInfo, BARTState, SweepDraws
from .base import SamplingAlgorithm, with_config

__all__ = ["bart_poisson", "draw", "geweke_step", "init", "poisson_config", "prior_draw", "simulate_y", "step",
           "step_with_draws", "trace"]


def poisson_config(n_trees: int, **kw) -> BARTConfig:
    """A :class:`~bdtree_jax.kernels.bart.BARTConfig` for counts: ``sample_sigma=False`` (there is
    no noise variance), the other fields as given."""
    return BARTConfig(n_trees, sample_sigma=False, **kw)


def _check(config: BARTConfig) -> None:
    if config.binary or config.sample_sigma:
        raise ValueError("log-linear BART takes a BARTConfig with outcome='continuous' and sample_sigma=False "
                         f"(poisson_config); got outcome={config.outcome!r}, sample_sigma={config.sample_sigma!r}.")


def _rows(data: BARTPoissonData, partial: Array) -> TreeData:
    """Tree m's TreeData given the other trees' sum ``partial`` (n,): rows ``[1, y_i, r_i]`` (n, 3),
    ``r_i = exp(log_exposure_i + partial_i)``."""
    rate = jnp.exp(data.log_exposure + partial)
    point_stats = jnp.stack([jnp.ones_like(rate), data.y, rate], axis=1)
    return data.tree_data._replace(point_stats=point_stats.astype(jnp.float32))


def draw(key: PRNGKey, config: BARTConfig) -> SweepDraws:
    """The randomness of one sweep: ``uniforms`` (M, 5) (general rules: (M, 10)) per tree,
    ``normals`` the leaves' gamma draws (:class:`~bdtree_jax._gamma.GammaDraws` of (M, N): every
    tree's first round drawn here in one batch, outside the loop over the trees), ``tree_keys``
    (M,) as :func:`bdtree_jax.kernels.bart.draw` (Particle Gibbs, general rules), ``key`` unused
    (zeros)."""
    M = config.n_trees
    k_moves, k_leaves, k_trees = jax.random.split(key, 3)
    tree_keys = jax.random.split(k_trees, M) if config.tree_sampler == "pg" or config.general_rules else jnp.zeros(
        (M,), jnp.uint32)
    uniforms = jax.random.uniform(k_moves, (M, 10 if config.general_rules else 5))
    leaves = gamma_draws(k_leaves, (n_nodes(config.max_depth),), batch=M)
    return SweepDraws(uniforms, leaves, tree_keys, jnp.zeros((), jnp.uint32))


def init(key: PRNGKey | None, data: BARTPoissonData, config: BARTConfig) -> BARTState:
    """Every tree a stump with ``log lambda = 0`` (:func:`bdtree_jax.kernels.bart.init`)."""
    _check(config)
    return bart.init(key, data, config)


def step(key: PRNGKey, state: BARTState, data: BARTPoissonData, config: BARTConfig) -> tuple[BARTState, BARTInfo]:
    """One backfitting sweep over the trees (module docstring)."""
    return step_with_draws(draw(key, config), state, data, config)


def step_with_draws(draws: SweepDraws, state: BARTState, data: BARTPoissonData,
                    config: BARTConfig) -> tuple[BARTState, BARTInfo]:
    """:func:`step` given its :func:`draw`."""
    uniforms, leaf_keys, tree_keys, _ = draws
    # the fit as carried, or every FIT_REFRESH sweeps exactly from the trees (bounded round-off)
    total = jax.lax.cond(state.sweeps % bart.FIT_REFRESH == 0, lambda: bart._fit_from_trees(state), lambda: state.fit)
    total, values, changed, trees, can_split = bart._backfit_rows(state, data, total, uniforms, leaf_keys, tree_keys,
                                                                  config, functools.partial(_rows, data))
    eta = data.log_exposure + total
    mu = jnp.exp(eta)
    y = data.y
    log_lik = jnp.sum(y * eta - mu - gammaln(y + 1.0))
    f = data.offset + total
    nan = jnp.float32(jnp.nan)
    info = BARTInfo(changed, nan, jnp.sqrt(jnp.mean((y - mu) ** 2)), log_lik, nan, jnp.mean(f), jnp.std(f))
    return BARTState(trees, values, total, state.sigma2, state.sweeps + 1, can_split), info


def trace(state: BARTState, info: BARTInfo, config: BARTConfig) -> dict:
    """The per-iteration record (module docstring)."""
    out = {k: v for k, v in bart.trace(state, info, config).items() if k != "sigma"}
    return dict(fit_mean=info.fit_mean, fit_sd=info.fit_sd, **out)


@functools.lru_cache(maxsize=64)
def bart_poisson(config: BARTConfig) -> SamplingAlgorithm:
    """Log-linear BART as a :class:`SamplingAlgorithm` on :class:`BARTPoissonData` (for
    :func:`bdtree_jax.driver.run_chains`); cached per configuration."""
    _check(config)
    return with_config(init, step_with_draws, trace, draw, config)


# ----------------------------------------------------------------------------------------------
# Simulation from the model (prior draws, Geweke's successive-conditional simulator)


def prior_draw(key: PRNGKey, data: BARTPoissonData, config: BARTConfig) -> BARTState:
    """Trees from the prior (:func:`bdtree_jax.kernels.bart.prior_draw`, its normal leaf values
    replaced) and every leaf's ``log lambda``, ``lambda ~ Gamma(a0, b0)``."""
    _check(config)
    k_trees, k_leaves = jax.random.split(key)
    state = bart.prior_draw(k_trees, data, config)
    lik = data.tree_data.likelihood
    shape = (config.n_trees, n_nodes(config.max_depth))
    log_lambda = jax.random.loggamma(k_leaves, jnp.broadcast_to(lik.a0, shape)) - jnp.log(lik.b0)
    values = jnp.where(jax.vmap(leaf_nodes)(state.trees.tree), log_lambda, 0.0).astype(jnp.float32)
    state = state._replace(leaf_values=values)
    return state._replace(fit=bart._fit_from_trees(state))


def simulate_y(key: PRNGKey, state: BARTState, data: BARTPoissonData) -> Array:
    """Counts ``y_i ~ Poisson(exp(log_exposure_i + fit_i))`` (n,) float32."""
    return jax.random.poisson(key, jnp.exp(data.log_exposure + state.fit)).astype(jnp.float32)


def geweke_step(key: PRNGKey, state: BARTState, data: BARTPoissonData, config: BARTConfig):
    """One step of Geweke's (2004) successive-conditional simulator: ``y ~ p(y | state)``, then
    one sweep given it.  Returns ``(state, data with the new y, info)``."""
    k_y, k_sweep = jax.random.split(key)
    data = data._replace(y=simulate_y(k_y, state, data))
    state, info = step(k_sweep, state, data, config)
    return state, data, info
