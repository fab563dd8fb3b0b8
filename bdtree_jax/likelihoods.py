"""Integrated (marginal) likelihoods of a tree from per-leaf sufficient statistics.

A likelihood is a frozen dataclass registered as a JAX pytree: its numeric hyperparameters are
leaves (so new values do not recompile anything) and its structure (e.g. the number of classes)
is static.  It travels inside :class:`~bdtree_jax.data.TreeData`.  It offers

* ``point_stats(y) -> (n, S)``: per-row statistics (host side, numpy);
* ``log_lik(stats, is_leaf) -> ()``: log marginal likelihood from node statistics (N, S);
* ``leaf_mean(stats) -> (..., P)``: posterior mean of the leaf parameter (class probabilities or
  the leaf mean), used for prediction;
* ``sample_leaf(key, stats)``: a draw of the leaf parameters from their conditional posterior.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import gammaln
from scipy.special import gammaln as scipy_gammaln

from ._gamma import gamma_draws, log_gamma_given
from ._types import Array
from ._validate import is_int

__all__ = ["DirichletMultinomial", "NormalMeanShift", "BARTLeafNormal", "BARTLeafPoissonGamma",
           "BARTLeafVarianceGamma", "default_normal_hyperparameters", "poisson_gamma_hyperparameters",
           "variance_gamma_hyperparameters"]


@functools.partial(
    jax.tree_util.register_dataclass, data_fields=["concentration", "log_gamma_tables"], meta_fields=["n_classes"]
)
@dataclass(frozen=True)
class DirichletMultinomial:
    """Classification: leaf class probabilities ``p ~ Dirichlet(concentration, ..., concentration)``.

    The integrated likelihood of the labels (in their observed order, all normalising constants
    kept) is, over leaves ``i`` with class counts ``n_ik``::

        prod_i Gamma(K a) / Gamma(a)^K * prod_k Gamma(n_ik + a) / Gamma(n_i + K a)

    (CGM98 §4; ``docs/theory/likelihoods.md``).
    """

    n_classes: int
    concentration: float = 1.0
    log_gamma_tables: Any = None  # (2, n+1): lgamma(c + a), lgamma(c + K a); see prepare()

    @property
    def n_stats(self) -> int:
        return self.n_classes

    def rows(self, stats: Array) -> Array:
        """Rows behind sufficient statistics ``stats`` (..., K) -> (...): the summed class counts."""
        return jnp.sum(stats, axis=-1)

    def prepare(self, n_rows: int) -> "DirichletMultinomial":
        """A copy for data of ``n_rows`` rows that reads ``lgamma`` of the (integer) class counts
        from two tables instead of evaluating it: same values (computed in float64), a fraction of
        the cost inside a sampler step."""
        counts = np.arange(n_rows + 1, dtype=np.float64)
        a, k = float(self.concentration), self.n_classes
        tables = np.stack([scipy_gammaln(counts + a), scipy_gammaln(counts + k * a)]).astype(np.float32)
        return DirichletMultinomial(self.n_classes, self.concentration, jax.device_put(tables))  # no compile

    def point_stats(self, codes: np.ndarray) -> np.ndarray:
        """One-hot rows (n, K) of class codes in ``0..K-1``."""
        return np.eye(self.n_classes, dtype=np.float32)[np.asarray(codes)]

    def leaf_log_lik(self, stats: Array) -> Array:
        """Log integrated likelihood of each node's labels, shape ``stats.shape[:-1]``."""
        a = self.concentration
        k = self.n_classes
        n = stats.sum(-1)
        const = gammaln(k * a) - k * gammaln(a)
        if self.log_gamma_tables is not None:
            counts, tables = stats.astype(jnp.int32), self.log_gamma_tables
            return const + tables[0][counts].sum(-1) - tables[1][n.astype(jnp.int32)]
        return const + gammaln(stats + a).sum(-1) - gammaln(n + k * a)

    def log_lik(self, stats: Array, is_leaf: Array) -> Array:
        """Sum over leaves; ``stats`` (N, K), ``is_leaf`` (N,) bool."""
        return jnp.sum(jnp.where(is_leaf, self.leaf_log_lik(stats), 0.0))

    def split_gain(self, stats: Array, is_leaf: Array, node: Array, left: Array) -> Array:
        """``log_lik`` after splitting leaf ``node`` into ``left`` and the rest, minus before, for
        every candidate: ``left`` (..., K) -> (...,).  ``stats`` (N, K), ``is_leaf`` (N,)."""
        del is_leaf  # the likelihood factorises over leaves
        total = stats[node]
        return self.leaf_log_lik(left) + self.leaf_log_lik(total - left) - self.leaf_log_lik(total)

    def leaf_mean(self, stats: Array) -> Array:
        """Posterior mean class probabilities (..., K)."""
        a = self.concentration
        return (stats + a) / (stats.sum(-1, keepdims=True) + self.n_classes * a)

    def sample_leaf(self, key: Array, stats: Array) -> Array:
        """Class probabilities (..., K) drawn from the leaf's Dirichlet posterior."""
        return jax.random.dirichlet(key, stats + self.concentration)

    def point_log_lik(self, params: Array, codes: Array) -> Array:
        """log p(y_i | leaf probabilities) for rows with parameters ``params`` (n, K)."""
        return jnp.log(jnp.take_along_axis(params, codes[:, None], axis=1)[:, 0])


