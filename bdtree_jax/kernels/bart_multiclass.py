"""Multinomial logistic BART for K >= 3 classes: Murray's log-linear BART (2021, JASA 116,
"Log-linear Bayesian additive regression trees for multinomial logistic and count regression
models", §3), one forest per class, each sampled by the counts sweep of
:mod:`bdtree_jax.kernels.bart_poisson`.

Model (:mod:`bdtree_jax.problem.bart_multiclass`)::

    P(y_i = k | x_i) = lambda_k(x_i) / sum_j lambda_j(x_i),
    log lambda_k(x) = offset_k + sum_{m=1..M} g(x; T_km, log lambda_km),   lambda_km ~ Gamma(a0, b0)

Data augmentation (Murray 2021, eq. 3.3): with ``Lambda_i = sum_j lambda_j(x_i)`` and
``1 / Lambda_i = int_0^inf exp(-phi Lambda_i) dphi``, the joint density of a label and a latent
``phi_i > 0`` is::

    p(y_i, phi_i | lambda) = prod_k lambda_k(x_i)^{y_ik} exp(-phi_i lambda_k(x_i)),   y_ik = 1[y_i = k]

so ``phi_i | y, lambda ~ Gamma(1, Lambda_i)`` (shape 1, rate ``Lambda_i``: an exponential; the shape
is the number of trials, 1 for one label), and given ``phi`` the classes' forests are independent,
class ``k``'s seeing the Poisson-form likelihood of the counts ``y_ik`` with exposure ``phi_i`` --
log-linear BART for counts with ``log_exposure_i = log phi_i + offset_k``.  One sweep (exact Gibbs):
draw ``phi`` given every class's current fit, then the counts sweep of every class, the K classes
in turn (``jax.lax.map`` of :func:`bdtree_jax.kernels.bart_poisson.step_with_draws` over a class
axis, or ``jax.vmap``: :data:`CLASS_LOOP`), with no copy of the counts sweep.

State: a :class:`~bdtree_jax.kernels.bart.BARTState` with a leading class axis K on every field
(``trees`` (K, M, ...), ``leaf_values`` (K, M, N), ``fit`` (K, n) each class's sum of trees).  The
model is invariant to adding one function to every ``log lambda_k``; the prior on all K forests
makes the posterior proper (Murray's full parameterisation; the probabilities are identified).

Trace per sweep (:func:`trace`): ``train_accuracy``, ``train_log_lik`` (categorical), ``train_rmse``
(root of the multiclass Brier score / K), ``fit_mean``, ``fit_sd`` (of ``log lambda`` over classes
and training rows) and the tree summaries over all K x M trees; the recorded trees and leaf values
are (K * M, N), class-major (class ``k``'s trees ``k*M : (k+1)*M``).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp

from .._types import Array, PRNGKey
from ..problem.bart_multiclass import BARTMulticlassData
from ..problem.bart_poisson import BARTPoissonData
from ..tree import leaf_nodes, n_leaves
from . import bart, bart_poisson
from .bart import BARTConfig, BARTInfo, BARTState, SweepDraws
from .base import SamplingAlgorithm, with_config

__all__ = ["ClassKernel", "MulticlassDraws", "bart_multiclass", "class_data", "class_probs", "draw",
           "geweke_step", "init", "multiclass_config", "prior_draw", "simulate_y", "step", "step_with_draws", "trace"]

multiclass_config = bart_poisson.poisson_config


class MulticlassDraws(NamedTuple):
    """The randomness of one sweep: ``phi_key`` for the latents ``phi`` (n,), ``classes`` the
    :func:`bdtree_jax.kernels.bart_poisson.draw` of every class (SweepDraws with leading axis K)."""

    phi_key: Array
    classes: SweepDraws


def _n_classes(data: BARTMulticlassData) -> int:
    return int(data.offsets.shape[0])


def draw(key: PRNGKey, config: BARTConfig, n_classes: int) -> MulticlassDraws:
    """One sweep's randomness (:class:`MulticlassDraws`): ``key`` split once into the latents' key
    and one key per class."""
    keys = jax.random.split(key, n_classes + 1)
    return MulticlassDraws(keys[0], jax.vmap(lambda k: bart_poisson.draw(k, config))(keys[1:]))


def class_data(data: BARTMulticlassData, log_phi: Array) -> BARTPoissonData:
    """Every class's counts problem given ``log phi`` (n,): ``y`` (K, n) the indicators
    ``1[y_i = k]``, ``log_exposure`` (K, n) ``log phi_i + offset_k``, ``offset`` (K,); the tree data
    shared (no class axis)."""
    K = _n_classes(data)
    y = (data.y[None, :] == jnp.arange(K, dtype=data.y.dtype)[:, None]).astype(jnp.float32)
    log_exposure = (log_phi[None, :] + data.offsets[:, None]).astype(jnp.float32)
    return BARTPoissonData(data.tree_data, y, log_exposure, data.offsets, jnp.float32(1.0), data.feature_bins)


#: vmap axes of :func:`class_data`'s result: the class axis on y, log_exposure and offset.
_CLASS_AXES = BARTPoissonData(None, 0, 0, 0, None, None)


def class_probs(offsets: Array, fit: Array) -> Array:
    """(K, n) ``softmax_k(offset_k + fit_k)`` of the class fits ``fit`` (K, n)."""
    return jax.nn.softmax(offsets[:, None] + fit, axis=0)


def init(key: PRNGKey | None, data: BARTMulticlassData, config: BARTConfig) -> BARTState:
    """Every class's trees stumps with ``log lambda = 0`` (:func:`bdtree_jax.kernels.bart_poisson.init`
    broadcast over the K classes)."""
    one = bart_poisson.init(key, class_data(data, jnp.zeros(data.y.shape, jnp.float32))._replace(
        y=jnp.zeros(data.y.shape, jnp.float32)), config)
    K = _n_classes(data)
    return jax.tree.map(lambda a: jnp.broadcast_to(a, (K,) + jnp.shape(a)), one)


def draw_log_phi(key: PRNGKey, state: BARTState, data: BARTMulticlassData) -> Array:
    """(n,) ``log phi_i``, ``phi_i ~ Gamma(1, sum_k lambda_k(x_i))`` (shape 1, rate): an Exp(1)
    variate over the rate, in logs (``log E - logsumexp_k(offset_k + fit_k)``)."""
    e = jax.random.exponential(key, data.y.shape, jnp.float32)
    return jnp.log(e) - jax.nn.logsumexp(data.offsets[:, None] + state.fit, axis=0)


def step(key: PRNGKey, state: BARTState, data: BARTMulticlassData, config: BARTConfig) -> tuple[BARTState, BARTInfo]:
    """One sweep (module docstring)."""
    return step_with_draws(draw(key, config, _n_classes(data)), state, data, config)


def step_with_draws(draws: MulticlassDraws, state: BARTState, data: BARTMulticlassData,
                    config: BARTConfig) -> tuple[BARTState, BARTInfo]:
    """:func:`step` given its :func:`draw`: ``phi`` given the fits, then every class's counts sweep."""
    per_class = class_data(data, draw_log_phi(draws.phi_key, state, data))
    if CLASS_LOOP == "vmap":  # noqa: SIM108
        sweep = jax.vmap(lambda d, s, c: bart_poisson.step_with_draws(d, s, c, config), in_axes=(0, 0, _CLASS_AXES))
        state, info = sweep(draws.classes, state, per_class)
    else:
        def one(args):
            d, s, y, log_exposure, offset = args
            return bart_poisson.step_with_draws(d, s, per_class._replace(y=y, log_exposure=log_exposure, offset=offset),
                                                config)

        state, info = jax.lax.map(one, (draws.classes, state, per_class.y, per_class.log_exposure, per_class.offset))
    return state, _info(state, info, data)


