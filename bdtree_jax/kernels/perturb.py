"""Perturb: Pratola (2016)'s rule perturbation (as in OpenBT), derived for this library's CGM98 prior.

Derivation: ``docs/theory/perturb.md``.  The proposal is OpenBT's; **the acceptance ratio
is ours**, derived for the truncated CGM98 prior of :mod:`bdtree_jax.priors` (split probability
``p_s``, valid-cut intervals ``[lo, hi)`` from each node's rows and ``min_leaf_size``, rule
``1/k(η) · w_v[c] / W_v(η)`` with ``k(η)`` the features with a valid cut at ``η``, ``w_v`` the
``split_prior`` cut weights, ``W_v(η) = sum_{c in [lo_v, hi_v)} w_v[c]``).

One step acts on a :class:`~bdtree_jax.kernels.cgm.CGMState` ``T`` (target ``p(T) L(T)^β``, ``β``
the state's inverse temperature) and keeps its shape (the internal nodes never change):

* pick an internal node ``η`` uniformly among the ``I`` internal nodes (``I`` is the same in ``T``
  and ``T'``, so this factor cancels);
* with probability ``p_change_var`` a **change of variable**, else a **cut perturbation** (the
  choice does not depend on the state, so it cancels too).

``η``'s rows, hence its ``lo, hi`` and ``k(η)``, depend only on its ancestors' rules and are
unchanged by the move; what changes is ``η``'s rule factor and the prior factors of the nodes
below ``η`` (their rows, valid-cut intervals, ``k`` and leaf factors change with the partition).
The proposed tree is re-scored in full (:func:`~bdtree_jax.kernels._moves.score`), whose
``log_prior`` is the whole prior: a node left without a valid rule (a child below
``min_leaf_size`` rows, a rule outside its node's interval) or a cut box gives ``-inf`` -> rejected.

**Cut perturbation.**  Keep ``v``; with ``n = hi - lo`` the number of valid cuts of ``v`` at ``η``
and ``h = max(1, round(width · n / 2))``, the window of a cut ``x`` is
``W(x) = [max(lo, x - h), min(hi - 1, x + h)]`` (clipped to the valid cuts; it contains ``x``) and
``c'`` is uniform on ``W(c)``.  ``c' in W(c)`` iff ``c in W(c')`` (both are in ``[lo, hi)``, the
same ``h``), so ``q(T|T') / q(T'|T) = |W(c)| / |W(c')|`` and::

    α = min{1, (L(T')/L(T))^β · p(T')/p(T) · |W(c)| / |W(c')|}

``p(T')/p(T)`` contains ``w_v[c'] / w_v[c]`` at ``η`` (1 for ``split_prior="uniform"``) and the
changed factors of ``η``'s descendants (OpenBT leaves this prior term out; under the CGM98 prior
the descendants' ``k``, ``W`` and validity change with ``c``, so it is needed).

**Change of variable.**  ``v'`` uniform among the ``k(η) - 1`` *other* features with a valid cut at
``η`` (our prior has no correlation matrix between predictors, so OpenBT's correlation-weighted
choice and its subtree swap for negative correlation do not apply; the uniform choice is
symmetric), and ``c'`` from the prior's cut distribution of ``v'`` at ``η``, ``w_v'[c'] / W_v'(η)``.
The reverse move picks ``v`` among the same ``k(η) - 1`` features and draws ``c`` the same way::

    q(T|T') / q(T'|T) = (w_v[c] / W_v) / (w_v'[c'] / W_v')
    p(T')/p(T) = (w_v'[c'] / W_v') / (w_v[c] / W_v) · D        (η's p_s and 1/k(η) cancel)
    α = min{1, (L(T')/L(T))^β · D}

with ``D`` the prior ratio of ``η``'s descendants.  The code evaluates it as
``Δ log p - (log p_rule(v', c') - log p_rule(v, c))`` (:func:`~bdtree_jax.priors.log_rule_prob`).
If ``v`` is the only feature with a valid cut at ``η`` the move stays (a null move).

**Pinball prior** (``structure="pinball"``, :mod:`bdtree_jax.priors`).  The move keeps the tree's
shape, so ``p_size(K)`` and every shape factor ``p_shape(k_L | k)`` are unchanged and there are no
leaf factors: ``p(T')/p(T)`` is the ratio of the rule factors (``η``'s and its descendants'), and
both ratios above hold as written.  The code uses the full ``log p(T') - log p(T)`` of
:func:`~bdtree_jax.priors.log_tree_prior` either way (tested against enumeration in
``tests/test_pinball.py``).

**Adaptive width** (:func:`adapt`).  ``width`` is OpenBT's ``pertalpha``; the state carries
``log width`` and the number of iterations done, ``t`` (saturating at ``num_warmup``).  During
warm-up only (``t < num_warmup`` and ``adapt=True``), after every cut perturbation whose window
holds more than one cut, a Robbins–Monro step towards the acceptance target (0.44)::

    log width <- clip(log width + (t + 1)^(-0.6) · (accepted - 0.44), log 1e-3, log 2)

(a larger window lowers the acceptance).  From iteration ``num_warmup`` on the width is frozen,
so the post-warm-up chain is a fixed kernel, reversible w.r.t. ``p(T) L(T)^β`` for any width;
keep only post-warm-up draws when adapting.  ``width = 2`` makes every window the whole interval.

**Categorical features and missing values** (docs/categorical-missing.md; decided statically
from the data).  ``η``'s availability is then its ordered features' cut intervals and its
categorical features' level sets (the same in ``T`` and ``T'``), and in both moves the
missing-value bit (when the tree has them) is redrawn from its prior ``Bernoulli(1/2)``:
``q(b' | b) = q(b | b') = 1/2``, a symmetric factor.

* *Rule perturbation of a categorical* ``v``: with ``E`` the node's available levels of ``v`` but
  the smallest (``m = |E| >= 1``; the left set ``S`` is a non-empty subset of ``E``), choose
  ``h = min(m, max(1, round(width m / 2)))`` levels of ``E`` uniformly (each ``h``-subset with
  probability ``1 / C(m, h)``) and move each to the other side: ``S' = S xor H``.  The reverse
  move picks the same ``H`` with the same probability (``m`` and ``h`` are the same at ``T'``), so
  the proposal is symmetric; an ``S'`` that is empty has prior 0 and is rejected.  Such a
  proposal is informative (for the adaptation) when ``m > 1``.
* *Change of variable*: ``v'`` uniform among the other features with an available rule (an
  ordered cut, or >= 2 levels), its rule (cut, or level set uniform over the ``2^(k-1) - 1``
  partitions) and bit from the rule prior given ``v'``; the ratio above, with ``p_rule`` of
  :func:`~bdtree_jax.priors.categorical.log_rule_prob_general`.

A step's randomness (:func:`draw` with ``general_rules``) is then six uniforms (node, kind,
feature, cut, accept, missing bit) and a key (the levels a categorical perturbation moves, a new
level set).

**Composition** (:func:`with_perturb`): one step of a base sampler whose state is a
``CGMState`` (CGM, and later WU or PG) then one perturb step per iteration; each leaves the
target invariant.  The composed state :class:`PerturbState` carries ``log_lik`` and ``beta`` at
its top level, so :func:`~bdtree_jax.kernels.tempering.tempered` wraps it (each rung adapts and
keeps its own width).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .._types import Array, PRNGKey
from ..data import TreeData
from ..priors import check_valid_cuts
from ..priors.categorical import categorical, general_rules, rule_available
from ..tree import Rule, rule_at
from . import cgm
from ._moves import change_rule, draw_prior_rule, log_prior_rule, pick, score
from .base import SamplingAlgorithm

__all__ = [
    "PerturbConfig", "PerturbState", "PerturbInfo", "draw", "init", "propose", "step_with_uniforms", "adapt",
    "with_perturb",
]

KINDS = ("cut", "change_var")
_LOG_WIDTH_MIN, _LOG_WIDTH_MAX = float(np.log(1e-3)), float(np.log(2.0))
_GAIN_EXPONENT = 0.6


@dataclass(frozen=True)
class PerturbConfig:
    """Static configuration of the perturb move (each field's meaning below it)."""

    max_depth: int
    """The tree prior's depth bound (as :class:`~bdtree_jax.kernels.cgm.CGMConfig`)."""
    min_leaf_size: int = 1
    """The tree prior's least rows per leaf (as :class:`~bdtree_jax.kernels.cgm.CGMConfig`)."""
    p_change_var: float = 0.1
    """Probability of a change-of-variable move (else a cut perturbation)."""
    width: float = 0.1
    """Initial window width in (0, 2] (OpenBT's ``pertalpha``): a node with ``n`` valid cuts moves
    its cut by at most ``max(1, round(width n / 2))`` cuts."""
    num_warmup: int = 0
    """Iterations during which the width adapts (0: never)."""
    adapt: bool = True
    """Adapt the width during warm-up (False: a fixed ``width``)."""
    target_accept: float = 0.44
    """The cut perturbations' acceptance rate the adaptation aims at."""
    trace_dtypes: tuple = ("int32", "int32")
    """Integer types of the recorded trees (as CGM's)."""
    general_rules: bool = False
    """The data have categorical features or missing values (the steps' draws, :func:`draw`)."""

    def __post_init__(self):
        def is_int(v):
            return isinstance(v, (int, np.integer)) and not isinstance(v, bool)

        if not is_int(self.max_depth) or self.max_depth < 1:
            raise ValueError(f"max_depth must be an integer >= 1; got {self.max_depth!r}.")
        if not is_int(self.min_leaf_size) or self.min_leaf_size < 1:
            raise ValueError(f"min_leaf_size must be an integer >= 1; got {self.min_leaf_size!r}.")
        if not isinstance(self.p_change_var, (int, float, np.floating)) or not 0.0 <= self.p_change_var <= 1.0:
            raise ValueError(f"p_change_var must be a number in [0, 1]; got {self.p_change_var!r}.")
        if not isinstance(self.width, (int, float, np.floating)) or not 0.0 < self.width <= 2.0:
            raise ValueError(f"perturb width must be a number in (0, 2]; got {self.width!r}.")
        if not is_int(self.num_warmup) or self.num_warmup < 0:
            raise ValueError(f"num_warmup must be an integer >= 0; got {self.num_warmup!r}.")
        if not isinstance(self.adapt, (bool, np.bool_)):
            raise ValueError(f"adapt must be True or False; got {self.adapt!r}.")
        if not isinstance(self.target_accept, (int, float, np.floating)) or not 0.0 < self.target_accept < 1.0:
            raise ValueError(f"target_accept must be a number in (0, 1); got {self.target_accept!r}.")
        for name in ("max_depth", "min_leaf_size", "num_warmup"):
            object.__setattr__(self, name, int(getattr(self, name)))
        for name in ("p_change_var", "width", "target_accept"):
            object.__setattr__(self, name, float(getattr(self, name)))
        object.__setattr__(self, "adapt", bool(self.adapt))
        object.__setattr__(self, "general_rules", bool(self.general_rules))
        object.__setattr__(self, "trace_dtypes", tuple(self.trace_dtypes))

    @classmethod
    def from_cgm(cls, config: cgm.CGMConfig, **kw) -> "PerturbConfig":
        """The perturb config sharing ``config``'s prior structure, trace types and rules."""
        return cls(config.max_depth, config.min_leaf_size, trace_dtypes=config.trace_dtypes,
                   general_rules=config.general_rules, **kw)

    @property
    def cgm(self) -> cgm.CGMConfig:
        return cgm.CGMConfig(self.max_depth, self.min_leaf_size, trace_dtypes=self.trace_dtypes,
                             general_rules=self.general_rules)


class PerturbState(NamedTuple):
    """Chain state of :func:`with_perturb`.

    Attributes
    ----------
    base : the base sampler's state (a :class:`~bdtree_jax.kernels.cgm.CGMState`).
    iteration : () int32 iterations done, saturating at ``num_warmup``.
    log_width : () float32 log of the current window width.
    log_lik : () float32 ``base.log_lik`` (untempered; read by tempering).
    beta : () float32 the chain's inverse temperature (tempering swaps it; it is pushed into
        ``base`` before every step).
    """

    base: Any
    iteration: Array
    log_width: Array
    log_lik: Array
    beta: Array


class PerturbInfo(NamedTuple):
    """Per-step diagnostics: ``kind`` () int32 index into :data:`KINDS` (-1: no move: no internal
    node, or no other feature for a change of variable), ``accepted`` () bool,
    ``log_accept_ratio`` () float32, ``informative`` () bool: a cut perturbation whose window holds
    more than one cut (the proposals the adaptation counts)."""

    kind: Array
    accepted: Array
    log_accept_ratio: Array
    informative: Array


def draw(key: PRNGKey, general_rules: bool = False):
    """The randomness of one perturb step: (5,) uniforms (node, kind, feature, cut, accept); with
    ``general_rules`` (6,) uniforms (those and the missing-value bit) and a key, from one split."""
    if not general_rules:
        return jax.random.uniform(key, (5,))
    k_uniform, k_rule = jax.random.split(key)
    return jax.random.uniform(k_uniform, (6,)), k_rule


def _window(x: Array, lo: Array, hi: Array, half: Array) -> tuple[Array, Array]:
    """First cut and size of the window of half-width ``half`` around cut ``x``, clipped to ``[lo, hi)``."""
    first = jnp.maximum(lo, x - half)
    return first, jnp.minimum(hi - 1, x + half) - first + 1


def _log_window_ratio(size_old: Array, size_new: Array) -> Array:
    """``log q(T|T') - log q(T'|T)`` of a cut perturbation: ``log |W(c)| - log |W(c')|``."""
    return jnp.log(size_old.astype(jnp.float32)) - jnp.log(size_new.astype(jnp.float32))


def _log_prior_ratio(state: cgm.CGMState, proposed: cgm.CGMState) -> Array:
    """``log p(T') - log p(T)`` (``-inf`` when ``T'`` is outside the prior's support)."""
    return proposed.log_prior - state.log_prior


def _unpack(mask: Array) -> Array:
    """(W,) uint32 -> (32 W,) bool."""
    return (((mask[:, None] >> jnp.arange(32, dtype=jnp.uint32)) & 1) == 1).reshape(-1)


def _pack(on: Array) -> Array:
    """(32 W,) bool -> (W,) uint32."""
    shaped = on.reshape(-1, 32).astype(jnp.uint32)
    return jnp.sum(shaped << jnp.arange(32, dtype=jnp.uint32), axis=-1, dtype=jnp.uint32)


def _lowest(mask: Array) -> Array:
    """(W,) uint32: the lowest set bit of the (W,) mask (0 where empty)."""
    on = _unpack(mask)
    first = jnp.argmax(on)
    return _pack(on & (jnp.arange(on.shape[0]) == first))


def _flip_levels(key, avail: Array, width: Array) -> tuple[Array, Array]:
    """The levels a categorical perturbation moves: ``h`` of the ``m`` levels of ``avail`` (W,)
    but the smallest, uniformly (the ``h`` smallest of i.i.d. uniform priorities).  Returns the
    (W,) mask of the moved levels and ``m``."""
    on = _unpack(avail & ~_lowest(avail))
    m = on.sum().astype(jnp.int32)
    h = jnp.clip(jnp.round(width * m.astype(jnp.float32) / 2).astype(jnp.int32), 1, jnp.maximum(m, 1))
    prio = jnp.where(on, jax.random.uniform(key, on.shape), 2.0)
    idx = jnp.arange(on.shape[0])
    before = (prio[None, :] < prio[:, None]) | ((prio[None, :] == prio[:, None]) & (idx[None, :] < idx[:, None]))
    rank = before.sum(axis=1)
    return _pack(on & (rank < h)), m


def propose(draws, state: cgm.CGMState, width: Array, data: TreeData, config: PerturbConfig):
    """The proposal of one perturb step (see the module docstring) from :func:`draw`'s ``draws``.

    Returns
    -------
    proposed : CGMState of ``T'`` (re-scored).
    log_ratio : () float32 ``log α`` before the ``min`` (``-inf`` if impossible).
    kind : () int32 index into :data:`KINDS`, -1 if no move is possible.
    informative : () bool, see :class:`PerturbInfo`.
    """
    general = general_rules(data)
    uniforms, key = draws if general else (draws, None)
    u_node, u_kind, u_feature, u_cut = uniforms[0], uniforms[1], uniforms[2], uniforms[3]
    tree = state.tree
    internal = tree.is_split
    has_internal = jnp.any(internal)
    node = pick(internal, u_node)
    rule = rule_at(tree, node)
    v, c = rule.feature.astype(jnp.int32), rule.cut.astype(jnp.int32)
    lo, hi = state.lo[node], state.hi[node]  # (F,): η's rows, the same in T and T'
    levels = None if state.levels is None else state.levels[node]  # (F, W)
    change_var = u_kind < config.p_change_var
    nan_bits = tree.nan_left is not None
    u_nan = uniforms[5] if general else None

    # rule perturbation on v: an ordered cut in its window ...
    lo_v, hi_v = lo[v], hi[v]
    half = jnp.maximum(1, jnp.round(width * (hi_v - lo_v).astype(jnp.float32) / 2).astype(jnp.int32))
    first, size = _window(c, lo_v, hi_v, half)
    c_cut = jnp.minimum(first + jnp.floor(u_cut * size).astype(jnp.int32), first + size - 1)
    _, size_new = _window(c_cut, lo_v, hi_v, half)
    log_q_perturb = _log_window_ratio(size, size_new)
    informative = size > 1
    perturbed = Rule(v, c_cut, (u_nan < 0.5) if nan_bits else None, rule.levels_left)
    # ... or h levels of a categorical rule moved to the other side (symmetric)
    if levels is not None:
        is_cat = categorical(data)[v]
        flip, m = _flip_levels(jax.random.fold_in(key, 2), levels[v], width)
        perturbed = perturbed._replace(cut=jnp.where(is_cat, 0, c_cut),
                                       levels_left=jnp.where(is_cat, rule.levels_left ^ flip, rule.levels_left))
        log_q_perturb = jnp.where(is_cat, 0.0, log_q_perturb)
        informative = jnp.where(is_cat, m > 1, informative)

    # change of variable: another feature with an available rule at η, its rule from the prior
    others = rule_available(lo, hi, levels) & (jnp.arange(lo.shape[0]) != v)
    v_new = pick(others, u_feature)
    only = jnp.arange(lo.shape[0]) == v_new
    drawn = draw_prior_rule(u_feature, u_cut, u_nan, None if key is None else jax.random.fold_in(key, 3),
                            jnp.where(only, lo, 0), jnp.where(only, hi, 0),
                            None if levels is None else jnp.where(only[:, None], levels, 0), data, nan_bits)
    new_rule = jax.tree.map(lambda a, b: jnp.where(change_var, a, b), drawn, perturbed)
    proposed = score(change_rule(tree, node, new_rule), data, config.cgm, state.beta)
    proposed = proposed._replace(leaf_id=proposed.leaf_id.astype(state.leaf_id.dtype))

    log_q_var = log_prior_rule(lo, hi, levels, rule, data) - log_prior_rule(lo, hi, levels, drawn, data)
    log_q = jnp.where(change_var, log_q_var, log_q_perturb)
    log_ratio = state.beta * (proposed.log_lik - state.log_lik) + _log_prior_ratio(state, proposed) + log_q
    possible = has_internal & (~change_var | jnp.any(others))
    log_ratio = jnp.where(possible & ~jnp.isnan(log_ratio), log_ratio, -jnp.inf)
    kind = jnp.where(possible, change_var.astype(jnp.int32), -1)
    return proposed, log_ratio, kind, possible & ~change_var & informative


def step_with_uniforms(draws, state: cgm.CGMState, width: Array, data: TreeData, config: PerturbConfig):
    """One perturb MH step on a CGMState at window ``width`` (fixed) from :func:`draw`'s
    ``draws``; returns the new CGMState and a :class:`PerturbInfo`."""
    proposed, log_ratio, kind, informative = propose(draws, state, width, data, config)
    accepted = jnp.log((draws[0] if general_rules(data) else draws)[4]) < log_ratio
    new_state = jax.tree.map(lambda a, b: jnp.where(accepted, a, b), proposed, state)
    return new_state, PerturbInfo(kind, accepted, log_ratio, informative)


def adapt(iteration: Array, log_width: Array, info: PerturbInfo, config: PerturbConfig) -> tuple[Array, Array]:
    """The warm-up adaptation (module docstring): the next ``(iteration, log_width)``."""
    adapting = config.adapt & (iteration < config.num_warmup) & info.informative
    gain = (iteration.astype(jnp.float32) + 1.0) ** (-_GAIN_EXPONENT)
    step = gain * (info.accepted.astype(jnp.float32) - config.target_accept)
    new = jnp.clip(log_width + step, _LOG_WIDTH_MIN, _LOG_WIDTH_MAX)
    return (
        jnp.minimum(iteration + 1, config.num_warmup).astype(jnp.int32),
        jnp.where(adapting, new, log_width).astype(jnp.float32),
    )


def init(base_state: cgm.CGMState, config: PerturbConfig) -> PerturbState:
    """The composed state around ``base_state`` at the initial width."""
    return PerturbState(base_state, jnp.int32(0), jnp.float32(np.log(config.width)), base_state.log_lik,
                        jnp.asarray(base_state.beta, jnp.float32))


@functools.lru_cache(maxsize=64)
def with_perturb(algorithm: SamplingAlgorithm | cgm.CGMConfig,
                 config: PerturbConfig | None = None) -> SamplingAlgorithm:
    """One step of ``algorithm`` then one perturb step per iteration (module docstring).

    Parameters
    ----------
    algorithm : a :class:`SamplingAlgorithm` whose state is a
        :class:`~bdtree_jax.kernels.cgm.CGMState` (e.g. :func:`~bdtree_jax.kernels.cgm.cgm`), or a
        :class:`~bdtree_jax.kernels.cgm.CGMConfig` (the CGM sampler with that config).
    config : PerturbConfig; required with an algorithm, default ``PerturbConfig.from_cgm(config)``
        (fixed width 0.1, no warm-up) with a CGMConfig.

    Recorded per iteration: the base sampler's trace plus ``perturb_accepted`` and
    ``perturb_width`` (the width after the iteration's adaptation).  Wrap the result, not the
    base, in :func:`~bdtree_jax.kernels.tempering.tempered`.
    """
    if isinstance(algorithm, cgm.CGMConfig):
        if config is None:
            config = PerturbConfig.from_cgm(algorithm)
        algorithm = cgm.cgm(algorithm)
    elif not isinstance(algorithm, SamplingAlgorithm):
        raise TypeError(f"with_perturb needs a SamplingAlgorithm or a CGMConfig; got {type(algorithm).__name__}.")
    if not isinstance(config, PerturbConfig):
        raise TypeError(f"with_perturb needs a PerturbConfig with an algorithm; got {config!r}.")

    def init_fn(key, data):
        check_valid_cuts(data, "The perturb move (proposal='cgm+perturb')")
        return init(algorithm.init(key, data), config)

    def draw_fn(key):
        k1, k2 = jax.random.split(key)
        return (algorithm.draw(k1) if algorithm.draw is not None else k1), draw(k2, config.general_rules)

    def kernel(uniforms, state, data):
        u_base, u_perturb = uniforms
        base, base_info = algorithm.step(u_base, state.base._replace(beta=state.beta), data)
        base, info = step_with_uniforms(u_perturb, base, jnp.exp(state.log_width), data, config)
        iteration, log_width = adapt(state.iteration, state.log_width, info, config)
        return PerturbState(base, iteration, log_width, base.log_lik, state.beta), (base_info, info)

    def trace_fn(state, info):
        out = dict(algorithm.trace(state.base, info[0]))
        out["perturb_accepted"] = info[1].accepted
        out["perturb_width"] = jnp.exp(state.log_width)
        return out

    return SamplingAlgorithm(init_fn, kernel, trace_fn, draw_fn)