class _PowerSums:
    """What the normal leaf models share: a row's point statistics are ``[1, r, r**2]`` of its
    (centred) response ``r``, so a node's are its row count and the sums of ``r`` and ``r**2``."""

    @property
    def n_stats(self) -> int:
        return 3

    def rows(self, stats: Array) -> Array:
        """Rows behind sufficient statistics ``stats`` (..., 3) -> (...): the first column."""
        return stats[..., 0]

    def prepare(self, n_rows: int):
        """Nothing to precompute (see :meth:`DirichletMultinomial.prepare`)."""
        return self


@functools.partial(
    jax.tree_util.register_dataclass, data_fields=["nu", "lam", "a", "mu_bar", "scale"], meta_fields=[]
)
@dataclass(frozen=True)
class NormalMeanShift(_PowerSums):
    """Regression: CGM98's conjugate mean-shift model, computed on a standardised response.

    ``y | leaf i ~ N(mu_i, sigma^2)``, ``mu_i | sigma ~ N(mu_bar, sigma^2 / a)``,
    ``(sigma / scale)^2 ~ IG(nu/2, nu*lam/2)``: every computation reads the standardised response
    ``z = (y - mu_bar) / scale`` (``scale`` > 0, y's units; ``lam`` is in ``z``'s squared units,
    i.e. y's ``lam * scale**2``), so float32 holds the statistics whatever y's units (a ``y`` of
    scale ``1e20`` squares beyond float32's range, one of ``1e-20`` below it).  The model is that of
    CGM98 with ``lam_y = lam * scale**2``; with ``scale = 1`` (the default) the two coincide.
    :func:`~bdtree_jax.problem.build_problem` sets ``scale = sd(y)`` and ``lam = lam_y / sd(y)**2``,
    so the prior, the posterior over trees and (up to float32 rounding) the draws do not depend
    on y's units.  With ``b`` leaves, ``s_i`` the within-leaf sum of squares of ``z`` and
    ``t_i = n_i a/(n_i+a) zbar_i^2`` (CGM98 eq. 14; ``docs/theory/likelihoods.md``)::

        log p(Z|X,T) = -n/2 log(pi) + nu/2 log(nu lam) + lgamma((n+nu)/2) - lgamma(nu/2)
                       + sum_i 1/2 log(a/(n_i+a)) - (n+nu)/2 log(sum_i (s_i+t_i) + nu lam)

    the density of ``z`` (y's is ``log p(Z|X,T) - n log(scale)``, the same for every tree; the
    posteriors report y's).
    Rows carry ``[1, z, z^2]`` so that ``s_i + t_i = S2 - S1^2/(n_i + a)``.  :meth:`leaf_mean` and
    :meth:`sample_leaf` give leaf means in y's units; :meth:`posterior_sigma2` gives
    ``(sigma / scale)^2``.
    """

    nu: float
    lam: float
    a: float
    mu_bar: float
    scale: float = 1.0

    def point_stats(self, y: np.ndarray) -> np.ndarray:
        """``[1, z, z^2]`` rows (n, 3) float32 of ``z = (y - mu_bar) / scale`` (float64 first)."""
        r = (np.asarray(y, float) - self.mu_bar) / self.scale
        return np.stack([np.ones_like(r), r, r * r], axis=1).astype(np.float32)

    def leaf_log_lik(self, stats: Array) -> Array:
        """Log marginal likelihood of each node's rows *with its own* ``sigma^2`` (the same
        conjugate prior applied to one leaf: CGM98's mean-variance shift model), shape
        ``stats.shape[:-1]``.  This is the leaf-factorised score BCART-PCFG needs; the pooled
        ``sigma`` of :meth:`log_lik` does not factorise over leaves."""
        n_i, s1, s2 = stats[..., 0], stats[..., 1], stats[..., 2]
        a, nu, lam = self.a, self.nu, self.lam
        q = jnp.maximum(s2 - s1 * s1 / (n_i + a), 0.0)
        return (
            -0.5 * n_i * jnp.log(jnp.pi) + 0.5 * (jnp.log(a) - jnp.log(n_i + a)) + 0.5 * nu * jnp.log(nu * lam)
            + gammaln(0.5 * (n_i + nu)) - gammaln(0.5 * nu) - 0.5 * (n_i + nu) * jnp.log(q + nu * lam)
        )

    def log_lik(self, stats: Array, is_leaf: Array) -> Array:
        """``stats`` (N, 3) node statistics, ``is_leaf`` (N,) bool."""
        n_i, s1, s2 = stats[:, 0], stats[:, 1], stats[:, 2]
        a, nu, lam = self.a, self.nu, self.lam
        q = jnp.where(is_leaf, s2 - s1 * s1 / (n_i + a), 0.0)
        r = jnp.where(is_leaf, 0.5 * (jnp.log(a) - jnp.log(n_i + a)), 0.0)
        n = jnp.sum(jnp.where(is_leaf, n_i, 0.0))
        const = (
            -0.5 * n * jnp.log(jnp.pi)
            + 0.5 * nu * jnp.log(nu * lam)
            + gammaln(0.5 * (n + nu))
            - gammaln(0.5 * nu)
        )
        return const + r.sum() - 0.5 * (n + nu) * jnp.log(jnp.maximum(q.sum(), 0.0) + nu * lam)

    def split_gain(self, stats: Array, is_leaf: Array, node: Array, left: Array) -> Array:
        """``log_lik`` after splitting leaf ``node`` into ``left`` and the rest, minus before, for
        every candidate: ``left`` (..., 3) -> (...,).  The pooled ``sigma`` couples the leaves, so
        the change goes through the sums over leaves of ``q_i`` and ``log(a/(n_i+a))``."""
        a, nu, lam = self.a, self.nu, self.lam
        q = lambda st: st[..., 2] - st[..., 1] ** 2 / (st[..., 0] + a)  # noqa: E731
        r = lambda st: 0.5 * (jnp.log(a) - jnp.log(st[..., 0] + a))  # noqa: E731
        n = jnp.sum(jnp.where(is_leaf, stats[:, 0], 0.0))
        q_sum = jnp.sum(jnp.where(is_leaf, q(stats), 0.0))
        total = stats[node]
        right = total - left
        q_new = q_sum - q(total) + q(left) + q(right)
        r_change = r(left) + r(right) - r(total)
        return r_change - 0.5 * (n + nu) * (
            jnp.log(jnp.maximum(q_new, 0.0) + nu * lam) - jnp.log(jnp.maximum(q_sum, 0.0) + nu * lam)
        )

    def leaf_mean(self, stats: Array) -> Array:
        """Posterior mean of the leaf mean in y's units, shape (..., 1)."""
        return self.mu_bar + self.scale * (stats[..., 1:2] / (stats[..., 0:1] + self.a))

    def posterior_sigma2(self, key: Array, stats: Array, is_leaf: Array) -> Array:
        """A draw of ``(sigma / scale)^2`` (the standardised response's noise variance; y's
        ``sigma`` is ``scale`` times its root) from its marginal posterior given the tree, shape ()."""
        n_i, s1, s2 = stats[:, 0], stats[:, 1], stats[:, 2]
        q = jnp.sum(jnp.where(is_leaf, s2 - s1 * s1 / (n_i + self.a), 0.0))
        n = jnp.sum(jnp.where(is_leaf, n_i, 0.0))
        shape = 0.5 * (n + self.nu)
        rate = 0.5 * (jnp.maximum(q, 0.0) + self.nu * self.lam)
        return rate / jax.random.gamma(key, shape)

    def sample_leaf(self, key: Array, stats: Array, sigma2: Array) -> Array:
        """Leaf means (..., 1) in y's units drawn from ``N(mu_bar + scale S1/(n+a), scale^2
        sigma2/(n+a))``, ``sigma2`` the standardised noise variance (:meth:`posterior_sigma2`)."""
        n = stats[..., 0:1]
        z = jax.random.normal(key, n.shape)
        s = self.scale
        return self.mu_bar + s * (stats[..., 1:2] / (n + self.a)) + s * jnp.sqrt(sigma2 / (n + self.a)) * z