#: How a sweep runs the K classes' counts sweeps on the same kernel: "map" one class after another
#: (``jax.lax.map``: each a counts sweep as it runs alone), or "vmap" batched over the class axis
#: (where the counts sweep's ``lax.cond`` branches become selects that run both).  On a 2-core CPU
#: (under load, n = 150 and 2,000, 50 trees per class, benchmarks/bart_multiclass_speed.py) "map"
#: cost 3.1-3.2 counts sweeps and "vmap" 2.6-4.5; the same draws give the same chain either way.
CLASS_LOOP = "map"


def _info(state: BARTState, info: BARTInfo, data: BARTMulticlassData) -> BARTInfo:
    """The sweep's record over the classes: accepted (K * M,), categorical fit statistics."""
    eta = data.offsets[:, None] + state.fit  # (K, n) log lambda
    log_p = jax.nn.log_softmax(eta, axis=0)
    K, n = eta.shape
    onehot = data.y[None, :] == jnp.arange(K, dtype=data.y.dtype)[:, None]
    log_lik = jnp.sum(jnp.where(onehot, log_p, 0.0))
    accuracy = jnp.mean((jnp.argmax(eta, axis=0) == data.y).astype(jnp.float32))
    brier = jnp.mean(jnp.sum((jnp.exp(log_p) - onehot) ** 2, axis=0)) / K
    nan = jnp.float32(jnp.nan)
    return BARTInfo(info.accepted.reshape(-1), nan, jnp.sqrt(brier), log_lik, accuracy, jnp.mean(eta), jnp.std(eta))


