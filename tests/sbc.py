"""Calibration checks of the continuous quantities of the hard-tree samplers (issue #38): Geweke's
(2004) "getting it right" test and simulation-based calibration (Talts et al. 2018) helpers.

What is here (``docs/theory/calibration.md`` explains the method and its tolerances):

* the statistics: :func:`batch_means_se`, :func:`geweke_z` (successive-conditional mean minus
  marginal-conditional mean over the two standard errors), :func:`z_bound` (the Bonferroni-style
  tolerance), :func:`sbc_ranks` and :func:`rank_uniformity` (chi-square on binned ranks);
* an exact joint prior of (tree, sigma^2, leaf values, y) on a tiny problem, simulated in numpy
  *without* the library's samplers: :class:`JointPrior` (trees drawn from the enumerated prior of
  :func:`bdtree_jax.exact.enumerate_trees`, rows routed to leaves by a plain numpy descent);
* the test functions of a draw (:func:`draw_stats`): numbers of leaves, depth, the thresholds of
  the root and its left child, sigma^2, and the leaf values at fixed rows (the fitted function
  there, i.e. the posterior predictive's mean), computed by the same numpy code for the
  simulator's draws and for the sampler's;
* :func:`single_tree_geweke`: the successive-conditional simulator around any single-tree kernel:
  ``tree -> kernel steps given y -> (sigma^2, leaf values) | tree, y`` by the library's posterior
  draw (:func:`bdtree_jax.posterior._leaf_draws._sample_leaf_params`, what ``Posterior.predict`` uses)
  ``-> y | tree, leaves, sigma``, vectorised over chains with ``jax.vmap``;
* :func:`bart_geweke` (BART's own ``geweke_step`` from exact prior draws, numeric or
  categorical / missing inputs via :class:`MixedTreeTable`), :func:`smc_evidence_check` (the
  unbiasedness of SMC's evidence estimate and weights, ``p(y)`` by enumeration) and
  :func:`tempered_check` (every rung started at an exact draw of its tempered posterior);
* :func:`planted`: a planted error run beside the correct sampler in one compiled program.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
from scipy import stats as sps
from scipy.special import logsumexp

from bdtree_jax.data import TreeData, make_split_grid
from bdtree_jax.exact import enumerate_trees
from bdtree_jax.likelihoods import DirichletMultinomial, NormalMeanShift
from bdtree_jax.posterior._leaf_draws import _sample_leaf_params


def _leaf_keys(key):
    """The (k_leaf, k_sigma) of :func:`_sample_leaf_params` from one draw's key, as the posterior
    splits it."""
    k_leaf, _, k_sigma = jax.random.split(key, 3)
    return k_leaf, k_sigma
from bdtree_jax.priors import TreePrior, make_tree_data, node_stats
from bdtree_jax.tree import Tree, from_string

# ----------------------------------------------------------------------------------------------
# statistics


def batch_means_se(x: np.ndarray, n_batches: int) -> np.ndarray:
    """Standard error of the grand mean of ``x`` (chains, iterations, k) by batch means: every
    chain cut into ``n_batches`` consecutive batches, the se is ``sd(batch means) / sqrt(B)`` over
    all ``B = chains * n_batches`` batches, shape (k,).  Valid when a batch is much longer than the
    chain's autocorrelation time."""
    c, t, k = x.shape
    t = (t // n_batches) * n_batches
    batches = x[:, :t].reshape(c * n_batches, t // n_batches, k).mean(1)
    return batches.std(0, ddof=1) / np.sqrt(len(batches))


def geweke_z(sc: np.ndarray, mc: np.ndarray, n_batches: int = 10) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Geweke's test statistic per test function: ``sc`` (chains, iterations, k) successive-
    conditional draws, ``mc`` (draws, k) independent marginal-conditional (prior) draws.  Returns
    ``(z (k,), sc mean (k,), mc mean (k,))`` with ``z = (mean sc - mean mc) / sqrt(se_sc**2 +
    se_mc**2)``, ``se_sc`` by :func:`batch_means_se`.  A test function constant in both (e.g. a
    threshold never used) gives z = 0."""
    sc = np.asarray(sc, np.float64)
    mc = np.asarray(mc, np.float64)
    se = np.sqrt(batch_means_se(sc, n_batches) ** 2 + mc.var(0, ddof=1) / len(mc))
    diff = sc.mean((0, 1)) - mc.mean(0)
    z = np.where(se > 0, diff / np.where(se > 0, se, 1.0), np.where(np.abs(diff) > 0, np.inf, 0.0))
    return z, sc.mean((0, 1)), mc.mean(0)


def z_bound(n_tests: int, family_alpha: float = 1e-3) -> float:
    """The |z| tolerance that keeps a correct sampler's false-alarm probability below
    ``family_alpha`` over ``n_tests`` two-sided z tests (Bonferroni)."""
    return float(sps.norm.isf(family_alpha / (2 * n_tests)))


#: The tolerance of every Geweke check here: |z| <= 4.5 (two-sided p = 6.8e-6 per statistic; the
#: suite's correct samplers have about 200 statistics, so a correct suite fails by chance with
#: probability below 1.4e-3 -- and the seeds are fixed, so it is deterministic).
Z_TOL = 4.5


def sbc_ranks(truth: np.ndarray, draws: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """SBC rank of every replication's true value among its posterior draws: ``truth`` (R, k),
    ``draws`` (R, L, k) -> (R, k) integers in ``0..L`` (ties broken uniformly at random, so a
    discrete quantity still has uniform ranks under a calibrated sampler)."""
    truth = np.asarray(truth)[:, None]
    below = (draws < truth).sum(1)
    ties = (draws == truth).sum(1)
    return below + np.floor(rng.uniform(size=below.shape) * (ties + 1)).astype(int)


def rank_uniformity(ranks: np.ndarray, n_draws: int, n_bins: int) -> tuple[np.ndarray, np.ndarray]:
    """Chi-square test of uniform ranks (R, k) in ``0..n_draws`` over ``n_bins`` equal bins
    (``n_draws + 1`` must be a multiple of ``n_bins``): ``(statistic (k,), p-value (k,))``."""
    width = (n_draws + 1) // n_bins
    assert width * n_bins == n_draws + 1, "n_draws + 1 must be a multiple of n_bins"
    counts = np.stack([np.bincount(r // width, minlength=n_bins) for r in np.asarray(ranks).T])  # (k, bins)
    expected = ranks.shape[0] / n_bins
    chi2 = ((counts - expected) ** 2 / expected).sum(1)
    return chi2, sps.chi2.sf(chi2, n_bins - 1)


def report(names, z, a, b) -> str:
    """One line per test function: ``name: z (sc mean vs mc mean)``."""
    return ", ".join(f"{n}: z={v:+.2f} ({x:.4g} vs {y:.4g})" for n, v, x, y in zip(names, z, a, b))


# ----------------------------------------------------------------------------------------------
# an exact simulator of the joint prior on a tiny problem (numpy; no sampler code)


def descend(is_split, feature, cut, bins) -> np.ndarray:
    """Leaf heap slot of every row for trees (D, N) and bins (n, F): (D, n) (plain numpy descent,
    independent of :func:`bdtree_jax.tree.leaf_index`)."""
    d_count, n = is_split.shape[0], bins.shape[0]
    node = np.zeros((d_count, n), np.int64)
    rows = np.arange(d_count)[:, None]
    for _ in range(int(np.log2(is_split.shape[1] + 1))):
        split = is_split[rows, node]
        f, c = feature[rows, node], cut[rows, node]
        right = np.take_along_axis(np.broadcast_to(bins, (d_count,) + bins.shape), f[..., None], 2)[..., 0] > c
        node = np.where(split, 2 * node + 1 + right, node)
    return node


def tree_depth_np(is_split) -> np.ndarray:
    """Depth of trees (D, N): the deepest active leaf's depth."""
    n = is_split.shape[1]
    depth_of = np.floor(np.log2(np.arange(n) + 1)).astype(int)
    return np.where(is_split, depth_of[None] + 1, 0).max(1)


@dataclasses.dataclass
class JointPrior:
    """The joint prior of (tree, sigma^2, leaf parameters, y) on inputs ``X`` (n, F).

    Trees: the enumerated prior (every tree of positive mass with its probability).  Regression
    (``likelihood`` a :class:`NormalMeanShift`): ``sigma^2 ~ IG(nu/2, nu lam/2)``, leaf means
    ``N(mu_bar, sigma^2/a)``, ``y_i ~ N(mu_leaf(i), sigma^2)``.  Classification
    (:class:`DirichletMultinomial`): leaf probabilities ``Dirichlet(c, ..., c)``, ``y_i`` categorical.
    """

    X: np.ndarray
    prior: TreePrior
    likelihood: DirichletMultinomial | NormalMeanShift
    tree_law: dict | None = None
    """``{tree string: probability}`` replacing the CGM98 prior (e.g. the exact edit prior of
    :func:`bdtree_jax.exact.enumerate_edit_prior`)."""

    def __post_init__(self):
        self.grid = make_split_grid(self.X)
        self.bins = self.grid.bin(self.X)
        if self.tree_law is not None:
            self.strings = list(self.tree_law)
            self.probs = np.array([self.tree_law[t] for t in self.strings])
            self.probs = self.probs / self.probs.sum()
        else:
            k = self.likelihood.n_stats
            trees = enumerate_trees(self.X, np.zeros((len(self.X), k)), self.prior, self.likelihood)
            log_p = np.array([lp for _, lp, _ in trees])
            self.strings = [t for t, _, _ in trees]
            self.probs = np.exp(log_p - logsumexp(log_p))
        parsed = [from_string(s, self.grid.thresholds, self.prior.max_depth) for s in self.strings]
        self.is_split, self.feature, self.cut = (np.stack([np.asarray(t[i]) for t in parsed]) for i in range(3))
        self.leaf_of_row = descend(self.is_split, self.feature, self.cut, self.bins)  # (T, n)

    @property
    def regression(self) -> bool:
        return isinstance(self.likelihood, NormalMeanShift)

    def tree_data(self) -> TreeData:
        """The kernels' data (the response a placeholder: the Geweke loop swaps ``point_stats``)."""
        y = np.zeros(len(self.X), int if not self.regression else float)
        return make_tree_data(self.bins, y, self.prior, self.likelihood, grid=self.grid)

    def draw(self, rng: np.random.Generator, size: int) -> dict:
        """``size`` independent joint draws: ``tree`` (is_split, feature, cut each (size, N)),
        ``sigma2`` (size,) (NaN for classification), ``f`` (size, n, P) the leaf parameters at
        the rows and ``y`` (size, n)."""
        idx = rng.choice(len(self.probs), size=size, p=self.probs)
        n_slots = self.is_split.shape[1]
        leaf = self.leaf_of_row[idx]  # (size, n)
        lik = self.likelihood
        if self.regression:
            sigma2 = (0.5 * lik.nu * lik.lam) / rng.gamma(0.5 * lik.nu, 1.0, size)
            mu = lik.mu_bar + np.sqrt(sigma2 / lik.a)[:, None] * rng.standard_normal((size, n_slots))
            f = np.take_along_axis(mu, leaf, 1)[..., None]
            y = f[..., 0] + np.sqrt(sigma2)[:, None] * rng.standard_normal(leaf.shape)
        else:
            sigma2 = np.full(size, np.nan)
            p = rng.dirichlet(np.full(lik.n_classes, lik.concentration), (size, n_slots))
            f = np.take_along_axis(p, leaf[..., None], 1)
            u = rng.uniform(size=leaf.shape)
            y = (u[..., None] > np.cumsum(f, -1)[..., :-1]).sum(-1)
        tree = (self.is_split[idx], self.feature[idx], self.cut[idx])
        return dict(tree=tree, sigma2=sigma2, f=f, y=y)

    def stat_names(self) -> tuple:
        base = ("leaves", "depth", "root thr x0", "root thr x1", "root thr^2", "left thr", "right thr")
        if self.regression:
            return base + ("log sigma2", "1/sigma2", "z_0", "z_0^2", "z_0 z_last", "mean z", "resid^2", "y_0 z_0")
        return base + ("p_0", "p_0^2", "p_0 p_last", "mean p", "y_0 p_0", "mean y p")

    def stats(self, tree, sigma2, f, y) -> np.ndarray:
        """The test functions (D, k) of draws: ``tree`` (is_split, feature, cut) each (D, N),
        ``sigma2`` (D,), ``f`` (D, n, P), ``y`` (D, n) the response the draw was conditioned on
        (jointly distributed with it).  Thresholds are in ``X``'s units (0 where the node does
        not split); regression's leaf values are standardised ``z_i = (f_i - mu_bar) / sigma``,
        classification's are class 1's probability at the rows.  The last two pair the draw with
        ``y`` (the standardised residuals' mean square, ``E = 1``; ``y_0 z_0``; the labels times
        the probabilities): they see a conditional posterior of the leaves or of sigma that is
        wrong but leaves their marginals alone."""
        is_split, feature, cut = (np.asarray(a) for a in tree)
        thr = self.grid.thresholds

        def threshold(node, only_feature=None):
            value = thr[feature[:, node], cut[:, node]]
            keep = is_split[:, node] if only_feature is None else is_split[:, node] & (feature[:, node] == only_feature)
            return np.where(keep, value, 0.0)

        out = [
            is_split.sum(1) + 1.0, tree_depth_np(is_split).astype(float), threshold(0, 0), threshold(0, 1),
            threshold(0) ** 2, threshold(1), threshold(2),
        ]
        f = np.asarray(f, np.float64)
        if self.regression:
            s2 = np.asarray(sigma2, np.float64)
            z = (f[..., 0] - self.likelihood.mu_bar) / np.sqrt(s2)[:, None]
            zy = (np.asarray(y, np.float64) - self.likelihood.mu_bar) / np.sqrt(s2)[:, None]
            out += [np.log(s2), 1.0 / s2, z[:, 0], z[:, 0] ** 2, z[:, 0] * z[:, -1], z.mean(1),
                    ((zy - z) ** 2).mean(1), zy[:, 0] * z[:, 0]]
        else:
            p = f[..., 1]
            y = np.asarray(y, np.float64)
            out += [p[:, 0], p[:, 0] ** 2, p[:, 0] * p[:, -1], p.mean(1), y[:, 0] * p[:, 0], (y * p).mean(1)]
        return np.stack(out, 1)


def point_stats(likelihood, y: jax.Array) -> jax.Array:
    """``likelihood.point_stats`` of a response ``y`` (n,) inside jitted code: (n, S) float32."""
    if isinstance(likelihood, DirichletMultinomial):
        return jax.nn.one_hot(y, likelihood.n_classes, dtype=jnp.float32)
    r = y.astype(jnp.float32) - likelihood.mu_bar
    return jnp.stack([jnp.ones_like(r), r, r * r], axis=1)


def simulate_y(key, likelihood, f: jax.Array, sigma2: jax.Array) -> jax.Array:
    """``y | leaf parameters at the rows f (n, P), sigma^2``: normal, or categorical."""
    if isinstance(likelihood, DirichletMultinomial):
        return jax.random.categorical(key, jnp.log(f)).astype(jnp.int32)
    return f[:, 0] + jnp.sqrt(sigma2) * jax.random.normal(key, f.shape[:1])


# ----------------------------------------------------------------------------------------------
# the successive-conditional simulator around a single-tree kernel


@dataclasses.dataclass(frozen=True)
class TreeKernel:
    """A single-tree kernel seen by :func:`single_tree_geweke`: ``init(carry, data) -> state``
    (the state at ``carry`` scored on ``data``), ``step(key, state, data) -> state`` (one
    transition that leaves ``p(T | y)`` invariant), ``tree(state) -> Tree``, and what the
    simulator carries between iterations: ``carry(state)`` (default the tree) started at
    ``start(tree, rng)`` (default the prior draw's tree; the edit prior's chain carries its edit
    path instead)."""

    init: Callable
    step: Callable
    tree: Callable = lambda state: state.tree
    carry: Callable | None = None
    start: Callable | None = None


class _Plant:
    """The variant index of the chain being traced (a traced int32 inside
    :func:`single_tree_geweke`, None elsewhere): read by :func:`planted`'s dispatchers."""

    variant = None


PLANT = _Plant()


def planted(monkeypatch, owner, name: str, wrong: Callable, variant: int = 1) -> None:
    """Plant an error: replace ``owner.name`` (a module-level function or a method, patched with
    ``monkeypatch``) by a dispatcher that runs ``wrong(original, *args)`` in the chains of
    ``variant`` and the original elsewhere (several errors, each its own variant, can be planted
    in one program).  One compiled program then runs the correct sampler (variant 0)
    and its planted twin side by side (the compilation is most of a test's time); the dispatcher
    is traced afresh because :func:`single_tree_geweke` builds a new ``jit`` each call."""
    original = getattr(owner, name)

    def dispatch(*args, **kw):
        good = original(*args, **kw)
        if PLANT.variant is None:
            return good
        bad = wrong(original, *args, **kw)
        return jax.tree.map(lambda b, g: jnp.where(PLANT.variant == variant, b, g), bad, good)

    monkeypatch.setattr(owner, name, dispatch)


def single_tree_geweke(kernel: TreeKernel, joint: JointPrior, *, chains: int, iterations: int, steps: int = 1,
                       seed: int = 0, prior_draws: int = 200_000, n_batches: int = 10, variants: int = 1):
    """Geweke's test of ``kernel``: ``chains`` successive-conditional chains of ``iterations``
    iterations per variant (variant 0 the sampler as it is, variant 1 its planted twin, see
    :func:`planted`), each started at an exact joint prior draw; one iteration is ``steps``
    kernel steps on the tree given ``y``, then ``sigma^2`` and the leaf parameters from their
    conditional posterior given the tree and ``y`` (the library's posterior draw), then a new
    ``y``.  Against ``prior_draws`` draws of :meth:`JointPrior.draw`.  Returns per variant
    ``(z, sc mean, mc mean)`` (:func:`geweke_z`) over :meth:`JointPrior.stat_names`: a list of
    ``variants`` triples."""
    rng = np.random.default_rng(seed)
    total = chains * variants
    start = joint.draw(rng, total)
    data0 = joint.tree_data()
    lik = data0.likelihood
    tree0 = Tree(*(jnp.asarray(a, jnp.int32 if a.dtype != bool else bool) for a in start["tree"]))
    if kernel.start is not None:
        tree0 = kernel.start(tree0, rng)
    y0 = jnp.asarray(start["y"], jnp.float32 if joint.regression else jnp.int32)
    variant = jnp.repeat(jnp.arange(variants, dtype=jnp.int32), chains)

    def prior_y(key, held):
        """A response from the prior given the tree of ``held`` (used when the kernel carries
        something other than the tree, e.g. an edit path: its tree is known only after replay)."""
        tree = kernel.tree(kernel.init(held, data0))
        leaf = node_stats(tree, data0)[0]
        k_sigma, k_leaf, k_y = jax.random.split(key, 3)
        n_slots = tree.is_split.shape[0]
        if joint.regression:
            sigma2 = 0.5 * lik.nu * lik.lam / jax.random.gamma(k_sigma, 0.5 * lik.nu)
            mu = lik.mu_bar + jnp.sqrt(sigma2 / lik.a) * jax.random.normal(k_leaf, (n_slots, 1))
        else:
            sigma2 = jnp.float32(jnp.nan)
            mu = jax.random.dirichlet(k_leaf, jnp.full((lik.n_classes,), lik.concentration), (n_slots,))
        return simulate_y(k_y, lik, mu[leaf], sigma2)

    def chain(key, tree, y, v):
        if kernel.start is not None:
            key, k_start = jax.random.split(key)
            y = prior_y(k_start, tree).astype(y.dtype)

        def body(carry, k):
            held, y = carry
            k_params, k_y, *step_keys = jax.random.split(k, 2 + steps)
            step_keys = jnp.stack(step_keys)
            data = data0._replace(point_stats=point_stats(lik, y))
            PLANT.variant = v
            try:
                state = kernel.init(held, data)
                state = jax.lax.fori_loop(0, steps, lambda i, s: kernel.step(step_keys[i], s, data), state)
                tree = kernel.tree(state)
                held = tree if kernel.carry is None else kernel.carry(state)
                leaf, stats = node_stats(tree, data)
                params, sigma2 = _sample_leaf_params(*_leaf_keys(k_params), tree, stats, lik)
            finally:
                PLANT.variant = None
            f = params[leaf]
            y_new = simulate_y(k_y, lik, f, sigma2)
            return (held, y_new), (tree, sigma2, f, y)  # the draw with the y it was conditioned on

        return jax.lax.scan(body, (tree, y), jax.random.split(key, iterations))[1]

    keys = jax.random.split(jax.random.key(seed), total)
    trees, sigma2, f, y = jax.jit(jax.vmap(chain))(keys, tree0, y0, variant)
    flat = lambda a: np.asarray(a).reshape((total * iterations,) + a.shape[2:])  # noqa: E731
    sc = joint.stats(tuple(flat(a) for a in trees), flat(sigma2), flat(f), flat(y))
    sc = sc.reshape(variants, chains, iterations, -1)
    mc_draws = joint.draw(np.random.default_rng(seed + 1), prior_draws)
    mc = joint.stats(mc_draws["tree"], mc_draws["sigma2"], mc_draws["f"], mc_draws["y"])
    return [geweke_z(sc[i], mc, n_batches) for i in range(variants)]


# ----------------------------------------------------------------------------------------------
# BART: the successive-conditional simulator of :func:`bdtree_jax.kernels.bart.geweke_step`
# started at exact prior draws (trees from the enumerated single-tree prior, not the library's
# ``prior_draw``)


class MixedTreeTable:
    """The enumerated prior of one tree on inputs with a categorical feature and missing cells
    (:func:`bdtree_jax.exact.categorical.enumerate_mixed_trees`): ``probs`` (T,), the trees'
    ``is_split, feature, cut`` (T, N), ``nan_left`` (T, N), ``levels_left`` (T, N, W), and
    ``leaf_of_row`` (T, n): each row's leaf, numbered by
    :func:`~bdtree_jax.exact.categorical.string_leaf_partition` (not a heap slot)."""

    def __init__(self, X, prior: TreePrior, categorical, thresholds, level_count):
        from bdtree_jax.exact.categorical import enumerate_mixed_trees, string_leaf_partition

        lik = NormalMeanShift(nu=3.0, lam=1.0, a=1.0, mu_bar=0.0)
        trees = enumerate_mixed_trees(X, lik.point_stats(np.zeros(len(X))), prior, lik, categorical=categorical)
        log_p = np.array([lp for _, lp, _ in trees])
        self.strings = [t for t, _, _ in trees]
        self.probs = np.exp(log_p - logsumexp(log_p))
        self.thresholds = np.asarray(thresholds)
        parsed = [from_string(t, thresholds, prior.max_depth, level_count) for t in self.strings]
        n_slots = parsed[0].is_split.shape[0]
        self.is_split, self.feature, self.cut = (np.stack([np.asarray(t[i]) for t in parsed]) for i in range(3))
        self.nan_left = np.stack([np.zeros(n_slots, bool) if t.nan_left is None else np.asarray(t.nan_left)
                                  for t in parsed])
        words = max(0 if t.levels_left is None else t.levels_left.shape[1] for t in parsed)
        self.levels_left = np.stack([np.zeros((n_slots, words), np.uint32) if t.levels_left is None
                                     else np.asarray(t.levels_left) for t in parsed])
        self.leaf_of_row = np.zeros((len(self.strings), len(X)), np.int64)
        for i, t in enumerate(self.strings):
            for g, rows in enumerate(sorted(string_leaf_partition(t, X), key=min)):
                self.leaf_of_row[i, sorted(rows)] = g


@dataclasses.dataclass
class BARTPrior:
    """The BART prior on ``X``: ``n_trees`` independent trees from the enumerated tree prior,
    leaf values ``N(0, tau2)``, ``sigma2 ~ IG(nu/2, nu lam/2)``, ``y ~ N(sum of trees, sigma2)``.
    ``table``: a :class:`MixedTreeTable` for inputs with categorical features or missing cells
    (default: the numeric prior of :class:`JointPrior`)."""

    X: np.ndarray
    prior: TreePrior
    n_trees: int
    tau2: float
    nu: float
    lam: float
    table: MixedTreeTable | None = None

    def __post_init__(self):
        self.mixed = self.table is not None
        if not self.mixed:  # the likelihood is unused by the enumeration of the prior
            self.table = JointPrior(self.X, self.prior, NormalMeanShift(nu=3.0, lam=1.0, a=1.0, mu_bar=0.0))
            self.table.thresholds = self.table.grid.thresholds

    def draw(self, rng: np.random.Generator, size: int) -> dict:
        """``size`` joint draws: ``tree`` (arrays (size, M, N ...): is_split, feature, cut, and for
        mixed inputs nan_left, levels_left), ``sigma2`` (size,), ``fit`` (size, n), ``y`` (size, n)."""
        t = self.table
        idx = rng.choice(len(t.probs), size=(size, self.n_trees), p=t.probs)
        tree = (t.is_split[idx], t.feature[idx], t.cut[idx])
        if self.mixed:
            tree = tree + (t.nan_left[idx], t.levels_left[idx])
        leaf = t.leaf_of_row[idx]  # (size, M, n)
        values = np.sqrt(self.tau2) * rng.standard_normal((size, self.n_trees, t.is_split.shape[1]))
        fit = np.take_along_axis(values, leaf, 2).sum(1)
        sigma2 = (0.5 * self.nu * self.lam) / rng.gamma(0.5 * self.nu, 1.0, size)
        y = fit + np.sqrt(sigma2)[:, None] * rng.standard_normal(fit.shape)
        return dict(tree=tree, sigma2=sigma2, fit=fit, y=y)

    def stat_names(self) -> tuple:
        trees = ("mean leaves", "mean depth", "root thr x0", "root thr x1", "left thr")
        if self.mixed:
            trees = ("mean leaves", "mean depth", "root thr x0", "root levels x1", "root NA left", "left thr x0")
        return trees + ("log sigma2", "1/sigma2", "f_0", "f_0^2", "f_0 f_last", "mean f", "resid^2", "y_0 f_0")

    def stats(self, tree, sigma2, fit, y) -> np.ndarray:
        """Test functions (D, k) of draws: trees (arrays (D, M, N ...) as :meth:`draw`),
        ``sigma2`` (D,), ``fit`` (D, n) the sum of trees at the rows, ``y`` (D, n) the response the
        draw was conditioned on; tree functions are averaged over the M trees (thresholds in
        ``X``'s units, 0 where the node does not split on that feature; mixed inputs: the root's
        categorical rule as its level mask, the root's missing-value bit); ``resid^2`` is the
        mean of ``(y - fit)**2 / sigma2`` (1 in expectation)."""
        is_split, feature, cut = (np.asarray(a) for a in tree[:3])
        d, m, n_slots = is_split.shape
        thr = np.where(np.isfinite(self.table.thresholds), self.table.thresholds, 0.0)

        def threshold(node, only_feature=None):
            value = thr[feature[..., node], cut[..., node]]
            keep = is_split[..., node]
            if only_feature is not None:
                keep = keep & (feature[..., node] == only_feature)
            return np.where(keep, value, 0.0).mean(1)

        out = [is_split.sum(2).mean(1) + 1.0, tree_depth_np(is_split.reshape(d * m, n_slots)).reshape(d, m).mean(1),
               threshold(0, 0)]
        if self.mixed:
            nan_left, levels = np.asarray(tree[3]), np.asarray(tree[4])
            root_cat = is_split[..., 0] & (feature[..., 0] == 1)
            out += [np.where(root_cat, levels[..., 0, 0].astype(float), 0.0).mean(1),
                    (is_split[..., 0] & nan_left[..., 0]).mean(1), threshold(1, 0)]
        else:
            out += [threshold(0, 1), threshold(1)]
        fit = np.asarray(fit, np.float64)
        y = np.asarray(y, np.float64)
        s2 = np.asarray(sigma2, np.float64)
        out += [np.log(s2), 1.0 / s2, fit[:, 0], fit[:, 0] ** 2, fit[:, 0] * fit[:, -1], fit.mean(1),
                ((y - fit) ** 2).mean(1) / s2, y[:, 0] * fit[:, 0]]
        return np.stack(out, 1)


def bart_geweke(config, bp: BARTPrior, *, chains: int, iterations: int, seed: int = 0, prior_draws: int = 200_000,
                n_batches: int = 10, variants: int = 1, data=None):
    """Geweke's test of one BART configuration (``config``: a ``BARTConfig`` with ``n_trees ==
    bp.n_trees``): per variant (see :func:`planted`) ``chains`` chains of ``iterations``
    :func:`~bdtree_jax.kernels.bart.geweke_step` iterations started at exact prior draws (trees
    from the enumerated prior, leaf values, sigma^2, then ``y``), against ``prior_draws`` draws
    of :meth:`BARTPrior.draw`.  ``data``: the ``BARTData`` (default: the numeric inputs
    ``bp.X``).  Returns a list of ``(z, sc mean, mc mean)``, one per variant."""
    from bdtree_jax.kernels import bart, smc
    from bdtree_jax.likelihoods import BARTLeafNormal
    from bdtree_jax.tree import leaf_nodes, make_tree

    f32 = lambda v: jnp.asarray(v, jnp.float32)  # noqa: E731
    if data is None:
        t = bp.table
        td = make_tree_data(t.bins, np.zeros(len(bp.X)), bp.prior, BARTLeafNormal(np.float32(1.0), np.float32(bp.tau2)),
                            grid=t.grid)
        data = bart.BARTData(td, jnp.zeros(len(bp.X), jnp.float32), f32(bp.nu), f32(bp.lam), f32(1.0), f32(1.0))
    td = data.tree_data
    total = chains * variants
    rng = np.random.default_rng(seed)
    start = bp.draw(rng, total)  # trees and sigma2; the leaf values and y are drawn below
    tree0 = tuple(jnp.asarray(a if a.dtype != np.int64 else a.astype(np.int32)) for a in start["tree"])
    normals = f32(rng.standard_normal((total,) + start["tree"][0].shape[1:]))

    def initial(key, tree, normal, sigma2):
        trees = jax.vmap(lambda tr: smc.init_state(td, config.cgm, make_tree(*tr)))(tree)
        trees = bart._narrow_ids(trees)
        values = jnp.where(jax.vmap(leaf_nodes)(trees.tree), jnp.sqrt(bp.tau2) * normal, 0.0).astype(jnp.float32)
        state = bart.BARTState(trees, values, jnp.zeros(td.bins.shape[0], jnp.float32), sigma2, jnp.int32(0),
                               bart._can_split(trees, data))
        state = state._replace(fit=bart._fit_from_trees(state))
        return state, data._replace(y=bart.simulate_y(key, state).astype(jnp.float32))

    variant = jnp.repeat(jnp.arange(variants, dtype=jnp.int32), chains)

    def chain(key, tree, normal, sigma2, v):
        k_start, k_chain = jax.random.split(key)
        state, d = initial(k_start, tree, normal, sigma2)

        def body(carry, k):
            PLANT.variant = v
            try:
                state, d, _ = bart.geweke_step(k, *carry, config)
            finally:
                PLANT.variant = None
            return (state, d), (state.trees.tree, state.sigma2, state.fit, d.y)

        return jax.lax.scan(body, (state, d), jax.random.split(k_chain, iterations))[1]

    keys = jax.random.split(jax.random.key(seed), total)
    trees, sigma2, fit, y = jax.jit(jax.vmap(chain))(keys, tree0, normals, f32(start["sigma2"]), variant)
    flat = lambda a: np.asarray(a).reshape((total * iterations,) + a.shape[2:])  # noqa: E731
    fields = tuple(trees)[:3] + ((trees.nan_left, trees.levels_left) if bp.mixed else ())
    sc = bp.stats(tuple(flat(a) for a in fields), flat(sigma2), flat(fit), flat(y))
    sc = sc.reshape(variants, chains, iterations, -1)
    mc_draws = bp.draw(np.random.default_rng(seed + 1), prior_draws)
    mc = bp.stats(mc_draws["tree"], mc_draws["sigma2"], mc_draws["fit"], mc_draws["y"])
    return [geweke_z(sc[i], mc, n_batches) for i in range(variants)]


# ----------------------------------------------------------------------------------------------
# SMC: the unbiasedness of the evidence estimate


def log_marginal(joint: JointPrior, y: np.ndarray) -> np.ndarray:
    """``log p(y)`` (R,) of responses ``y`` (R, n) under ``joint``, exactly: the sum over the
    enumerated trees of ``p(T) p(y | T)`` (:func:`log_lik_table`)."""
    return logsumexp(np.log(joint.probs) + log_lik_table(joint, y), axis=1)


def log_lik_table(joint: JointPrior, y: np.ndarray) -> np.ndarray:
    """``log p(y | T)`` (R, T) of responses ``y`` (R, n) for every enumerated tree, the
    integrated likelihood written out here in numpy (CGM98 eq. 14 for regression, the
    Dirichlet-multinomial for classification) rather than taken from the library."""
    from scipy.special import gammaln

    lik = joint.likelihood
    n_slots = joint.is_split.shape[1]
    onehot = (joint.leaf_of_row[:, :, None] == np.arange(n_slots)).astype(float)  # (T, n, N)
    counts = onehot.sum(1)  # (T, N)
    if joint.regression:
        r = np.asarray(y, float) - lik.mu_bar
        s1 = np.einsum("tnk,rn->rtk", onehot, r)
        s2 = np.einsum("tnk,rn->rtk", onehot, r * r)
        a, nu, lam = lik.a, lik.nu, lik.lam
        n = y.shape[1]
        q = np.where(counts > 0, s2 - s1 * s1 / (counts + a), 0.0).sum(-1)  # (R, T)
        det = np.where(counts > 0, 0.5 * (np.log(a) - np.log(counts + a)), 0.0).sum(-1)  # (T,)
        log_lik = (-0.5 * n * np.log(np.pi) + 0.5 * nu * np.log(nu * lam) + gammaln(0.5 * (n + nu))
                   - gammaln(0.5 * nu) + det - 0.5 * (n + nu) * np.log(q + nu * lam))
    else:
        k, c = lik.n_classes, lik.concentration
        cls = np.eye(k)[np.asarray(y)]  # (R, n, K)
        nk = np.einsum("tnm,rnk->rtmk", onehot, cls)  # (R, T, N, K)
        leaf = (gammaln(k * c) - k * gammaln(c) + gammaln(nk + c).sum(-1) - gammaln(nk.sum(-1) + k * c))
        log_lik = np.where(counts > 0, leaf, 0.0).sum(-1)
    return log_lik


def smc_evidence_check(config, joint: JointPrior, *, replicates: int, seed: int = 0, prior_draws: int = 200_000,
                       variants: int = 1):
    """The exact identity behind SMC's weights: for ``y`` from the prior predictive, the evidence
    estimate ``Z^`` and the weighted particles satisfy ``E[Z^/p(y)] = 1`` and ``E[(Z^/p(y))
    g(theta~)] = E_prior[g]`` with ``theta~`` one particle drawn by weight (then sigma^2 and the
    leaf parameters by the library's posterior draw), for any number of particles.  Per variant
    (:func:`planted`) ``replicates`` independent runs, ``(z, mean, prior mean)`` over ``("Z^/p(y)",)
    + stat_names``."""
    from bdtree_jax.kernels import smc

    rng = np.random.default_rng(seed)
    total = replicates * variants
    y = joint.draw(rng, total)["y"]
    log_z = log_marginal(joint, y)
    data0 = joint.tree_data()
    lik = data0.likelihood
    variant = jnp.repeat(jnp.arange(variants, dtype=jnp.int32), replicates)

    def one(key, y, v):
        k_run, k_pick, k_params = jax.random.split(key, 3)
        data = data0._replace(point_stats=point_stats(lik, y))
        PLANT.variant = v
        try:
            out = smc.run(k_run, data, config)
        finally:
            PLANT.variant = None
        j = jax.random.categorical(k_pick, out.log_weight)
        tree = Tree(*(a[j] for a in out.trees))
        leaf, stats = node_stats(tree, data)
        params, sigma2 = _sample_leaf_params(*_leaf_keys(k_params), tree, stats, lik)
        return out.log_evidence, tree, sigma2, params[leaf], y

    keys = jax.random.split(jax.random.key(seed), total)
    yj = jnp.asarray(y, jnp.float32 if joint.regression else jnp.int32)
    log_ev, trees, sigma2, f, y_used = jax.jit(jax.vmap(one))(keys, yj, variant)
    rho = np.exp(np.asarray(log_ev, np.float64) - log_z)
    g = joint.stats(tuple(np.asarray(a) for a in trees), np.asarray(sigma2), np.asarray(f), np.asarray(y_used))
    sc = np.concatenate([rho[:, None], rho[:, None] * g], 1).reshape(variants, replicates, 1, -1)
    mc_draws = joint.draw(np.random.default_rng(seed + 1), prior_draws)
    mc = joint.stats(mc_draws["tree"], mc_draws["sigma2"], mc_draws["f"], mc_draws["y"])
    mc = np.concatenate([np.ones((len(mc), 1)), mc], 1)  # Z^/p(y) against the constant 1
    return [geweke_z(sc[i], mc, n_batches=1) for i in range(variants)]


# ----------------------------------------------------------------------------------------------
# tempering: every rung started at an exact draw of its tempered posterior, y fixed


def tempered_check(algorithm, betas: tuple, config, joint: JointPrior, *, replicates: int, iterations: int,
                   seed: int = 0, prior_draws: int = 200_000, variants: int = 1):
    """The tempered chain (``algorithm``: :func:`~bdtree_jax.kernels.tempering.tempered` of a kernel
    on :class:`~bdtree_jax.kernels.cgm.CGMState` with inverse temperatures ``betas``) started at
    stationarity: ``(T_1, y)`` an exact joint prior draw and every hotter rung's tree an exact draw
    of ``p(T) p(y | T)**beta`` (enumeration, :func:`log_lik_table`).  The product of the rungs'
    tempered posteriors is invariant, so after ``iterations`` steps with ``y`` fixed the cold
    rung's tree, with sigma^2 and the leaves then drawn by the posterior draw, is again a draw of
    ``p(T, sigma, mu | y)``: paired with ``y``, of the joint prior.  Swaps that are not exact move
    hotter trees into the cold rung.  ``replicates`` independent runs per variant (iid standard
    errors); returns a list of ``(z, mean, prior mean)``."""
    from bdtree_jax.kernels import cgm

    rng = np.random.default_rng(seed)
    total = replicates * variants
    start = joint.draw(rng, total)
    table = log_lik_table(joint, start["y"])  # (total, T)
    rungs = [start["tree"]]
    for beta in betas[1:]:
        logits = np.log(joint.probs) + beta * table
        p = np.exp(logits - logsumexp(logits, axis=1, keepdims=True))
        idx = (rng.uniform(size=(total, 1)) > np.cumsum(p, 1)).sum(1).clip(0, len(joint.probs) - 1)
        rungs.append((joint.is_split[idx], joint.feature[idx], joint.cut[idx]))
    trees = Tree(*(jnp.asarray(np.stack([r[k] for r in rungs], 1)) for k in range(3)))  # (total, R, N)
    data0 = joint.tree_data()
    lik = data0.likelihood
    beta_arr = jnp.asarray(betas, jnp.float32)
    variant = jnp.repeat(jnp.arange(variants, dtype=jnp.int32), replicates)

    def one(key, tree, y, v):
        k_run, k_params = jax.random.split(key)
        data = data0._replace(point_stats=point_stats(lik, y))
        states = jax.vmap(lambda t, b: cgm.init(None, data, config, tree=Tree(*t), beta=b))(tuple(tree), beta_arr)

        def body(states, k):
            PLANT.variant = v
            try:
                states = algorithm.step(algorithm.draw(k), states, data)[0]
            finally:
                PLANT.variant = None
            return states, None

        states = jax.lax.scan(body, states, jax.random.split(k_run, iterations))[0]
        cold = jax.tree.map(lambda a: a[jnp.argmax(states.beta == 1.0)], states.tree)
        leaf, stats = node_stats(cold, data)
        params, sigma2 = _sample_leaf_params(*_leaf_keys(k_params), cold, stats, lik)
        return cold, sigma2, params[leaf]

    keys = jax.random.split(jax.random.key(seed), total)
    yj = jnp.asarray(start["y"], jnp.float32 if joint.regression else jnp.int32)
    cold, sigma2, f = jax.jit(jax.vmap(one))(keys, trees, yj, variant)
    g = joint.stats(tuple(np.asarray(a) for a in cold), np.asarray(sigma2), np.asarray(f), start["y"])
    mc_draws = joint.draw(np.random.default_rng(seed + 1), prior_draws)
    mc = joint.stats(mc_draws["tree"], mc_draws["sigma2"], mc_draws["f"], mc_draws["y"])
    return [geweke_z(g.reshape(variants, replicates, 1, -1)[i], mc, n_batches=1) for i in range(variants)]