def default_normal_hyperparameters(y: np.ndarray, *, nu=None, lam=None, a=None, mu_bar=None, quantile=0.9):
    """Data-based defaults for :class:`NormalMeanShift` (only the ``None`` arguments are filled).

    * ``mu_bar = mean(y)``;
    * ``nu = 3``;
    * ``lam`` such that the prior puts probability ``quantile`` (0.9) on ``sigma^2 <= var(y)``:
      ``lam = var(y) * chi2_{nu}^{-1}(1 - quantile) / nu`` (the calibration of Chipman et al. 2010);
    * ``a = 1/3`` (CGM98's suggestion; the prior sd of a leaf mean is ``sigma * sqrt(3)``).
    """
    from scipy.stats import chi2

    y = np.asarray(y, float)
    mu_bar = float(np.mean(y)) if mu_bar is None else float(mu_bar)
    nu = 3.0 if nu is None else float(nu)
    if lam is None:
        var = float(np.var(y)) if np.var(y) > 0 else 1.0
        lam = var * float(chi2.ppf(1.0 - quantile, nu)) / nu
    a = 1.0 / 3.0 if a is None else float(a)
    return dict(nu=nu, lam=float(lam), a=a, mu_bar=mu_bar)


class _ConjugateNormalLeaves:
    """What the BART leaf models with a normal leaf value share, given a subclass's ``_rows(stats)``
    (the log marginal's row-additive part, the same for every grouping of the rows), ``_shrink(stats)``
    (its grouping-dependent part, 0 for an empty leaf) and ``leaf_posterior(stats)`` (mean and sd
    of the leaf value): the log marginals, the split gain and the leaf-value draws.  ``stats``
    (..., K) are a node's sufficient statistics (K = ``n_stats``)."""

    def leaf_log_lik(self, stats: Array) -> Array:
        """Log marginal of each node's residuals, shape ``stats.shape[:-1]`` (0 if empty)."""
        return self._rows(stats) + self._shrink(stats)

    def log_lik(self, stats: Array, is_leaf: Array) -> Array:
        """Sum of :meth:`leaf_log_lik` over leaves; ``stats`` (N, K), ``is_leaf`` (N,) bool.  The
        row-additive part is taken from the leaves' summed statistics (one term)."""
        total = jnp.sum(jnp.where(is_leaf[:, None], stats, 0.0), axis=0)
        return self._rows(total) + jnp.sum(jnp.where(is_leaf, self._shrink(stats), 0.0))

    def split_gain(self, stats: Array, is_leaf: Array, node: Array, left: Array) -> Array:
        """``leaf_log_lik(left) + leaf_log_lik(right) - leaf_log_lik(node)`` for every candidate
        ``left`` (..., K) -> (...,) (the row-additive part cancels exactly)."""
        del is_leaf  # factorises over leaves (sigma2 and any row weights fixed within a tree update)
        total = stats[node]
        return self._shrink(left) + self._shrink(total - left) - self._shrink(total)

    def leaf_mean(self, stats: Array) -> Array:
        """Posterior mean of the leaf value, shape (..., 1)."""
        return self.leaf_posterior(stats)[0][..., None]

    def sample_leaf(self, key: Array, stats: Array) -> Array:
        """Leaf values (..., 1) drawn from their conditional posterior."""
        mean, sd = self.leaf_posterior(stats)
        return (mean + sd * jax.random.normal(key, mean.shape))[..., None]

    def draw_values(self, stats: Array, z: Array) -> Array:
        """Leaf values ``mean + sd z`` (N,) of a tree's nodes ``stats`` (N, K) given standard
        normals ``z`` (N,): BART's backfitting draw (:func:`~bdtree_jax.kernels.bart._kernel_sweep`)."""
        mean, sd = self.leaf_posterior(stats)
        return mean + sd * z