def _flat(state: BARTState) -> BARTState:
    """The class axis merged into the tree axis: trees (K * M, ...), class-major."""
    flat = lambda a: a.reshape((-1,) + a.shape[2:])  # noqa: E731
    return state._replace(trees=jax.tree.map(flat, state.trees), leaf_values=flat(state.leaf_values),
                          can_split=None if state.can_split is None else flat(state.can_split))


def trace(state: BARTState, info: BARTInfo, config: BARTConfig) -> dict:
    """The per-iteration record (module docstring)."""
    out = {k: v for k, v in bart.trace(_flat(state), info, config).items() if k not in ("sigma", "train_rmse",
                                                                                        "train_log_lik")}
    return dict(train_accuracy=info.train_accuracy, train_log_lik=info.train_log_lik, train_rmse=info.train_rmse,
                fit_mean=info.fit_mean, fit_sd=info.fit_sd, **out)


@functools.lru_cache(maxsize=64)
def bart_multiclass(config: BARTConfig, n_classes: int) -> SamplingAlgorithm:
    """Multiclass log-linear BART as a :class:`SamplingAlgorithm` on :class:`BARTMulticlassData`
    of ``n_classes`` classes (for :func:`bdtree_jax.driver.run_chains`); cached per configuration."""
    bart_poisson._check(config)
    return with_config(init, step_with_draws, trace, draw, config, n_classes=n_classes)


# ----------------------------------------------------------------------------------------------
# Simulation from the model (prior draws, Geweke's successive-conditional simulator)


def prior_draw(key: PRNGKey, data: BARTMulticlassData, config: BARTConfig) -> BARTState:
    """Every class's forest from the prior (:func:`bdtree_jax.kernels.bart_poisson.prior_draw`),
    one key per class from one split."""
    per_class = class_data(data, jnp.zeros(data.y.shape, jnp.float32))
    keys = jax.random.split(key, _n_classes(data))
    return jax.vmap(lambda k, c: bart_poisson.prior_draw(k, c, config), in_axes=(0, _CLASS_AXES))(keys, per_class)


def simulate_y(key: PRNGKey, state: BARTState, data: BARTMulticlassData) -> Array:
    """Labels ``y_i ~ Categorical(softmax_k(offset_k + fit_k(x_i)))`` (n,) int32."""
    logits = data.offsets[:, None] + state.fit
    return jax.random.categorical(key, logits, axis=0).astype(jnp.int32)


def geweke_step(key: PRNGKey, state: BARTState, data: BARTMulticlassData, config: BARTConfig):
    """One step of Geweke's (2004) successive-conditional simulator: ``y ~ p(y | state)``, then one
    sweep given it.  Returns ``(state, data with the new y, info)``."""
    k_y, k_sweep = jax.random.split(key)
    data = data._replace(y=simulate_y(k_y, state, data))
    state, info = step(k_sweep, state, data, config)
    return state, data, info


def n_leaves_mean(state: BARTState) -> Array:
    """() mean leaves per tree over every class's trees."""
    t = _flat(state).trees.tree
    return jnp.mean(jax.vmap(n_leaves)(t).astype(jnp.float32))


def leaf_log_lambda_sum(state: BARTState) -> Array:
    """() sum of ``log lambda`` over every leaf of every tree."""
    t = _flat(state).trees.tree
    return jnp.sum(jnp.where(jax.vmap(leaf_nodes)(t), _flat(state).leaf_values, 0.0))


@dataclasses.dataclass(frozen=True)
class ClassKernel:
    """This module's kernel functions for ``n_classes`` classes (``draw`` bound to it): the ``base``
    of :func:`bdtree_jax.kernels.dart.dart` for sparse multiclass BART (one ``s`` shared by the K
    forests: a feature's splits in every class count towards it).  Hashable by ``n_classes``, so
    the kernels built on it are cached."""

    n_classes: int
    init = staticmethod(init)
    step_with_draws = staticmethod(step_with_draws)
    trace = staticmethod(trace)
    prior_draw = staticmethod(prior_draw)

    def draw(self, key: PRNGKey, config: BARTConfig) -> MulticlassDraws:
        return draw(key, config, self.n_classes)
