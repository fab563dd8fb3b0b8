"""DART: BART with a sparsity prior on the split variables (Linero 2018, "Bayesian regression
trees for high-dimensional prediction and variable selection").

Model.  BART (:mod:`bdtree_jax.kernels.bart`) with the rule prior's feature choice weighted::

    s ~ Dirichlet(theta/p, ..., theta/p)            (p features)
    a node's feature f with probability  s_f / sum_{k in A} s_k   (A: its available features)

and, by default, Linero's hyperprior on the concentration ``theta``::

    lambda = theta / (theta + rho) ~ Beta(a, b),     rho = p, a = 1/2, b = 1

(``DARTConfig.theta`` a number: ``theta`` fixed instead).  Linero's sampler draws ``s`` from
``Dirichlet(theta/p + c)``; here the rule prior is renormalised over each node's available
features, and the ``s`` step below stays exact for that.  Small ``theta`` puts the Dirichlet's mass
near the simplex's corners: few features get most of the splits.

The renormalisation over ``A``.  This library's rule prior picks the feature among the features
with a valid cut at the node (:mod:`bdtree_jax.priors`), so ``p(T | s)`` holds one factor
``s_f / S_A(s)`` per splitting node, ``S_A(s) = sum_{k in A} s_k``, and ``s | trees`` is *not*
``Dirichlet(theta/p + c)`` (``c_f``: the splits on ``f`` over every tree) unless ``A`` is every
feature at every node.  The ``s`` step is an exact Gibbs step by data augmentation instead:

1. write ``s = g / G`` with ``g_j ~ Gamma(theta/p, 1)`` independent (the Dirichlet's gamma
   representation); the trees' factors ``g_f / sum_A g_k`` do not depend on the scale ``G``, so
   given ``s`` and the trees ``G ~ Gamma(theta, 1)``: draw it, ``g = G s``;
2. for every splitting node a latent ``u ~ Exponential(rate = sum_{k in A} g_k)``: the joint
   density of ``(g, u)`` is ``prod_j g_j**(theta/p + c_j - 1) exp(-g_j (1 + sum_{nodes with j in A} u))``,
   ``1 / S_A(g)`` being ``int_0^inf exp(-u S_A(g)) du``;
3. so ``g_j | u ~ Gamma(theta/p + c_j, 1 + sum of the u of the nodes where j is available)``
   independently; ``s = g / sum(g)``.

When every feature is available at every node all rates are equal and the step is exactly
Linero's ``s ~ Dirichlet(theta/p + c)``.  The augmentation moves ``log s_j`` of a feature that is
often the only one left at its nodes by a random walk, slowly where ``s | trees`` has a heavy tail
at ``s_j -> 0``; so the step then makes an independence Metropolis–Hastings step with
``s* ~ Dirichlet(theta/p + c)`` as its proposal: every power of ``s`` cancels in its ratio ::

    prod over the splitting nodes of every tree  S_A(s) / S_A(s*)

(1, always accepted, when every feature is available everywhere).  Both steps leave ``s | trees``
invariant (tested against its exact Beta on a tree whose nodes lack a feature), so their
composition is exact.

Truncation.  Under ``valid_cuts="ancestors"`` BART's tree prior is truncated to trees whose leaves
hold ``min_leaf_size`` rows, with a normaliser ``Z(s)`` that depends on ``s``.  The joint prior
this sampler targets is DART's generative prior of ``(s, T_1..T_M)`` *conditioned jointly* on that
event, ``p(s) prod_m p(T_m | s) 1[T_m ok]`` up to a constant, so ``s | trees`` has no ``Z(s)``
(the exact conditional above) and the marginal prior of ``s`` is the Dirichlet tilted by
``Z(s)**M``; with ``valid_cuts="data"`` (no truncation) or data on which no tree can leave a leaf
empty the tilt is 1 and ``s``'s prior is exactly the Dirichlet.  :func:`prior_draw` draws ``s``
from the Dirichlet and each tree from its truncated prior given ``s``: exact for that joint only
where the truncation never binds (the Geweke tests use such data).

``theta``.  Given ``s``, ``z = logit(lambda)`` has log density (up to a constant)
``a log lambda + b log(1 - lambda) + log Gamma(theta) - p log Gamma(theta/p) + (theta/p) sum log s``;
the sweep makes :data:`THETA_STEPS` random-walk Metropolis steps on ``z`` (normal, sd
:data:`THETA_STEP_SD`): exact, unlike a griddy Gibbs step on a fixed grid, and as cheap (scalars).

One sweep (:func:`step_with_draws`): the BART sweep with the trees' rule prior weighted by the
current ``s`` (``TreeData.feature_log_weight = log s``; the grow / change proposals draw the rule
from that same weighted prior, so the rule terms cancel in their ratios as in BART), then the ``s``
step, then the ``theta`` steps.  The trees' cached log-priors are moved to the new ``s`` (the CGM
sampler's whole-tree ratios read them).  ``s`` is kept as ``log s`` (F,) in the
state (an array: a new ``s`` every sweep recompiles nothing); components below ``exp(-1e30)`` are
clipped there (an event of negligible probability for any ``theta`` the hyperprior reaches).

Categorical features and missing values (general rules, :mod:`bdtree_jax.priors.categorical`):
a feature is available at a node when it has an ordered cut or, categorical, two levels there;
the weight picks the feature, the rule within it (a cut, a level set, the missing-value bit) is
drawn as without ``sparse``, so only the feature's factor ``s_f / S_A(s)`` depends on ``s`` and
every step above holds as written.

Particle Gibbs (``tree_sampler="pg"``): BART's conditional SMC sweep grows its particles with the
prior proposal, whose rules come from the same weighted rule prior, and its increments are the
likelihood ratios alone (the rule terms are the proposal's), so it targets ``p(T | s) L(T)`` with
nothing added.

Heteroskedastic BART (:mod:`bdtree_jax.kernels.bart_variance` as ``base``): ``s`` weighs the mean
forest's rule prior and counts its splits only; the variance forest keeps the unweighted rule
prior, so its trees are not part of ``s | trees`` and every step above holds with the mean forest
as "the trees".  Monotone BART (:class:`bdtree_jax.kernels.bart_monotone.MonotoneKernel` as
``base``): the constraint is on the leaf values given the tree, and the joint prior is conditioned
jointly on it, so again ``s | trees`` is as above.

The pinball prior and box constraints are not covered: :func:`check_supported` raises.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import gammaln

from .._types import Array, PRNGKey
from ..priors.categorical import rule_available
from ..priors.feature_weights import log_available_total
from ..problem.bart import BARTData
from . import bart
from .base import SamplingAlgorithm

__all__ = ["THETA_STEPS", "THETA_STEP_SD", "DARTConfig", "DARTState", "DARTInfo", "DARTDraws", "check_supported",
           "dart", "draw", "geweke_step", "init", "init_sparsity", "log_dirichlet_draw", "log_gamma_rates",
           "prior_draw", "sparse_config", "split_counts", "step", "sparsity_step", "step_with_draws", "trace",
           "weighted"]

#: Random-walk Metropolis steps on ``logit(theta / (theta + rho))`` per sweep, and their sd.
THETA_STEPS = 4
THETA_STEP_SD = 1.0
#: Floor of ``log s`` (module docstring).
LOG_S_FLOOR = -1e30


@dataclass(frozen=True)
class DARTConfig:
    """DART's hyperparameters (static).

    theta : None (Linero's hyperprior on theta, module docstring) or a fixed positive number.
    a, b : the Beta prior of ``lambda = theta / (theta + rho)`` (Linero's 1/2 and 1).
    rho : None for the number of features ``p`` (Linero's default), or a positive number.
    theta_init : the chain's first theta (hyperprior only); None for ``rho`` (lambda = 1/2).
    correct : the renormalisation's latents in the ``s`` step (module docstring).  False draws
        ``s`` from ``Dirichlet(theta/p + c)`` -- wrong whenever a node lacks a feature; kept only
        as the tests' planted error.
    """

    theta: float | None = None
    a: float = 0.5
    b: float = 1.0
    rho: float | None = None
    theta_init: float | None = None
    correct: bool = True

    def __post_init__(self):
        def positive(name, v, allow_none):
            if v is None and allow_none:
                return
            if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)) or not (
                    np.isfinite(v) and v > 0):
                raise ValueError(f"{name} must be {'None or ' if allow_none else ''}a finite number > 0; got {v!r}.")

        positive("sparse_theta" if self.theta is not None else "theta", self.theta, True)
        positive("sparse_a", self.a, False)
        positive("sparse_b", self.b, False)
        positive("sparse_rho", self.rho, True)
        positive("theta_init", self.theta_init, True)

    def rho_for(self, n_features: int) -> float:
        return float(n_features if self.rho is None else self.rho)


class DARTState(NamedTuple):
    """One chain: ``bart`` the :class:`~bdtree_jax.kernels.bart.BARTState` (trees' log-priors under
    the current ``s``), ``log_s`` (F,) float32 log split probabilities, ``theta`` () float32."""

    bart: bart.BARTState
    log_s: Array
    theta: Array


class DARTInfo(NamedTuple):
    """Per sweep: ``bart`` the BART sweep's info; ``s_accepted`` () bool the ``s`` step's
    Dirichlet proposal was accepted; ``theta_accepted`` () float32 the share of the ``theta`` steps
    accepted (NaN for a fixed ``theta``)."""

    bart: bart.BARTInfo
    s_accepted: Array
    theta_accepted: Array


class DARTDraws(NamedTuple):
    """The randomness of one sweep: the BART sweep's :class:`~bdtree_jax.kernels.bart.SweepDraws`
    and one key for ``s`` and ``theta``."""

    bart: bart.SweepDraws
    key: Array


def sparse_config(where: str, sparse, theta, a, b, rho) -> DARTConfig | None:
    """The checked :class:`DARTConfig` of a ``sparse=...`` option and its ``sparse_theta``,
    ``sparse_a``, ``sparse_b``, ``sparse_rho``, or None for ``sparse=False``; errors name ``where``
    (the estimator or the NumPyro site)."""
    if not isinstance(sparse, (bool, np.bool_)):
        raise ValueError(f"{where}: sparse must be True or False; got {sparse!r}.")
    if not sparse:
        return None
    try:
        return DARTConfig(theta=theta, a=a, b=b, rho=rho)
    except ValueError as e:
        raise ValueError(f"{where}: {e}") from None


def check_supported(data: BARTData, config: bart.BARTConfig) -> None:
    """Raise a ValueError naming ``sparse`` for what DART does not cover (module docstring)."""
    td = _tree_data(data)
    if not hasattr(td.split_prob, "shape") or td.box_side is not None:
        raise ValueError("sparse=True needs CGM98's split probabilities without box constraints.")


def _wrapped(data) -> str:
    """The field of a BART-family kernel's data that holds the BARTData it wraps: ``bart``
    (survival BART) or ``data`` (heteroskedastic BART)."""
    return "bart" if hasattr(data, "bart") else "data"


def _tree_data(data):
    """The inputs' TreeData of a BART-family kernel's data: its ``tree_data``, or that of the
    BARTData it wraps (:func:`_wrapped`)."""
    return data.tree_data if hasattr(data, "tree_data") else _tree_data(getattr(data, _wrapped(data)))


def weighted(data: BARTData, log_s: Array) -> BARTData:
    """``data`` with the trees' rule prior weighted by ``s`` (``log_s`` (F,)); data that wrap a
    BARTData (:func:`_wrapped`) get theirs weighted."""
    if not hasattr(data, "tree_data"):
        field = _wrapped(data)
        return data._replace(**{field: weighted(getattr(data, field), log_s)})
    return data._replace(tree_data=data.tree_data._replace(feature_log_weight=log_s))


def _sparse_forest(base, state):
    """The BARTState whose trees ``s`` weighs: the ``base`` kernel's state itself, or the forest
    its ``sparse_forest(state)`` names (heteroskedastic BART: the mean forest)."""
    return base.sparse_forest(state) if hasattr(base, "sparse_forest") else state


def _with_sparse_forest(base, state, forest):
    """``state`` with :func:`_sparse_forest` replaced by ``forest``."""
    return base.with_sparse_forest(state, forest) if hasattr(base, "with_sparse_forest") else forest


def log_dirichlet_draw(key: PRNGKey, concentration: Array) -> Array:
    """(F,) ``log s`` for ``s ~ Dirichlet(concentration)`` (F,), from log-gamma draws (exact for
    small concentrations, where ``s`` itself underflows), floored at :data:`LOG_S_FLOOR`."""
    log_g = jax.random.loggamma(key, concentration)
    log_s = log_g - jax.scipy.special.logsumexp(log_g)
    return jnp.maximum(log_s, LOG_S_FLOOR).astype(jnp.float32)


def split_counts(trees, n_features: int) -> Array:
    """(F,) float32 the splits on each feature over every tree (``trees`` a CGMState with leading
    axis M)."""
    t = trees.tree
    one_hot = (t.feature[..., None] == jnp.arange(n_features)) & t.is_split[..., None]
    return jnp.sum(one_hot, axis=tuple(range(one_hot.ndim - 1)), dtype=jnp.int32).astype(jnp.float32)


def _log_lambda_target(z: Array, log_s: Array, config: DARTConfig, rho: float) -> Array:
    """Log density of ``z = logit(lambda)`` given ``s`` (module docstring), up to a constant."""
    log_lam, log_1m = jax.nn.log_sigmoid(z), jax.nn.log_sigmoid(-z)
    theta = rho * jnp.exp(log_lam - log_1m)
    p = log_s.shape[0]
    return (config.a * log_lam + config.b * log_1m + gammaln(theta) - p * gammaln(theta / p)
            + (theta / p) * jnp.sum(log_s))


def _theta_steps(key: PRNGKey, theta: Array, log_s: Array, config: DARTConfig) -> tuple[Array, Array]:
    """:data:`THETA_STEPS` random-walk MH steps on ``logit(theta / (theta + rho))``; returns
    ``(theta, share of the steps accepted)``."""
    rho = config.rho_for(log_s.shape[0])
    normals, uniforms = jax.random.split(key)
    eps = THETA_STEP_SD * jax.random.normal(normals, (THETA_STEPS,))
    log_u = jnp.log(jax.random.uniform(uniforms, (THETA_STEPS,)))

    def one(z, xs):
        e, lu = xs
        z_new = z + e
        log_ratio = _log_lambda_target(z_new, log_s, config, rho) - _log_lambda_target(z, log_s, config, rho)
        accepted = lu < log_ratio
        return jnp.where(accepted, z_new, z), accepted

    z = jnp.log(theta) - jnp.log(rho)  # logit(theta / (theta + rho)) = log(theta / rho)
    z, accepted = jax.lax.scan(one, z, (eps, log_u))
    return (rho * jnp.exp(z)).astype(jnp.float32), jnp.mean(accepted.astype(jnp.float32))


def log_gamma_rates(log_scale: Array, log_v: Array, is_split: Array, available: Array) -> Array:
    """(F,) ``log(G + V_j)``, ``V_j`` the sum of the node terms ``v = E / S_A(s)`` over the splitting
    nodes where feature ``j`` is available: ``log_scale`` () ``log G``, ``log_v`` (..., M, N),
    ``is_split`` (..., M, N) bool, ``available`` (..., M, N, F) bool (leading axes: several forests
    sharing ``s``, multiclass BART's K).  A log-sum-exp per feature: one node whose available
    features all have tiny ``s`` has a huge ``v``, and scaling every feature's sum by that one term
    would round the other features' ``V_j`` (comparable to a tiny ``G``) to 0."""
    terms = jnp.where(is_split[..., None] & available, log_v[..., None], -jnp.inf)  # (..., M, N, F)
    return jnp.logaddexp(log_scale, jax.scipy.special.logsumexp(terms, axis=tuple(range(terms.ndim - 1))))


def _s_step(key: PRNGKey, state: DARTState, config: DARTConfig):
    """The ``s`` step (module docstring): the augmented Gibbs draw (gamma scale, node latents,
    gamma draws), then the independence MH step from ``Dirichlet(theta/p + c)``.  Returns
    ``(log_s, trees, accepted)``, the trees' log-priors moved to the new ``s``."""
    trees = state.bart.trees
    n_features = state.log_s.shape[0]
    k_scale, k_nodes, k_gamma, k_propose, k_accept = jax.random.split(key, 5)
    counts = split_counts(trees, n_features)
    concentration = state.theta / n_features + counts
    available = rule_available(trees.lo, trees.hi, trees.levels)  # (M, N, F): a cut, or >= 2 levels
    is_split = trees.tree.is_split
    log_total = log_available_total(available, state.log_s)  # (M, N) log sum_A s_k
    if not config.correct:  # the planted error of the tests: the plain Dirichlet draw
        log_s = log_dirichlet_draw(k_gamma, concentration)
        new_total, accepted = log_available_total(available, log_s), jnp.bool_(True)
    else:
        # g = G s with G ~ Gamma(theta, 1); u ~ Exp(G S_A(s)) at every splitting node; the rates
        # 1 + sum_{j in A} u = (G + V_j) / G with V_j = sum_{j in A} E / S_A(s), E ~ Exp(1): the common
        # 1 / G drops out of s = g / sum(g), and the rest is kept in logs (G underflows for small theta)
        log_scale = jax.random.loggamma(k_scale, state.theta)
        log_v = jnp.log(jax.random.exponential(k_nodes, log_total.shape)) - log_total
        log_rate = log_gamma_rates(log_scale, log_v, is_split, available)
        log_g = jax.random.loggamma(k_gamma, concentration) - log_rate
        gibbs = jnp.maximum(log_g - jax.scipy.special.logsumexp(log_g), LOG_S_FLOOR).astype(jnp.float32)
        gibbs_total = log_available_total(available, gibbs)
        # the independence MH step: its ratio is prod over splitting nodes S_A(s) / S_A(s*)
        proposed = log_dirichlet_draw(k_propose, concentration)
        proposed_total = log_available_total(available, proposed)
        log_ratio = jnp.sum(jnp.where(is_split, gibbs_total - proposed_total, 0.0))
        accepted = jnp.log(jax.random.uniform(k_accept)) < log_ratio
        log_s = jnp.where(accepted, proposed, gibbs)
        new_total = jnp.where(accepted, proposed_total, gibbs_total)
    feature = trees.tree.feature.astype(jnp.int32)
    change = (log_s[feature] - new_total) - (state.log_s[feature] - log_total)
    d_prior = jnp.sum(jnp.where(is_split, change, 0.0), axis=-1)  # (M,)
    return log_s, trees._replace(log_prior=trees.log_prior + d_prior), accepted


def init(key: PRNGKey | None, data: BARTData, config: bart.BARTConfig, dart_config: DARTConfig,
         base=bart) -> DARTState:
    """The ``base`` kernel's first state (BART's stumps, :func:`~bdtree_jax.kernels.bart.init`)
    and :func:`init_sparsity`."""
    return DARTState(base.init(key, data, config), *init_sparsity(_tree_data(data).bins.shape[1], dart_config))


def init_sparsity(n_features: int, dart_config: DARTConfig) -> tuple[Array, Array]:
    """The starting ``(log_s (F,), theta ())``: ``s`` uniform over the ``F = n_features`` features,
    ``theta`` its fixed value, ``theta_init`` or ``rho``."""
    theta = dart_config.theta if dart_config.theta is not None else (
        dart_config.theta_init if dart_config.theta_init is not None else dart_config.rho_for(n_features))
    return jnp.full((n_features,), -np.log(n_features), jnp.float32), jnp.float32(theta)


def draw(key: PRNGKey, config: bart.BARTConfig, base=bart) -> DARTDraws:
    """The randomness of one sweep: the ``base`` kernel's (see :func:`bdtree_jax.kernels.bart.draw`)
    and a key for ``s`` and ``theta``."""
    k_bart, k_s = jax.random.split(key)
    return DARTDraws(base.draw(k_bart, config), k_s)


def step(key: PRNGKey, state: DARTState, data: BARTData, config: bart.BARTConfig,
         dart_config: DARTConfig, base=bart) -> tuple[DARTState, DARTInfo]:
    """One DART sweep (module docstring)."""
    return step_with_draws(draw(key, config, base), state, data, config, dart_config, base)


def step_with_draws(draws: DARTDraws, state: DARTState, data: BARTData, config: bart.BARTConfig,
                    dart_config: DARTConfig, base=bart) -> tuple[DARTState, DARTInfo]:
    """:func:`step` given its :func:`draw`: the ``base`` kernel's sweep (BART's by default) on
    ``data`` with the rule prior weighted by ``s``, then :func:`sparsity_step`."""
    bart_state, bart_info = base.step_with_draws(draws.bart, state.bart, weighted(data, state.log_s), config)
    state, s_accepted, theta_accepted = sparsity_step(draws.key, state._replace(bart=bart_state), dart_config, base)
    return state, DARTInfo(bart_info, s_accepted, theta_accepted)


def sparsity_step(key: PRNGKey, state: DARTState, dart_config: DARTConfig,
                  base=bart) -> tuple[DARTState, Array, Array]:
    """The ``s`` step then the ``theta`` steps given the trees (module docstring), after any update
    of ``state.bart``'s trees that targets their weighted rule prior (:func:`weighted`) with their
    cached log-priors under ``state.log_s``.  Reads the trees of ``state.bart`` (of the forest
    ``base.sparse_forest`` names, if ``base`` has it: :func:`_sparse_forest`; a CGMState with
    leading axis M) and writes their log-priors under the new ``s``; returns ``(state, s_accepted
    () bool, theta_accepted () float32)``.  Shared by :func:`step_with_draws` and the NumPyro tree
    sites (:class:`~bdtree_jax.numpyro.TreeGibbs`)."""
    k_s, k_theta = jax.random.split(key)
    forest = _sparse_forest(base, state.bart)
    log_s, trees, s_accepted = _s_step(k_s, state._replace(bart=forest), dart_config)
    if dart_config.theta is None:
        theta, theta_accepted = _theta_steps(k_theta, state.theta, log_s, dart_config)
    else:
        theta, theta_accepted = state.theta, jnp.float32(jnp.nan)
    return (DARTState(_with_sparse_forest(base, state.bart, forest._replace(trees=trees)), log_s, theta), s_accepted,
            theta_accepted)


def trace(state: DARTState, info: DARTInfo, config: bart.BARTConfig, base=bart) -> dict:
    """The ``base`` kernel's record (BART's, :func:`~bdtree_jax.kernels.bart.trace`) with
    ``split_probs`` (F,) ``s``, ``theta``, ``s_accepted`` and ``theta_accepted``."""
    out = base.trace(state.bart, info.bart, config)
    out.update(split_probs=jnp.exp(state.log_s), theta=state.theta, s_accepted=info.s_accepted.astype(jnp.float32),
               theta_accepted=info.theta_accepted)
    return out


@functools.lru_cache(maxsize=64)
def dart(config: bart.BARTConfig, dart_config: DARTConfig, base=None) -> SamplingAlgorithm:
    """DART as a :class:`SamplingAlgorithm` on :class:`~bdtree_jax.problem.bart.BARTData`, or,
    with ``base``, the sparse version of another BART kernel module: one with ``init``,
    ``step_with_draws``, ``trace`` and ``draw`` as :mod:`bdtree_jax.kernels.bart`'s, a
    :class:`~bdtree_jax.kernels.bart.BARTState` (or, where the module has ``sparse_forest`` and
    ``with_sparse_forest``, a state holding the forest that ``s`` weighs), and data with a
    ``tree_data`` field whose rule prior its sweep reads, or wrapping a BARTData (``data.bart`` or
    ``data.data``) (log-linear BART for counts, :mod:`bdtree_jax.kernels.bart_poisson`; survival
    BART, :mod:`bdtree_jax.kernels.bart_survival`; heteroskedastic BART, whose mean forest ``s``
    weighs, :mod:`bdtree_jax.kernels.bart_variance`, whose ``config`` is then its own; monotone
    BART, :class:`bdtree_jax.kernels.bart_monotone.MonotoneKernel`)."""
    base = bart if base is None else base

    def init_fn(key, data):
        check_supported(data, config)
        return init(key, data, config, dart_config, base)

    def step_fn(draws, state, data):
        return step_with_draws(draws, state, data, config, dart_config, base)

    def trace_fn(state, info):
        return trace(state, info, config, base)

    return SamplingAlgorithm(init_fn, step_fn, trace_fn, functools.partial(draw, config=config, base=base))


# ----------------------------------------------------------------------------------------------
# Simulation from the model (Geweke's test)


def prior_draw(key: PRNGKey, data: BARTData, config: bart.BARTConfig, dart_config: DARTConfig,
               base=bart) -> DARTState:
    """``theta`` from its prior (or fixed), ``s ~ Dirichlet(theta/p)``, then trees, leaves and
    ``sigma2`` from the ``base`` kernel's prior given ``s`` (BART's,
    :func:`~bdtree_jax.kernels.bart.prior_draw`; exact for the joint prior of the module docstring
    where the truncation never binds)."""
    n_features = _tree_data(data).bins.shape[1]
    k_theta, k_s, k_bart = jax.random.split(key, 3)
    if dart_config.theta is None:
        lam = jax.random.beta(k_theta, dart_config.a, dart_config.b)
        theta = jnp.maximum(dart_config.rho_for(n_features) * lam / (1.0 - lam), 1e-30)
    else:
        theta = jnp.float32(dart_config.theta)
    log_s = log_dirichlet_draw(k_s, jnp.full((n_features,), theta / n_features))
    trees = base.prior_draw(k_bart, weighted(data, log_s), config)
    return DARTState(trees, log_s, jnp.asarray(theta, jnp.float32))


def geweke_step(key: PRNGKey, state: DARTState, data: BARTData, config: bart.BARTConfig, dart_config: DARTConfig):
    """Geweke's successive-conditional simulator: ``y ~ p(y | state)``, then one sweep.  Returns
    ``(state, data with the new y, info)``."""
    k_y, k_sweep = jax.random.split(key)
    data = data._replace(y=bart.simulate_y(k_y, state.bart, data, config).astype(jnp.float32))
    state, info = step(k_sweep, state, data, config, dart_config)
    return state, data, info