@functools.partial(jax.tree_util.register_dataclass, data_fields=["sigma2", "tau2"], meta_fields=[])
@dataclass(frozen=True)
class BARTLeafNormal(_ConjugateNormalLeaves, _PowerSums):
    """One tree's leaves in BART's Bayesian backfitting (:mod:`bdtree_jax.kernels.bart`).

    The rows are the partial residuals ``r_i`` of the tree; in a leaf ``r_i ~ N(mu, sigma2)``
    independently given the leaf value ``mu ~ N(0, tau2)`` (centred at 0: the model rescales
    ``y``).  ``sigma2`` is held fixed during a tree update (Gibbs), so the integrated likelihood
    factorises over leaves.  A leaf's residuals are multivariate normal with covariance
    ``sigma2 I + tau2 11^T``; from ``(n, S = sum r, S2 = sum r**2)``::

        log p(r) = -n/2 log(2 pi sigma2) - S2 / (2 sigma2)                     # same for every tree
                   - 1/2 log(1 + n tau2/sigma2) + tau2 S**2 / (2 sigma2 (sigma2 + n tau2))

    (Chipman, George & McCulloch 2010, in precision form).  Both numbers are
    pytree leaves: a new ``sigma2`` every tree update recompiles nothing.  ``point_stats`` are
    ``[1, r, r**2]``.
    """

    sigma2: float
    tau2: float

    def point_stats(self, r) -> np.ndarray:
        """``[1, r, r**2]`` rows (n, 3) float32 (host side; jitted code stacks them from the residuals)."""
        r = np.asarray(r, float)
        return np.stack([np.ones_like(r), r, r * r], axis=1).astype(np.float32)

    def _shrink(self, stats: Array) -> Array:
        """The part of the leaf log marginal that depends on how rows are grouped into leaves:
        ``-1/2 log(1 + n tau2/sigma2) + tau2 S**2 / (2 sigma2 (sigma2 + n tau2))``.  The rest
        (``-n/2 log(2 pi sigma2) - S2/(2 sigma2)``) is additive over rows and cancels in every
        split gain; keeping it apart avoids float32 cancellation."""
        n, s1 = stats[..., 0], stats[..., 1]
        s2, t2 = self.sigma2, self.tau2
        return self._log_det(n) + 0.5 * t2 * s1 * s1 / (s2 * (s2 + n * t2))

    def _log_det(self, n: Array) -> Array:
        """``-1/2 log(1 + n tau2/sigma2)`` of a leaf of ``n`` rows."""
        return -0.5 * jnp.log1p(n * self.tau2 / self.sigma2)

    def marginal_terms(self, n: Array) -> tuple[Array, Array]:
        """The row-count parts ``(log_a, b)`` (each ``n.shape``) of the grouping-dependent leaf log
        marginal (:meth:`_shrink`): a leaf of ``n`` rows whose residuals sum to ``S`` has
        ``log_a + b S**2``.  BART's grow-prune sweep computes them before it knows ``S``."""
        s2, t2 = self.sigma2, self.tau2
        return self._log_det(n), 0.5 * t2 / (s2 * (s2 + n * t2))

    def _rows(self, stats: Array) -> Array:
        n, sq = stats[..., 0], stats[..., 2]
        return -0.5 * n * jnp.log(2.0 * jnp.pi * self.sigma2) - 0.5 * sq / self.sigma2

    def leaf_posterior(self, stats: Array) -> tuple[Array, Array]:
        """Mean and sd of ``mu | r`` in each node, each ``stats.shape[:-1]``: precision
        ``1/tau2 + n/sigma2``, mean ``(S/sigma2) / precision``."""
        n, s1 = stats[..., 0], stats[..., 1]
        precision = self._precision(n)
        return s1 / self.sigma2 / precision, jax.lax.rsqrt(precision)

    def _precision(self, n: Array) -> Array:
        """``1/tau2 + n/sigma2``: the precision of ``mu`` given a leaf's ``n`` residuals."""
        return 1.0 / self.tau2 + n / self.sigma2

    def posterior_factors(self, n: Array) -> tuple[Array, Array]:
        """``(1 / (sigma2 precision), 1 / sqrt(precision))``, each ``n.shape``: in a leaf of
        ``n`` rows whose residuals sum to ``S``, ``mu | r`` has mean ``S`` times the first and sd
        the second (:meth:`leaf_posterior` from the row counts alone)."""
        precision = self._precision(n)
        return 1.0 / (self.sigma2 * precision), jax.lax.rsqrt(precision)


@functools.partial(jax.tree_util.register_dataclass, data_fields=["sigma2", "tau2"], meta_fields=[])
@dataclass(frozen=True)
class BARTLeafWeightedNormal(_ConjugateNormalLeaves):
    """One tree's leaves when each row has its own precision weight and basis: given the other
    trees, row ``i``'s partial residual is ``r_i ~ N(b_i mu, sigma2 / w_i)`` with ``mu ~ N(0, tau2)``
    the value of its leaf.  ``w_i = 1, b_i = 1`` is :class:`BARTLeafNormal`; per-row ``w_i`` are
    a variance forest's (heteroskedastic BART: ``sigma2 / w_i`` the row's variance), per-row
    ``b_i`` a treatment forest's basis (BCF: ``tau(x) b_z``).

    Point statistics ``[1, w b**2, w b r, w r**2]`` (n, 4): a node's are its row count ``n`` and
    ``B = sum w b**2``, ``S = sum w b r``, ``Q = sum w r**2``.  ``mu | rows`` has precision
    ``P = 1/tau2 + B/sigma2`` and mean ``(S/sigma2)/P``; the leaf's log marginal is::

        log p(r) = sum_i [1/2 log(w_i / (2 pi sigma2))] - Q / (2 sigma2)       # same for every tree
                   - 1/2 log(1 + tau2 B/sigma2) + S**2 / (2 sigma2**2 P)

    :meth:`leaf_log_lik` and :meth:`log_lik` (:class:`_ConjugateNormalLeaves`, from :meth:`_rows`
    and :meth:`_shrink`) leave out ``1/2 sum log w_i``, which no grouping of
    the rows changes (it cancels in every ratio a tree sampler reads).  ``sigma2`` and ``tau2`` are
    pytree leaves: new values recompile nothing.
    """

    sigma2: float
    tau2: float
    #: The columns besides the count whose node sums the split gain and the leaf draw read (``Q``
    #: is row-additive: BART's grow-prune sweep does not sum it).
    sweep_columns = (1, 2)

    @property
    def n_stats(self) -> int:
        return 4

    def rows(self, stats: Array) -> Array:
        """Rows behind sufficient statistics ``stats`` (..., 4) -> (...): the first column."""
        return stats[..., 0]

    def prepare(self, n_rows: int):
        """Nothing to precompute (see :meth:`DirichletMultinomial.prepare`)."""
        return self

    @staticmethod
    def row_stats(r: Array, w: Array, b: Array) -> Array:
        """``[1, w b**2, w b r, w r**2]`` (n, 4) float32 of residuals, weights and bases, each (n,)."""
        wb = w * b
        return jnp.stack([jnp.ones_like(r), wb * b, wb * r, w * r * r], axis=-1).astype(jnp.float32)

    def _precision(self, big_b: Array) -> Array:
        """``1/tau2 + B/sigma2``: the precision of ``mu`` given a leaf's rows."""
        return 1.0 / self.tau2 + big_b / self.sigma2

    def _shrink(self, stats: Array) -> Array:
        """The grouping-dependent part of the leaf log marginal,
        ``-1/2 log(1 + tau2 B/sigma2) + S**2 / (2 sigma2**2 P)`` (0 for an empty leaf)."""
        big_b, s = stats[..., 1], stats[..., 2]
        return -0.5 * jnp.log1p(self.tau2 * big_b / self.sigma2) + 0.5 * s * s / (
            self.sigma2 * self.sigma2 * self._precision(big_b))

    def _rows(self, stats: Array) -> Array:
        n, q = stats[..., 0], stats[..., 3]
        return -0.5 * n * jnp.log(2.0 * jnp.pi * self.sigma2) - 0.5 * q / self.sigma2

    def leaf_posterior(self, stats: Array) -> tuple[Array, Array]:
        """Mean and sd of ``mu | r`` in each node, each ``stats.shape[:-1]``."""
        precision = self._precision(stats[..., 1])
        return stats[..., 2] / self.sigma2 / precision, jax.lax.rsqrt(precision)


@functools.partial(jax.tree_util.register_dataclass, data_fields=["a0", "b0"], meta_fields=[])
@dataclass(frozen=True)
class BARTLeafPoissonGamma:
    """One tree's leaves in log-linear BART for counts (Murray 2021; :mod:`bdtree_jax.kernels.bart_poisson`).

    Given the other trees, row ``i`` of the tree has count ``y_i ~ Poisson(r_i lambda)`` with
    ``r_i`` its exposure times the other trees' multiplicative effects and ``lambda`` its leaf's
    effect, ``lambda ~ Gamma(a0, b0)`` (shape, rate).  Point statistics ``[1, y, r]``; a leaf
    with sums ``(n, Sy, Sr)`` integrates ``lambda`` out in closed form::

        log p(y) = a0 log b0 - lgamma(a0) + lgamma(a0 + Sy) - (a0 + Sy) log(b0 + Sr)
                   + sum_i (y_i log r_i - lgamma(y_i + 1))                # same for every tree

    The last sum does not depend on how the rows are grouped into leaves, nor does ``Sy`` summed
    over the leaves: :meth:`leaf_log_lik` and :meth:`log_lik` give ``log p(y) + Sy`` without the
    last sum (what cancels in every ratio a tree sampler reads; an empty leaf contributes 0),
    written with ``A = a0 + Sy``, ``B = b0 + Sr`` and Stirling's remainder
    ``h(x) = lgamma(x) - (x - 1/2) log x + x - log(2 pi)/2`` as::

        A log(A / B) - a0 log(a0 / b0) - 1/2 log(A / a0) + h(A) - h(a0)

    so that float32 keeps a split gain at large counts (``lgamma(A)`` and ``A log B`` are each
    ~ ``A log A``, 1e6 at ``Sy = 1e5``, where float32's spacing is 0.06; their difference
    ``A log(A / B)`` is small where the leaf's rate is near the other trees').
    ``lambda | rows ~ Gamma(a0 + Sy, b0 + Sr)``; the trees store ``log lambda``.  ``a0``, ``b0``
    are pytree leaves (new values recompile nothing).
    """

    a0: float
    b0: float
    #: The columns besides the count whose node sums the split gain and the leaf draw read.
    sweep_columns = (1, 2)

    @property
    def n_stats(self) -> int:
        return 3

    @property
    def tau2(self) -> Array:
        """The prior variance of ``log lambda``: ``trigamma(a0)``."""
        return jax.scipy.special.polygamma(1, jnp.asarray(self.a0, jnp.float32))

    def rows(self, stats: Array) -> Array:
        """Rows behind sufficient statistics ``stats`` (..., 3) -> (...): the first column."""
        return stats[..., 0]

    def prepare(self, n_rows: int):
        """Nothing to precompute (see :meth:`DirichletMultinomial.prepare`)."""
        return self

    def point_stats(self, y, rate=None) -> np.ndarray:
        """``[1, y, r]`` rows (n, 3) float32 of counts ``y`` and rates ``r`` (default 1; host side)."""
        y = np.asarray(y, float)
        r = np.ones_like(y) if rate is None else np.broadcast_to(np.asarray(rate, float), y.shape)
        return np.stack([np.ones_like(y), y, r], axis=1).astype(np.float32)

    def leaf_log_lik(self, stats: Array) -> Array:
        """Grouping-dependent log marginal of each node's counts (class docstring), shape
        ``stats.shape[:-1]``."""
        a, b = self.a0, self.b0
        shape, rate = self.leaf_posterior(stats)
        return (shape * jnp.log(shape / rate) - a * jnp.log(a / b) - 0.5 * jnp.log(shape / a)
                + _stirling_remainder(shape) - _stirling_remainder(a))

    def log_lik(self, stats: Array, is_leaf: Array) -> Array:
        """Sum of :meth:`leaf_log_lik` over leaves; ``stats`` (N, 3), ``is_leaf`` (N,) bool."""
        return jnp.sum(jnp.where(is_leaf, self.leaf_log_lik(stats), 0.0))

    def split_gain(self, stats: Array, is_leaf: Array, node: Array, left: Array) -> Array:
        """``leaf_log_lik(left) + leaf_log_lik(right) - leaf_log_lik(node)`` for every candidate
        ``left`` (..., 3) -> (...,)."""
        del is_leaf  # factorises over leaves (the other trees fixed within a tree update)
        total = stats[node]
        return self.leaf_log_lik(left) + self.leaf_log_lik(total - left) - self.leaf_log_lik(total)

    def leaf_posterior(self, stats: Array) -> tuple[Array, Array]:
        """Shape and rate ``(a0 + Sy, b0 + Sr)`` of ``lambda | rows``, each ``stats.shape[:-1]``.
        ``Sy`` and ``Sr`` are sums of non-negative rows, taken as at least 0: the samplers get a
        child's sums as its node's minus its sibling's, which float32 can take below 0 by up to the
        node's rounding when the node's sum is large (a rate of 1e8 has a spacing of 8), and a
        negative rate would make the leaf's likelihood and draw NaN."""
        return self.a0 + jnp.maximum(stats[..., 1], 0.0), self.b0 + jnp.maximum(stats[..., 2], 0.0)

    def leaf_mean(self, stats: Array) -> Array:
        """Posterior mean of ``log lambda`` (``digamma(shape) - log(rate)``), shape (..., 1)."""
        shape, rate = self.leaf_posterior(stats)
        return (jax.scipy.special.digamma(shape) - jnp.log(rate))[..., None]

    def draw_values(self, stats: Array, draws) -> Array:
        """``log lambda`` (N,) of a tree's nodes ``stats`` (N, 3) drawn from ``Gamma(a0 + Sy, b0 + Sr)``
        given ``draws`` (:class:`~bdtree_jax._gamma.GammaDraws` of shape (N,);
        :func:`~bdtree_jax._gamma.log_gamma_given`: exact for small shapes too)."""
        shape, rate = self.leaf_posterior(stats)
        return log_gamma_given(draws, shape) - jnp.log(rate)

    def sample_leaf(self, key: Array, stats: Array) -> Array:
        """Leaf values ``log lambda`` (..., 1) drawn from their conditional posterior."""
        return self.draw_values(stats, gamma_draws(key, stats.shape[:-1]))[..., None]


@functools.partial(jax.tree_util.register_dataclass, data_fields=["a0", "b0"], meta_fields=[])
@dataclass(frozen=True)
class BARTLeafVarianceGamma(BARTLeafPoissonGamma):
    """One tree's leaves in a variance forest (heteroskedastic BART: HBART, Pratola, Chipman,
    George & McCulloch 2020; stochtree's variance forest; :mod:`bdtree_jax.kernels.bart_variance`).

    The noise variance is ``sigma2(x) = sigma0**2 / prod_j lambda_j(x)``: each tree's leaf carries
    a precision factor ``lambda ~ Gamma(a0, b0)`` (shape, rate), i.e. a variance factor
    ``s = 1/lambda ~ InvGamma(a0, b0)``; the trees store ``log lambda``.  Given the mean forest's
    residuals ``e_i`` and the other variance trees (precision ``h_i`` = their product), row ``i``
    of the tree has ``e_i ~ N(0, sigma0**2 / (h_i lambda))``; with ``v_i = h_i e_i**2 / sigma0**2``
    a leaf's ``lambda`` integrates out in closed form::

        log p(e) = sum_i 1/2 log(h_i / (2 pi sigma0**2))                  # same for every tree
                   + a0 log b0 - lgamma(a0) + lgamma(a0 + n/2) - (a0 + n/2) log(b0 + V/2)

    (``V = sum v_i``) and ``lambda | rows ~ Gamma(a0 + n/2, b0 + V/2)``.  That is
    :class:`BARTLeafPoissonGamma`'s algebra with a count ``1/2`` and a rate ``v_i / 2`` per row:
    point statistics ``[1, 1/2, v/2]`` (:meth:`row_stats`), so :meth:`leaf_log_lik` (the log
    marginal without the first sum, plus ``n/2``; 0 for an empty leaf), :meth:`log_lik`,
    :meth:`split_gain`, :meth:`leaf_posterior` and :meth:`draw_values` (``log lambda``) are
    inherited.  Prior calibration: :func:`variance_gamma_hyperparameters`.
    """

    #: The shape reads the row count (``n/2``, not the sum of the 1/2 column): only ``V/2`` is summed.
    sweep_columns = (2,)

    def leaf_posterior(self, stats: Array) -> tuple[Array, Array]:
        """Shape and rate ``(a0 + n/2, b0 + V/2)`` of ``lambda | rows``, each ``stats.shape[:-1]`` (``V/2``
        taken as at least 0, as :meth:`BARTLeafPoissonGamma.leaf_posterior`)."""
        return self.a0 + 0.5 * stats[..., 0], self.b0 + jnp.maximum(stats[..., 2], 0.0)

    @staticmethod
    def row_stats(v: Array) -> Array:
        """``[1, 1/2, v/2]`` (n, 3) float32 of the scaled squared residuals ``v`` (n,)."""
        one = jnp.ones_like(v)
        return jnp.stack([one, 0.5 * one, 0.5 * v], axis=-1).astype(jnp.float32)

    def point_stats(self, v, rate=None) -> np.ndarray:
        """``[1, 1/2, v/2]`` rows (n, 3) float32 (host side; ``rate`` unused)."""
        v = np.asarray(v, float)
        return np.stack([np.ones_like(v), np.full_like(v, 0.5), 0.5 * v], axis=1).astype(np.float32)


def variance_gamma_hyperparameters(n_trees: int, scale: float = 1.5) -> tuple[float, float]:
    """``(a0, b0)`` of a variance forest's leaves, ``lambda ~ Gamma(a0, b0)``, as stochtree
    calibrates its variance forest (Murray 2021, §5): ``a0 = n_trees / scale**2 + 1/2``,
    ``b0 = n_trees / scale**2``.  Then ``E[log lambda] = digamma(a0) - log(b0) = O(1/a0**2)`` (a
    forest of stumps centres ``sigma2(x)`` at ``sigma0**2``) and ``var(log lambda) =
    trigamma(a0) ~ 1/a0``: the sum of ``n_trees`` trees' ``log lambda`` has prior sd about
    ``scale`` (1.5: ``sigma(x)`` within a factor ``exp(1.5) = 4.5`` of ``sigma0`` with 95% prior
    probability)."""
    if not is_int(n_trees) or n_trees < 1:
        raise ValueError(f"n_trees must be an integer >= 1; got {n_trees!r}.")
    if not np.isfinite(scale) or scale <= 0:
        raise ValueError(f"scale must be a finite number > 0; got {scale!r}.")
    b0 = float(n_trees) / float(scale) ** 2
    return b0 + 0.5, b0


def _stirling_remainder(x: Array) -> Array:
    """``lgamma(x) - (x - 1/2) log x + x - log(2 pi)/2`` (x > 0): its asymptotic series
    ``1/(12x) - 1/(360x^3) + 1/(1260x^5)`` from 10 on (error < 1e-10), else from ``lgamma``."""
    x = jnp.asarray(x, jnp.float32)
    big = x >= 10.0
    xb = jnp.where(big, x, 10.0)
    inv, inv2 = 1.0 / xb, 1.0 / (xb * xb)
    series = inv * (1.0 / 12.0 - inv2 * (1.0 / 360.0 - inv2 / 1260.0))
    xs = jnp.where(big, 1.0, x)
    direct = gammaln(xs) - (xs - 0.5) * jnp.log(xs) + xs - 0.5 * np.log(2.0 * np.pi)
    return jnp.where(big, series, direct)


def poisson_gamma_hyperparameters(tau: float) -> tuple[float, float]:
    """``(a0, b0)`` of the leaves' ``lambda ~ Gamma(a0, b0)`` such that ``log lambda`` has prior
    mean 0 and sd ``tau``: ``trigamma(a0) = tau**2`` (solved by Newton's method on ``log a0``,
    float64) and ``b0 = exp(digamma(a0))``."""
    from scipy.special import digamma, polygamma

    if not np.isfinite(tau) or tau <= 0:
        raise ValueError(f"tau must be a finite number > 0; got {tau!r}.")
    target = float(tau) ** 2
    log_a = -np.log(target) if target < 1 else 0.0  # trigamma(a) ~ 1/a + 1/(2 a^2)
    for _ in range(100):
        a = np.exp(log_a)
        step = (polygamma(1, a) - target) / (polygamma(2, a) * a)
        log_a -= step
        if abs(step) < 1e-13:
            break
    a0 = float(np.exp(log_a))
    return a0, float(np.exp(digamma(a0)))
